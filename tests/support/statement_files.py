"""Writes bank statement files for tests and benchmarks (test code: it lives in tests/support and
does not ship). BAI2: `bai2_file` writes groups of accounts with their counts and control totals
computed, so a file written here is valid unless a caller breaks it on purpose; `bai2_large_file`
writes a big one quickly for timing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date


@dataclass
class Bai2Detail:
    """A 16 record. `availability` holds the fields that the funds type adds (S: three amounts;
    V: value date and time; D: the count, then day and amount pairs)."""
    type_code: str
    amount: int  # minor units, unsigned
    funds_type: str = "0"
    availability: tuple[str, ...] = ()
    bank_reference: str = ""
    customer_reference: str = ""
    text: str = ""


@dataclass
class Bai2Account:
    number: str
    details: list[Bai2Detail] = field(default_factory=list)
    currency: str = ""  # blank: the group's
    # (type code, signed amount or None): balances and summaries, item count and funds type defaulted
    summaries: list[tuple[str, int | None]] = field(default_factory=list)


@dataclass
class Bai2Group:
    as_of: date
    accounts: list[Bai2Account]
    currency: str = ""  # blank: USD
    receiver: str = "ACMECORP"
    originator: str = "121000248"


def _signed(amount: int | None) -> str:
    if amount is None:
        return ""
    return str(amount) if amount >= 0 else f"-{-amount}"


def bai2_physical_lines(code: str, head: list[str], words: list[str] | None, width: int) -> list[str]:
    """One logical record as physical records of at most `width` characters (where the fields
    allow), continued in 88 records: each item of `head` (one field, or several joined by commas,
    such as a 03's summary) whole on one line; a 16's text (`words`) after them, broken between
    words."""
    lines: list[str] = []
    current = code
    for item in head:
        if len(current) + 1 + len(item) > width and current not in (code, "88"):
            lines.append(current)
            current = "88"
        current += "," + item
    if words is not None:
        current += ","
        started = False
        for word in words:
            if started and len(current) + 1 + len(word) > width:
                lines.append(current)
                current = "88," + word
            else:
                current += (" " if started else "") + word
            started = True
    lines.append(current)
    return lines


def bai2_file(groups: list[Bai2Group], *, sender: str = "121000248", receiver: str = "ACMECORP",
              file_id: str = "1", created: date = date(2026, 3, 2), created_time: str = "0600",
              slashes: bool = True, line_ending: str = "\n", width: int = 80) -> bytes:
    """A BAI2 file of `groups`, with every 49/98/99 count and control total computed."""
    out: list[str] = []

    def emit(lines: list[str]) -> int:
        out.extend(lines)
        return len(lines)

    file_total = 0
    file_records = emit([f"01,{sender},{receiver},{created:%y%m%d},{created_time},{file_id},,,2"])
    for group in groups:
        group_total = 0
        group_records = emit([f"02,{group.receiver},{group.originator},1,{group.as_of:%y%m%d},,"
                              f"{group.currency},2"])
        for account in group.accounts:
            head = [f"{account.number},{account.currency}"]
            total = 0
            for type_code, amount in account.summaries:
                head.append(f"{type_code},{_signed(amount)},,")
                total += amount or 0
            records = emit(bai2_physical_lines("03", head, None, width))
            for detail in account.details:
                fields = [detail.type_code, str(detail.amount), detail.funds_type, *detail.availability,
                          detail.bank_reference, detail.customer_reference]
                records += emit(bai2_physical_lines("16", fields, detail.text.split(), width))
                total += detail.amount
            records += emit([f"49,{_signed(total)},{records + 1}"])
            group_total += total
            group_records += records
        group_records += emit([f"98,{_signed(group_total)},{len(group.accounts)},{group_records + 1}"])
        file_total += group_total
        file_records += group_records
    emit([f"99,{_signed(file_total)},{len(groups)},{file_records + 1}"])
    if slashes:
        out = [line + "/" for line in out]
    return (line_ending.join(out) + line_ending).encode()


def bai2_large_file(transactions: int, accounts: int = 10, *, slashes: bool = True,
                    line_ending: str = "\n") -> bytes:
    """A file of `transactions` 16 records spread over `accounts` accounts of one group, as a
    bank's daily file looks: mostly credits and debits with bank references, some without (a
    deterministic id), one in ten continued by an 88 text, one in twenty with funds type S, and
    reversals. Written straight as text, to time the parser on a million records."""
    end = "/" if slashes else ""
    out = [f"01,121000248,ACMECORP,260302,0600,1,,,2{end}", f"02,ACMECORP,121000248,1,260301,,USD,2{end}"]
    per_account = -(-transactions // accounts)
    file_total = 0
    done = 0
    written = 0
    for a in range(accounts):
        count = min(per_account, transactions - done)
        if count <= 0:
            break
        written += 1
        opening, closing = 100_000_00 + a, 100_000_00 + a
        lines = []
        total = 0
        for n in range(done, done + count):
            amount = 1000 + n % 99_991
            code = ("165", "475", "195", "495", "142", "451", "252", "552")[n % 8]
            if code[0] in "123":
                closing += amount
            else:
                closing -= amount
            reference = f"B{n:09d}" if n % 7 else ""
            if n % 20 == 3:
                head = f"16,{code},{amount},S,{amount},0,0,{reference},INV{n}"
            else:
                head = f"16,{code},{amount},0,{reference},INV{n}"
            if n % 10 == 1:
                lines.append(f"{head},PAYMENT FROM CUSTOMER {n}{end}")
                lines.append(f"88,REMITTANCE ADVICE FOR ORDER {n} OF THE MONTH{end}")
            else:
                lines.append(f"{head},PAYMENT {n}{end}")
            total += amount
        total += opening + closing
        out.append(f"03,{7_000_000_000 + a},USD,010,{opening},,,015,{closing},,{end}")
        out.extend(lines)
        out.append(f"49,{total},{len(lines) + 2}{end}")
        file_total += total
        done += count
    records = len(out)  # the group's records: all but the 01, and its 98
    out.append(f"98,{file_total},{written},{records}{end}")
    out.append(f"99,{file_total},1,{len(out) + 1}{end}")
    return (line_ending.join(out) + line_ending).encode()
