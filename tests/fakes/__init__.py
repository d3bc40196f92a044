"""In-memory fakes of the repositories and ports of `chalicelib/adapters`, for service tests that
need the ports' behaviour but not DynamoDB, S3 or SQS: plain dicts and lists inside, no AWS.

Each fake has exactly the public methods of its adapter (names, signatures, return types), and
behaves as the adapter does: the same domain errors (NotFound, Conflict, TransitionRefused, ...),
the same ordering and paging (newest first, a cursor only when more follows, BadRequest for a
cursor of another list), the same conditional-write outcomes (claims once, moves only from the
statuses the domain's StatusMachine allows, chunks counted once), timestamps read back to the
millisecond, and time read from `chalicelib.domain.clock.utc_now`.

They cannot drift silently: `tests/contract/` runs one suite against each fake and against its
real adapter on moto, and checks that their public methods and signatures stay the same. When the
two disagree, the adapter is the truth.

`FakePorts()` wires them as the container wires the adapters (one set of counters; the runs' slot
and pending work live on the reconciliations' rows).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tests.fakes.api_keys import FakeApiKeyRepository
from tests.fakes.counters import FakeCounters
from tests.fakes.data_streams import FakeDataStreamRepository, FakePropertyDefinitionRepository
from tests.fakes.investigations import FakeInvestigationRepository
from tests.fakes.jobs import FakeIngestionJobRepository
from tests.fakes.matches import FakeMatchRepository
from tests.fakes.mirror import FakeAnalyticsMirror
from tests.fakes.reconciliation_exceptions import FakeExceptionRepository
from tests.fakes.reconciliations import FakeReconciliationRepository, FakeReconciliationRuleRepository
from tests.fakes.records import FakeRecordRepository, FakeRecordStore
from tests.fakes.runs import FakeRunRepository
from tests.fakes.storage import FakePayloadStore, FakeRunFiles, FakeWorkQueue
from tests.fakes.workflows import FakeWorkflows

__all__ = [
    "FakeApiKeyRepository", "FakeCounters", "FakeDataStreamRepository", "FakeIngestionJobRepository",
    "FakeInvestigationRepository", "FakePayloadStore", "FakePorts", "FakePropertyDefinitionRepository",
    "FakeReconciliationRepository", "FakeReconciliationRuleRepository", "FakeRunFiles", "FakeRunRepository",
    "FakeWorkQueue",
    "FakeMatchRepository", "FakeRecordRepository", "FakeRecordStore",
    "FakeAnalyticsMirror", "FakeExceptionRepository", "FakeWorkflows",
]


@dataclass
class FakePorts:
    """One of each fake, wired together; attribute names follow the container's."""
    counters: FakeCounters = field(default_factory=FakeCounters)
    api_keys: FakeApiKeyRepository = field(default_factory=FakeApiKeyRepository)
    ingestion_jobs: FakeIngestionJobRepository = field(default_factory=FakeIngestionJobRepository)
    investigations: FakeInvestigationRepository = field(default_factory=FakeInvestigationRepository)
    payloads: FakePayloadStore = field(default_factory=FakePayloadStore)
    run_files: FakeRunFiles = field(default_factory=FakeRunFiles)
    bulk_queue: FakeWorkQueue = field(default_factory=FakeWorkQueue)
    investigation_queue: FakeWorkQueue = field(default_factory=FakeWorkQueue)

    def __post_init__(self) -> None:
        self.data_streams = FakeDataStreamRepository(self.counters)
        self.property_definitions = FakePropertyDefinitionRepository(self.counters)
        self.reconciliations = FakeReconciliationRepository(self.counters)
        self.reconciliation_rules = FakeReconciliationRuleRepository(self.counters)
        self.runs = FakeRunRepository(self.reconciliations)
        self.record_store = FakeRecordStore()  # the record items the records and matches fakes share
        self.records = FakeRecordRepository(self.record_store, self.data_streams, self.ingestion_jobs)
        self.matches = FakeMatchRepository(self.record_store)
