"""The HTTP API: one router per resource, mounted under /v1 by app.py."""
from __future__ import annotations

from chalicelib.api import data_streams, file_imports, meta, property_definitions, records
from chalicelib.api.routing import API_PREFIX, Router
ROUTERS: list[Router] = [meta.router, data_streams.router, property_definitions.router, records.router,
                         file_imports.router]
PUBLIC_PATHS = {API_PREFIX + spec.path for r in ROUTERS for spec in r.specs if spec.public}
