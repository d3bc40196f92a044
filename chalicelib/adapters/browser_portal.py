"""The `Portal` port on a real headless Chromium (Playwright, synchronous API): one attempt of a
browser agent's run, from opening the portal to the downloaded file.

Playwright is imported inside `run`: the Lambdas that import this module without running a browser
do not ship it. No message or step detail ever holds the username, the password or the code.
"""
from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING, Any

from chalicelib.domain.agents.browser import (
    CodeRequested,
    Exported,
    PortalFailed,
    PortalJob,
    PortalOutcome,
    PortalStep,
    render,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Locator, Page

# The machine's network is closed: without the background-networking flags Chromium waits on it.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
HIDDEN = "***"


class _StepFailed(Exception):
    def __init__(self, message: str, code_rejected: bool = False) -> None:
        super().__init__(message)
        self.message, self.code_rejected = message, code_rejected


class PlaywrightPortal:
    def __init__(self, chromium_path: str, step_timeout_seconds: float, download_timeout_seconds: float) -> None:
        self.chromium_path = chromium_path
        self.step_timeout_seconds = step_timeout_seconds
        self.download_timeout_seconds = download_timeout_seconds

    def run(self, job: PortalJob) -> PortalOutcome:
        attempt = _Attempt(job, self.step_timeout_seconds, self.download_timeout_seconds)
        try:
            from playwright.sync_api import sync_playwright

            with sync_playwright() as playwright:
                try:
                    browser = playwright.chromium.launch(executable_path=self.chromium_path, headless=True,
                                                         args=CHROMIUM_ARGS)
                except Exception as error:
                    return attempt.failed(f"Chromium did not start from {self.chromium_path} "
                                          f"(`apt-get install -y chromium` installs it): {attempt.clean(error)}")
                try:
                    return attempt.drive(browser)
                finally:
                    browser.close()
        except Exception as error:  # Playwright itself (its driver) did not start or stop
            return attempt.failed(f"the browser automation failed: {attempt.clean(error)}")


class _Attempt:
    """One run of the automation; `step` names where it is, for the failure it may end in."""

    def __init__(self, job: PortalJob, step_timeout: float, download_timeout: float) -> None:
        self.job, self.settings = job, job.settings
        self.step_timeout, self.download_timeout = step_timeout, download_timeout
        self.secrets = sorted({s for s in (job.credentials.username, job.credentials.password, job.code) if s},
                              key=len, reverse=True)
        self.steps: list[PortalStep] = []
        self.step = "open_portal"
        self.page: Page | None = None
        first = self.settings.export_steps[0].selector if self.settings.export_steps else None
        self.export_marker = first or self.settings.download_selector

    def drive(self, browser: Browser) -> PortalOutcome:
        state: Any = dict(self.job.storage_state) if self.job.storage_state is not None else None
        try:
            context = browser.new_context(storage_state=state, accept_downloads=True)
            context.set_default_timeout(self.step_timeout * 1000)
            self.page = context.new_page()
            shown = self.open_portal()
            if self.job.code is not None:
                self.enter_code(shown, self.job.code)
            elif shown == "login":
                if self.log_in() == "verification":
                    return self.code_requested(context.storage_state())
            elif shown == "verification":  # the saved context stopped half-way through a login
                return self.code_requested(context.storage_state())
            else:
                self.done("reuse_session", "the saved session is still logged in: no log in needed")
            self.run_export_steps()
            filename, content = self.download()
            return Exported(filename, content, dict(context.storage_state()), tuple(self.steps))
        except _StepFailed as failure:
            return self.failed(failure.message, failure.code_rejected)
        except Exception as error:  # Playwright's errors included: their first line names the call
            return self.failed(f"{type(error).__name__}: {self.clean(error)}")

    # Steps --------------------------------------------------------------------------------------

    def open_portal(self) -> str:
        """Which page the portal shows: "login", "verification" or "export"."""
        self.step = "open_portal"
        self.page_now().goto(self.job.portal_url)
        awaited = self.pages(login=True, verification=True, export=True)
        shown = self.wait_for_one_of(awaited)
        if shown is None:
            raise _StepFailed(self.none_showed(awaited, f"opening {self.job.portal_url}"))
        self.done("open_portal", f"opened {self.job.portal_url}: the {shown} page shows")
        return shown

    def log_in(self) -> str:
        """"export" when logged in, "verification" when the portal asks for a code."""
        self.step = "log_in"
        login = self.settings.login
        self.locate(login.username_selector).fill(self.job.credentials.username)
        self.locate(login.password_selector).fill(self.job.credentials.password)
        self.locate(login.submit_selector).click()
        awaited = self.pages(verification=True, export=True)
        shown = self.wait_for_one_of(awaited)
        if shown is None and self.locate(login.username_selector).is_visible():
            raise _StepFailed("the portal still shows the login form after signing in: check the username and "
                              "password; set them again with `python -m chalicelib.cli agents set-credentials "
                              "<agent id>`")
        if shown is None:
            hint = "" if self.settings.verification else " (if it asks for a code, add a verification section)"
            raise _StepFailed(self.none_showed(awaited, "signing in") + hint)
        self.done("log_in", "signed in" + (": the portal asks for a verification code" if shown == "verification"
                                           else ""))
        return shown

    def code_requested(self, storage_state: Any) -> CodeRequested:
        self.done("request_code", "the portal asks for a verification code: the run waits for it")
        return CodeRequested(dict(storage_state), tuple(self.steps))

    def enter_code(self, shown: str, code: str) -> None:
        self.step = "enter_code"
        verification = self.settings.verification
        if shown == "export":  # logged in already (the portal let the session through): the code is not needed
            self.done("enter_code", "the portal is already logged in: the code was not needed")
            return
        if verification is None:
            raise _StepFailed("a code was given but the settings have no verification section to enter it in")
        if shown != "verification":
            raise _StepFailed(f"the portal shows the {shown} page, not the verification page: the pending login "
                              "has probably expired; run the agent again to get a new code")
        self.locate(verification.code_selector).fill(code)
        self.locate(verification.submit_selector).click()
        if self.wait_for_one_of(self.pages(export=True)) is None:
            if self.locate(verification.detect_selector).is_visible() or \
                    self.locate(self.settings.login.username_selector).is_visible():
                raise _StepFailed("the portal did not accept the verification code", code_rejected=True)
            raise _StepFailed(self.none_showed(self.pages(export=True), "entering the code"))
        self.done("enter_code", "the portal accepted the verification code")

    def run_export_steps(self) -> None:
        self.step = "export_step"
        from playwright.sync_api import Error as PlaywrightError

        for n, export_step in enumerate(self.settings.export_steps, start=1):
            what = f"step {n} ({export_step.action} {export_step.selector})"
            value = render(export_step.value or "", self.job.today)
            target = self.locate(export_step.selector)
            try:
                if export_step.action == "click":
                    target.click()
                elif export_step.action == "fill":
                    target.fill(value)
                elif export_step.action == "select":
                    target.select_option(value)
                else:
                    target.wait_for(state="visible")
            except PlaywrightError as error:
                raise _StepFailed(f"{what}: {self.explain(error)}") from None
            self.done("export_step", what + (f" with {value!r}" if export_step.action in ("fill", "select") else ""))

    def download(self) -> tuple[str, bytes]:
        self.step = "download"
        from playwright.sync_api import Error as PlaywrightError

        selector, clicked = self.settings.download_selector, False
        try:
            with self.page_now().expect_download(timeout=self.download_timeout * 1000) as started:
                self.locate(selector).click()
                clicked = True
            download = started.value
        except PlaywrightError as error:
            if not clicked:
                raise _StepFailed(f"could not click {selector}: {self.explain(error)}") from None
            raise _StepFailed(f"no download started within {self.download_timeout:g} s after clicking "
                              f"{selector}") from None
        if (failure := download.failure()) is not None:
            raise _StepFailed(f"the download of {download.suggested_filename} failed: {self.clean(failure)}")
        with open(download.path(), "rb") as file:
            content = file.read()
        self.done("download", f"downloaded {download.suggested_filename} ({len(content)} bytes)")
        return download.suggested_filename, content

    # Helpers ------------------------------------------------------------------------------------

    def pages(self, login: bool = False, verification: bool = False, export: bool = False) -> dict[str, str]:
        """The selectors that tell the portal's pages apart, by page, in the order they are trusted."""
        found = {"export": self.export_marker} if export else {}
        if verification and self.settings.verification is not None:
            found["verification"] = self.settings.verification.detect_selector
        if login:
            found["login"] = self.settings.login.username_selector
        return found

    def wait_for_one_of(self, awaited: dict[str, str]) -> str | None:
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        combined = reduce(lambda either, other: either.or_(other), (self.page_now().locator(s)
                                                                    for s in awaited.values()))
        try:
            combined.first.wait_for(state="visible")
        except PlaywrightTimeout:
            return None
        return next((page for page, selector in awaited.items() if self.locate(selector).is_visible()), None)

    def none_showed(self, awaited: dict[str, str], after: str) -> str:
        pages = " or ".join(f"the {page} page ({selector})" for page, selector in awaited.items())
        return f"after {after}, waited {self.step_timeout:g} s for {pages}: it did not show"

    def locate(self, selector: str) -> Locator:
        return self.page_now().locator(selector).first

    def page_now(self) -> Page:
        assert self.page is not None, "the page is opened before any step"
        return self.page

    def done(self, name: str, detail: str) -> None:
        self.steps.append(PortalStep(name, self.clean(detail)))

    def clean(self, error: object) -> str:
        """The first line of an error (Playwright's go on with call logs), with every secret hidden."""
        lines = str(error).strip().splitlines()
        text = lines[0] if lines else type(error).__name__
        for secret in self.secrets:
            text = text.replace(secret, HIDDEN)
        return text

    def explain(self, error: Exception) -> str:
        """An action's error; a timeout there means its selector matched nothing usable."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        if isinstance(error, PlaywrightTimeout):
            return f"nothing matching it was ready within {self.step_timeout:g} s ({self.clean(error)})"
        return self.clean(error)

    def failed(self, message: str, code_rejected: bool = False) -> PortalFailed:
        message = self.clean(message)
        self.steps.append(PortalStep(self.step, message, failed=True))
        return PortalFailed(self.step, message, tuple(self.steps), self.screenshot(), code_rejected)

    def screenshot(self) -> bytes | None:
        """The page, with the fields that may hold the login or the code painted over: the
        screenshot is an output file anyone with the environment's key can read."""
        if self.page is None:
            return None
        login, verification = self.settings.login, self.settings.verification
        typed = [login.username_selector, login.password_selector,
                 *([verification.code_selector] if verification else [])]
        try:
            return self.page.screenshot(full_page=True, mask=[self.locate(s) for s in typed])
        except Exception:  # the page is gone: the failure is still reported, without its picture
            return None
