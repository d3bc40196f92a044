"""Bodies and answers of period closes: /reconciliations/{id}/period_closes."""
from __future__ import annotations

from datetime import date
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from chalicelib.api.schemas.common import Id, Model, MoneyOut, RequestModel, Timestamp
from chalicelib.domain.period_closes import MAX_EXPLANATION, MAX_PERIOD_DAYS

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_EXPLANATION)]


class ExplanationIn(RequestModel):
    exception_id: Id
    explanation: Text


class ClosePeriodBody(RequestModel):
    """Close a period (inclusive dates, at most {days} days) of the reconciliation. `note` is the
    sign-off, required; an open exception with records dated in the period is explained by its
    own entry in `explanations`, else by the note.""".replace("{days}", str(MAX_PERIOD_DAYS))
    period_start: date = Field(description="The period's first day (YYYY-MM-DD), inside it")
    period_end: date = Field(description="The period's last day (YYYY-MM-DD), inside it")
    note: Text = Field(description="The sign-off: what the closer states of what is still open in the period")
    explanations: list[ExplanationIn] = Field(
        default_factory=list, max_length=1000,
        description="Explanations of open exceptions, one per exception; each must name an exception open with "
                    "records dated in the period")


class ReopenBody(RequestModel):
    reason: Text = Field(description="Why the period is reopened (kept on the close and in the audit trail)")


class OpenExceptionOut(Model):
    id: int
    url: str
    status: Literal["open", "investigating"]
    title: str
    data_stream_key: str
    record_count: int = Field(description="Its records dated in the period")
    money: list[MoneyOut] = Field(description="Those records' count and sums per currency (minor units)")
    explanation: str
    explained_by: Literal["exception", "note"] = Field(description="exception: its own explanation; note: the "
                                                                   "close's sign-off note")


class PeriodCloseOut(Model):
    id: int
    url: str
    reconciliation_id: int
    period_start: date
    period_end: date
    status: Literal["closed", "reopened"]
    note: str
    closed_by: str = Field(description="Who closed it: user:<id> or api_key:<id>")
    closed_at: Timestamp
    unmatched: list[MoneyOut] = Field(description="Unmatched records of the reconciliation's streams dated in the "
                                                  "period, at close: count and sums per currency (minor units)")
    open_exceptions: list[OpenExceptionOut] = Field(description="Open exceptions holding records dated in the "
                                                                "period, at close, each with its explanation")
    reopened_by: str | None
    reopened_at: Timestamp | None
    reopen_reason: str | None


class PeriodClosePage(Model):
    data: list[PeriodCloseOut]
    next_cursor: str | None
    limit: int
