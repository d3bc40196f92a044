"""Routes of /data_streams."""
from __future__ import annotations

from chalicelib.api.routing import ApiRequest, Router
from chalicelib.api.schemas.common import CursorQuery
from chalicelib.api.schemas.data_streams import (
    BalancePage,
    BalanceQuery,
    CreateDataStream,
    DataStreamOut,
    DataStreamPage,
    StatementDayOut,
    UpdateDataStream,
)
from chalicelib.container import container
from chalicelib.domain.balances import StatementDay, gaps
from chalicelib.domain.data_streams import DataStream, StreamType
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
    return stream_out(stream)


def stream_out(stream: DataStream, latest: dict[str, StatementDay] | None = None) -> DataStreamOut:
    """A stream's body; a bank_feed stream's with its newest statement day (from `latest`, when the
    caller read those of a whole page at once)."""
    shown = DataStreamOut.model_validate(stream)
    if stream.type is not StreamType.BANK_FEED:
        return shown
    day = (latest if latest is not None else latest_balances([stream])).get(stream.key)
    return shown.model_copy(update={"latest_balance": day_out(day, gap=False)}) if day is not None else shown


def latest_balances(streams: list[DataStream]) -> dict[str, StatementDay]:
    """The newest statement day of each bank_feed stream of `streams` (one BatchGetItem)."""
    feeds = [s for s in streams if s.type is StreamType.BANK_FEED]
    if not feeds:
        return {}
    return container().ports.balances.latest_of(feeds[0].environment, [s.key for s in feeds])


def day_out(day: StatementDay, gap: bool) -> StatementDayOut:
    return StatementDayOut.from_entity(day, gap=gap)


@router.route("GET", "/data_streams/{key}/balances", summary="A bank_feed stream's statement days, newest first: "
              "opening and closing balances as the bank reported them, and gaps", query=BalanceQuery,
              response=BalancePage, errors=(400, 404, 422))
def list_balances(request: ApiRequest, key: str) -> BalancePage:
    query: BalanceQuery = request.query
    ports = container().ports
    ports.data_streams.get(request.environment, key)
    days, cursor = ports.balances.page(request.environment, key, query.limit, query.cursor, query.date_from,
                                       query.date_to)
    older = ports.balances.older_than(days[-1]) if days else None
    return BalancePage(data=[day_out(d, g) for d, g in zip(days, gaps(days, older), strict=True)],
                       next_cursor=cursor, limit=query.limit)


@router.route("GET", "/data_streams", summary="List data streams, newest first",
              query=CursorQuery, response=DataStreamPage, errors=(400, 422))
def list_data_streams(request: ApiRequest) -> DataStreamPage:
    query: CursorQuery = request.query
    streams, cursor = container().ports.data_streams.list_page(request.environment, query.limit, query.cursor)
    latest = latest_balances(streams)
    return DataStreamPage(data=[stream_out(s, latest) for s in streams], next_cursor=cursor,
                          limit=query.limit)


@router.route("GET", "/data_streams/{key}", summary="Get a data stream", response=DataStreamOut, errors=(404,))
def get_data_stream(request: ApiRequest, key: str) -> DataStreamOut:
    return stream_out(container().ports.data_streams.get(request.environment, key))


@router.route("PATCH", "/data_streams/{key}", summary="Rename or describe a data stream",
              body=UpdateDataStream, response=DataStreamOut, errors=(404, 409, 422))
def update_data_stream(request: ApiRequest, key: str) -> DataStreamOut:
    body: UpdateDataStream = request.body
    stream = service.update_stream(
        container().ports.data_streams, request.environment, key, name=body.name, description=body.description,
        description_given="description" in body.model_fields_set, requested_key=body.key,
        requested_type=body.type, bank_account_id=body.bank_account_id,
    )
    return stream_out(stream)


@router.route("DELETE", "/data_streams/{key}", summary="Delete a data stream and everything in it",
              status=204, errors=(404, 409))
def delete_data_stream(request: ApiRequest, key: str) -> None:
    service.delete_stream(container().ports, request.environment, key)
