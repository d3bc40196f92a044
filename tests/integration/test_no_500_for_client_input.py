"""Whatever a client sends, the answer is a 2xx or a 4xx with a message; never a 500."""
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chalicelib.api.routers import ROUTERS

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=70),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=20), children, max_size=5),
    max_leaves=12,
)
field_names = st.sampled_from(["key", "name", "type", "description", "bank_account_id", "data_stream_key",
                               "optional", "limit", "cursor"])
plausible_bodies = st.dictionaries(field_names, json_values, max_size=6)
bodies = st.one_of(plausible_bodies, json_values).map(json.dumps) | st.binary(max_size=200)
WRITE_ROUTES = sorted({(s.method, s.path) for r in ROUTERS for s in r.specs if s.body is not None})
path_values = st.text(alphabet=st.characters(min_codepoint=48, max_codepoint=122), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(route=st.sampled_from(WRITE_ROUTES), body=bodies, path_value=path_values,
       content_type=st.sampled_from(["application/json", "text/plain", "application/json; charset=utf-8"]))
def test_random_bodies_never_cause_a_server_error(api, route, body, path_value, content_type):
    method, path = route
    path = "/v1" + path.replace("{key}", path_value).replace("{id}", path_value)
    response = api.request(method, path, body=body, headers={"Content-Type": content_type})
    assert response.status_code < 500, (route, body, response.body)
    if response.status_code >= 400:
        assert isinstance(response.json_body.get("message"), str)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.dictionaries(st.sampled_from(["limit", "cursor", "data_stream_key", "x"]),
                             st.text(max_size=30), max_size=3))
def test_random_query_strings_never_cause_a_server_error(api, query):
    from urllib.parse import urlencode

    for path in ("/v1/data_streams", "/v1/data_stream_property_definitions"):
        response = api.get(f"{path}?{urlencode(query)}")
        assert response.status_code < 500, (path, query, response.body)
