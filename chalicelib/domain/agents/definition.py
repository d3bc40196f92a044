"""What an agent is told to do besides its schedule: its kind, whom it mails what, and what its
instructions mention. The cross-field rules live here; the API's models check the types, and the
services check that what a mention names exists in the environment."""
from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any

from chalicelib.domain.data_streams import KEY_PATTERN
from chalicelib.domain.errors import FieldError, ValidationFailed

MAX_RECIPIENTS = 50
MAX_PATTERN = 200
MAX_MENTIONS = 50
MAX_LABEL = 200
DEFAULT_FILE_PATTERN = "*"
# An address as mail servers take it: one @, no spaces, a dotted domain (the exchange decides the rest).
EMAIL = re.compile(r"^[^@\s]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}"
                   r"[A-Za-z0-9])?)+$")


class AgentKind(StrEnum):
    LLM = "llm"
    BROWSER = "browser"


def check_creatable_kind(kind: Any) -> AgentKind:
    """Only `llm` agents are created through the API: browser agents are set up by the operator."""
    if kind == AgentKind.BROWSER:
        raise ValidationFailed.on("kind", "browser agents are set up by the operator")
    if kind not in (None, AgentKind.LLM):
        raise ValidationFailed.on("kind", "must be llm")
    return AgentKind.LLM


@dataclass(frozen=True)
class Delivery:
    enabled: bool = False
    recipients: tuple[str, ...] = ()
    file_pattern: str = DEFAULT_FILE_PATTERN

    def delivers(self, filename: str) -> bool:
        """Whether an output file of that name is mailed (the pattern is a glob, any case)."""
        return self.enabled and fnmatchcase(filename.lower(), self.file_pattern.lower())


def check_delivery(enabled: bool, recipients: Sequence[str], file_pattern: str | None) -> Delivery:
    """Recipients are mail addresses, at least one when delivery is on; the pattern a glob."""
    errors: list[FieldError] = []
    for i, address in enumerate(recipients):
        if not (isinstance(address, str) and EMAIL.match(address)):
            errors.append(FieldError(f"delivery_recipients[{i}]", "is not an email address"))
    if len(recipients) > MAX_RECIPIENTS:
        errors.append(FieldError("delivery_recipients", f"may hold at most {MAX_RECIPIENTS} addresses"))
    if enabled and not recipients:
        errors.append(FieldError("delivery_recipients", "is required when delivery_enabled is true"))
    pattern = DEFAULT_FILE_PATTERN if file_pattern is None else file_pattern
    if not pattern.strip() or len(pattern) > MAX_PATTERN or "/" in pattern:
        errors.append(FieldError("delivery_file_pattern", f"must be a file name glob such as *.csv (at most "
                                 f"{MAX_PATTERN} characters, no /)"))
    if errors:
        raise ValidationFailed(errors)
    return Delivery(enabled, tuple(dict.fromkeys(a.strip() for a in recipients)), pattern)


class MentionType(StrEnum):
    RECONCILIATION = "reconciliation"
    DATA_STREAM = "data_stream"
    USER = "user"
    AGENT = "agent"


@dataclass(frozen=True)
class Mention:
    """A reconciliation by its integer id; a data stream by its id or key; an agent by its UUID; a
    user by their identity provider id."""
    type: MentionType
    id: int | str
    label: str = ""


def check_mentions(raw: Sequence[Mapping[str, Any]]) -> tuple[Mention, ...]:
    """Each mention's type and the shape of its id (whether it exists is the services' to check)."""
    errors: list[FieldError] = []
    mentions: list[Mention] = []
    if len(raw) > MAX_MENTIONS:
        raise ValidationFailed.on("mentions", f"may hold at most {MAX_MENTIONS} mentions")
    for i, item in enumerate(raw):
        try:
            kind = MentionType(str(item.get("type")))
        except ValueError:
            errors.append(FieldError(f"mentions[{i}].type", "must be one of "
                                     + ", ".join(t.value for t in MentionType)))
            continue
        mention_id = _mention_id(kind, item.get("id"))
        label = item.get("label", "")
        if mention_id is None:
            errors.append(FieldError(f"mentions[{i}].id", _ID_SHAPES[kind]))
        elif not isinstance(label, str) or len(label) > MAX_LABEL:
            errors.append(FieldError(f"mentions[{i}].label", f"must be text of at most {MAX_LABEL} characters"))
        else:
            mentions.append(Mention(kind, mention_id, label))
    if errors:
        raise ValidationFailed(errors)
    return tuple(mentions)


_ID_SHAPES = {
    MentionType.RECONCILIATION: "must be a reconciliation id (a positive integer)",
    MentionType.DATA_STREAM: "must be a data stream's id (a positive integer) or key",
    MentionType.USER: f"must be the user's identity provider id (text of at most {MAX_LABEL} characters)",
    MentionType.AGENT: "must be an agent's id (a UUID)",
}


def _positive(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str) and value.isdigit() and value.isascii():
        return int(value) if int(value) > 0 else None
    return None


def _mention_id(kind: MentionType, value: Any) -> int | str | None:
    """The mention's id in the form its resource has it, or None when it cannot be one."""
    match kind:
        case MentionType.RECONCILIATION:
            return _positive(value)
        case MentionType.DATA_STREAM:
            number = _positive(value)
            if number is not None:
                return number
            return value if isinstance(value, str) and KEY_PATTERN.match(value) else None
        case MentionType.AGENT:
            try:
                return str(uuid.UUID(value)) if isinstance(value, str) else None
            except ValueError:
                return None
        case MentionType.USER:
            return value if isinstance(value, str) and value.strip() and len(value) <= MAX_LABEL else None
    return None
