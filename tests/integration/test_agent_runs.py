"""Agent runs over the API, in-process on moto, with the model scripted at the wire: a local HTTP
server speaking OpenAI's Chat Completions returns prepared replies (tool calls, then a final
answer); the tools run for real against moto, and the tests assert on the tool results the server
received in the next request, on the run, the files in S3 and the mail SES kept."""
from __future__ import annotations

import base64
import email
import json
from email import policy

import pytest

from tests.integration.conftest import record
from tests.support.model_servers import ScriptedChatServer, closed_port_url

AGENTS = "/v1/agents"
SENDER = "agents@recon.local"


@pytest.fixture
def model(services):
    """The scripted model server, and the services pointed at it."""
    with ScriptedChatServer() as server:
        services.settings = services.settings.model_copy(update={"openai_base_url": server.base_url,
                                                                 "model_provider": "openai"})
        services.aws.client("ses").verify_email_identity(EmailAddress=services.settings.mail_sender)
        yield server


def create_agent(api, **fields):
    body = {"name": "Payout mailer", "instructions": "List yesterday's unmatched payouts and mail them.", **fields}
    created = api.post(AGENTS, body)
    assert created.status_code == 201, created.json_body
    return created.json_body


def run_agent(api, worker, agent_id):
    started = api.post(f"{AGENTS}/{agent_id}/runs")
    assert started.status_code == 202, started.json_body
    assert started.json_body["status"] == "queued" and started.json_body["trigger"] == "manual"
    worker.drain()
    return api.get(f"{AGENTS}/{agent_id}/runs/{started.json_body['id']}").json_body


def sent_mail(services) -> list[email.message.EmailMessage]:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ses.models import ses_backends

    backend = ses_backends[DEFAULT_ACCOUNT_ID][services.settings.region]
    return [email.message_from_bytes(m.raw_data.encode() if isinstance(m.raw_data, str) else m.raw_data,
                                     policy=policy.default) for m in backend.sent_messages]


def test_a_run_calls_tools_on_the_environments_data_writes_files_and_mails_the_matching_ones(
        api, worker, ingest, services, model, reconciliation):
    ingest(record("bank", 1, 125_00), record("bank", 2, 40_05), record("ledger", 1, 125_00, direction="debit"))
    agent = create_agent(api, delivery_enabled=True, delivery_recipients=["treasury@acme.test", "cfo@acme.test"],
                         delivery_file_pattern="*.CSV", timezone="America/New_York",
                         mentions=[{"type": "reconciliation", "id": reconciliation["id"], "label": "Bank"}])
    model.add(
        model.tool_calls(("c1", "list_reconciliations", {}),
                         ("c2", "sql", {"query": "SELECT data_stream_key, direction, sum(amount) AS total, count(*) "
                                                 "AS n FROM records GROUP BY 1, 2 ORDER BY 1, 2"}),
                         prompt_tokens=120, completion_tokens=30),
        model.tool_calls(("c3", "write_output_file", {"filename": "../payouts.csv", "content": "id,amount\n2,40.05\n"}),
                         ("c4", "write_output_file", {"filename": "notes.txt", "content": "one payout open"})),
        model.text("Mailed payouts.csv: one payout of 40.05 USD is unmatched.", prompt_tokens=300))

    run = run_agent(api, worker, agent["id"])

    assert run["status"] == "completed", run
    assert set(run) == {"id", "agent_id", "status", "trigger", "created_at", "started_at", "completed_at",
                        "error_message", "output_files", "deliveries", "usage", "steps", "file_import_id"}
    prompt = model.requests[0].body["messages"]
    assert "List yesterday's unmatched payouts" in prompt[-1]["content"]
    assert "Bank to ledger" in prompt[-1]["content"] and "(America/New_York)" in prompt[-1]["content"]
    assert {t["function"]["name"] for t in model.requests[0].body["tools"]} == {
        "sql", "list_reconciliations", "get_reconciliation", "list_exceptions", "get_exception",
        "comment_on_exception", "start_reconciliation_run", "read_input_file", "write_output_file", "run_agent"}
    listed, table = model.tool_results(1)
    assert listed["tool_call_id"] == "c1" and "Bank to ledger" in listed["content"]
    assert "16505" in table["content"] and "12500" in table["content"]  # exact integers: 125_00 + 40_05
    assert [s["name"] for s in run["steps"]] == ["list_reconciliations", "sql", "write_output_file",
                                                 "write_output_file", "final_answer"]
    assert not any(s["failed"] for s in run["steps"])
    assert run["usage"]["input_tokens"] == 120 + 10 + 300 and run["usage"]["model"]
    assert [f["filename"] for f in run["output_files"]] == ["payouts.csv", "notes.txt"]
    assert run["output_files"][0]["byte_size"] == len("id,amount\n2,40.05\n")
    assert [(d["recipient"], d["status"]) for d in run["deliveries"]] == [
        ("treasury@acme.test", "sent"), ("cfo@acme.test", "sent")]
    mails = sent_mail(services)
    assert sorted(m["To"] for m in mails) == ["cfo@acme.test", "treasury@acme.test"]
    attachments = [(a.get_filename(), a.get_content()) for a in mails[0].iter_attachments()]
    assert attachments == [("payouts.csv", "id,amount\n2,40.05\n")]  # notes.txt does not match *.CSV
    assert api.get(f"{AGENTS}/{agent['id']}").json_body["last_run_at"] == run["started_at"]
    assert api.get(f"{AGENTS}/{agent['id']}/runs").json_body["data"][0]["id"] == run["id"]


def test_formula_cells_of_a_csv_the_model_writes_are_neutralised_before_it_is_stored_and_mailed(
        api, worker, services, model):
    agent = create_agent(api, delivery_enabled=True, delivery_recipients=["treasury@acme.test"],
                         delivery_file_pattern="*.csv")
    content = 'id,amount,note\n1,-12.50,=HYPERLINK("http://evil.test")\n2,+7,@SUM(A1)\n'
    model.add(model.tool_calls(("c1", "write_output_file", {"filename": "payouts.csv", "content": content})),
              model.text("Done."))

    run = run_agent(api, worker, agent["id"])

    safe = 'id,amount,note\n1,-12.50,"\'=HYPERLINK(""http://evil.test"")"\n2,+7,\'@SUM(A1)\n'
    assert run["output_files"][0]["byte_size"] == len(safe)
    [mail] = sent_mail(services)
    assert [a.get_content() for a in mail.iter_attachments()] == [safe]


def test_tool_errors_go_back_to_the_model_and_the_run_goes_on(api, worker, services, model):
    other = create_agent(api, name="Other")
    agent = create_agent(api)
    model.add(
        model.tool_calls(("e1", "get_exception", {"id": 999}), ("e2", "sql", "{not json"),
                         ("e3", "run_agent", {"agent_id": other["id"]}),
                         ("e4", "sql", {"query": "COPY (SELECT 1) TO '/tmp/out.csv'"}),
                         ("e5", "sql", {"query": "SELECT 1; SELECT 2"}),
                         ("e6", "read_input_file", {"filename": "/etc/passwd"}),
                         ("e7", "no_such_tool", {}),
                         ("e8", "get_exception", {"id": 1, "environment": "globex"})),
        model.tool_calls(("e9", "write_output_file", {"filename": "a.txt"})),
        model.text("Could not do it."))

    run = run_agent(api, worker, agent["id"])

    assert run["status"] == "completed", run
    results = {r["tool_call_id"]: r["content"] for r in model.tool_results(1)}
    assert "not found" in results["e1"]
    assert "not a JSON object" in results["e2"]
    assert "not mentioned" in results["e3"]
    assert results["e4"].startswith("ERROR") and "refused" in results["e4"]
    assert "refused" in results["e5"]
    assert "no input file" in results["e6"]
    assert "no tool named" in results["e7"]
    assert "unknown argument(s) environment" in results["e8"]  # the environment is never a parameter
    assert "missing argument(s) content" in model.tool_results(2)[0]["content"]
    assert [s["failed"] for s in run["steps"]] == [True] * 9 + [False]
    assert api.get(f"{AGENTS}/{other['id']}/runs").json_body["data"] == []


def test_run_agent_starts_a_mentioned_agent_once_and_refuses_a_cycle(api, worker, services, model):
    helper = create_agent(api, name="Helper")
    boss = create_agent(api, name="Boss", mentions=[{"type": "agent", "id": helper["id"], "label": "Helper"}])
    api.patch(f"{AGENTS}/{helper['id']}", {"mentions": [{"type": "agent", "id": boss["id"], "label": "Boss"}]})
    model.add(model.tool_calls(("r1", "run_agent", {"agent_id": helper["id"]})), model.text("Started the helper."),
              # the helper's run: it tries to start its caller
              model.tool_calls(("r2", "run_agent", {"agent_id": boss["id"]})), model.text("Refused, fine."))

    run_agent(api, worker, boss["id"])

    helper_runs = api.get(f"{AGENTS}/{helper['id']}/runs").json_body["data"]
    assert [(r["trigger"], r["status"]) for r in helper_runs] == [("agent", "completed")]
    assert "cycle" in model.tool_results(3)[0]["content"]
    assert len(api.get(f"{AGENTS}/{boss['id']}/runs").json_body["data"]) == 1


def test_throttling_is_retried_and_a_script_that_runs_out_fails_the_run(api, worker, services, model):
    agent = create_agent(api)
    model.add(model.throttling(retry_after=0), model.text("Nothing to do."))
    assert run_agent(api, worker, agent["id"])["status"] == "completed"
    assert len(model.requests) == 2

    model.add(model.tool_calls(("t1", "list_reconciliations", {})))  # and then no reply left
    failed = run_agent(api, worker, agent["id"])
    assert failed["status"] == "failed"
    assert "the model failed" in failed["error_message"] and "no reply left" in failed["error_message"]
    assert [s["name"] for s in failed["steps"]] == ["list_reconciliations"]


def test_a_run_is_bounded_in_turns_and_fails_naming_the_bound(api, worker, services, model):
    services.settings = services.settings.model_copy(update={"agent_max_turns": 2})
    services.__dict__.pop("ports", None)  # built again, with the smaller bound
    agent = create_agent(api)
    model.add(*[model.tool_calls((f"x{i}", "list_reconciliations", {})) for i in range(3)])
    failed = run_agent(api, worker, agent["id"])
    assert failed["status"] == "failed" and "2 turns" in failed["error_message"]


def test_with_no_model_reachable_a_run_fails_saying_how_to_configure_one(api, worker, services, model):
    services.settings = services.settings.model_copy(update={"openai_base_url": closed_port_url()})
    agent = create_agent(api)
    failed = run_agent(api, worker, agent["id"])
    assert failed["status"] == "failed"
    assert "OPENAI_BASE_URL" in failed["error_message"] or "RECON_MODEL_PROVIDER" in failed["error_message"]
    assert api.get(f"{AGENTS}/{agent['id']}").status_code == 200  # nothing else broke


def test_input_files_inline_and_by_upload_url_are_read_by_runs_and_deleted(api, worker, services, model):
    agent = create_agent(api)
    inline = api.post(f"{AGENTS}/{agent['id']}/files", {"filename": "rates.csv", "content_type": "text/csv",
                                                         "content_base64": base64.b64encode(b"usd,1\n").decode()})
    assert inline.status_code == 201, inline.json_body
    assert (inline.json_body["byte_size"], inline.json_body["upload_url"]) == (6, None)
    later = api.post(f"{AGENTS}/{agent['id']}/files", {"filename": "big.csv"}).json_body
    assert later["byte_size"] is None and later["upload_url"]
    for bad_base64 in ("%%%", "é"):
        bad = api.post(f"{AGENTS}/{agent['id']}/files", {"filename": "x.csv", "content_base64": bad_base64})
        assert bad.status_code == 422 and bad.json_body["errors"][0]["field"] == "content_base64"
    for bad_type in ("text/plain\r\nX-Injected: 1", "tëxt/csv", "csv"):
        bad = api.post(f"{AGENTS}/{agent['id']}/files", {"filename": "x.csv", "content_type": bad_type})
        assert bad.status_code == 422 and bad.json_body["errors"][0]["field"] == "content_type", bad_type
    files = api.get(f"{AGENTS}/{agent['id']}").json_body["input_files"]
    assert [(f["filename"], f["byte_size"]) for f in files] == [("rates.csv", 6), ("big.csv", None)]

    # The client's PUT to the upload URL lands; a run reads the file without anyone reading the agent first.
    from chalicelib.domain.agents.files import AgentFile
    from chalicelib.domain.clock import parse_iso

    services.agent_files.put(AgentFile("acme", agent["id"], later["id"], "big.csv", None, "text/csv",
                                       parse_iso(later["created_at"])), b"a,b\n1,2\n")
    model.add(model.tool_calls(("f1", "read_input_file", {"filename": "RATES.csv"}),
                               ("f2", "read_input_file", {"filename": "big.csv"})), model.text("ok"))
    run_agent(api, worker, agent["id"])
    assert [r["content"] for r in model.tool_results(1)] == ["usd,1\n", "a,b\n1,2\n"]

    assert api.delete(f"{AGENTS}/{agent['id']}/files/{inline.json_body['id']}").status_code == 204
    assert api.delete(f"{AGENTS}/{agent['id']}/files/{inline.json_body['id']}").status_code == 404
    assert [f["filename"] for f in api.get(f"{AGENTS}/{agent['id']}").json_body["input_files"]] == ["big.csv"]


def test_a_file_dropped_for_the_environment_runs_its_file_drop_agent(api, worker, services, model):
    from chalicelib.services.ingestion.drops import on_object_created

    s3, bucket = services.aws.s3, services.settings.bucket_name
    s3.put_object(Bucket=bucket, Key="drops/acme/payouts-1123.csv", Body=b"id,amount\n1,500\n")
    assert on_object_created(services.ports, "drops/acme/payouts-1123.csv", "e1") is None
    refusal = json.loads(s3.get_object(Bucket=bucket, Key="drops-refused/acme/payouts-1123.csv.json")["Body"].read())
    assert "no active agent that handles file drops" in refusal["reason"]

    agent = create_agent(api, handles_file_drops=True)
    model.add(model.tool_calls(("d1", "read_input_file", {"filename": "payouts-1123.csv"})), model.text("Read it."))
    on_object_created(services.ports, "drops/acme/payouts-1123.csv", "e2")
    on_object_created(services.ports, "drops/acme/payouts-1123.csv", "e2")  # the same event, delivered again
    worker.drain()
    runs = api.get(f"{AGENTS}/{agent['id']}/runs").json_body["data"]
    assert [(r["trigger"], r["status"]) for r in runs] == [("file_drop", "completed")]
    assert model.tool_results(1)[0]["content"] == "id,amount\n1,500\n"


def test_another_environment_sees_no_runs_or_files(api, worker, services, model):
    from chalicelib.services.api_keys import create_key

    agent = create_agent(api)
    model.add(model.text("ok"))
    run = run_agent(api, worker, agent["id"])
    other = create_key(services.api_keys, "globex")[1]
    assert api.get(f"{AGENTS}/{agent['id']}/runs", key=other).status_code == 404
    assert api.get(f"{AGENTS}/{agent['id']}/runs/{run['id']}", key=other).status_code == 404
    assert api.post(f"{AGENTS}/{agent['id']}/runs", key=other).status_code == 404
    assert api.post(f"{AGENTS}/{agent['id']}/files", {"filename": "a.csv", "content_base64": ""},
                    key=other).status_code == 404


def test_a_run_on_bedrock_speaks_converse_with_tool_use(api, worker, services, reconciliation):
    from tests.support.model_servers import ScriptedConverseServer

    with ScriptedConverseServer() as converse:
        services.settings = services.settings.model_copy(update={
            "model_provider": "bedrock", "bedrock_endpoint": converse.url, "default_model": "anthropic.claude-test"})
        agent = create_agent(api)
        converse.add(converse.tool_calls(("b1", "get_reconciliation", {"id": reconciliation["id"]}),
                                         ("b2", "get_reconciliation", {"id": 404})),
                     converse.text("Reconciliation checked."))
        run = run_agent(api, worker, agent["id"])
        assert run["status"] == "completed", run
        assert converse.model_id(0) == "anthropic.claude-test" and run["usage"]["model"] == "anthropic.claude-test"
        found, missing = converse.tool_results(1)
        assert found["toolUseId"] == "b1" and "Bank to ledger" in found["content"][0]["text"]
        assert missing["status"] == "error" and "not found" in missing["content"][0]["text"]


def test_a_tool_that_breaks_inside_the_service_answers_an_error_and_the_run_goes_on(api, worker, services, model):
    from dataclasses import replace

    class BrokenSql:
        def query(self, environment, sql):
            raise OSError("disk full at /tmp/recon-mirror-cache")

        def as_table(self, answer):
            return ""

    services.__dict__["ports"] = replace(services.ports, records_sql=BrokenSql())
    agent = create_agent(api)
    model.add(model.tool_calls(("s1", "sql", {"query": "SELECT 1 FROM records"})), model.text("Gave up."))
    run = run_agent(api, worker, agent["id"])
    assert run["status"] == "completed"
    [result] = model.tool_results(1)
    assert result["content"].startswith("ERROR") and "OSError" in result["content"]
    assert "/tmp" not in result["content"]  # the details stay in the log


def test_tool_calls_past_the_bound_of_a_turn_are_answered_not_run(api, worker, services, model):
    agent = create_agent(api)
    model.add(model.tool_calls(*[(f"n{i}", "list_reconciliations", {}) for i in range(10)]), model.text("ok"))
    run = run_agent(api, worker, agent["id"])
    results = model.tool_results(1)
    assert [("not run" in r["content"]) for r in results] == [False] * 8 + [True] * 2
    assert [s["failed"] for s in run["steps"]] == [False] * 8 + [True] * 2 + [False]


def test_a_run_is_bounded_in_tokens_and_in_time_and_fails_naming_the_bound(api, worker, services, model):
    services.settings = services.settings.model_copy(update={"agent_max_tokens": 1000})
    services.__dict__.pop("ports", None)
    agent = create_agent(api)
    model.add(model.tool_calls(("t", "list_reconciliations", {}), prompt_tokens=900, completion_tokens=200))
    failed = run_agent(api, worker, agent["id"])
    assert failed["status"] == "failed" and failed["error_message"] == (
        "the run used 1100 tokens, over its bound of 1000")

    services.settings = services.settings.model_copy(update={"agent_max_seconds": 0})
    services.__dict__.pop("ports", None)
    slow = run_agent(api, worker, agent["id"])  # any time at all is over a bound of 0 s
    assert slow["status"] == "failed" and slow["error_message"] == "the run took longer than its bound of 0 s"


def test_what_an_agent_changes_is_in_the_audit_trail_with_the_agent_as_actor(api, worker, ingest, model,
                                                                              reconciliation):
    ingest(record("bank", 1, 125_00))
    agent = create_agent(api, mentions=[{"type": "reconciliation", "id": reconciliation["id"], "label": "Bank"}])
    model.add(model.tool_calls(("c1", "start_reconciliation_run", {"reconciliation_id": reconciliation["id"]}),
                               ("c2", "write_output_file", {"filename": "notes.txt", "content": "ran it"})),
              model.text("Started a run."))

    run = run_agent(api, worker, agent["id"])

    assert run["status"] == "completed", run
    entries = api.get(f"/v1/audit_events?actor=agent:{agent['id']}").json_body["data"]
    assert [e["action"] for e in reversed(entries)] == [
        "reconciliation_run.created", "agent_file.written", "agent_run.completed"]
    assert all(e["summary"].get("agent_run_id", run["id"]) == run["id"] for e in entries)
    assert entries[0]["resource_id"] == str(run["id"]) and entries[0]["summary"]["status"] == "completed"
    assert api.get("/v1/audit_events/verify").json_body["intact"] is True


def test_an_agent_change_whose_entry_was_not_written_is_recorded_by_the_sweeper_outcome_unknown(
        api, worker, services, model):
    """The run went on past the change (here the append failed; a run killed there is the same):
    the change was noted in flight first, so the sweeper writes its entry."""
    from datetime import timedelta

    from chalicelib.domain.clock import utc_now
    from chalicelib.services import audit
    from tests.support.crashes import failing_appends

    agent = create_agent(api)
    model.add(model.tool_calls(("c1", "write_output_file", {"filename": "notes.txt", "content": "hello"})),
              model.text("Wrote it."))
    with failing_appends(services, "agent_file.written"):
        run = run_agent(api, worker, agent["id"])
    by_agent = f"/v1/audit_events?actor=agent:{agent['id']}"
    assert [e["action"] for e in api.get(by_agent).json_body["data"]] == ["agent_run.completed"]

    assert audit.record_unfinished(services.ports, now=utc_now() + timedelta(minutes=3)) == 1

    written, _ = api.get(by_agent).json_body["data"]
    assert (written["action"], written["resource_type"], written["resource_id"]) == (
        "agent_file.written", "agent_run", str(run["id"]))
    assert written["summary"]["outcome"] == "unknown" and written["summary"]["agent_run_id"] == run["id"]
