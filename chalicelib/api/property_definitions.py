"""Routes of /data_stream_property_definitions."""
from __future__ import annotations

from chalicelib.api.routing import ApiRequest, Router, numeric_id
from chalicelib.api.schemas.property_definitions import (
    CreatePropertyDefinition,
    PropertyDefinitionOut,
    PropertyDefinitionQuery,
    UpdatePropertyDefinition,
)
from chalicelib.container import container
from chalicelib.domain.data_streams import PropertyType
from chalicelib.services import property_definitions as service

router = Router("property_definitions")
PATH = "/data_stream_property_definitions"


@router.route("POST", PATH, summary="Define a typed metadata property of a data stream", status=201,
              body=CreatePropertyDefinition, response=PropertyDefinitionOut, errors=(409, 422))
def create_property_definition(request: ApiRequest) -> PropertyDefinitionOut:
    body: CreatePropertyDefinition = request.body
    definition = service.create_definition(
        container().ports, request.environment, key=body.key, name=body.name, type_=PropertyType(body.type),
        data_stream_key=body.data_stream_key, optional=body.optional,
    )
    return PropertyDefinitionOut.model_validate(definition)


@router.route("GET", PATH, summary="List property definitions (a bare array)",
              query=PropertyDefinitionQuery, response=list[PropertyDefinitionOut])
def list_property_definitions(request: ApiRequest) -> list[PropertyDefinitionOut]:
    query: PropertyDefinitionQuery = request.query
    definitions = container().ports.property_definitions.list(request.environment, query.data_stream_key)
    return [PropertyDefinitionOut.model_validate(d) for d in definitions]


@router.route("GET", PATH + "/{id}", summary="Get a property definition",
              response=PropertyDefinitionOut, errors=(404,))
def get_property_definition(request: ApiRequest, id: str) -> PropertyDefinitionOut:
    definition = container().ports.property_definitions.get(request.environment,
                                                            numeric_id(id, "property definition"))
    return PropertyDefinitionOut.model_validate(definition)


@router.route("PATCH", PATH + "/{id}",
              summary="Rename a property definition or change optional (key and type are immutable)",
              body=UpdatePropertyDefinition, response=PropertyDefinitionOut, errors=(404, 422))
def update_property_definition(request: ApiRequest, id: str) -> PropertyDefinitionOut:
    body: UpdatePropertyDefinition = request.body
    definition = service.update_definition(
        container().ports.property_definitions, request.environment, numeric_id(id, "property definition"),
        name=body.name, optional=body.optional, requested_key=body.key, requested_type=body.type,
    )
    return PropertyDefinitionOut.model_validate(definition)


@router.route("DELETE", PATH + "/{id}", summary="Delete a property definition", status=204, errors=(404,))
def delete_property_definition(request: ApiRequest, id: str) -> None:
    service.delete_definition(container().ports.property_definitions, request.environment,
                              numeric_id(id, "property definition"))
