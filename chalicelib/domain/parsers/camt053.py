"""ISO 20022 camt.053 bank statements (any version .001.02 to .001.13): each statement's booked entries
as transactions, its balances, and the check that opening + credits - debits == closing.

The XML is untrusted, so it is read hardened and streamed:
- A file over `max_bytes` is refused before any parsing.
- A DTD is the only place an entity (an expansion bomb, an external file or URL) can be declared,
  and it can only stand in the prolog. A first expat pass reads the prolog alone, up to the root
  element's start tag, with handlers that raise on a DOCTYPE, an entity declaration or an external
  entity reference: such a file is refused before anything is expanded or fetched. (The C parser
  behind ElementTree does not expose its expat handle, hence the separate pass; both are expat
  over the same bytes, so they read the same prolog.) In the body, expat knows only the five
  predefined entities and refuses any other reference.
- The body is read by `XMLPullParser` in 16 KiB chunks (growing while no event comes, and at most
  MAX_QUIET_BYTES with none: a longer tag, comment or text is refused), with end events only (start events would
  cost a fifth more time), its queue of events read in place (see `_Reader._consume`). Each
  transaction detail (TxDtls), detail group (NtryDtls) and entry (Ntry) is read when its end tag
  is, then emptied; its empty husk stays in its parent until that
  ends (a statement keeps one small element per entry until its own end tag). A statement's
  header (Id, Acct, Bal) is read at its end tag too, as the parent is not known before: its
  records are made from the entries and get their account, statement id and ids then, and an
  entry that cannot be read is reported then, with the account. Husks are counted against what
  was read, so an entry, detail or statement out of its place is refused.
- Two counts bound what a hostile file can make the tree hold: elements ended and not emptied
  (`MAX_HELD_ELEMENTS`, say a million elements under one statement) and elements opened and not
  yet closed (`MAX_OPEN_ELEMENTS`, say a million nested elements, which no end event tells of:
  start tags are counted from the bytes of each chunk).
So memory is the records, plus some 150 bytes per entry of the statement being read, plus one
entry's XML, whatever the size of the file.

Elements are matched by their local names in the root element's namespace, whichever camt.053
version that is. Versions differ in a few places, all read: the entry status is text (`<Sts>BOOK</Sts>`)
or a code (`<Sts><Cd>BOOK</Cd></Sts>`); a detail's amount is `TxDtls/Amt` or
`TxDtls/AmtDtls/TxAmt/Amt`; a party's name is `Dbtr/Nm` or `Dbtr/Pty/Nm`.

Records. Only booked entries (status BOOK) are imported; pending, information-only and future
entries are skipped, with a warning. An entry whose transaction details all carry an amount in the
account's currency (a batch booking) gives one record per detail, and the details must add up to
the entry; any other entry gives one record. `direction` is the CdtDbtInd as written: ISO 20022
defines it as the direction of the booking itself, also for a reversal (RvslInd true with CRDT is
the reversal of a debit), so a reversal adds `reversal: True` to the metadata and the balance check
needs no special case. The counterparty is the debtor of a credit and the creditor of a debit (the
other way round for a reversal). `external_id` is the bank's AcctSvcrRef (the detail's, else the
entry's), else the entry's NtryRef qualified by the statement id (a NtryRef is unique within its
statement only, often a sequence number), a reference of the entry taking `/n` for its n-th
detail; else `deterministic_id(...)`. An id met twice for one account in a file gets `#2`, `#3`.
"""
from __future__ import annotations

import pyexpat
import re
import xml.etree.ElementTree as ET
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Literal, Protocol

from chalicelib.domain.money import MAX_AMOUNT, minor_units
from chalicelib.domain.parsers import FileRejected, without_gc
from chalicelib.domain.parsers.statements import (
    MAX_STATEMENT_BYTES,
    ParsedStatements,
    StatementBalance,
    StatementTransaction,
    deterministic_id,
    normalise_account,
    to_minor_units,
)

NAMESPACE = re.compile(r"urn:iso:std:iso:20022:tech:xsd:camt\.053\.001\.(\d\d)\Z")
VERSIONS = range(2, 14)  # .001.02 to .001.13
CHUNK_BYTES = 16 * 1024  # small chunks keep the parser's event queue (and the CPU cache) small
MAX_HELD_ELEMENTS = 10_000  # ended, outside entries and details (a statement's header holds a few dozen)
MAX_OPEN_ELEMENTS = 10_000  # camt.053 nests about 15 deep
MAX_REPORTED_ERRORS = 50
MAX_LISTED_SKIPS = 10
# Bytes read with no element, comment or PI ending: more is one tag, comment or text of a size no
# statement has, and expat 2.5 would read it again at every chunk (time growing with its square).
MAX_QUIET_BYTES = 1024 * 1024
MAX_RESCAN_BYTES = 16 * 1024 * 1024  # a broken file this small is read again to name the element it breaks in
INDEXED = {"Stmt", "Ntry", "TxDtls", "Bal"}  # always with their position in a path
BOOKED = "BOOK"
DIRECTIONS: dict[str | None, Literal["credit", "debit"]] = {"CRDT": "credit", "DBIT": "debit"}
BOOLEANS = {"true": True, "1": True, "false": False, "0": False}
PLACEHOLDERS = {"NOTPROVIDED", "NOT PROVIDED", "NONREF"}  # SEPA's and SWIFT's "no reference given"
PLACEHOLDER_LENGTHS = {len(placeholder) for placeholder in PLACEHOLDERS}
AMOUNT = re.compile(r"\s*\d{1,18}(\.\d{0,18})?\s*\Z")
CURRENCY = re.compile(r"[A-Z]{3}\Z")
NAMES = ("BkToCstmrStmt", "Stmt", "Id", "CreDtTm", "Acct", "IBAN", "Othr", "Ccy", "Bal", "Tp", "CdOrPrtry", "Cd",
         "Prtry", "Amt", "CdtDbtInd", "Dt", "DtTm", "Ntry", "NtryRef", "RvslInd", "Sts", "BookgDt", "ValDt",
         "AcctSvcrRef", "BkTxCd", "Domn", "Fmly", "SubFmlyCd", "NtryDtls", "TxDtls", "AddtlNtryInf", "Refs",
         "EndToEndId", "InstrId", "AmtDtls", "TxAmt", "RltdPties", "Dbtr", "Cdtr", "DbtrAcct", "CdtrAcct", "Pty",
         "Nm", "RmtInf", "Ustrd", "AddtlTxInf")

Element = ET.Element
Direction = Literal["credit", "debit"]
_NO_PARTIES: tuple[tuple[None, None], tuple[None, None]] = ((None, None), (None, None))
PullEvent = Literal["end", "comment", "pi"]
EVENTS: tuple[PullEvent, ...] = ("end", "comment", "pi")


class PullParser(Protocol):
    """What the reader uses of `xml.etree.ElementTree.XMLPullParser`: its public methods (and its
    queue of events, read in place where it has one: see _drain)."""
    def feed(self, data: bytes) -> None: ...

    def close(self) -> None: ...

    def read_events(self) -> Iterator[tuple[Any, ...]]: ...


def parse_camt053(data: bytes, lenient: bool = False, *, max_bytes: int = MAX_STATEMENT_BYTES,
                  pull_parser: Callable[[tuple[PullEvent, ...]], PullParser] | None = None) -> ParsedStatements:
    """`pull_parser` makes the pull parser of the body from the events it must report: ElementTree's
    own, but for a test of one that keeps no `_events_queue`."""
    if len(data) > max_bytes:
        raise FileRejected(f"file is {len(data)} bytes; camt.053 statements are accepted up to {max_bytes} bytes",
                           {"where": "file", "expected": f"at most {max_bytes} bytes", "found": len(data)})
    if not data or data.isspace():
        raise FileRejected("file is empty", {"where": "file", "expected": "a camt.053 document", "found": "nothing"})
    namespace = _read_prolog(data)
    with without_gc():
        return _Reader(namespace, lenient).read(data, (pull_parser or _pull_parser)(EVENTS))


def _pull_parser(events: tuple[PullEvent, ...]) -> PullParser:
    return ET.XMLPullParser(events)


# The prolog ---------------------------------------------------------------------------------------

class _Refused(Exception):
    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class _RootReached(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _read_prolog(data: bytes) -> str:
    """Reads the prolog with expat, refusing any DTD, and stops at the root element's start tag:
    the namespace of a camt.053 Document."""
    parser = pyexpat.ParserCreate(namespace_separator="}")
    parser.SetParamEntityParsing(pyexpat.XML_PARAM_ENTITY_PARSING_NEVER)

    def doctype(*_: Any) -> None:
        raise _Refused("a DOCTYPE declaration")

    def entity(name: str, *_: Any) -> None:
        raise _Refused(f"an entity declaration ({name})")

    def external(*_: Any) -> int:
        raise _Refused("an external entity reference")

    def root(name: str, *_: Any) -> None:
        raise _RootReached(name)

    parser.StartDoctypeDeclHandler = doctype
    parser.EntityDeclHandler = entity
    parser.UnparsedEntityDeclHandler = entity
    parser.ExternalEntityRefHandler = external
    heard = False

    def event(*_: Any) -> None:
        nonlocal heard
        heard = True

    parser.StartElementHandler = root
    parser.CommentHandler = parser.ProcessingInstructionHandler = parser.XmlDeclHandler = event
    quiet_since = offset = 0
    size = CHUNK_BYTES
    try:
        # expat 2.5 reads a token again from its start at every chunk that does not end it (pyexpat
        # cuts even one Parse call into 1 MiB pieces), so the time a long comment or attribute took
        # grew with the square of its length: chunks grow while nothing ends, up to MAX_QUIET_BYTES.
        while offset < len(data):
            heard = False
            parser.Parse(data[offset:offset + size], False)
            offset += size
            if heard:
                quiet_since, size = offset, CHUNK_BYTES
            elif offset - quiet_since > MAX_QUIET_BYTES:
                raise _too_long(data, quiet_since)
            else:
                size *= 2
        parser.Parse(b"", True)
    except _RootReached as reached:
        return _camt053_namespace(reached.name)
    except _Refused as refused:
        line = parser.CurrentLineNumber
        raise FileRejected(f"line {line}: {refused.what} is not accepted in a statement file (no DTDs, no entities)",
                           {"where": f"line {line}", "expected": "no DTD", "found": refused.what}) from None
    except pyexpat.ExpatError as error:
        raise _not_xml(error.lineno, error.offset, pyexpat.errors.messages[error.code]) from None
    except (LookupError, ValueError) as error:  # Python's codecs, asked for the encoding the prolog declares
        raise _unreadable_encoding(error) from None
    raise FileRejected("no XML element in the file: not a camt.053 statement",
                       {"where": "file", "expected": "a camt.053 document", "found": "no element"})


def _too_long(data: bytes, start: int) -> FileRejected:
    line = data.count(b"\n", 0, start) + 1
    return _rejected(f"line {line}", f"more than {MAX_QUIET_BYTES // 2**20} MiB from here with no element ending: "
                     "one tag, comment or text of that size is not a statement's",
                     f"at most {MAX_QUIET_BYTES // 2**20} MiB between two element ends", "more")


def _unreadable_encoding(error: Exception) -> FileRejected:
    return FileRejected(f"line 1: the encoding the XML declares cannot be read ({error}); camt.053 is UTF-8",
                        {"where": "line 1", "expected": "UTF-8", "found": str(error)})


def _camt053_namespace(name: str) -> str:
    namespace, _, local = name.rpartition("}")
    version = NAMESPACE.match(namespace)
    if local != "Document" or version is None or int(version.group(1)) not in VERSIONS:
        found = f"{local} in {namespace}" if namespace else f"{local} (no namespace)"
        raise _rejected("Document", f"the root element is {found}, not a camt.053 Document",
                        "Document in urn:iso:std:iso:20022:tech:xsd:camt.053.001.02 to .13", found)
    return namespace


def _not_xml(line: int, column: int, reason: str, inside: str = "") -> FileRejected:
    where = f"line {line}"
    if reason.startswith("not well-formed ("):
        reason = reason[len("not well-formed ("):].rstrip(")")
    place = f", inside {inside}" if inside else ""
    return FileRejected(f"{where}, column {column}: not well-formed XML ({reason}){place}: the file is truncated or "
                        "is not XML", {"where": where, "column": column, "element": inside or None,
                                       "expected": "well-formed XML", "found": reason})


def _open_elements(data: bytes) -> str:
    """The elements open where the XML stops being well formed ("Stmt[2]/Ntry[5]/NtryDtls"), read
    again with expat for the message (a failed file only, and not too large a one)."""
    if len(data) > MAX_RESCAN_BYTES:
        return ""
    parser = pyexpat.ParserCreate(namespace_separator="}")
    parser.SetParamEntityParsing(pyexpat.XML_PARAM_ENTITY_PARSING_NEVER)
    path: list[str] = []
    seen: list[dict[str, int]] = [{}]

    def start(name: str, _: Any) -> None:
        local = name.rpartition("}")[2]
        siblings = seen[-1]
        siblings[local] = count = siblings.get(local, 0) + 1
        path.append(f"{local}[{count}]" if local in INDEXED or count > 1 else local)
        seen.append({})

    def end(_: str) -> None:
        path.pop()
        seen.pop()

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        parser.Parse(data, True)
    except pyexpat.ExpatError:
        pass
    if path[:2] == ["Document", "BkToCstmrStmt"]:
        path = path[2:]
    if len(path) > 16:
        path = [*path[:8], f"({len(path) - 12} more)", *path[-4:]]
    return "/".join(path)


def _rejected(where: str, message: str, expected: Any, found: Any, **context: Any) -> FileRejected:
    return FileRejected(f"{where}: {message}", {"where": where, **context, "expected": expected, "found": found})


# What the stream gathers --------------------------------------------------------------------------

@dataclass(slots=True)
class _Detail:
    """A transaction detail, read at its end tag (its entry's end comes after)."""
    group: int  # its NtryDtls, from 0
    index: int  # its place in that NtryDtls, from 1
    amount: str | None
    currency: str | None
    direction: str | None
    account_servicer_ref: str | None
    end_to_end_id: str | None
    instruction_id: str | None
    debtor: tuple[str | None, str | None]  # name, account
    creditor: tuple[str | None, str | None]
    remittance: str | None
    additional_info: str | None
    code: str | None


@dataclass(slots=True)
class _Entry:
    """A booked entry, read at its end tag."""
    where: str
    amount: int
    direction: Direction
    reversal: bool
    booking: date
    value: date | None
    account_servicer_ref: str | None
    entry_ref: str | None
    code: str | None
    additional_info: str | None


@dataclass(slots=True)
class _Open:
    """The statement being read. Its header (Id, Acct, Bal) is read at its end tag, so its records
    are made with what the entries say and get the account, statement id and ids then."""
    index: int
    first: int  # its first record in the file's
    entries: int = 0
    currency: str | None = None  # its entries'
    places: int = 2
    credits: int = 0
    debits: int = 0
    entry_refs: list[str | None] = field(default_factory=list)  # each record's NtryRef (+ "/n" for a detail)
    skipped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # lenient, about its entries: given with its account
    details: list[_Detail] = field(default_factory=list)  # of the entry being read
    details_groups: int = 0  # NtryDtls closed in the entry being read
    details_in_group: int = 0  # TxDtls closed in the open NtryDtls
    failure: FileRejected | None = None  # an entry that cannot be read: raised at the end tag, with the account

    def where(self) -> str:
        """The last element read completely, for a message."""
        return f"Stmt[{self.index}]/Ntry[{self.entries}]" if self.entries else f"Stmt[{self.index}]"


@dataclass(slots=True)
class _Header:
    id: str
    account: str
    currency: str
    places: int
    opening: int | None = None
    opening_code: str | None = None
    closing: int | None = None
    available: int | None = None
    day: date | None = None

    def label(self, index: int) -> str:
        return f"Stmt[{index}] ({self.id}) account {self.account}"

    @property
    def context(self) -> dict[str, str]:
        return {"statement_id": self.id, "account": self.account}


# The reader ---------------------------------------------------------------------------------------

class _Reader:
    def __init__(self, namespace: str, lenient: bool) -> None:
        self.lenient = lenient
        q = self.q = {name: f"{{{namespace}}}{name}" for name in NAMES}
        # what an end event is read for: the handler of its tag (any other element is only counted)
        self.handlers: dict[Any, Callable[[Element], None]] = {
            q["TxDtls"]: self._detail, q["NtryDtls"]: self._details_group, q["Ntry"]: self._entry,
            q["Stmt"]: self._statement, q["BkToCstmrStmt"]: self._statements,
            f"{{{namespace}}}Document": self._document,
            ET.Comment: self._markup, ET.ProcessingInstruction: self._markup}
        self.detail_tags = tuple(q[name] for name in (
            "Amt", "AmtDtls", "Refs", "RltdPties", "RmtInf", "CdtDbtInd", "AddtlTxInf", "BkTxCd", "EndToEndId",
            "AcctSvcrRef", "InstrId", "Ustrd"))
        self.entry_tags = tuple(q[name] for name in (
            "Amt", "CdtDbtInd", "RvslInd", "Sts", "BookgDt", "ValDt", "AcctSvcrRef", "NtryRef", "BkTxCd",
            "AddtlNtryInf"))
        self.party_tags = tuple(q[name] for name in ("Dbtr", "Cdtr", "DbtrAcct", "CdtrAcct"))
        self.name_tags = (q["Nm"], q["Pty"])
        self.code_tags = tuple(q[name] for name in ("Domn", "Fmly", "Cd", "SubFmlyCd", "Prtry"))
        self.account_tags = tuple(q[name] for name in ("Id", "IBAN", "Othr"))
        self.date_tags = (q["Dt"], q["DtTm"])
        self.detail_tag, self.groups_tag, self.status_tags = q["TxDtls"], q["NtryDtls"], (q["Cd"], q["Prtry"])
        self.transactions: list[StatementTransaction] = []
        self.balances: list[StatementBalance] = []
        self.accounts: list[str] = []
        self.account_keys: set[str] = set()
        self.warnings: list[str] = []
        self.errors: list[dict[str, Any]] = []
        self.error_total = 0
        self.ids: dict[str, set[str]] = {}  # the external ids given, per account (normalised)
        self.repeats: dict[tuple[str, str], int] = {}  # an id met again: the last counter it took
        self.dates: dict[str, date] = {}
        self.iso_dates: dict[date, str] = {}
        self.codes: dict[tuple[str | None, str | None, str | None], str] = {}  # the few codes a file uses, joined
        self.statements = 0  # read to their end
        self.open: _Open | None = None
        self.held = 0  # elements ended and still in the tree, but for the husks of entries and details
        self.started = 0  # start tags fed (at least as many: see _check_open)
        self.ended = 0
        self.markup = 0  # comments and processing instructions among the events being read

    def read(self, data: bytes, pull: PullParser) -> ParsedStatements:
        events = _drain(pull)
        quiet_since = offset = 0  # quiet_since: where the bytes read since the last event began
        size = CHUNK_BYTES
        try:
            while offset < len(data):
                pull.feed(data[offset:offset + size])
                queued = events()
                self._check_open(data, offset, size)
                offset += size
                if queued:
                    quiet_since, size = offset, CHUNK_BYTES
                elif offset - quiet_since > MAX_QUIET_BYTES:
                    raise _too_long(data, quiet_since)
                else:  # inside a long token, which expat reads again from its start at every chunk:
                    size *= 2  # growing chunks keep that linear
                self._consume(queued)
            pull.close()
            self._consume(events())
        except ET.ParseError as error:
            if self.open is not None and self.open.failure is not None:
                raise self.open.failure from None
            line, column = error.position
            inside = _open_elements(data) or self._last_read()
            raise _not_xml(line, column, str(error).split(":")[0], inside) from None
        if self.error_total:
            first = self.errors[0]
            more = f" (and {self.error_total - 1} more disagreement(s))" if self.error_total > 1 else ""
            raise FileRejected(first["message"] + more, {**first, "errors": self.errors,
                                                         "error_count": self.error_total})
        return ParsedStatements(self.transactions, self.balances, self.accounts, self.warnings)

    def _consume(self, events: deque[Any]) -> None:
        """Reads the events queued: (event, element) pairs, then the ParseError the feed met, if any
        (`XMLPullParser.feed` queues it after the events before it). The queue is read in place, not
        through `read_events()`, where the parser has one (see _drain): most of its events are
        elements no handler reads, and its generator cost as much as the loop."""
        if not events:
            return
        failed = events.pop() if isinstance(events[-1], Exception) else None
        handlers = self.handlers
        self.markup = 0
        for _, element in events:
            tag = element.tag
            if tag in handlers:
                handlers[tag](element)
        ended = len(events) - self.markup
        events.clear()
        if failed is not None:
            raise failed
        self.held += ended
        self.ended += ended
        if self.held > MAX_HELD_ELEMENTS:
            raise _rejected(self._last_read() or "Document", f"more than {MAX_HELD_ELEMENTS} XML elements are held "
                            "outside entries and transaction details: not a statement this parser reads",
                            f"at most {MAX_HELD_ELEMENTS} elements", self.held)

    def _markup(self, element: Element) -> None:
        """A comment or a processing instruction: not an element, and its "<"s open none."""
        text = element.text or ""
        self.started -= 1 + text.count("<") - text.count("</")
        self.markup += 1

    def _check_open(self, data: bytes, offset: int, size: int) -> None:
        """Elements opened and not yet closed are held too, and no end tag tells of them: the start
        tags fed so far are counted from the bytes (every "<" but those of end tags, and of comments
        and processing instructions, told by their events, with any "<" inside them; a CDATA section
        only makes the count higher), less the elements ended. The count of "</" takes the byte after
        the chunk, so one split between two chunks is counted once."""
        self.started += data.count(b"<", offset, offset + size) - data.count(b"</", offset, offset + size + 1)
        if self.started - self.ended > MAX_OPEN_ELEMENTS:
            raise _rejected(self._last_read() or "Document", f"more than {MAX_OPEN_ELEMENTS} XML elements are open "
                            "at once (nested): not a statement this parser reads",
                            f"at most {MAX_OPEN_ELEMENTS} open elements", f"more than {MAX_OPEN_ELEMENTS}")

    def _last_read(self) -> str:
        if self.open is not None:
            return f"after {self.open.where()}"
        return f"after Stmt[{self.statements}]" if self.statements else ""

    def _begin(self) -> _Open:
        self.open = _Open(self.statements + 1, len(self.transactions))
        return self.open

    def _release(self, element: Element, husks: int) -> None:
        """Drops what an element holds; its empty husk stays in its parent (husks: those it holds)."""
        self.held -= len(list(element.iter())) - husks
        element.clear()

    # The document ----------------------------------------------------------------------------------

    def _statements(self, element: Element) -> None:
        if self.open is not None and self.open.failure is not None:
            raise self.open.failure
        found = len(element.findall(self.q["Stmt"]))
        if self.open is not None or found != self.statements:
            where = self._last_read() or "BkToCstmrStmt"
            raise _rejected(where, f"an entry or a statement stands outside its place (BkToCstmrStmt holds {found} "
                            f"statement(s), {self.statements} were read)", "Document/BkToCstmrStmt/Stmt/Ntry",
                            "Ntry or Stmt elsewhere")
        if not found:
            raise _rejected("BkToCstmrStmt", "the document holds no statement (Stmt)", "Stmt", "nothing")

    def _document(self, element: Element) -> None:
        names = [child.tag.rpartition("}")[2] for child in element]
        if names != ["BkToCstmrStmt"]:
            raise _rejected("Document", f"holds {', '.join(names) or 'nothing'}, not one bank-to-customer statement "
                            "message (BkToCstmrStmt)", "BkToCstmrStmt", ", ".join(names) or "nothing")

    # The statement ---------------------------------------------------------------------------------

    def _statement(self, element: Element) -> None:
        statement = self.open or self._begin()
        self.open = None
        self.statements += 1
        index = statement.index
        where = f"Stmt[{index}]"
        try:
            header = self._header(element, statement, where)
        except FileRejected:
            if statement.failure is not None:
                raise statement.failure from None
            raise
        if statement.failure is not None:
            failure = statement.failure
            raise FileRejected(f"{failure.message} (statement {header.id}, account {header.account})",
                               {**failure.details, **header.context})
        entries = len(element.findall(self.q["Ntry"]))
        if entries != statement.entries or statement.details or statement.details_groups:
            raise _rejected(where, f"holds {entries} entries (Ntry), but {statement.entries} entries were read before "
                            "its end, and transaction details outside them: an entry or a detail stands outside its "
                            "place", "Stmt/Ntry/NtryDtls/TxDtls", "Ntry, NtryDtls or TxDtls elsewhere",
                            **header.context)
        self._name_records(statement, header)
        label = header.label(index)
        self.warnings += [f"{label}: {warning}" for warning in statement.warnings]
        if statement.skipped:
            listed = ", ".join(statement.skipped[:MAX_LISTED_SKIPS])
            extra = len(statement.skipped) - MAX_LISTED_SKIPS
            self.warnings.append(f"{label}: {len(statement.skipped)} entries not booked (pending, information only "
                                 f"or future) were not imported: {listed}" + (f" and {extra} more" if extra > 0
                                                                              else ""))
        places = header.places
        if header.opening is None or header.closing is None:
            missing = "OPBD or PRCD" if header.opening is None else "CLBD"
            what = "opening booked balance" if header.opening is None else "closing booked balance"
            self._disagreement(f"{where}/Bal", f"{label} has no {what} ({missing}), so its entries cannot be "
                               "checked against its balances", missing, "nothing", header)
        else:
            expected = header.opening + statement.credits - statement.debits
            if expected != header.closing:
                self._disagreement(
                    f"{where}/Bal", f"{label}: opening booked {_format(header.opening, places)} + credits "
                    f"{_format(statement.credits, places)} - debits {_format(statement.debits, places)} = "
                    f"{_format(expected, places)} {header.currency}, but the closing booked balance (CLBD) is "
                    f"{_format(header.closing, places)}", _format(expected, places), _format(header.closing, places),
                    header)
        day = header.day or _date_of(_clean(element.findtext(self.q["CreDtTm"])))
        if day is None:
            raise _rejected(f"{where}/Bal", f"{label} has no balance date", "Bal/Dt/Dt", "nothing", **header.context)
        self.balances.append(StatementBalance(header.account, header.currency, places, day, header.id,
                                              header.opening, header.closing, header.available))
        self._release(element, entries)

    def _header(self, element: Element, statement: _Open, where: str) -> _Header:
        q = self.q
        statement_id = _clean(element.findtext(q["Id"]))
        if not statement_id:
            raise _rejected(f"{where}/Id", "the statement has no Id", "Stmt/Id", "nothing")
        account = element.find(q["Acct"])
        if account is None:
            raise _rejected(f"{where}/Acct", f"statement {statement_id} has no account (Acct)",
                            "Acct/Id/IBAN or Acct/Id/Othr/Id", "nothing", statement_id=statement_id)
        number = self._account_number(account)
        if not number:
            raise _rejected(f"{where}/Acct/Id", f"statement {statement_id} names no account number",
                            "Acct/Id/IBAN or Acct/Id/Othr/Id", "nothing", statement_id=statement_id)
        key = normalise_account(number)
        if key not in self.account_keys:
            self.account_keys.add(key)
            self.accounts.append(number)
        context = {"statement_id": statement_id, "account": number}
        balances = element.findall(q["Bal"])
        currency = _clean(account.findtext(q["Ccy"]))
        for balance in balances:
            if currency is not None:
                break
            amount = balance.find(q["Amt"])
            currency = amount.get("Ccy") if amount is not None else None
        currency = currency or statement.currency
        if currency is None or not CURRENCY.match(currency):
            raise _rejected(f"{where}/Acct/Ccy", f"statement {statement_id} gives no ISO 4217 currency "
                            f"({currency or 'none'})", "Acct/Ccy or a balance's Ccy: three capital letters",
                            currency, **context)
        if statement.currency is not None and statement.currency != currency:
            raise _rejected(f"{where}/Ntry[1]/Amt", f"entries in {statement.currency} on a {currency} account "
                            f"{number}", currency, statement.currency, **context)
        header = _Header(statement_id, number, currency, minor_units(currency))
        for position, balance in enumerate(balances, start=1):
            self._balance(header, balance, f"{where}/Bal[{position}]")
        return header

    def _balance(self, header: _Header, balance: Element, where: str) -> None:
        """OPBD (opening booked; PRCD, the previous closing, when there is none), CLBD, CLAV: signed,
        credit positive. The statement's date is its closing balance's."""
        kind = self._find(balance, "Tp", "CdOrPrtry")
        code = (_clean(kind.findtext(self.q["Cd"])) or _clean(kind.findtext(self.q["Prtry"]))) if kind is not None \
            else None
        if code not in ("OPBD", "PRCD", "CLBD", "CLAV"):
            return
        amount = balance.find(self.q["Amt"])
        if amount is None:
            raise _rejected(f"{where}/Amt", "the balance has no amount (Amt)", "an amount", "nothing", **header.context)
        if amount.get("Ccy") != header.currency:
            raise _rejected(f"{where}/Amt", f"balance in {amount.get('Ccy') or 'no currency'} on a {header.currency} "
                            f"account {header.account}", header.currency, amount.get("Ccy"), **header.context)
        value = self._minor_units(amount.text or "", header.currency, header.places, where)
        indicator = _clean(balance.findtext(self.q["CdtDbtInd"]))
        if indicator not in DIRECTIONS:
            raise _rejected(f"{where}/CdtDbtInd", f"credit/debit indicator is {indicator or 'missing'}",
                            "CRDT or DBIT", indicator, **header.context)
        signed = value if indicator == "CRDT" else -value
        day = self._date(balance.find(self.q["Dt"]), f"{where}/Dt")
        if code == "CLBD":
            header.closing = signed
            header.day = day or header.day
        elif code == "CLAV":
            header.available = signed
            header.day = header.day if header.closing is not None else day or header.day
        elif header.opening_code != "OPBD":
            header.opening, header.opening_code = signed, code
            header.day = header.day or day

    def _name_records(self, statement: _Open, header: _Header) -> None:
        """The statement's records get its account and id, and their external ids."""
        account, statement_id = header.account, header.id
        key = normalise_account(account)
        taken = self.ids.setdefault(key, set())
        for record, entry_ref in zip(self.transactions[statement.first:], statement.entry_refs):
            record.account = account
            record.metadata["statement_id"] = statement_id
            external_id = record.external_id or (f"{statement_id}/{entry_ref}" if entry_ref else deterministic_id(
                account, record.booking_date, record.amount, record.direction, record.position))
            if external_id in taken:  # met again: the n-th time it is id#n (unless the file has that one too)
                repeat = self.repeats.get((key, external_id), 1) + 1
                while f"{external_id}#{repeat}" in taken:
                    repeat += 1
                self.repeats[(key, external_id)] = repeat
                external_id = f"{external_id}#{repeat}"
            taken.add(external_id)
            record.external_id = external_id

    def _disagreement(self, where: str, message: str, expected: str, found: str, header: _Header) -> None:
        """A control that disagrees: a warning when lenient, else an error of the file."""
        if self.lenient:
            self.warnings.append(message)
            return
        self.error_total += 1
        if len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append({"where": where, **header.context, "expected": expected, "found": found,
                                "message": message})

    # Entries and their details ---------------------------------------------------------------------

    def _detail(self, element: Element) -> None:
        statement = self.open or self._begin()
        statement.details_in_group += 1
        if statement.failure is None:
            try:
                statement.details.append(self._read_detail(statement, element))
            except FileRejected as failure:
                statement.failure = failure
        self.held -= len(list(element.iter()))  # _release(element, 0)
        element.clear()

    def _details_group(self, element: Element) -> None:
        """The end of a NtryDtls: it held the details just read, and nothing of it is needed any more."""
        statement = self.open or self._begin()
        husks = len(element.findall(self.detail_tag))
        if husks != statement.details_in_group and statement.failure is None:
            statement.failure = _rejected(
                f"Stmt[{statement.index}]/Ntry[{statement.entries + 1}]/NtryDtls", f"holds {husks} transaction "
                f"details, {statement.details_in_group} were read: a detail stands outside its place",
                "NtryDtls/TxDtls", "TxDtls elsewhere")
        statement.details_groups += 1
        statement.details_in_group = 0
        if husks == len(element):  # only the details' husks (emptied at their end): itself is released
            self.held -= 1
            element.clear()
        else:
            self._release(element, husks)

    def _read_detail(self, statement: _Open, element: Element) -> _Detail:
        (amount_tag, amount_details_tag, refs_tag, parties_tag, remittance_tag, indicator_tag, info_tag, code_tag,
         end_to_end_tag, servicer_tag, instruction_tag, line_tag) = self.detail_tags
        amount = amount_details = refs = parties = remittance = indicator = info = code = None
        for child in element:  # one pass over its children (the hot path: every detail of the file)
            tag = child.tag
            if tag == refs_tag:
                refs = child
            elif tag == amount_tag:
                amount = child
            elif tag == parties_tag:
                parties = child
            elif tag == remittance_tag:
                remittance = child
            elif tag == amount_details_tag:
                amount_details = child
            elif tag == indicator_tag:
                indicator = child
            elif tag == info_tag:
                info = child
            elif tag == code_tag:
                code = child
        if amount is None and amount_details is not None:
            amount = self._find(amount_details, "TxAmt", "Amt")
        servicer_ref = end_to_end_id = instruction_id = lines = None
        if refs is not None:
            for ref in refs:
                tag = ref.tag
                if tag == end_to_end_tag:
                    end_to_end_id = _reference(ref.text)
                elif tag == servicer_tag:
                    servicer_ref = _reference(ref.text)
                elif tag == instruction_tag:
                    instruction_id = _reference(ref.text)
        debtor = debtor_account = creditor = creditor_account = None
        if parties is not None:  # (name, account) of the debtor and of the creditor
            debtor_tag, creditor_tag, debtor_account_tag, creditor_account_tag = self.party_tags
            for party in parties:
                tag = party.tag
                if tag == debtor_tag:
                    debtor = self._name(party)
                elif tag == creditor_tag:
                    creditor = self._name(party)
                elif tag == debtor_account_tag:
                    debtor_account = self._account_number(party)
                elif tag == creditor_account_tag:
                    creditor_account = self._account_number(party)
        if remittance is not None:
            texts = [line.text for line in remittance if line.tag == line_tag]
            if len(texts) == 1:
                lines = texts[0]
                lines = (lines.strip() or None) if lines else None
            else:
                lines = " ".join(line.strip() for line in texts if line and not line.isspace()) or None
        return _Detail(statement.details_groups, statement.details_in_group,
                       amount.text if amount is not None else None, amount.get("Ccy") if amount is not None else None,
                       _text(indicator), servicer_ref, end_to_end_id, instruction_id, (debtor, debtor_account),
                       (creditor, creditor_account), lines, _text(info), self._code(code) if code is not None else None)

    def _name(self, party: Element) -> str | None:
        """Dbtr/Nm (.001.02 to .07) or Dbtr/Pty/Nm (.001.08 on): the first of each."""
        name_tag, inner_tag = self.name_tags
        return _first_text(party, name_tag, inner_tag, name_tag)

    def _account_number(self, account: Element) -> str | None:
        """Acct/Id/IBAN, else Acct/Id/Othr/Id: the first of each."""
        id_tag, iban_tag, other_tag = self.account_tags
        for identification in account:
            if identification.tag == id_tag:
                return _first_text(identification, iban_tag, other_tag, id_tag)
        return None

    def _code(self, code: Element | None) -> str | None:
        """The bank transaction code: Domain/Family/SubFamily ("PMNT/RCDT/ESCT"), else the proprietary code."""
        if code is None:
            return None
        domain_tag, family_tag, code_tag, subfamily_tag, proprietary_tag = self.code_tags
        domain = code.find(domain_tag)
        if domain is not None:
            family = domain.find(family_tag)
            parts = (domain.findtext(code_tag), family.findtext(code_tag) if family is not None else None,
                     family.findtext(subfamily_tag) if family is not None else None)
            joined = self.codes.get(parts)
            if joined is None:
                joined = self.codes[parts] = "/".join(part.strip() for part in parts if part and not part.isspace())
            if joined:
                return joined
        proprietary = code.find(proprietary_tag)
        return _clean(proprietary.findtext(code_tag)) if proprietary is not None else None

    def _entry(self, element: Element) -> None:
        statement = self.open or self._begin()
        statement.entries += 1
        details, groups, loose = statement.details, statement.details_groups, statement.details_in_group
        if details:
            statement.details = []
        statement.details_groups = statement.details_in_group = 0
        if statement.failure is None:
            try:
                where = f"Stmt[{statement.index}]/Ntry[{statement.entries}]"
                if loose or (groups and len(element.findall(self.groups_tag)) != groups):
                    raise _rejected(where, "transaction details (TxDtls) or their groups (NtryDtls) stand outside "
                                    "their place", "Ntry/NtryDtls/TxDtls", "TxDtls or NtryDtls elsewhere")
                self._read_entry(statement, element, where, details)
            except FileRejected as failure:
                statement.failure = failure
        self.held -= len(list(element.iter())) - groups  # _release(element, groups)
        element.clear()

    def _read_entry(self, statement: _Open, element: Element, where: str, details: list[_Detail]) -> None:
        (amount_tag, indicator_tag, reversal_tag, status_tag, booking_tag, value_tag, servicer_tag, reference_tag,
         code_tag, info_tag) = self.entry_tags
        children = {child.tag: child for child in element}
        get = children.get
        amount_element = get(amount_tag)
        if amount_element is None:
            raise _rejected(f"{where}/Amt", "the entry has no amount (Amt)", "an amount", "nothing")
        currency = amount_element.get("Ccy")
        if currency != statement.currency:
            self._entry_currency(statement, currency, where)
        amount = self._minor_units(amount_element.text or "", statement.currency or "", statement.places, where)
        indicator_element, indicator = get(indicator_tag), None
        if indicator_element is not None:
            indicator = indicator_element.text
            indicator = (indicator.strip() or None) if indicator else None
        direction = DIRECTIONS.get(indicator)
        if direction is None:
            raise _rejected(f"{where}/CdtDbtInd", f"credit/debit indicator is {indicator or 'missing'}",
                            "CRDT or DBIT", indicator)
        reversal = False
        reversal_element = get(reversal_tag)
        if reversal_element is not None:
            reversal_text = _text(reversal_element) or ""
            if reversal_text not in BOOLEANS:
                raise _rejected(f"{where}/RvslInd", f"reversal indicator is {reversal_text or 'empty'}",
                                "true or false", reversal_text)
            reversal = BOOLEANS[reversal_text]
        status_element = get(status_tag)
        status = None
        if status_element is not None:
            status = status_element.text
            status = (status.strip() or None) if status else None
            if status is None:
                status_code_tag, status_proprietary_tag = self.status_tags
                status = _clean(status_element.findtext(status_code_tag)) or _clean(
                    status_element.findtext(status_proprietary_tag))
        if status is None:
            raise _rejected(f"{where}/Sts", "the entry has no status", "BOOK, PDNG, INFO or FUTR", "nothing")
        if status != BOOKED:
            statement.skipped.append(f"{where} ({status})")
            return
        booking = self._date(get(booking_tag), where, "/BookgDt")
        if booking is None:
            raise _rejected(f"{where}/BookgDt", "a booked entry has no booking date", "BookgDt/Dt", "nothing")
        value = self._date(get(value_tag), where, "/ValDt")
        if direction == "credit":
            statement.credits += amount
        else:
            statement.debits += amount
        servicer_ref, entry_ref, code, info_element = (get(servicer_tag), get(reference_tag), get(code_tag),
                                                       get(info_tag))
        info = None
        if info_element is not None:
            info = info_element.text
            info = (info.strip() or None) if info else None
        entry = _Entry(where, amount, direction, reversal, booking, value,
                       _reference(servicer_ref.text) if servicer_ref is not None else None,
                       _reference(entry_ref.text) if entry_ref is not None else None,
                       self._code(code) if code is not None else None, info)
        if details:
            for detail in details:  # a batch booking when every detail has an amount in the entry's currency
                if detail.amount is None or detail.currency != currency:
                    break
            else:
                self._batch(statement, entry, details)
                return
        self._record(statement, entry, amount, direction, details[0] if len(details) == 1 else None, details,
                     where, None)

    def _entry_currency(self, statement: _Open, currency: str | None, where: str) -> None:
        if currency is None or not CURRENCY.match(currency):
            raise _rejected(f"{where}/Amt", f"the amount's currency is {currency or 'missing'}",
                            "Ccy: three capital letters", currency)
        if statement.currency is not None:
            raise _rejected(f"{where}/Amt", f"amount in {currency}, the statement's entries before are in "
                            f"{statement.currency}", statement.currency, currency)
        statement.currency = currency
        statement.places = minor_units(currency)

    def _batch(self, statement: _Open, entry: _Entry, details: list[_Detail]) -> None:
        """A batch booking: one record per detail, and the details add up to the entry."""
        total = 0
        parts: list[tuple[_Detail, str, int, Direction]] = []
        for detail in details:
            where = _detail_where(entry.where, detail)
            amount = self._minor_units(detail.amount or "", statement.currency or "", statement.places, where)
            direction = DIRECTIONS.get(detail.direction) if detail.direction else entry.direction
            if direction is None:
                raise _rejected(f"{where}/CdtDbtInd", f"credit/debit indicator is {detail.direction}",
                                "CRDT or DBIT", detail.direction)
            total += amount if direction == entry.direction else -amount
            parts.append((detail, where, amount, direction))
        if total != entry.amount:
            self._details_disagreement(statement, entry, total)
        several = len(details) > 1
        for index, (detail, where, amount, direction) in enumerate(parts, start=1):
            self._record(statement, entry, amount, direction, detail, [detail], where, index if several else None)

    def _details_disagreement(self, statement: _Open, entry: _Entry, total: int) -> None:
        places = statement.places
        message = (f"its transaction details add up to {_format(total, places)} {statement.currency}, the entry is "
                   f"{_format(entry.amount, places)}")
        if not self.lenient:
            raise _rejected(entry.where, message, _format(entry.amount, places), _format(total, places))
        statement.warnings.append(f"{entry.where}: {message}")

    def _record(self, statement: _Open, entry: _Entry, amount: int, direction: Direction,
                detail: _Detail | None, details: list[_Detail], where: str, index: int | None) -> None:
        metadata: dict[str, Any] = {}
        code = (detail.code if detail is not None else None) or entry.code
        if code:
            metadata["bank_transaction_code"] = code
        if detail is not None:
            if detail.end_to_end_id:
                metadata["end_to_end_id"] = detail.end_to_end_id
            if detail.instruction_id:
                metadata["customer_reference"] = detail.instruction_id
            # who paid a credit, whom a debit paid; a reversal names the party of the booking it reverses
            name, account = detail.debtor if (direction == "credit") != entry.reversal else detail.creditor
            if name:
                metadata["counterparty_name"] = name
            if account:
                metadata["counterparty_account"] = account
        if entry.value is not None:
            iso = self.iso_dates.get(entry.value)
            if iso is None:
                iso = self.iso_dates[entry.value] = entry.value.isoformat()
            metadata["value_date"] = iso
        if entry.entry_ref:
            metadata["entry_reference"] = entry.entry_ref
        if entry.reversal:
            metadata["reversal"] = True
        if len(details) == 1:
            remittance = details[0].remittance
        else:
            remittance = " ".join(d.remittance for d in details if d.remittance) if details else None
        description = remittance or (detail.additional_info if detail is not None else None) or \
            entry.additional_info or ""
        suffix = f"/{index}" if index is not None else ""
        bank_reference = (detail.account_servicer_ref if detail is not None else None) or (
            entry.account_servicer_ref + suffix if entry.account_servicer_ref else "")
        statement.entry_refs.append(entry.entry_ref + suffix if entry.entry_ref else None)
        self.transactions.append(StatementTransaction(
            len(self.transactions) + 1, where, "", statement.currency or "", amount, statement.places, direction,
            entry.booking, entry.value, description, bank_reference, metadata))

    # Values ----------------------------------------------------------------------------------------

    def _find(self, element: Element | None, *names: str) -> Element | None:
        for name in names:
            if element is None:
                return None
            element = element.find(self.q[name])
        return element

    def _minor_units(self, text: str, currency: str, places: int, where: str) -> int:
        whole, point, fraction = text.partition(".")
        if whole.isdigit() and whole.isascii() and len(whole) + places <= 18 and (
                (fraction.isdigit() and fraction.isascii() and len(fraction) == places) if point else not places):
            return int(whole + fraction)  # the usual form: the currency's decimals, and far below MAX_AMOUNT
        if not AMOUNT.match(text):
            raise _rejected(f"{where}/Amt", f"amount {text.strip()!r} is not a decimal amount",
                            "digits, a point, digits", text.strip())
        amount, _ = to_minor_units(text, currency, f"{where}/Amt")
        if amount > MAX_AMOUNT:
            raise _rejected(f"{where}/Amt", f"amount {text.strip()} is too large", f"at most {MAX_AMOUNT} minor units",
                            text.strip())
        return amount

    def _date(self, choice: Element | None, where: str, name: str = "") -> date | None:
        """A DateAndDateTimeChoice, Dt (2026-11-03) or DtTm (2026-11-03T10:15:00+01:00), as its date
        (where + name: the element, for a message)."""
        if choice is None:
            return None
        date_tag, time_tag = self.date_tags
        text = choice.findtext(date_tag)
        day = self.dates.get(text) if text else None
        if day is not None:
            return day
        where += name
        text = _clean(text) or _clean(choice.findtext(time_tag))
        if text is None:
            raise _rejected(where, "the date is missing", "Dt (YYYY-MM-DD) or DtTm", "nothing")
        day = self.dates.get(text)
        if day is None:
            day = _date_of(text)
            if day is None:
                raise _rejected(where, f"{text!r} is not a date", "Dt (YYYY-MM-DD) or DtTm", text)
            if len(text) == 10:  # a file's few days, not each of its times
                self.dates[text] = day
        return day


def _detail_where(entry_where: str, detail: _Detail) -> str:
    group = "NtryDtls" if not detail.group else f"NtryDtls[{detail.group + 1}]"
    return f"{entry_where}/{group}/TxDtls[{detail.index}]"


def _drain(pull: PullParser) -> Callable[[], deque[Any]]:
    """What gives the events queued since the last call, as _consume reads them (and clears them):
    the pull parser's own queue, read in place, where it keeps one (CPython's `_events_queue`, a
    private name); else (another ElementTree, a parser that hides it) a copy taken through the public
    `read_events()`, which reads the same but slower, with the error that ended them last."""
    queue = getattr(pull, "_events_queue", None)
    if isinstance(queue, deque):
        return lambda: queue

    def read_events() -> deque[Any]:
        events: deque[Any] = deque()
        try:
            for event in pull.read_events():
                events.append(event)
        except SyntaxError as error:  # ParseError: read_events raises it after the events before it
            events.append(error)
        return events
    return read_events


def _first_text(parent: Element, tag: str, via_tag: str, via_text_tag: str) -> str | None:
    """The text of `parent`'s first `tag` child, else of the first `via_text_tag` child of its first
    `via_tag` child: stripped, None when blank or absent (one walk over the children)."""
    via = None
    for child in parent:
        child_tag = child.tag
        if child_tag == tag:
            return _text(child)
        if child_tag == via_tag and via is None:
            via = child
    if via is not None:
        for child in via:
            if child.tag == via_text_tag:
                return _text(child)
    return None


def _text(element: Element | None) -> str | None:
    if element is None:
        return None
    text = element.text
    return (text.strip() or None) if text else None


def _clean(text: str | None) -> str | None:
    return (text.strip() or None) if text else None


def _reference(text: str | None) -> str | None:
    """A reference, unless a placeholder for none."""
    if not text:
        return None
    text = text.strip()
    if len(text) in PLACEHOLDER_LENGTHS:
        return None if not text or text.upper() in PLACEHOLDERS else text
    return text or None


def _date_of(text: str | None) -> date | None:
    if text is None or len(text) < 10 or not text[:10].isascii():
        return None
    try:
        return date.fromisoformat(text[:10])
    except ValueError:
        return None


def _format(amount: int, places: int) -> str:
    sign = "-" if amount < 0 else ""
    whole, fraction = divmod(abs(amount), 10**places)
    return f"{sign}{whole}.{fraction:0{places}d}" if places else f"{sign}{whole}"
