"""A browser agent's portal_export settings and date placeholders: checked when the agent is made,
every bad field named by its path."""
from __future__ import annotations

from datetime import date

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chalicelib.domain.agents.browser import (
    BadPlaceholder,
    browser_setup,
    check_code,
    check_settings,
    render,
)
from chalicelib.domain.errors import ValidationFailed

VALID = {
    "login": {"username_selector": "#username", "password_selector": "#password", "submit_selector": "#sign-in"},
    "verification": {"detect_selector": "#verification", "code_selector": "#code", "submit_selector": "#verify"},
    "export": {"steps": [{"click": "#reports"}, {"fill": "#from-date", "value": "{yesterday:%m/%d/%Y}"}],
               "download_selector": "#export-csv", "format": "csv"},
    "data_stream_key": "bank",
    "import_options": {"date_format": "MM/DD/YYYY", "column_mapping": {"Amount": "amount"}, "on_conflict": "skip"},
}


def errors_of(raw) -> dict[str, str]:
    with pytest.raises(ValidationFailed) as failed:
        check_settings(raw)
    return {e.field: e.message for e in failed.value.errors}


def test_the_settings_of_the_issue_are_read_with_their_steps_and_import_options():
    settings = check_settings(VALID)
    assert settings.login.password_selector == "#password"
    assert settings.verification is not None and settings.verification.code_selector == "#code"
    assert [(s.action, s.selector, s.value) for s in settings.export_steps] == [
        ("click", "#reports", None), ("fill", "#from-date", "{yesterday:%m/%d/%Y}")]
    assert settings.download_selector == "#export-csv" and settings.data_stream_key == "bank"
    assert settings.import_options.date_format == "MM/DD/YYYY"
    assert dict(settings.import_options.column_mapping) == {"Amount": "amount"}


def test_a_portal_that_never_asks_for_a_code_needs_no_verification_section():
    assert check_settings({k: v for k, v in VALID.items() if k != "verification"}).verification is None


def test_every_bad_field_is_named_by_its_path_at_once():
    bad = {**VALID, "login": {"username_selector": "", "password_selector": "#p"},
           "export": {"steps": [{"click": "#a", "fill": "#b"}, {"fill": "#d"}, {"type": "#x"}],
                      "download_selector": "#e", "format": "xlsx"},
           "data_stream_key": "no spaces allowed", "import_options": {"on_conflict": "merge", "decimal_places": 9},
           "extra": 1}
    errors = errors_of(bad)
    assert set(errors) == {
        "settings.login.username_selector", "settings.login.submit_selector", "settings.export.steps[0]",
        "settings.export.steps[1].value", "settings.export.steps[2]", "settings.export.format",
        "settings.data_stream_key", "settings.import_options.on_conflict", "settings.import_options.decimal_places",
        "settings.extra"}
    assert "is required" in errors["settings.login.submit_selector"]


def test_missing_sections_and_a_non_object_are_refused():
    assert set(errors_of({})) == {"settings.login", "settings.export", "settings.data_stream_key"}
    assert set(errors_of([])) == {"settings"}


def test_an_unknown_placeholder_or_a_time_directive_is_refused_when_the_agent_is_made():
    for value, expected in (("{tomorrow}", "unknown placeholder {tomorrow}"), ("{today:%H:%M}", "%H"),
                            ("{today", "not a valid template")):
        steps = [{"fill": "#d", "value": value}]
        message = errors_of({**VALID, "export": {**VALID["export"], "steps": steps}})["settings.export.steps[0].value"]
        assert expected in message


def test_placeholders_are_evaluated_on_the_given_day():
    today = date(2026, 3, 1)
    assert render("{yesterday:%m/%d/%Y}", today) == "02/28/2026"
    assert render("{today}", today) == "2026-03-01"
    assert render("from {first_of_last_month:%d.%m.%Y} to {last_of_last_month:%d.%m.%Y}", today) == \
        "from 01.02.2026 to 28.02.2026"
    assert render("{first_of_month:%Y%m%d} {{literal}}", date(2026, 1, 15)) == "20260101 {literal}"
    with pytest.raises(BadPlaceholder):
        render("{now}", today)


@given(st.dates(min_value=date(1901, 1, 1)))
def test_yesterday_is_always_the_day_before(today):
    assert render("{yesterday:%Y-%m-%d}", today) == date.fromordinal(today.toordinal() - 1).isoformat()


def test_the_automation_and_portal_url_are_checked_with_the_settings():
    with pytest.raises(ValidationFailed) as failed:
        browser_setup("scrape_everything", "ftp://portal", {})
    fields = {e.field for e in failed.value.errors}
    assert {"automation", "portal_url", "settings.login"} <= fields
    assert browser_setup("portal_export", "https://portal.bank.test/login", VALID).portal_url.endswith("/login")


def test_a_verification_code_is_one_word_of_at_most_64_characters():
    assert check_code(" 424242 ") == "424242"
    for bad in ("", "12 34", "x" * 65, None, 424242):
        with pytest.raises(ValidationFailed):
            check_code(bad)
