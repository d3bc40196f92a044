"""Mail: one message per recipient, each answered with an id of its own (SES's MessageId). The
fake keeps what it sent; SES on moto checks the sender is verified, as the stage's deploy makes it."""
from __future__ import annotations

CSV = b"date,amount\n2024-03-01,10.00\n"


class TestMailer:
    def test_each_message_sent_gets_an_id_of_its_own(self, mailer):
        first = mailer.send("ops@example.com", "Report", "Attached.", [("report.csv", "text/csv", CSV)])
        second = mailer.send("cfo@example.com", "Report", "Attached.", [])
        assert isinstance(first, str) and first and second and first != second
