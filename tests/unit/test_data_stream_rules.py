import pytest

from chalicelib.domain.api_keys import generate_secret, hash_secret
from chalicelib.domain.data_streams import StreamType, check_new_stream, check_property_key
from chalicelib.domain.errors import ValidationFailed


@pytest.mark.parametrize("key", ["bank", "a", "stripe_payouts-2", "x" * 64])
def test_valid_stream_keys_are_accepted(key):
    check_new_stream(key, StreamType.API, None)


@pytest.mark.parametrize("key", ["", "Bank", "has space", "x" * 65, "dot.ted", "ünï"])
def test_invalid_stream_keys_fail_on_the_key_field(key):
    with pytest.raises(ValidationFailed) as caught:
        check_new_stream(key, StreamType.API, None)
    assert caught.value.errors[0].field == "key"


def test_a_bank_feed_needs_a_bank_account():
    with pytest.raises(ValidationFailed) as caught:
        check_new_stream("bank", StreamType.BANK_FEED, None)
    assert caught.value.errors[0].field == "bank_account_id"
    check_new_stream("bank", StreamType.BANK_FEED, "acct_1")


@pytest.mark.parametrize("kind", [StreamType.CSV, StreamType.PAYMENT_PROCESSOR])
def test_service_made_stream_types_cannot_be_created(kind):
    with pytest.raises(ValidationFailed, match="cannot be created"):
        check_new_stream("s", kind, None)


def test_property_keys_allow_metadata_style_names_but_no_dots():
    check_property_key("payout_ID-2")
    with pytest.raises(ValidationFailed):
        check_property_key("a.b")


def test_keys_are_kept_as_sha256_and_secrets_are_unguessable():
    secret = generate_secret()
    assert len(hash_secret(secret)) == 64 and secret not in hash_secret(secret)
    assert hash_secret("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert generate_secret() != secret
