"""The OpenAPI document is valid 3.1 and lists every route of the app."""
from openapi_spec_validator import validate

from app import app


def test_the_document_is_valid_openapi_3_1(api):
    response = api.get("/v1/openapi.json", key=None)
    assert response.status_code == 200
    document = response.json_body
    assert document["openapi"].startswith("3.1")
    validate(document)


def test_every_route_and_method_of_the_app_is_documented(api):
    document = api.get("/v1/openapi.json", key=None).json_body
    for path, methods in app.routes.items():
        for method in methods:
            assert method.lower() in document["paths"].get(path, {}), f"{method} {path} is missing"


def test_key_auth_is_declared_and_public_routes_need_none(api):
    document = api.get("/v1/openapi.json", key=None).json_body
    assert document["components"]["securitySchemes"]["ApiKey"] == {"type": "apiKey", "in": "header",
                                                                   "name": "X-API-KEY"}
    assert document["paths"]["/v1/health"]["get"]["security"] == []
    create = document["paths"]["/v1/data_streams"]["post"]
    assert create["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/CreateDataStream"}
    assert {"201", "401", "409", "422"} <= set(create["responses"])
