"""The guard of the agents' `sql` tool: one read-only query over the table `records`, checked by a
real SQL parser (sqlglot, PostgreSQL syntax) before polars' SQL ever sees it.

polars' SQL reads files on its own (`SELECT * FROM read_parquet('/any/path')` runs in a context
holding nothing but `records`), so it is not trusted to refuse anything. What runs is not the
caller's text but sqlglot's rendering of the tree that was checked (without comments), checked
again once rendered: a statement that the two parsers would read differently (comments, quoting,
escapes) runs as sqlglot read it or not at all. A statement that sqlglot parses but cannot render
faithfully (PIVOT, IGNORE NULLS: rendered, they would silently drop the clause and answer another
query) is refused, and so is one the guard fails on in any other way: it answers SqlRefused only.

Pure: sqlglot is imported on the first check, not with the module, so that functions which never
run a query do not pay for its import (~0.1 s).
"""
from __future__ import annotations

import logging
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlglot import exp

TABLE = "records"
MAX_SQL_CHARS = 20_000  # a query an agent writes is a few hundred characters; the parser is Python
FILE_FUNCTIONS = ("read_", "scan_")  # polars' (read_parquet, read_csv, read_ipc, read_json) and DuckDB's
# Statements that are not queries, named in the refusal even when sqlglot cannot parse them (ATTACH).
NOT_QUERIES = frozenset({"ALTER", "ATTACH", "BEGIN", "CALL", "CHECKPOINT", "COMMIT", "COPY", "CREATE", "DELETE",
                         "DESCRIBE", "DETACH", "DROP", "EXPLAIN", "EXPORT", "GRANT", "IMPORT", "INSERT", "INSTALL",
                         "LOAD", "MERGE", "PRAGMA", "RESET", "ROLLBACK", "SET", "SHOW", "TRUNCATE", "UPDATE", "USE",
                         "VACUUM"})
FILE_SUFFIXES = (".parquet", ".csv", ".json", ".ndjson", ".ipc", ".arrow", ".feather", ".avro", ".xlsx", ".txt")


class SqlRefused(Exception):
    """The statement will not run; the reason is meant for the model that wrote it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def check_select(sql: str) -> str:
    """The statement to run for `sql` (sqlglot's rendering of it), or SqlRefused saying why not;
    never another exception: what the guard cannot check does not run."""
    try:
        return _check_select(sql)
    except SqlRefused:
        raise
    except Exception as error:  # noqa: BLE001 - a statement the guard cannot check is refused, never run
        raise refusal_for(error) from None


def refusal_for(error: Exception) -> SqlRefused:
    """What the model is told when the guard itself failed on a statement (sqlglot's trees hold
    surprises): the failure, and a plainer shape to try."""
    if isinstance(error, RecursionError):
        return SqlRefused("the statement is nested too deeply to check")
    detail = f" ({_first_line(str(error))[:200]})" if str(error).strip() else ""
    return SqlRefused(f"could not check this statement: {type(error).__name__}{detail}; "
                      f"write it more plainly (SELECT ... FROM {TABLE} with WHERE, JOIN, GROUP BY)")


def _check_select(sql: str) -> str:
    if not isinstance(sql, str):
        raise SqlRefused("the statement must be text")
    if len(sql) > MAX_SQL_CHARS:
        raise SqlRefused(f"the statement is longer than {MAX_SQL_CHARS:,} characters")
    tree = _one_query(sql)
    _check_tree(tree)
    rendered = _render(tree)
    _check_tree(_one_query(rendered))  # what polars will be given, read again
    return rendered


def _render(tree: exp.Query) -> str:
    """sqlglot's rendering of `tree`, or SqlRefused when it would leave something out: by default
    sqlglot only logs what it cannot write, and renders the statement without it."""
    from sqlglot.errors import ErrorLevel, UnsupportedError

    try:
        rendered: str = tree.sql(dialect=_dialect(), comments=False, unsupported_level=ErrorLevel.RAISE)
    except UnsupportedError as error:
        said = dict.fromkeys(line.strip().rstrip(".") for line in str(error).splitlines() if line.strip())
        raise SqlRefused(f"this statement uses syntax that is not supported here ({'; '.join(said)[:300]}): "
                         "rewrite it without that clause") from None
    return rendered


def _one_query(sql: str) -> exp.Query:
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    logging.getLogger("sqlglot").setLevel(logging.ERROR)  # its "falling back to a Command" warnings
    try:
        statements = [s for s in _dialect().parse(sql) if s is not None]
    except SqlglotError as error:
        if _kind(sql) in NOT_QUERIES:
            raise SqlRefused(_not_a_query(sql)) from None
        raise SqlRefused(f"the statement could not be parsed: {_first_line(str(error))}") from None
    except RecursionError:
        raise SqlRefused("the statement is nested too deeply to parse") from None
    if not statements:
        raise SqlRefused("the statement is empty: send one SELECT")
    if len(statements) > 1:
        raise SqlRefused(f"only one statement may run, this holds {len(statements)}")
    statement = statements[0]
    if not isinstance(statement, exp.Query):
        raise SqlRefused(_not_a_query(sql))
    return statement


def _not_a_query(sql: str) -> str:
    return (f"only a query may run (SELECT, WITH ... SELECT, UNION of SELECTs), not {_kind(sql)}: "
            "nothing can be changed, loaded, attached or set")


def _check_tree(tree: exp.Query) -> None:
    from sqlglot import exp

    defined = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    for node in tree.walk():
        if isinstance(node, exp.Func) and _function_name(node).lower().startswith(FILE_FUNCTIONS):
            raise SqlRefused(f"{_function_name(node).lower()}() reads files: only the table {TABLE} can be queried")
        if isinstance(node, exp.From | exp.Join) and not isinstance(node.this, exp.Table | exp.Subquery):
            raise SqlRefused(_not_a_source(node.this))
        if isinstance(node, exp.Lateral):
            raise SqlRefused("LATERAL is not supported: use a subquery or a join")
        if isinstance(node, exp.Pivot):
            raise SqlRefused("UNPIVOT is not supported: select each column and combine them with UNION ALL"
                             if node.args.get("unpivot") else
                             "PIVOT is not supported: use GROUP BY with sum(CASE WHEN ... THEN ... END) per value")
        if isinstance(node, exp.Select) and node.args.get("into"):
            raise SqlRefused("SELECT ... INTO would create a table: nothing can be changed")
        if isinstance(node, exp.Table):
            _check_table(node, defined)


def _check_table(table: exp.Table, defined: set[str]) -> None:
    from sqlglot import exp

    if table.args.get("rows_from"):
        raise SqlRefused(_not_a_source(None, "ROWS FROM"))
    if not isinstance(table.this, exp.Identifier):
        raise SqlRefused(_not_a_source(table.this))
    name = table.name
    if table.args.get("db") or table.args.get("catalog"):
        raise SqlRefused(f"unknown table {table.sql()}: the only table is {TABLE}, without a schema")
    if "/" in name or "\\" in name or name.lower().endswith(FILE_SUFFIXES):
        raise SqlRefused(f"'{name}' looks like a file: only the table {TABLE} can be queried")
    if name.lower() == TABLE and TABLE not in defined:
        table.set("this", exp.to_identifier(TABLE))  # "RECORDS", "Records" or quoted: the one table
    elif name.lower() not in defined:
        raise SqlRefused(f"unknown table {name}: the only table is {TABLE} (and names defined by WITH)")


def _not_a_source(node: exp.Expression | None, what: str = "") -> str:
    from sqlglot import exp

    if isinstance(node, exp.Func):
        name = _function_name(node).lower()
        if name.startswith(FILE_FUNCTIONS):
            return f"{name}() reads files: only the table {TABLE} can be queried"
        what = f"a table function ({name})"
    elif isinstance(node, exp.Expression):
        what = node.key.upper()
    else:
        what = what or "this"
    return f"FROM and JOIN take {TABLE}, a name defined by WITH or a subquery, not {what}"


def _function_name(node: exp.Func) -> str:
    from sqlglot import exp

    return node.name if isinstance(node, exp.Anonymous) else node.sql_name()


def _kind(sql: str) -> str:
    """The statement's first keyword, as the model wrote it (comments skipped)."""
    try:
        tokens = _dialect().tokenize(sql)
    except Exception:  # noqa: BLE001 - only for the message
        return "this statement"
    return tokens[0].text.upper() if tokens else "this statement"


def _first_line(message: str) -> str:
    line = message.strip().splitlines()[0] if message.strip() else "syntax error"
    return line.replace("\x1b[4m", "").replace("\x1b[0m", "")[:300]  # sqlglot underlines the token with ANSI


@cache
def _dialect() -> Any:
    """PostgreSQL's syntax, written so that polars reads it: polars knows MEDIAN() but not
    PERCENTILE_CONT ... WITHIN GROUP, which is how sqlglot's PostgreSQL writes a median."""
    from sqlglot import exp
    from sqlglot.dialects.postgres import Postgres
    from sqlglot.generators.postgres import PostgresGenerator

    class PolarsSqlGenerator(PostgresGenerator):
        TRANSFORMS = {**PostgresGenerator.TRANSFORMS,
                      exp.Median: lambda self, node: self.func("MEDIAN", node.this)}

    class PolarsSql(Postgres):  # registered in sqlglot's dialects as "polarssql"
        Generator = PolarsSqlGenerator

    return PolarsSql()
