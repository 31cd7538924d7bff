"""The StreamDB SQL dialect: every statement form round-trips (parse -> generate -> parse gives
an equal tree and the expected text), the trees have the shapes the planner reads, statements
split correctly, and syntax errors carry Postgres-style messages and positions."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from streamdb.errors import FeatureNotSupported, SyntaxErrorSQL
from streamdb.sql import ast
from streamdb.sql.parser import generate, parse_one, parse_statements
from tests.dialect_util import assert_round_trip

# (input, generated SQL, node type). One row per statement form.
ROUND_TRIPS: list[tuple[str, str, type[exp.Expr]]] = [
    # CREATE STREAM
    ("CREATE STREAM demo WITH (FORMAT = \"JSON\")", "CREATE STREAM demo WITH (format = 'JSON')", ast.CreateStream),
    ("create stream s", "CREATE STREAM s", ast.CreateStream),
    (
        "CREATE OR REPLACE EXTERNAL STREAM IF NOT EXISTS app.s (id STRING KEY, v DOUBLE, n INT NOT NULL)",
        "CREATE OR REPLACE EXTERNAL STREAM IF NOT EXISTS app.s (id TEXT KEY, v DOUBLE PRECISION, n INT NOT NULL)",
        ast.CreateStream,
    ),
    (
        "CREATE STREAM s (h BYTES HEADER('trace'), hs ARRAY<INT> HEADERS, b BOOLEAN, t TIMESTAMP, c VARCHAR(5), i BIGINT)",
        "CREATE STREAM s (h BYTEA HEADER('trace'), hs INT[] HEADERS, b BOOLEAN, t TIMESTAMP, c VARCHAR(5), i BIGINT)",
        ast.CreateStream,
    ),
    (
        "CREATE STREAM s (ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) "
        "WITH (kafka_topic='t', Partitions=3, properties.bootstrap.server = 'k:9092', compact = true, lag = -1)",
        "CREATE STREAM s (ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5 SECOND') "
        "WITH (kafka_topic = 't', partitions = 3, properties.bootstrap.server = 'k:9092', compact = TRUE, lag = -1)",
        ast.CreateStream,
    ),
    (
        "CREATE STREAM d WITH (format = json) AS SELECT * FROM s WHERE x > 1 EMIT CHANGES",
        "CREATE STREAM d WITH (format = 'json') AS SELECT * FROM s WHERE x > 1 EMIT CHANGES",
        ast.CreateStream,
    ),
    # ksqlDB's persistent queries: CREATE TABLE / MATERIALIZED VIEW ... AS <query> EMIT CHANGES
    (
        "CREATE TABLE t AS SELECT a, count(*) FROM s GROUP BY a EMIT CHANGES",
        "CREATE TABLE t AS SELECT a, COUNT(*) FROM s GROUP BY a EMIT CHANGES",
        exp.Create,
    ),
    ("CREATE MATERIALIZED VIEW v AS SELECT a FROM s EMIT CHANGES",
     "CREATE MATERIALIZED VIEW v AS SELECT a FROM s EMIT CHANGES", exp.Create),
    # DROP
    ("DROP STREAM IF EXISTS a, b CASCADE", "DROP STREAM IF EXISTS a, b CASCADE", exp.Drop),
    ("drop source src", "DROP SOURCE src", exp.Drop),
    ("DROP SINK snk RESTRICT", "DROP SINK snk RESTRICT", exp.Drop),
    ("DROP TABLE a, b", "DROP TABLE a, b", exp.Drop),
    ("DROP VIEW v", "DROP VIEW v", exp.Drop),
    ("DROP INDEX CONCURRENTLY IF EXISTS a, b CASCADE", "DROP INDEX IF EXISTS a, b CASCADE", exp.Drop),
    ("CREATE INDEX i ON t (a, b)", "CREATE INDEX i ON t(a, b)", exp.Create),
    ("create index if not exists on public.t using hash (a) include (c)",
     "CREATE INDEX IF NOT EXISTS ON public.t USING hash(a) INCLUDE (c)", exp.Create),
    ("DROP MATERIALIZED VIEW IF EXISTS mv", "DROP MATERIALIZED VIEW IF EXISTS mv", exp.Drop),
    # SHOW
    ("SHOW STREAMS", "SHOW STREAMS", ast.ShowObjects),
    ("show tables", "SHOW TABLES", ast.ShowObjects),
    ("SHOW ALL", "SHOW ALL", ast.ShowObjects),
    ("SHOW VIEWS", "SHOW VIEWS", ast.ShowObjects),
    ("SHOW MATERIALIZED VIEWS", "SHOW MATERIALIZED VIEWS", ast.ShowObjects),
    ("SHOW QUERIES", "SHOW QUERIES", ast.ShowObjects),
    ("SHOW SOURCES", "SHOW SOURCES", ast.ShowObjects),
    ("SHOW SINKS", "SHOW SINKS", ast.ShowObjects),
    ("SHOW CONNECTORS", "SHOW CONNECTORS", ast.ShowObjects),
    ("SHOW FUNCTIONS", "SHOW FUNCTIONS", ast.ShowObjects),
    # Python functions (an argument list in DROP FUNCTION is read and not kept: no overloading)
    ("CREATE OR REPLACE FUNCTION f(a INT, b TEXT) RETURNS INT LANGUAGE python STRICT AS $$ def f(a, b): return a $$",
     "CREATE OR REPLACE FUNCTION f(a INT, b TEXT) RETURNS INT LANGUAGE python STRICT AS $$ def f(a, b): return a $$",
     exp.Create),
    ("DROP FUNCTION IF EXISTS f(int), g CASCADE", "DROP FUNCTION IF EXISTS f, g CASCADE", exp.Drop),
    ("SHOW CREATE STREAM app.s", "SHOW CREATE STREAM app.s", ast.ShowCreate),
    ("SHOW CREATE MATERIALIZED VIEW mv", "SHOW CREATE MATERIALIZED VIEW mv", ast.ShowCreate),
    ("SHOW CREATE SINK k", "SHOW CREATE SINK k", ast.ShowCreate),
    ("SHOW search_path", "SHOW search_path", ast.ShowVariable),
    ("SHOW Server_Version", "SHOW server_version", ast.ShowVariable),
    ("SHOW TIME ZONE", "SHOW timezone", ast.ShowVariable),
    ("SHOW TRANSACTION ISOLATION LEVEL", "SHOW transaction_isolation", ast.ShowVariable),
    # SET / RESET
    ("SET search_path TO a, \"B\", 'c'", "SET search_path TO 'a, B, c'", ast.SetVariable),
    ("SET SESSION extra_float_digits = 3", "SET extra_float_digits TO '3'", ast.SetVariable),
    ("SET LOCAL statement_timeout = '5s'", "SET LOCAL statement_timeout TO '5s'", ast.SetVariable),
    ("SET datestyle = ISO, MDY", "SET datestyle TO 'iso, mdy'", ast.SetVariable),
    ("SET TIME ZONE 'UTC'", "SET timezone TO 'UTC'", ast.SetVariable),
    ("SET TIME ZONE LOCAL", "SET timezone TO DEFAULT", ast.SetVariable),
    ("SET TIME ZONE DEFAULT", "SET timezone TO DEFAULT", ast.SetVariable),
    ("SET application_name TO DEFAULT", "SET application_name TO DEFAULT", ast.SetVariable),
    ("SET NAMES 'UTF8'", "SET client_encoding TO 'UTF8'", ast.SetVariable),
    (
        "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED",
        "SET default_transaction_isolation TO 'read committed'",
        ast.SetVariable,
    ),
    ("SET TRANSACTION READ ONLY", "SET transaction_read_only TO 'on'", ast.SetVariable),
    ("RESET search_path", "RESET search_path", ast.SetVariable),
    ("RESET ALL", "RESET ALL", ast.SetVariable),
    ("RESET TIME ZONE", "RESET timezone", ast.SetVariable),
    # DESCRIBE / EXPLAIN / FLUSH
    ("DESCRIBE s", "DESCRIBE s", ast.DescribeRelation),
    ("DESCRIBE EXTENDED app.s", "DESCRIBE EXTENDED app.s", ast.DescribeRelation),
    ("DESC s", "DESCRIBE s", ast.DescribeRelation),
    ("EXPLAIN SELECT a FROM t", "EXPLAIN SELECT a FROM t", ast.ExplainStatement),
    ("EXPLAIN ANALYZE VERBOSE SELECT a FROM t", "EXPLAIN ANALYZE VERBOSE SELECT a FROM t", ast.ExplainStatement),
    ("EXPLAIN (ANALYZE, VERBOSE off) SELECT 1", "EXPLAIN ANALYZE SELECT 1", ast.ExplainStatement),
    ("EXPLAIN SELECT * FROM s EMIT CHANGES", "EXPLAIN SELECT * FROM s EMIT CHANGES", ast.ExplainStatement),
    ("EXPLAIN INSERT INTO t VALUES (1)", "EXPLAIN INSERT INTO t VALUES (1)", ast.ExplainStatement),
    ("FLUSH", "FLUSH", ast.Flush),
    ("flush app.s", "FLUSH app.s", ast.Flush),
    # SELECT STREAM / EMIT CHANGES
    ("SELECT STREAM * FROM s", "SELECT STREAM * FROM s", ast.SelectStream),
    ("select stream a, b + 1 AS c FROM s WHERE a > 0", "SELECT STREAM a, b + 1 AS c FROM s WHERE a > 0", ast.SelectStream),
    ("SELECT STREAM DISTINCT a FROM s", "SELECT STREAM DISTINCT a FROM s", ast.SelectStream),
    ("WITH w AS (SELECT 1 AS x) SELECT STREAM x FROM w", "WITH w AS (SELECT 1 AS x) SELECT STREAM x FROM w", ast.SelectStream),
    ("SELECT * FROM s EMIT CHANGES", "SELECT * FROM s EMIT CHANGES", ast.EmitChanges),
    ("SELECT a FROM s WHERE b = 1 EMIT CHANGES", "SELECT a FROM s WHERE b = 1 EMIT CHANGES", ast.EmitChanges),
    (
        "SELECT a, count(*) FROM s GROUP BY a EMIT CHANGES",
        "SELECT a, COUNT(*) FROM s GROUP BY a EMIT CHANGES",
        ast.EmitChanges,
    ),
    ("SELECT * FROM s EMIT CHANGES WITH (snapshot = false)", "SELECT * FROM s EMIT CHANGES WITH (snapshot = FALSE)",
     ast.EmitChanges),
    ("select a from s emit changes with (SNAPSHOT = true)", "SELECT a FROM s EMIT CHANGES WITH (snapshot = TRUE)",
     ast.EmitChanges),
    # Transactions
    ("BEGIN", "BEGIN", ast.TransactionControl),
    ("BEGIN WORK", "BEGIN", ast.TransactionControl),
    ("BEGIN TRANSACTION ISOLATION LEVEL SERIALIZABLE READ ONLY", "BEGIN", ast.TransactionControl),
    ("START TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ WRITE", "BEGIN", ast.TransactionControl),
    ("COMMIT", "COMMIT", ast.TransactionControl),
    ("COMMIT WORK", "COMMIT", ast.TransactionControl),
    ("END", "COMMIT", ast.TransactionControl),
    ("ROLLBACK", "ROLLBACK", ast.TransactionControl),
    ("ROLLBACK WORK", "ROLLBACK", ast.TransactionControl),
    ("ABORT", "ROLLBACK", ast.TransactionControl),
    # DISCARD / DEALLOCATE
    ("DISCARD ALL", "DISCARD ALL", ast.Discard),
    ("DISCARD PLANS", "DISCARD PLANS", ast.Discard),
    ("DISCARD SEQUENCES", "DISCARD SEQUENCES", ast.Discard),
    ("DISCARD TEMPORARY", "DISCARD TEMP", ast.Discard),
    ("DEALLOCATE stmt1", "DEALLOCATE stmt1", ast.Deallocate),
    ("DEALLOCATE PREPARE stmt1", "DEALLOCATE stmt1", ast.Deallocate),
    ("DEALLOCATE ALL", "DEALLOCATE ALL", ast.Deallocate),
    # COPY
    ("COPY t FROM STDIN", "COPY t FROM STDIN", ast.CopyStatement),
    (
        "COPY t (a, b) FROM STDIN WITH (FORMAT CSV, HEADER, DELIMITER ',', NULL '', QUOTE '\"', ESCAPE '\\')",
        "COPY t (a, b) FROM STDIN WITH (FORMAT csv, HEADER TRUE, DELIMITER ',', NULL '', QUOTE '\"', ESCAPE '\\')",
        ast.CopyStatement,
    ),
    ("COPY t FROM STDIN (format 'Text', header off)", "COPY t FROM STDIN WITH (FORMAT text, HEADER FALSE)", ast.CopyStatement),
    ("COPY t FROM STDIN WITH CSV HEADER", "COPY t FROM STDIN WITH (FORMAT csv, HEADER TRUE)", ast.CopyStatement),
    ("COPY t FROM STDIN DELIMITER ',' CSV", "COPY t FROM STDIN WITH (DELIMITER ',', FORMAT csv)", ast.CopyStatement),
    ("COPY t FROM STDIN WITH NULL AS 'x' BINARY", "COPY t FROM STDIN WITH (NULL 'x', FORMAT binary)", ast.CopyStatement),
    ("COPY t TO STDOUT", "COPY t TO STDOUT", ast.CopyStatement),
    (
        "COPY (SELECT a FROM t) TO STDOUT WITH (FORMAT csv, HEADER true)",
        "COPY (SELECT a FROM t) TO STDOUT WITH (FORMAT csv, HEADER TRUE)",
        ast.CopyStatement,
    ),
    ("COPY (SELECT * FROM s EMIT CHANGES) TO STDOUT", "COPY (SELECT * FROM s EMIT CHANGES) TO STDOUT", ast.CopyStatement),
    (
        "COPY (SELECT * FROM s EMIT CHANGES WITH (snapshot = false)) TO STDOUT",
        "COPY (SELECT * FROM s EMIT CHANGES WITH (snapshot = FALSE)) TO STDOUT",
        ast.CopyStatement,
    ),
    ("COPY t FROM '/tmp/t.csv' CSV", "COPY t FROM '/tmp/t.csv' WITH (FORMAT csv)", ast.CopyStatement),
    ("COPY t TO PROGRAM 'gzip'", "COPY t TO PROGRAM 'gzip'", ast.CopyStatement),
    # Standard Postgres statements keep sqlglot's nodes.
    (
        "CREATE TABLE t (id INT PRIMARY KEY, name TEXT NOT NULL DEFAULT 'x')",
        "CREATE TABLE t (id INT PRIMARY KEY, name TEXT NOT NULL DEFAULT 'x')",
        exp.Create,
    ),
    (
        "CREATE TABLE IF NOT EXISTS t (a BIGINT NOT NULL, b VARCHAR(10), PRIMARY KEY (a))",
        "CREATE TABLE IF NOT EXISTS t (a BIGINT NOT NULL, b VARCHAR(10), PRIMARY KEY (a))",
        exp.Create,
    ),
    ("CREATE TABLE t2 AS SELECT a FROM t", "CREATE TABLE t2 AS SELECT a FROM t", exp.Create),
    ("CREATE VIEW v AS SELECT a FROM t", "CREATE VIEW v AS SELECT a FROM t", exp.Create),
    ("CREATE MATERIALIZED VIEW mv AS SELECT a FROM t", "CREATE MATERIALIZED VIEW mv AS SELECT a FROM t", exp.Create),
    ("INSERT INTO t VALUES (1, 'a'), (2, 'b')", "INSERT INTO t VALUES (1, 'a'), (2, 'b')", exp.Insert),
    ("INSERT INTO t (a) SELECT a FROM u", "INSERT INTO t (a) SELECT a FROM u", exp.Insert),
    (
        "INSERT INTO t VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET v = excluded.v",
        "INSERT INTO t VALUES ($1, $2) ON CONFLICT(id) DO UPDATE SET v = excluded.v",
        exp.Insert,
    ),
    ("INSERT INTO s SELECT STREAM * FROM t", "INSERT INTO s SELECT STREAM * FROM t", exp.Insert),
    ("UPDATE t SET a = 1 WHERE b = $1", "UPDATE t SET a = 1 WHERE b = $1", exp.Update),
    ("DELETE FROM t WHERE a = 1", "DELETE FROM t WHERE a = 1", exp.Delete),
    ("VALUES (1, 2), (3, 4)", "VALUES (1, 2), (3, 4)", exp.Values),
    ("SELECT stream FROM t", "SELECT stream FROM t", exp.Select),
    ("SELECT stream, x FROM t", "SELECT stream, x FROM t", exp.Select),
    ("SELECT stream * 2 AS d FROM t", "SELECT stream * 2 AS d FROM t", exp.Select),
    ("SELECT stream + 1 FROM t", "SELECT stream + 1 FROM t", exp.Select),
    ("SELECT ROWTIME, $1::int FROM s", "SELECT ROWTIME, CAST($1 AS INT) FROM s", exp.Select),
    (
        "WITH c AS (SELECT a FROM t) SELECT a, SUM(b) OVER (PARTITION BY a ORDER BY c) FROM c JOIN u ON c.a = u.a GROUP BY a",
        "WITH c AS (SELECT a FROM t) SELECT a, SUM(b) OVER (PARTITION BY a ORDER BY c) FROM c JOIN u ON c.a = u.a GROUP BY a",
        exp.Select,
    ),
    (
        "SELECT * FROM TUMBLE(bids, date_time, INTERVAL '10' SECOND)",
        "SELECT * FROM TUMBLE(bids, date_time, INTERVAL '10 SECOND')",
        exp.Select,
    ),
    (
        "SELECT * FROM HOP(bids, date_time, INTERVAL '5' SECOND, INTERVAL '10' SECOND) AS h",
        "SELECT * FROM HOP(bids, date_time, INTERVAL '5 SECOND', INTERVAL '10 SECOND') AS h",
        exp.Select,
    ),
    (
        "SELECT * FROM SESSION(bids, date_time, INTERVAL '10' SECOND)",
        "SELECT * FROM SESSION(bids, date_time, INTERVAL '10 SECOND')",
        exp.Select,
    ),
    (
        "SELECT window_start, window_end, k, count(*) FROM session(ev, ts, INTERVAL '10' SECOND, k, j) AS s "
        "GROUP BY window_start, window_end, k",
        "SELECT window_start, window_end, k, COUNT(*) FROM SESSION(ev, ts, INTERVAL '10 SECOND', k, j) AS s "
        "GROUP BY window_start, window_end, k",
        exp.Select,
    ),
    ("SELECT session FROM t", "SELECT session FROM t", exp.Select),
    (
        # psql 15's \d foo
        "SELECT c.oid, n.nspname, c.relname FROM pg_catalog.pg_class c "
        "LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relname OPERATOR(pg_catalog.~) '^(foo)$' COLLATE pg_catalog.default "
        "AND pg_catalog.pg_table_is_visible(c.oid) ORDER BY 2, 3;",
        "SELECT c.oid, n.nspname, c.relname FROM pg_catalog.pg_class AS c "
        "LEFT JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace "
        "WHERE c.relname ~ '^(foo)$' COLLATE pg_catalog.default "
        "AND pg_catalog.pg_table_is_visible(c.oid) ORDER BY 2, 3",
        exp.Select,
    ),
]


@pytest.mark.parametrize(("sql", "expected", "node_type"), ROUND_TRIPS, ids=[r[0][:60] for r in ROUND_TRIPS])
def test_round_trip(sql: str, expected: str, node_type: type[exp.Expr]) -> None:
    assert_round_trip(sql, expected, node_type)


# ---- shapes the planner reads ---------------------------------------------------------------


def test_create_stream_shape() -> None:
    tree = parse_one(
        "CREATE OR REPLACE EXTERNAL STREAM IF NOT EXISTS app.s (id STRING KEY, h BYTES HEADER('k'), "
        "ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) "
        "WITH (FORMAT = \"JSON\", Partitions = 3, properties.bootstrap.server = 'k:9092', compact = true, lag = -1)"
    )
    assert isinstance(tree, ast.CreateStream)
    assert tree.args["replace"] and tree.args["external"] and tree.args["exists"]
    assert isinstance(tree.this, exp.Table) and tree.this.name == "s" and tree.this.db == "app"

    id_col, header_col, ts_col = tree.args["columns"]
    assert id_col.name == "id" and id_col.args["kind"].this == exp.DType.TEXT
    (id_role,) = id_col.args["constraints"]
    assert isinstance(id_role.kind, ast.StreamColumnRole) and id_role.kind.this == "KEY"
    header_role = header_col.args["constraints"][0].kind
    assert header_role.this == "HEADER" and header_role.expression == exp.Literal.string("k")
    assert ts_col.args["kind"].this == exp.DType.TIMESTAMP

    watermark = tree.args["watermark"]
    assert isinstance(watermark, ast.StreamWatermark) and watermark.this.name == "ts"
    assert isinstance(watermark.expression, exp.Sub)

    props = {p.this.name: p.args["value"] for p in tree.args["properties"]}
    assert all(isinstance(p.this, exp.Var) for p in tree.args["properties"])
    assert props == {
        "format": exp.Literal.string("JSON"),
        "partitions": exp.Literal.number(3),
        "properties.bootstrap.server": exp.Literal.string("k:9092"),
        "compact": exp.true(),
        "lag": exp.Literal(this="-1", is_string=False),
    }


def test_create_stream_without_columns_or_options() -> None:
    tree = parse_one("CREATE STREAM s")
    assert isinstance(tree, ast.CreateStream)
    assert tree.args.get("columns") is None and tree.args.get("properties") is None


def test_create_stream_as_select() -> None:
    tree = parse_one("CREATE STREAM d AS SELECT STREAM * FROM s")
    assert isinstance(tree, ast.CreateStream)
    assert isinstance(tree.expression, ast.SelectStream)


def test_drop_shape() -> None:
    tree = parse_one("DROP STREAM IF EXISTS a, app.b CASCADE")
    assert isinstance(tree, exp.Drop)
    assert tree.kind == "STREAM" and tree.args["exists"] and tree.args["cascade"]
    assert [t.name for t in tree.args["tables"]] == ["a", "b"]
    # sqlglot's own representation of MATERIALIZED: kind VIEW plus a flag.
    mv = parse_one("DROP MATERIALIZED VIEW mv")
    assert isinstance(mv, exp.Drop)
    assert mv.kind == "VIEW" and mv.args["materialized"] is True


def test_show_shapes() -> None:
    assert parse_one("SHOW MATERIALIZED VIEWS") == ast.ShowObjects(this="MATERIALIZED VIEWS")
    assert parse_one("SHOW ALL") == ast.ShowObjects(this="ALL")
    create = parse_one("SHOW CREATE MATERIALIZED VIEW app.mv")
    assert isinstance(create, ast.ShowCreate)
    assert create.args["kind"] == "MATERIALIZED VIEW" and create.this.name == "mv"
    assert parse_one("SHOW TIME ZONE").this == "timezone"
    assert parse_one("SHOW TRANSACTION ISOLATION LEVEL").this == "transaction_isolation"
    assert parse_one("SHOW streams_count").this == "streams_count"


@pytest.mark.parametrize(
    ("sql", "name", "value", "local", "reset"),
    [
        ("SET search_path TO a, b", "search_path", "a, b", None, None),
        ("SET search_path = 'a', \"B\"", "search_path", "a, B", None, None),
        ("SET extra_float_digits = 3", "extra_float_digits", "3", None, None),
        ("SET x = -1.5", "x", "-1.5", None, None),
        ("SET LOCAL myapp.flag = on", "myapp.flag", "on", True, None),
        ("SET TIME ZONE 'America/New_York'", "timezone", "America/New_York", None, None),
        ("SET TIME ZONE LOCAL", "timezone", None, None, None),
        ("SET TIME ZONE INTERVAL '-08:00' HOUR TO MINUTE", "timezone", "-08:00", None, None),
        ("SET application_name TO DEFAULT", "application_name", None, None, None),
        ("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", "transaction_isolation", "serializable", None, None),
        ("RESET ALL", "all", None, None, True),
        ("RESET statement_timeout", "statement_timeout", None, None, True),
    ],
)
def test_set_variable_shape(sql: str, name: str, value: str | None, local: bool | None, reset: bool | None) -> None:
    tree = parse_one(sql)
    assert isinstance(tree, ast.SetVariable)
    assert tree.this == name
    assert tree.args.get("expression") == value
    assert tree.args.get("local") == local
    assert tree.args.get("reset") == reset


def test_set_several_transaction_modes_is_not_supported() -> None:
    with pytest.raises(FeatureNotSupported):
        parse_one("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ ONLY")


@pytest.mark.parametrize(
    ("sql", "kind", "name", "generated"),
    [
        ('SAVEPOINT "_pg3_1"', "SAVEPOINT", "_pg3_1", 'SAVEPOINT "_pg3_1"'),
        ("RELEASE SAVEPOINT s", "RELEASE", "s", "RELEASE s"),
        ("RELEASE s", "RELEASE", "s", "RELEASE s"),
        ("ROLLBACK TO SAVEPOINT s", "ROLLBACK TO", "s", "ROLLBACK TO s"),
        ("ROLLBACK WORK TO s", "ROLLBACK TO", "s", "ROLLBACK TO s"),
    ],
)
def test_savepoints_round_trip(sql: str, kind: str, name: str, generated: str) -> None:
    tree = parse_one(sql)
    assert isinstance(tree, ast.TransactionControl)
    assert tree.this == kind and tree.args["expression"].name == name
    assert generate(tree) == generated
    assert parse_one(generated) == tree


def test_select_stream_wraps_the_plain_select() -> None:
    tree = parse_one("SELECT STREAM a FROM s WHERE a > 1")
    assert isinstance(tree, ast.SelectStream)
    assert tree.this == parse_one("SELECT a FROM s WHERE a > 1")
    # A column named stream stays an ordinary select.
    plain = parse_one("SELECT stream FROM t")
    assert isinstance(plain, exp.Select) and plain.expressions[0].name == "stream"
    assert isinstance(parse_one('SELECT "stream" AS x FROM t'), exp.Select)


def test_emit_changes_wraps_the_query() -> None:
    tree = parse_one("SELECT a FROM s EMIT CHANGES")
    assert isinstance(tree, ast.EmitChanges)
    assert tree.this == parse_one("SELECT a FROM s")
    assert tree.this.args["from_"].this.alias == ""  # EMIT is not taken as a table alias
    copy = parse_one("COPY (SELECT * FROM s EMIT CHANGES) TO STDOUT")
    assert isinstance(copy, ast.CopyStatement) and isinstance(copy.this, ast.EmitChanges)
    declared = parse_one("DECLARE c CURSOR FOR SELECT a FROM s EMIT CHANGES WITH (snapshot = false)")
    assert isinstance(declared, ast.DeclareCursor) and isinstance(declared.expression, ast.EmitChanges)
    assert [p.name for p in declared.expression.args["properties"]] == ["snapshot"]


def test_explain_shape() -> None:
    tree = parse_one("EXPLAIN ANALYZE SELECT STREAM * FROM s")
    assert isinstance(tree, ast.ExplainStatement)
    assert tree.args["analyze"] and not tree.args.get("verbose")
    assert isinstance(tree.this, ast.SelectStream)


def test_describe_and_flush_shapes() -> None:
    described = parse_one("DESCRIBE EXTENDED app.s")
    assert isinstance(described, ast.DescribeRelation)
    assert described.args["extended"] and described.this.name == "s"
    assert parse_one("FLUSH").args.get("this") is None
    assert parse_one("FLUSH s").this.name == "s"


def test_transaction_discard_deallocate_shapes() -> None:
    assert parse_one("START TRANSACTION") == ast.TransactionControl(this="BEGIN")
    assert parse_one("END WORK") == ast.TransactionControl(this="COMMIT")
    assert parse_one("ABORT") == ast.TransactionControl(this="ROLLBACK")
    assert parse_one("DISCARD TEMP") == ast.Discard(this="TEMP")
    assert parse_one("DEALLOCATE ALL").args["all"] is True
    dealloc = parse_one("DEALLOCATE PREPARE s1")
    assert isinstance(dealloc, ast.Deallocate) and dealloc.this.name == "s1"


def _copy_options(tree: exp.Expr) -> dict[str, exp.Expr]:
    assert isinstance(tree, ast.CopyStatement)
    options = tree.args.get("properties") or []
    assert all(isinstance(o.this, exp.Var) for o in options)
    return {o.this.name: o.args["value"] for o in options}


def test_copy_shapes() -> None:
    tree = parse_one("COPY app.t (a, b) FROM STDIN WITH (FORMAT CSV, HEADER, DELIMITER E'\\t', NULL '')")
    assert isinstance(tree, ast.CopyStatement)
    assert tree.args["direction"] == "FROM" and tree.args.get("target") is None
    assert isinstance(tree.this, exp.Table) and tree.this.name == "t"
    assert [c.name for c in tree.args["columns"]] == ["a", "b"]
    assert _copy_options(tree) == {
        "format": exp.Literal.string("csv"),
        "header": exp.true(),
        "delimiter": exp.Literal.string("\t"),
        "null": exp.Literal.string(""),
    }
    legacy = parse_one("COPY t FROM STDIN WITH CSV HEADER")
    assert _copy_options(legacy) == {"format": exp.Literal.string("csv"), "header": exp.true()}
    out = parse_one("COPY (SELECT 1) TO STDOUT")
    assert isinstance(out, ast.CopyStatement)
    assert out.args["direction"] == "TO" and isinstance(out.this, exp.Select)
    to_file = parse_one("COPY t TO '/tmp/out.csv'")
    assert to_file.args["target"] == exp.Literal.string("/tmp/out.csv")


def test_operator_syntax_maps_to_the_bare_operator_node() -> None:
    tree = parse_one("SELECT 1 FROM t WHERE a OPERATOR(pg_catalog.~) '^x' AND b OPERATOR(pg_catalog.!~*) 'y'")
    assert tree == parse_one("SELECT 1 FROM t WHERE a ~ '^x' AND b !~* 'y'")
    assert tree.find(exp.RegexpLike) is not None


def test_window_table_functions_parse_in_from() -> None:
    tree = parse_one("SELECT * FROM TUMBLE(bids, date_time, INTERVAL '10' SECOND)")
    source = tree.args["from_"].this
    assert isinstance(source, exp.Table) and isinstance(source.this, exp.Anonymous)
    assert source.this.name.upper() == "TUMBLE" and len(source.this.expressions) == 3
    # SESSION is a keyword to sqlglot; followed by `(` in FROM it is the session window function.
    tree = parse_one("SELECT * FROM SESSION(ev, ts, INTERVAL '10' SECOND, k) AS s")
    source = tree.args["from_"].this
    assert isinstance(source, exp.Table) and isinstance(source.this, exp.Anonymous)
    assert source.this.name.upper() == "SESSION" and len(source.this.expressions) == 4
    assert source.alias == "s"
    # ... and SET SESSION / SHOW SESSION AUTHORIZATION keep their meaning.
    assert generate(parse_one("SET SESSION timezone = 'UTC'")) == "SET timezone TO 'UTC'"
    assert generate(parse_one("SHOW SESSION AUTHORIZATION")) == "SHOW session_authorization"


def test_read_streamdb_is_registered() -> None:
    tree = sqlglot.parse_one("SELECT STREAM * FROM s EMIT CHANGES", read="streamdb")
    assert isinstance(tree, ast.EmitChanges) and isinstance(tree.this, ast.SelectStream)
    assert tree.sql(dialect="streamdb") == "SELECT STREAM * FROM s EMIT CHANGES"


# ---- splitting -----------------------------------------------------------------------------


def test_split_offsets_and_text() -> None:
    text = "  SELECT 1 ; /* c */ SELECT $$a;b$$ -- t\n; INSERT INTO t VALUES ('x;y', \"q;\");"
    statements = parse_statements(text)
    assert [(s.offset, s.sql) for s in statements] == [
        (2, "SELECT 1"),
        (21, "SELECT $$a;b$$"),
        (43, "INSERT INTO t VALUES ('x;y', \"q;\")"),
    ]
    for s in statements:
        assert text[s.offset : s.offset + len(s.sql)] == s.sql


@pytest.mark.parametrize("text", ["", "   ", ";", ";;", " -- only a comment", "/* a */ ; -- b\n;"])
def test_empty_statements_are_dropped(text: str) -> None:
    assert parse_statements(text) == []


def test_several_statements() -> None:
    kinds = [type(s.ast) for s in parse_statements("BEGIN;; SELECT 1; COMMIT")]
    assert kinds == [ast.TransactionControl, exp.Select, ast.TransactionControl]


# ---- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message", "position"),
    [
        ("SELEC 1", 'syntax error at or near "SELEC"', 1),
        ("SELECT 1; SELEC 2", 'syntax error at or near "SELEC"', 11),
        ("FOO BAR", 'syntax error at or near "FOO"', 1),
        ("1 + 2", 'syntax error at or near "1"', 1),
        ("SELECT (1", "syntax error at end of input", 10),
        ("SELECT * FROM", "syntax error at end of input", 14),
        ("SELECT (1; SELECT 2", 'syntax error at or near ";"', 10),
        ("SELECT 1 FROM t WHERE a = 1 AND )", 'syntax error at or near ")"', 33),
        ("SELECT 'ü' FROM t WHERE )", 'syntax error at or near ")"', 25),
        ("DROP FOO x", 'syntax error at or near "FOO"', 6),
        ("CREATE FOO x", 'syntax error at or near "FOO"', 8),
        ("LOCK TABLE t", 'syntax error at or near "LOCK"', 1),
        ("PREPARE p AS SELECT 1", 'syntax error at or near "PREPARE"', 1),
        ("VACUUM", 'syntax error at or near "VACUUM"', 1),
        ("USE db", 'syntax error at or near "USE"', 1),
        ("ALTER SYSTEM SET x = 1", 'syntax error at or near "SYSTEM"', 7),
        ("COMMIT AND CHAIN", 'syntax error at or near "AND"', 8),
        ("SET x", "syntax error at end of input", 6),
        ("SHOW", "syntax error at end of input", 5),
        ("CREATE TABLE t (a INT) EMIT CHANGES", 'syntax error at or near "EMIT"', 24),
        ("CREATE STREAM s (a INT) WITH (k 1)", 'syntax error at or near "1"', 33),
        ("CREATE STREAM s (a INT, WATERMARK FOR a AS a, WATERMARK FOR a AS a)", 'syntax error at or near "WATERMARK"', 47),
        ("COPY (SELECT 1) FROM STDIN", 'syntax error at or near "FROM"', 17),
        ("COPY t FROM STDIN WITH (FORMAT csv", "syntax error at end of input", 35),
        ("COPY t FROM STDIN WITH (FORMAT csv,)", 'syntax error at or near ")"', 36),
        ("SELECT 1;\nSELECT 'abc", "unterminated quoted string at or near \"'abc\"", 18),
        ('SELECT "abc', 'unterminated quoted identifier at or near ""abc"', 8),
        ("SELECT $$abc", 'unterminated dollar-quoted string at or near "$$abc"', 8),
        ("SELECT 1 /* x", 'unterminated /* comment at or near "/* x"', 10),
    ],
)
def test_syntax_error_positions(text: str, message: str, position: int) -> None:
    with pytest.raises(SyntaxErrorSQL) as caught:
        parse_statements(text)
    assert caught.value.message == message
    assert caught.value.position == position
    assert caught.value.sqlstate == "42601"


def test_unsupported_syntax_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(SyntaxErrorSQL):
        parse_statements("LOCK TABLE t")
    with pytest.raises(SyntaxErrorSQL):
        parse_statements("CREATE FOO x")
    assert "unsupported syntax" not in caplog.text


def test_append_only_table_round_trip() -> None:
    tree = parse_one("CREATE TABLE t (v1 INT, v2 INT) APPEND ONLY")
    generated = generate(tree)
    assert generated == "CREATE TABLE t (v1 INT, v2 INT) WITH (append_only=TRUE)"
    again = parse_one(generated)
    props = {p.name: p.args["value"] for p in again.args["properties"].expressions}
    assert "append_only" in props


@pytest.mark.parametrize(
    ("sql", "generated"),
    [
        ("SUBSCRIBE TO counts", "SUBSCRIBE TO counts"),
        ("SUBSCRIBE counts WITH (snapshot = false)", "SUBSCRIBE TO counts WITH (snapshot = FALSE)"),
        ("SUBSCRIBE (SELECT a FROM t WHERE a > 1)", "SUBSCRIBE TO (SELECT a FROM t WHERE a > 1)"),
        ("DECLARE c CURSOR FOR SUBSCRIBE TO counts", "DECLARE c CURSOR FOR SUBSCRIBE TO counts"),
        ("DECLARE c CURSOR FOR SELECT 1", "DECLARE c CURSOR FOR SELECT 1"),
        ("DECLARE c CURSOR FOR SELECT a FROM s EMIT CHANGES", "DECLARE c CURSOR FOR SELECT a FROM s EMIT CHANGES"),
        (
            "DECLARE c CURSOR FOR SELECT a FROM s EMIT CHANGES WITH (snapshot = false)",
            "DECLARE c CURSOR FOR SELECT a FROM s EMIT CHANGES WITH (snapshot = FALSE)",
        ),
        ("FETCH 100 c WITH (timeout = '1s')", "FETCH 100 c WITH (timeout = '1s')"),
        ("FETCH ALL FROM c", "FETCH ALL c"),
        ("FETCH c", "FETCH c"),
        ("CLOSE c", "CLOSE c"),
        ("CLOSE ALL", "CLOSE ALL"),
    ],
)
def test_subscribe_and_cursor_round_trip(sql: str, generated: str) -> None:
    tree = parse_one(sql)
    assert generate(tree) == generated
    assert parse_one(generated) == tree


def test_watermarked_append_only_table_is_a_stream() -> None:
    sql = "create table t (tm timestamp, foo int, watermark for tm as tm - interval '5 minutes') append only"
    tree = parse_one(sql)
    assert isinstance(tree, ast.CreateStream) and tree.args.get("table")
    generated = generate(tree)
    assert generated.startswith("CREATE TABLE t (tm TIMESTAMP, foo INT, WATERMARK FOR tm AS tm - ")
    assert generated.endswith("APPEND ONLY")
    assert parse_one(generated) == tree
    # Without a watermark it stays an ordinary table.
    assert isinstance(parse_one("CREATE TABLE u (a INT, PRIMARY KEY (a))"), exp.Create)


@pytest.mark.parametrize("sql, expected", [
    ("SELECT $1,$2", "SELECT $1, $2"),
    ("INSERT INTO t VALUES ($1,$2),($3,$4)", "INSERT INTO t VALUES ($1, $2), ($3, $4)"),
    ("SELECT '$1,$2' AS x, $1", "SELECT '$1,$2' AS x, $1"),
    ("SELECT $$a$1,$$, $1", "SELECT 'a$1,', $1"),
    ("SELECT $tag$x$1,$tag$,$1", "SELECT 'x$1,', $1"),
    ("SELECT E'\\'$1,$2', $1", "SELECT e'''$1,$2', $1"),
    ("SELECT \"$1,$2\" FROM t WHERE a = $1 -- $1,$2\n", "SELECT \"$1,$2\" FROM t WHERE a = $1 /* $1,$2 */"),
    ("SELECT $1::int,$2", "SELECT CAST($1 AS INT), $2"),
])
def test_parameters_directly_followed_by_another_token(sql, expected):
    """psycopg writes `(%s,%s)` as `($1,$2)`: not a dollar-quoted string tagged `1,`."""
    from streamdb.sql.parser import parse_statements

    [statement] = parse_statements(sql)
    assert statement.ast.sql(dialect="postgres") == expected
    assert statement.sql == sql.split(" --")[0].rstrip()


def test_positions_after_separated_parameters():
    from streamdb.sql.parser import parse_statements

    with pytest.raises(SyntaxErrorSQL) as e:
        parse_statements("SELECT $1,$2 FROM t WHERE")
    assert e.value.position is not None and e.value.position <= len("SELECT $1,$2 FROM t WHERE") + 1
    statements = parse_statements("SELECT $1,$2; SELECT $1,$2")
    assert [(s.sql, s.offset) for s in statements] == [("SELECT $1,$2", 0), ("SELECT $1,$2", 14)]


def test_regexp_extract_keeps_its_group_through_the_dialect():
    """Plans are printed in this dialect and read back: regexp_extract's third argument is the
    group (as DuckDB and Spark take it), not a position."""
    node = parse_one("SELECT regexp_extract(s, '(a)(b)', 2) FROM t").find(exp.RegexpExtract)
    assert node is not None and node.args["group"].this == "2"
    assert node.sql(dialect="spark") == "REGEXP_EXTRACT(s, '(a)(b)', 2)"
    assert node.sql(dialect="duckdb") == "REGEXP_EXTRACT(s, '(a)(b)', 2)"
    assert generate(parse_one("SELECT regexp_extract(s, '(a)(b)', 2) FROM t")) == \
        "SELECT REGEXP_EXTRACT(s, '(a)(b)', 2) FROM t"


def test_every_word_statement_reaches_its_parser_as_a_word() -> None:
    # A statement word the tokenizer keeps as a command would swallow the statement into one
    # string (sqlglot 30.31 did this to SAVEPOINT and RELEASE).
    from streamdb.sql.dialect import WORD_STATEMENTS, StreamDB

    assert set(StreamDB.Parser.WORD_STATEMENT_PARSERS) == WORD_STATEMENTS
    assert not WORD_STATEMENTS & set(StreamDB.Tokenizer.KEYWORDS)
