"""Every key of the single table is built here, and nowhere else: the items, who writes and who
reads each, are in docs/access-patterns.md (a test holds it to these builders)."""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from datetime import date
from typing import Any


@dataclass(frozen=True)
class Index:
    """A key of the table: its own (`name` None) or a global secondary index's, named once here
    (infra/template.yaml declares the same; a test holds the two together)."""
    name: str | None
    partition_key: str
    sort_key: str

    def key(self, partition: str, sort: str) -> dict[str, str]:
        """The attributes that list an item in this index."""
        return {self.partition_key: partition, self.sort_key: sort}

    def assignment(self, placeholder: str) -> str:
        """`gsiNpk = :<p>_pk, gsiNsk = :<p>_sk`: an update expression's SET of an entry in this index,
        whose values `assigned_values` gives."""
        return f"{self.partition_key} = {placeholder}_pk, {self.sort_key} = {placeholder}_sk"

    def assigned_values(self, entry: dict[str, str], placeholder: str) -> dict[str, str]:
        """The values of `assignment(placeholder)` for an item's `entry` (its key in this index)."""
        return {f"{placeholder}_pk": entry[self.partition_key], f"{placeholder}_sk": entry[self.sort_key]}

    @property
    def attributes(self) -> str:
        """`gsiNpk, gsiNsk`: what an update expression REMOVEs to take an item out of this index."""
        return f"{self.partition_key}, {self.sort_key}"


# The table's own key, and its global secondary indexes (in the template's order).
BASE_TABLE = Index(None, "pk", "sk")
GSI1 = Index("gsi1", "gsi1pk", "gsi1sk")
GSI2 = Index("gsi2", "gsi2pk", "gsi2sk")
GSI3 = Index("gsi3", "gsi3pk", "gsi3sk")
GSI4 = Index("gsi4", "gsi4pk", "gsi4sk")
GSI5 = Index("gsi5", "gsi5pk", "gsi5sk")
GLOBAL_SECONDARY_INDEXES = (GSI1, GSI2, GSI3, GSI4, GSI5)

ID_WIDTH = 12
GLOBAL_COUNTER_PK = "GLOBAL#COUNTER"


def _id(value: int) -> str:
    return str(value).zfill(ID_WIDTH)


def record_sort_key(record_id: int) -> str:
    """A record's sort key in every index listing records (ids in string order)."""
    return _id(record_id)


def env_prefix(environment: str) -> str:
    return f"E#{environment}"


# Counters -------------------------------------------------------------------------------

def counter(environment: str, entity: str) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#COUNTER", "sk": entity}


def global_counter(entity: str) -> dict[str, str]:
    return {"pk": GLOBAL_COUNTER_PK, "sk": entity}


# API keys -------------------------------------------------------------------------------

API_KEYS_INDEX_PK = "KEYS"


def api_key(key_hash: str) -> dict[str, str]:
    return {"pk": f"KEY#{key_hash}", "sk": "KEY"}


def api_key_index(key_id: int) -> dict[str, str]:
    return GSI1.key(API_KEYS_INDEX_PK, _id(key_id))


# Users ----------------------------------------------------------------------------------
# A user by (environment, id); the provider's subject and the email each name one user, written
# before the user with conditions that keep them so (adapters/dynamodb/users.py `add`).

def user(environment: str, user_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#USER#{_id(user_id)}", "sk": "USER"}


def users_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#USERS"


def user_index(environment: str, user_id: int) -> dict[str, str]:
    return GSI1.key(users_index_pk(environment), _id(user_id))


def user_subject(subject: str) -> dict[str, str]:
    """Every request of a person reads it (before its environment is known): one item per subject."""
    return {"pk": f"SUB#{subject}", "sk": "SUB"}


def user_email_guard(environment: str, email: str) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#EMAIL#{email}", "sk": "EMAIL"}


# Data streams ---------------------------------------------------------------------------

def data_stream(environment: str, key: str) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#DS#{key}", "sk": "DS"}


def data_streams_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#DS"


CHANGED_BLOCK_PREFIX = "CHANGED#"


def changed_record_block(environment: str, key: str, block: int) -> dict[str, str]:
    """In the stream's partition: some record of the stream with an id in `block` changed since its
    import wrote it (domain/record_changes.py)."""
    return {"pk": data_stream(environment, key)["pk"], "sk": f"{CHANGED_BLOCK_PREFIX}{_id(block)}"}


def data_stream_index(environment: str, stream_id: int) -> dict[str, str]:
    return GSI1.key(data_streams_index_pk(environment), _id(stream_id))


# Rate streams: reference exchange rates (docs/currencies.md) ---------------------------------

RATE_PREFIX = "RATE#"


def rate_stream(environment: str, key: str) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#RS#{key}", "sk": "RS"}


def rate_streams_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#RS"


def rate_stream_index(environment: str, key: str) -> dict[str, str]:
    return GSI1.key(rate_streams_index_pk(environment), key)


def rate(environment: str, key: str, base: str, quote: str, day: date) -> dict[str, str]:
    """One day's rate of a pair, in its stream's partition: a stream's rates are one query."""
    return {"pk": rate_stream(environment, key)["pk"], "sk": f"{RATE_PREFIX}{base}#{quote}#{day.isoformat()}"}


# Property definitions -------------------------------------------------------------------

PROPERTY_GUARD_PREFIX = "PDKEY#"


def bank_account_guard(environment: str, routing_key: str) -> dict[str, str]:
    """The guard a bank_feed stream holds on its account (domain/data_streams.account_routing_key)."""
    return {"pk": f"{env_prefix(environment)}#BANKACCT#{routing_key}", "sk": "BANKACCT"}


def property_key_guard(environment: str, stream_key: str, property_key: str) -> dict[str, str]:
    return {"pk": data_stream(environment, stream_key)["pk"], "sk": f"{PROPERTY_GUARD_PREFIX}{property_key}"}


def property_definition(environment: str, definition_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#PD#{_id(definition_id)}", "sk": "PD"}


def property_definitions_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#PD"


def property_definitions_of_stream_prefix(stream_key: str) -> str:
    return f"{stream_key}#"


def property_definition_index(environment: str, stream_key: str, definition_id: int) -> dict[str, str]:
    return GSI1.key(property_definitions_index_pk(environment),
                    f"{property_definitions_of_stream_prefix(stream_key)}{_id(definition_id)}")


# Records --------------------------------------------------------------------------------

def record(environment: str, record_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#REC#{_id(record_id)}", "sk": "REC"}


# A stream's records are spread over this many gsi1 partitions (`#<n>`, from the record id), so
# that no partition takes more than 1/16 of a stream's ingestion (DynamoDB gives a partition 1,000
# write units a second); ids modulo 16 spread a job's block of consecutive ids evenly.
RECORDS_OF_STREAM_SHARDS = 16


def records_of_stream_pk(environment: str, stream_key: str) -> str:
    """The listing of a stream's records as written before they were sharded: its readers still
    read it (`records_of_stream_shards`), so records ingested before then stay visible."""
    return f"{env_prefix(environment)}#DS#{stream_key}#REC"


def record_of_stream_shard(environment: str, stream_key: str, record_id: int) -> str:
    """The gsi1 partition a record of the stream is listed in."""
    return _shard_by_id(records_of_stream_pk(environment, stream_key), RECORDS_OF_STREAM_SHARDS, record_id)


def records_of_stream_shards(environment: str, stream_key: str) -> list[str]:
    """Every gsi1 partition listing a stream's records: the shards, then the unsharded listing of
    records written before the shards were (a reader merges them by id)."""
    listing = records_of_stream_pk(environment, stream_key)
    return [*_shards(listing, RECORDS_OF_STREAM_SHARDS), listing]


def stream_writer_lease(environment: str, stream_key: str) -> dict[str, str]:
    """The lease one ingestion job at a time holds to write a stream's external_id guards."""
    return {"pk": data_stream(environment, stream_key)["pk"], "sk": "WRITER"}


def external_id_ranges(environment: str, stream_key: str) -> dict[str, str]:
    """Where a stream's guarded external_ids may lie (chunk.py `WriterLeases.may_be_claimed`):
    written at the stream's creation, widened by its writer lease's holder before guards are
    written, never narrowed. A stream created before it has none: its guards are all read."""
    return {"pk": data_stream(environment, stream_key)["pk"], "sk": "EXTRANGES"}


def records_with_status_pk(environment: str, status: str) -> str:
    """The status's list, unsharded: where records claimed before issue 30 still sit, and the
    name its cursors carry."""
    return f"{env_prefix(environment)}#ST#{status}"


# A run claims a record a write into its status's list: spread over this many partitions (by the
# record id) so that none takes more than 1/16 of a run's claims (DynamoDB's 1,000 writes a second
# a partition would cap a run at some 1,000 matched records a second).
RECORD_STATUS_SHARDS = 16


def records_with_status_partitions(environment: str, status: str) -> list[str]:
    """Every partition of the status's list: its shards, and the unsharded one, which records
    claimed before the shards keep until they next change status."""
    listing = records_with_status_pk(environment, status)
    return _shards(listing, RECORD_STATUS_SHARDS) + [listing]


# A stream's open records are spread over OPEN_RECORD_SHARDS partitions of gsi5 by record id, so
# that no index partition takes more than 1/16 of a stream's ingestion (DynamoDB's 1,000 writes a
# second a partition would otherwise cap a stream near 1,000 records a second).
OPEN_RECORD_SHARDS = 16


def open_records_of_stream_pk(environment: str, stream_key: str) -> str:
    """The unsharded partition: records written before the shards still sit in it."""
    return f"{env_prefix(environment)}#DS#{stream_key}#OPEN"


def open_record_shard(environment: str, stream_key: str, record_id: int) -> str:
    return _shard_by_id(open_records_of_stream_pk(environment, stream_key), OPEN_RECORD_SHARDS, record_id)


def open_records_of_stream_partitions(environment: str, stream_key: str) -> list[str]:
    """Every gsi5 partition a stream's open records sit in: its shards, and the unsharded one, which
    keeps the records written before the shards (until a claim moves them) visible."""
    base = open_records_of_stream_pk(environment, stream_key)
    return _shards(base, OPEN_RECORD_SHARDS) + [base]


def open_record_index(environment: str, stream_key: str, record_id: int) -> dict[str, str]:
    """gsi5, sparse: a record sits in it while some reconciliation of its stream has not matched it."""
    return GSI5.key(open_record_shard(environment, stream_key, record_id), _id(record_id))


def matched_record_index(environment: str, status: str, record_id: int) -> dict[str, str]:
    """gsi4, sparse: a record sits in it, under its status, once some reconciliation matched it."""
    return GSI4.key(_shard_by_id(records_with_status_pk(environment, status), RECORD_STATUS_SHARDS, record_id),
                    _id(record_id))


def status_indexes(status: str) -> tuple[tuple[Index, bool], ...]:
    """Whether a record of `status` sits in each index that follows its status: the matched-records
    index (gsi4) unless it is unreconciled, the open-records index (gsi5) unless it is reconciled.
    The one place of that rule (a record's item, and every write that changes its status)."""
    return (GSI4, status != "unreconciled"), (GSI5, status != "reconciled")


def record_indexes(environment: str, record_id: int, stream_key: str, status: str) -> dict[str, str]:
    keys = GSI1.key(record_of_stream_shard(environment, stream_key, record_id), _id(record_id))
    held = dict(status_indexes(status))
    if held[GSI4]:
        keys.update(matched_record_index(environment, status, record_id))
    if held[GSI5]:
        keys.update(open_record_index(environment, stream_key, record_id))
    return keys


EXTERNAL_ID_GUARD_PREFIX = "DS#"


def external_id_guards_pk(environment: str, external_id: str) -> str:
    """One partition per external id: its guards in every stream, each naming its record."""
    return f"{env_prefix(environment)}#EXT#{external_id}"


def external_id_guard(environment: str, stream_key: str, external_id: str) -> dict[str, str]:
    return {"pk": external_id_guards_pk(environment, external_id), "sk": f"{EXTERNAL_ID_GUARD_PREFIX}{stream_key}"}


# Ingestion jobs -------------------------------------------------------------------------

def ingestion_job(environment: str, job_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#JOB#{_id(job_id)}", "sk": "JOB"}


RESULTS_PREFIX = "RES#"
# A sparse index of unfinished jobs of every environment, read by the stuck-job sweeper only;
# each entry names its environment. Set while pending or processing, removed when finished.
ACTIVE_JOBS_PK = "ACTIVE_JOBS"


def jobs_of_stream_pk(environment: str, stream_key: str) -> str:
    return f"{env_prefix(environment)}#DS#{stream_key}#JOBS"


def job_of_stream_index(environment: str, stream_key: str, job_id: int) -> dict[str, str]:
    return GSI1.key(jobs_of_stream_pk(environment, stream_key), _id(job_id))


# A sparse index of streams whose record count must be read again from the mirror (after a
# record delete, or a recount that did not finish), read by the sweeper; each names its environment.
RECOUNTS_PK = "RECOUNTS"


def recount_index(environment: str, stream_key: str) -> dict[str, str]:
    return GSI2.key(RECOUNTS_PK, f"{environment}#{stream_key}")


def active_job_index(environment: str, job_id: int) -> dict[str, str]:
    return GSI2.key(ACTIVE_JOBS_PK, f"{environment}#{_id(job_id)}")


def job_results(environment: str, job_id: int, chunk: int) -> dict[str, str]:
    return {"pk": ingestion_job(environment, job_id)["pk"], "sk": f"{RESULTS_PREFIX}{str(chunk).zfill(6)}"}


LAST_RESULTS_SK = f"{RESULTS_PREFIX}999999"


def job_stream_link(environment: str, job_id: int, stream_key: str) -> dict[str, str]:
    """A bulk request feeds any number of streams: one small item per stream lists it among the
    stream's imports (a file import's own item carries that index entry)."""
    return {"pk": ingestion_job(environment, job_id)["pk"], "sk": f"DS#{stream_key}",
            **job_of_stream_index(environment, stream_key, job_id)}


def idempotency_key(environment: str, key: str) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#IDEM#{key}", "sk": "IDEM"}


# Runs and matches ---------------------------------------------------------------------------

def run(environment: str, run_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#RUN#{_id(run_id)}", "sk": "RUN"}


def runs_of_reconciliation_pk(environment: str, reconciliation_id: int) -> str:
    return f"{env_prefix(environment)}#RECON#{_id(reconciliation_id)}#RUNS"


def run_index(environment: str, reconciliation_id: int, run_id: int) -> dict[str, str]:
    return GSI1.key(runs_of_reconciliation_pk(environment, reconciliation_id), _id(run_id))


# Events the bus refused, kept until the sweeper sends them.
PARKED_EVENTS_PK = "PARKED_EVENTS"
# On a match, exception or comment: the marks (event id and hold token) of the events its saving writes owe.
PENDING_EVENTS = "pending_events"


def parked_event(environment: str, event_id: str) -> dict[str, str]:
    return {"pk": PARKED_EVENTS_PK, "sk": f"{environment}#{event_id}"}


# Events held while the change they tell of is saved: every environment's, in HELD_EVENTS#0 ..
# #<HELD_EVENTS_SHARDS - 1> (by a hash of the hold's mark), as each person's change writes two.
HELD_EVENTS_PK = "HELD_EVENTS"
HELD_EVENTS_SHARDS = 8


def held_event(environment: str, mark: str) -> dict[str, str]:
    return {"pk": _shard_of(HELD_EVENTS_PK, HELD_EVENTS_SHARDS, mark), "sk": f"{environment}#{mark}"}


def held_events_shards() -> list[str]:
    return _shards(HELD_EVENTS_PK, HELD_EVENTS_SHARDS)


# Ends the sweeper decides on its own, held until announced; listed by kind (an sk prefix).
HELD_DECISIONS_PK = "HELD_DECISIONS"


def held_decision(kind: str, environment: str, entity_id: int) -> dict[str, str]:
    return {"pk": HELD_DECISIONS_PK, "sk": f"{kind}#{environment}#{_id(entity_id)}"}


def announced_event(environment: str, event_id: str) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#EVENT#{event_id}", "sk": "ANNOUNCED"}


# A sparse index of pending and running runs of every environment, read by the sweeper only.
ACTIVE_RUNS_PK = "ACTIVE_RUNS"


def active_run_index(environment: str, run_id: int) -> dict[str, str]:
    return GSI2.key(ACTIVE_RUNS_PK, f"{environment}#{_id(run_id)}")


# A sparse index of matches a person began and has not committed, read by the sweeper only.
PENDING_MATCHES_PK = "PENDING_MATCHES"


def pending_match_index(environment: str, match_id: int) -> dict[str, str]:
    return GSI2.key(PENDING_MATCHES_PK, f"{environment}#{_id(match_id)}")


def match(environment: str, match_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#MATCH#{_id(match_id)}", "sk": "MATCH"}


MATCH_MEMBER_PREFIX = "M#"
MATCH_MONEY_SK = "MONEY"  # the money of a match's records, kept by a trace (beside its members)


def match_member(environment: str, match_id: int, record_id: int) -> dict[str, str]:
    """One item per record of a match, in the match's partition: GET /records?reconciliation_match_id=."""
    return {"pk": match(environment, match_id)["pk"], "sk": f"{MATCH_MEMBER_PREFIX}{_id(record_id)}"}


def match_journal_pk(environment: str, run_id: int) -> str:
    """The partition of a run's journal of match members (MatchRepository.journal_members)."""
    return f"{env_prefix(environment)}#RUN#{_id(run_id)}#MEMBERS"


def match_journal(environment: str, run_id: int, chunk: int, page: int) -> dict[str, str]:
    return {"pk": match_journal_pk(environment, run_id), "sk": f"{match_journal_chunk(chunk)}{_id(page)}"}


def match_journal_chunk(chunk: int) -> str:
    """The sort prefix of one chunk's pages in a run's journal (chunks padded as job results' are)."""
    return f"{str(chunk).zfill(6)}#"


def match_money(environment: str, match_id: int) -> dict[str, str]:
    return {"pk": match(environment, match_id)["pk"], "sk": MATCH_MONEY_SK}


def matches_of_reconciliation_pk(environment: str, reconciliation_id: int) -> str:
    return f"{env_prefix(environment)}#RECON#{_id(reconciliation_id)}#MATCHES"


def match_sort_key(match_id: int) -> str:
    """A match's sort key in its reconciliation's match index (ids in string order)."""
    return _id(match_id)


# A run writes its matches into its reconciliation's list: spread over this many partitions (by the
# match id), as the status lists are (RECORD_STATUS_SHARDS).
MATCHES_SHARDS = 16


def match_index(environment: str, reconciliation_id: int, match_id: int) -> dict[str, str]:
    listing = matches_of_reconciliation_pk(environment, reconciliation_id)
    return GSI1.key(_shard_by_id(listing, MATCHES_SHARDS, match_id), match_sort_key(match_id))


def matches_of_reconciliation_partitions(environment: str, reconciliation_id: int) -> list[str]:
    """Every partition of the reconciliation's match list: its shards, and the unsharded one, which
    matches written before the shards keep (they are never moved)."""
    listing = matches_of_reconciliation_pk(environment, reconciliation_id)
    return _shards(listing, MATCHES_SHARDS) + [listing]


def unmatch_decisions_pk(environment: str, reconciliation_id: int) -> str:
    return f"{env_prefix(environment)}#RECON#{_id(reconciliation_id)}#UNMATCHED"


def unmatch_decision(environment: str, reconciliation_id: int, match_id: int) -> dict[str, str]:
    """A person's unmatch of a match (adapters/dynamodb/unmatch_decisions.py), in its reconciliation's
    partition of them, newest match first: the pairs people took apart, which learned rules count."""
    return {"pk": unmatch_decisions_pk(environment, reconciliation_id), "sk": match_sort_key(match_id)}


def stream_adoption(environment: str, reconciliation_id: int, stream_key: str) -> dict[str, str]:
    """Marks that a reconciliation's runs read the stream from the open-records index: records
    fully reconciled before the stream joined it were opened again there."""
    return {"pk": f"{env_prefix(environment)}#RECON#{_id(reconciliation_id)}", "sk": f"ADOPTED#{stream_key}"}


MATCH_ATTRIBUTE_PREFIX = "match_"


def match_attribute(reconciliation_id: int) -> str:
    """The record attribute naming its match in one reconciliation (top level, so that a
    conditional write can test it without a map that may not exist yet)."""
    return f"{MATCH_ATTRIBUTE_PREFIX}{reconciliation_id}"


def match_ids_of(item: dict[str, Any]) -> dict[int, int]:
    """The match holding a record item in each reconciliation, from its `match_<recon>` attributes."""
    return {int(name[len(MATCH_ATTRIBUTE_PREFIX):]): value for name, value in item.items()
            if name.startswith(MATCH_ATTRIBUTE_PREFIX) and name[len(MATCH_ATTRIBUTE_PREFIX):].isdigit()}


# Reconciliations and their rules --------------------------------------------------------
#
# A usage item sits in its stream's partition, so a stream's delete finds its users in one query;
# a priority guard sits in its reconciliation's partition, so the reconciliation's delete finds them too.

STREAM_USAGE_PREFIX = "USEDBY#RECON#"
RULE_PRIORITY_GUARD_PREFIX = "PRIO#"


def reconciliation(environment: str, reconciliation_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#RECON#{_id(reconciliation_id)}", "sk": "RECON"}


def reconciliations_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#RECON"


def reconciliation_index(environment: str, reconciliation_id: int) -> dict[str, str]:
    return GSI1.key(reconciliations_index_pk(environment), _id(reconciliation_id))


def stream_usage(environment: str, stream_key: str, reconciliation_id: int) -> dict[str, str]:
    return {"pk": data_stream(environment, stream_key)["pk"], "sk": f"{STREAM_USAGE_PREFIX}{_id(reconciliation_id)}"}


STREAM_TALLY_PREFIX = "TALLY#"


def stream_tally(environment: str, reconciliation_id: int, stream_key: str) -> dict[str, str]:
    """In the reconciliation's partition, so a summary reads all its streams' tallies in one query."""
    return {"pk": reconciliation(environment, reconciliation_id)["pk"], "sk": f"{STREAM_TALLY_PREFIX}{stream_key}"}


def reconciliation_rule(environment: str, rule_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#RULE#{_id(rule_id)}", "sk": "RULE"}


def rules_of_reconciliation_pk(environment: str, reconciliation_id: int) -> str:
    return f"{reconciliation(environment, reconciliation_id)['pk']}#RULES"


def reconciliation_rule_index(environment: str, reconciliation_id: int, priority: int, rule_id: int) -> dict[str, str]:
    return GSI1.key(rules_of_reconciliation_pk(environment, reconciliation_id), f"{_id(priority)}#{_id(rule_id)}")


def rule_priority_guard(environment: str, reconciliation_id: int, priority: int) -> dict[str, str]:
    return {"pk": reconciliation(environment, reconciliation_id)["pk"],
            "sk": f"{RULE_PRIORITY_GUARD_PREFIX}{_id(priority)}"}


# Exceptions -----------------------------------------------------------------------------------

def reconciliation_exception(environment: str, exception_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#EXC#{_id(exception_id)}", "sk": "EXC"}


def exceptions_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#EXCS"


def exception_index(environment: str, exception_id: int) -> dict[str, str]:
    return GSI1.key(exceptions_index_pk(environment), _id(exception_id))


def active_exception_guard(environment: str, reconciliation_id: int, stream_key: str) -> dict[str, str]:
    """Names the one open or investigating exception of a reconciliation and stream."""
    return {"pk": reconciliation(environment, reconciliation_id)["pk"], "sk": f"EXCACTIVE#{stream_key}"}


def exception_refresh_lease(environment: str, reconciliation_id: int) -> dict[str, str]:
    return {"pk": reconciliation(environment, reconciliation_id)["pk"], "sk": "EXCREFRESH"}


EXCEPTION_RECORD_PREFIX = "R#"
COMMENT_PREFIX = "C#"


def exception_record(environment: str, exception_id: int, record_id: int) -> dict[str, str]:
    return {"pk": reconciliation_exception(environment, exception_id)["pk"],
            "sk": f"{EXCEPTION_RECORD_PREFIX}{_id(record_id)}"}


def exception_comment(environment: str, exception_id: int, comment_id: int) -> dict[str, str]:
    return {"pk": reconciliation_exception(environment, exception_id)["pk"],
            "sk": f"{COMMENT_PREFIX}{_id(comment_id)}"}


def exception_attribute(reconciliation_id: int) -> str:
    """The record attribute naming the exception that holds it in one reconciliation."""
    return f"exception_{reconciliation_id}"


# The same holds again, in one attribute of a fixed name that an index can project (a string set
# of "<reconciliation id>:<exception id>"): `exception_<id>` serves the conditional writes.
EXCEPTION_HOLDS = "exception_holds"


def exception_hold(reconciliation_id: int, exception_id: int) -> str:
    return f"{reconciliation_id}:{exception_id}"


def holder_in(holds: set[str] | None, reconciliation_id: int) -> int | None:
    """The exception that holds a record in the reconciliation, read from its `exception_holds`."""
    return holders(holds).get(reconciliation_id)


def holders(holds: set[str] | None) -> dict[int, int]:
    """The exception holding a record in each reconciliation, read from its `exception_holds`."""
    pairs = (hold.split(":", 1) for hold in holds or ())
    return {int(reconciliation_id): int(exception_id) for reconciliation_id, exception_id in pairs}


# Every reconciliation of every environment, for the sweeper's exception refresh.
ALL_RECONCILIATIONS_PK = "RECONCILIATIONS"


def all_reconciliations_index(environment: str, reconciliation_id: int) -> dict[str, str]:
    return GSI2.key(ALL_RECONCILIATIONS_PK, f"{environment}#{_id(reconciliation_id)}")


def investigation(environment: str, investigation_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#INV#{_id(investigation_id)}", "sk": "INV"}


def investigations_of_exception_pk(environment: str, exception_id: int) -> str:
    return f"{env_prefix(environment)}#EXC#{_id(exception_id)}#INVS"


def investigation_index(environment: str, exception_id: int, investigation_id: int) -> dict[str, str]:
    return GSI1.key(investigations_of_exception_pk(environment, exception_id), _id(investigation_id))


# Pending and running investigations of every environment, for the sweeper.
ACTIVE_INVESTIGATIONS_PK = "ACTIVE_INVESTIGATIONS"


def active_investigation_index(environment: str, investigation_id: int) -> dict[str, str]:
    return GSI2.key(ACTIVE_INVESTIGATIONS_PK, f"{environment}#{_id(investigation_id)}")


# Reconciliation stories -----------------------------------------------------------------
#
# A story's usage items sit in the partitions of what they hold (a reconciliation's, a shared
# stream's), so a delete of either finds the stories that use it in one query.

STORY_USAGE_PREFIX = "USEDBY#STORY#"


def story(environment: str, story_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#STORY#{_id(story_id)}", "sk": "STORY"}


def stories_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#STORY"


def story_index(environment: str, story_id: int) -> dict[str, str]:
    return GSI1.key(stories_index_pk(environment), _id(story_id))


def story_usage_of_reconciliation(environment: str, reconciliation_id: int, story_id: int) -> dict[str, str]:
    return {"pk": reconciliation(environment, reconciliation_id)["pk"], "sk": f"{STORY_USAGE_PREFIX}{_id(story_id)}"}


def story_usage_of_stream(environment: str, stream_key: str, story_id: int) -> dict[str, str]:
    return {"pk": data_stream(environment, stream_key)["pk"], "sk": f"{STORY_USAGE_PREFIX}{_id(story_id)}"}


# A `deleting` mark whose delete found no story using the item: it is going, and no refused
# delete may take the mark back (a bare mark is `true`).
DELETE_CONFIRMED = "confirmed"


# Agents ------------------------------------------------------------------------------------
#
# Ids are UUIDs, so an environment's agents are listed by creation time (then id). The one active
# agent that handles file drops holds a guard item of its environment.

def _agent_pk(environment: str, agent_id: str) -> str:
    """The partition of an agent: the agent, its input files, its run guard and trigger claims."""
    return f"{env_prefix(environment)}#AGENT#{agent_id}"


def agent(environment: str, agent_id: str) -> dict[str, str]:
    return {"pk": _agent_pk(environment, agent_id), "sk": "AGENT"}


def agents_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#AGENTS"


def agent_index(environment: str, created_at: str, agent_id: str) -> dict[str, str]:
    return GSI1.key(agents_index_pk(environment), f"{created_at}#{agent_id}")


SCHEDULED_AGENTS_PK = "SCHEDULED_AGENTS"


def stream_balances_pk(environment: str, stream_key: str) -> str:
    return f"{env_prefix(environment)}#BALANCES#{stream_key}"


def stream_balance_sk(day: date, statement_id: str) -> str:
    """Newest first by date; statements of one day apart by their id."""
    return f"{day.isoformat()}#{statement_id}"


def stream_balance(environment: str, stream_key: str, day: date, statement_id: str) -> dict[str, str]:
    return {"pk": stream_balances_pk(environment, stream_key), "sk": stream_balance_sk(day, statement_id)}


def stream_latest_balance(environment: str, stream_key: str) -> dict[str, str]:
    """A stream's newest statement day once more, at a key a BatchGetItem can name (latest_balance
    of a page of streams in one request, rather than a query per stream)."""
    return {"pk": f"{env_prefix(environment)}#LATEST_BALANCE#{stream_key}", "sk": "LATEST_BALANCE"}


AGENT_RUNS_IN_FLIGHT_PK = "AGENT_RUNS_IN_FLIGHT"


def agent_run_in_flight_index(environment: str, run_id: int) -> dict[str, str]:
    """A run running or waiting for a verification code, of every environment: what the local
    stack starts again at its start (its workflows died with the previous process)."""
    return GSI2.key(AGENT_RUNS_IN_FLIGHT_PK, f"{environment}#{_id(run_id)}")


def browser_agent_directory(agent_id: str) -> dict[str, str]:
    """A browser agent's environment by its id: the operator's command line names an agent by id."""
    return {"pk": f"BROWSER_AGENT#{agent_id}", "sk": "BROWSER_AGENT"}


def scheduled_agent_index(environment: str, agent_id: str) -> dict[str, str]:
    """An agent with a schedule, of every environment: what a Scheduler's schedules are put back from."""
    return GSI2.key(SCHEDULED_AGENTS_PK, f"{environment}#{agent_id}")


def file_drop_guard(environment: str) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#FILEDROPS", "sk": "HOLDER"}


def agent_file(environment: str, agent_id: str, file_id: str) -> dict[str, str]:
    """An input file of an agent, in the agent's partition (read with it, listed by sk prefix)."""
    return {"pk": _agent_pk(environment, agent_id), "sk": f"{AGENT_FILE_PREFIX}{file_id}"}


AGENT_FILE_PREFIX = "FILE#"


def agent_running(environment: str, agent_id: str) -> dict[str, str]:
    """The guard a running run of the agent holds: one run of an agent at a time."""
    return {"pk": _agent_pk(environment, agent_id), "sk": "RUNNING"}


# Agent runs have integer ids from the environment's counter; an agent's are listed newest first
# through gsi1.

def agent_run(environment: str, run_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#AGENTRUN#{_id(run_id)}", "sk": "AGENTRUN"}


def agent_runs_index_pk(environment: str, agent_id: str) -> str:
    return f"{_agent_pk(environment, agent_id)}#RUNS"


def agent_run_index(environment: str, agent_id: str, run_id: int) -> dict[str, str]:
    return GSI1.key(agent_runs_index_pk(environment, agent_id), _id(run_id))


def agent_trigger(environment: str, agent_id: str, token: str) -> dict[str, str]:
    """One event that started a run of the agent (a schedule's firing, a drop), claimed once."""
    return {"pk": _agent_pk(environment, agent_id), "sk": f"TRIGGER#{token}"}


# Audit trail -----------------------------------------------------------------------------------
# One partition per environment: the entries by seq (SEQ# sorts before HEAD, so an sk prefix reads
# the entries alone) and the chain's head; entries that name a resource are listed by it in gsi3.

AUDIT_ENTRY_PREFIX = "SEQ#"


def audit_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#AUDIT"


def audit_entry_sk(seq: int) -> str:
    return f"{AUDIT_ENTRY_PREFIX}{_id(seq)}"


def audit_entry(environment: str, seq: int) -> dict[str, str]:
    return {"pk": audit_pk(environment), "sk": audit_entry_sk(seq)}


def audit_head(environment: str) -> dict[str, str]:
    return {"pk": audit_pk(environment), "sk": "HEAD"}


def audit_resource_pk(environment: str, resource_type: str, resource_id: str) -> str:
    return f"{audit_pk(environment)}#{resource_type}#{resource_id}"


def audit_resource_index(environment: str, resource_type: str, resource_id: str, seq: int) -> dict[str, str]:
    return GSI3.key(audit_resource_pk(environment, resource_type, resource_id), _id(seq))


# State-changing requests begun and not yet in the trail, for the sweeper: every environment's, in
# REQUESTS_IN_FLIGHT#0 .. #<REQUESTS_IN_FLIGHT_SHARDS - 1> (by a hash of the request id), so no one
# partition takes every request's two writes.
REQUESTS_IN_FLIGHT_PK = "REQUESTS_IN_FLIGHT"
REQUESTS_IN_FLIGHT_SHARDS = 8


def request_in_flight(environment: str, request_id: str) -> dict[str, str]:
    return {"pk": _shard_of(REQUESTS_IN_FLIGHT_PK, REQUESTS_IN_FLIGHT_SHARDS, request_id),
            "sk": f"{environment}#{request_id}"}


def requests_in_flight_shards() -> list[str]:
    return _shards(REQUESTS_IN_FLIGHT_PK, REQUESTS_IN_FLIGHT_SHARDS)


# Webhooks ------------------------------------------------------------------------------------
#
# An endpoint's partition holds the endpoint, its deliveries (newest first by id) and one guard per
# event it was given, so a redelivered event finds its delivery and deleting the endpoint deletes
# one partition. Deliveries waiting for an attempt sit in gsi2 (sparse) under the time the sweeper
# should look at them: the due time itself for waits longer than SQS's 15-minute delay, a few
# minutes after it for those SQS carries (the net under a lost message).

#
# The due list is sharded (WEBHOOKS_DUE#0 .. #<WEBHOOKS_DUE_SHARDS - 1>, by a hash of the delivery's
# key) so that the deliveries of every environment do not all write one index partition; the
# sweeper reads every shard. A deleted endpoint's item stays as a tombstone (`deleted_at`, out of
# gsi1) in the WEBHOOKS_GONE list until the sweeper has cleared its partition, a page at a time.

WEBHOOK_DELIVERY_PREFIX = "DLV#"
WEBHOOK_EVENT_GUARD_PREFIX = "EVT#"
WEBHOOKS_DUE_PK = "WEBHOOKS_DUE"
WEBHOOKS_DUE_SHARDS = 8
WEBHOOKS_GONE_PK = "WEBHOOKS_GONE"


def webhook_endpoint(environment: str, endpoint_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#WHE#{_id(endpoint_id)}", "sk": "WHE"}


def webhook_endpoints_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#WHES"


def webhook_endpoint_index(environment: str, endpoint_id: int) -> dict[str, str]:
    return GSI1.key(webhook_endpoints_index_pk(environment), _id(endpoint_id))


def webhook_delivery(environment: str, endpoint_id: int, delivery_id: int) -> dict[str, str]:
    return {"pk": webhook_endpoint(environment, endpoint_id)["pk"],
            "sk": f"{WEBHOOK_DELIVERY_PREFIX}{_id(delivery_id)}"}


def webhook_event_guard(environment: str, endpoint_id: int, event_id: str) -> dict[str, str]:
    return {"pk": webhook_endpoint(environment, endpoint_id)["pk"], "sk": f"{WEBHOOK_EVENT_GUARD_PREFIX}{event_id}"}


def webhook_due_index(environment: str, endpoint_id: int, delivery_id: int, wake_at: str) -> dict[str, str]:
    """gsi2, sparse: `wake_at` is ISO 8601 UTC, so string order is time order within a shard."""
    return GSI2.key(webhook_due_shard(environment, endpoint_id, delivery_id),
                    f"{wake_at}#{environment}#{_id(endpoint_id)}#{_id(delivery_id)}")


def webhook_due_shard(environment: str, endpoint_id: int, delivery_id: int) -> str:
    """The due list's shard of a delivery: always the same one for it."""
    return _shard_of(WEBHOOKS_DUE_PK, WEBHOOKS_DUE_SHARDS, f"{environment}#{endpoint_id}#{delivery_id}")


def webhook_due_shards() -> list[str]:
    return _shards(WEBHOOKS_DUE_PK, WEBHOOKS_DUE_SHARDS)


# Sharded lists ----------------------------------------------------------------------------------

def _shard_by_id(partition: str, shards: int, item_id: int) -> str:
    """`<partition>#<id mod shards>`: ids come in runs of consecutive numbers (a job's id block, a
    run's matches), so each shard takes 1/shards of them, where a hash would leave one a little over."""
    return f"{partition}#{item_id % shards}"


def _shard_of(partition: str, shards: int, value: str) -> str:
    """`<partition>#<n>` for `value`: always the same n (crc32, stable across runs and processes)."""
    return f"{partition}#{zlib.crc32(value.encode()) % shards}"


def _shards(partition: str, shards: int) -> list[str]:
    return [f"{partition}#{shard}" for shard in range(shards)]


def webhook_endpoint_gone_index(environment: str, endpoint_id: int) -> dict[str, str]:
    """gsi2: a deleted endpoint whose partition the sweeper still has to clear."""
    return GSI2.key(WEBHOOKS_GONE_PK, f"{environment}#{_id(endpoint_id)}")


# Bulk actions ---------------------------------------------------------------------------------
# One partition per bulk action (its item and its results, a chunk an item): no key every
# action or item writes to.

def bulk_action(environment: str, bulk_action_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#BULK#{_id(bulk_action_id)}", "sk": "BULK"}


def bulk_action_results(environment: str, bulk_action_id: int, chunk: int) -> dict[str, str]:
    return {"pk": bulk_action(environment, bulk_action_id)["pk"], "sk": f"{RESULTS_PREFIX}{str(chunk).zfill(6)}"}


def bulk_action_item(environment: str, bulk_action_id: int, index: int) -> dict[str, str]:
    """One item's mark, written before its change and given its result after: done once."""
    return {"pk": bulk_action(environment, bulk_action_id)["pk"], "sk": f"{BULK_ITEM_PREFIX}{str(index).zfill(6)}"}


BULK_ITEM_PREFIX = "ITEM#"
# Pending and processing bulk actions of every environment, for the sweeper.
ACTIVE_BULK_ACTIONS_PK = "ACTIVE_BULK_ACTIONS"


def active_bulk_action_index(environment: str, bulk_action_id: int) -> dict[str, str]:
    return GSI2.key(ACTIVE_BULK_ACTIONS_PK, f"{environment}#{_id(bulk_action_id)}")


def bulk_action_idempotency_key(environment: str, key: str) -> dict[str, str]:
    """Apart from the bulk requests' keys: the same key may name one of each."""
    return {"pk": f"{env_prefix(environment)}#BULKIDEM#{key}", "sk": "IDEM"}

# Exports ----------------------------------------------------------------------------------------

def export(environment: str, export_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#EXP#{_id(export_id)}", "sk": "EXP"}


def exports_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#EXPS"


def export_index(environment: str, export_id: int) -> dict[str, str]:
    return GSI1.key(exports_index_pk(environment), _id(export_id))


# Pending and processing exports of every environment, for the sweeper.
ACTIVE_EXPORTS_PK = "ACTIVE_EXPORTS"


def active_export_index(environment: str, export_id: int) -> dict[str, str]:
    return GSI2.key(ACTIVE_EXPORTS_PK, f"{environment}#{_id(export_id)}")


def export_idempotency_key(environment: str, key: str) -> dict[str, str]:
    """An export's Idempotency-Key: apart from a bulk request's (the same key may name one of each)."""
    return {"pk": f"{env_prefix(environment)}#EXPIDEM#{key}", "sk": "EXPIDEM"}


# Approvals ------------------------------------------------------------------------------------
#
# An approval has a partition of its own; the environment's list (gsi1, newest first) takes one
# entry per approval, a person's request each (as the exception list does). A reconciliation's
# policy sits in its partition. Pending and executing approvals of every environment sit in a
# sparse gsi2 list, read by the sweeper only (expiry), which a finished one leaves.

APPROVAL_POLICY_SK = "APPROVAL_POLICY"
ACTIVE_APPROVALS_PK = "ACTIVE_APPROVALS"


def approval(environment: str, approval_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#APPROVAL#{_id(approval_id)}", "sk": "APPROVAL"}


def approvals_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#APPROVALS"


def approval_index(environment: str, approval_id: int) -> dict[str, str]:
    return GSI1.key(approvals_index_pk(environment), _id(approval_id))


def active_approvals_of(environment: str) -> str:
    """The sort key prefix of an environment's entries in the list of active approvals."""
    return f"{environment}#"


def active_approval_index(environment: str, approval_id: int) -> dict[str, str]:
    return GSI2.key(ACTIVE_APPROVALS_PK, f"{active_approvals_of(environment)}{_id(approval_id)}")


def approval_target(environment: str, dedupe_key: str) -> dict[str, str]:
    """The guard of one action on one target (services/approvals.py `dedupe_key`): the approval
    that holds it while pending; a second request for the same answers with that approval."""
    return {"pk": f"{env_prefix(environment)}#APPROVAL_TARGET#{dedupe_key}", "sk": "APPROVAL_TARGET"}


def approval_policy(environment: str, reconciliation_id: int) -> dict[str, str]:
    return {"pk": reconciliation(environment, reconciliation_id)["pk"], "sk": APPROVAL_POLICY_SK}


# Period closes ----------------------------------------------------------------------------------

def period_close(environment: str, close_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#PCLOSE#{_id(close_id)}", "sk": "PCLOSE"}


def period_closes_of_reconciliation_pk(environment: str, reconciliation_id: int) -> str:
    return f"{env_prefix(environment)}#RECON#{_id(reconciliation_id)}#PCLOSES"


def period_close_index(environment: str, reconciliation_id: int, close_id: int) -> dict[str, str]:
    return GSI1.key(period_closes_of_reconciliation_pk(environment, reconciliation_id), _id(close_id))


def closed_periods(environment: str, reconciliation_id: int) -> dict[str, str]:
    """The periods of a reconciliation closed now: the one item every guard reads (a BatchGetItem
    for the reconciliations of a chunk's streams)."""
    return {"pk": reconciliation(environment, reconciliation_id)["pk"], "sk": "CLOSED_PERIODS"}


# Service levels and routing ---------------------------------------------------------------------

ROUTING_RULE_PREFIX = "ROUTE#"


def service_level_policy(environment: str, reconciliation_id: int) -> dict[str, str]:
    return {"pk": reconciliation(environment, reconciliation_id)["pk"], "sk": "SLAPOLICY"}


def routing_rule(environment: str, reconciliation_id: int, rule_id: int) -> dict[str, str]:
    return {"pk": reconciliation(environment, reconciliation_id)["pk"], "sk": f"{ROUTING_RULE_PREFIX}{_id(rule_id)}"}


def routing_state(environment: str) -> dict[str, str]:
    """The environment's one routing state: every rule's cursor, the picks being written."""
    return {"pk": f"{env_prefix(environment)}#ROUTING", "sk": "STATE"}
