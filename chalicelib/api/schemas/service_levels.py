"""Bodies and answers of a reconciliation's service level policy and routing rules
(docs/service-levels.md). The rules between fields are checked by domain/service_levels.py and
domain/routing.py; these models check each field."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from chalicelib.api.schemas.common import Id, Model, Name, RequestModel, Timestamp, unchanged_when_absent
from chalicelib.domain.service_levels import MAX_AGE_DAYS, MAX_AMOUNT, MAX_DUE_HOURS

SeverityName = Literal["low", "medium", "high", "critical"]
AgeBucketName = Literal["0_1d", "1_3d", "3_7d", "7_30d", "30d_plus"]
RoleName = Literal["viewer", "preparer", "approver", "admin"]
StrategyName = Literal["round_robin", "least_loaded"]
CurrencyKey = Annotated[str, StringConstraints(pattern=r"^([A-Z]{3}|\*)$")]


class AmountThresholds(Model):
    """The least |credits - debits| of each severity, in minor units at amount_decimal_places."""
    medium: int | None = Field(default=None, ge=0, le=MAX_AMOUNT)
    high: int | None = Field(default=None, ge=0, le=MAX_AMOUNT)
    critical: int | None = Field(default=None, ge=0, le=MAX_AMOUNT)


class AgeThresholds(Model):
    """The least age of each severity, in whole days since the exception's oldest record's date."""
    medium: int | None = Field(default=None, ge=0, le=MAX_AGE_DAYS)
    high: int | None = Field(default=None, ge=0, le=MAX_AGE_DAYS)
    critical: int | None = Field(default=None, ge=0, le=MAX_AGE_DAYS)


class DueInHours(Model):
    """Hours from an exception's opening (or reopening) to its due time, by severity; a more severe one
    is never due later."""
    low: int = Field(ge=1, le=MAX_DUE_HOURS)
    medium: int = Field(ge=1, le=MAX_DUE_HOURS)
    high: int = Field(ge=1, le=MAX_DUE_HOURS)
    critical: int = Field(ge=1, le=MAX_DUE_HOURS)


class ServiceLevelsBody(RequestModel):
    amount_decimal_places: int = Field(default=2, ge=0, le=18, description="The scale of every amount threshold")
    amount_thresholds: dict[CurrencyKey, AmountThresholds] = Field(
        default_factory=dict, max_length=50, description="By currency of the exception (its records' one "
        "currency: an exception that mixes currencies is rated by age only), \"*\" for any currency not listed")
    age_thresholds: AgeThresholds = Field(default_factory=AgeThresholds)
    due_in_hours: DueInHours
    expected_version: int | None = Field(default=None, ge=0, description="The version read before (0: the "
                                         "default policy): 409 when it changed since; omit to overwrite")


class ServiceLevelsOut(Model):
    reconciliation_id: int
    default: bool = Field(description="True: the reconciliation has no policy of its own, these are the defaults")
    amount_decimal_places: int
    amount_thresholds: dict[str, AmountThresholds]
    age_thresholds: AgeThresholds
    due_in_hours: DueInHours
    version: int
    updated_at: Timestamp | None


class AgingMoneyOut(Model):
    currency: str
    decimal_places: int = Field(description="Of `amount`: the largest of the bucket's exceptions in this currency")
    amount: int = Field(description="Minor units: each exception's size (|credits - debits| of its records) summed")
    count: int = Field(description="Exceptions summed here")


class AgingOut(Model):
    """The open and investigating exceptions of the reconciliation, now."""
    count: int
    overdue: int
    by_age_bucket: dict[AgeBucketName, int]
    by_severity: dict[SeverityName, int]
    amounts_by_age_bucket: dict[AgeBucketName, list[AgingMoneyOut]] = Field(
        default_factory=dict, description="What each bucket's exceptions amount to, per currency (never one currency "
                                          "added to another)")
    unpriced: int = Field(default=0, description="Exceptions counted in their bucket but in no amount: their records "
                                                 "are in several currencies, or their currency is not recorded yet")


class TeamByRole(Model):
    role: RoleName = Field(description="Every user with exactly this role (not deactivated)")


class TeamByUsers(Model):
    user_ids: list[Id] = Field(min_length=1, max_length=500, description="These users of the environment (those not "
                               "deactivated)")


TeamBody = TeamByRole | TeamByUsers


class RoutingRuleBody(RequestModel):
    name: Name
    strategy: StrategyName = Field(description="round_robin: the team in turn (by user id); least_loaded: the member "
                                   "with the fewest open exceptions assigned (ties in turn)")
    team: TeamBody = Field(description="A role, or a list of user ids")
    position: int = Field(default=0, ge=0, le=1000, description="The first rule that applies decides (lowest "
                          "position, then oldest)")
    data_stream_key: str | None = Field(default=None, max_length=200, description="Only this stream's exceptions")
    severity: SeverityName | None = Field(default=None, description="Only exceptions of this severity when opened")
    enabled: bool = True


class UpdateRoutingRuleBody(RequestModel):
    name: Name | None = unchanged_when_absent()
    strategy: StrategyName | None = unchanged_when_absent()
    team: TeamBody | None = unchanged_when_absent("Replaces the team")
    position: int | None = Field(default=None, ge=0, le=1000, description="Absent or null: unchanged")
    data_stream_key: str | None = Field(default=None, max_length=200, description="null: any stream")
    severity: SeverityName | None = Field(default=None, description="null: any severity")
    enabled: bool | None = unchanged_when_absent()


class TeamOut(Model):
    role: RoleName | None
    user_ids: list[int]


class RoutingRuleOut(Model):
    id: int
    reconciliation_id: int
    name: str
    strategy: StrategyName
    position: int
    team: TeamOut
    data_stream_key: str | None
    severity: SeverityName | None
    enabled: bool
    created_at: Timestamp | None
    updated_at: Timestamp | None
    version: int


class RoutingRuleList(Model):
    data: list[RoutingRuleOut]
