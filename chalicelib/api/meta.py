"""Routes that need no key: health, the OpenAPI document and the API reference page built on it."""
from __future__ import annotations

import base64
import hashlib
import html
import re
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from chalice.app import Request, Response

from chalicelib.api.errors import ServiceUnavailable
from chalicelib.api.routing import API_PREFIX, ApiRequest, Router
from chalicelib.api.schemas.meta import HealthOut
from chalicelib.container import container
from chalicelib.domain.errors import NotFound
from chalicelib.settings import Settings

router = Router("meta")

PROBE_TIMEOUT_SECONDS = 1.5
# Swagger UI's own files, from the openapi-ui-bundles package (requirements.txt): no CDN.
DOCS_ASSETS = {"swagger-ui-bundle.js": "application/javascript; charset=utf-8",
               "swagger-ui.css": "text/css; charset=utf-8"}
DOCS_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Reconciliation Service API</title>
  <link rel="icon" href="data:,">
  <base href="{base}">
  <link rel="stylesheet" href="docs/swagger-ui.css">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="docs/swagger-ui-bundle.js"></script>
  <script>
    window.ui = SwaggerUIBundle({url: "openapi.json", dom_id: "#swagger-ui", deepLinking: true,
                                 persistAuthorization: true});
  </script>
</body>
</html>
"""


def _docs_policy() -> str:
    """The reference page's Content-Security-Policy: scripts from here and its one inline script (by
    its hash), requests to this origin only, never framed. Swagger UI sets style attributes as it
    renders, so styles alone may be inline."""
    [inline] = re.findall(r"<script>(.*?)</script>", DOCS_PAGE, re.DOTALL)
    digest = base64.b64encode(hashlib.sha256(inline.encode()).digest()).decode()
    return (f"default-src 'none'; script-src 'self' 'sha256-{digest}'; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; form-action 'self'; "
            "base-uri 'self'; frame-ancestors 'none'")


DOCS_POLICY = _docs_policy()


def embedded_services(settings: Settings) -> dict[str, str]:
    """The local stack's embedded AWS, by name (none when the API runs on AWS)."""
    if not settings.local_mode:
        return {}
    services = {"DynamoDB (dynalite)": settings.dynamodb_endpoint,
                "moto server (S3, SQS, Step Functions)": settings.aws_endpoint}
    return {name: endpoint for name, endpoint in services.items() if endpoint}


def answers(endpoint: str) -> bool:
    """Any HTTP answer counts: a refused or silent port does not."""
    try:
        urllib.request.urlopen(endpoint, timeout=PROBE_TIMEOUT_SECONDS).close()
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False
    return True


@router.route("GET", "/health", summary="Liveness check; locally also the embedded DynamoDB and moto server",
              response=HealthOut, public=True, errors=(503,))
def health(request: ApiRequest) -> HealthOut:
    down = [f"{name} at {endpoint}" for name, endpoint in embedded_services(container().settings).items()
            if not answers(endpoint)]
    if down:
        raise ServiceUnavailable(f"not answering: {'; '.join(down)}")
    return HealthOut()


@router.route("GET", "/openapi.json", summary="This API's OpenAPI 3.1 document", response=dict, public=True)
def openapi(request: ApiRequest) -> dict:
    from chalicelib.api.openapi import build_openapi
    from chalicelib.api.routers import ROUTERS  # the full table exists once every module is imported

    return build_openapi([spec for r in ROUTERS for spec in r.specs], servers=[{"url": served_from()}])


def served_from(raw: Request | None = None) -> str:
    """The URL the API is served under, as the caller sees it (API Gateway adds its stage to the path);
    of the request another router serves when it is given."""
    raw = raw or router.current_request
    context = raw.context or {}
    headers: Mapping[str, str] = raw.headers or {}
    host = headers.get("host") or context.get("domainName") or "127.0.0.1"
    scheme = headers.get("x-forwarded-proto") or ("http" if container().settings.local_mode else "https")
    path, resource = context.get("path") or "", context.get("resourcePath") or ""
    stage_prefix = path[: -len(resource)] if resource and path.endswith(resource) else ""
    return f"{scheme}://{host}{stage_prefix.rstrip('/')}"


@router.route("GET", "/docs", summary="The API reference (Swagger UI over this API's OpenAPI document)",
              response=str, media_type="text/html", public=True)
def docs(request: ApiRequest) -> Response:
    # The page's own URLs resolve against its base, so /v1/docs/ (a trailing slash) finds them too.
    base = urlsplit(served_from()).path + API_PREFIX + "/"
    return Response(body=DOCS_PAGE.replace("{base}", html.escape(base)), status_code=200,
                    headers={"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-cache",
                             "Content-Security-Policy": DOCS_POLICY, "X-Content-Type-Options": "nosniff",
                             "Referrer-Policy": "no-referrer"})


@router.route("GET", "/docs/{asset}", summary="A file of the API reference page", response=str,
              media_type="text/plain", public=True, errors=(404,))
def docs_asset(request: ApiRequest, asset: str) -> Response:
    if asset not in DOCS_ASSETS:
        raise NotFound(f"no such file of the API reference: '{asset[:40]}'")
    from openapi_ui_bundles import swagger_ui  # only this route needs the package

    body = (Path(swagger_ui.static_path) / asset).read_text(encoding="utf-8")
    return Response(body=body, status_code=200,
                    headers={"Content-Type": DOCS_ASSETS[asset], "Cache-Control": "public, max-age=86400"})
