"""Investigations, as `adapters/dynamodb/investigations.py` keeps them: status moves along the
domain's INVESTIGATION_STATUSES, listed per exception newest first."""
from __future__ import annotations

from dataclasses import dataclass, replace

from chalicelib.domain.errors import NotFound, TransitionRefused
from chalicelib.domain.investigations.investigation import INVESTIGATION_STATUSES, Investigation, InvestigationStatus
from tests.fakes._support import ConditionFailed, moved, newest_first_page, padded, stored_time


@dataclass
class _InvestigationRow:
    investigation: Investigation
    listed_active: bool = True  # in the adapter's index of active ones: from `add` until a move finishes it


class FakeInvestigationRepository:
    statuses, noun = INVESTIGATION_STATUSES, "investigation"

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int], _InvestigationRow] = {}

    def add(self, investigation: Investigation) -> None:
        key = (investigation.environment, investigation.id)
        if key in self.rows:
            raise ConditionFailed()  # the adapter's put_new lets it through
        self.rows[key] = _InvestigationRow(Investigation(
            environment=investigation.environment, id=investigation.id, exception_id=investigation.exception_id,
            reconciliation_id=investigation.reconciliation_id, status=investigation.status,
            created_at=stored_time(investigation.created_at), filter_params=dict(investigation.filter_params or {})))

    def get(self, environment: str, investigation_id: int) -> Investigation:
        row = self.rows.get((environment, investigation_id))
        if row is None:
            raise NotFound(f"investigation {investigation_id} not found")
        return row.investigation

    def of_exception(self, environment: str, exception_id: int, limit: int) -> list[Investigation]:
        """The exception's newest `limit` investigations, newest first."""
        entries = [(padded(i), r.investigation) for (env, i), r in self.rows.items()
                   if env == environment and r.investigation.exception_id == exception_id]
        return newest_first_page(f"investigations/{environment}/{exception_id}", entries, limit, None)[0]

    def active(self) -> list[Investigation]:
        """Pending and running investigations of every environment, in the order of "<environment>#<id>"."""
        entries = [(f"{env}#{padded(i)}", r.investigation) for (env, i), r in self.rows.items() if r.listed_active]
        return [investigation for _, investigation in sorted(entries, key=lambda e: e[0])]

    def mark_accepted(self, investigation: Investigation, match_id: int) -> None:
        """Once: a second accept is refused."""
        row = self.rows.get((investigation.environment, investigation.id))
        if row is None:
            return  # the adapter's update writes a bare item here, which no read understands
        if row.investigation.accepted_match_id is not None:
            raise TransitionRefused(f"investigation {investigation.id} was accepted already")
        row.investigation = replace(row.investigation, accepted_match_id=match_id)

    def move(self, investigation: Investigation, /, target: InvestigationStatus, **fields: object) -> Investigation:
        """Move to `target` if the stored status allows it (INVESTIGATION_STATUSES), setting `fields` with it."""
        row = self.rows.get((investigation.environment, investigation.id))
        if row is None or row.investigation.status not in self.statuses.sources_of(target):
            raise TransitionRefused(f"{self.noun} {investigation.id} cannot move to {target.value}")
        row.investigation = moved(row.investigation, target, fields)
        row.listed_active = row.listed_active and target not in self.statuses.finished
        return row.investigation
