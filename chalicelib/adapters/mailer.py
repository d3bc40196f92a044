"""Mail with attachments through SES (SendRawEmail: the only SES call that takes attachments).

One message per recipient: the caller loops, so that one refused address does not stop the
others. Locally (`outbox_dir`), each message also lands as an .eml file, the very bytes SES was
given, for a person to open in a mail client."""
from __future__ import annotations

import re
from datetime import UTC, datetime
from email import policy
from email.message import EmailMessage
from email.utils import formatdate
from pathlib import Path

from chalicelib.observability import logger

# SendRawEmail's limit on the whole message, headers and base64-encoded attachments included.
MAX_RAW_BYTES = 10 * 1024 * 1024
_UNSAFE_IN_NAME = re.compile(r"[^A-Za-z0-9._-]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


class MailRefused(Exception):
    """SES (or its limits) refused the message; `reason` says why, in SES's words when it spoke."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SesMailer:
    def __init__(self, ses_client, sender: str, outbox_dir: Path | None = None) -> None:
        self._ses = ses_client
        self.sender = sender
        self.outbox_dir = outbox_dir

    def send(self, recipient: str, subject: str, body_text: str,
             attachments: list[tuple[str, str, bytes]]) -> str:
        """Send one message to one recipient; SES's MessageId. MailRefused when SES refuses it or
        it is above SES's size limit (checked before sending)."""
        attached = sum(len(data) for _, _, data in attachments)
        if attached > MAX_RAW_BYTES:
            raise MailRefused(_too_large(f"its attachments are {attached} bytes"))
        raw = self.raw_message(recipient, subject, body_text, attachments)
        if len(raw) > MAX_RAW_BYTES:  # base64 makes attachments a third larger
            raise MailRefused(_too_large(f"the message is {len(raw)} bytes with its attachments encoded"))
        try:
            answer = self._ses.send_raw_email(Source=self.sender, Destinations=[recipient], RawMessage={"Data": raw})
        except self._ses.exceptions.ClientError as error:
            details = error.response.get("Error", {})
            raise MailRefused(f"{details.get('Code', 'Error')}: {details.get('Message', str(error))}") from None
        message_id: str = answer["MessageId"]
        if self.outbox_dir is not None:
            self._keep(raw, message_id)
        return message_id

    def raw_message(self, recipient: str, subject: str, body_text: str,
                    attachments: list[tuple[str, str, bytes]]) -> bytes:
        """The raw MIME message: a text part, then each attachment (filename, content type, bytes)."""
        message = EmailMessage(policy=policy.SMTP)  # CRLF line ends, as RFC 5322 has them
        try:
            message["From"] = self.sender
            message["To"] = recipient
            # An agent's name may hold a line break: a header may not (it would inject headers).
            message["Subject"] = _CONTROL.sub(" ", subject).strip()
            message["Date"] = formatdate(usegmt=True)
            message.set_content(body_text)
            for filename, content_type, data in attachments:
                maintype, subtype, params = _content_type(content_type)
                message.add_attachment(data, maintype=maintype, subtype=subtype, filename=filename, params=params)
            return message.as_bytes()
        except ValueError as error:  # a line break in an address or a file name: no header may hold one
            raise MailRefused(f"the message cannot be built: {error}") from None

    def _keep(self, raw: bytes, message_id: str) -> None:
        """The message as sent, in the outbox. It went: a failure here is logged, not raised (the
        caller would record a sent message as failed)."""
        assert self.outbox_dir is not None
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        path = self.outbox_dir / f"{stamp}-{_UNSAFE_IN_NAME.sub('_', message_id)}.eml"
        try:
            self.outbox_dir.mkdir(parents=True, exist_ok=True)
            path.write_bytes(raw)
        except OSError as error:
            logger.warning("a sent message could not be kept in the outbox",
                           extra={"path": str(path), "error": str(error)})


def _too_large(what: str) -> str:
    return f"{what}, above SES's limit of {MAX_RAW_BYTES} bytes (10 MB) per message"


def _content_type(value: str) -> tuple[str, str, dict[str, str]]:
    """`type/subtype; name=value` as add_attachment takes it; a malformed type is sent as bytes."""
    kind, *parameters = value.split(";")
    maintype, slash, subtype = kind.strip().lower().partition("/")
    if not (slash and maintype and subtype) or maintype == "multipart":
        return "application", "octet-stream", {}
    params = {}
    for parameter in parameters:
        name, equals, content = parameter.partition("=")
        if equals and name.strip():
            params[name.strip().lower()] = content.strip().strip('"')
    return maintype, subtype, params
