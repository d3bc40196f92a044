"""Writes ISO 20022 camt.053 statements: the property-based tests and the benchmark build their files
with it (test code: it lives in tests/support and does not ship).

Closing balances are computed from the booked entries unless a caller sets one, so a file written
here is valid unless the caller breaks it on purpose. A version before .001.08 is written the way
.001.02 writes it (the status as text, detail amounts under AmtDtls/TxAmt, a party's name right
under Dbtr or Cdtr); .001.08 and later the way .001.08 does (Sts/Cd, TxDtls/Amt, Dbtr/Pty/Nm).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date
from xml.sax.saxutils import escape, quoteattr

from chalicelib.domain.money import minor_units

NAMESPACE = "urn:iso:std:iso:20022:tech:xsd:camt.053.001.{version}"


@dataclass
class Detail:
    amount: int | None = None  # minor units; None: the detail carries no amount
    direction: str | None = None  # CRDT / DBIT; None: not written
    account_servicer_ref: str | None = None
    end_to_end_id: str | None = None
    instruction_id: str | None = None
    debtor: str | None = None
    debtor_iban: str | None = None
    creditor: str | None = None
    creditor_iban: str | None = None
    remittance: list[str] = field(default_factory=list)
    additional_info: str | None = None
    currency: str | None = None  # default: the statement's


@dataclass
class Entry:
    amount: int  # minor units
    direction: str  # CRDT / DBIT
    booking_date: date
    value_date: date | None = None
    status: str = "BOOK"
    reversal: bool | None = None  # None: RvslInd not written
    entry_ref: str | None = None
    account_servicer_ref: str | None = None
    code: tuple[str, str, str] | None = ("PMNT", "RCDT", "ESCT")
    proprietary_code: str | None = None
    additional_info: str | None = None
    details: list[Detail] = field(default_factory=list)
    amount_text: str | None = None  # written as is instead of `amount`
    currency: str | None = None  # default: the statement's


@dataclass
class Statement:
    id: str
    account: str
    currency: str
    opening: int  # signed minor units
    day: date
    entries: list[Entry] = field(default_factory=list)
    other_account: bool = False  # Acct/Id/Othr/Id rather than IBAN
    opening_code: str = "OPBD"
    closing: int | None = None  # default: opening + booked credits - booked debits
    available: int | None = None  # CLAV, when set

    def computed_closing(self) -> int:
        total = self.opening
        for entry in self.entries:
            if entry.status == "BOOK":
                total += entry.amount if entry.direction == "CRDT" else -entry.amount
        return total


def decimal_text(amount: int, currency: str) -> str:
    places = minor_units(currency)
    if not places:
        return str(amount)
    whole, fraction = divmod(amount, 10**places)
    return f"{whole}.{fraction:0{places}d}"


def _el(name: str, text: str | None) -> str:
    return "" if text is None else f"<{name}>{escape(text)}</{name}>"


def _amount(tag: str, amount: int, currency: str, text: str | None = None) -> str:
    return f"<{tag} Ccy={quoteattr(currency)}>{text if text is not None else decimal_text(amount, currency)}</{tag}>"


def _balance(code: str, signed: int, currency: str, day: date) -> str:
    return (f"<Bal><Tp><CdOrPrtry><Cd>{code}</Cd></CdOrPrtry></Tp>{_amount('Amt', abs(signed), currency)}"
            f"<CdtDbtInd>{'DBIT' if signed < 0 else 'CRDT'}</CdtDbtInd><Dt><Dt>{day.isoformat()}</Dt></Dt></Bal>")


def _party(role: str, name: str | None, iban: str | None, modern: bool) -> str:
    out = ""
    if name is not None:
        out += f"<{role}><Pty>{_el('Nm', name)}</Pty></{role}>" if modern else f"<{role}>{_el('Nm', name)}</{role}>"
    if iban is not None:
        out += f"<{role}Acct><Id><IBAN>{escape(iban)}</IBAN></Id></{role}Acct>"
    return out


def _detail(detail: Detail, currency: str, modern: bool) -> str:
    out = ["<TxDtls>"]
    refs = (_el("AcctSvcrRef", detail.account_servicer_ref) + _el("InstrId", detail.instruction_id)
            + _el("EndToEndId", detail.end_to_end_id))
    if refs:
        out.append(f"<Refs>{refs}</Refs>")
    ccy = detail.currency or currency
    if detail.amount is not None:
        if modern:
            out.append(_amount("Amt", detail.amount, ccy))
            if detail.direction:
                out.append(_el("CdtDbtInd", detail.direction))
        else:
            out.append(f"<AmtDtls><TxAmt>{_amount('Amt', detail.amount, ccy)}</TxAmt></AmtDtls>")
    elif detail.direction and modern:
        out.append(_el("CdtDbtInd", detail.direction))
    parties = (_party("Dbtr", detail.debtor, detail.debtor_iban, modern)
               + _party("Cdtr", detail.creditor, detail.creditor_iban, modern))
    if parties:
        out.append(f"<RltdPties>{parties}</RltdPties>")
    if detail.remittance:
        out.append("<RmtInf>" + "".join(_el("Ustrd", line) for line in detail.remittance) + "</RmtInf>")
    out.append(_el("AddtlTxInf", detail.additional_info))
    out.append("</TxDtls>")
    return "".join(out)


def _entry(entry: Entry, currency: str, modern: bool) -> str:
    ccy = entry.currency or currency
    out = ["<Ntry>", _el("NtryRef", entry.entry_ref), _amount("Amt", entry.amount, ccy, entry.amount_text),
           _el("CdtDbtInd", entry.direction)]
    if entry.reversal is not None:
        out.append(_el("RvslInd", "true" if entry.reversal else "false"))
    out.append(f"<Sts><Cd>{entry.status}</Cd></Sts>" if modern else _el("Sts", entry.status))
    out.append(f"<BookgDt><Dt>{entry.booking_date.isoformat()}</Dt></BookgDt>")
    if entry.value_date:
        out.append(f"<ValDt><Dt>{entry.value_date.isoformat()}</Dt></ValDt>")
    out.append(_el("AcctSvcrRef", entry.account_servicer_ref))
    out.append("<BkTxCd>")
    if entry.code:
        domain, family, subfamily = entry.code
        out.append(f"<Domn><Cd>{domain}</Cd><Fmly><Cd>{family}</Cd><SubFmlyCd>{subfamily}</SubFmlyCd></Fmly></Domn>")
    if entry.proprietary_code:
        out.append(f"<Prtry><Cd>{escape(entry.proprietary_code)}</Cd><Issr>BANK</Issr></Prtry>")
    out.append("</BkTxCd>")
    if entry.details:
        out.append("<NtryDtls>" + "".join(_detail(d, currency, modern) for d in entry.details) + "</NtryDtls>")
    out.append(_el("AddtlNtryInf", entry.additional_info))
    out.append("</Ntry>")
    return "".join(out)


def _statement_parts(statement: Statement, modern: bool) -> Iterator[str]:
    ccy = statement.currency
    account = (f"<Othr><Id>{escape(statement.account)}</Id></Othr>" if statement.other_account
               else f"<IBAN>{escape(statement.account)}</IBAN>")
    yield f"<Stmt><Id>{escape(statement.id)}</Id><CreDtTm>{statement.day.isoformat()}T06:00:00</CreDtTm>"
    yield f"<Acct><Id>{account}</Id><Ccy>{ccy}</Ccy></Acct>"
    yield _balance(statement.opening_code, statement.opening, ccy, statement.day)
    closing = statement.computed_closing() if statement.closing is None else statement.closing
    yield _balance("CLBD", closing, ccy, statement.day)
    if statement.available is not None:
        yield _balance("CLAV", statement.available, ccy, statement.day)
    for entry in statement.entries:
        yield _entry(entry, ccy, modern)
    yield "</Stmt>"


def write_camt053(statements: list[Statement], version: str = "08", line_ending: str = "\n",
                  message_id: str = "MSG-1") -> bytes:
    """One document; the group header, each statement's header and balances, and each entry stand on a
    line of their own (the line ending is the caller's: LF or CRLF)."""
    return b"".join(iter_camt053(statements, version, line_ending, message_id))


def iter_camt053(statements: list[Statement], version: str = "08", line_ending: str = "\n",
                 message_id: str = "MSG-1") -> Iterator[bytes]:
    """The same document in pieces, for a benchmark file too large to build as one string first."""
    modern = int(version) >= 8
    yield (f'<?xml version="1.0" encoding="UTF-8"?>{line_ending}<Document xmlns="{NAMESPACE.format(version=version)}">'
           f"{line_ending}<BkToCstmrStmt>{line_ending}<GrpHdr><MsgId>{escape(message_id)}</MsgId>"
           f"<CreDtTm>2026-11-03T06:00:00</CreDtTm></GrpHdr>{line_ending}").encode()
    for statement in statements:
        for part in _statement_parts(statement, modern):
            yield (part + line_ending).encode()
    yield f"</BkToCstmrStmt>{line_ending}</Document>{line_ending}".encode()


def benchmark_statements(entries: int, statements: int = 4, batched_every: int = 10) -> Iterator[Statement]:
    """`entries` entries over `statements` accounts: references, a counterparty, remittance text,
    and every `batched_every`-th entry a batch of three transaction details with amounts."""
    per_statement = -(-entries // statements)
    for s in range(statements):
        count = min(per_statement, entries - s * per_statement)
        day = date(2026, 11, 3)
        rows = []
        for n in range(count):
            amount = 1000 + (n * 7919) % 1_000_000
            credit = n % 3 != 0
            entry = Entry(amount, "CRDT" if credit else "DBIT", day, day, entry_ref=f"{n + 1}",
                          account_servicer_ref=f"AS{s:02d}{n:09d}",
                          code=("PMNT", "RCDT", "ESCT") if credit else ("PMNT", "ICDT", "ESCT"))
            if batched_every and n % batched_every == 0:
                third = amount // 3
                entry.details = [Detail(part, end_to_end_id=f"E2E-{n}-{i}", debtor=f"DEBTOR {n} {i}" if credit else None,
                                        creditor=None if credit else f"CREDITOR {n} {i}",
                                        remittance=[f"INVOICE {n}-{i}"])
                                 for i, part in enumerate((third, third, amount - 2 * third))]
            else:
                entry.details = [Detail(end_to_end_id=f"E2E-{n}", debtor=f"PAYER {n}" if credit else None,
                                        creditor=None if credit else f"PAYEE {n}",
                                        debtor_iban="DE02120300000000202051" if credit else None,
                                        remittance=[f"INVOICE {n}"])]
            rows.append(entry)
        yield Statement(f"STMT-{s + 1}", f"DE{s + 10:02d}370400440532013{s:03d}", "EUR", 1_000_000, day, rows)
