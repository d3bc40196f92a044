"""Webhook rules without AWS: secrets, Standard Webhooks signatures (checked by the standardwebhooks
library itself), the retry schedule, the 3-day disable, and which URLs and addresses are refused."""
import base64
import time
from datetime import UTC, datetime, timedelta

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from chalicelib.domain.events import EVENT_TYPES
from chalicelib.domain.webhooks import (
    DISABLE_AFTER,
    MAX_ATTEMPTS,
    RETRY_DELAYS,
    UrlPolicy,
    WebhookEndpoint,
    event_problems,
    new_secret,
    normalised_events,
    retry_delay,
    should_disable,
    wait_after_failure,
    webhook_headers,
)

NOW = datetime(2026, 11, 2, 9, 30, tzinfo=UTC)
AWS, LOCAL = UrlPolicy(local=False), UrlPolicy(local=True)


def endpoint(**fields):
    base = dict(environment="acme", id=1, url="https://hooks.example.com/in", events=("*",), description="",
                active=True, secret=new_secret(), created_at=NOW, updated_at=NOW)
    return WebhookEndpoint(**{**base, **fields})


def test_a_secret_is_whsec_and_base64_of_32_random_bytes():
    secret = new_secret()
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"))) == 32
    assert new_secret() != secret


def test_the_standardwebhooks_library_verifies_what_we_sign():
    secret, body = new_secret(), '{"id":"evt_1","type":"file_import.completed","data":{}}'
    headers = webhook_headers([secret], "evt_1", int(time.time()), body)
    assert Webhook(secret).verify(body, headers)["id"] == "evt_1"


def test_a_signature_of_another_body_or_secret_does_not_verify():
    secret, body = new_secret(), '{"a":1}'
    headers = webhook_headers([secret], "evt_1", int(time.time()), body)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify('{"a":2}', headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(body, headers)


def test_after_a_rotation_both_secrets_sign_for_24_hours_then_only_the_new_one():
    old = endpoint()
    rotated = old.rotated(new_secret(), NOW)
    assert rotated.signing_secrets(NOW + timedelta(hours=23)) == [rotated.secret, old.secret]
    assert rotated.signing_secrets(NOW + timedelta(hours=24)) == [rotated.secret]
    body = "{}"
    headers = webhook_headers(rotated.signing_secrets(NOW), "evt_9", int(time.time()), body)
    assert len(headers["webhook-signature"].split(" ")) == 2
    Webhook(old.secret).verify(body, headers)
    Webhook(rotated.secret).verify(body, headers)


def test_retries_wait_5s_1min_5min_30min_2h_5h_10h_with_a_little_jitter_then_give_up():
    assert [retry_delay(n, 0.5) for n in range(1, MAX_ATTEMPTS)] == list(RETRY_DELAYS)
    assert RETRY_DELAYS == (timedelta(seconds=5), timedelta(minutes=1), timedelta(minutes=5), timedelta(minutes=30),
                            timedelta(hours=2), timedelta(hours=5), timedelta(hours=10))
    assert timedelta(seconds=4.5) <= retry_delay(1, 0.0) < retry_delay(1, 0.99) <= timedelta(seconds=5.5)
    assert retry_delay(MAX_ATTEMPTS, 0.5) is None


def test_a_delivery_that_used_its_attempts_waits_no_more_and_a_manual_retry_gives_it_one_more():
    assert wait_after_failure(3, MAX_ATTEMPTS, 0.5) == RETRY_DELAYS[2]
    assert wait_after_failure(MAX_ATTEMPTS, MAX_ATTEMPTS, 0.5) is None
    assert wait_after_failure(MAX_ATTEMPTS + 1, MAX_ATTEMPTS + 1, 0.5) is None
    assert wait_after_failure(2, 2, 0.5) is None  # a limit below the schedule's end ends it too


def test_an_endpoint_failing_for_3_days_is_to_be_disabled():
    assert not should_disable(None, NOW)
    assert not should_disable(NOW - DISABLE_AFTER + timedelta(seconds=1), NOW)
    assert should_disable(NOW - DISABLE_AFTER, NOW)


def test_an_endpoint_receives_the_types_it_names_or_all_with_a_star_and_none_while_inactive():
    assert endpoint(events=("*",)).receives("agent_run.failed")
    assert endpoint(events=("file_import.completed",)).receives("file_import.completed")
    assert not endpoint(events=("file_import.completed",)).receives("file_import.failed")
    assert not endpoint(active=False).receives("file_import.completed")


def test_unknown_event_types_are_named_and_a_star_covers_every_type():
    assert event_problems(["file_import.completed", "*"]) == []
    assert [i for i, _ in event_problems(["file_import.completed", "file_import.exploded"])] == [1]
    assert normalised_events(["file_import.failed", "*"]) == ("*",)
    assert normalised_events(list(EVENT_TYPES[:2]) * 2) == EVENT_TYPES[:2]


@pytest.mark.parametrize("url, problem", [
    ("http://hooks.example.com/in", "must use https"),
    ("ftp://hooks.example.com/in", "must use https"),
    ("https:///in", "has no host"),
    ("https://user:pw@hooks.example.com/in", "must not carry a user name or password"),
    ("https://127.0.0.1/in", "loopback"),
    ("https://[::1]/in", "loopback"),
    ("https://10.1.2.3/in", "private"),
    ("https://192.168.0.10/in", "private"),
    ("https://169.254.169.254/latest/meta-data", "link-local"),
    ("https://[fe80::1]/in", "link-local"),
    ("https://[::ffff:127.0.0.1]/in", "loopback"),
    ("https://[::ffff:10.0.0.1]/in", "private"),
    ("https://0.0.0.0/in", "unspecified"),
    ("https://224.0.0.1/in", "multicast"),
    ("https://[fc00::1]/in", "private"),
    ("https://100.64.0.1/in", "non-public"),
    ("https://hooks.example.com:99999/in", "not a valid URL"),
])
def test_on_aws_a_url_must_be_https_to_a_public_address(url, problem):
    assert problem in (AWS.url_problem(url) or "")


def test_on_aws_a_public_https_url_is_fine():
    assert AWS.url_problem("https://hooks.example.com/in?x=1") is None
    assert AWS.url_problem("https://93.184.215.14:8443/in") is None
    assert AWS.address_problem("2606:4700::1111") is None


def test_locally_http_and_loopback_are_allowed_but_private_addresses_are_not():
    assert LOCAL.url_problem("http://127.0.0.1:8123/in") is None
    assert LOCAL.url_problem("https://[::1]:8123/in") is None
    assert LOCAL.url_problem("http://localhost:8123/in") is None
    assert "private" in LOCAL.url_problem("http://10.0.0.2/in")
    assert LOCAL.url_problem("ftp://127.0.0.1/in") == "must use http or https"


@pytest.mark.parametrize("address, problem", [
    ("2002:a9fe:a9fe::1", "6to4 address (2002:a9fe:a9fe::1, carrying 169.254.169.254)"),
    ("2002:7f00:1::1", "6to4 address (2002:7f00:1::1, carrying 127.0.0.1)"),
    ("2002:808:808::1", "6to4 address"),  # even one carrying a public IPv4 address: a relay decides
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo address"),
    ("64:ff9b::a9fe:a9fe", "NAT64 address (64:ff9b::a9fe:a9fe, carrying 169.254.169.254)"),
    ("64:ff9b::808:808", "NAT64 address"),
    ("64:ff9b:1::a9fe:a9fe", "NAT64 address"),
    ("fec0::1", "site-local address"),
])
def test_ipv6_addresses_that_tunnel_or_translate_to_ipv4_are_refused_whatever_the_python_version(address, problem):
    assert problem in (AWS.address_problem(address) or "")
    assert problem in (LOCAL.address_problem(address) or "")
    assert problem in (AWS.url_problem(f"https://[{address}]/in") or "")


def test_locally_loopback_urls_are_refused_on_the_stacks_own_ports_only():
    policy = UrlPolicy(local=True, own_ports=frozenset({4569, 80}))

    assert "local stack's own services" in policy.url_problem("http://127.0.0.1:4569/moto-api/reset")
    assert "local stack's own services" in policy.url_problem("http://127.0.0.2:4569/")
    assert "local stack's own services" in policy.url_problem("http://[::ffff:127.0.0.1]:4569/")
    assert "local stack's own services" in policy.url_problem("http://127.0.0.1/")  # port 80 by its scheme
    assert policy.url_problem("http://127.0.0.1:9000/hooks") is None
    assert policy.address_problem("127.0.0.1", 4569) and policy.address_problem("127.0.0.1", 9000) is None


def test_the_settings_name_the_ports_of_the_local_stack_and_the_api_and_none_on_aws():
    from chalicelib.settings import Settings

    local = Settings(local_mode=True, dynamodb_endpoint="http://127.0.0.1:4001", aws_endpoint="http://127.0.0.1:4002",
                     s3_endpoint="http://127.0.0.1:4003", port=4004)
    assert local.local_service_ports == frozenset({4001, 4002, 4003, 4004})
    assert Settings(local_mode=False).local_service_ports == frozenset()
