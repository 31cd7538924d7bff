"""Connector, source and sink statements in the StreamDB dialect: every form round-trips (parse ->
generate -> parse gives an equal tree and the expected text), the trees have the shapes the
planner will read, and malformed statements are Postgres-style syntax errors with positions."""

from __future__ import annotations

import pytest
from sqlglot import exp

from streamdb.errors import SyntaxErrorSQL
from streamdb.sql import ast
from streamdb.sql.parser import generate, parse_one, parse_statements
from tests.dialect_util import assert_round_trip

# (input, generated SQL, node type). One row per statement form.
ROUND_TRIPS: list[tuple[str, str, type[exp.Expr]]] = [
    # CREATE SOURCE CONNECTOR / CREATE SINK CONNECTOR
    (
        "CREATE SOURCE CONNECTOR kafka1 KAFKA WITH (bootstrap_servers = 'broker:9092')",
        "CREATE SOURCE CONNECTOR kafka1 KAFKA WITH (bootstrap_servers = 'broker:9092')",
        ast.CreateConnector,
    ),
    (
        "create source connector if not exists k kafka with (bootstrap_servers='h:1', security.protocol=SASL_SSL)",
        "CREATE SOURCE CONNECTOR IF NOT EXISTS k KAFKA WITH (bootstrap_servers = 'h:1', security.protocol = 'SASL_SSL')",
        ast.CreateConnector,
    ),
    (
        "CREATE SOURCE CONNECTOR files FILE WITH (path = '/data/in/*.json')",
        "CREATE SOURCE CONNECTOR files FILE WITH (path = '/data/in/*.json')",
        ast.CreateConnector,
    ),
    (
        "CREATE SINK CONNECTOR out KAFKA WITH (bootstrap_servers = 'h:9092')",
        "CREATE SINK CONNECTOR out KAFKA WITH (bootstrap_servers = 'h:9092')",
        ast.CreateConnector,
    ),
    (
        "CREATE SINK CONNECTOR IF NOT EXISTS pg POSTGRES WITH (url = 'postgres://u@h/db', password = 'hunter2')",
        "CREATE SINK CONNECTOR IF NOT EXISTS pg POSTGRES WITH (url = 'postgres://u@h/db', password = 'hunter2')",
        ast.CreateConnector,
    ),
    (
        "CREATE SOURCE CONNECTOR IF NOT EXISTS sensors MQTT WITH (broker = 'tcp://h:1883', topic = 'a/+/t', qos = 1)",
        "CREATE SOURCE CONNECTOR IF NOT EXISTS sensors MQTT WITH (broker = 'tcp://h:1883', topic = 'a/+/t', qos = 1)",
        ast.CreateConnector,
    ),
    (
        "CREATE SOURCE CONNECTOR shop POSTGRES WITH (dsn = 'postgresql://u@h/db')",
        "CREATE SOURCE CONNECTOR shop POSTGRES WITH (dsn = 'postgresql://u@h/db')",
        ast.CreateConnector,
    ),
    (
        'CREATE SINK CONNECTOR "Files" FILE WITH (path = \'/tmp/out\')',
        'CREATE SINK CONNECTOR "Files" FILE WITH (path = \'/tmp/out\')',
        ast.CreateConnector,
    ),
    # CREATE SINK: our form (INTO a connector) and RisingWave's (connector in the options)
    (
        "CREATE SINK s FROM app.counts INTO out WITH (topic = 'counts', format = 'JSON')",
        "CREATE SINK s FROM app.counts INTO out WITH (topic = 'counts', format = 'JSON')",
        ast.CreateSink,
    ),
    ("CREATE SINK IF NOT EXISTS s FROM t INTO pg", "CREATE SINK IF NOT EXISTS s FROM t INTO pg", ast.CreateSink),
    (
        "create sink nexmark_bid FROM bid WITH (connector = 'kafka', topic = 'nexmark-bid') "
        "FORMAT PLAIN ENCODE JSON (force_append_only='true')",
        "CREATE SINK nexmark_bid FROM bid WITH (connector = 'kafka', topic = 'nexmark-bid') "
        "FORMAT PLAIN ENCODE JSON (force_append_only = 'true')",
        ast.CreateSink,
    ),
    (
        "CREATE SINK s FROM t WITH (connector = 'kafka', primary_key = 'id') FORMAT UPSERT ENCODE JSON",
        "CREATE SINK s FROM t WITH (connector = 'kafka', primary_key = 'id') FORMAT UPSERT ENCODE JSON",
        ast.CreateSink,
    ),
    (
        "CREATE SINK nexmark_q0 AS SELECT auction, bidder, price, date_time FROM bid "
        "WITH ( connector = 'blackhole', type = 'append-only', force_append_only = 'true')",
        "CREATE SINK nexmark_q0 AS SELECT auction, bidder, price, date_time FROM bid "
        "WITH (connector = 'blackhole', type = 'append-only', force_append_only = 'true')",
        ast.CreateSink,
    ),
    (
        "CREATE SINK s AS SELECT a FROM t WHERE a > 1 INTO out WITH (topic = 't')",
        "CREATE SINK s AS SELECT a FROM t WHERE a > 1 INTO out WITH (topic = 't')",
        ast.CreateSink,
    ),
    # RisingWave's CREATE SOURCE
    (
        "CREATE SOURCE IF NOT EXISTS person (id BIGINT, name VARCHAR, PRIMARY KEY (id)) INCLUDE key AS k "
        "WITH (connector = 'kafka', topic = 'person', properties.bootstrap.server = 'k:9092', "
        "scan.startup.mode = 'earliest') FORMAT PLAIN ENCODE JSON",
        "CREATE SOURCE IF NOT EXISTS person (id BIGINT, name VARCHAR, PRIMARY KEY (id)) INCLUDE KEY AS k "
        "WITH (connector = 'kafka', topic = 'person', properties.bootstrap.server = 'k:9092', "
        "scan.startup.mode = 'earliest') FORMAT PLAIN ENCODE JSON",
        ast.CreateSource,
    ),
    (
        "CREATE SOURCE s (a INT, b TEXT) WITH (connector = 'kafka', topic = 't') "
        "FORMAT PLAIN ENCODE CSV (without_header = 'true', delimiter = ',')",
        "CREATE SOURCE s (a INT, b TEXT) WITH (connector = 'kafka', topic = 't') "
        "FORMAT PLAIN ENCODE CSV (without_header = 'true', delimiter = ',')",
        ast.CreateSource,
    ),
    (
        "CREATE SOURCE s (id INT PRIMARY KEY, v TEXT) WITH (connector = 'kafka') FORMAT UPSERT ENCODE JSON",
        "CREATE SOURCE s (id INT PRIMARY KEY, v TEXT) WITH (connector = 'kafka') FORMAT UPSERT ENCODE JSON",
        ast.CreateSource,
    ),
    (
        "CREATE SOURCE s WITH (connector = 'kafka') FORMAT PLAIN ENCODE AVRO (schema.registry = 'http://r:8081')",
        "CREATE SOURCE s WITH (connector = 'kafka') FORMAT PLAIN ENCODE AVRO (schema.registry = 'http://r:8081')",
        ast.CreateSource,
    ),
    (
        "CREATE SOURCE raw (payload BYTEA) WITH (connector = 'kafka') FORMAT PLAIN ENCODE BYTES",
        "CREATE SOURCE raw (payload BYTEA) WITH (connector = 'kafka') FORMAT PLAIN ENCODE BYTES",
        ast.CreateSource,
    ),
    (
        "CREATE SOURCE s (a INT,) INCLUDE header 'trace' varchar AS tr INCLUDE offset AS o INCLUDE partition "
        "WITH (connector = 'kafka')",
        "CREATE SOURCE s (a INT) INCLUDE HEADER 'trace' VARCHAR AS tr INCLUDE OFFSET AS o INCLUDE PARTITION "
        "WITH (connector = 'kafka')",
        ast.CreateSource,
    ),
    (
        "CREATE SOURCE s (ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '4' SECOND) WITH (connector = 'datagen')",
        "CREATE SOURCE s (ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '4 SECOND') WITH (connector = 'datagen')",
        ast.CreateSource,
    ),
    # A source or sink may be called connector.
    ("CREATE SOURCE connector (a INT) WITH (x = 1)", "CREATE SOURCE connector (a INT) WITH (x = 1)", ast.CreateSource),
    ("CREATE SINK connector FROM t WITH (x = 1)", "CREATE SINK connector FROM t WITH (x = 1)", ast.CreateSink),
    # DROP
    ("DROP SOURCE CONNECTOR k", "DROP SOURCE CONNECTOR k", ast.DropConnector),
    ("drop source connector if exists k cascade", "DROP SOURCE CONNECTOR IF EXISTS k CASCADE", ast.DropConnector),
    ("DROP SINK CONNECTOR IF EXISTS a, b RESTRICT", "DROP SINK CONNECTOR IF EXISTS a, b RESTRICT", ast.DropConnector),
    ("DROP CONNECTOR k", "DROP CONNECTOR k", ast.DropConnector),
    ("DROP CONNECTOR IF EXISTS k CASCADE", "DROP CONNECTOR IF EXISTS k CASCADE", ast.DropConnector),
    ("DROP SINK IF EXISTS s", "DROP SINK IF EXISTS s", exp.Drop),
    ("DROP SOURCE IF EXISTS s CASCADE", "DROP SOURCE IF EXISTS s CASCADE", exp.Drop),
    ("DROP SOURCE connector", "DROP SOURCE connector", exp.Drop),
    ("DROP SINK connector CASCADE", "DROP SINK connector CASCADE", exp.Drop),
    # SHOW
    ("SHOW CONNECTORS", "SHOW CONNECTORS", ast.ShowObjects),
    ("show sources", "SHOW SOURCES", ast.ShowObjects),
    ("SHOW SINKS", "SHOW SINKS", ast.ShowObjects),
    # ksqlDB-style external streams (issue 7): already CreateStream.
    (
        "CREATE EXTERNAL STREAM students (id STRING KEY, score INT) WITH (connector = 'name', "
        "kafka_topic = 'students_topic', value_format = 'JSON', partitions = 4)",
        "CREATE EXTERNAL STREAM students (id TEXT KEY, score INT) WITH (connector = 'name', "
        "kafka_topic = 'students_topic', value_format = 'JSON', partitions = 4)",
        ast.CreateStream,
    ),
    (
        "CREATE EXTERNAL STREAM ev (id STRING KEY, hs ARRAY<STRUCT<key STRING, value BYTES>> HEADERS, "
        "tr BYTES HEADER('trace'), v INT) WITH (connector = 'k', kafka_topic = 'ev')",
        "CREATE EXTERNAL STREAM ev (id TEXT KEY, hs STRUCT<key TEXT, value BYTEA>[] HEADERS, "
        "tr BYTEA HEADER('trace'), v INT) WITH (connector = 'k', kafka_topic = 'ev')",
        ast.CreateStream,
    ),
]


@pytest.mark.parametrize(("sql", "expected", "node_type"), ROUND_TRIPS, ids=[r[0][:70] for r in ROUND_TRIPS])
def test_round_trip(sql: str, expected: str, node_type: type[exp.Expr]) -> None:
    assert_round_trip(sql, expected, node_type)


def _props(node: exp.Expr, key: str = "properties") -> dict[str, exp.Expr]:
    properties = node.args.get(key) or []
    assert all(isinstance(p, exp.Property) and isinstance(p.this, exp.Var) for p in properties)
    return {p.this.name: p.args["value"] for p in properties}


# ---- shapes the planner reads ---------------------------------------------------------------


def test_create_connector_shape() -> None:
    tree = parse_one("CREATE SOURCE CONNECTOR IF NOT EXISTS Kafka1 KAFKA WITH (Bootstrap_Servers = 'h:9092')")
    assert isinstance(tree, ast.CreateConnector)
    assert isinstance(tree.this, exp.Identifier) and tree.this.name == "Kafka1" and not tree.this.quoted
    assert tree.args["direction"] == "source" and tree.args["kind"] == "KAFKA" and tree.args["exists"] is True
    assert _props(tree) == {"bootstrap_servers": exp.Literal.string("h:9092")}

    files = parse_one("CREATE SOURCE CONNECTOR files FILE WITH (path = '/in')")
    assert isinstance(files, ast.CreateConnector)
    assert files.this.name == "files" and files.args["kind"] == "FILE" and files.args.get("exists") is None

    for kind in ("KAFKA", "POSTGRES", "FILE"):
        sink = parse_one(f"create sink connector c {kind.lower()} with (a = 1)")
        assert isinstance(sink, ast.CreateConnector)
        assert sink.args["direction"] == "sink" and sink.args["kind"] == kind


def test_option_values() -> None:
    tree = parse_one(
        "CREATE SINK CONNECTOR c POSTGRES WITH (s = 'x', e = E'a\\tb', n = 42, f = -2.5, t = true, "
        "no = FALSE, z = NULL, word = append, q = \"JSON\", password = 'hunter2', k.a.b = 'dotted')"
    )
    assert _props(tree) == {
        "s": exp.Literal.string("x"),
        "e": exp.Literal.string("a\tb"),
        "n": exp.Literal.number(42),
        "f": exp.Literal(this="-2.5", is_string=False),
        "t": exp.true(),
        "no": exp.false(),
        "z": exp.null(),
        "word": exp.Literal.string("append"),
        "q": exp.Literal.string("JSON"),
        "password": exp.Literal.string("hunter2"),  # secrets are ordinary values to the parser
        "k.a.b": exp.Literal.string("dotted"),
    }
    assert parse_one(generate(tree)) == tree


def test_quoted_option_names_round_trip() -> None:
    tree = parse_one("CREATE SOURCE CONNECTOR c KAFKA WITH (\"Odd Name\".x = 'it''s')")
    assert _props(tree) == {"odd name.x": exp.Literal.string("it's")}
    generated = generate(tree)
    assert generated == "CREATE SOURCE CONNECTOR c KAFKA WITH (\"odd name\".x = 'it''s')"
    assert parse_one(generated) == tree


def test_create_source_shape() -> None:
    tree = parse_one(
        "CREATE SOURCE IF NOT EXISTS app.person (id BIGINT, tags VARCHAR[], h BYTES HEADERS, PRIMARY KEY (id)) "
        "INCLUDE key AS k INCLUDE header 'trace' varchar AS tr INCLUDE timestamp "
        "WITH (connector = 'kafka', topic = 'person', properties.bootstrap.server = 'k:9092', "
        "scan.startup.mode = 'earliest') FORMAT PLAIN ENCODE CSV (without_header = 'true', delimiter = ',')"
    )
    assert isinstance(tree, ast.CreateSource)
    assert tree.args["exists"] is True
    assert isinstance(tree.this, exp.Table) and tree.this.name == "person" and tree.this.db == "app"

    id_col, tags_col, h_col = tree.args["columns"]
    assert all(isinstance(c, exp.ColumnDef) for c in tree.args["columns"])
    assert id_col.name == "id" and id_col.args["kind"].this == exp.DType.BIGINT
    assert tags_col.args["kind"].this == exp.DType.ARRAY
    assert h_col.args["constraints"][0].kind == ast.StreamColumnRole(this="HEADERS")

    primary_key = tree.args["primary_key"]
    assert isinstance(primary_key, exp.PrimaryKey) and [e.name for e in primary_key.expressions] == ["id"]

    key, header, timestamp = tree.args["includes"]
    assert all(isinstance(i, ast.SourceInclude) for i in tree.args["includes"])
    assert key.this == "KEY" and key.args["alias"].name == "k" and key.args.get("expression") is None
    assert header.this == "HEADER" and header.expression == exp.Literal.string("trace")
    assert header.args["kind"].this == exp.DType.VARCHAR and header.args["alias"].name == "tr"
    assert timestamp.this == "TIMESTAMP" and timestamp.args.get("alias") is None

    assert _props(tree) == {
        "connector": exp.Literal.string("kafka"),
        "topic": exp.Literal.string("person"),
        "properties.bootstrap.server": exp.Literal.string("k:9092"),
        "scan.startup.mode": exp.Literal.string("earliest"),
    }
    assert tree.args["format"] == "PLAIN" and tree.args["encode"] == "CSV"
    assert _props(tree, "encode_properties") == {
        "without_header": exp.Literal.string("true"),
        "delimiter": exp.Literal.string(","),
    }


@pytest.mark.parametrize(
    ("clause", "format_", "encode"),
    [
        ("FORMAT PLAIN ENCODE JSON", "PLAIN", "JSON"),
        ("format upsert encode json", "UPSERT", "JSON"),
        ("FORMAT PLAIN ENCODE AVRO (schema.registry = 'http://r:8081')", "PLAIN", "AVRO"),
        ("FORMAT PLAIN ENCODE BYTES", "PLAIN", "BYTES"),
        ("FORMAT DEBEZIUM ENCODE JSON", "DEBEZIUM", "JSON"),
        ("", None, None),
    ],
)
def test_source_format_and_encode(clause: str, format_: str | None, encode: str | None) -> None:
    tree = parse_one(f"CREATE SOURCE s (a INT) WITH (connector = 'kafka') {clause}")
    assert isinstance(tree, ast.CreateSource)
    assert tree.args.get("format") == format_ and tree.args.get("encode") == encode
    assert parse_one(generate(tree)) == tree


def test_avro_encode_properties_keep_dotted_names() -> None:
    tree = parse_one("CREATE SOURCE s WITH (connector = 'kafka') FORMAT PLAIN ENCODE AVRO (schema.registry = 'http://r')")
    assert isinstance(tree, ast.CreateSource) and tree.args.get("columns") is None
    assert _props(tree, "encode_properties") == {"schema.registry": exp.Literal.string("http://r")}


def test_create_sink_into_connector_shape() -> None:
    tree = parse_one("CREATE SINK IF NOT EXISTS s FROM app.counts INTO out WITH (topic = 'counts', format = 'JSON')")
    assert isinstance(tree, ast.CreateSink)
    assert isinstance(tree.this, exp.Table) and tree.this.name == "s"
    source = tree.args["source"]
    assert isinstance(source, exp.Table) and source.name == "counts" and source.db == "app"
    connector = tree.args["connector"]
    assert isinstance(connector, exp.Identifier) and connector.name == "out"
    assert tree.args["exists"] is True and tree.args.get("expression") is None
    assert _props(tree) == {"topic": exp.Literal.string("counts"), "format": exp.Literal.string("JSON")}
    assert tree.args.get("format") is None and tree.args.get("encode") is None


def test_create_sink_risingwave_shapes() -> None:
    tree = parse_one(
        "CREATE SINK s FROM bid WITH (connector = 'kafka', topic = 'b') FORMAT PLAIN ENCODE JSON (force_append_only='true')"
    )
    assert isinstance(tree, ast.CreateSink)
    assert tree.args["source"].name == "bid" and tree.args.get("connector") is None
    assert _props(tree)["connector"] == exp.Literal.string("kafka")
    assert tree.args["format"] == "PLAIN" and tree.args["encode"] == "JSON"
    assert _props(tree, "encode_properties") == {"force_append_only": exp.Literal.string("true")}

    query_sink = parse_one("CREATE SINK q AS SELECT a, COUNT(*) AS n FROM t GROUP BY a WITH (connector = 'blackhole')")
    assert isinstance(query_sink, ast.CreateSink) and query_sink.args.get("source") is None
    assert query_sink.expression == parse_one("SELECT a, COUNT(*) AS n FROM t GROUP BY a")
    # The sink's WITH is not taken as a table hint of the query's last table.
    assert not list(query_sink.expression.find_all(exp.WithTableHint))
    assert _props(query_sink) == {"connector": exp.Literal.string("blackhole")}


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM a JOIN b ON a.x = b.x",
        "WITH c AS (SELECT 1 AS x) SELECT * FROM c",
        "SELECT a FROM (SELECT a FROM t) AS sub",
        "SELECT * FROM TUMBLE(bid, date_time, INTERVAL '10 SECOND')",
        "SELECT window_start, COUNT(*) FROM TUMBLE(bid, date_time, INTERVAL '10 SECOND') "
        "GROUP BY window_start EMIT ON WINDOW CLOSE",
    ],
)
def test_create_sink_as_query_round_trip(query: str) -> None:
    sql = f"CREATE SINK s AS {query} WITH (connector = 'blackhole')"
    tree = parse_one(sql)
    assert isinstance(tree, ast.CreateSink) and tree.expression is not None
    assert generate(tree) == sql
    assert parse_one(sql) == tree


def test_drop_connector_shapes() -> None:
    tree = parse_one("DROP SOURCE CONNECTOR IF EXISTS a, b CASCADE")
    assert isinstance(tree, ast.DropConnector) and isinstance(tree, exp.Drop)
    assert tree.kind == "CONNECTOR" and tree.args["direction"] == "source"
    assert tree.args["exists"] is True and tree.args["cascade"] is True
    assert all(isinstance(t, exp.Table) for t in tree.args["tables"])
    assert [t.name for t in tree.args["tables"]] == ["a", "b"]

    sink = parse_one("DROP SINK CONNECTOR k")
    assert isinstance(sink, ast.DropConnector) and sink.args["direction"] == "sink"
    plain = parse_one("DROP CONNECTOR k")
    assert isinstance(plain, ast.DropConnector) and plain.args.get("direction") is None
    assert plain.kind == "CONNECTOR" and plain.args.get("exists") is None
    # Different qualifiers are different statements.
    assert plain != sink and parse_one("DROP SOURCE CONNECTOR k") != sink

    for kind in ("SINK", "SOURCE"):
        drop = parse_one(f"DROP {kind} IF EXISTS x CASCADE")
        assert type(drop) is exp.Drop and drop.kind == kind
        assert drop.args["exists"] is True and drop.args["cascade"] is True
        assert [t.name for t in drop.args["tables"]] == ["x"]


def test_show_shapes() -> None:
    assert parse_one("SHOW CONNECTORS") == ast.ShowObjects(this="CONNECTORS")
    assert parse_one("SHOW SOURCES") == ast.ShowObjects(this="SOURCES")
    assert parse_one("SHOW SINKS") == ast.ShowObjects(this="SINKS")


def test_external_stream_shape() -> None:
    tree = parse_one(
        "CREATE EXTERNAL STREAM students (id STRING KEY, hs BYTES HEADERS, tr BYTES HEADER('trace'), score INT) "
        "WITH (connector = 'name', kafka_topic = 'students_topic', value_format = 'JSON', partitions = 4);"
    )
    assert isinstance(tree, ast.CreateStream) and tree.args["external"] is True
    roles = [c.args.get("constraints") for c in tree.args["columns"]]
    assert roles[0][0].kind == ast.StreamColumnRole(this="KEY")
    assert roles[1][0].kind == ast.StreamColumnRole(this="HEADERS")
    assert roles[2][0].kind == ast.StreamColumnRole(this="HEADER", expression=exp.Literal.string("trace"))
    assert roles[3] is None
    assert tree.args["columns"][0].args["kind"].this == exp.DType.TEXT
    assert _props(tree) == {
        "connector": exp.Literal.string("name"),
        "kafka_topic": exp.Literal.string("students_topic"),
        "value_format": exp.Literal.string("JSON"),
        "partitions": exp.Literal.number(4),
    }


def test_whole_set_through_parse_statements() -> None:
    text = ";\n".join(sql for sql, _, _ in ROUND_TRIPS) + ";"
    statements = parse_statements(text)
    assert [type(s.ast) for s in statements] == [node_type for _, _, node_type in ROUND_TRIPS]
    for statement, (sql, _, _) in zip(statements, ROUND_TRIPS, strict=True):
        assert statement.sql == sql
        assert text[statement.offset : statement.offset + len(statement.sql)] == sql
        assert statement.ast == parse_one(sql)


def test_explain_wraps_the_new_statements() -> None:
    tree = parse_one("EXPLAIN CREATE SINK sink_t FROM t WITH (connector = 'kafka', type = 'append-only')")
    assert isinstance(tree, ast.ExplainStatement) and isinstance(tree.this, ast.CreateSink)


def test_table_hints_outside_sinks_are_unchanged() -> None:
    # The sink-only handling of `WITH (` after a table does not leak into ordinary queries.
    assert parse_one("SELECT * FROM t WITH (nolock)").find(exp.WithTableHint) is not None


# ---- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message", "position"),
    [
        # Connectors
        ("CREATE SOURCE CONNECTOR x WITH (a = 1)", 'syntax error at or near "WITH"', 27),
        ("CREATE SOURCE CONNECTOR x REDIS WITH (a = 1)", 'syntax error at or near "REDIS"', 27),
        ("CREATE SINK CONNECTOR x KAFKA", "syntax error at end of input", 30),
        ("CREATE SINK CONNECTOR x KAFKA (a = 1)", 'syntax error at or near "("', 31),
        ("CREATE SINK CONNECTOR x KAFKA WITH (a 1)", 'syntax error at or near "1"', 39),
        ("CREATE SINK CONNECTOR x KAFKA WITH ()", 'syntax error at or near ")"', 37),
        ("CREATE SINK CONNECTOR x KAFKA WITH (a = 1", "syntax error at end of input", 42),
        ("CREATE SINK CONNECTOR IF EXISTS x KAFKA WITH (a = 1)", 'syntax error at or near "EXISTS"', 26),
        ("CREATE OR REPLACE SOURCE CONNECTOR x KAFKA WITH (a = 1)", 'syntax error at or near "SOURCE"', 19),
        ("CREATE EXTERNAL SINK s FROM t WITH (a = 1)", 'syntax error at or near "SINK"', 17),
        # Sinks
        ("CREATE SINK s FROM INTO k", 'syntax error at or near "INTO"', 20),
        ("CREATE SINK s FROM t", "syntax error at end of input", 21),
        ("CREATE SINK s FROM t INTO WITH (a = 1)", 'syntax error at or near "WITH"', 27),
        ("CREATE SINK s TO t", 'syntax error at or near "TO"', 15),
        ("CREATE SINK s AS", "syntax error at end of input", 17),
        ("CREATE SINK s; SELECT 1", 'syntax error at or near ";"', 14),
        # Sources
        ("CREATE SOURCE s (a INT)", "syntax error at end of input", 24),
        ("CREATE SOURCE s (a INT) FORMAT PLAIN ENCODE JSON", 'syntax error at or near "FORMAT"', 25),
        ("CREATE SOURCE s (a INT) WITH (x = 1) FORMAT PLAIN", "syntax error at end of input", 50),
        ("CREATE SOURCE s (a INT) WITH (x = 1) FORMAT PLAIN ENCODE XML", 'syntax error at or near "XML"', 58),
        ("CREATE SOURCE s (a INT) WITH (x = 1) FORMAT FANCY ENCODE JSON", 'syntax error at or near "FANCY"', 45),
        ("CREATE SOURCE s (a INT) WITH (x = 1) ENCODE JSON", 'syntax error at or near "ENCODE"', 38),
        ("CREATE SOURCE s (a INT) INCLUDE foo WITH (x = 1)", 'syntax error at or near "foo"', 33),
        ("CREATE SOURCE s (a INT) INCLUDE key AS WITH (x = 1)", 'syntax error at or near "WITH"', 40),
        ("CREATE SOURCE s (a INT, PRIMARY KEY (a), PRIMARY KEY (a)) WITH (x = 1)", 'syntax error at or near "PRIMARY KEY"', 42),
        ("CREATE SOURCE s () WITH (x = 1)", 'syntax error at or near ")"', 18),
        # Drops
        ("DROP CONNECTOR", "syntax error at end of input", 15),
        ("DROP CONNECTOR a.b", 'syntax error at or near "."', 17),
        ("DROP SOURCE CONNECTOR IF EXISTS", "syntax error at end of input", 32),
        ("DROP SINK CONNECTOR k j", 'syntax error at or near "j"', 23),
        # Streams keep their own grammar: no PRIMARY KEY element, no trailing comma.
        ("CREATE STREAM s (a INT, PRIMARY KEY (a))", 'syntax error at or near "PRIMARY KEY"', 25),
        ("CREATE STREAM s (a INT,)", 'syntax error at or near ")"', 24),
    ],
)
def test_syntax_error_positions(text: str, message: str, position: int) -> None:
    with pytest.raises(SyntaxErrorSQL) as caught:
        parse_statements(text)
    assert caught.value.message == message
    assert caught.value.position == position
    assert caught.value.sqlstate == "42601"


@pytest.mark.parametrize("sql", ["SHOW CREATE CONNECTOR c", "SHOW CREATE SOURCE CONNECTOR c",
                                 "SHOW CREATE SINK CONNECTOR c", "SHOW CREATE SINK s"])
def test_show_create_connector_round_trip(sql):
    from streamdb.sql.parser import generate, parse_one

    tree = parse_one(sql)
    assert generate(tree) == sql
    assert parse_one(generate(tree)) == tree
