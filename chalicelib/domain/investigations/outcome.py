"""What an investigation returns: ranked hypotheses, the suggestion they add up to, and its error."""
from __future__ import annotations

from dataclasses import dataclass, field


class InvestigationInputError(ValueError):
    """The record frames break the engine's input contract (a programming error, not a client's)."""


@dataclass(frozen=True)
class Hypothesis:
    """One explanation of target record(s): the candidate record(s) that probably correspond.
    Differences are candidate minus target: `amount_difference` in minor units (a split: the sum
    of its records), `days_apart` in days (a split: its latest record's date)."""
    target_ids: tuple[int, ...]
    candidate_ids: tuple[int, ...]
    kind: str                        # "exact", "near_amount", "split" or "reference"
    amount_difference: int
    days_apart: int
    reference_similarity: float | None   # 0..1; None when a side has no reference
    description_similarity: float | None
    score: float                     # the raw model's output, 0..1 (see scoring.py)
    confidence: float                # `score` calibrated: the observed share of right answers


@dataclass(frozen=True)
class InvestigationOutcome:
    candidate_records_searched: int
    suggested_record_ids: list[int]  # the candidates of `proposal`, in its order: what accepting matches
    confidence_score: float          # of the best hypothesis; 0 without one
    recommendation_text: str         # proposes exactly `proposal`
    hypotheses: list[Hypothesis]     # best first; at most max_suggestions a target
    proposal: list[Hypothesis] = field(default_factory=list)  # at most one a target, no record twice, one currency

    @property
    def target_record_ids(self) -> list[int]:
        return [i for h in self.proposal for i in h.target_ids]
