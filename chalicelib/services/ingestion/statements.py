"""Bank statement imports (BAI2, camt.053, MT940), the statement's part of a file import's prepare
and finish (files.py): a statement's transactions become records of the `bank_feed` stream that
holds their account, and its balances are kept per statement day.

An import into a stream takes only that stream's account; any other account of the file is
listed as not imported. An import with no stream (`POST /file_imports`, or a statement dropped
straight under `drops/<environment>/`) routes each account to the `bank_feed` stream whose
`bank_account_id` matches it, both reduced by `account_routing_key` (docs/bank_statements.md);
it fails only when no account of the file matches. The balances wait with the import's chunks and
are written when it completes: a failed or cancelled import leaves none.
"""
from __future__ import annotations

from collections.abc import Iterable
from datetime import date
from typing import Any

from chalicelib.domain.balances import StatementDay
from chalicelib.domain.data_streams import account_routing_key
from chalicelib.domain.ingestion import IngestionJob, JobSource
from chalicelib.domain.parsers import FileRejected, ParsedFile, ParsedRow
from chalicelib.domain.parsers.statements import (
    ParsedStatements,
    StatementBalance,
    StatementParser,
    StatementTransaction,
    uniform_details,
)
from chalicelib.domain.period_closes import refusal
from chalicelib.services import period_closes
from chalicelib.services.ports import Ports

MAX_LISTED_ACCOUNTS = 50


def _parser(source: JobSource) -> StatementParser:
    """The format's parser, imported when a statement is parsed (not by every function)."""
    if source is JobSource.BAI2:
        from chalicelib.domain.parsers.bai2 import parse_bai2
        return parse_bai2
    if source is JobSource.CAMT053:
        from chalicelib.domain.parsers.camt053 import parse_camt053
        return parse_camt053
    from chalicelib.domain.parsers.mt940 import parse_mt940
    return parse_mt940


def parse_statement(ports: Ports, job: IngestionJob, data: bytes) -> ParsedFile:
    """The file's transactions as record items of the streams their accounts route to. The
    summary holds the warnings (lenient controls, accounts not imported) and the balances."""
    lenient = (job.options or {}).get("control_mismatch") == "warn"
    try:
        statements: ParsedStatements = _parser(job.source)(data, lenient)
    except FileRejected as rejected:  # one shape of details, whatever the format
        raise FileRejected(rejected.message, uniform_details(rejected.details)) from None
    routes = routes_of(ports, job, statements.accounts)
    missing = [a for a in statements.accounts if a not in routes]
    if not routes:
        where = f"data stream '{job.data_stream_key}'" if job.data_stream_key else "any bank_feed stream"
        raise FileRejected(f"no account of the file is held by {where}: its accounts are "
                           + ", ".join(missing[:MAX_LISTED_ACCOUNTS]) + "; set a stream's bank_account_id to one",
                           {"accounts_not_imported": missing[:MAX_LISTED_ACCOUNTS]})
    rows = [ParsedRow(line=tx.position, item=record_item(tx, routes[tx.account]))
            for tx in statements.transactions if tx.account in routes]
    warnings = list(statements.warnings)
    if missing:
        why = (f"data stream '{job.data_stream_key}' holds account {_stream_account(ports, job)}"
               if job.data_stream_key else "no bank_feed stream has it as its bank_account_id")
        warnings += [f"account {a}: not imported: {why}" for a in missing]
    summary: dict[str, Any] = {"balances": [
        _balance_json(routes[b.account], b) for b in statements.balances if b.account in routes]}
    if warnings:
        summary.update(warnings=warnings, warning_count=len(warnings),
                       accounts_not_imported=missing[:MAX_LISTED_ACCOUNTS])
    return ParsedFile(rows=rows, summary=summary)


def routes_of(ports: Ports, job: IngestionJob, accounts: Iterable[str]) -> dict[str, str]:
    """Each account of the file (as the file writes it) that a stream holds -> that stream's key.
    Both sides reduced by account_routing_key, once per account rather than per transaction."""
    normalised = {account: account_routing_key(account) for account in accounts}
    if job.data_stream_key is not None:
        stream = ports.data_streams.get(job.environment, job.data_stream_key)
        if stream.bank_account_id is None:  # a stream with no account takes a file of one account
            return {a: stream.key for a in normalised} if len(set(normalised.values())) == 1 else {}
        held = {account_routing_key(stream.bank_account_id): stream.key}
    else:
        held = {}
        for stream in ports.data_streams.bank_feeds(job.environment):
            if stream.bank_account_id is not None:
                held.setdefault(account_routing_key(stream.bank_account_id), stream.key)
    return {account: held[n] for account, n in normalised.items() if n in held}


def _stream_account(ports: Ports, job: IngestionJob) -> str:
    stream = ports.data_streams.get(job.environment, job.import_stream_key)
    return stream.bank_account_id or "(none)"


def record_item(tx: StatementTransaction, stream_key: str) -> dict[str, Any]:
    metadata = {k: v for k, v in tx.metadata.items() if v not in (None, "")}
    if tx.value_date is not None:
        metadata.setdefault("value_date", tx.value_date.isoformat())
    metadata.setdefault("account", tx.account)
    return {"data_stream_key": stream_key, "external_id": tx.external_id, "amount": tx.amount,
            "direction": tx.direction, "date": tx.booking_date.isoformat(), "currency": tx.currency,
            "decimal_places": tx.decimal_places, "description": tx.description or None, "metadata": metadata}


def _balance_json(stream_key: str, balance: StatementBalance) -> dict[str, Any]:
    return {"data_stream_key": stream_key, "date": balance.date.isoformat(), "statement_id": balance.statement_id,
            "account": balance.account, "currency": balance.currency, "decimal_places": balance.decimal_places,
            "opening_booked": balance.opening_booked, "closing_booked": balance.closing_booked,
            "closing_available": balance.closing_available}


def keep_balances(ports: Ports, job: IngestionJob, balances: list[dict[str, Any]]) -> list[str]:
    """Keep the statement days of a completed import (`balances_to_keep`); the warnings."""
    days, left_out = balances_to_keep(ports, job, balances)
    ports.balances.put_many(days)
    return left_out


def balances_to_keep(ports: Ports, job: IngestionJob,
                     balances: list[dict[str, Any]]) -> tuple[list[StatementDay], list[str]]:
    """The statement days of an import (each stream's days, as its file reported them), less those
    dated inside a closed period of a reconciliation of their stream (the chunks' guard,
    services/period_closes.py): those are left as they were, each named in the returned warnings.
    Written only once the import has completed (files.py `finish`)."""
    closures = period_closes.StreamClosures(ports, job.environment, {b["data_stream_key"] for b in balances})
    kept, left_out = [], []
    for b in balances:
        found = closures.holding(b["data_stream_key"], b["date"])
        if found is None:
            kept.append(b)
        else:
            left_out.append(f"balance of account {b['account']}: not kept: " + refusal(
                f"the statement day of data stream '{b['data_stream_key']}'", b["date"], found))
    return [StatementDay(
        environment=job.environment, data_stream_key=b["data_stream_key"], date=date.fromisoformat(b["date"]),
        statement_id=b["statement_id"], account=b["account"], currency=b["currency"],
        decimal_places=int(b["decimal_places"]), opening_booked=b["opening_booked"],
        closing_booked=b["closing_booked"], closing_available=b["closing_available"], file_import_id=job.id)
        for b in kept], left_out


def with_warnings(details: dict[str, Any], warnings: list[str]) -> dict[str, Any]:
    """A completed import's error_details with more warnings added (the parse's come first)."""
    if not warnings:
        return details
    shown_before = list((details.get("error_details") or {}).get("warnings", []))
    merged = {**(details.get("error_details") or {}), "warnings": shown_before + warnings}
    merged["warning_count"] = len(merged["warnings"])
    return {**details, "error_details": merged}
