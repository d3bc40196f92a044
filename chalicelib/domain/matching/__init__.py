"""The matching engine of reconciliations: pure, columnar (polars and numpy), deterministic.

    outcome = match_records(side_a, side_b, rules, only_new=False)

Input: one polars frame per side, one row per open record: `id` Int64 (unique across both sides),
`amount` Int64 (minor units, never negative), `direction` ("credit"/"debit"), `date` Date,
`currency`, `description`, `external_id`, a Utf8 column `metadata.<key>` per metadata key a rule
uses, and, for continuous matching, the Boolean `is_new`. Amounts stay integers throughout.

Output (`MatchOutcome`): `matches` (match_no, rule_id, status, group_key, differences as JSON),
`members` (match_no, side, record_id), `rule_summary`, and the ids left open on each side.

The waterfall. Active rules run in (priority, id) order; each sees only the records no earlier
rule consumed. A rule is the AND of its conditions, and its work runs in four steps:

1. Units. A unit is one record, or, on a grouped side with a group key, one group: its amount
   is |signed sum| (credits +, debits -), its direction the sign (zero counts as credit), its
   date the latest of its members (a group is whole only once its last record is in), a text
   value the members' common one (null when they differ). Groups mixing currencies never match;
   records with a null group-by value join no group. A unit's uid is its (lowest) record id.
2. Candidates. Every equality condition (text equals after normalization, amount, date,
   currency, direction equals; direction opposite as equality with side B flipped) is a join
   key. Units are numbered by key block, then one window condition (amount or date within,
   whichever yields fewer pairs) becomes a range: each side-A unit gets the slice of side B,
   sorted by (block, value), that it may pair with, by `searchsorted` on one packed integer.
   The pair count is known before any pair is built; above `max_candidate_pairs` the rule is
   refused with `CandidateExplosion`. Without key or window this is the guarded cross product.
3. Checks. The other windows, `contains` and `similar` (rapidfuzz token_set_ratio / 100 on the
   normalized texts, words in any order; see candidates.similarity) are evaluated on the pairs,
   vectorised. Nulls and empty texts never match.
4. Assignment, exclusive, as the greedy over pairs ordered by (amount difference, date
   difference, side-A uid, side-B uid). Its first stretch, the pairs with no difference at all,
   is one join: inside a block of equal (keys, amount, date) the k-th uid of side A pairs with
   the k-th of side B (duplicate-safe and exact, valid when no text check can veto a pair).
   The rest runs in rounds: every pair that is the best remaining pair of both its units is
   taken (the sequential greedy would take it too), their other pairs dropped, repeat.

Grouped sides with no group key: a bounded subset search (`subset.py`): for each counterpart
(at most 1,000 a rule, in uid order), the 20 nearest-in-date free records of its currency and
one direction that pass the rule's other conditions, searched by meet in the middle for the
subset whose sum is closest to the counterpart's amount within tolerance. Always `proposed`.
A many_to_many rule with a key on one side only searches subsets of the keyless side against
the groups of the other; with no key at all it behaves as a keyless many_to_one.

Continuous mode (`only_new=True`): only pairs with at least one new unit count (new A against
all open B, old A against new B). For one_to_one the big pool is first cut down to the new
records' plain equality keys by a semi-join, so nothing heavy is built over the open pool.

Determinism: every order the engine relies on ends on unique ids, so row order in the input
never changes the result. Matches are numbered by rule order, then by lowest side-A id.

Past one function (`partition.py`): a run split by a blocking key derived from the rules (a hash
of the equality conditions every rule shares, else date or amount ranges that overlap by the
widest window), each partition matched alone by `match_records`, the outcomes merged in the
engine's own order; identical to one piece on a hash plan, and on a range plan unless the merge
had a conflict to settle (see there).
"""
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names, for type checkers and readers
    from chalicelib.domain.matching.engine import MAX_CANDIDATE_PAIRS, RECORD_SCHEMA, match_records
    from chalicelib.domain.matching.outcome import CandidateExplosion, MatchingInputError, MatchOutcome

# Loaded on first use (PEP 562): the package also holds frames.py, which a run's persist and undo
# import without needing the engine (and its numpy and rapidfuzz).
_EXPORTS = {"match_records": "engine", "MAX_CANDIDATE_PAIRS": "engine", "RECORD_SCHEMA": "engine",
            "MatchOutcome": "outcome", "CandidateExplosion": "outcome", "MatchingInputError": "outcome"}
__all__ = ["match_records", "MAX_CANDIDATE_PAIRS", "RECORD_SCHEMA", "MatchOutcome", "CandidateExplosion",
           "MatchingInputError"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
