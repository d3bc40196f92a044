"""The finance team's web app (docs/web-app.md): its HTML shell and a flat list of files, served by the
API itself under /v1/app (Chalice has no greedy routes, so no folders). No build step: our own modules
and the pinned vendor files (chalicelib/web/vendor/MANIFEST) are served as they are in the repository.

Every answer carries a strict Content-Security-Policy: scripts only from here (and the one inline
import map, by its hash), no inline style, requests only to this origin and to the origin of the upload
URLs (the imports page PUTs a file straight to the bucket), never framed."""
from __future__ import annotations

import base64
import hashlib
import re
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from weakref import WeakKeyDictionary

from chalice.app import Response

from chalicelib.api.routing import ApiRequest, Router
from chalicelib.container import container
from chalicelib.domain.errors import NotFound

router = Router("web")

WEB_DIR = Path(__file__).resolve().parents[1] / "web"
JAVASCRIPT, CSS = "text/javascript; charset=utf-8", "text/css; charset=utf-8"
NO_CACHE = "no-cache"  # revalidated each time: a deploy shows at the next load
IMMUTABLE = "public, max-age=31536000, immutable"  # a new version has a new name
VENDOR_FILES = ("preact-11.2.0.mjs", "preact-hooks-11.2.0.mjs", "htm-3.1.1.mjs")


def web_files() -> dict[str, tuple[str, str, str]]:
    """The files of /v1/app/{file}: file -> (path under chalicelib/web, media type, caching). Our own
    modules and style sheets are every .js and .css beside index.html (a page is one module)."""
    ours = {path.name: (path.name, JAVASCRIPT if path.suffix == ".js" else CSS, NO_CACHE)
            for path in sorted(WEB_DIR.iterdir()) if path.suffix in (".js", ".css")}
    return {**ours, **{name: (f"vendor/{name}", JAVASCRIPT, IMMUTABLE) for name in VENDOR_FILES}}


WEB_FILES = web_files()
IMPORT_MAP = re.compile(r'<script type="importmap">(.*?)</script>', re.DOTALL)


def content_security_policy(inline_scripts: list[str], upload_origin: str) -> str:
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'"
                      for s in inline_scripts)
    return ("default-src 'none'; " + f"script-src 'self' {hashes}".rstrip() + "; style-src 'self'; "
            f"img-src 'self' data:; connect-src 'self' {upload_origin}; form-action 'self'; base-uri 'self'; "
            "frame-ancestors 'none'")


def upload_origin() -> str:
    """The origin of the upload URLs this deployment hands out (a file import's `upload_url`): the
    bucket's S3 endpoint, as our own S3 client presigns it (on AWS `https://<bucket>.s3.<region>.
    amazonaws.com`, virtual-hosted; locally s3rver's `http://127.0.0.1:<port>`). Presigned once per
    payload store (a container's), not on every asset response."""
    payloads = container().payloads
    known = _ORIGINS.get(payloads)
    if known is None:
        url = urlsplit(payloads.upload_url("uploads/", 60))
        known = _ORIGINS[payloads] = f"{url.scheme}://{url.netloc}"
    return known


_ORIGINS: WeakKeyDictionary[Any, str] = WeakKeyDictionary()


@cache
def shell() -> tuple[str, list[str]]:
    """The page and its inline scripts (the import map), which its policy allows by their own hash."""
    page = (WEB_DIR / "index.html").read_text(encoding="utf-8")
    return page, IMPORT_MAP.findall(page)


def headers(media_type: str, caching: str) -> dict[str, str | list[str]]:
    policy = content_security_policy(shell()[1], upload_origin())
    return {"Content-Type": media_type, "Cache-Control": caching, "Content-Security-Policy": policy,
            "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}


@router.route("GET", "/app", summary="The web app (sign in, then the overview of reconciliations)",
              response=str, media_type="text/html", public=True)
def app_shell(request: ApiRequest) -> Response:
    # The page's URLs are relative to /v1/app (no slash), and a <base> would turn its "#/…" links into
    # another page: /v1/app/ is sent to /v1/app.
    raw = router.current_request
    if ((raw.context or {}).get("path") or raw.path or "").endswith("/"):
        return Response(body="", status_code=308, headers={"Location": "../app"})  # relative: any stage
    return Response(body=shell()[0], status_code=200, headers=headers("text/html; charset=utf-8", NO_CACHE))


@router.route("GET", "/app/{file}", summary="A file of the web app (its modules, style sheet and pinned libraries)",
              response=str, media_type="text/plain", public=True, errors=(404,))
def app_file(request: ApiRequest, file: str) -> Response:
    if file not in WEB_FILES:
        raise NotFound(f"no such file of the web app: '{file[:40]}'")
    path, media_type, caching = WEB_FILES[file]
    return Response(body=(WEB_DIR / path).read_text(encoding="utf-8"), status_code=200,
                    headers=headers(media_type, caching))
