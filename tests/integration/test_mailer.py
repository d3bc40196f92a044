"""Mail with attachments through SES (moto keeps the raw MIME it was given): what a recipient
receives, the local outbox, and what SES or its size limit refuses."""
from __future__ import annotations

import email
from email import policy

import boto3
import pytest

from chalicelib.adapters.mailer import MAX_RAW_BYTES, MailRefused, SesMailer
from tests.conftest import REGION

SENDER = "agents@recon.example"
CSV = "date,amount,description\n2026-05-01,12.50,Café crème\n".encode()
BINARY = bytes(range(256)) * 64


@pytest.fixture
def ses(moto_aws):
    client = boto3.client("ses", region_name=REGION)
    client.verify_email_identity(EmailAddress=SENDER)
    return client


@pytest.fixture
def outbox(tmp_path):
    return tmp_path / "outbox"


@pytest.fixture
def mailer(ses, outbox):
    return SesMailer(ses, SENDER, outbox)


def sent_messages() -> list:
    """What moto's SES accepted, raw MIME included."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ses.models import ses_backends

    return ses_backends[DEFAULT_ACCOUNT_ID][REGION].sent_messages


def parsed(raw: str | bytes) -> email.message.EmailMessage:
    data = raw.encode() if isinstance(raw, str) else raw
    return email.message_from_bytes(data, policy=policy.default)  # type: ignore[return-value]


def text(part) -> str:
    """A text part's content; MIME's canonical line end is CRLF, which the message keeps."""
    return part.get_content().replace("\r\n", "\n")


def test_the_recipient_gets_the_text_and_every_attachment_byte_for_byte(mailer):
    message_id = mailer.send("ops@example.com", "Payouts: 2 files from run 7", "Here are the files.\nRelevé à jour.\n",
                             [("Relevé août.csv", "text/csv; charset=utf-8", CSV),
                              ("blob.bin", "application/octet-stream", BINARY)])
    [sent] = sent_messages()
    # moto adds the To header's addresses to the Destinations it was given: hence a set.
    assert (sent.id, sent.source, set(sent.destinations)) == (message_id, SENDER, {"ops@example.com"})
    received = parsed(sent.raw_data)
    assert (received["From"], received["To"], received["Subject"]) == (
        SENDER, "ops@example.com", "Payouts: 2 files from run 7")
    assert text(received.get_body(("plain",))) == "Here are the files.\nRelevé à jour.\n"
    attached = [(part.get_filename(), part.get_content_type(), part.get_content_charset(), part.get_payload(decode=True))
                for part in received.iter_attachments()]
    assert attached == [("Relevé août.csv", "text/csv", "utf-8", CSV),
                        ("blob.bin", "application/octet-stream", None, BINARY)]


def test_each_recipient_gets_a_message_of_their_own(mailer):
    ids = [mailer.send(to, "Report", "See attached.", [("r.csv", "text/csv", CSV)])
           for to in ("a@example.com", "b@example.com")]
    assert len(set(ids)) == 2
    assert [(m.id, set(m.destinations), parsed(m.raw_data)["To"]) for m in sent_messages()] == [
        (ids[0], {"a@example.com"}, "a@example.com"), (ids[1], {"b@example.com"}, "b@example.com")]


def test_a_message_without_attachments_is_plain_text(mailer):
    mailer.send("ops@example.com", "Nothing matched", "No file matched the pattern.", [])
    received = parsed(sent_messages()[0].raw_data)
    assert received.get_content_type() == "text/plain"
    assert text(received) == "No file matched the pattern.\n"


def test_the_outbox_keeps_exactly_what_ses_received(mailer, outbox):
    first = mailer.send("ops@example.com", "One", "1", [("r.csv", "text/csv", CSV)])
    second = mailer.send("ops@example.com", "Two", "2", [("b.bin", "application/octet-stream", BINARY)])
    kept = sorted(outbox.iterdir())
    assert [path.name.split("-", 1)[1] for path in kept] == [f"{first}.eml", f"{second}.eml"]
    assert all(path.name[:8].isdigit() and path.name[8] == "T" for path in kept)  # a UTC timestamp first
    assert [path.read_bytes() for path in kept] == [m.raw_data.encode() for m in sent_messages()]
    assert parsed(kept[1].read_bytes())["Subject"] == "Two"


def test_without_an_outbox_nothing_is_written(ses, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    SesMailer(ses, SENDER, None).send("ops@example.com", "One", "1", [("r.csv", "text/csv", CSV)])
    assert len(sent_messages()) == 1
    assert list(tmp_path.rglob("*")) == []


def test_a_line_break_in_the_subject_injects_no_header(mailer):
    mailer.send("ops@example.com", "Report\r\nBcc: thief@example.com", "x", [])
    [sent] = sent_messages()
    received = parsed(sent.raw_data)
    assert received["Subject"] == "Report Bcc: thief@example.com"
    assert received["Bcc"] is None and set(sent.destinations) == {"ops@example.com"}


def test_an_unverified_sender_is_refused_with_ses_s_reason(ses, outbox):
    mailer = SesMailer(ses, "someone@unverified.example", outbox)
    with pytest.raises(MailRefused, match="someone@unverified.example") as refused:
        mailer.send("ops@example.com", "Report", "x", [("r.csv", "text/csv", CSV)])
    assert refused.value.reason.startswith("MessageRejected: ")
    assert sent_messages() == [] and not outbox.exists()


def test_an_address_ses_cannot_take_is_refused(mailer):
    with pytest.raises(MailRefused, match="InvalidParameterValue"):
        mailer.send("not-an-address", "Report", "x", [])
    assert sent_messages() == []


def test_a_line_break_in_the_address_is_refused_before_sending(mailer):
    with pytest.raises(MailRefused, match="cannot be built"):
        mailer.send("ops@example.com\r\nBcc: thief@example.com", "Report", "x", [])
    assert sent_messages() == []


def test_a_line_break_in_an_attachment_s_name_is_refused_before_sending(mailer):
    with pytest.raises(MailRefused, match="cannot be built"):
        mailer.send("ops@example.com", "Report", "x", [("r.csv\r\nBcc: thief@example.com", "text/csv", CSV)])
    assert sent_messages() == []


@pytest.mark.parametrize("sizes", [
    [MAX_RAW_BYTES + 1],
    [6 * 1024 * 1024, 6 * 1024 * 1024],  # each fits, not both
    [8 * 1024 * 1024],  # fits as bytes, not once base64 makes it a third larger
])
def test_a_message_above_ses_s_size_limit_is_refused_before_sending(mailer, outbox, sizes):
    with pytest.raises(MailRefused, match=f"limit of {MAX_RAW_BYTES} bytes"):
        mailer.send("ops@example.com", "Big", "x", [(f"{n}.bin", "application/octet-stream", b"\0" * size)
                                                    for n, size in enumerate(sizes)])
    assert sent_messages() == [] and not outbox.exists()


def test_a_message_just_under_the_limit_is_sent(mailer):
    size = 7 * 1024 * 1024  # about 9.5 MB encoded
    mailer.send("ops@example.com", "Big", "x", [("big.bin", "application/octet-stream", b"\1" * size)])
    [sent] = sent_messages()
    assert len(sent.raw_data) <= MAX_RAW_BYTES
    [part] = parsed(sent.raw_data).iter_attachments()
    assert part.get_payload(decode=True) == b"\1" * size
