"""`make run`: the embedded local AWS, a seeded environment and key, and the API on loopback."""
from __future__ import annotations

import secrets
import signal
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from chalice.local import LocalDevServer

from chalicelib.container import Container, install
from chalicelib.domain.bucket_layout import DROPS_PREFIX, UPLOADS_PREFIX
from chalicelib.domain.clock import utc_now
from chalicelib.domain.users import Role, User, UserStatus
from chalicelib.local.processes import die_with_parent
from chalicelib.local.runtime import LocalRuntime
from chalicelib.local.schedules import FIRED_FILE, ScheduleFirer
from chalicelib.local.server import build_server
from chalicelib.local.stack import LOCAL_PARAMETERS, LocalStack
from chalicelib.local.statemachines import LocalTaskTokens, LocalWorkflows, local_workflows
from chalicelib.services.agents import restore_schedules
from chalicelib.services.api_keys import create_key, ensure_key, revoke_keys_labelled
from chalicelib.services.mirror_repair import repair_mirror
from chalicelib.services.ports import Ports
from chalicelib.services.resumption import resume_interrupted
from chalicelib.settings import Settings, install_settings

LOCAL_ENVIRONMENT = "local"
DELIVERED_EVENTS_LOG = "s3-events-delivered.jsonl"
GENERATED_KEY_LABEL = "make-run"


def seed_key(container: Container, requested: str | None) -> str:
    """The key to print: RECON_API_KEY when set, else a fresh one replacing the last run's."""
    if requested:
        ensure_key(container.api_keys, LOCAL_ENVIRONMENT, requested, label="RECON_API_KEY")
        return requested
    revoke_keys_labelled(container.api_keys, GENERATED_KEY_LABEL)
    return create_key(container.api_keys, LOCAL_ENVIRONMENT, label=GENERATED_KEY_LABEL)[1]


@dataclass(frozen=True)
class LocalAdmin:
    email: str
    password: str
    idp_user_id: str  # the local pool's `sub` of them


def ensure_local_admin(container: Container) -> LocalAdmin:
    """The local environment's admin, a user of the local pool with a password `make run` prints
    (RECON_LOCAL_ADMIN_PASSWORD, else a fresh one: the embedded Cognito keeps users in memory, so the
    user and its `sub` are made again at every start).

    Our own user record goes with it: the environment LOCAL_ENVIRONMENT's admin. When the pool gave
    the person a new `sub` (a restart), that record is re-linked by email, and ONLY here: the local
    pool is ours alone, recreated at every start, and this admin was put in it by this very
    function, so its email names the same person. It is never a general rule: elsewhere an email
    proves nothing (a federated provider asserts what it likes), and a person is known by their
    `sub` alone."""
    settings = container.settings
    identity = container.cognito
    email = settings.local_admin_email.strip().lower()
    given = settings.local_admin_password
    # A fixed start: token_urlsafe may begin with "-", which a command line reads as an option.
    password = given.get_secret_value() if given else f"Aa1-{secrets.token_urlsafe(12)}"
    idp_user_id = identity.invite(email, "Local admin")
    container.aws.client("cognito-idp").admin_set_user_password(
        UserPoolId=identity.pool_id, Username=email, Password=password, Permanent=True)
    ensure_admin_user(container.ports, LOCAL_ENVIRONMENT, email, idp_user_id)
    return LocalAdmin(email, password, idp_user_id)


def ensure_admin_user(ports: Ports, environment: str, email: str, idp_user_id: str) -> User:
    """The local admin's user record: made at the first start, re-linked to the pool's new `sub` at
    every later one, and an admin who can sign in again if someone changed that meanwhile."""
    user = ports.users.find_by_email(environment, email)
    if user is None:
        return ports.users.add(User(id=ports.users.next_id(environment), environment=environment,
                                    idp_user_id=idp_user_id, email=email, name="Local admin", role=Role.ADMIN,
                                    status=UserStatus.INVITED, created_at=utc_now()))
    user = ports.users.relink(user, idp_user_id)
    if user.role is Role.ADMIN and user.status is not UserStatus.DEACTIVATED:
        return user
    status = UserStatus.ACTIVE if user.last_sign_in_at else UserStatus.INVITED
    return ports.users.save(replace(user, role=Role.ADMIN, status=status), user)


def banner(url: str, key: str, data_dir: Path, admin: LocalAdmin | None = None) -> str:
    line = "=" * 78
    sign_in = [] if admin is None else [
        f"  Admin sign-in (local user pool):  {admin.email}  /  {admin.password}",
        f"  Web app (sign in there as the admin):  {url}/app",
        f"  Their token:  TOKEN=$(python -m chalicelib.cli token --email {admin.email} --password='{admin.password}')",
        f"  Then:  curl -H \"Authorization: Bearer $TOKEN\" {url}/data_streams",
    ]
    return "\n".join([
        line,
        f"  Reconciliation service (local) is up: {url}",
        f"  API key for environment '{LOCAL_ENVIRONMENT}':  {key}",
        f"  Try:  curl -H 'X-API-KEY: {key}' {url}/data_streams",
        *sign_in,
        f"  API reference: {url}/docs",
        f"  Data: {data_dir}    Stop: Ctrl-C",
        line,
    ])


class LocalService:
    """The whole local service in this process: stack, container, async runtime, HTTP server."""

    def __init__(self, settings: Settings, log=print) -> None:
        self.log = log
        self.stack = LocalStack(settings, log=log)
        self.runtime: LocalRuntime | None = None
        self.server: LocalDevServer | None = None
        self.container: Container | None = None
        self.key: str | None = None
        self.admin: LocalAdmin | None = None
        self.url: str | None = None
        self.failure: str | None = None  # why the stack stopped by itself
        self.workflows: list[LocalWorkflows] = []
        self._stopping = threading.Event()
        self._serving_thread: threading.Thread | None = None

    def start(self) -> LocalService:
        settings = self.stack.start()
        install_settings(settings)  # before app.py is imported: its event sources name local resources
        self.container = Container(settings)
        install(self.container)
        self.key = seed_key(self.container, settings.api_key)
        from app import app

        stopping = self.container.stop_requested
        # Browser runs wait on task tokens for their verification codes: the driver's, in this process.
        task_tokens = LocalTaskTokens()
        self.workflows = [
            local_workflows(app, LOCAL_PARAMETERS, settings.region, log=self.log, stopping=stopping),
            local_workflows(app, LOCAL_PARAMETERS, settings.region, log=self.log, stopping=stopping,
                            machine="ReconciliationRunStateMachine"),
            local_workflows(app, LOCAL_PARAMETERS, settings.region, log=self.log, stopping=stopping,
                            machine="BrowserRunStateMachine", task_tokens=task_tokens),
        ]
        (self.container.file_import_workflows, self.container.run_workflows,
         self.container.browser_workflows) = self.workflows
        self.container.task_tokens = task_tokens
        # After the workflows above: `ports` is built once, at its first use, from what the container holds.
        self.admin = ensure_local_admin(self.container)
        # The executions of the last process died with it: what they ran goes on from its checkpoints.
        # Done before the queues and the bucket are watched, so that what it reads as in flight is
        # what the last process left, not what a first delivery has started meanwhile.
        self.log(resume_interrupted(self.container.ports).describe())
        self.runtime = LocalRuntime(app, self.container.aws.sqs, settings.region, log=self.log, stopping=stopping)
        self.runtime.start()
        self.runtime.watch_bucket(self.container.aws.s3, settings.bucket_name, (UPLOADS_PREFIX, DROPS_PREFIX),
                                  self.stack.data_dir / DELIVERED_EVENTS_LOG)
        self.runtime.run_schedules()
        # The embedded Scheduler keeps schedules in memory: the agents' are put back at every start.
        self.log(f"{restore_schedules(self.container.ports)} agent schedule(s) in the local Scheduler")
        self.runtime.fire_schedules(ScheduleFirer(self.container.aws.client("scheduler"), self.container.aws.sqs,
                                                  settings.schedule_group_name, self.stack.data_dir / FIRED_FILE,
                                                  log=self.log))
        threading.Thread(target=self._repair_mirror, daemon=True, name="mirror-repair").start()
        self.server = build_server(app, settings.port)
        self.url = f"http://127.0.0.1:{settings.port}/v1"
        self.stack.started_info().api_url = self.url
        self.stack.write_info()
        return self

    def _repair_mirror(self) -> None:
        """Imports the analytics mirror lost (its objects deleted, or a data directory from before
        S3 was kept on disk) are written again from the table, so counts never read 0."""
        try:
            self.log(repair_mirror(self.serving_container().ports).describe())
        except Exception as error:  # the service works without it; `python -m chalicelib.cli mirror rebuild` retries
            self.log(f"repairing the analytics mirror failed: {error!r}")

    def serving_container(self) -> Container:
        if self.container is None:
            raise RuntimeError("the local service is not started")
        return self.container

    def serving(self) -> LocalDevServer:
        """The HTTP server start() built."""
        if self.server is None:
            raise RuntimeError("the local service is not started")
        return self.server

    def serve_in_background(self) -> None:
        self._serving_thread = threading.Thread(target=self.serving().server.serve_forever, daemon=True,
                                                name="api-server")
        self._serving_thread.start()

    def watch_services(self, interval_seconds: float = 0.5) -> None:
        """A stack whose DynamoDB or moto server died stops, rather than answer every request 500."""
        server = self.serving()

        def watch() -> None:
            while not self._stopping.wait(interval_seconds):
                failure = self.stack.exited_service()
                if failure:
                    self.failure = failure
                    server.server.shutdown()  # serve_forever returns in the main thread
                    return

        threading.Thread(target=watch, daemon=True, name="watch-services").start()

    def stop(self, grace_seconds: float | None = None) -> None:
        """Stop taking requests, let the work in hand reach its next checkpoint (a chunk written,
        a state finished) for at most `grace_seconds` (settings.stop_grace_seconds), then stop the
        embedded AWS. Work that did not reach one is resumed from the last at the next start, as
        after a crash. Every part is told at once, so that one part's wait is not taken from
        another's grace."""
        if grace_seconds is None:  # no container: nothing was started that could be in flight
            grace_seconds = self.container.settings.stop_grace_seconds if self.container else 0.0
        self._stopping.set()
        deadline = time.monotonic() + grace_seconds
        if self.container:
            self.container.stop_requested.set()
        for workflows in self.workflows:
            workflows.request_stop()
        if self.server:
            if self._serving_thread is not None and self._serving_thread.is_alive():
                # Its loop ends first: polling a closed socket, it would spin on EBADF until the process exits.
                self.server.server.shutdown()
            self.server.server.server_close()
        if self.runtime:
            self.runtime.stop(grace_seconds)
        for workflows in self.workflows:
            unfinished = workflows.stop(max(0.0, deadline - time.monotonic()))
            if unfinished:
                self.log(f"stopping without waiting for {', '.join(unfinished)}; resumed at the next start")
        self.stack.stop()


def _stop_on_signal(signum, frame):
    # Once: a second signal (make forwards one, then the parent-death signal follows) must not
    # interrupt the shutdown that the first one started.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def take_stop_signals() -> None:
    """SIGTERM and SIGINT stop the stack (`_stop_on_signal`, in the main thread alone). polars is
    imported first: importing it installs its own SIGINT handler, which turns a ctrl-c into a
    KeyboardInterrupt inside whatever polars call any thread is making (a worker's chunk died mid-write,
    its thread printing a traceback, where the stop lets the task in progress finish). Installed after
    it, ours replaces it."""
    import polars  # noqa: F401

    signal.signal(signal.SIGTERM, _stop_on_signal)
    signal.signal(signal.SIGINT, _stop_on_signal)


def main() -> int:
    take_stop_signals()
    # `make run` may be stopped by a signal to make alone; then we stop too (and our children).
    die_with_parent()
    service = LocalService(Settings(), log=lambda message: print(f"[local] {message}", flush=True))
    try:
        service.start()
        assert service.url is not None and service.key is not None  # start() sets both
        print(banner(service.url, service.key, service.stack.data_dir, service.admin), flush=True)
        service.watch_services()
        service.serving().server.serve_forever()
        if service.failure:
            print(f"[local] stopping: {service.failure}", file=sys.stderr, flush=True)
            return 1
    except KeyboardInterrupt:
        print("\n[local] stopping", flush=True)
    except RuntimeError as error:
        print(f"[local] {error}", file=sys.stderr, flush=True)
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        service.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
