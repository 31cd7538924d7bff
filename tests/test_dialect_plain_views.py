"""Round trips of the plain view statements (CREATE [OR REPLACE] VIEW and the statements that name
views), in tests/test_dialect.py's style."""

from __future__ import annotations

import pytest
from sqlglot import exp

from streamdb.sql import ast
from streamdb.sql.parser import parse_one
from tests.dialect_util import assert_round_trip

ROUND_TRIPS = [
    ("create view v as select a from t where a > 1", "CREATE VIEW v AS SELECT a FROM t WHERE a > 1", exp.Create),
    ("CREATE OR REPLACE VIEW v AS SELECT a, b FROM t", "CREATE OR REPLACE VIEW v AS SELECT a, b FROM t", exp.Create),
    ("CREATE VIEW IF NOT EXISTS v AS SELECT 1 AS x", "CREATE VIEW IF NOT EXISTS v AS SELECT 1 AS x", exp.Create),
    ("CREATE VIEW v (x, y) AS SELECT a, b FROM t", "CREATE VIEW v (x, y) AS SELECT a, b FROM t", exp.Create),
    ("CREATE VIEW public.v AS SELECT * FROM w UNION ALL SELECT * FROM u",
     "CREATE VIEW public.v AS SELECT * FROM w UNION ALL SELECT * FROM u", exp.Create),
    ("CREATE VIEW v AS WITH x AS (SELECT 1 AS a) SELECT a FROM x",
     "CREATE VIEW v AS WITH x AS (SELECT 1 AS a) SELECT a FROM x", exp.Create),
    ("DROP VIEW IF EXISTS v, w CASCADE", "DROP VIEW IF EXISTS v, w CASCADE", exp.Drop),
    ("SHOW VIEWS", "SHOW VIEWS", ast.ShowObjects),
    ("SHOW CREATE VIEW v", "SHOW CREATE VIEW v", ast.ShowCreate),
    ("DESCRIBE v", "DESCRIBE v", ast.DescribeRelation),
    ("SELECT * FROM v EMIT CHANGES", "SELECT * FROM v EMIT CHANGES", ast.EmitChanges),
    # ALTER ... RENAME TO, every relation kind (other ALTERs stay sqlglot's)
    ("alter view v rename to w", "ALTER VIEW v RENAME TO w", ast.RenameRelation),
    ("ALTER MATERIALIZED VIEW IF EXISTS public.v RENAME TO w", "ALTER MATERIALIZED VIEW IF EXISTS public.v RENAME TO w",
     ast.RenameRelation),
    ("ALTER TABLE t RENAME TO \"T2\"", "ALTER TABLE t RENAME TO \"T2\"", ast.RenameRelation),
    ("ALTER STREAM s RENAME TO s2", "ALTER STREAM s RENAME TO s2", ast.RenameRelation),
    ("ALTER TABLE t ADD COLUMN x INT", "ALTER TABLE t ADD COLUMN x INT", exp.Alter),
    ("CREATE OR REPLACE MATERIALIZED VIEW v AS SELECT a, count(*) AS n FROM t GROUP BY a",
     "CREATE OR REPLACE MATERIALIZED VIEW v AS SELECT a, COUNT(*) AS n FROM t GROUP BY a", exp.Create),
]


@pytest.mark.parametrize(("sql", "expected", "node_type"), ROUND_TRIPS, ids=[r[0][:60] for r in ROUND_TRIPS])
def test_round_trip(sql: str, expected: str, node_type: type[exp.Expr]) -> None:
    assert_round_trip(sql, expected, node_type)


def test_create_view_shape() -> None:
    """What planner/create_plain_view.py reads: kind VIEW without MATERIALIZED, the flags, the
    column list as a Schema around the name, the query."""
    tree = parse_one("CREATE OR REPLACE VIEW v (x, y) AS SELECT a, b FROM t")
    assert tree.kind == "VIEW" and tree.args.get("replace") is True and not tree.args.get("exists")
    props = tree.args.get("properties")
    assert props is None or not any(isinstance(p, exp.MaterializedProperty) for p in props.expressions)
    assert isinstance(tree.this, exp.Schema) and [e.name for e in tree.this.expressions] == ["x", "y"]
    assert tree.this.this.name == "v" and isinstance(tree.args["expression"], exp.Select)
    assert parse_one("CREATE VIEW IF NOT EXISTS v AS SELECT 1").args.get("exists") is True


def test_drop_view_shape() -> None:
    tree = parse_one("DROP VIEW IF EXISTS v, w CASCADE")
    assert tree.kind == "VIEW" and not tree.args.get("materialized")
    assert tree.args["exists"] is True and tree.args["cascade"] is True
