"""Browser agents: a fixed automation against a web portal, set up by the operator, whose export
is imported into a data stream.

`portal_export` is declarative: `settings` names the portal's selectors (log in, the
verification-code page, the export's steps and its download) and how the downloaded file is
imported. Settings are checked here when the agent is made (every error at once, each naming its
field); a date placeholder in a step's value (`{yesterday:%m/%d/%Y}`) is evaluated on the day the
run starts, in the agent's timezone.

The portal itself is a port (`Portal`): one call drives one attempt of a run, from a saved browser
context (cookies, storage) if there is one, and ends in one of three outcomes: the file was
exported, the portal asked for a verification code (the run pauses, the half-done context is kept
and the next attempt enters the code), or a step failed (with a screenshot of the page).
"""
from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol
from urllib.parse import urlsplit

from chalicelib.domain.data_streams import KEY_PATTERN
from chalicelib.domain.errors import FieldError, ValidationFailed

MAX_SELECTOR = 500
MAX_VALUE = 500
MAX_STEPS = 30
MAX_URL = 2000
MAX_CODE = 64
# How long a paused run waits for its verification code before it fails.
VERIFICATION_WAIT = timedelta(minutes=30)
IMPORT_FORMATS = ("csv", "nacha")  # what the file importer reads (services/ingestion/files.py)
DATE_FORMATS = ("YYYY-MM-DD", "MM/DD/YYYY", "DD/MM/YYYY")
ON_CONFLICT = ("skip", "error")
STEP_ACTIONS = ("click", "fill", "select", "wait_for")  # fill and select take a `value`


class Automation(StrEnum):
    PORTAL_EXPORT = "portal_export"


class VerificationReason(StrEnum):
    CODE_REQUESTED = "code_requested"


# Placeholders -----------------------------------------------------------------------------------

def _first_of_last_month(today: date) -> date:
    return (today.replace(day=1) - timedelta(days=1)).replace(day=1)


PLACEHOLDER_DAYS: dict[str, Callable[[date], date]] = {
    "today": lambda today: today,
    "yesterday": lambda today: today - timedelta(days=1),
    "first_of_month": lambda today: today.replace(day=1),
    "first_of_last_month": _first_of_last_month,
    "last_of_last_month": lambda today: today.replace(day=1) - timedelta(days=1),
}
DEFAULT_DATE_FORMAT = "%Y-%m-%d"
_STRFTIME_DIRECTIVE = re.compile(r"%(.)")
_SAFE_DIRECTIVES = set("aAwdbBmyYjUWxX%")


class BadPlaceholder(ValueError):
    pass


def render(value: str, today: date) -> str:
    """A step's value with its placeholders evaluated: `{yesterday}` or `{yesterday:%m/%d/%Y}`
    (names: PLACEHOLDER_DAYS; formats: strftime's date directives); `{{` and `}}` are braces."""
    out = []
    for literal, name, spec, conversion in string.Formatter().parse(value):
        out.append(literal)
        if name is None:
            continue
        if conversion is not None or name not in PLACEHOLDER_DAYS:
            raise BadPlaceholder(f"unknown placeholder {{{name}}}: use one of "
                                 + ", ".join("{" + n + "}" for n in PLACEHOLDER_DAYS))
        fmt = spec or DEFAULT_DATE_FORMAT
        for directive in _STRFTIME_DIRECTIVE.findall(fmt):
            if directive not in _SAFE_DIRECTIVES:
                raise BadPlaceholder(f"format {fmt!r} of {{{name}}} uses %{directive}, not a date directive")
        out.append(PLACEHOLDER_DAYS[name](today).strftime(fmt))
    return "".join(out)


def check_template(value: str) -> str | None:
    """Why a step's value cannot be rendered, or None."""
    try:
        render(value, date(2024, 2, 29))
    except BadPlaceholder as bad:
        return str(bad)
    except ValueError as bad:  # unbalanced braces
        return f"is not a valid template ({bad}); write {{{{ and }}}} for literal braces"
    return None


# Settings ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Login:
    username_selector: str
    password_selector: str
    submit_selector: str


@dataclass(frozen=True)
class Verification:
    detect_selector: str  # visible when the portal asks for a code
    code_selector: str
    submit_selector: str


@dataclass(frozen=True)
class ExportStep:
    action: str  # one of STEP_ACTIONS
    selector: str
    value: str | None = None  # a template (render) for fill and select


@dataclass(frozen=True)
class ImportOptions:
    date_format: str = "YYYY-MM-DD"
    column_mapping: Mapping[str, str] = field(default_factory=dict)
    on_conflict: str = "skip"
    decimal_places: int | None = None


@dataclass(frozen=True)
class PortalExportSettings:
    login: Login
    export_steps: tuple[ExportStep, ...]
    download_selector: str
    data_stream_key: str
    format: str = "csv"
    verification: Verification | None = None  # None: the portal never asks for a code
    import_options: ImportOptions = field(default_factory=ImportOptions)


class _Checker:
    """Collects every error of a settings object, each named by its path (`settings.login....`)."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def fail(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))

    def object(self, raw: Any, path: str, known: tuple[str, ...], required: tuple[str, ...] = ()) -> Mapping[str, Any]:
        if not isinstance(raw, Mapping):
            self.fail(path, "must be an object")
            return {}
        for name in raw:
            if name not in known:
                self.fail(f"{path}.{name}", "is not a known setting (known: " + ", ".join(known) + ")")
        for name in required:
            if name not in raw:
                self.fail(f"{path}.{name}", "is required")
        return raw

    def text(self, raw: Mapping[str, Any], name: str, path: str, limit: int = MAX_SELECTOR) -> str:
        value = raw.get(name)
        if name not in raw:
            return ""  # reported as required by object()
        if not isinstance(value, str) or not value.strip() or len(value) > limit:
            self.fail(f"{path}.{name}", f"must be non-empty text of at most {limit} characters")
            return ""
        return value

    def choice(self, raw: Mapping[str, Any], name: str, path: str, allowed: tuple[str, ...], default: str) -> str:
        value = raw.get(name, default)
        if value not in allowed:
            self.fail(f"{path}.{name}", "must be one of " + ", ".join(allowed))
            return default
        return str(value)


def check_settings(raw: Any, path: str = "settings") -> PortalExportSettings:
    """The settings of a `portal_export` agent, or ValidationFailed naming every bad field."""
    c = _Checker()
    top = c.object(raw, path, ("login", "verification", "export", "data_stream_key", "import_options"),
                   ("login", "export", "data_stream_key"))
    login_names = ("username_selector", "password_selector", "submit_selector")
    login_raw = c.object(top["login"], f"{path}.login", login_names, login_names) if "login" in top else {}
    login = Login(*(c.text(login_raw, n, f"{path}.login") for n in login_names))
    verification = None
    if top.get("verification") is not None:
        names = ("detect_selector", "code_selector", "submit_selector")
        verification_raw = c.object(top["verification"], f"{path}.verification", names, names)
        verification = Verification(*(c.text(verification_raw, n, f"{path}.verification") for n in names))
    export = (c.object(top["export"], f"{path}.export", ("steps", "download_selector", "format"),
                       ("download_selector",)) if "export" in top else {})
    steps = _steps(c, export.get("steps", []), f"{path}.export.steps")
    download = c.text(export, "download_selector", f"{path}.export")
    file_format = c.choice(export, "format", f"{path}.export", IMPORT_FORMATS, "csv")
    stream_key = top.get("data_stream_key")
    if "data_stream_key" in top and not (isinstance(stream_key, str) and KEY_PATTERN.match(stream_key)):
        c.fail(f"{path}.data_stream_key", "must be a data stream's key")
    options = _import_options(c, top.get("import_options", {}), f"{path}.import_options")
    if c.errors:
        raise ValidationFailed(c.errors)
    return PortalExportSettings(login=login, export_steps=steps, download_selector=download,
                                data_stream_key=str(stream_key), format=file_format, verification=verification,
                                import_options=options)


def _steps(c: _Checker, raw: Any, path: str) -> tuple[ExportStep, ...]:
    if not isinstance(raw, list):
        c.fail(path, "must be a list of steps")
        return ()
    if len(raw) > MAX_STEPS:
        c.fail(path, f"may hold at most {MAX_STEPS} steps")
        return ()
    steps = []
    for i, item in enumerate(raw):
        here = f"{path}[{i}]"
        if not isinstance(item, Mapping):
            c.fail(here, "must be an object such as {\"click\": \"#export\"}")
            continue
        actions = [a for a in STEP_ACTIONS if a in item]
        extra = [k for k in item if k not in (*STEP_ACTIONS, "value")]
        if len(actions) != 1 or extra:
            c.fail(here, "must hold exactly one of " + ", ".join(STEP_ACTIONS) + " (and `value` for fill and select)")
            continue
        action = actions[0]
        selector = c.text(item, action, here)
        value = item.get("value")
        if action in ("fill", "select"):
            if not isinstance(value, str) or len(value) > MAX_VALUE:
                c.fail(f"{here}.value", f"is required for {action}: text of at most {MAX_VALUE} characters")
                continue
            if (problem := check_template(value)) is not None:
                c.fail(f"{here}.value", problem)
                continue
        elif "value" in item:
            c.fail(f"{here}.value", f"is only for fill and select, not {action}")
            continue
        steps.append(ExportStep(action, selector, value))
    return tuple(steps)


def _import_options(c: _Checker, raw: Any, path: str) -> ImportOptions:
    options = c.object(raw, path, ("date_format", "column_mapping", "on_conflict", "decimal_places"))
    mapping = options.get("column_mapping", {})
    if not (isinstance(mapping, Mapping) and all(isinstance(k, str) and isinstance(v, str) and k and v
                                                 for k, v in mapping.items())):
        c.fail(f"{path}.column_mapping", "must map source column names to field names (text to text)")
        mapping = {}
    places = options.get("decimal_places")
    if places is not None and (isinstance(places, bool) or not isinstance(places, int) or not 0 <= places <= 6):
        c.fail(f"{path}.decimal_places", "must be an integer from 0 to 6")
        places = None
    return ImportOptions(date_format=c.choice(options, "date_format", path, DATE_FORMATS, "YYYY-MM-DD"),
                         column_mapping=dict(mapping), on_conflict=c.choice(options, "on_conflict", path, ON_CONFLICT,
                                                                            "skip"),
                         decimal_places=places)


def check_portal_url(raw: Any) -> str:
    parts = urlsplit(raw) if isinstance(raw, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or len(raw) > MAX_URL:
        raise ValidationFailed.on("portal_url", "must be an http or https URL")
    return str(raw)


def check_automation(raw: Any) -> Automation:
    try:
        return Automation(raw)
    except ValueError:
        raise ValidationFailed.on("automation", "must be one of " + ", ".join(a.value for a in Automation)) from None


def check_code(raw: Any) -> str:
    code = raw.strip() if isinstance(raw, str) else ""
    if not code or len(code) > MAX_CODE or any(ch.isspace() for ch in code):
        raise ValidationFailed.on("code", f"must be the code the portal sent: 1 to {MAX_CODE} characters, no spaces")
    return code


# What an agent holds ----------------------------------------------------------------------------

@dataclass(frozen=True)
class BrowserSetup:
    """The operator's definition of a browser agent (`settings` kept as given, checked)."""
    automation: Automation
    portal_url: str
    settings: Mapping[str, Any]

    @property
    def export(self) -> PortalExportSettings:
        return check_settings(self.settings)


def browser_setup(automation: Any, portal_url: Any, settings: Any) -> BrowserSetup:
    """Every field checked (every error at once)."""
    errors: list[FieldError] = []
    checked: list[Any] = []
    for check, value in ((check_automation, automation), (check_portal_url, portal_url), (check_settings, settings)):
        try:
            checked.append(check(value))
        except ValidationFailed as failed:
            errors += failed.errors
    if errors:
        raise ValidationFailed(errors)
    return BrowserSetup(checked[0], checked[1], dict(settings))


@dataclass(frozen=True)
class BrowserState:
    """What runs and the operator's command line learn about a browser agent (stored apart from
    its definition, so that an edit of the agent never writes it back stale)."""
    has_credentials: bool = False
    has_browser_context: bool = False
    needs_verification: bool = False
    verification_reason: VerificationReason | None = None
    verification_required_at: datetime | None = None


# The portal port --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Credentials:
    username: str
    password: str

    def __repr__(self) -> str:  # never in a log line or a traceback's locals
        return "Credentials(<hidden>)"


@dataclass(frozen=True)
class PortalJob:
    """One attempt of a run: from `storage_state` (a saved browser context, or None for a new one),
    with the code to enter when the portal asked for one in the attempt before."""
    portal_url: str
    settings: PortalExportSettings
    credentials: Credentials
    today: date  # in the agent's timezone: what the placeholders are evaluated on
    storage_state: Mapping[str, Any] | None = field(default=None, repr=False)  # session cookies
    code: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class PortalStep:
    """What one step of the automation did, as the run shows it (never a credential or a code)."""
    name: str  # open_portal, log_in, request_code, enter_code, export_step, download
    detail: str
    failed: bool = False


@dataclass(frozen=True)
class Exported:
    filename: str
    content: bytes = field(repr=False)
    storage_state: Mapping[str, Any] = field(repr=False)  # session cookies: never in a log line
    steps: tuple[PortalStep, ...] = ()


@dataclass(frozen=True)
class CodeRequested:
    # The half-logged-in context the next attempt enters the code in (session cookies: never logged).
    storage_state: Mapping[str, Any] = field(repr=False)
    steps: tuple[PortalStep, ...] = ()


@dataclass(frozen=True)
class PortalFailed:
    step: str  # which step failed (a PortalStep name)
    message: str  # what went wrong there, for the operator
    steps: tuple[PortalStep, ...]
    screenshot: bytes | None = None  # PNG of the page when it failed
    code_rejected: bool = False


PortalOutcome = Exported | CodeRequested | PortalFailed


class Portal(Protocol):
    """Drives a real browser through one attempt (adapters/browser_portal.py)."""
    def run(self, job: PortalJob) -> PortalOutcome: ...
