"""The Chalice app: the HTTP API under /v1 and the event handlers of async work.

Every function of the stage cold starts by importing this module, so it imports only what Chalice
needs to route an event (the settings, the API's route table): each handler imports its own
modules when it runs, and the API imports a route's module at that route's first request
(chalicelib/api/mount.py). bench/cold_start.py measures it."""
from chalice.app import Chalice, Rate

from chalicelib.api.mount import mount
from chalicelib.domain.bucket_layout import DROPS_PREFIX, UPLOADS_PREFIX
from chalicelib.settings import current_settings

settings = current_settings()
# API Gateway names the REST API after the app (its OpenAPI title), and publishes the API's metrics by
# that name: one per stage, as the functions are named, so that a stage's 5xx alarm (infra/template.yaml
# Api5xxAlarm) and dashboard see that stage's API alone.
app = Chalice(app_name=f"recon-{settings.stage}")
mount(app)


# The bulk queue: one message per bulk request, bulk action or export (handlers/bulk.py tells them
# apart); they share the function for its engine layer and 15 minutes.
@app.on_sqs_message(queue=settings.bulk_queue_name, batch_size=1)
def bulk_worker(event):
    from chalicelib.handlers.bulk import handle_bulk_messages
    handle_bulk_messages(event)


# Investigations of exceptions: one SQS message per investigation.
@app.on_sqs_message(queue=settings.investigation_queue_name, batch_size=1)
def investigation_worker(event):
    from chalicelib.handlers.investigations import handle_investigation_messages
    handle_investigation_messages(event)


# Agent runs: one SQS message per run (EventBridge Scheduler's, or one the API or a drop queued).
@app.on_sqs_message(queue=settings.agent_run_queue_name, batch_size=1)
def agent_worker(event):
    from chalicelib.handlers.agents import handle_agent_run_messages
    handle_agent_run_messages(event)


# Webhooks: the event bus's rule queues each domain event, which fans out to one delivery per
# endpoint; each delivery attempt is one message of the delivery queue.
@app.on_sqs_message(queue=settings.webhook_event_queue_name, batch_size=1)
def webhook_fanout(event):
    from chalicelib.handlers.webhooks import handle_webhook_event_messages
    handle_webhook_event_messages(event)


@app.on_sqs_message(queue=settings.webhook_delivery_queue_name, batch_size=1)
def webhook_worker(event):
    from chalicelib.handlers.webhooks import handle_webhook_delivery_messages
    handle_webhook_delivery_messages(event)


# File imports: S3 events start them; infra/statemachines/file_import.asl.json runs these tasks.
# Only uploads and drops: the app's own working files and mirror never invoke anything.
@app.on_cw_event({"source": ["aws.s3"], "detail-type": ["Object Created"],
                  "detail": {"bucket": {"name": [settings.bucket_name]},
                             "object": {"key": [{"prefix": UPLOADS_PREFIX}, {"prefix": DROPS_PREFIX}]}}})
def s3_object_created(event):
    from chalicelib.handlers import files
    files.handle_object_created(event)


@app.lambda_function(name="file_import_prepare")
def file_import_prepare(event, context):
    from chalicelib.handlers import files
    return files.prepare_task(event)


@app.lambda_function(name="file_import_chunks")
def file_import_chunks(event, context):
    from chalicelib.handlers import files
    return files.chunks_task(event)


@app.lambda_function(name="file_import_finish")
def file_import_finish(event, context):
    from chalicelib.handlers import files
    return files.finish_task(event)


@app.lambda_function(name="file_import_fail")
def file_import_fail(event, context):
    from chalicelib.handlers import files
    return files.give_up_task(event)


# Reconciliation runs: infra/statemachines/reconciliation_run.asl.json runs these tasks.
@app.lambda_function(name="reconciliation_run_load")
def reconciliation_run_load(event, context):
    from chalicelib.handlers import runs
    return runs.load_task(event)


@app.lambda_function(name="reconciliation_run_match")
def reconciliation_run_match(event, context):
    from chalicelib.handlers import runs
    return runs.match_task(event)


# A run that fans out: one partition a call (the Distributed Map's items), then the merge.
@app.lambda_function(name="reconciliation_run_partition")
def reconciliation_run_partition(event, context):
    from chalicelib.handlers import runs
    return runs.partition_task(event)


@app.lambda_function(name="reconciliation_run_merge")
def reconciliation_run_merge(event, context):
    from chalicelib.handlers import runs
    return runs.merge_task(event)


@app.lambda_function(name="reconciliation_run_persist")
def reconciliation_run_persist(event, context):
    from chalicelib.handlers import runs
    return runs.persist_task(event)


@app.lambda_function(name="reconciliation_run_exceptions")
def reconciliation_run_exceptions(event, context):
    from chalicelib.handlers import runs
    return runs.exceptions_task(event)


@app.lambda_function(name="reconciliation_run_finish")
def reconciliation_run_finish(event, context):
    from chalicelib.handlers import runs
    return runs.finish_task(event)


@app.lambda_function(name="reconciliation_run_fail")
def reconciliation_run_fail(event, context):
    from chalicelib.handlers import runs
    return runs.give_up_task(event)


# Browser agent runs: infra/statemachines/browser_run.asl.json runs these tasks beside the
# browser worker itself (a container-image function: chalicelib.handlers.browser.attempt_handler).
@app.lambda_function(name="browser_run_pause")
def browser_run_pause(event, context):
    from chalicelib.handlers import browser
    return browser.pause_task(event)


@app.lambda_function(name="browser_run_expire")
def browser_run_expire(event, context):
    from chalicelib.handlers import browser
    return browser.expire_task(event)


@app.lambda_function(name="browser_run_fail")
def browser_run_fail(event, context):
    from chalicelib.handlers import browser
    return browser.fail_task(event)


# No job or run stays pending or running for ever, and no stream count waits long for its recount.
@app.schedule(Rate(1, unit=Rate.MINUTES))
def sweep_stuck_jobs(event):
    from chalicelib.handlers import sweeper
    sweeper.sweep_task()
