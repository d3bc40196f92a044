"""The embedded local AWS, all of it kept on disk under the data directory: dynalite for DynamoDB
(`dynamodb/`), and the AWS server (`aws_server`) for the rest: s3rver for S3 (`s3/`), moto for
SQS (its messages journaled to `sqs.sqlite3`), Secrets Manager (its secrets journaled to
`secrets.sqlite3`, readable by its owner only), Step Functions, Scheduler, SES and Cognito (the
user pool people sign in at). moto keeps Scheduler's schedules, SES's identities and Cognito's
users in memory only, so they end with the process: the agents' mail sender is verified again at
each start, and the pool made again (with the same id: its id is a hash of its definition) with
its local admin.

`LocalStack.start()` launches both on free loopback ports, provisions them from
infra/template.yaml and writes `<data dir>/stack.json`, which lets the CLI and benchmarks
find the running stack. `stop()` ends every process it started.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from chalicelib.adapters.aws import AwsClients
from chalicelib.local import processes
from chalicelib.local.aws_server import S3RVER_PACKAGE
from chalicelib.local.provision import LOCAL_ACCOUNT_ID, provision
from chalicelib.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DYNALITE_PACKAGE = ROOT / "node_modules" / "dynalite" / "cli.js"
# What starts it: dynalite's own command line, with a fix (dynamodb_server.js); takes the same options.
DYNALITE_CLI = Path(__file__).with_name("dynamodb_server.js")
STACK_FILE = "stack.json"
LOCAL_PARAMETERS = {"Stage": "local", "DataBucketName": "recon-local-data"}


@dataclass
class StackInfo:
    pid: int
    dynamodb_endpoint: str
    aws_endpoint: str
    table_name: str
    bucket_name: str
    bulk_queue_name: str
    investigation_queue_name: str = ""
    file_import_state_machine: str = ""
    reconciliation_run_state_machine: str = ""
    browser_run_state_machine: str = ""
    secrets_prefix: str = ""
    api_url: str | None = None
    child_pids: list[int] | None = None
    s3_endpoint: str = ""  # s3rver; the AWS endpoint forwards S3 requests to it too
    agent_run_queue_name: str = ""
    event_bus_name: str = ""
    webhook_event_queue_name: str = ""
    webhook_delivery_queue_name: str = ""
    schedule_group_name: str = ""
    scheduler_role_arn: str = ""
    user_pool_id: str = ""  # people sign in here (the embedded AWS's Cognito)
    user_pool_client_id: str = ""
    # The service's settings.note_changed_blocks. None: started by a release from before it was recorded
    # here, which may change the records of a stream being noted without noting them (cli's note-changes).
    note_changed_blocks: bool | None = None

    def settings(self, base: Settings) -> Settings:
        return base.model_copy(update={
            "local_mode": True, "stage": "local", "dynamodb_endpoint": self.dynamodb_endpoint,
            "aws_endpoint": self.aws_endpoint, "s3_endpoint": self.s3_endpoint or None, "table_name": self.table_name,
            "bucket_name": self.bucket_name, "bulk_queue_name": self.bulk_queue_name,
            "investigation_queue_name": self.investigation_queue_name,
            "file_import_state_machine": self.file_import_state_machine,
            "reconciliation_run_state_machine": self.reconciliation_run_state_machine,
            "browser_run_state_machine": self.browser_run_state_machine, "secrets_prefix": self.secrets_prefix,
            "agent_run_queue_name": self.agent_run_queue_name, "schedule_group_name": self.schedule_group_name,
            "scheduler_role_arn": self.scheduler_role_arn, "event_bus_name": self.event_bus_name,
            "webhook_event_queue_name": self.webhook_event_queue_name,
            "webhook_delivery_queue_name": self.webhook_delivery_queue_name,
            "user_pool_id": self.user_pool_id or None, "user_pool_client_id": self.user_pool_client_id or None,
            **({} if self.note_changed_blocks is None else {"note_changed_blocks": self.note_changed_blocks}),
        })


_STACK_FIELDS = {f.name for f in fields(StackInfo)}


def running_stack(data_dir: Path) -> StackInfo | None:
    """The stack serving `data_dir`, if one is running."""
    path = data_dir / STACK_FILE
    if not path.exists():
        return None
    written = json.loads(path.read_text())
    # A later version's stack may write fields this one does not know: what it shares is enough here.
    info = StackInfo(**{name: value for name, value in written.items() if name in _STACK_FIELDS})
    return info if processes.pid_alive(info.pid) else None


class LocalStack:
    def __init__(self, settings: Settings, log=print) -> None:
        self.data_dir = settings.data_dir.resolve()
        self.base_settings = settings
        self.log = log
        self._children: list[subprocess.Popen[bytes]] = []
        self._names: dict[int, str] = {}  # pid -> the service it is
        self.info: StackInfo | None = None

    def start(self) -> Settings:
        if running_stack(self.data_dir):
            raise RuntimeError(f"a local stack is already running on {self.data_dir}; "
                               "set RECON_DATA_DIR to run another beside it")
        if not DYNALITE_PACKAGE.exists() or not S3RVER_PACKAGE.exists():
            raise RuntimeError("dynalite or s3rver is not installed: run `make run` (it runs `npm ci`)")
        (self.data_dir / "dynamodb").mkdir(parents=True, exist_ok=True)
        logs = self.data_dir / "logs"
        logs.mkdir(exist_ok=True)

        dynamodb_port, aws_port, s3_port = processes.free_ports(3)
        dynalite = processes.start(
            ["node", str(DYNALITE_CLI), "--host", processes.LOOPBACK, "--port", str(dynamodb_port),
             "--path", str(self.data_dir / "dynamodb"), "--createTableMs", "0", "--deleteTableMs", "0",
             "--updateTableMs", "0"],
            logs / "dynalite.log",
        )
        self._children.append(dynalite)
        self._names[dynalite.pid] = "dynalite (DynamoDB)"
        moto = processes.start(
            [sys.executable, "-m", "chalicelib.local.aws_server", "--port", str(aws_port),
             "--journal", str(self.data_dir / "sqs.sqlite3"), "--secrets", str(self.data_dir / "secrets.sqlite3"),
             "--s3-port", str(s3_port),
             "--s3-directory", str(self.data_dir / "s3"), "--s3-log", str(logs / "s3rver.log")],
            logs / "moto.log", cwd=ROOT,
        )
        self._children.append(moto)
        self._names[moto.pid] = "AWS server (moto: SQS, Step Functions; s3rver: S3)"
        processes.wait_for_port(dynamodb_port, dynalite, "dynalite", logs / "dynalite.log")
        processes.wait_for_port(aws_port, moto, "moto server", logs / "moto.log")

        dynamodb_endpoint = f"http://{processes.LOOPBACK}:{dynamodb_port}"
        aws_endpoint = f"http://{processes.LOOPBACK}:{aws_port}"
        s3_endpoint = f"http://{processes.LOOPBACK}:{s3_port}"  # open once the AWS server's is
        settings = self.base_settings.model_copy(update={
            "local_mode": True, "stage": "local", "dynamodb_endpoint": dynamodb_endpoint, "aws_endpoint": aws_endpoint,
            "s3_endpoint": s3_endpoint,
        })
        outputs = provision(AwsClients(settings), LOCAL_PARAMETERS, settings.region, log=self.log)
        self.info = StackInfo(
            pid=os.getpid(), dynamodb_endpoint=dynamodb_endpoint, aws_endpoint=aws_endpoint, s3_endpoint=s3_endpoint,
            table_name=outputs["TableName"], bucket_name=outputs["BucketName"],
            bulk_queue_name=outputs["BulkQueueName"], child_pids=[c.pid for c in self._children],
            investigation_queue_name=outputs["InvestigationQueueName"],
            file_import_state_machine=outputs["FileImportStateMachineName"],
            reconciliation_run_state_machine=outputs["ReconciliationRunStateMachineName"],
            browser_run_state_machine=outputs["BrowserRunStateMachineName"], secrets_prefix=outputs["SecretsPrefix"],
            agent_run_queue_name=outputs["AgentRunQueueName"], schedule_group_name=outputs["ScheduleGroupName"],
            event_bus_name=outputs["EventBusName"],
            webhook_event_queue_name=outputs["WebhookEventQueueName"],
            webhook_delivery_queue_name=outputs["WebhookDeliveryQueueName"],
            user_pool_id=outputs["UserPoolId"], user_pool_client_id=outputs["UserPoolClientId"],
            note_changed_blocks=settings.note_changed_blocks,
            # No role is made locally (nothing enforces IAM there), so the template has no ARN to
            # give: this one names the role the Scheduler would assume, and the Scheduler keeps it.
            scheduler_role_arn=outputs.get("SchedulerRoleArn")
            or f"arn:aws:iam::{LOCAL_ACCOUNT_ID}:role/{outputs['ScheduleGroupName']}-scheduler",
        )
        # Agents mail from settings.mail_sender, which SES sends from once it is a verified identity.
        AwsClients(settings).client("ses").verify_email_identity(EmailAddress=settings.mail_sender)
        self.write_info()
        return self.info.settings(settings)

    def exited_service(self) -> str | None:
        """The first embedded service whose process has ended, described, or None."""
        for child in self._children:
            if child.poll() is not None:
                return f"{self._names[child.pid]} exited with code {child.returncode}; see {self.data_dir / 'logs'}"
        return None

    def started_info(self) -> StackInfo:
        """What start() wrote to the stack file."""
        if self.info is None:
            raise RuntimeError("the local stack is not started")
        return self.info

    def write_info(self) -> None:
        (self.data_dir / STACK_FILE).write_text(json.dumps(asdict(self.started_info()), indent=2))

    def stop(self) -> None:
        processes.stop(self._children)
        self._children.clear()
        stack_file = self.data_dir / STACK_FILE
        if self.info and stack_file.exists():
            stack_file.unlink()
