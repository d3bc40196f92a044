"""What each role of infra/template.yaml may do with the stage's own resources, read from the code its functions
run (app.py maps functions to handlers, infra/functions.py functions to roles): which indexes it queries, which
objects of the data bucket it reads, writes and deletes (by prefix), which queues it sends to and which state
machines it starts. Each matrix below is exact: a permission a role lacks fails, and so does one it is given
beyond the matrix. Judged as IAM judges them (moto's evaluator, tests/support/iam.py `permitted`), on the
template's policies resolved for a stage.

tests/deploy/test_deployment.py proves the same roles, as deployed, against every call the packaged handlers make
in its walk-through; these matrices hold also what that walk-through does not reach, each such cell saying the
call that needs it (`UNREACHED`)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from chalicelib.local.provision import Resolver, load_template
from infra.functions import FUNCTIONS, GROUPS, role_output
from tests.support.iam import IamRequest, permitted

PREFIXES = ("uploads", "drops", "drops-refused", "bulk", "imports", "staging", "mirror", "runs", "agents", "exports")
INDEXES = ("gsi1", "gsi2", "gsi3", "gsi4", "gsi5")
QUEUES = ("BulkQueue", "InvestigationQueue", "AgentRunQueue", "WebhookEventQueue", "WebhookDeliveryQueue")
MACHINES = ("file-import", "reconciliation-run", "browser-run")
ROLES = tuple(role_output(group).removesuffix("Arn") for group in GROUPS)

# Queries of an index. A write of an item listed in an index needs no permission on the index.
INDEX_QUERIES = {
    # lists (gsi1); a manual match's and a dry run's look at imports still writing (gsi2); GET /audit_events by
    # resource (gsi3); GET /records?status= (gsi4); GET /records?status=unreconciled and a dry run's open records (gsi5)
    "ApiRole": {"gsi1", "gsi2", "gsi3", "gsi4", "gsi5"},
    # streams, their records and imports, the continuous reconciliations using a stream (gsi1); an announcement
    # taken over from a worker that died looks for its audit entry first (services/events.py announce: gsi3);
    # an export (on the bulk queue) reads what the list routes read: every index
    "IngestionRole": {"gsi1", "gsi2", "gsi3", "gsi4", "gsi5"},
    # + open records (gsi5) and imports still writing (reconciliation_runs.open_frames: gsi2)
    "RunsRole": {"gsi1", "gsi2", "gsi3", "gsi5"},
    # the other side's open records (investigations.run: gsi5), the exceptions' refresh (gsi1, gsi5)
    "InvestigationsRole": {"gsi1", "gsi3", "gsi5"},
    # its lists (gsi2), an unfinished request's audit entry (audit.record_unfinished: gsi3), the refresh (gsi1, gsi5)
    "SweeperRole": {"gsi1", "gsi2", "gsi3", "gsi5"},
    # agents, runs, reconciliations and exceptions for the tools (gsi1), a run's announcement taken over (gsi3)
    "AgentsRole": {"gsi1", "gsi3"},
    # an attempt, a pause, an expiry and a give-up read and write by key; gsi3 as above
    "BrowserRole": {"gsi3"},
    "WebhooksRole": {"gsi1"},
}

R, W, D = "s3:GetObject", "s3:PutObject", "s3:DeleteObject"
OBJECTS = {
    # bulk payloads; upload URLs (uploads/, agents/); an agent's files (written, their URLs and sizes, deleted);
    # a cancel looks for an import's file (uploads/ or drops/); a deleted record's tombstone (mirror/); an export's
    # download URL, presigned (exports/); a deleted
    # stream's mirror, published and staged; an accepted investigation's exceptions' refresh reads a stream's money
    # and keeps its sums (mirror/, the ones superseded deleted)
    "ApiRole": {("bulk", W), ("uploads", W), ("uploads", R), ("drops", R), ("agents", R), ("agents", W),
                ("agents", D), ("mirror", R), ("mirror", W), ("mirror", D), ("staging", D), ("exports", R)},
    # an uploaded or dropped file, the import's chunks (imports/), its parts staged then published (a copy reads
    # its source and the staged part is deleted), their sums; a drop no agent takes is refused in drops-refused/;
    # an export's file, written in parts (exports/)
    "IngestionRole": {("bulk", R), ("uploads", R), ("drops", R), ("imports", R), ("imports", W), ("staging", R),
                      ("staging", W), ("staging", D), ("mirror", R), ("mirror", W), ("drops-refused", W),
                      ("exports", R), ("exports", W)},
    # the run's files between its phases (a fanned-out run's partitions, their outcomes and manifests too: its
    # partition and merge functions are in this group); the exceptions' refresh reads a stream's money and
    # keeps its sums (the ones superseded deleted: mirror.stream_money)
    "RunsRole": {("runs", R), ("runs", W), ("mirror", R), ("mirror", W), ("mirror", D)},
    # the search reads the table only; accepting its suggestion (and the refresh then) is the API's
    "InvestigationsRole": set(),
    # a waiting import's file (uploads/, drops/); a stuck import given up is concluded like a finished one
    # (lifecycle.conclude: its rows from bulk/ or imports/, its written records staged and published); recounts
    # and the exceptions' refresh read the mirror (the refresh keeps its sums, the ones superseded deleted)
    "SweeperRole": {("uploads", R), ("drops", R), ("bulk", R), ("imports", R), ("staging", R), ("staging", W),
                    ("staging", D), ("mirror", R), ("mirror", W), ("mirror", D)},
    # an agent's input files and a dropped file, its `sql` tool's mirror; a run's output files
    "AgentsRole": {("agents", R), ("drops", R), ("mirror", R), ("agents", W)},
    # an attempt's download (uploads/), a failed step's screenshot (agents/)
    "BrowserRole": {("uploads", W), ("agents", W)},
    "WebhooksRole": set(),
}

SENDS = {
    # bulk requests, investigations, agents' runs, a webhook delivery's retry
    "ApiRole": {"BulkQueue", "InvestigationQueue", "AgentRunQueue", "WebhookDeliveryQueue"},
    # a dropped file's run of the environment's file-drop agent (agent_runs.on_file_dropped)
    "IngestionRole": {"AgentRunQueue"},
    "RunsRole": set(),
    # a failed investigation is delivered again by SQS, never re-queued (the handler's send_again is the local
    # stack's, when it stops)
    "InvestigationsRole": set(),
    # a stuck bulk request's message again (ingestion/sweeper.py restart), webhook attempts come due
    "SweeperRole": {"BulkQueue", "WebhookDeliveryQueue"},
    # another agent's run (its `run_agent` tool), a run left queued behind its agent's other run
    "AgentsRole": {"AgentRunQueue"},
    "BrowserRole": set(),
    # the fan-out's first attempt, a failed attempt's next
    "WebhooksRole": {"WebhookDeliveryQueue"},
}

STARTS = {
    # a run asked for, a continuous reconciliation's run once it changed (imports start from their upload's event)
    "ApiRole": {"reconciliation-run"},
    # an uploaded or dropped file's import; a continuous reconciliation's run over the records it wrote
    "IngestionRole": {"file-import", "reconciliation-run"},
    # a run's end starts the continuous run waiting on its reconciliation (reconciliation_runs.start_pending)
    "RunsRole": {"reconciliation-run"},
    "InvestigationsRole": set(),
    # a stuck import's and a stuck run's state machine again; a given-up run's waiting continuous run
    "SweeperRole": {"file-import", "reconciliation-run"},
    # the `start_run` tool's run, a browser agent's run
    "AgentsRole": {"reconciliation-run", "browser-run"},
    # an attempt's download, imported
    "BrowserRole": {"file-import"},
    "WebhooksRole": set(),
}

# What the deployment proof's walk-through does not reach: the call that needs it, and the statement (its Sid) of
# the role's own policy that allows it. The sweep finds nothing stuck there, no model answers the agent there
# (so none of its tools runs), and no announcement is ever taken over from a worker that died.
Q, SEND, START = "dynamodb:Query", "sqs:SendMessage", "states:StartExecution"
UNREACHED = [
    ("ApiRole", "ReadObjects", R, "object", "drops", "lifecycle.cancel of a dropped file's import: payloads.exists"),
    ("ApiRole", "DeletedObjects", D, "object", "staging",
     "data_streams.delete_stream: mirror.forget_stream, the staged parts of an import not yet published"),
    ("ApiRole", "ReadObjects", R, "object", "mirror",
     "investigations.accept: reconciliation_exceptions.refresh, mirror.stream_money"),
    ("ApiRole", "DeletedObjects", D, "object", "mirror",
     "investigations.accept: reconciliation_exceptions.refresh, mirror.stream_money's superseded sums"),
    ("ApiRole", "Enqueue", SEND, "queue", "WebhookDeliveryQueue", "services/webhooks.retry: a delivery's retry"),
    ("IngestionRole", "Indexes", Q, "index", "gsi3", "services/events.announce: an announcement taken over"),
    ("IngestionRole", "Enqueue", SEND, "queue", "AgentRunQueue", "agent_runs.on_file_dropped: a file-drop agent's run"),
    ("IngestionRole", "StartWork", START, "machine", "reconciliation-run",
     "reconciliation_runs.on_records_ingested: a continuous reconciliation's run"),
    ("RunsRole", "Indexes", Q, "index", "gsi3", "services/events.announce: an announcement taken over"),
    ("RunsRole", "MirroredMoney", D, "object", "mirror",
     "reconciliation_exceptions.refresh at a run's end: mirror.stream_money's superseded sums"),
    ("RunsRole", "StartNextRun", START, "machine", "reconciliation-run",
     "reconciliation_runs.finish and give_up: start_pending, the continuous run waiting"),
    ("InvestigationsRole", "Indexes", Q, "index", "gsi3", "services/events.announce: an announcement taken over"),
    ("InvestigationsRole", "Indexes", Q, "index", "gsi1",
     "investigations.run: claims.open_records of a stream not yet adopted"),
    ("SweeperRole", "Indexes", Q, "index", "gsi1", "reconciliation_exceptions.sweep: refresh, a stream's records"),
    ("SweeperRole", "Indexes", Q, "index", "gsi3", "audit.record_unfinished: resource_has_entry"),
    ("SweeperRole", "Indexes", Q, "index", "gsi5", "reconciliation_exceptions.sweep: refresh, claims.open_records"),
    ("SweeperRole", "ReadObjects", R, "object", "uploads", "ingestion/sweeper.waiting_for_upload: payloads.exists"),
    ("SweeperRole", "ReadObjects", R, "object", "drops", "ingestion/sweeper.waiting_for_upload: payloads.exists"),
    ("SweeperRole", "ReadObjects", R, "object", "bulk", "lifecycle.conclude of a given-up import: chunk.rows_of"),
    ("SweeperRole", "ReadObjects", R, "object", "imports", "lifecycle.conclude of a given-up import: chunk.rows_of"),
    ("SweeperRole", "ReadObjects", R, "object", "staging", "lifecycle.conclude: mirror.publish (a copy's source)"),
    ("SweeperRole", "ReadObjects", R, "object", "mirror", "data_streams.sweep_recounts: mirror.count_records"),
    ("SweeperRole", "WrittenObjects", W, "object", "staging", "lifecycle._fail_unprocessed: mirror.write_part"),
    ("SweeperRole", "WrittenObjects", W, "object", "mirror", "lifecycle.conclude: mirror.publish and summarize"),
    ("SweeperRole", "SupersededSums", D, "object", "mirror",
     "reconciliation_exceptions.sweep: refresh, mirror.stream_money's superseded sums"),
    ("SweeperRole", "PublishedStaging", D, "object", "staging", "lifecycle.conclude: mirror.publish"),
    ("SweeperRole", "Enqueue", SEND, "queue", "BulkQueue", "ingestion/sweeper.restart: a stuck bulk request"),
    ("SweeperRole", "Enqueue", SEND, "queue", "WebhookDeliveryQueue", "webhooks.sweep: attempts come due"),
    ("SweeperRole", "RestartWork", START, "machine", "file-import", "ingestion/sweeper.restart: a stuck import"),
    ("SweeperRole", "RestartWork", START, "machine", "reconciliation-run", "reconciliation_runs.restart: a stuck run"),
    ("AgentsRole", "Indexes", Q, "index", "gsi3", "services/events.announce_agent_run: an announcement taken over"),
    ("AgentsRole", "Indexes", Q, "index", "gsi1", "agent_tools list_reconciliations, list_exceptions: their lists"),
    ("AgentsRole", "ReadObjects", R, "object", "agents", "agent_tools read_input: agent_files.read"),
    ("AgentsRole", "ReadObjects", R, "object", "drops", "agent_tools read_input of a dropped file: payloads.get_bytes"),
    ("AgentsRole", "ReadObjects", R, "object", "mirror", "agent_tools sql: records_sql, the mirror's parts"),
    ("AgentsRole", "WrittenObjects", W, "object", "agents", "agent_tools write_output: agent_files.put"),
    ("AgentsRole", "Enqueue", SEND, "queue", "AgentRunQueue", "agent_tools run_agent: agent_runs, another agent's run"),
    ("AgentsRole", "StartRuns", START, "machine", "reconciliation-run", "agent_tools start_run"),
    ("BrowserRole", "Table", Q, "index", "gsi3", "services/events.announce_agent_run: an announcement taken over"),
]


@pytest.fixture(scope="module")
def stage():
    template = load_template()
    resolver = Resolver(template, {"Stage": "prod", "DataBucketName": "recon-prod-data"}, "us-east-1")
    resources = template["Resources"]

    def documents(role: str) -> list[dict]:
        props = resources[role]["Properties"]
        found = [p["PolicyDocument"] for p in props.get("Policies", [])]
        found += [resources[ref["Ref"]]["Properties"]["PolicyDocument"] for ref in props.get("ManagedPolicyArns", [])]
        return [resolver.resolve(document) for document in found]

    def arn(expression) -> str:
        return resolver.resolve(expression)

    return SimpleNamespace(
        documents=documents, table=arn({"Fn::GetAtt": ["Table", "Arn"]}), bucket=arn({"Fn::GetAtt": ["DataBucket", "Arn"]}),
        bus=arn({"Fn::GetAtt": ["EventBus", "Arn"]}), queue={name: arn({"Fn::GetAtt": [name, "Arn"]}) for name in QUEUES},
        machine={name: arn({"Fn::Sub": "arn:${AWS::Partition}:states:${AWS::Region}:${AWS::AccountId}:stateMachine:"
                                       f"${{AppName}}-${{Stage}}-{name}"}) for name in MACHINES})


def _allows(documents: list[dict], action: str, resource: str) -> bool:
    return permitted(documents, IamRequest(action, resource))


def test_the_matrices_name_every_role_of_a_function():
    assert set(INDEX_QUERIES) == set(OBJECTS) == set(SENDS) == set(STARTS) == set(ROLES)
    assert {role_output(f.group).removesuffix("Arn") for f in FUNCTIONS.values()} == set(ROLES)


@pytest.mark.parametrize("role", ROLES)
def test_each_role_queries_exactly_the_indexes_its_code_queries(stage, role):
    documents, table = stage.documents, stage.table
    allowed = {index for index in INDEXES if _allows(documents(role), "dynamodb:Query", f"{table}/index/{index}")}
    assert allowed == INDEX_QUERIES[role]


@pytest.mark.parametrize("role", ROLES)
def test_each_role_reads_writes_and_deletes_exactly_the_objects_its_code_does(stage, role):
    documents, bucket = stage.documents, stage.bucket
    allowed = {(prefix, action) for prefix in PREFIXES for action in (R, W, D)
               if _allows(documents(role), action, f"{bucket}/{prefix}/acme/1/part-000000.parquet")}
    assert allowed == OBJECTS[role]
    # Nothing outside the app's own prefixes (a key of no prefix, the bucket's policy), nor a prefix's look-alike.
    for key in ("loose.csv", "uploadsx/acme/1.csv", "mirrors/acme/x"):
        assert not any(_allows(documents(role), action, f"{bucket}/{key}") for action in (R, W, D)), (role, key)


@pytest.mark.parametrize("role", ROLES)
def test_each_role_sends_to_exactly_the_queues_its_code_sends_to(stage, role):
    documents, queue = stage.documents, stage.queue
    assert {name for name in QUEUES if _allows(documents(role), "sqs:SendMessage", queue[name])} == SENDS[role]
    for name in SENDS[role]:  # the queue's URL, which WorkQueue asks for first
        assert _allows(documents(role), "sqs:GetQueueUrl", queue[name]), (role, name)


@pytest.mark.parametrize("role", ROLES)
def test_each_role_starts_exactly_the_state_machines_its_code_starts_and_stops_none(stage, role):
    documents, machine = stage.documents, stage.machine
    assert {name for name in MACHINES if _allows(documents(role), "states:StartExecution", machine[name])} == \
        STARTS[role]
    execution = machine["reconciliation-run"].replace(":stateMachine:", ":execution:") + ":run-1"
    assert not _allows(documents(role), "states:StopExecution", execution)


@pytest.mark.parametrize("role", ["ApiRole", "IngestionRole", "RunsRole", "InvestigationsRole", "SweeperRole",
                                  "AgentsRole"])
def test_the_data_groups_read_and_write_the_tables_items_list_the_bucket_and_emit_events(stage, role):
    documents, table, bucket = stage.documents, stage.table, stage.bucket
    for action in ("GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "BatchWriteItem", "BatchGetItem"):
        assert _allows(documents(role), f"dynamodb:{action}", table), (role, action)
    assert not _allows(documents(role), "dynamodb:Scan", table)
    assert _allows(documents(role), "s3:ListBucket", bucket)  # a missing key's HEAD is then 404, not 403
    assert _allows(documents(role), "events:PutEvents", stage.bus)


def test_the_check_refuses_a_role_given_one_index_more_or_one_prefix_less(stage):
    """The matrices can fail: the runs' role, as the template has it, is neither the API's nor the sweeper's."""
    documents, table, bucket = stage.documents, stage.table, stage.bucket
    assert not _allows(documents("RunsRole"), "dynamodb:Query", f"{table}/index/gsi4")
    assert not _allows(documents("InvestigationsRole"), "s3:GetObject", f"{bucket}/runs/acme/1/open_a.parquet")
    assert _allows(documents("RunsRole"), "s3:GetObject", f"{bucket}/runs/acme/1/open_a.parquet")


def test_the_ingestion_role_deletes_of_the_mirror_a_streams_index_of_row_markers_alone(stage):
    """The count at an import's end rolls the index up (mirror.count_records): the markers and roll-ups it
    covers go; no part, marker or tombstone of an import itself."""
    documents, stream = stage.documents("IngestionRole"), f"{stage.bucket}/mirror/environment=acme/data_stream=bank"
    assert _allows(documents, D, f"{stream}/rows/import=7/_rows=1000")
    assert _allows(documents, D, f"{stream}/rows/rollup/g=00000003-0123456789ab.json")
    for key in ("import=7/_rows=1000", "import=7/part-000000.parquet", "deleted/import=7/record-9"):
        assert not _allows(documents, D, f"{stream}/{key}"), key


def _resource(stage, kind: str, name: str) -> str:
    return {"index": lambda: f"{stage.table}/index/{name}", "queue": lambda: stage.queue[name],
            "machine": lambda: stage.machine[name], "object": lambda: f"{stage.bucket}/{name}/acme/1/x.json"}[kind]()


@pytest.mark.parametrize(("role", "sid", "action", "kind", "name", "call"), UNREACHED,
                         ids=[f"{u[0]}-{u[2]}-{u[4]}" for u in UNREACHED])
def test_what_the_deployment_proof_does_not_reach_is_allowed_by_the_statement_meant_for_it(
        stage, role, sid, action, kind, name, call):
    [statement] = [s for d in stage.documents(role) for s in d["Statement"] if s.get("Sid") == sid]
    assert permitted([{"Version": "2012-10-17", "Statement": [statement]}],
                     IamRequest(action, _resource(stage, kind, name))), (role, sid, call)


def test_the_state_machines_role_runs_the_runs_distributed_map_and_nothing_more():
    # The workflows stack's role, resolved for a stage: what a Distributed Map needs of it, exactly
    from chalicelib.local.provision import WORKFLOWS_TEMPLATE_PATH

    template = load_template(WORKFLOWS_TEMPLATE_PATH)
    names = {"ReconciliationRunStateMachineName": "recon-prod-reconciliation-run",
             "FileImportStateMachineName": "recon-prod-file-import", "BucketName": "recon-prod-data"}
    resolver = Resolver(template, {name: "arn:aws:lambda:us-east-1:123456789012:function:f" if name.endswith("Arn")
                                   else names.get(name, name) for name in template["Parameters"]}, "us-east-1")
    documents = [resolver.resolve(p["PolicyDocument"])
                 for p in template["Resources"]["StateMachineRole"]["Properties"]["Policies"]]
    states = "arn:aws:states:us-east-1:123456789012"
    run_machine, import_machine = f"{states}:stateMachine:recon-prod-reconciliation-run", \
        f"{states}:stateMachine:recon-prod-file-import"
    child = f"{states}:execution:recon-prod-reconciliation-run/Partitions:0f1e2d3c"

    # Its map runs start child executions of the run state machine, which it watches and stops
    assert _allows(documents, "states:StartExecution", run_machine)
    assert _allows(documents, "states:DescribeExecution", child) and _allows(documents, "states:StopExecution", child)
    # and its ItemReader reads a run's manifest
    assert _allows(documents, "s3:GetObject", "arn:aws:s3:::recon-prod-data/runs/acme/7/partitions/0/manifest.json")
    # Nothing else: no other machine, no other prefix, no write
    assert not _allows(documents, "states:StartExecution", import_machine)
    assert not _allows(documents, "states:StopExecution", f"{states}:execution:recon-prod-file-import/x:y")
    assert not _allows(documents, "s3:GetObject", "arn:aws:s3:::recon-prod-data/uploads/acme/1.csv")
    assert not _allows(documents, "s3:PutObject", "arn:aws:s3:::recon-prod-data/runs/acme/7/x.json")
