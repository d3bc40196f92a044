"""Every key of the single table is built here, and nowhere else.

Layout (one table, generic attributes `pk`, `sk`, `gsi1pk`, `gsi1sk`, `gsi2pk`, `gsi2sk`):

| item                     | pk                          | sk               | gsi1pk / gsi1sk                         |
|--------------------------|-----------------------------|------------------|-----------------------------------------|
| API key                  | KEY#<sha256>                | KEY              | KEYS / <id>                             |
| id counter               | E#<env>#COUNTER             | <entity>         |                                         |
| data stream              | E#<env>#DS#<key>            | DS               | E#<env>#DS / <id>  (newest first)       |
| property key guard       | E#<env>#DS#<stream key>     | PDKEY#<prop key> |                                         |
| property definition      | E#<env>#PD#<id>             | PD               | E#<env>#PD / <stream key>#<id>          |
| record                   | E#<env>#REC#<id>            | REC              | E#<env>#DS#<stream>#REC / <id>          |
| external id guard        | E#<env>#EXT#<external id>   | DS#<stream>      |                                         |
| ingestion job            | E#<env>#JOB#<id>            | JOB              |                                         |
| job results (per chunk)  | E#<env>#JOB#<id>            | RES#<chunk>      |                                         |
| bulk request's stream    | E#<env>#JOB#<id>            | DS#<stream key>  | E#<env>#DS#<stream key>#JOBS / <job id> |
| idempotency key          | E#<env>#IDEM#<key>          | IDEM             |                                         |

Records sit in gsi5 while open (see `open_record_index`) and in gsi4 (E#<env>#ST#<status> / <id>)
once matched somewhere (partially or fully reconciled): the unreconciled records of an
environment are its streams' open partitions, so a new record takes no gsi4 entry. Every index entry is a write unit on each insert, so a record carries no
key it can do without: the records of an ingestion job are its block of ids (the job names the
first), and the guards of one external id share a partition (one per stream), so listing by
job or by external id needs no index of its own.

The environment is the first part of every key of environment data, so isolation is
structural: no query can reach another environment's partition. API keys are the one
exception: they are looked up by their hash before the environment is known, and each
names its environment. Ids are zero-padded so that string order is numeric order.
"""
from __future__ import annotations

# The table's global secondary indexes (infra/template.yaml); each keys on gsiNpk / gsiNsk.
GSI1, GSI2, GSI3, GSI4, GSI5 = "gsi1", "gsi2", "gsi3", "gsi4", "gsi5"
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
    return {"gsi1pk": API_KEYS_INDEX_PK, "gsi1sk": _id(key_id)}


# Data streams ---------------------------------------------------------------------------

def data_stream(environment: str, key: str) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#DS#{key}", "sk": "DS"}


def data_streams_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#DS"


def data_stream_index(environment: str, stream_id: int) -> dict[str, str]:
    return {"gsi1pk": data_streams_index_pk(environment), "gsi1sk": _id(stream_id)}


# Property definitions -------------------------------------------------------------------

PROPERTY_GUARD_PREFIX = "PDKEY#"


def property_key_guard(environment: str, stream_key: str, property_key: str) -> dict[str, str]:
    return {"pk": data_stream(environment, stream_key)["pk"], "sk": f"{PROPERTY_GUARD_PREFIX}{property_key}"}


def property_definition(environment: str, definition_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#PD#{_id(definition_id)}", "sk": "PD"}


def property_definitions_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#PD"


def property_definitions_of_stream_prefix(stream_key: str) -> str:
    return f"{stream_key}#"


def property_definition_index(environment: str, stream_key: str, definition_id: int) -> dict[str, str]:
    return {
        "gsi1pk": property_definitions_index_pk(environment),
        "gsi1sk": f"{property_definitions_of_stream_prefix(stream_key)}{_id(definition_id)}",
    }


# Records --------------------------------------------------------------------------------

def record(environment: str, record_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#REC#{_id(record_id)}", "sk": "REC"}


def records_of_stream_pk(environment: str, stream_key: str) -> str:
    return f"{env_prefix(environment)}#DS#{stream_key}#REC"


def records_with_status_pk(environment: str, status: str) -> str:
    return f"{env_prefix(environment)}#ST#{status}"


def open_records_of_stream_pk(environment: str, stream_key: str) -> str:
    return f"{env_prefix(environment)}#DS#{stream_key}#OPEN"


def open_record_index(environment: str, stream_key: str, record_id: int) -> dict[str, str]:
    """gsi5, sparse: a record sits in it while some reconciliation of its stream has not matched it."""
    return {"gsi5pk": open_records_of_stream_pk(environment, stream_key), "gsi5sk": _id(record_id)}


def matched_record_index(environment: str, status: str, record_id: int) -> dict[str, str]:
    """gsi4, sparse: a record sits in it, under its status, once some reconciliation matched it."""
    return {"gsi4pk": records_with_status_pk(environment, status), "gsi4sk": _id(record_id)}


def record_indexes(environment: str, record_id: int, stream_key: str, status: str) -> dict[str, str]:
    keys = {"gsi1pk": records_of_stream_pk(environment, stream_key), "gsi1sk": _id(record_id)}
    if status != "unreconciled":
        keys.update(matched_record_index(environment, status, record_id))
    if status != "reconciled":
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
    return {"gsi1pk": jobs_of_stream_pk(environment, stream_key), "gsi1sk": _id(job_id)}


# A sparse index of streams whose record count must be read again from the mirror (after a
# record delete, or a recount that did not finish), read by the sweeper; each names its environment.
RECOUNTS_PK = "RECOUNTS"


def recount_index(environment: str, stream_key: str) -> dict[str, str]:
    return {"gsi2pk": RECOUNTS_PK, "gsi2sk": f"{environment}#{stream_key}"}


def active_job_index(environment: str, job_id: int) -> dict[str, str]:
    return {"gsi2pk": ACTIVE_JOBS_PK, "gsi2sk": f"{environment}#{_id(job_id)}"}


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
    return {"gsi1pk": runs_of_reconciliation_pk(environment, reconciliation_id), "gsi1sk": _id(run_id)}


# A sparse index of pending and running runs of every environment, read by the sweeper only.
ACTIVE_RUNS_PK = "ACTIVE_RUNS"


def active_run_index(environment: str, run_id: int) -> dict[str, str]:
    return {"gsi2pk": ACTIVE_RUNS_PK, "gsi2sk": f"{environment}#{_id(run_id)}"}


# A sparse index of matches a person began and has not committed, read by the sweeper only.
PENDING_MATCHES_PK = "PENDING_MATCHES"


def pending_match_index(environment: str, match_id: int) -> dict[str, str]:
    return {"gsi2pk": PENDING_MATCHES_PK, "gsi2sk": f"{environment}#{_id(match_id)}"}


def match(environment: str, match_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#MATCH#{_id(match_id)}", "sk": "MATCH"}


MATCH_MEMBER_PREFIX = "M#"


def match_member(environment: str, match_id: int, record_id: int) -> dict[str, str]:
    """One item per record of a match, in the match's partition: GET /records?reconciliation_match_id=."""
    return {"pk": match(environment, match_id)["pk"], "sk": f"{MATCH_MEMBER_PREFIX}{_id(record_id)}"}


def matches_of_reconciliation_pk(environment: str, reconciliation_id: int) -> str:
    return f"{env_prefix(environment)}#RECON#{_id(reconciliation_id)}#MATCHES"


def match_index(environment: str, reconciliation_id: int, match_id: int) -> dict[str, str]:
    return {"gsi1pk": matches_of_reconciliation_pk(environment, reconciliation_id), "gsi1sk": _id(match_id)}


def stream_adoption(environment: str, reconciliation_id: int, stream_key: str) -> dict[str, str]:
    """Marks that a reconciliation's runs read the stream from the open-records index: records
    fully reconciled before the stream joined it were opened again there."""
    return {"pk": f"{env_prefix(environment)}#RECON#{_id(reconciliation_id)}", "sk": f"ADOPTED#{stream_key}"}


def match_attribute(reconciliation_id: int) -> str:
    """The record attribute naming its match in one reconciliation (top level, so that a
    conditional write can test it without a map that may not exist yet)."""
    return f"match_{reconciliation_id}"


# Reconciliations and their rules --------------------------------------------------------
#
# | item                | pk                        | sk                | gsi1pk / gsi1sk                          |
# |---------------------|---------------------------|-------------------|------------------------------------------|
# | reconciliation      | E#<env>#RECON#<id>        | RECON             | E#<env>#RECON / <id> (newest first; off  |
# |                     |                           |                   | the index while it is being deleted)     |
# | stream usage        | E#<env>#DS#<stream key>   | USEDBY#RECON#<id> |                                          |
# | rule                | E#<env>#RULE#<id>         | RULE              | E#<env>#RECON#<recon>#RULES /            |
# |                     |                           |                   | <priority>#<id> (by priority)            |
# | rule priority guard | E#<env>#RECON#<recon id>  | PRIO#<priority>   |                                          |
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
    return {"gsi1pk": reconciliations_index_pk(environment), "gsi1sk": _id(reconciliation_id)}


def stream_usage(environment: str, stream_key: str, reconciliation_id: int) -> dict[str, str]:
    return {"pk": data_stream(environment, stream_key)["pk"], "sk": f"{STREAM_USAGE_PREFIX}{_id(reconciliation_id)}"}


def reconciliation_rule(environment: str, rule_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#RULE#{_id(rule_id)}", "sk": "RULE"}


def rules_of_reconciliation_pk(environment: str, reconciliation_id: int) -> str:
    return f"{reconciliation(environment, reconciliation_id)['pk']}#RULES"


def reconciliation_rule_index(environment: str, reconciliation_id: int, priority: int, rule_id: int) -> dict[str, str]:
    return {"gsi1pk": rules_of_reconciliation_pk(environment, reconciliation_id),
            "gsi1sk": f"{_id(priority)}#{_id(rule_id)}"}


def rule_priority_guard(environment: str, reconciliation_id: int, priority: int) -> dict[str, str]:
    return {"pk": reconciliation(environment, reconciliation_id)["pk"],
            "sk": f"{RULE_PRIORITY_GUARD_PREFIX}{_id(priority)}"}


# Exceptions -----------------------------------------------------------------------------------

def reconciliation_exception(environment: str, exception_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#EXC#{_id(exception_id)}", "sk": "EXC"}


def exceptions_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#EXCS"


def exception_index(environment: str, exception_id: int) -> dict[str, str]:
    return {"gsi1pk": exceptions_index_pk(environment), "gsi1sk": _id(exception_id)}


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
    return {"pk": reconciliation_exception(environment, exception_id)["pk"], "sk": f"{COMMENT_PREFIX}{_id(comment_id)}"}


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
    prefix = f"{reconciliation_id}:"
    return next((int(h.removeprefix(prefix)) for h in holds or () if h.startswith(prefix)), None)


# Every reconciliation of every environment, for the sweeper's exception refresh.
ALL_RECONCILIATIONS_PK = "RECONCILIATIONS"


def all_reconciliations_index(environment: str, reconciliation_id: int) -> dict[str, str]:
    return {"gsi2pk": ALL_RECONCILIATIONS_PK, "gsi2sk": f"{environment}#{_id(reconciliation_id)}"}


def investigation(environment: str, investigation_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#INV#{_id(investigation_id)}", "sk": "INV"}


def investigations_of_exception_pk(environment: str, exception_id: int) -> str:
    return f"{env_prefix(environment)}#EXC#{_id(exception_id)}#INVS"


def investigation_index(environment: str, exception_id: int, investigation_id: int) -> dict[str, str]:
    return {"gsi1pk": investigations_of_exception_pk(environment, exception_id), "gsi1sk": _id(investigation_id)}


# Pending and running investigations of every environment, for the sweeper.
ACTIVE_INVESTIGATIONS_PK = "ACTIVE_INVESTIGATIONS"


def active_investigation_index(environment: str, investigation_id: int) -> dict[str, str]:
    return {"gsi2pk": ACTIVE_INVESTIGATIONS_PK, "gsi2sk": f"{environment}#{_id(investigation_id)}"}
