"""`chalice deploy` and `chalice delete` for `make deploy` and `make destroy`: Chalice's own deployer, as
its command line runs it (under `.venv-deploy`, in the staged project of infra/packaging.py), with two
differences that make a failed run safe to run again:

- A deploy that fails records what it made. Chalice writes `.chalice/deployed/<stage>.json` only when
  every step succeeded: a run that stops after making the REST API, a queue's event source mapping or a
  function forgets them, and the next deploy makes a second API and a second mapping, and a rollback or
  a `chalice delete` leaves the forgotten functions behind. Here the record is then the previous one
  updated with every resource the failed run recorded (`merge_state`).
- Deleting what is gone already is done. Chalice stops at a function, API, rule or mapping it is told to
  delete that does not exist, which a deploy or destroy that failed half-way leaves in its record; here
  that deletion is skipped, and the rest goes on.

Runs as a script (`python infra/chalice_run.py deploy|delete <project dir> <stage>`): the project's
own app.py and chalicelib are the ones Chalice imports, not the repository's.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

SCHEMA_VERSION = "2.0"


def merge_state(previous: dict | None, recorded: list[dict]) -> dict:
    """The record after a failed deploy: the previous one, each resource the failed run recorded replacing
    (or adding to) the one of its name. Resources the run did not reach keep their previous values; one
    that it deleted before failing stays recorded, and its deletion is skipped next time (`tolerate_gone`)."""
    resources: dict[str, dict] = {}
    for resource in (previous or {}).get("resources", []):
        resources[resource["name"]] = dict(resource)
    for resource in recorded:
        resources.setdefault(resource["name"], {}).update(resource)
    return {"resources": list(resources.values()), "schema_version": SCHEMA_VERSION,
            "backend": (previous or {}).get("backend", "api")}


def tolerate_gone() -> None:
    """Make Chalice's deletions of what does not exist succeed (functions, REST APIs, event rules, mappings)."""
    from botocore.exceptions import ClientError
    from chalice.awsclient import ResourceDoesNotExistError, TypedAWSClient

    gone = {"ResourceNotFoundException", "NotFoundException"}

    def skipping(method):
        def delete(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except ResourceDoesNotExistError as error:
                print(f"already gone: {error}")
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") not in gone:
                    raise
                print(f"already gone: {error.response['Error'].get('Message', '')}")
        return delete

    for name in ("delete_function", "delete_rest_api", "delete_rule", "remove_lambda_event_source"):
        setattr(TypedAWSClient, name, skipping(getattr(TypedAWSClient, name)))


def run(command: str, project_dir: Path, stage: str) -> int:
    from chalice.cli import _configure_cli_env_vars
    from chalice.cli.factory import CLIFactory
    from chalice.deploy.deployer import ChaliceDeploymentError
    from chalice.utils import UI

    os.chdir(project_dir)
    _configure_cli_env_vars()
    tolerate_gone()
    factory = CLIFactory(str(project_dir), environ=os.environ)
    config = factory.create_config_obj(chalice_stage_name=stage)
    session = factory.create_botocore_session()
    ui = UI()
    record = project_dir / ".chalice" / "deployed" / f"{stage}.json"
    previous = json.loads(record.read_text()) if record.exists() else None
    if command == "delete":
        deleter = factory.create_deletion_deployer(session=session, ui=ui)
        try:
            deleter.deploy(config, chalice_stage_name=stage)
        except ChaliceDeploymentError as error:
            print(error, file=sys.stderr)  # the record is left as it was: the next destroy deletes what remains
            return 1
        return 0
    deployer = factory.create_default_deployer(session=session, config=config, ui=ui)
    try:
        deployed = deployer.deploy(config, chalice_stage_name=stage)
    except BaseException as error:
        # Chalice 1.x keeps what its executor recorded as it went; it writes none of it when a step fails.
        recorded = deployer._executor.resource_values  # no public accessor
        if recorded:
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(json.dumps(merge_state(previous, recorded), indent=2))
            print(f"chalice deploy failed; what it made is recorded in {record}", file=sys.stderr)
        if isinstance(error, ChaliceDeploymentError):
            print(error, file=sys.stderr)
            return 1
        raise
    factory.create_deployment_reporter(ui=ui).display_report(deployed)
    return 0


def main(argv: list[str] | None = None) -> int:
    command, project_dir, stage = argv if argv is not None else sys.argv[1:]
    if command not in ("deploy", "delete"):
        raise SystemExit(f"usage: {sys.argv[0]} deploy|delete <project dir> <stage>")
    return run(command, Path(project_dir).resolve(), stage)


if __name__ == "__main__":
    sys.exit(main())
