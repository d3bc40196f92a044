"""Local mode runs SQS handlers in-process with Lambda's event shape and at-least-once delivery."""
import json
import time

from chalice import Chalice

from chalicelib.local.runtime import LocalRuntime


def make_app(seen: list, fail_bodies: set):
    app = Chalice(app_name="runtime-test")

    @app.on_sqs_message(queue="recon-dev-bulk", batch_size=5)
    def handle(event):
        bodies = [json.loads(r.body) for r in event]
        seen.append(bodies)
        if fail_bodies & {b["n"] for b in bodies}:
            fail_bodies.clear()  # fail once, like a Lambda that crashed
            raise RuntimeError("crash")

    return app


def _send(services, *numbers):
    url = services.aws.sqs.get_queue_url(QueueName="recon-dev-bulk")["QueueUrl"]
    for n in numbers:
        services.aws.sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"n": n}))
    return url


def test_messages_reach_the_handler_as_an_sqs_event_and_are_deleted(services):
    seen = []
    app = make_app(seen, set())
    runtime = LocalRuntime(app, services.aws.sqs, "us-east-1", log=lambda _: None)
    url = _send(services, 1, 2)
    [config] = runtime.queue_handlers

    handled = runtime.deliver_once(config)

    assert handled == 2 and seen == [[{"n": 1}, {"n": 2}]]
    attributes = services.aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "0"
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "0"


def test_a_failed_batch_stays_on_the_queue_and_is_delivered_again(services):
    seen = []
    app = make_app(seen, {7})
    runtime = LocalRuntime(app, services.aws.sqs, "us-east-1", log=lambda _: None, redelivery_seconds=0)
    url = _send(services, 7)
    [config] = runtime.queue_handlers

    assert runtime.deliver_once(config) == 0
    assert runtime.deliver_once(config) == 1

    assert seen == [[{"n": 7}], [{"n": 7}]]
    attributes = services.aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "0"


def test_scheduled_handlers_get_the_event_chalice_expects(services):
    from chalice import Rate

    app = Chalice(app_name="schedule-test")
    seen = []

    @app.schedule(Rate(1, unit=Rate.MINUTES))
    def tick(event):
        seen.append((event.detail_type, event.source, event.region))

    runtime = LocalRuntime(app, services.aws.sqs, "us-east-1", log=lambda m: seen.append(m))
    [config] = runtime.schedules
    runtime.run_schedule_once(config)
    assert seen == [("Scheduled Event", "aws.events", "us-east-1")]


def test_a_handler_stopped_by_the_stack_leaves_its_messages_in_flight_for_the_next_start(services):
    seen = []
    app = make_app(seen, {3})
    log = []
    runtime = LocalRuntime(app, services.aws.sqs, "us-east-1", log=log.append, redelivery_seconds=0)
    url = _send(services, 3)
    [config] = runtime.queue_handlers
    runtime.stop(grace_seconds=0)  # the handler fails because the stack is stopping

    assert runtime.deliver_once(config) == 0

    attributes = services.aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "1"  # neither deleted nor made visible
    assert "resume at the next start" in log[-1]


def test_the_bucket_watcher_delivers_each_object_once_across_restarts(services, tmp_path):
    from chalice.app import Chalice

    app = Chalice(app_name="watch-test")
    delivered = []

    @app.on_cw_event({"source": ["aws.s3"], "detail-type": ["Object Created"]})
    def created(event):
        delivered.append(event.detail["object"]["key"])

    s3, bucket, log_path = services.aws.s3, services.settings.bucket_name, tmp_path / "delivered.jsonl"
    s3.put_object(Bucket=bucket, Key="drops/acme/bank/a.csv", Body=b"1")

    def watch_until(count):
        runtime = LocalRuntime(app, services.aws.sqs, "us-east-1", log=lambda _: None)
        runtime.watch_bucket(s3, bucket, ("drops/",), log_path, interval_seconds=0.05)
        deadline = time.monotonic() + 10
        while len(delivered) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)  # a few more polls: nothing more may come
        runtime.stop()

    watch_until(1)
    s3.put_object(Bucket=bucket, Key="drops/acme/bank/b.csv", Body=b"2")  # while the stack was down
    with log_path.open("a") as log:
        log.write('["drops/acme/bank/cut sho')  # the last line of a log cut short by a crash
    watch_until(2)
    s3.put_object(Bucket=bucket, Key="drops/acme/bank/a.csv", Body=b"changed")  # a new version: a new object

    watch_until(3)

    assert delivered == ["drops/acme/bank/a.csv", "drops/acme/bank/b.csv", "drops/acme/bank/a.csv"]


def test_a_slow_scheduled_run_does_not_hold_back_the_next_one(services):
    # Given a schedule whose first run hangs (a sweep stuck in a slow step) and an interval of 0.05 s
    import threading

    from chalice import Rate

    app = Chalice(app_name="schedule-test")
    release, runs = threading.Event(), []

    @app.schedule(Rate(1, unit=Rate.MINUTES))
    def sweep(event):
        runs.append(event.detail_type)
        if len(runs) == 1:
            release.wait(30)

    runtime = LocalRuntime(app, services.aws.sqs, "us-east-1", log=lambda _: None)
    try:
        # When the runtime fires it
        runtime.run_schedules(interval_seconds=0.05)
        # Then later runs come while the first still hangs, as EventBridge invokes on time
        deadline = time.monotonic() + 20
        while len(runs) < 3:
            assert time.monotonic() < deadline, runs
            time.sleep(0.05)
        assert not release.is_set()
    finally:
        release.set()
        runtime.stop(grace_seconds=1)
