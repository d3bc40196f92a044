"""The `sql` tool's guard: one query over `records` (or names its WITH defines) passes, rendered
again by sqlglot; anything else is refused with a reason the model can act on."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chalicelib.domain.agents.sql_guard import SqlRefused, check_select, refusal_for

ACCEPTED = {
    "group by": ("SELECT currency, direction, count(*), sum(amount) FROM records GROUP BY 1, 2",
                 "SELECT currency, direction, COUNT(*), SUM(amount) FROM records GROUP BY 1, 2"),
    "having": ("select currency from records group by currency having count(*) > 1",
               "SELECT currency FROM records GROUP BY currency HAVING COUNT(*) > 1"),
    "cte": ("WITH big AS (SELECT * FROM records WHERE amount > 100) SELECT count(*) FROM big",
            "WITH big AS (SELECT * FROM records WHERE amount > 100) SELECT COUNT(*) FROM big"),
    "window": ("SELECT id, row_number() OVER (PARTITION BY currency ORDER BY amount DESC) AS n FROM records",
               "SELECT id, ROW_NUMBER() OVER (PARTITION BY currency ORDER BY amount DESC) AS n FROM records"),
    "case": ("SELECT sum(CASE WHEN direction = 'credit' THEN amount ELSE -amount END) FROM records",
             "SELECT SUM(CASE WHEN direction = 'credit' THEN amount ELSE -amount END) FROM records"),
    "subquery": ("SELECT * FROM records WHERE amount > (SELECT avg(amount) FROM records)",
                 "SELECT * FROM records WHERE amount > (SELECT AVG(amount) FROM records)"),
    "derived table": ("SELECT c, n FROM (SELECT currency AS c, count(*) AS n FROM records GROUP BY 1) AS t",
                      "SELECT c, n FROM (SELECT currency AS c, COUNT(*) AS n FROM records GROUP BY 1) AS t"),
    "union": ("SELECT id FROM records WHERE amount < 0 UNION ALL SELECT id FROM records WHERE amount > 10",
              "SELECT id FROM records WHERE amount < 0 UNION ALL SELECT id FROM records WHERE amount > 10"),
    "self join": ("SELECT a.id FROM records a JOIN records b ON a.external_id = b.external_id AND a.id < b.id",
                  "SELECT a.id FROM records AS a JOIN records AS b ON a.external_id = b.external_id AND a.id < b.id"),
    "table name in any case": ('SELECT id FROM "RECORDS"', "SELECT id FROM records"),
    "comments dropped": ("-- totals\nSELECT id /* the key */ FROM records;", "SELECT id FROM records"),
    "median polars knows": ("SELECT median(amount) FROM records", "SELECT MEDIAN(amount) FROM records"),
    "a column named like a reader": ('SELECT "read_parquet" FROM records', 'SELECT "read_parquet" FROM records'),
}


@pytest.mark.parametrize(("sql", "rendered"), ACCEPTED.values(), ids=ACCEPTED.keys())
def test_a_query_over_records_passes_as_sqlglot_renders_it(sql, rendered):
    assert check_select(sql) == rendered


NOT_A_QUERY = "only a query may run (SELECT, WITH ... SELECT, UNION of SELECTs), not {}: nothing can be changed"
REFUSED = {
    "two statements": ("SELECT 1; SELECT 2", "only one statement may run, this holds 2"),
    "copy": ("COPY records TO 'out.csv'", NOT_A_QUERY.format("COPY")),
    "attach": ("ATTACH 'other.db'", NOT_A_QUERY.format("ATTACH")),
    "install": ("INSTALL httpfs", NOT_A_QUERY.format("INSTALL")),
    "load": ("LOAD httpfs", NOT_A_QUERY.format("LOAD")),
    "pragma": ("PRAGMA table_info('records')", NOT_A_QUERY.format("PRAGMA")),
    "set": ("SET threads = 64", NOT_A_QUERY.format("SET")),
    "create": ("CREATE TABLE t AS SELECT * FROM records", NOT_A_QUERY.format("CREATE")),
    "drop": ("DROP TABLE records", NOT_A_QUERY.format("DROP")),
    "insert": ("INSERT INTO records (id) VALUES (1)", NOT_A_QUERY.format("INSERT")),
    "delete": ("DELETE FROM records", NOT_A_QUERY.format("DELETE")),
    "update": ("UPDATE records SET amount = 0", NOT_A_QUERY.format("UPDATE")),
    "truncate": ("TRUNCATE records", NOT_A_QUERY.format("TRUNCATE")),
    "explain": ("EXPLAIN SELECT * FROM records", NOT_A_QUERY.format("EXPLAIN")),
    "show": ("SHOW TABLES", NOT_A_QUERY.format("SHOW")),
    "bare values": ("VALUES (1)", NOT_A_QUERY.format("VALUES")),
    "select into": ("SELECT * INTO copy FROM records", "SELECT ... INTO would create a table"),
    "read_parquet": ("SELECT * FROM read_parquet('/etc/passwd')", "read_parquet() reads files"),
    "read_csv_auto": ("SELECT * FROM read_csv_auto('s3://bucket/mirror/environment=other/x.csv')",
                      "read_csv_auto() reads files"),
    "scan_parquet": ("SELECT * FROM scan_parquet('x.parquet')", "scan_parquet() reads files"),
    "a reader in a subquery": ("SELECT id FROM records WHERE id IN (SELECT id FROM read_json('/x'))",
                               "read_json() reads files"),
    "a reader as a value": ("SELECT read_ndjson('/x') FROM records", "read_ndjson() reads files"),
    "a reader in a cte": ("WITH records AS (SELECT * FROM read_ipc('/x')) SELECT * FROM records",
                          "read_ipc() reads files"),
    "a quoted reader": ("SELECT * FROM \"read_parquet\"('/x')", "read_parquet() reads files"),
    "a file as a table": ("SELECT * FROM 'file.parquet'", "'file.parquet' looks like a file"),
    "a path as a table": ('SELECT * FROM records JOIN "/tmp/x" USING (id)', "'/tmp/x' looks like a file"),
    "another table": ("SELECT * FROM other_table", "unknown table other_table: the only table is records"),
    "a schema": ("SELECT * FROM main.records", "unknown table main.records"),
    "a cte out of nowhere": ("WITH t AS (SELECT 1) SELECT * FROM u", "unknown table u"),
    "another table function": ("SELECT * FROM generate_series(1, 10)",
                               "FROM and JOIN take records, a name defined by WITH or a subquery, not a table "
                               "function (exploding_generate_series)"),
    "unnest": ("SELECT * FROM unnest([1, 2])", "FROM and JOIN take records, a name defined by WITH or a subquery, "
                                               "not a table function (unnest)"),
    "values": ("SELECT * FROM records, (VALUES (1)) AS v(x)", "FROM and JOIN take records, a name defined by WITH "
                                                             "or a subquery, not VALUES"),
    "lateral": ("SELECT * FROM records LATERAL VIEW explode(x) t", "LATERAL is not supported"),
    "rows from": ("SELECT * FROM ROWS FROM (generate_series(1, 3))",
                  "FROM and JOIN take records, a name defined by WITH or a subquery, not ROWS FROM"),
    # sqlglot parses these but renders them without the clause (SELECT * FROM records): another query.
    "pivot": ("SELECT * FROM records PIVOT (sum(amount) FOR currency IN ('USD', 'EUR'))",
              "PIVOT is not supported: use GROUP BY with sum(CASE WHEN"),
    "unpivot": ("SELECT * FROM records UNPIVOT (amount FOR currency IN (usd, eur))",
                "UNPIVOT is not supported: select each column and combine them with UNION ALL"),
    "a clause the rendering would drop": ("SELECT first_value(amount IGNORE NULLS) OVER (ORDER BY id) FROM records",
                                          "this statement uses syntax that is not supported here (PostgreSQL does "
                                          "not support IGNORE NULLS): rewrite it without that clause"),
    "a line comment hiding a second statement": ("SELECT 1 FROM records -- note\n; DROP TABLE records",
                                                 "only one statement may run, this holds 2"),
    "a block comment before a second statement": ("SELECT 1 FROM records /* ; */ ; DELETE FROM records",
                                                  "only one statement may run, this holds 2"),
    "a comment hiding what it is": ("/* just a select */ DELETE FROM records", NOT_A_QUERY.format("DELETE")),
    "garbage": ("SELECT FROM WHERE )(", "the statement could not be parsed: "),
    "an unterminated string": ("SELECT 'a FROM records", "the statement could not be parsed: "),
    "empty": ("  ;  ", "the statement is empty"),
    "too deep": ("SELECT " + "(" * 3000 + "1" + ")" * 3000, "the statement is nested too deeply to parse"),
    "too long": ("SELECT " + ", ".join(["amount"] * 4000) + " FROM records",
                 "the statement is longer than 20,000 characters"),
}


@pytest.mark.parametrize(("sql", "reason"), REFUSED.values(), ids=REFUSED.keys())
def test_anything_else_is_refused_with_its_reason(sql, reason):
    with pytest.raises(SqlRefused) as refused:
        check_select(sql)
    assert refused.value.reason.startswith(reason), refused.value.reason
    assert str(refused.value) == refused.value.reason


def test_polars_alone_would_read_any_file_the_guard_refuses_it(tmp_path):
    """The reason the guard exists: polars' SQL reads files by itself, in a context holding only `records`."""
    pl = pytest.importorskip("polars")
    secret = tmp_path / "secret.parquet"
    pl.DataFrame({"secret": ["another environment's data"]}).write_parquet(secret)
    sql = f"SELECT * FROM records WHERE id IN (SELECT 1 FROM read_parquet('{secret}')) OR true"
    context = pl.SQLContext(frames={"records": pl.LazyFrame({"id": [1]})}, register_globals=False)
    assert context.execute(f"SELECT * FROM read_parquet('{secret}')", eager=True)["secret"].to_list() == [
        "another environment's data"]
    with pytest.raises(SqlRefused, match=r"read_parquet\(\) reads files"):
        check_select(sql)
    with pytest.raises(SqlRefused, match=r"read_parquet\(\) reads files"):
        check_select(f"SELECT * FROM read_parquet('{secret}')")


@pytest.mark.parametrize("sql", [
    "SELECT 'a\\' AS x FROM records",  # a backslash ends a standard string, for sqlglot and polars alike
    "SELECT 'it''s' AS x, $$dollar$$ AS y FROM records",
    "SELECT 1 /* /* nested */ read_parquet('/x') */ FROM records",
])
def test_what_runs_is_the_checked_tree_rendered_again(sql):
    """Quoting and comments are read by sqlglot, and polars gets sqlglot's rendering (no comments,
    standard quoting), read again by the guard: no text the two parsers could read differently."""
    rendered = check_select(sql)
    assert check_select(rendered) == rendered
    assert "/*" not in rendered and "$$" not in rendered and "read_parquet" not in rendered


def test_a_failure_inside_the_guard_is_a_refusal_the_model_can_act_on():
    refused = refusal_for(AttributeError("'NoneType' object has no attribute 'key'"))

    assert refused.reason.startswith(
        "could not check this statement: AttributeError ('NoneType' object has no attribute 'key'); write it "
        "more plainly"), refused.reason
    assert refusal_for(RecursionError()).reason == "the statement is nested too deeply to check"


ODD = [
    "SELECT * FROM ROWS FROM (generate_series(1,3))",
    "SELECT * FROM ROWS FROM (generate_series(1, 3), unnest(array[1])) AS t(a, b)",
    "SELECT * FROM records WHERE EXISTS (SELECT * FROM ROWS FROM (f()))",
    "SELECT * FROM ROWS FROM",
    "SELECT * FROM records r, LATERAL (SELECT r.id) x",
    "SELECT * FROM records r CROSS JOIN LATERAL generate_series(1, 2)",
    "SELECT * FROM records r LEFT JOIN LATERAL (SELECT 1) x ON true",
    "SELECT * FROM LATERAL",
    'SELECT "\u202e\u200b" FROM records',
    "SELECT '\U0001f600' FROM records",
    "ＳＥＬＥＣＴ 1",
    "SELECT \x00 FROM records",
    "SELECT \ud800 FROM records",
    "SELECT " + "(" * 200 + "1" + ")" * 200 + " FROM records",
    "(" * 300 + "SELECT 1 FROM records" + ")" * 300,
    "SELECT * FROM " + "(" * 100 + "records" + ")" * 100,
    "SELECT " + "(" * 50 + "1" + ")" * 49 + " FROM records",
    "", "   ", ";", ";;;", "-- only a comment", "/* only a comment */", "/* unterminated", "$$", "SELECT", "WITH",
    "SELECT * FROM records PIVOT", "SELECT * FROM records MATCH_RECOGNIZE (ORDER BY id)",
    "SELECT * FROM records CONNECT BY PRIOR id = id", "SELECT * FROM TABLE(records)", "SELECT * FROM @stage",
    "SELECT * FROM [records]", "SELECT a.id FROM records a, records b WHERE a.id = b.id(+)",
    "SELECT * FROM records QUALIFY row_number() OVER () = 1", "SELECT * FROM xmltable('/x' PASSING 1 COLUMNS a int)",
]


@pytest.mark.parametrize("sql", ODD)
def test_an_odd_statement_is_accepted_or_refused_never_another_error(sql):
    try:
        rendered = check_select(sql)
    except SqlRefused as refused:
        assert refused.reason
    else:
        assert isinstance(rendered, str)


FRAGMENTS = ["SELECT", "*", "FROM", "records", "ROWS", "LATERAL", "(", ")", ",", "WITH", "x", "AS", "JOIN", "ON",
             "PIVOT", "UNPIVOT", "FOR", "IN", "'a'", "1", "generate_series(1,2)", "unnest(x)", "VALUES", "UNION", "--",
             "/*", "*/", ";", "\u202e", "é", "\x00", "WHERE", "amount", "IGNORE NULLS", "OVER", "TABLE", "ORDER BY",
             '"', "$$", "::", "[", "]", "ONLY", "QUALIFY", "CROSS", "read_parquet('x')", "WITHIN GROUP", "CASE", "?"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=14))
def test_any_string_of_sql_fragments_is_accepted_or_refused_never_another_error(parts):
    try:
        check_select(" ".join(parts))
    except SqlRefused as refused:
        assert refused.reason
