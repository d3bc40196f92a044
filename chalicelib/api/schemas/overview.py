"""The answer of GET /overview: the web app's front page in one request."""
from __future__ import annotations

from pydantic import Field

from chalicelib.api.schemas.common import Model, ResponseModel, Timestamp
from chalicelib.api.schemas.file_imports import IngestionJobOut
from chalicelib.api.schemas.runs import RunOut
from chalicelib.api.schemas.service_levels import AgingOut


class AmountOut(ResponseModel):
    currency: str
    decimal_places: int
    amount: int = Field(description="Minor units at decimal_places: the sum of |credits - debits| of the exceptions")


class OpenExceptionsOut(ResponseModel):
    count: int = Field(description="Open and investigating exceptions")
    investigating: int = Field(description="Of `count`, the exceptions being investigated (the rest are open)")
    amounts: list[AmountOut] = Field(description="What they amount to, one entry per currency")
    mixed_currency: int = Field(description="Exceptions whose records are in several currencies (or whose "
                                "currency the next refresh, within the hour, records): counted, in no amount")


class ChangesOut(ResponseModel):
    runs_completed: int
    runs_failed: int
    exceptions_opened: int = Field(description="Opened or reopened since `since`")
    exceptions_closed: int = Field(description="Resolved or dismissed since `since`, and still so")


class ReconciliationOverviewOut(Model):
    id: int
    name: str
    run_type: str
    last_run: RunOut | None = Field(description="The current run, else the last one")
    run_before: RunOut | None = Field(description="The last run completed before `since`: the match rate then")
    open_exceptions: OpenExceptionsOut
    since: ChangesOut = Field(description="What changed since the overview's `since`")
    aging: AgingOut | None = Field(default=None, description="Its open exceptions by aging bucket and severity, "
                                   "and how many are overdue (docs/service-levels.md)")


class ImportInProgressOut(IngestionJobOut):
    data_stream_key: str | None = Field(description="The stream a file import feeds (none: a bank statement "
                                        "routed by account)")


class OverviewOut(Model):
    since: Timestamp = Field(description="A day before the answer: what `since` counts from")
    reconciliations: list[ReconciliationOverviewOut] = Field(description="Newest first, at most 100")
    more_reconciliations: bool
    imports_in_progress: list[ImportInProgressOut] = Field(
        description="File imports pending or processing, oldest first")
