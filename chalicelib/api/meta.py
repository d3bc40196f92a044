"""Routes that need no key: health and the OpenAPI document."""
from __future__ import annotations

from chalicelib.api.routing import ApiRequest, Router
from chalicelib.api.schemas import HealthOut

router = Router("meta")


@router.route("GET", "/health", summary="Liveness check", response=HealthOut, public=True)
def health(request: ApiRequest) -> HealthOut:
    return HealthOut()


@router.route("GET", "/openapi.json", summary="This API's OpenAPI 3.1 document", response=dict, public=True)
def openapi(request: ApiRequest) -> dict:
    from chalicelib.api import ROUTERS  # the full table exists once every module is imported
    from chalicelib.api.openapi import build_openapi

    return build_openapi([spec for r in ROUTERS for spec in r.specs])
