"""PlaywrightPortal against the loopback TestPortal, in Debian's headless Chromium: the first login asks
for a code, the code resumes the run to its export, a saved context is reused, and each way a run can
fail ends at the step it failed in, with a screenshot and no secret in its words."""
from __future__ import annotations

import csv
import io
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import date, timedelta

import pytest

from chalicelib.adapters.browser_portal import PlaywrightPortal, _Attempt
from chalicelib.domain.agents.browser import (
    CodeRequested,
    Credentials,
    Exported,
    PortalFailed,
    PortalJob,
    check_settings,
)
from tests.support.chromium import CHROMIUM, needs_chromium
from tests.support.portal import DEFAULT_ROWS, PORTAL_SETTINGS, TestPortal

pytestmark = [
    pytest.mark.xdist_group("browser"),
    needs_chromium,
]

USERNAME, PASSWORD, CODE = "ops@example.com", "s3cret-Passw0rd", "424242"
TODAY = date(2024, 5, 15)
SETTINGS = check_settings(PORTAL_SETTINGS)


@pytest.fixture
def portal():
    with TestPortal(username=USERNAME, password=PASSWORD, code=CODE) as portal:
        yield portal


class InLaunchedChromium(PlaywrightPortal):
    """The adapter's attempts in one Chromium the module launched: each run still gets a context of its own
    (no cookie or storage carried over but the storage state the job hands it), only the launch is shared.
    Launching (`PlaywrightPortal.run`'s part) is held by the first test and the one whose Chromium is missing."""

    def __init__(self, chromium, step_timeout_seconds: float, download_timeout_seconds: float) -> None:
        super().__init__(CHROMIUM, step_timeout_seconds, download_timeout_seconds)
        self.chromium = chromium

    def run(self, job: PortalJob):
        contexts = len(self.chromium.contexts)
        outcome = _Attempt(job, self.step_timeout_seconds, self.download_timeout_seconds).drive(self.chromium)
        for context in self.chromium.contexts[contexts:]:  # as the adapter's browser.close() would
            context.close()
        return outcome


def launching_its_own(portal: PlaywrightPortal, job: PortalJob):
    """`PlaywrightPortal.run` whole, launch included, in a thread of its own: Playwright's synchronous API
    starts once a thread, and this one's is the module's Chromium."""
    with ThreadPoolExecutor(max_workers=1) as thread:
        return thread.submit(portal.run, job).result()


@pytest.fixture
def browser(chromium):
    """Short timeouts: a run that must fail waits them out."""
    return InLaunchedChromium(chromium, step_timeout_seconds=3, download_timeout_seconds=3)


@pytest.fixture
def patient_browser(chromium):
    """For the runs that must succeed: a busy test machine does not make them fail (they never wait it out)."""
    return InLaunchedChromium(chromium, step_timeout_seconds=20, download_timeout_seconds=20)


def job(portal, password=PASSWORD, **fields):
    return PortalJob(portal_url=portal.url, settings=SETTINGS, credentials=Credentials(USERNAME, password),
                     today=TODAY, **fields)


def logged_in_context(browser, portal):
    """The storage state of a run that got through the code: a trusted device, a live session."""
    asked = browser.run(job(portal))
    assert isinstance(asked, CodeRequested), asked
    exported = browser.run(job(portal, storage_state=asked.storage_state, code=CODE))
    assert isinstance(exported, Exported), exported
    return exported.storage_state


def assert_no_secret_in(outcome, *secrets):
    words = [getattr(outcome, "message", "")] + [step.detail for step in outcome.steps]
    for secret in secrets:
        assert not any(secret in text for text in words), (secret, words)


def test_a_first_login_from_a_new_context_asks_for_a_code(portal):
    outcome = launching_its_own(PlaywrightPortal(CHROMIUM, step_timeout_seconds=20, download_timeout_seconds=20),
                                job(portal))

    assert isinstance(outcome, CodeRequested), outcome
    assert [s.name for s in outcome.steps] == ["open_portal", "log_in", "request_code"]
    assert portal.logins == 1 and portal.codes_sent == 1 and portal.downloads == 0
    assert outcome.storage_state["cookies"]


def test_the_right_code_resumes_the_run_and_exports_the_csv_with_the_rendered_date(patient_browser, portal, capsys):
    asked = patient_browser.run(job(portal))
    assert isinstance(asked, CodeRequested), asked

    started = time.monotonic()
    outcome = patient_browser.run(job(portal, storage_state=asked.storage_state, code=CODE))
    elapsed = time.monotonic() - started

    assert isinstance(outcome, Exported), outcome
    yesterday = (TODAY - timedelta(days=1)).isoformat()
    assert portal.last_export_query == {"from": yesterday}
    assert outcome.filename == f"transactions-{yesterday}.csv"
    assert list(csv.DictReader(io.StringIO(outcome.content.decode()))) == list(DEFAULT_ROWS)
    assert [s.name for s in outcome.steps] == ["open_portal", "enter_code", "export_step", "export_step", "download"]
    assert portal.code_attempts == 1 and portal.downloads == 1
    assert_no_secret_in(outcome, CODE, PASSWORD, USERNAME)
    with capsys.disabled():
        print(f"\n  one export run, from the code to the file: {elapsed:.2f} s")


def test_a_saved_context_is_reused_on_the_next_run_without_a_login_or_a_code(patient_browser, portal, capsys):
    saved = logged_in_context(patient_browser, portal)
    logins, codes = portal.logins, portal.codes_sent

    started = time.monotonic()
    outcome = patient_browser.run(job(portal, storage_state=saved))
    elapsed = time.monotonic() - started

    assert isinstance(outcome, Exported), outcome
    assert (portal.logins, portal.codes_sent) == (logins, codes)
    assert [s.name for s in outcome.steps] == ["open_portal", "reuse_session", "export_step", "export_step", "download"]
    with capsys.disabled():
        print(f"\n  one export run from a saved session: {elapsed:.2f} s")


def test_after_the_sessions_expire_the_next_run_logs_in_again_but_the_trusted_device_asks_no_code(patient_browser, portal):
    saved = logged_in_context(patient_browser, portal)
    portal.expire_sessions()

    outcome = patient_browser.run(job(portal, storage_state=saved))

    assert isinstance(outcome, Exported), outcome
    assert [s.name for s in outcome.steps][:2] == ["open_portal", "log_in"]
    assert portal.logins == 2 and portal.codes_sent == 1


def test_a_wrong_password_fails_at_log_in_with_a_screenshot_and_no_credential_in_its_words(browser, portal):
    wrong = "not-the-Passw0rd"

    outcome = browser.run(job(portal, password=wrong))

    assert isinstance(outcome, PortalFailed), outcome
    assert outcome.step == "log_in" and not outcome.code_rejected
    assert "login form" in outcome.message and "set-credentials" in outcome.message
    assert outcome.screenshot is not None and outcome.screenshot.startswith(b"\x89PNG")
    assert outcome.steps[-1].failed and outcome.steps[-1].name == "log_in"
    assert_no_secret_in(outcome, wrong, USERNAME)
    assert portal.logins == 0


def test_a_wrong_code_fails_at_enter_code_as_rejected(browser, patient_browser, portal):
    asked = patient_browser.run(job(portal))
    assert isinstance(asked, CodeRequested), asked

    outcome = browser.run(job(portal, storage_state=asked.storage_state, code="000000"))

    assert isinstance(outcome, PortalFailed), outcome
    assert outcome.step == "enter_code" and outcome.code_rejected
    assert outcome.message == "the portal did not accept the verification code"
    assert_no_secret_in(outcome, "000000", PASSWORD, USERNAME)
    assert portal.code_attempts == 1 and portal.downloads == 0


def test_a_code_for_a_login_that_expired_fails_at_enter_code_saying_so(browser, patient_browser, portal):
    asked = patient_browser.run(job(portal))
    assert isinstance(asked, CodeRequested), asked
    portal.expire_sessions()

    outcome = browser.run(job(portal, storage_state=asked.storage_state, code=CODE))

    assert isinstance(outcome, PortalFailed), outcome
    assert outcome.step == "enter_code" and not outcome.code_rejected
    assert "expired" in outcome.message
    assert portal.code_attempts == 0


def test_an_export_link_that_no_longer_matches_fails_naming_its_selector(browser, patient_browser, portal):
    saved = logged_in_context(patient_browser, portal)
    portal.export_link_id = "download-csv"

    outcome = browser.run(job(portal, storage_state=saved))

    assert isinstance(outcome, PortalFailed), outcome
    assert outcome.step == "download"
    assert "#export-csv" in outcome.message
    assert outcome.screenshot is not None and outcome.screenshot.startswith(b"\x89PNG")


def test_an_export_step_whose_selector_no_longer_matches_fails_at_that_step(browser, patient_browser, portal):
    saved = logged_in_context(patient_browser, portal)
    settings = replace(SETTINGS, export_steps=(*SETTINGS.export_steps, replace(SETTINGS.export_steps[1],
                                                                               selector="#run-report-v2")))

    outcome = browser.run(replace(job(portal, storage_state=saved), settings=settings))

    assert isinstance(outcome, PortalFailed), outcome
    assert outcome.step == "export_step"
    assert outcome.message.startswith("step 3 (click #run-report-v2): ")


def test_an_export_link_that_never_downloads_fails_at_download(browser, patient_browser, portal):
    saved = logged_in_context(patient_browser, portal)
    portal.export_downloads = False

    outcome = browser.run(job(portal, storage_state=saved))

    assert isinstance(outcome, PortalFailed), outcome
    assert outcome.step == "download"
    assert outcome.message == "no download started within 3 s after clicking #export-csv"
    assert portal.last_export_query is not None and portal.downloads == 1


def test_a_portal_that_shows_none_of_the_expected_pages_fails_at_open_portal(browser, portal):
    settings = replace(SETTINGS, login=replace(SETTINGS.login, username_selector="#user-name"))

    outcome = browser.run(replace(job(portal), settings=settings))

    assert isinstance(outcome, PortalFailed), outcome
    assert outcome.step == "open_portal"
    assert "#user-name" in outcome.message and "#verification" in outcome.message and "#from-date" in outcome.message


def test_a_chromium_that_does_not_start_fails_at_open_portal_naming_the_executable(portal):
    missing = PlaywrightPortal("/nonexistent/chromium", step_timeout_seconds=3, download_timeout_seconds=3)

    outcome = launching_its_own(missing, job(portal))

    assert isinstance(outcome, PortalFailed), outcome
    assert outcome.step == "open_portal"
    assert "/nonexistent/chromium" in outcome.message and "apt-get install -y chromium" in outcome.message
    assert outcome.screenshot is None
