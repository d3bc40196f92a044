"""/agents over the API, in-process on moto: the resource's shape, its rules and their 4xx."""
PATH = "/v1/agents"


def test_create_read_list_patch_and_delete_an_agent(api):
    created = api.post(PATH, {"name": "Payout mailer", "instructions": "List yesterday's unmatched payouts",
                              "cadence": "weekdays", "hour": 8, "minute": 0, "timezone": "America/New_York",
                              "delivery_enabled": True, "delivery_recipients": ["treasury@acme.test"],
                              "delivery_file_pattern": "*.csv"})
    assert created.status_code == 201, created.json_body
    agent = created.json_body
    assert set(agent) == {"id", "name", "description", "instructions", "kind", "mentions", "model", "cadence", "hour",
                          "minute", "day_of_week", "timezone", "active", "handles_file_drops", "delivery_enabled",
                          "delivery_recipients", "delivery_file_pattern", "input_files", "next_run_at",
                          "last_run_at", "created_at", "updated_at"}
    assert (agent["kind"], agent["model"], agent["day_of_week"], agent["last_run_at"]) == ("llm", None, None, None)
    assert agent["next_run_at"].endswith(("T13:00:00.000Z", "T12:00:00.000Z"))  # 08:00 in New York, EST or EDT
    assert api.get(f"{PATH}/{agent['id']}").json_body == agent
    assert api.get(f"{PATH}/{agent['id'].upper()}").status_code == 200
    assert [a["id"] for a in api.get(PATH).json_body["data"]] == [agent["id"]]
    patched = api.patch(f"{PATH}/{agent['id']}", {"cadence": "manual", "model": "anthropic.claude-x"}).json_body
    assert (patched["cadence"], patched["next_run_at"], patched["model"], patched["hour"]) == (
        "manual", None, "anthropic.claude-x", 8)
    assert api.patch(f"{PATH}/{agent['id']}", {"model": None}).json_body["model"] is None
    assert api.delete(f"{PATH}/{agent['id']}").status_code == 204
    assert api.get(f"{PATH}/{agent['id']}").status_code == 404


def test_bad_agents_are_422_naming_each_field_and_a_second_file_drop_handler_is_409(api):
    refused = api.post(PATH, {"name": "A", "cadence": "weekly", "hour": 25, "minute": 0, "timezone": "Mars/Base"})
    assert refused.status_code == 422
    assert {e["field"] for e in refused.json_body["errors"]} == {"hour", "day_of_week", "timezone"}
    browser = api.post(PATH, {"name": "B", "kind": "browser"})
    assert (browser.status_code, browser.json_body["errors"][0]["message"]) == (
        422, "browser agents are set up by the operator")
    assert api.post(PATH, {"name": "C", "hour": "8"}).status_code == 422  # strict types
    first = api.post(PATH, {"name": "Drops", "handles_file_drops": True}).json_body
    second = api.post(PATH, {"name": "Drops too", "handles_file_drops": True})
    assert second.status_code == 409 and first["id"] in second.json_body["message"]
    assert api.patch(f"{PATH}/{first['id']}", {"kind": "browser"}).status_code == 422
    assert api.get(f"{PATH}/not-a-uuid").status_code == 404
