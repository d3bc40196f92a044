"""Operator command line: `python -m chalicelib.cli keys create|list|revoke`,
`python -m chalicelib.cli mirror rebuild`, `python -m chalicelib.cli streams note-changes`,
`python -m chalicelib.cli agents create-browser|set-credentials`
and `python -m chalicelib.cli token` (a person's token from the user pool, for the API's Bearer header).

It talks to the running local stack when one serves RECON_DATA_DIR (default .data/), and to
the deployed table on AWS otherwise (RECON_TABLE_NAME and the usual AWS credentials).
"""
from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
import uuid
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.adapters.identity import SignInRefused, password_sign_in
from chalicelib.container import Container
from chalicelib.domain.agents.browser import Automation, Credentials
from chalicelib.domain.audit import operator_actor
from chalicelib.domain.clock import iso
from chalicelib.domain.errors import Conflict, DomainError, NotFound, ValidationFailed
from chalicelib.local.stack import running_stack
from chalicelib.services import audit
from chalicelib.services.agents import create_browser_agent, set_credentials
from chalicelib.services.api_keys import create_key
from chalicelib.services.changed_blocks import note_past_changes
from chalicelib.services.mirror_repair import repair_mirror
from chalicelib.settings import Settings


def build_container(settings: Settings, stage: str | None = None) -> tuple[Container, str]:
    stack = running_stack(settings.data_dir)
    if stack and stage is None:
        return Container(stack.settings(settings)), f"local stack at {settings.data_dir}"
    if stage is not None:
        settings = deployed_settings(settings, stage)
        return Container(settings), f"stage {stage} on AWS ({settings.region})"
    return Container(settings), f"table {settings.table_name} on AWS ({settings.region})"


def deployed_settings(settings: Settings, stage: str) -> Settings:
    """The settings the stage's functions run with, from its infrastructure stack's outputs (the
    names of its table, bucket, queues, state machines, schedule group and secrets prefix): what
    the command line writes lands where that stage reads it."""
    import boto3

    from infra.deploy import stack_names, stack_outputs, stage_config

    outputs = stack_outputs(boto3.client("cloudformation", region_name=settings.region), stack_names(stage)["infra"])
    variables = stage_config(stage, outputs, base={})["stages"][stage]["environment_variables"]
    # Where the stage's names live, not how this machine reaches AWS: the table's client stays this
    # machine's own choice (the wire follows no proxy).
    fields = set(Settings.model_fields) - {"dynamodb_client"}
    updates = {name: value for variable, value in variables.items()
               if (name := variable.removeprefix("RECON_").lower()) in fields}
    return settings.model_copy(update=updates)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chalicelib.cli")
    parser.add_argument("--stage", help="a stage deployed with `make deploy` (its names read from its stack); "
                                        "default: the local stack when one runs, else RECON_* settings")
    parser.add_argument("--data-dir", type=Path, help="the data directory of the local stack to use "
                                                      "(default: RECON_DATA_DIR, else .data)")
    commands = parser.add_subparsers(dest="group", required=True)
    keys = commands.add_parser("keys", help="manage API keys").add_subparsers(dest="command", required=True)
    create = keys.add_parser("create", help="create a key and print it once")
    create.add_argument("--environment", required=True)
    create.add_argument("--label")
    keys.add_parser("list", help="list keys (never the key itself)")
    revoke = keys.add_parser("revoke", help="revoke a key by id")
    revoke.add_argument("id", type=int)
    mirror = commands.add_parser("mirror", help="the analytics mirror of records (counts, import totals)")
    mirror_commands = mirror.add_subparsers(dest="command", required=True)
    rebuild = mirror_commands.add_parser(
        "rebuild", help="write the imports missing from the mirror again from the table, and recount their streams")
    rebuild.add_argument("--environment", help="only this environment (default: every environment with API keys)")
    rebuild.add_argument("--all", action="store_true", dest="everything",
                         help="rewrite every import, not only those missing from the mirror")
    streams = commands.add_parser("streams", help="data streams")
    stream_commands = streams.add_subparsers(dest="command", required=True)
    note_changes = stream_commands.add_parser(
        "note-changes", help="find where the records of streams made before changed blocks were noted have changed, "
                             "so that runs read them from the analytics mirror (waits about 16 minutes)")
    note_changes.add_argument("--environment", help="only this environment (default: every environment with API keys)")
    _agent_commands(commands)
    token = commands.add_parser(
        "token", help="sign a person in at the user pool and print their id token (for `Authorization: Bearer`); "
                      "needs IAM rights to the pool on AWS")
    token.add_argument("--email", required=True)
    token.add_argument("--password", help="default: asked for without echo; write --password=VALUE, as a "
                                          "password may start with '-'")
    token.add_argument("--new-password", help="the password to choose when the one given is an invitation's")
    token.add_argument("--access", action="store_true", help="print the access token instead of the id token")
    args = parser.parse_args(argv)

    settings = Settings(**({"data_dir": args.data_dir} if args.data_dir else {}))
    container, target = build_container(settings, args.stage)
    try:
        if args.group == "agents":
            return _agents(container, target, args)
        if args.group == "token":
            return _token(container, target, args)
        if args.command == "create":
            with recorded(container, args.environment, "api_key.created", "api_key",
                          summary={"label": args.label}) as noted:
                key, secret = create_key(container.api_keys, args.environment, label=args.label)
                noted.resource_id = key.id
            print(f"Created key {key.id} for environment '{key.environment}' ({target}).")
            print("Store it now; it is not shown again:")
            print(secret)
        elif args.command == "list":
            print(f"{'id':>6}  {'environment':<20} {'created':<25} {'last used':<25} {'status':<8} label")
            for key in sorted(container.api_keys.list(), key=lambda k: k.id):
                status = "active" if key.active else "revoked"
                print(f"{key.id:>6}  {key.environment:<20} {iso(key.created_at):<25} "
                      f"{iso(key.last_used_at) if key.last_used_at else '-':<25} {status:<8} {key.label or ''}")
        elif args.command == "rebuild":
            print(f"Rebuilding the analytics mirror ({target})...", flush=True)
            print(repair_mirror(container.ports, args.environment, args.everything).describe())
        elif args.command == "note-changes":
            _check_every_function_notes_changes(settings, args.stage, target)
            environments = [args.environment] if args.environment else \
                sorted({key.environment for key in container.api_keys.list()})
            print(f"Noting the changes of data streams made before changed blocks ({target})...", flush=True)
            changes = note_past_changes(container.ports, environments, wait=time.sleep,
                                        progress=lambda line: print(line, flush=True))
            print(changes.describe())
            if changes.failed:
                return 1
        elif args.command == "revoke":
            found = next((k for k in container.api_keys.list() if k.id == args.id), None)
            if found is None:
                raise NotFound(f"API key {args.id} not found")
            with recorded(container, found.environment, "api_key.revoked", "api_key", args.id):
                key = container.api_keys.revoke(args.id)
            print(f"Revoked key {key.id} of environment '{key.environment}' ({target}).")
    except ValidationFailed as failed:
        for field_error in failed.errors:
            print(f"error: {field_error.field} {field_error.message}", file=sys.stderr)
        return 1
    except DomainError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 1
    except (BotoCoreError, ClientError) as error:
        print(f"error: cannot reach the {target}: {error}", file=sys.stderr)
        if args.stage is None and running_stack(settings.data_dir) is None:
            print(f"No local stack runs in the data directory {settings.data_dir.resolve()}. For a local stack "
                  f"started elsewhere, point at its data directory with --data-dir or RECON_DATA_DIR; for a "
                  f"deployed stage, pass --stage.", file=sys.stderr)
        return 1
    return 0


def _check_every_function_notes_changes(settings: Settings, stage: str | None, target: str) -> None:
    """`streams note-changes` is safe only where no function may change a record without noting it
    (docs/upgrades.md): on a stage, every deployed function of its app says RECON_NOTE_CHANGED_BLOCKS
    "true" (a release before it says "false", one before that nothing); elsewhere a local stack
    started by a release that records the setting in its stack file, or the operator's own
    RECON_NOTE_CHANGED_BLOCKS given for a table named by RECON_*."""
    if stage is not None:
        import boto3

        from infra.deploy import app_function_environments

        functions = app_function_environments(boto3.client("lambda", region_name=settings.region), stage)
        not_noting = sorted(name for name, variables in functions.items()
                            if variables.get("RECON_NOTE_CHANGED_BLOCKS", "").lower() != "true")
        if not functions or not_noting:
            raise Conflict(f"the {target} has functions that may change records without noting their blocks "
                           f"({', '.join(not_noting) or 'none deployed'}: RECON_NOTE_CHANGED_BLOCKS is not \"true\"); "
                           "run this once a release that turns it on is deployed (docs/upgrades.md)")
    elif (stack := running_stack(settings.data_dir)) is not None:
        # Code that records the setting in the stack file notes every marked stream's changes, on or off;
        # this command's own setting would say nothing of the service that runs.
        if stack.note_changed_blocks is None:
            raise Conflict(f"the {target} was started by a release that may change records without noting "
                           "their blocks; stop it and start it again with `make run`, then run this")
    elif "note_changed_blocks" not in settings.model_fields_set:
        raise Conflict(f"the {target}'s functions cannot be checked: name the stage with --stage (or, for a table "
                       "named by RECON_* settings, say RECON_NOTE_CHANGED_BLOCKS=true once no function that "
                       "ignores it may run)")
    elif not settings.note_changed_blocks:
        raise Conflict(f"the {target} runs functions that may change records without noting their blocks "
                       "(RECON_NOTE_CHANGED_BLOCKS is off); run this once a release that turns it on is "
                       "deployed (docs/upgrades.md)")


def recorded(container: Container, environment: str, action: str, resource_type: str,
             resource_id: str | int | None = None,
             summary: dict[str, Any] | None = None) -> AbstractContextManager[audit.NotedChange]:
    """Around an operator's change: recorded in the environment's audit trail as `operator:cli`
    with the system account that ran the command (noted in flight first, so the sweeper writes the
    entry, outcome unknown, should the command die between its change and its entry)."""
    return audit.change_in_flight(container.ports, environment, request_id=f"cli-{uuid.uuid4().hex}",
                                  actor=operator_actor(), action=action, resource_type=resource_type,
                                  resource_id=resource_id, summary={"os_user": _os_user(), **(summary or {})})


def _token(container: Container, target: str, args: argparse.Namespace) -> int:
    """The token alone on stdout (TOKEN=$(...)); why not, on stderr. Exit 2: nothing to sign in at."""
    try:
        identity = container.cognito
    except RuntimeError as missing:  # no pool in the settings: the stage predates it, or a bare shell
        print(f"error: {missing} ({target}). Start the local stack with `make run`, or pass --stage <stage> "
              f"right after `chalicelib.cli` for a stage deployed with its user pool.", file=sys.stderr)
        return 2
    password = args.password or getpass.getpass(f"Password of {args.email}: ")
    try:
        tokens = password_sign_in(container.aws.client("cognito-idp"), identity.pool_id, identity.client_id,
                                  args.email.strip().lower(), password, new_password=args.new_password)
    except SignInRefused as refused:
        print(f"error: {refused} ({target})", file=sys.stderr)
        return 1
    except ClientError as error:
        if error.response["Error"]["Code"] != "InvalidPasswordException":
            raise
        print(f"error: the pool refused the new password: {error.response['Error'].get('Message', '')} "
              f"(its policy: 12 characters or more, with upper and lower case letters and digits)", file=sys.stderr)
        return 1
    print(tokens["AccessToken" if args.access else "IdToken"])
    return 0


def _os_user() -> str | None:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name nor passwd entry (some containers)
        return None


def _agent_commands(commands: Any) -> None:
    agents = commands.add_parser("agents", help="set up browser agents (the API cannot create them)")
    agent_commands = agents.add_subparsers(dest="command", required=True)
    create = agent_commands.add_parser(
        "create-browser", help="create a browser agent: a portal automation whose export is imported; prints its id")
    create.add_argument("--environment", required=True)
    create.add_argument("--name", required=True)
    create.add_argument("--description", default="")
    create.add_argument("--automation", required=True, choices=[a.value for a in Automation])
    create.add_argument("--portal-url", required=True)
    create.add_argument("--settings", required=True, type=Path, help="a JSON file: login, verification, export, "
                        "data_stream_key, import_options (see README, 'Browser agents')")
    create.add_argument("--cadence", default="manual", help="manual (default), hourly, daily, weekdays or weekly")
    create.add_argument("--hour", type=int)
    create.add_argument("--minute", type=int)
    create.add_argument("--day-of-week", type=int, help="0-6, 0 = Sunday")
    create.add_argument("--timezone", default="UTC", help="IANA name (the schedule and the date placeholders)")
    create.add_argument("--inactive", action="store_true", help="never scheduled; runs on demand only")
    credentials = agent_commands.add_parser(
        "set-credentials", help="store the agent's portal username and password in Secrets Manager (asked without "
                                "echo; from stdin, one per line, when it is not a terminal)")
    credentials.add_argument("agent_id")
    credentials.add_argument("--environment", help="the agent's environment (found from its id when left out)")


def _agents(container: Container, target: str, args: argparse.Namespace) -> int:
    ports = container.ports
    if args.command == "create-browser":
        try:
            settings = json.loads(args.settings.read_text())
        except (OSError, ValueError) as error:
            print(f"error: --settings {args.settings}: {error}", file=sys.stderr)
            return 1
        fields = {"name": args.name, "description": args.description, "cadence": args.cadence, "hour": args.hour,
                  "minute": args.minute, "day_of_week": args.day_of_week, "timezone": args.timezone,
                  "active": not args.inactive}
        with recorded(container, args.environment, "agent.created", "agent",
                      summary={"kind": "browser", "automation": args.automation}) as noted:
            agent = create_browser_agent(ports, args.environment, fields, args.automation, args.portal_url, settings)
            noted.resource_id = agent.id
        print(f"Created browser agent '{agent.name}' in environment '{agent.environment}' ({target}).", file=sys.stderr)
        print(f"Next: python -m chalicelib.cli agents set-credentials {agent.id}", file=sys.stderr)
        print(agent.id)
        return 0
    username, password = _read_login()
    agent_id = args.agent_id.lower()
    environment = args.environment or ports.agents.environment_of(agent_id)
    if environment is None:
        raise NotFound(f"no browser agent {agent_id}")
    # The login itself is never recorded: only that it was set.
    with recorded(container, environment, "agent.credentials_set", "agent", agent_id):
        agent = set_credentials(ports, agent_id, Credentials(username, password), environment)
    print(f"Stored the portal login of agent {agent.id} ({agent.name}) in Secrets Manager ({target}).")
    return 0


def _read_login() -> tuple[str, str]:
    """The portal's username and password: asked without echo at a terminal, else the first two
    lines of stdin (for scripts)."""
    if sys.stdin.isatty():
        return getpass.getpass("Portal username: ").strip(), getpass.getpass("Portal password: ")
    lines = sys.stdin.read().splitlines()
    return (lines[0].strip() if lines else ""), (lines[1] if len(lines) > 1 else "")


if __name__ == "__main__":
    sys.exit(main())
