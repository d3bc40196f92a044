"""Rate streams: reference exchange rates an environment imports (CSV of date, base, quote, rate)
for the rules that match records of different currencies (docs/currencies.md). The API reaches
them here; a run, a dry run and near misses get each converting rule's converted amounts from
`add_conversions`, called where the open records are read (reconciliation_runs.open_frames)."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import FieldError, NotFound, ValidationFailed, shown
from chalicelib.domain.fx import KEY_PATTERN, KEY_RULE, RateRow, RateStream, RowResult, parse_rates_csv
from chalicelib.domain.rules import RuleDefinition

if TYPE_CHECKING:
    from chalicelib.domain.matching.frames import Frame
    from chalicelib.domain.rules import Rule
    from chalicelib.services.ports import Ports


class RateStreams(Protocol):
    def add(self, stream: RateStream) -> None: ...
    def get(self, environment: str, key: str) -> RateStream: ...
    def streams(self, environment: str) -> list[RateStream]: ...
    def rates(self, environment: str, key: str) -> list[RateRow]: ...
    def put_rates(self, stream: RateStream, rates: Iterable[RateRow]) -> None: ...
    def count_rates(self, stream: RateStream, added: int) -> RateStream: ...


def store(ports: Ports) -> RateStreams:
    if ports.rate_streams is None:
        raise RuntimeError("rate streams are not wired in these ports")
    return ports.rate_streams


def create(ports: Ports, environment: str, *, key: str, name: str, description: str | None) -> RateStream:
    if not KEY_PATTERN.match(key):
        raise ValidationFailed.on("key", KEY_RULE)
    stream = RateStream(environment=environment, key=key, name=name, description=description,
                        created_at=utc_now())
    store(ports).add(stream)
    return stream


def import_rates(ports: Ports, environment: str, key: str, text: str) -> dict[str, Any]:
    """Check every row of a rates CSV; when all pass, store them (a rate of a (date, base, quote)
    already there is replaced) and answer each row's result; when any fails, store nothing and
    refuse the import (422) naming each failing row and field: a rate table is never half loaded."""
    streams = store(ports)
    stream = streams.get(environment, key)
    results, unreadable = parse_rates_csv(text)
    if unreadable:
        raise ValidationFailed.on("csv", unreadable)
    failed = [r for r in results if r.rate is None]
    if failed:
        raise ValidationFailed([FieldError(f"csv.rows[{r.row}].{e.field}", e.message)
                                for r in failed for e in r.errors])
    before = {(r.day, r.base, r.quote): r.rate for r in streams.rates(environment, key)}
    rows = list({(r.rate.day, r.rate.base, r.rate.quote): r.rate for r in results if r.rate is not None}.values())
    streams.put_rates(stream, rows)
    created = sum(1 for r in rows if (r.day, r.base, r.quote) not in before)
    stream = streams.count_rates(stream, created)
    return {"rate_stream": stream, "rows": len(results), "created": created,
            "replaced": sum(1 for r in rows if before.get((r.day, r.base, r.quote), r.rate) != r.rate),
            "results": [_result(r, before) for r in results]}


def _result(result: RowResult, before: dict[Any, Any]) -> dict[str, Any]:
    row = result.rate
    assert row is not None
    earlier = before.get((row.day, row.base, row.quote))
    status = "created" if earlier is None else "unchanged" if earlier == row.rate else "replaced"
    return {"row": result.row, "status": status, **row.as_body(),
            "previous_rate": earlier.text if earlier is not None and earlier != row.rate else None}


def rates(ports: Ports, environment: str, key: str, base: str | None = None, quote: str | None = None
          ) -> list[RateRow]:
    streams = store(ports)
    streams.get(environment, key)
    return [r for r in streams.rates(environment, key)
            if (base is None or r.base == base) and (quote is None or r.quote == quote)]


def check_rule_streams(ports: Ports, environment: str, definition: RuleDefinition) -> None:
    """A converting rule names a rate stream of its own environment (422 otherwise)."""
    conversion = definition.conversion
    if conversion is None or ports.rate_streams is None:
        return
    try:
        ports.rate_streams.get(environment, conversion.rate_stream_key)
    except NotFound:
        raise ValidationFailed.on("conversion.rate_stream_key",
                                  f"no rate stream with key '{shown(conversion.rate_stream_key)}'") from None


def add_conversions(ports: Ports, environment: str, rules: Sequence[Rule], side_a: Frame, side_b: Frame
                    ) -> tuple[Frame, Frame]:
    """The open records with each converting rule's converted amounts (domain/matching/conversion.py),
    from the rates of the environment's own streams; a stream gone leaves its rule no rate."""
    from chalicelib.domain.matching import conversion

    wanted = {r.definition.conversion.rate_stream_key for r in conversion.converting(rules)
              if r.definition.conversion is not None}
    if not wanted:
        return side_a, side_b
    loaded = {}
    for key in sorted(wanted):
        try:
            loaded[key] = conversion.rates_frame(store(ports).rates(environment, key)
                                                 if store(ports).get(environment, key) else [])
        except NotFound:
            loaded[key] = conversion.rates_frame([])
    return (conversion.add_conversions(side_a, "a", rules, loaded),
            conversion.add_conversions(side_b, "b", rules, loaded))


def check_conversion_change(ports: Ports, environment: str, changes: dict[str, Any]) -> None:
    """A PATCH giving a conversion names a rate stream of its own environment (422 otherwise)."""
    given = changes.get("conversion")
    key = given.get("rate_stream_key") if isinstance(given, dict) else None
    if ports.rate_streams is None or not isinstance(key, str) or not KEY_PATTERN.match(key):
        return  # nothing to look up; validate_rule says what is wrong with the rest
    try:
        ports.rate_streams.get(environment, key)
    except NotFound:
        raise ValidationFailed.on("conversion.rate_stream_key", f"no rate stream with key '{shown(key)}'") from None
