"""Serves the Chalice app over HTTP with Chalice's local gateway, answering unknown routes
with our 404 `{"message"}` instead of API Gateway's 403 "Missing Authentication Token", and
any method (TRACE, or one no server knows) through the app, which answers 405 with `Allow`."""
from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler

from chalice.config import Config
from chalice.local import (
    ChaliceRequestHandler,
    CustomLocalChalice,
    ForbiddenError,
    LocalChalice,
    LocalDevServer,
    LocalGateway,
)

from chalicelib.local.processes import LOOPBACK
from chalicelib.local.stack import ROOT


class Gateway(LocalGateway):
    def _has_user_defined_options_method(self, lambda_event) -> bool:
        return True  # no CORS preflight to fake: the app answers OPTIONS like any unserved method (405)


class RequestHandler(ChaliceRequestHandler):
    def __init__(self, request, client_address, server, app_object, config) -> None:
        self.local_gateway = Gateway(app_object, config)
        BaseHTTPRequestHandler.__init__(self, request, client_address, server)

    # Headers and body go out in separate writes; with Nagle on, a keep-alive client waits
    # ~40 ms for the delayed ACK on every request (measured: 48 ms -> single digits).
    disable_nagle_algorithm = True

    def __getattr__(self, name: str):
        # http.server looks up do_<METHOD> and answers 501 HTML when there is none: every method
        # goes to the app instead (the ones Chalice's handler names are found before this).
        if name.startswith("do_"):
            return self._generic_handle
        raise AttributeError(name)

    def _send_error_response(self, error) -> None:
        if isinstance(error, ForbiddenError):
            body = json.dumps({"message": f"no route for {self.command} {self.path.split('?')[0]}"})
            self._send_http_response(404, {"Content-Type": "application/json"}, body)
            return
        super()._send_error_response(error)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """What http.server answers itself (a request line it cannot read): our shape, not HTML."""
        self.close_connection = True
        body = json.dumps({"message": message or self.responses.get(code, ("error",))[0]})
        self._send_http_response(code, {"Content-Type": "application/json", "Connection": "close"}, body)

    def log_message(self, format: str, *args) -> None:
        pass  # the middleware logs every request as JSON


def build_server(app, port: int) -> LocalDevServer:
    config_from_disk = json.loads((ROOT / ".chalice" / "config.json").read_text())
    config = Config.create(chalice_stage="local", app_name="recon", project_dir=str(ROOT),
                           config_from_disk=config_from_disk)
    # As chalice.local.create_local_server does: a thread-local current_request, so that
    # concurrent requests on the threaded server never see each other's request.
    if not isinstance(app, LocalChalice):
        CustomLocalChalice.__bases__ = (LocalChalice, app.__class__)
        app.__class__ = CustomLocalChalice
    return LocalDevServer(app, config, LOOPBACK, port, handler_cls=RequestHandler)
