"""A browser agent's secrets (its portal login, its saved and pending browser contexts, each kept
apart), and the task tokens that resume a paused browser run: a token nothing waits on any more
is answered False, never an error."""
from __future__ import annotations

import pytest

from chalicelib.domain.agents.browser import Credentials
from tests.contract.builders import ENV, OTHER_ENV

STATE = {"cookies": [{"name": "session", "value": "abc", "domain": "bank.example"}], "origins": []}


class TestBrowserSecrets:
    def test_a_login_and_contexts_read_back_each_apart(self, browser_secrets):
        assert browser_secrets.credentials(ENV, "a1") is None and browser_secrets.context(ENV, "a1", "saved") is None
        browser_secrets.put_credentials(ENV, "a1", Credentials("ops", "s3cret"))
        browser_secrets.put_credentials(ENV, "a1", Credentials("ops", "n3w"))  # a new password replaces it
        assert browser_secrets.put_context(ENV, "a1", "saved", STATE)
        assert browser_secrets.put_context(ENV, "a1", "pending", {"cookies": [], "origins": []})

        assert browser_secrets.credentials(ENV, "a1") == Credentials("ops", "n3w")
        assert browser_secrets.context(ENV, "a1", "saved") == STATE
        assert browser_secrets.context(ENV, "a1", "pending") == {"cookies": [], "origins": []}
        assert browser_secrets.credentials(OTHER_ENV, "a1") is None

    def test_a_dropped_context_reads_none_and_a_deleted_agent_keeps_nothing(self, browser_secrets):
        browser_secrets.put_credentials(ENV, "a1", Credentials("ops", "s3cret"))
        browser_secrets.put_context(ENV, "a1", "saved", STATE)
        browser_secrets.put_context(ENV, "a1", "pending", STATE)
        browser_secrets.drop_context(ENV, "a1", "pending")
        browser_secrets.drop_context(ENV, "a1", "pending")  # twice: nothing to drop
        assert browser_secrets.context(ENV, "a1", "pending") is None
        assert browser_secrets.context(ENV, "a1", "saved") == STATE

        browser_secrets.delete_agent(ENV, "a1")
        browser_secrets.delete_agent(ENV, "a1")  # again: nothing left, no error
        assert browser_secrets.credentials(ENV, "a1") is None and browser_secrets.context(ENV, "a1", "saved") is None


class TestTaskTokens:
    def test_a_token_nothing_waits_on_is_answered_false(self, backend, task_tokens):
        if backend.name == "moto":
            pytest.skip("moto takes any token; Step Functions answers an unknown one InvalidToken")
        assert task_tokens.send_success("AAAA-no-such-token", {"resumed": 1}) is False
