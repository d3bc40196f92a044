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
    import threading

    seen, log, stopping = [], [], threading.Event()
    app = Chalice(app_name="runtime-test")

    @app.on_sqs_message(queue="recon-dev-bulk", batch_size=5)
    def handle(event):
        seen.append([json.loads(r.body) for r in event])
        stopping.set()  # the stack stops while the handler works, and its next checkpoint raises
        raise RuntimeError("stopping")

    runtime = LocalRuntime(app, services.aws.sqs, "us-east-1", log=log.append, redelivery_seconds=0,
                           stopping=stopping)
    url = _send(services, 3)
    [config] = runtime.queue_handlers

    assert runtime.deliver_once(config) == 0

    assert seen == [[{"n": 3}]]
    attributes = services.aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "1"  # neither deleted nor made visible
    assert "stopped at a checkpoint" in log[-1] and "resume at the next start" in log[-1]


def test_a_batch_received_as_the_stack_stops_is_put_back_unhandled_with_no_receive_counted(services):
    # (a message on its last receive would otherwise go to the dead-letter queue at the next start)
    seen, log = [], []
    app = make_app(seen, set())
    runtime = LocalRuntime(app, services.aws.sqs, "us-east-1", log=log.append, redelivery_seconds=0)
    url = _send(services, 4)
    [config] = runtime.queue_handlers
    runtime.stop(grace_seconds=0)

    assert runtime.deliver_once(config) == 0

    assert seen == [] and "received while stopping" in log[-1]
    [again] = services.aws.sqs.receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"]
    assert json.loads(again["Body"]) == {"n": 4} and again["Attributes"]["ApproximateReceiveCount"] == "1"
    attributes = services.aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "1"  # (the one just received): the first is gone


def test_stop_waits_for_a_handler_at_work_but_not_for_pollers_waiting_on_their_queues(services):
    # Given pollers that wait on their queue as long as SQS lets them, one of them at work on a batch
    import threading

    seen, working, release = [], threading.Event(), threading.Event()
    app = Chalice(app_name="runtime-test")

    @app.on_sqs_message(queue="recon-dev-bulk", batch_size=1)
    def handle(event):
        working.set()
        release.wait(30)
        seen.extend(json.loads(r.body)["n"] for r in event)

    runtime = LocalRuntime(app, services.aws.sqs, "us-east-1", log=lambda _: None, concurrency=3)
    runtime.start()
    url = _send(services, 5)
    assert working.wait(20)

    # When the stack stops with a long grace, the handler ending a moment after
    stopping = threading.Thread(target=runtime.stop, kwargs={"grace_seconds": 60})
    stopping.start()
    threading.Timer(0.5, release.set).start()
    stopping.join(timeout=10)  # the idle pollers' receives last 20 s

    # Then the stop returned once the handler had finished, without waiting out the idle pollers' receives
    assert not stopping.is_alive() and seen == [5]
    # And a message sent now, taken in by the pollers still waiting (SQS's longest wait, 20 s, outlasts all
    # this but on a machine slowed to a crawl), is neither handled nor lost once they end
    _send(services, 6)
    deadline = time.monotonic() + 90
    while any(thread.is_alive() for thread in runtime._threads):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    attributes = services.aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attributes["ApproximateNumberOfMessages"], attributes["ApproximateNumberOfMessagesNotVisible"]) == ("1", "0")
    assert seen == [5]


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
