"""API keys: how a request proves its environment."""
from chalicelib.domain.api_keys import hash_secret
from chalicelib.services.api_keys import create_key


def test_health_needs_no_key(api):
    response = api.get("/v1/health", key=None)
    assert response.status_code == 200
    assert response.json_body == {"status": "ok"}


def test_a_request_without_a_key_is_401_with_a_message(api):
    response = api.get("/v1/data_streams", key=None)
    assert response.status_code == 401
    assert set(response.json_body) == {"message"}
    assert "X-API-KEY" in response.json_body["message"]


def test_an_unknown_key_is_401(api):
    response = api.get("/v1/data_streams", key="rk_not-a-real-key")
    assert response.status_code == 401
    assert response.json_body == {"message": "invalid or revoked API key"}


def test_a_revoked_key_is_401(api, services):
    key, secret = create_key(services.api_keys, "acme")
    assert api.get("/v1/data_streams", key=secret).status_code == 200
    services.api_keys.revoke(key.id)
    assert api.get("/v1/data_streams", key=secret).status_code == 401


def test_a_bearer_token_is_accepted_like_the_header(api):
    response = api.get("/v1/data_streams", key=None, headers={"Authorization": f"Bearer {api.key}"})
    assert response.status_code == 200
    other_scheme = api.get("/v1/data_streams", key=None, headers={"Authorization": f"Basic {api.key}"})
    assert other_scheme.status_code == 401


def test_keys_are_stored_only_as_hashes_and_record_their_last_use(api, services):
    api.get("/v1/data_streams")
    items = services.aws.dynamodb.scan(TableName=services.settings.table_name)["Items"]
    assert api.key not in str(items)
    assert hash_secret(api.key) in str(items)
    [stored] = [k for k in services.api_keys.list() if k.key_hash == hash_secret(api.key)]
    assert stored.last_used_at is not None and stored.environment == "acme"
