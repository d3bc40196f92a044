"""Currencies over HTTP (on moto): rate streams of reference rates imported from CSV, and rules that
convert one side at the rate of each record's date, so records of different currencies match; the
match and the near misses say the rate and the converted amount (docs/currencies.md)."""
from chalicelib.domain.fx import convert, parse_rate
from chalicelib.services.api_keys import create_key
from tests.integration.conftest import record

RATES = ("date,base,quote,rate\n"
         "2026-11-02,EUR,USD,1.0842\n"
         "2026-11-02,USD,JPY,150.5\n"
         "2026-10-30,EUR,USD,1.0700\n")
RULE = {"name": "EUR and JPY to USD", "priority": 1,
        "conditions": [{"field": "amount", "operator": "within", "tolerance": 1},
                       {"field": "currency", "operator": "equals"},
                       {"field": "date", "operator": "within", "days": 2}],
        "conversion": {"rate_stream_key": "ecb", "side": "side_a", "to_currency": "USD"}}


def rate_stream(api, key="ecb", csv=RATES, **kwargs):
    assert api.post("/v1/rate_streams", {"key": key, "name": "ECB reference"}, **kwargs).status_code == 201
    imported = api.post(f"/v1/rate_streams/{key}/rates", {"csv": csv}, **kwargs)
    assert imported.status_code == 200, imported.json_body
    return imported.json_body


def add_rule(api, reconciliation, rule=RULE, **kwargs):
    response = api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", rule, **kwargs)
    assert response.status_code == 201, response.json_body
    return response.json_body


def run(api, reconciliation, **kwargs):
    started = api.post(f"/v1/reconciliations/{reconciliation['id']}/runs", **kwargs).json_body
    done = api.get(f"/v1/reconciliations/{reconciliation['id']}/runs/{started['id']}", **kwargs).json_body
    assert done["status"] == "completed", done
    return done


def matches_of(api, reconciliation, **kwargs):
    page = api.get(f"/v1/reconciliation_matches?reconciliation_id={reconciliation['id']}", **kwargs).json_body
    return page["data"]


def test_an_import_answers_each_rows_result_and_a_second_one_replaces_a_days_rate(api):
    first = rate_stream(api)
    again = api.post("/v1/rate_streams/ecb/rates", {"csv": "Rate,Quote,Base,Date,source\n"
                                                           "1.08420,USD,EUR,2026-11-02,ecb\n"
                                                           "1.0843,USD,EUR,2026-11-03,ecb\n"
                                                           "1.0699,USD,EUR,2026-10-30,ecb\n"})

    assert (first["rows"], first["created"], first["replaced"]) == (3, 3, 0)
    assert [r["status"] for r in first["results"]] == ["created"] * 3
    assert first["results"][1] == {"row": 2, "status": "created", "date": "2026-11-02", "base": "USD",
                                   "quote": "JPY", "rate": "150.5", "previous_rate": None}
    assert again.status_code == 200, again.json_body
    body = again.json_body
    assert [(r["row"], r["status"], r["rate"], r["previous_rate"]) for r in body["results"]] == [
        (1, "unchanged", "1.0842", None), (2, "created", "1.0843", None), (3, "replaced", "1.0699", "1.07")]
    assert (body["created"], body["replaced"], body["rate_stream"]["rates_count"]) == (1, 1, 4)
    rates = api.get("/v1/rate_streams/ecb/rates?base=EUR").json_body["data"]
    assert [(r["date"], r["rate"]) for r in rates] == [("2026-10-30", "1.0699"), ("2026-11-02", "1.0842"),
                                                      ("2026-11-03", "1.0843")]
    assert [s["key"] for s in api.get("/v1/rate_streams").json_body["data"]] == ["ecb"]
    assert api.get("/v1/rate_streams/ecb").json_body["rates_count"] == 4


def test_bad_rows_are_refused_each_named_and_nothing_is_stored(api):
    assert api.post("/v1/rate_streams", {"key": "ecb", "name": "ECB"}).status_code == 201

    response = api.post("/v1/rate_streams/ecb/rates", {"csv": "date,base,quote,rate\n"
                                                              "2026-11-02,EUR,USD,1.0842\n"
                                                              "2026-11-02,EUR,USD,0\n"
                                                              "2026-02-30,EUR,USD,1.1\n"
                                                              "2026-11-02,EUR,XXX,1.1\n"
                                                              "2026-11-02,USD,USD,1\n"
                                                              "2026-11-03,EUR,USD,-1.2\n"
                                                              "2026-11-03,EUR,USD,1e3\n"
                                                              "2026-11-02,EUR,USD,1.09\n"})

    assert response.status_code == 422, response.json_body
    assert [(e["field"], e["message"]) for e in response.json_body["errors"]] == [
        ("csv.rows[2].rate", "'0' must be above 0"),
        ("csv.rows[3].date", "'2026-02-30' is not a date YYYY-MM-DD"),
        ("csv.rows[4].quote", "'XXX' is not an ISO 4217 currency code"),
        ("csv.rows[5].quote", "must differ from base"),
        ("csv.rows[6].rate", "'-1.2' must be a positive decimal such as 1.0842 (digits, one point, no sign or "
                             "exponent)"),
        ("csv.rows[7].rate", "'1e3' must be a positive decimal such as 1.0842 (digits, one point, no sign or "
                             "exponent)"),
        ("csv.rows[8].rate", "row 1 gives EUR/USD on 2026-11-02 the rate 1.0842, this row 1.09")]
    assert api.get("/v1/rate_streams/ecb/rates").json_body["data"] == []
    no_header = api.post("/v1/rate_streams/ecb/rates", {"csv": "day,from,to,rate\n2026-11-02,EUR,USD,1\n"})
    assert no_header.status_code == 422
    assert no_header.json_body["errors"][0]["field"] == "csv"
    assert "lacks the column(s) date, base, quote" in no_header.json_body["errors"][0]["message"]
    assert api.post("/v1/rate_streams/nope/rates", {"csv": RATES}).status_code == 404
    assert api.post("/v1/rate_streams", {"key": "ecb", "name": "again"}).status_code == 409
    assert api.post("/v1/rate_streams", {"key": "Not A Key", "name": "x"}).status_code == 422


def test_a_converting_rule_is_checked_and_shown(api, reconciliation):
    rate_stream(api)
    path = f"/v1/reconciliations/{reconciliation['id']}/rules"

    unknown = api.post(path, {**RULE, "conversion": {**RULE["conversion"], "rate_stream_key": "fed"}})
    bad = api.post(path, {**RULE, "conversion": {"rate_stream_key": "ecb", "side": "side_c", "to_currency": "usd",
                                                 "max_days_back": 40}})
    rule = add_rule(api, reconciliation)

    assert unknown.status_code == 422 and unknown.json_body["errors"] == [
        {"field": "conversion.rate_stream_key", "message": "no rate stream with key 'fed'"}]
    assert bad.status_code == 422
    assert [e["field"] for e in bad.json_body["errors"]] == [
        "conversion.side", "conversion.to_currency", "conversion.max_days_back"]
    assert rule["conversion"] == {"rate_stream_key": "ecb", "side": "side_a", "to_currency": "USD",
                                  "max_days_back": 7}
    patched = api.patch(f"/v1/reconciliation_rules/{rule['id']}", {"conversion": {**RULE["conversion"],
                                                                                   "max_days_back": 0}})
    assert patched.status_code == 200 and patched.json_body["conversion"]["max_days_back"] == 0
    stray = api.patch(f"/v1/reconciliation_rules/{rule['id']}", {"conversion": {**RULE["conversion"],
                                                                                 "rate_stream_key": "fed"}})
    assert stray.status_code == 422
    removed = api.patch(f"/v1/reconciliation_rules/{rule['id']}", {"conversion": None})
    assert removed.status_code == 200 and removed.json_body["conversion"] is None


def test_records_of_other_currencies_match_at_their_dates_rate_and_the_match_says_it(api, ingest, reconciliation):
    rate_stream(api)
    add_rule(api, reconciliation)
    bank = ingest(record("bank", 1, 10_000, "2026-11-03", currency="EUR"),   # 100.00 EUR at 1.0842 = 108.42 USD
                  record("bank", 2, 15_050, "2026-11-02", currency="JPY"),   # 15050 JPY / 150.5 = 100.00 USD
                  record("bank", 3, 10_000, "2026-11-01", currency="EUR"),   # 30 Oct's 1.07 = 107.00 USD
                  record("bank", 4, 5_000, "2026-11-02", currency="GBP"))    # no GBP rate
    ledger = ingest(record("ledger", 1, 10_843, "2026-11-03", currency="USD"),
                    record("ledger", 2, 10_000, "2026-11-02", currency="USD"),
                    record("ledger", 3, 10_702, "2026-11-01", currency="USD"),  # 2 cents off: no match
                    record("ledger", 4, 6_000, "2026-11-02", currency="USD"))

    done = run(api, reconciliation)

    assert done["rule_summary"]["unmatched"] == {"side_a": 2, "side_b": 2}
    detail = [api.get(f"/v1/reconciliation_matches/{m['id']}").json_body for m in matches_of(api, reconciliation)]
    by_bank = {}
    for body in detail:
        [converted] = body["differences"]["conversions"]
        by_bank[converted["record_id"]] = (body, converted)
    assert set(by_bank) == {bank[0], bank[1]}
    eur, jpy = by_bank[bank[0]], by_bank[bank[1]]
    assert eur[1] == {"record_id": bank[0], "from_currency": "EUR", "amount": "100.00", "to_currency": "USD",
                      "converted_amount": "108.42", "rate": "1.0842", "pair": "EUR/USD", "inverted": False,
                      "rate_date": "2026-11-02"}
    assert eur[0]["differences"]["amount"] == 1 and eur[0]["status"] == "confirmed"
    assert {r["id"] for r in eur[0]["records"]} == {bank[0], ledger[0]}
    assert jpy[1] == {"record_id": bank[1], "from_currency": "JPY", "amount": "15050", "to_currency": "USD",
                      "converted_amount": "100.00", "rate": "150.5", "pair": "USD/JPY", "inverted": True,
                      "rate_date": "2026-11-02"}
    assert {r["id"] for r in jpy[0]["records"]} == {bank[1], ledger[1]}
    # The records keep their own money: nothing converted is stored on them.
    kept = api.get(f"/v1/records/{bank[0]}").json_body
    assert (kept["amount"], kept["currency"]) == (10_000, "EUR")


def test_a_dry_run_says_which_rate_is_missing_and_the_rate_behind_an_amount_miss(api, ingest, reconciliation):
    rate_stream(api)
    rule = add_rule(api, reconciliation)
    bank = ingest(record("bank", 1, 10_000, "2026-11-01", currency="EUR"),
                  record("bank", 2, 5_000, "2026-11-02", currency="GBP"))
    ingest(record("ledger", 1, 10_702, "2026-11-01", currency="USD"))

    body = api.post(f"/v1/reconciliation_rules/{rule['id']}/dry_run").json_body

    assert body["matches"] == 0
    sample = {e["record_id"]: e for e in body["near_misses"]["sample"] if e["side"] == "a"}
    [amount] = sample[bank[0]]["failed_conditions"]
    assert amount["message"] == (
        "amount off by 0.02 USD, 0.01 USD more than the 0.01 USD allowed (converted: this record: 100.00 EUR at "
        "EUR/USD 1.07 of 2026-10-30 = 107.00 USD)")
    assert sample[bank[0]]["conversions"][0]["converted_amount"] == "107.00"
    [missing] = sample[bank[1]]["failed_conditions"]
    assert (missing["operator"], missing["unit"]) == ("convert", "USD")
    assert missing["message"] == ("no rate for GBP/USD (nor USD/GBP) in rate stream 'ecb' on 2026-11-02 nor in the "
                                  "7 days before")


def test_an_environments_rates_never_serve_another(api, services, worker, ingest, reconciliation):
    # Environment A holds EUR/USD at 1.0842; B, the same stream key at 2.0000.
    rate_stream(api)
    add_rule(api, reconciliation)
    other = create_key(services.api_keys, "other")[1]
    for key in ("bank", "ledger"):
        assert api.post("/v1/data_streams", {"key": key, "name": key}, key=other).status_code == 201
    theirs = api.post("/v1/reconciliations", {"name": "B", "run_type": "batch", "side_a_stream_keys": ["bank"],
                                              "side_b_stream_keys": ["ledger"]}, key=other).json_body
    refused = api.post(f"/v1/reconciliations/{theirs['id']}/rules", RULE, key=other)
    assert refused.status_code == 422 and refused.json_body["errors"][0]["field"] == "conversion.rate_stream_key"
    rate_stream_b = api.post("/v1/rate_streams", {"key": "fx", "name": "B's"}, key=other)
    assert rate_stream_b.status_code == 201
    assert api.post("/v1/rate_streams/fx/rates", {"csv": "date,base,quote,rate\n2026-11-02,EUR,USD,2\n"},
                    key=other).status_code == 200
    add_rule(api, theirs, {**RULE, "conversion": {**RULE["conversion"], "rate_stream_key": "fx"}}, key=other)
    posted = api.post("/v1/records/bulk", {"records": [
        record("bank", 1, 10_000, "2026-11-03", currency="EUR"),
        record("ledger", 1, 10_842, "2026-11-03", currency="USD"),   # A's rate would match it
        record("ledger", 2, 20_000, "2026-11-03", currency="USD")]}, key=other)
    assert posted.status_code == 202
    worker.drain()
    ingest(record("bank", 1, 10_000, "2026-11-03", currency="EUR"), record("ledger", 1, 10_842, "2026-11-03",
                                                                            currency="USD"))

    run(api, theirs, key=other)
    run(api, reconciliation)

    [b_match] = matches_of(api, theirs, key=other)
    b_detail = api.get(f"/v1/reconciliation_matches/{b_match['id']}", key=other).json_body
    assert b_detail["differences"]["conversions"][0]["converted_amount"] == "200.00"
    assert b_detail["differences"]["conversions"][0]["rate"] == "2"
    [a_match] = matches_of(api, reconciliation)
    a_detail = api.get(f"/v1/reconciliation_matches/{a_match['id']}").json_body
    assert a_detail["differences"]["conversions"][0]["converted_amount"] == "108.42"
    assert api.get("/v1/rate_streams/fx", key=other).status_code == 200
    assert api.get("/v1/rate_streams/fx").status_code == 404


def test_a_run_that_fans_out_converts_in_every_partition(api, services, ingest, reconciliation):
    """Forced past one function (tests/integration/test_run_fanout.py): a date range plan (never
    currency or amount), each partition carrying its records' converted amounts."""
    from tests.integration.test_run_fanout import fan_out

    rate_stream(api, csv="date,base,quote,rate\n" + "".join(
        f"2026-11-{day:02d},EUR,USD,1.{day:02d}\n" for day in range(1, 29)))
    add_rule(api, reconciliation)
    bank = ingest(*(record("bank", n, 10_000 + n, f"2026-11-{1 + n:02d}", currency="EUR") for n in range(20)))
    ingest(*(record("ledger", n, convert(10_000 + n, 2, 2, parse_rate(f"1.{1 + n:02d}")) + (n % 5 == 0),
                    f"2026-11-{1 + n:02d}", currency="USD") for n in range(20)))
    fan_out(services)

    done = run(api, reconciliation)

    assert services.runs.get("acme", done["id"]).partitions >= 2
    notes = [api.get(f"/v1/reconciliation_matches/{m['id']}").json_body["differences"]["conversions"][0]
             for m in matches_of(api, reconciliation)]
    assert len(notes) == 20
    assert {n["record_id"] for n in notes} == set(bank)
    assert all(n["rate_date"] == f"2026-11-{bank.index(n['record_id']) + 1:02d}" for n in notes)
