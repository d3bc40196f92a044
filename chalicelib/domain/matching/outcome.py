"""What a matching run returns, kept columnar, and the engine's errors."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from chalicelib.domain.errors import DomainError

MATCH_SCHEMA = {"match_no": pl.Int64, "rule_id": pl.Int64, "status": pl.Utf8, "group_key": pl.Utf8,
                "differences": pl.Utf8}
MEMBER_SCHEMA = {"match_no": pl.Int64, "side": pl.Utf8, "record_id": pl.Int64}


class CandidateExplosion(DomainError):
    """A rule would compare more pairs of records than the engine allows: too broad to run."""

    def __init__(self, rule_id: int, pairs: int, limit: int) -> None:
        super().__init__(f"rule {rule_id} would compare {pairs:,} candidate pairs, more than the limit of "
                         f"{limit:,}; add an equality condition or narrow its windows")
        self.rule_id, self.pairs, self.limit = rule_id, pairs, limit


class MatchingInputError(ValueError):
    """The record frames break the engine's input contract (a programming error, not a client's)."""


@dataclass(frozen=True)
class MatchOutcome:
    matches: pl.DataFrame          # match_no, rule_id, status, group_key, differences
    members: pl.DataFrame          # match_no, side ("a"/"b"), record_id
    rule_summary: dict[str, Any]   # {str(rule_id): matched records, "unmatched": {"side_a": n, "side_b": n}}
    unmatched_a: pl.Series         # ids of side-A records left open, in input order
    unmatched_b: pl.Series
    # match_records(explain_rule=...): per condition of that rule, the candidate pairs it alone excludes
    condition_exclusions: tuple[int | None, ...] | None = None

    def matched_ids(self, side: str | None = None) -> pl.Series:
        members = self.members if side is None else self.members.filter(pl.col("side") == side)
        return members["record_id"]

    @property
    def match_count(self) -> int:
        return self.matches.height

    def count_by_status(self) -> dict[str, int]:
        counts = self.matches.group_by("status").len()
        return dict(zip(counts["status"].to_list(), counts["len"].to_list()))
