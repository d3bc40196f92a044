"""A browser agent's secrets in Secrets Manager (moto): the login and the saved contexts round-trip,
one secret each under the stage's prefix and the agent's environment; a context too large for a
secret is not kept; a dropped context reads as none and can be saved again at once; deleting the
agent deletes them all."""
from __future__ import annotations

import random
import string

from chalicelib.adapters.secrets import SecretsManagerBrowserSecrets
from chalicelib.domain.agents.browser import Credentials

AGENT = "5b0e7a52-8a7e-4c36-9a55-3f0ad3a0a7c1"


def test_the_login_and_the_contexts_round_trip_one_secret_each_per_environment(services):
    client = services.aws.client("secretsmanager")
    secrets = SecretsManagerBrowserSecrets(client, "recon-test")
    secrets.put_credentials("acme", AGENT, Credentials("ops@acme.test", "pw 1"))
    secrets.put_credentials("acme", AGENT, Credentials("ops@acme.test", "pw 2"))  # replaced, not a second secret
    state = {"cookies": [{"name": "device", "value": "abc", "domain": "127.0.0.1", "path": "/", "expires": -1}],
             "origins": []}
    assert secrets.put_context("acme", AGENT, "saved", state) is True

    assert secrets.credentials("acme", AGENT) == Credentials("ops@acme.test", "pw 2")
    assert secrets.context("acme", AGENT, "saved") == state
    assert secrets.context("acme", AGENT, "pending") is None
    assert secrets.credentials("globex", AGENT) is None and secrets.context("globex", AGENT, "saved") is None
    names = sorted(s["Name"] for s in client.list_secrets()["SecretList"])
    assert names == [f"recon-test/acme/agents/{AGENT}/browser-context", f"recon-test/acme/agents/{AGENT}/credentials"]


def test_a_context_too_large_for_a_secret_is_not_kept(services):
    secrets = SecretsManagerBrowserSecrets(services.aws.client("secretsmanager"), "recon-test")
    noise = "".join(random.Random(7).choices(string.ascii_letters, k=120_000))  # does not compress below 64 KB
    assert secrets.put_context("acme", AGENT, "saved", {"origins": [{"localStorage": noise}]}) is False
    assert secrets.context("acme", AGENT, "saved") is None


def test_a_dropped_context_reads_as_none_and_is_saved_again_at_once(services):
    secrets = SecretsManagerBrowserSecrets(services.aws.client("secretsmanager"), "recon-test")
    secrets.put_context("acme", AGENT, "pending", {"cookies": [{"name": "pending"}]})
    secrets.drop_context("acme", AGENT, "pending")
    assert secrets.context("acme", AGENT, "pending") is None
    secrets.drop_context("acme", AGENT, "saved")  # never saved: nothing to drop
    assert secrets.put_context("acme", AGENT, "pending", {"cookies": []}) is True
    assert secrets.context("acme", AGENT, "pending") == {"cookies": []}


def test_deleting_the_agent_deletes_every_secret_of_it(services):
    client = services.aws.client("secretsmanager")
    secrets = SecretsManagerBrowserSecrets(client, "recon-test")
    secrets.put_credentials("acme", AGENT, Credentials("u", "p"))
    secrets.put_context("acme", AGENT, "saved", {"cookies": []})
    secrets.delete_agent("acme", AGENT)
    secrets.delete_agent("acme", AGENT)  # again: nothing left, no error
    assert secrets.credentials("acme", AGENT) is None
    assert client.list_secrets()["SecretList"] == []
