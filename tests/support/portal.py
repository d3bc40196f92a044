"""A small web portal on loopback for the browser-agent tests: a login form, a verification code on
a new device, a report page whose export link downloads a CSV. Switches make it misbehave the way
real portals do (a renamed link, a link that no longer downloads); counters show what it was asked.
"""
from __future__ import annotations

import csv
import html
import io
import secrets
import threading
from collections.abc import Mapping, Sequence
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

CSV_HEADER = ("date", "amount", "direction", "description", "external_id")
DEFAULT_ROWS = (
    {"date": "2024-05-01", "amount": "12.34", "direction": "credit", "description": "Card settlement",
     "external_id": "tx-1"},
    {"date": "2024-05-01", "amount": "250.00", "direction": "debit", "description": "Supplier payment",
     "external_id": "tx-2"},
    {"date": "2024-05-02", "amount": "0.99", "direction": "debit", "description": "Bank fee", "external_id": "tx-3"},
)
SESSION_COOKIE, DEVICE_COOKIE = "session", "device"
YEAR_SECONDS = 365 * 24 * 3600
PENDING, LOGGED_IN = "pending", "logged_in"


def _page(title: str, body: str) -> str:
    return f"<!doctype html><html><head><title>{title}</title></head><body>{body}</body></html>"


LOGIN_FORM = ('<form id="login-form" method="post" action="/login">'
              '<input id="username" name="username"> <input id="password" name="password" type="password"> '
              '<button id="sign-in">Sign in</button></form>')
VERIFY_FORM = ('<div id="verification"><p>Enter the code we sent you.</p><form method="post" action="/verify">'
               '<input id="code" name="code"> <button id="verify">Verify</button></form></div>')
# Running the report reveals the export link, pointed at the date typed in.
REPORTS_SCRIPT = """<script>
document.getElementById("run-report").onclick = function () {
  var link = document.getElementById("%s");
  link.href = "/export?from=" + encodeURIComponent(document.getElementById("from-date").value);
  link.hidden = false;
};
</script>"""


# The settings of a portal_export agent for this portal: its selectors, the export's steps (the
# date typed in, the report run, the CSV link), into a stream `bank`.
PORTAL_SETTINGS = {
    "login": {"username_selector": "#username", "password_selector": "#password", "submit_selector": "#sign-in"},
    "verification": {"detect_selector": "#verification", "code_selector": "#code", "submit_selector": "#verify"},
    "export": {"steps": [{"fill": "#from-date", "value": "{yesterday:%Y-%m-%d}"}, {"click": "#run-report"}],
               "download_selector": "#export-csv", "format": "csv"},
    "data_stream_key": "bank",
    "import_options": {"date_format": "YYYY-MM-DD", "column_mapping": {}, "on_conflict": "skip"},
}


class TestPortal:
    """`with TestPortal() as portal:` serves on `portal.url` until the block ends."""
    __test__ = False  # its name starts with Test: pytest would try to collect it where it is imported

    def __init__(self, username: str = "ops@example.com", password: str = "correct horse", code: str = "424242",
                 rows: Sequence[Mapping[str, str]] = DEFAULT_ROWS) -> None:
        self.username, self.password, self.code, self.rows = username, password, code, list(rows)
        self.export_link_id = "export-csv"  # rename it to break the agent's selector
        self.export_downloads = True  # False: the export link opens a page, no file comes
        self.logins = self.codes_sent = self.code_attempts = self.downloads = 0
        self.last_export_query: dict[str, str] | None = None
        self._sessions: dict[str, str] = {}  # session token -> PENDING or LOGGED_IN
        self._trusted_devices: set[str] = set()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/"

    def __enter__(self) -> TestPortal:
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def expire_sessions(self) -> None:
        """Every session is forgotten (the next visit shows the login form); trusted devices stay."""
        with self._lock:
            self._sessions.clear()

    def export_csv(self) -> str:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=CSV_HEADER, lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.rows)
        return out.getvalue()

    # What the handler asks of the portal's state -------------------------------------------------

    def session_of(self, token: str | None) -> str | None:
        with self._lock:
            return self._sessions.get(token) if token else None

    def start_session(self, state: str) -> str:
        token = secrets.token_urlsafe(16)
        with self._lock:
            self._sessions[token] = state
        return token

    def trust_new_device(self) -> str:
        token = secrets.token_urlsafe(16)
        with self._lock:
            self._trusted_devices.add(token)
        return token

    def is_trusted(self, token: str | None) -> bool:
        with self._lock:
            return token in self._trusted_devices

    def count(self, counter: str) -> None:
        with self._lock:
            setattr(self, counter, getattr(self, counter) + 1)


def _handler_for(portal: TestPortal) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # keep the test output quiet
            pass

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            session = portal.session_of(self.cookie(SESSION_COOKIE))
            if parts.path == "/":
                if session == LOGGED_IN:
                    self.redirect("/reports")
                elif session == PENDING:
                    self.redirect("/verify")
                else:
                    self.login_page()
            elif parts.path == "/verify" and session == PENDING:
                self.send_html(_page("Verify", VERIFY_FORM))
            elif parts.path == "/reports" and session == LOGGED_IN:
                self.reports_page()
            elif parts.path == "/export" and session == LOGGED_IN:
                self.export({k: v[0] for k, v in parse_qs(parts.query).items()})
            elif parts.path in ("/verify", "/reports", "/export"):
                self.redirect("/")
            else:
                self.send_error(404)

        def do_POST(self) -> None:
            form = {k: v[0] for k, v in parse_qs(self.body()).items()}
            session = portal.session_of(self.cookie(SESSION_COOKIE))
            if self.path == "/login":
                if (form.get("username"), form.get("password")) != (portal.username, portal.password):
                    self.login_page("Invalid username or password")
                    return
                portal.count("logins")
                if portal.is_trusted(self.cookie(DEVICE_COOKIE)):
                    self.redirect("/reports", self.session_cookie(LOGGED_IN))
                else:
                    portal.count("codes_sent")
                    self.redirect("/verify", self.session_cookie(PENDING))
            elif self.path == "/verify" and session == PENDING:
                portal.count("code_attempts")
                if form.get("code") != portal.code:
                    self.send_html(_page("Verify", '<p class="error">Incorrect code</p>' + VERIFY_FORM))
                    return
                device = f"{DEVICE_COOKIE}={portal.trust_new_device()}; Path=/; Max-Age={YEAR_SECONDS}; HttpOnly"
                self.redirect("/reports", self.session_cookie(LOGGED_IN), device)
            elif self.path == "/verify":
                self.redirect("/")
            else:
                self.send_error(404)

        # Pages ----------------------------------------------------------------------------------

        def login_page(self, error: str | None = None) -> None:
            message = f'<p class="error">{html.escape(error)}</p>' if error else ""
            self.send_html(_page("Sign in", message + LOGIN_FORM))

        def reports_page(self) -> None:
            link_id = html.escape(portal.export_link_id)
            body = ('<h1>Reports</h1><label>From <input id="from-date"></label> '
                    '<button id="run-report" type="button">Run report</button> '
                    f'<a id="{link_id}" hidden>Export CSV</a>' + REPORTS_SCRIPT % link_id)
            self.send_html(_page("Reports", body))

        def export(self, query: dict[str, str]) -> None:
            portal.last_export_query = query
            if not portal.export_downloads:
                self.send_html(_page("Export", "<p>Your export is being prepared.</p>"))
                return
            portal.count("downloads")
            filename = f"transactions-{query.get('from', '')}.csv"
            self.send(200, portal.export_csv().encode(), "text/csv",
                      [("Content-Disposition", f'attachment; filename="{filename}"')])

        # HTTP plumbing --------------------------------------------------------------------------

        def cookie(self, name: str) -> str | None:
            jar = SimpleCookie(self.headers.get("Cookie", ""))
            return jar[name].value if name in jar else None

        def session_cookie(self, state: str) -> str:  # no Max-Age: gone when the browser closes
            return f"{SESSION_COOKIE}={portal.start_session(state)}; Path=/; HttpOnly"

        def body(self) -> str:
            return self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()

        def redirect(self, location: str, *cookies: str) -> None:
            self.send(302, b"", "text/plain", [("Location", location), *(("Set-Cookie", c) for c in cookies)])

        def send_html(self, page: str) -> None:
            self.send(200, page.encode(), "text/html; charset=utf-8")

        def send(self, status: int, body: bytes, content_type: str,
                 headers: Sequence[tuple[str, str]] = ()) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

    return Handler

