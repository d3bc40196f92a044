"""Routes of /data_streams."""
from __future__ import annotations

from chalicelib.api.routing import ApiRequest, Router
from chalicelib.api.schemas import CreateDataStream, CursorQuery, DataStreamOut, DataStreamPage, UpdateDataStream
from chalicelib.container import container
from chalicelib.domain.data_streams import StreamType
from chalicelib.services import data_streams as service

router = Router("data_streams")


@router.route("POST", "/data_streams", summary="Create a data stream", status=201,
              body=CreateDataStream, response=DataStreamOut, errors=(409, 422))
def create_data_stream(request: ApiRequest) -> DataStreamOut:
    body: CreateDataStream = request.body
    stream = service.create_stream(
        container().ports.data_streams, request.environment, key=body.key, name=body.name,
        type_=StreamType(body.type), description=body.description, bank_account_id=body.bank_account_id,
    )
    return DataStreamOut.model_validate(stream)


@router.route("GET", "/data_streams", summary="List data streams, newest first",
              query=CursorQuery, response=DataStreamPage, errors=(400, 422))
def list_data_streams(request: ApiRequest) -> DataStreamPage:
    query: CursorQuery = request.query
    streams, cursor = container().ports.data_streams.list_page(request.environment, query.limit, query.cursor)
    return DataStreamPage(data=[DataStreamOut.model_validate(s) for s in streams], next_cursor=cursor,
                          limit=query.limit)


@router.route("GET", "/data_streams/{key}", summary="Get a data stream", response=DataStreamOut, errors=(404,))
def get_data_stream(request: ApiRequest, key: str) -> DataStreamOut:
    return DataStreamOut.model_validate(container().ports.data_streams.get(request.environment, key))


@router.route("PATCH", "/data_streams/{key}", summary="Rename or describe a data stream",
              body=UpdateDataStream, response=DataStreamOut, errors=(404, 409, 422))
def update_data_stream(request: ApiRequest, key: str) -> DataStreamOut:
    body: UpdateDataStream = request.body
    stream = service.update_stream(
        container().ports.data_streams, request.environment, key, name=body.name, description=body.description,
        description_given="description" in body.model_fields_set, requested_key=body.key,
        requested_type=body.type,
    )
    return DataStreamOut.model_validate(stream)


@router.route("DELETE", "/data_streams/{key}", summary="Delete a data stream and everything in it",
              status=204, errors=(404, 409))
def delete_data_stream(request: ApiRequest, key: str) -> None:
    service.delete_stream(container().ports, request.environment, key)
