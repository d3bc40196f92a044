"""Bodies and answers of rule suggestions (docs/learned-rules.md)."""
from __future__ import annotations

from typing import Any

from pydantic import Field

from chalicelib.api.schemas.common import Model, RequestModel, unchanged_when_absent
from chalicelib.api.schemas.reconciliation_rules import ReconciliationRuleOut, RuleFlag, RuleName, RulePriority
from chalicelib.services.rule_suggestions import DEFAULT_SUGGESTIONS, MAX_DECISIONS, MAX_SUGGESTIONS


class SuggestRulesBody(RequestModel):
    max_decisions: int = Field(default=MAX_DECISIONS, ge=1, le=MAX_DECISIONS, description=(
        "The newest manual matches (accepted investigations among them) read as decisions"))
    max_suggestions: int = Field(default=DEFAULT_SUGGESTIONS, ge=1, le=MAX_SUGGESTIONS, description=(
        "Suggestions measured and kept, the best first"))


class RuleSuggestionsOut(Model):
    reconciliation_id: int
    decisions_read: int = Field(description="Manual matches whose records it read (at most max_decisions)")
    decisions_by_kind: dict[str, int] = Field(description="manual: a person's match; investigation: an accepted "
                                                          "investigation's")
    matches_scanned: int = Field(description="Matches of the reconciliation listed to find them, newest first")
    scan_complete: bool = Field(description="Whether the listing reached the reconciliation's oldest match")
    open_records: dict[str, int] | None = Field(description="Open records of each side the dry runs read; null "
                                                            "without decisions")
    replaced: int = Field(description="Proposed rules of an earlier computation removed")
    data: list[ReconciliationRuleOut] = Field(description="The proposed rules, best first (evidence.rank)")


class AcceptRuleBody(RequestModel):
    """Checked with the rule by domain.rules.validate_rule (422 naming the field)."""
    priority: RulePriority = unchanged_when_absent(
        "Where it runs among the active rules (lower first); default: the priority it was proposed with")
    name: RuleName = unchanged_when_absent("Rename it (default: the name it was proposed with)")
    auto_confirm: RuleFlag = unchanged_when_absent("Default: as proposed (true)")

    def given(self) -> dict[str, Any]:
        """The fields the client sent, as sent."""
        return self.model_dump(exclude_unset=True)
