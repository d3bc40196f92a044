"""Routes of /rate_streams: reference exchange rates, for rules that convert (docs/currencies.md)."""
from __future__ import annotations

from chalicelib.api.routing import ApiRequest, Router
from chalicelib.api.schemas.rate_streams import (
    CreateRateStream,
    ImportRates,
    RateList,
    RateOut,
    RatesImported,
    RatesQuery,
    RateStreamList,
    RateStreamOut,
)
from chalicelib.container import container
from chalicelib.services import rate_streams as service

router = Router("rate_streams")


@router.route("POST", "/rate_streams", summary="Create a rate stream: reference exchange rates for rules that "
              "convert currencies", status=201, body=CreateRateStream, response=RateStreamOut, errors=(409, 422))
def create_rate_stream(request: ApiRequest) -> RateStreamOut:
    body: CreateRateStream = request.body
    stream = service.create(container().ports, request.environment, key=body.key, name=body.name,
                            description=body.description)
    return RateStreamOut.model_validate(stream)


@router.route("GET", "/rate_streams", summary="The environment's rate streams", response=RateStreamList)
def list_rate_streams(request: ApiRequest) -> RateStreamList:
    streams = service.store(container().ports).streams(request.environment)
    return RateStreamList(data=[RateStreamOut.model_validate(s) for s in streams])


@router.route("GET", "/rate_streams/{key}", summary="A rate stream", response=RateStreamOut, errors=(404,))
def get_rate_stream(request: ApiRequest, key: str) -> RateStreamOut:
    return RateStreamOut.model_validate(service.store(container().ports).get(request.environment, key))


@router.route("POST", "/rate_streams/{key}/rates", summary="Import rates from CSV (date, base, quote, rate): every "
              "row checked, all stored or none (422 naming each refused row)", body=ImportRates,
              response=RatesImported, errors=(404, 422))
def import_rates(request: ApiRequest, key: str) -> RatesImported:
    body: ImportRates = request.body
    answer = service.import_rates(container().ports, request.environment, key, body.csv)
    return RatesImported.model_validate({**answer, "rate_stream": RateStreamOut.model_validate(answer["rate_stream"])})


@router.route("GET", "/rate_streams/{key}/rates", summary="A rate stream's rates, by pair then date",
              query=RatesQuery, response=RateList, errors=(404,))
def list_rates(request: ApiRequest, key: str) -> RateList:
    query: RatesQuery = request.query
    rows = service.rates(container().ports, request.environment, key, query.base, query.quote)
    return RateList(data=[RateOut.model_validate(r.as_body()) for r in rows])
