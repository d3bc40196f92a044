"""Runs the packaged app as Lambda would, in a clean interpreter: only the unpacked app, the
unpacked layer and boto3 on sys.path (`python3.12 -I -S`). Every handler gets the event shape
AWS sends it (API Gateway proxy, SQS, EventBridge, schedule, Step Functions task input), against
moto's server; the Step Functions executions the app starts are read back from moto and their
ASL walked here, calling the task handlers. Prints one JSON line per step; exits 1 on a failure.

Every AWS call a handler makes (and every URL it presigns, which its caller uses with the handler's
role) is written to the file `calls` names, one JSON line each: the handler, the service's signing name
(IAM's prefix), the operation and the parameters that name what it reaches (tests/support/iam.py reads
them as IAM actions on resources). Calls made by this runner itself, between handlers, are not written.

argv: a JSON file of {"paths": [...], "machines": {name: {"definition", "functions"}}, "with_engine": bool,
"calls": path}
"""
import json
import os
import sys
import time
import traceback
import uuid

SETUP = json.load(open(sys.argv[1]))
sys.path[:0] = SETUP["paths"]

import boto3  # noqa: E402
import botocore.handlers  # noqa: E402

invoked = set()
failures = 0
running = []  # the handler being run, while it runs
calls_file = open(SETUP["calls"], "w", buffering=1)


def naming_params(params):
    """What names the resources a call reaches: its top-level strings (table, index, bucket, key, queue,
    state machine, secret, schedule, group, sender, model), and the names inside its batches and targets;
    never items, bodies or messages."""
    named = {k: v for k, v in params.items() if isinstance(v, str) and len(v) <= 2048}
    if isinstance(params.get("RequestItems"), dict):
        named["RequestItems"] = sorted(params["RequestItems"])
    if isinstance(params.get("TransactItems"), list):
        named["TransactItems"] = [[kind, spec.get("TableName")] for item in params["TransactItems"]
                                  for kind, spec in item.items()]
    if isinstance(params.get("Entries"), list):
        named["Entries"] = [{"EventBusName": e["EventBusName"]} if "EventBusName" in e else {}
                            for e in params["Entries"]]
    if isinstance(params.get("Delete"), dict):
        named["Delete"] = [o["Key"] for o in params["Delete"].get("Objects", [])]
    if isinstance(params.get("CopySource"), dict):
        named["CopySource"] = f"{params['CopySource']['Bucket']}/{params['CopySource']['Key']}"
    if isinstance(params.get("Target"), dict):
        named["Target"] = {k: params["Target"][k] for k in ("Arn", "RoleArn") if k in params["Target"]}
    return named


def record_call(params, model, context, **_):
    if running:
        calls_file.write(json.dumps({
            "function": running[-1], "service": model.service_model.signing_name, "operation": model.name,
            "presigned": bool(context.get("is_presign_request")), "params": naming_params(params)}) + "\n")


# Every botocore session registers the built-in handlers when it is made, the app's own sessions too.
botocore.handlers.BUILTIN_HANDLERS.append(("before-parameter-build", record_call))


def report(step, ok, detail=""):
    global failures
    failures += 0 if ok else 1
    print(json.dumps({"step": step, "ok": bool(ok), "detail": str(detail)[:2000]}), flush=True)


class Context:
    function_name = "recon-proof"
    memory_limit_in_mb = 1024
    aws_request_id = "proof"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:recon-proof"

    def get_remaining_time_in_millis(self):
        return 300_000


def handler(name):
    import app

    invoked.add(name)
    function = app.app if name == "api_handler" else getattr(app, name)

    def run(event, context):
        running.append(name)
        try:
            return function(event, context)
        finally:
            running.pop()
    return run


# --- event shapes -----------------------------------------------------------------------

def api(method, resource, path_parameters=None, body=None, key=None, query=None):
    path = resource
    for name, value in (path_parameters or {}).items():
        path = path.replace("{" + name + "}", str(value))
    headers = {"Host": "abc.execute-api.us-east-1.amazonaws.com", "Content-Type": "application/json"}
    if key:
        headers["X-API-KEY"] = key
    event = {
        "resource": resource, "path": path, "httpMethod": method, "headers": headers,
        "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": query, "multiValueQueryStringParameters": {k: [v] for k, v in (query or {}).items()} or None,
        "pathParameters": {k: str(v) for k, v in (path_parameters or {}).items()} or None, "stageVariables": None,
        "requestContext": {"resourcePath": resource, "httpMethod": method, "path": f"/api{path}", "stage": "api",
                           "requestId": str(uuid.uuid4()), "accountId": "123456789012", "identity": {"sourceIp": "127.0.0.1"}},
        "body": json.dumps(body) if body is not None else None, "isBase64Encoded": False,
    }
    response = handler("api_handler")(event, Context())
    return response["statusCode"], json.loads(response["body"]) if response.get("body") else None


def sqs_event(queue_url, queue_arn):
    sqs = boto3.client("sqs")
    messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, AttributeNames=["All"]).get("Messages", [])
    return [{"Records": [{
        "messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"], "body": m["Body"],
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": str(int(time.time() * 1000)),
                       "SenderId": "123456789012", "ApproximateFirstReceiveTimestamp": str(int(time.time() * 1000))},
        "messageAttributes": {}, "md5OfBody": m["MD5OfBody"], "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn, "awsRegion": "us-east-1"}]} for m in messages]


def sqs_record(body):
    """An SQS event of one message that was never on a queue (nothing to delete afterwards)."""
    now = str(int(time.time() * 1000))
    return {"Records": [{
        "messageId": str(uuid.uuid4()), "receiptHandle": "proof", "body": body,
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": now, "SenderId": "123456789012",
                       "ApproximateFirstReceiveTimestamp": now},
        "messageAttributes": {}, "md5OfBody": "-", "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:proof", "awsRegion": "us-east-1"}]}


def eventbridge(detail_type, source, resources, detail):
    return {"version": "0", "id": str(uuid.uuid4()), "detail-type": detail_type, "source": source,
            "account": "123456789012", "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "region": "us-east-1", "resources": resources, "detail": detail}


# --- Step Functions, walked here ----------------------------------------------------------

driven = set()


def drive_new_executions(machine_name):
    """Every execution of the machine not driven yet: its input as the app sent it to Step
    Functions, through the ASL's Task and Choice states, calling the packaged task handlers."""
    sfn = boto3.client("stepfunctions")
    machine = SETUP["machines"][machine_name]
    arn = next(m["stateMachineArn"] for m in sfn.list_state_machines()["stateMachines"] if m["name"] == machine_name)
    results = []
    for execution in sfn.list_executions(stateMachineArn=arn)["executions"]:
        if execution["executionArn"] in driven:
            continue
        driven.add(execution["executionArn"])
        document = json.loads(sfn.describe_execution(executionArn=execution["executionArn"])["input"])
        results.append(walk(machine, document))
    return results


def walk(machine, document):
    definition, functions = machine["definition"], machine["functions"]
    state_name = definition["StartAt"]
    visited = []
    while True:
        state = definition["States"][state_name]
        visited.append(state_name)
        if state["Type"] == "Task":
            function = functions[state["Resource"].removeprefix("${").removesuffix("}")]
            try:
                document = handler(function)(document, Context())
            except Exception as error:  # the ASL's Catch: on to GiveUp with the error
                catch = state.get("Catch", [{}])[0]
                if not catch:
                    raise
                document = {**document, "error": {"Error": type(error).__name__, "Cause": str(error)}}
                state_name = catch["Next"]
                continue
        elif state["Type"] == "Choice":
            nxt = state.get("Default")
            for rule in state["Choices"]:
                if document.get(rule["Variable"].removeprefix("$.")) == rule["StringEquals"]:
                    nxt = rule["Next"]
                    break
            state_name = nxt
            continue
        elif state["Type"] == "Map":  # a Distributed Map: its items from S3, one at a time, through its processor
            try:
                walk_map(machine, state, document, visited)
            except Exception as error:
                document = {**document, "error": {"Error": "States.ExceedToleratedFailureThreshold", "Cause": str(error)}}
                state_name = state["Catch"][0]["Next"]
                continue
        elif state["Type"] == "Fail":
            raise RuntimeError(f"{state.get('Error')}: {state.get('Cause')}")
        elif state["Type"] in ("Succeed", "Pass"):
            return visited
        if state.get("End"):
            return visited
        state_name = state["Next"]


def walk_map(machine, state, document, visited):
    """The Map's ItemReader (a JSON array in S3, its Bucket and Key at paths of the input), each item's input
    from its ItemSelector, walked through the ItemProcessor's states; ResultPath null keeps the input."""
    def value(path, item):
        source, path = (item, path.removeprefix("$$.Map.Item.Value.")) if path.startswith("$$.") else \
            (document, path.removeprefix("$."))
        for part in path.split("."):
            source = source[part]
        return source

    where = {k.removesuffix(".$"): value(v, None) for k, v in state["ItemReader"]["Parameters"].items()}
    items = json.loads(boto3.client("s3").get_object(Bucket=where["Bucket"], Key=where["Key"])["Body"].read())
    assert state["ResultPath"] is None, state
    for item in items:
        selected = {k.removesuffix(".$"): value(v, item) for k, v in state["ItemSelector"].items()}
        visited.append(walk({"definition": state["ItemProcessor"], "functions": machine["functions"]}, selected))


# --- the proof ----------------------------------------------------------------------------

def step(name):
    def wrap(fn):
        try:
            fn()
        except Exception:
            report(name, False, traceback.format_exc())
        return fn
    return wrap


def main():
    if not SETUP["with_engine"]:
        return without_engine()
    from chalicelib.container import container
    from chalicelib.services.api_keys import create_key
    from chalicelib.settings import current_settings

    settings = current_settings()
    _, key = create_key(container().api_keys, "acme", label="proof")
    # moto's server polls a queue for its event source mapping itself, on each message sent, and
    # takes messages this proof hands to the handlers: off, as the proof is the poller here (and
    # only ever against the proof's own moto server on loopback).
    assert os.environ["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:"), os.environ["AWS_ENDPOINT_URL"]
    lam = boto3.client("lambda")
    for mapping in lam.list_event_source_mappings()["EventSourceMappings"]:
        lam.update_event_source_mapping(UUID=mapping["UUID"], Enabled=False)
    sqs = boto3.client("sqs")
    bulk_url = sqs.get_queue_url(QueueName=settings.bulk_queue_name)["QueueUrl"]
    investigation_url = sqs.get_queue_url(QueueName=settings.investigation_queue_name)["QueueUrl"]

    def queue_arn(url: str) -> str:
        return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]

    state = {}

    status, body = api("GET", "/v1/health")
    report("GET /v1/health", status == 200 and body == {"status": "ok"}, body)
    status, body = api("GET", "/v1/data_streams")
    report("unauthenticated route is 401", status == 401, body)

    for stream in ("bank", "ledger"):
        status, body = api("POST", "/v1/data_streams", body={"key": stream, "name": stream.title()}, key=key)
        report(f"POST /v1/data_streams {stream}", status == 201, body)

    status, body = api("POST", "/v1/records/bulk", key=key, body={"records": [
        {"date": "2026-11-01", "data_stream_key": "bank", "amount": 125000, "direction": "credit", "external_id": "b1"},
        {"date": "2026-11-02", "data_stream_key": "bank", "amount": 4200, "direction": "credit", "external_id": "b2"},
        {"date": "2026-01-05", "data_stream_key": "bank", "amount": 777, "direction": "credit", "external_id": "b3"},
        {"date": "2026-11-01", "data_stream_key": "ledger", "amount": 125000, "direction": "debit", "external_id": "l1"},
        {"date": "2026-11-03", "data_stream_key": "ledger", "amount": 4200, "direction": "debit", "external_id": "l2"},
        {"date": "2026-01-06", "data_stream_key": "ledger", "amount": 770, "direction": "debit", "external_id": "l3"}]})
    report("POST /v1/records/bulk", status == 202, body)
    bulk_id = body["id"]

    @step("bulk_worker: SQS event")
    def _():
        events = sqs_event(bulk_url, queue_arn(bulk_url))
        assert events, "no message on the bulk queue"
        for event in events:
            handler("bulk_worker")(event, Context())
        status, body = api("GET", "/v1/bulk_requests/{id}", {"id": bulk_id}, key=key)
        report("bulk_worker: SQS event", body["status"] == "completed" and body["successful_items"] == 6, body)

    @step("s3_object_created + file import tasks")
    def _():
        status, body = api("POST", "/v1/data_streams/{key}/file_imports", {"key": "bank"}, key=key,
                           body={"filename": "november.csv", "format": "csv"})
        assert status == 201, body
        job_id = body["id"]
        object_key = body["upload_url"].split(f"/{settings.bucket_name}/", 1)[1].split("?", 1)[0] \
            if f"/{settings.bucket_name}/" in body["upload_url"] else body["upload_url"].split(".com/", 1)[1].split("?", 1)[0]
        boto3.client("s3").put_object(Bucket=settings.bucket_name, Key=object_key,
                                      Body=b"date,amount,description,external_id\n2026-11-04,10.00,FEE,f1\n")
        handler("s3_object_created")(eventbridge("Object Created", "aws.s3", [f"arn:aws:s3:::{settings.bucket_name}"], {
            "version": "0", "bucket": {"name": settings.bucket_name},
            "object": {"key": object_key, "size": 60, "etag": "abc", "sequencer": "1"},
            "request-id": "x", "requester": "123456789012", "reason": "PutObject"}), Context())
        paths = drive_new_executions(settings.file_import_state_machine.rsplit(":", 1)[-1])
        status, body = api("GET", "/v1/file_imports/{id}", {"id": job_id}, key=key)
        report("s3_object_created + file import tasks", body["status"] == "completed" and body["successful_items"] == 1,
               {"paths": paths, "job": body})

    @step("file_import_fail")
    def _():
        status, body = api("POST", "/v1/data_streams/{key}/file_imports", {"key": "bank"}, key=key,
                           body={"filename": "never.csv", "format": "csv"})
        result = handler("file_import_fail")({"environment": "acme", "job_id": body["id"],
                                              "error": {"Error": "States.TaskFailed", "Cause": "proof"}}, Context())
        status, body = api("GET", "/v1/file_imports/{id}", {"id": body["id"]}, key=key)
        report("file_import_fail", body["status"] == "failed", {"result": result, "job": body})

    @step("reconciliation run tasks")
    def _():
        status, body = api("POST", "/v1/reconciliations", key=key, body={
            "name": "Bank to ledger", "run_type": "batch", "side_a_stream_keys": ["bank"], "side_b_stream_keys": ["ledger"]})
        assert status == 201, body
        state["reconciliation"] = body["id"]
        status, rule = api("POST", "/v1/reconciliations/{id}/rules", {"id": body["id"]}, key=key, body={
            "name": "Same amount within 3 days", "priority": 1, "cardinality": "one_to_one",
            "conditions": [{"field": "amount", "operator": "equals"}, {"field": "date", "operator": "within", "days": 3}]})
        assert status == 201, rule
        state["rule"] = rule["id"]
        status, dry = api("POST", "/v1/reconciliation_rules/{id}/dry_run", {"id": rule["id"]}, key=key)
        report("dry run in the API function (engine layer)", status == 200, dry)
        status, run = api("POST", "/v1/reconciliations/{id}/runs", {"id": body["id"]}, key=key)
        assert status == 202, run
        paths = drive_new_executions(settings.reconciliation_run_state_machine.rsplit(":", 1)[-1])
        status, run = api("GET", "/v1/reconciliations/{id}/runs/{run_id}", {"id": body["id"], "run_id": run["id"]}, key=key)
        status, matches = api("GET", "/v1/reconciliation_matches", key=key, query={"reconciliation_id": str(body["id"])})
        report("reconciliation run tasks", run["status"] == "completed" and len(matches["data"]) == 2,
               {"paths": paths, "run": run, "matches": len(matches["data"])})

    @step("a reconciliation run fanned out")
    def _():
        # The limits of a run made tiny for this step (settings from the environment, the container built again):
        # more open records than one match function holds fan out on the Distributed Map, one partition a call.
        from chalicelib.container import install
        from chalicelib.settings import Settings, install_settings
        install_settings(Settings(max_run_records=3, run_partition_records=2))
        install(None)
        try:
            status, body = api("POST", "/v1/reconciliations", key=key, body={
                "name": "Bank to ledger, fanned out", "run_type": "batch", "side_a_stream_keys": ["bank"],
                "side_b_stream_keys": ["ledger"]})
            assert status == 201, body
            status, rule = api("POST", "/v1/reconciliations/{id}/rules", {"id": body["id"]}, key=key, body={
                "name": "Same amount within 3 days", "priority": 1, "cardinality": "one_to_one",
                "conditions": [{"field": "amount", "operator": "equals"},
                               {"field": "date", "operator": "within", "days": 3}]})
            assert status == 201, rule
            status, run = api("POST", "/v1/reconciliations/{id}/runs", {"id": body["id"]}, key=key)
            assert status == 202, run
            paths = drive_new_executions(settings.reconciliation_run_state_machine.rsplit(":", 1)[-1])
            status, run = api("GET", "/v1/reconciliations/{id}/runs/{run_id}", {"id": body["id"], "run_id": run["id"]},
                              key=key)
        finally:
            install_settings(None)
            install(None)
        walked = [state for path in paths for state in path if isinstance(state, str)]
        report("a reconciliation run fanned out", run["status"] == "completed" and "Partitions" in walked and
               "Merge" in walked and {"reconciliation_run_partition", "reconciliation_run_merge"} <= invoked,
               {"paths": paths, "run": run})

    @step("investigation_worker: SQS event")
    def _():
        status, queue = api("GET", "/v1/reconciliation_exceptions", key=key)
        assert status == 200 and queue["data"], queue
        exception_id = queue["data"][0]["id"]
        status, body = api("POST", "/v1/reconciliation_exceptions/{id}/investigations", {"id": exception_id}, key=key)
        assert status == 202, body
        events = sqs_event(investigation_url, queue_arn(investigation_url))
        assert events, "no message on the investigation queue"
        for event in events:
            handler("investigation_worker")(event, Context())
        status, detail = api("GET", "/v1/reconciliation_exceptions/{id}", {"id": exception_id}, key=key)
        latest = detail.get("investigation") or {}
        report("investigation_worker: SQS event", latest.get("status") == "completed", latest)

    @step("reconciliation_run_fail")
    def _():
        status, run = api("POST", "/v1/reconciliations/{id}/runs", {"id": state["reconciliation"]}, key=key)
        assert status == 202, run
        sfn = boto3.client("stepfunctions")  # this execution is failed by hand, not walked
        drive_marker = settings.reconciliation_run_state_machine.rsplit(":", 1)[-1]
        arn = next(m["stateMachineArn"] for m in sfn.list_state_machines()["stateMachines"] if m["name"] == drive_marker)
        driven.update(e["executionArn"] for e in sfn.list_executions(stateMachineArn=arn)["executions"])
        handler("reconciliation_run_fail")({"environment": "acme", "run_id": run["id"],
                                            "error": {"Error": "States.TaskFailed", "Cause": "proof"}}, Context())
        status, body = api("GET", "/v1/reconciliations/{id}/runs/{run_id}", {"id": state["reconciliation"], "run_id": run["id"]}, key=key)
        report("reconciliation_run_fail", body["status"] == "failed", body)

    @step("agent_worker: a schedule's firing, SQS event")
    def _():
        status, agent = api("POST", "/v1/agents", key=key, body={
            "name": "Proof", "instructions": "Say hello.", "cadence": "daily", "hour": 9, "minute": 0,
            "timezone": "America/New_York"})
        assert status == 201, agent
        # EventBridge Scheduler's part, done here: the schedule the API put, fired for one time.
        scheduler = boto3.client("scheduler")
        [schedule] = [scheduler.get_schedule(Name=s["Name"], GroupName=settings.schedule_group_name)
                      for s in scheduler.list_schedules(GroupName=settings.schedule_group_name)["Schedules"]]
        target = schedule["Target"]
        agent_url = sqs.get_queue_url(QueueName=settings.agent_run_queue_name)["QueueUrl"]
        assert (schedule["ScheduleExpression"], schedule["ScheduleExpressionTimezone"]) == \
            ("cron(0 9 * * ? *)", "America/New_York"), schedule
        assert (target["Arn"], target["RoleArn"]) == (queue_arn(agent_url), settings.scheduler_role_arn), target
        body = target["Input"].replace("<aws.scheduler.scheduled-time>", "2026-11-23T14:00:00Z")
        for _ in range(2):  # delivered at least once: the same firing twice is one run
            sqs.send_message(QueueUrl=agent_url, MessageBody=body)
        events = sqs_event(agent_url, queue_arn(agent_url))
        assert len(events) == 2, events
        for event in events:
            handler("agent_worker")(event, Context())
        status, runs = api("GET", "/v1/agents/{id}/runs", {"id": agent["id"]}, key=key)
        # No model answers on moto: the run ends failed, saying so, rather than staying queued.
        [run] = runs["data"]
        report("agent_worker: a schedule's firing, SQS event",
               run["trigger"] == "schedule" and run["status"] in ("completed", "failed"), run)

    browser_run_tasks()
    browser_attempts(settings, key, sqs, queue_arn)

    @step("webhook_fanout and webhook_worker: the bus's rule, SQS events")
    def _():
        # A public address (on AWS a private one is refused); nothing answers it here.
        status, endpoint = api("POST", "/v1/webhook_endpoints", key=key, body={
            "url": "https://93.184.215.14/recon", "events": ["reconciliation_run.completed"], "description": "proof"})
        assert status == 201, endpoint
        # The events of the steps above, put on the stage's bus, sent by its rule to the fan-out queue.
        fan_out_url = sqs.get_queue_url(QueueName=settings.webhook_event_queue_name)["QueueUrl"]
        told = []
        while events := sqs_event(fan_out_url, queue_arn(fan_out_url)):
            for event in events:
                told.append(json.loads(event["Records"][0]["body"])["detail-type"])
                handler("webhook_fanout")(event, Context())
        if not {"bulk_request.completed", "file_import.completed", "reconciliation_run.completed",
                "investigation.completed", "agent_run.failed"} <= set(told):
            report("the bus's rule sent the events of the steps above", False, sorted(set(told)))
        deliveries_url = sqs.get_queue_url(QueueName=settings.webhook_delivery_queue_name)["QueueUrl"]
        attempts = 0
        while events := sqs_event(deliveries_url, queue_arn(deliveries_url)):
            for event in events:
                handler("webhook_worker")(event, Context())
                attempts += 1
        status, log = api("GET", "/v1/webhook_endpoints/{id}/deliveries", {"id": endpoint["id"]}, key=key)
        # A delivery a completed run (the endpoint takes one type: the run and the fanned-out run), each attempted
        # once, whatever the address answered.
        report("webhook_fanout and webhook_worker: the bus's rule, SQS events",
               attempts == 2 and [(d["event_type"], d["attempts"]) for d in log["data"]] == [
                   ("reconciliation_run.completed", 1)] * 2,
               {"told": told, "attempts": attempts, "deliveries": log["data"]})
        status, verified = api("GET", "/v1/audit_events/verify", key=key)
        report("the audit trail of everything above verifies", verified["intact"] is True, verified)

    @step("the API's other reads: a resource's audit entries, records by status, unreconciled records")
    def _():
        status, trail = api("GET", "/v1/audit_events", key=key, query={
            "resource_type": "reconciliation", "resource_id": str(state["reconciliation"])})
        assert status == 200 and trail["data"], trail  # gsi3
        status, reconciled = api("GET", "/v1/records", key=key, query={"status": "reconciled"})
        assert status == 200 and reconciled["data"], reconciled  # gsi4
        status, open_ = api("GET", "/v1/records", key=key, query={"status": "unreconciled"})
        report("the API's other reads: a resource's audit entries, records by status, unreconciled records",
               status == 200 and open_["data"], open_)  # gsi5

    @step("the API's deletes: a record (its tombstone), a stream (its mirror), a cancelled import")
    def _():
        status, body = api("POST", "/v1/data_streams", body={"key": "scratch", "name": "Scratch"}, key=key)
        assert status == 201, body
        status, body = api("POST", "/v1/records/bulk", key=key, body={"records": [
            {"date": "2026-11-05", "data_stream_key": "scratch", "amount": 5, "direction": "credit", "external_id": "s1"}]})
        assert status == 202, body
        for event in sqs_event(bulk_url, queue_arn(bulk_url)):
            handler("bulk_worker")(event, Context())
        status, records = api("GET", "/v1/records", key=key, query={"data_stream_key": "scratch"})
        [record] = records["data"]
        status, body = api("DELETE", "/v1/records/{id}", {"id": record["id"]}, key=key)
        assert status == 204, body  # a tombstone in the mirror
        status, body = api("DELETE", "/v1/data_streams/{key}", {"key": "scratch"}, key=key)
        assert status in (202, 204), body  # the stream's mirror, published and staged, deleted
        status, waiting = api("POST", "/v1/data_streams/{key}/file_imports", {"key": "bank"}, key=key,
                              body={"filename": "later.csv", "format": "csv"})
        status, cancelled = api("POST", "/v1/file_imports/{id}/cancel", {"id": waiting["id"]}, key=key)
        report("the API's deletes: a record (its tombstone), a stream (its mirror), a cancelled import",
               status == 202 and cancelled["status"] == "cancelled", cancelled)  # its upload looked for: none

    @step("an agent's files through the API, then the agent deleted")
    def _():
        import base64

        status, agent = api("POST", "/v1/agents", key=key, body={"name": "Files", "instructions": "Read them."})
        assert status == 201, agent
        status, inline = api("POST", "/v1/agents/{id}/files", {"id": agent["id"]}, key=key, body={
            "filename": "notes.txt", "content_type": "text/plain", "content_base64": base64.b64encode(b"hi").decode()})
        assert status == 201, inline
        status, later = api("POST", "/v1/agents/{id}/files", {"id": agent["id"]}, key=key, body={
            "filename": "later.txt", "content_type": "text/plain"})
        assert status == 201 and later["upload_url"], later
        status, shown = api("GET", "/v1/agents/{id}", {"id": agent["id"]}, key=key)  # download URLs, landed sizes
        assert status == 200, shown
        status, body = api("DELETE", "/v1/agents/{id}/files/{file_id}", {"id": agent["id"], "file_id": inline["id"]},
                           key=key)
        assert status == 204, body
        status, body = api("DELETE", "/v1/agents/{id}", {"id": agent["id"]}, key=key)
        report("an agent's files through the API, then the agent deleted", status == 204, body)

    @step("s3_object_created: a drop into a stream's folder, and one no agent takes")
    def _():
        s3 = boto3.client("s3")
        s3.put_object(Bucket=settings.bucket_name, Key="drops/acme/bank/dropped.csv",
                      Body=b"date,amount,description,external_id\n2026-11-06,3.00,DROP,d1\n")
        s3.put_object(Bucket=settings.bucket_name, Key="drops/acme/loose.txt", Body=b"for an agent")
        for dropped in ("drops/acme/bank/dropped.csv", "drops/acme/loose.txt"):
            handler("s3_object_created")(eventbridge("Object Created", "aws.s3", [f"arn:aws:s3:::{settings.bucket_name}"], {
                "version": "0", "bucket": {"name": settings.bucket_name},
                "object": {"key": dropped, "size": 20, "etag": "d", "sequencer": "2"},
                "request-id": "y", "requester": "123456789012", "reason": "PutObject"}), Context())
        paths = drive_new_executions(settings.file_import_state_machine.rsplit(":", 1)[-1])
        refused = s3.list_objects_v2(Bucket=settings.bucket_name, Prefix="drops-refused/acme/").get("Contents", [])
        report("s3_object_created: a drop into a stream's folder, and one no agent takes",
               len(paths) == 1 and len(refused) == 1, {"paths": paths, "refused": refused})

    @step("sweep_stuck_jobs: scheduled event")
    def _():
        handler("sweep_stuck_jobs")(eventbridge("Scheduled Event", "aws.events",
                                                ["arn:aws:events:us-east-1:123456789012:rule/sweep"], {}), Context())
        report("sweep_stuck_jobs: scheduled event", True)

    print(json.dumps({"invoked": sorted(invoked)}), flush=True)


def browser_run_tasks():
    """The browser-run state machine's small tasks (its attempts run in the browser worker's image, not
    in this package), with the input the ASL gives them, for a run whose agent was deleted meanwhile:
    each reads the stage's table and ends quietly; the pause still hands its task token back."""
    gone = {"environment": "acme", "agent_id": "agt_gone", "run_id": 1}
    for name, event in (("browser_run_pause", {**gone, "task_token": "proof-token"}),
                        ("browser_run_expire", gone),
                        ("browser_run_fail", {**gone, "error": {"Error": "States.TaskFailed", "Cause": "proof"}})):
        try:
            result = handler(name)(dict(event), Context())
            report(f"{name}: a run that is gone", result == {}, result)
        except Exception:
            report(f"{name}: a run that is gone", False, traceback.format_exc())


class ScriptedPortal:
    """Chromium's part of an attempt (adapters/browser_portal.py, which calls no AWS service), scripted:
    each attempt gets the next outcome."""

    def __init__(self, outcomes):
        self.outcomes = list(outcomes)

    def run(self, job):
        assert job.credentials.username == "ops", job  # read from the agent's secret
        return self.outcomes.pop(0)


def attempt(event):
    """The browser worker: the image's handler (chalicelib.handlers.browser.attempt_handler, from this same
    package's code), in its own function's role."""
    from chalicelib.handlers.browser import attempt_handler

    invoked.add("browser_run_attempt")
    running.append("browser_run_attempt")
    try:
        return attempt_handler(dict(event), Context())
    finally:
        running.pop()


def browser_attempts(settings, key, sqs, queue_arn):
    """A browser agent's runs through the browser worker's attempts, as the browser-run state machine calls
    its tasks (the machine itself is not walked: its pause waits on a task token moto never hands out). The
    agent is set up as the operator does it (chalicelib.cli agents create-browser, set-credentials: not a
    function, so not recorded); each run is queued by the API and handed to its workflow by the agent worker.
    The first run's attempt finds the portal asking for a code (the half-logged-in context kept), pauses,
    and is given the code (by hand here: the API sends it on the token); its next attempt exports a statement,
    which it imports (uploads/, the file-import state machine, walked). The second run's attempt fails with a
    screenshot (agents/). Then the expiry and the give-up of runs still going."""
    from chalicelib.container import container
    from chalicelib.domain.agents.browser import CodeRequested, Credentials, Exported, PortalFailed
    from chalicelib.domain.clock import utc_now
    from chalicelib.services.agents import create_browser_agent, set_credentials

    ports = container().ports
    agent_url = sqs.get_queue_url(QueueName=settings.agent_run_queue_name)["QueueUrl"]

    def started_run(agent_id):
        status, run = api("POST", "/v1/agents/{id}/runs", {"id": agent_id}, key=key)
        assert status == 202, run
        for event in sqs_event(agent_url, queue_arn(agent_url)):
            handler("agent_worker")(event, Context())  # starts the run's browser-run execution
        return {"environment": "acme", "agent_id": agent_id, "run_id": run["id"]}

    @step("browser_run_attempt: a code asked for, a statement exported and imported, a failure's screenshot")
    def _():
        agent = create_browser_agent(ports, "acme", {"name": "Bank portal", "active": False}, "portal_export",
                                     "https://portal.bank.test/", {
                                         "login": {"username_selector": "#u", "password_selector": "#p",
                                                   "submit_selector": "#go"},
                                         "verification": {"detect_selector": "#v", "code_selector": "#code",
                                                          "submit_selector": "#ok"},
                                         "export": {"steps": [], "download_selector": "#csv"},
                                         "data_stream_key": "bank"})
        set_credentials(ports, agent.id, Credentials("ops", "pw"))
        container().__dict__["portal"] = ScriptedPortal([
            CodeRequested({"cookies": [{"name": "half"}]}),
            Exported("statement.csv", b"date,amount,description,external_id\n2026-11-07,9.00,PORTAL,p1\n",
                     {"cookies": [{"name": "session"}]}),
            PortalFailed("export", "no download link", (), screenshot=b"\x89PNG proof")])
        run = started_run(agent.id)
        first = attempt(run)
        handler("browser_run_pause")({**run, "task_token": "proof-token"}, Context())
        waiting = ports.agent_runs.get("acme", agent.id, run["run_id"])
        ports.agent_runs.resume_with_code(waiting, "123456", utc_now())  # what POST /verification does, by hand
        second = attempt(run)
        imports = drive_new_executions(settings.file_import_state_machine.rsplit(":", 1)[-1])
        third = attempt(started_run(agent.id))
        # The other tasks on runs still going: no code in time, and a task that gave up.
        expired = started_run(agent.id)
        handler("browser_run_expire")(dict(expired), Context())
        gave_up = started_run(agent.id)
        handler("browser_run_fail")({**gave_up, "error": {"Error": "States.Timeout", "Cause": "proof"}}, Context())
        ends = [ports.agent_runs.get("acme", agent.id, r["run_id"]).status.value for r in (expired, gave_up)]
        report("browser_run_attempt: a code asked for, a statement exported and imported, a failure's screenshot",
               (first, second, third) == ({"status": "waiting_for_verification"}, {"status": "completed"},
                                          {"status": "failed"}) and len(imports) == 1 and ends == ["failed", "failed"],
               {"attempts": [first, second, third], "imports": imports, "expired and given up": ends})


def without_engine():
    """The functions without the engine layer import the app and run without it."""
    handler("s3_object_created")(eventbridge("Object Created", "aws.s3", ["arn:aws:s3:::b"], {
        "bucket": {"name": "b"}, "object": {"key": "uploads/acme/999999/x.csv", "etag": "e"}}), Context())
    browser_run_tasks()
    # The webhook functions: an event of an environment with no endpoint, and an attempt of a delivery
    # that is gone (each ends quietly).
    envelope = eventbridge("file_import.completed", "recon", [], {"environment": "nobody", "event": {
        "id": "evt_proof", "type": "file_import.completed", "created_at": "2026-11-24T00:00:00.000Z", "data": {}}})
    handler("webhook_fanout")(sqs_record(json.dumps(envelope)), Context())
    handler("webhook_worker")(sqs_record(json.dumps({"environment": "nobody", "endpoint_id": 1, "delivery_id": 1})),
                              Context())
    loaded = [m for m in ("polars", "numpy", "rapidfuzz") if m in sys.modules]
    report("s3_object_created, the browser-run tasks and the webhook functions without the engine layer",
           not loaded, loaded)
    print(json.dumps({"invoked": sorted(invoked)}), flush=True)


if __name__ == "__main__":
    main()
    sys.exit(1 if failures else 0)
