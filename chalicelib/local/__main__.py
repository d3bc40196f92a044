"""`make run`: the embedded local AWS, a seeded environment and key, and the API on loopback."""
from __future__ import annotations

import signal
import sys

from chalicelib.container import Container, install
from chalicelib.local.server import build_server
from chalicelib.local.stack import LocalStack
from chalicelib.services.api_keys import create_key, ensure_key, revoke_keys_labelled
from chalicelib.local.runtime import LocalRuntime
from chalicelib.settings import Settings, install_settings

LOCAL_ENVIRONMENT = "local"
GENERATED_KEY_LABEL = "make-run"


def seed_key(container: Container, requested: str | None) -> str:
    """The key to print: RECON_API_KEY when set, else a fresh one replacing the last run's."""
    if requested:
        ensure_key(container.api_keys, LOCAL_ENVIRONMENT, requested, label="RECON_API_KEY")
        return requested
    revoke_keys_labelled(container.api_keys, GENERATED_KEY_LABEL)
    return create_key(container.api_keys, LOCAL_ENVIRONMENT, label=GENERATED_KEY_LABEL)[1]


def banner(url: str, key: str, data_dir) -> str:
    line = "=" * 78
    return "\n".join([
        line,
        f"  Reconciliation service (local) is up: {url}",
        f"  API key for environment '{LOCAL_ENVIRONMENT}':  {key}",
        f"  Try:  curl -H 'X-API-KEY: {key}' {url}/data_streams",
        f"  Data: {data_dir}    Stop: Ctrl-C",
        line,
    ])


def _stop_on_sigterm(signum, frame):
    raise KeyboardInterrupt


def main() -> int:
    settings = Settings()
    log = lambda message: print(f"[local] {message}", flush=True)  # noqa: E731
    stack = LocalStack(settings, log=log)
    runtime: LocalRuntime | None = None
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        settings = stack.start()
        install_settings(settings)  # before app.py is imported: its event sources name local resources
        container = Container(settings)
        install(container)
        key = seed_key(container, settings.api_key)
        from app import app

        runtime = LocalRuntime(app, container.aws.sqs, settings.region, log=log)
        runtime.start()

        server = build_server(app, settings.port)
        url = f"http://127.0.0.1:{settings.port}/v1"
        stack.info.api_url = url
        stack.write_info()
        print(banner(url, key, stack.data_dir), flush=True)
        server.server.serve_forever()
    except KeyboardInterrupt:
        print("\n[local] stopping", flush=True)
    except RuntimeError as error:
        print(f"[local] {error}", file=sys.stderr, flush=True)
        return 1
    finally:
        if runtime:
            runtime.stop()
        stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
