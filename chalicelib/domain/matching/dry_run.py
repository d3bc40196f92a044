"""A rule's dry run, the columnar part (services/reconciliation_runs.dry_run reads the open records
and calls this; bench/near_misses.py times it): the active rules before it take their share of the
open records first, as in a run, then the rule; what it would match, and the near misses of the
records left open (domain/matching/near_misses.py) — of the sample it shows by default, of every
record left open when asked (`all_near_misses`: several seconds of CPU at 100,000 open records a
side, bench/RESULTS.md "Issue 37: near misses"). Partial payments as a run makes them: the same pass
(domain/matching/partial.with_partial_matches) after the whole matches, whole matches of records
paid in part (`allocated`) left out, each partial match's shares in its sample entry."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from chalicelib.domain.matching import match_records
from chalicelib.domain.matching.frames import engine_frames, rule_matches
from chalicelib.domain.matching.near_misses import currency_scales, dry_run_near_misses
from chalicelib.domain.matching.partial import with_partial_matches
from chalicelib.domain.rules import Rule


def dry_run_answer(side_a: pl.DataFrame, side_b: pl.DataFrame, before: Sequence[Rule], rule: Rule,
                   sample_size: int = 10, all_near_misses: bool = False,
                   allocated: Mapping[int, int] | None = None) -> dict[str, Any]:
    """The dry run's answer but its `open_records`, from frames as open_records_frame reads them
    (with `decimal_places`); `allocated`: what each record paid in part has allocated in the
    reconciliation (services/partial_payments.allocated_in)."""
    engine_a, engine_b = engine_frames(side_a, side_b)
    outcome = match_records(engine_a, engine_b, [*before, rule], explain_rule=rule.id)
    outcome = with_partial_matches(outcome, side_a, side_b, [*before, rule], allocated or {})
    return {**rule_matches(outcome, rule.id, sample_size, rule.definition.conditions),
            "near_misses": dry_run_near_misses(engine_a, engine_b, outcome.unmatched_a, outcome.unmatched_b, rule,
                                               currency_scales(side_a, side_b), sample_size,
                                               every_record=all_near_misses)}
