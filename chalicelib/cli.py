"""Operator command line: `python -m chalicelib.cli keys create|list|revoke` and
`python -m chalicelib.cli mirror rebuild`.

It talks to the running local stack when one serves RECON_DATA_DIR (default .data/), and to
the deployed table on AWS otherwise (RECON_TABLE_NAME and the usual AWS credentials).
"""
from __future__ import annotations

import argparse
import sys

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.container import Container
from chalicelib.domain.clock import iso
from chalicelib.domain.errors import DomainError
from chalicelib.local.stack import running_stack
from chalicelib.services.api_keys import create_key
from chalicelib.services.mirror_repair import repair_mirror
from chalicelib.settings import Settings


def build_container(settings: Settings) -> tuple[Container, str]:
    stack = running_stack(settings.data_dir)
    if stack:
        return Container(stack.settings(settings)), f"local stack at {settings.data_dir}"
    return Container(settings), f"table {settings.table_name} on AWS ({settings.region})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chalicelib.cli")
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
    args = parser.parse_args(argv)

    container, target = build_container(Settings())
    try:
        if args.command == "create":
            key, secret = create_key(container.api_keys, args.environment, label=args.label)
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
        elif args.command == "revoke":
            key = container.api_keys.revoke(args.id)
            print(f"Revoked key {key.id} of environment '{key.environment}' ({target}).")
    except DomainError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 1
    except (BotoCoreError, ClientError) as error:
        print(f"error: cannot reach the {target}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
