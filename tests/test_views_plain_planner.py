"""Planning plain views without a server: inlining, dependencies, OR REPLACE rules, privileges.
Named to run after tests/test_spark_runtime.py: planning describes queries on DuckDB, whose
threads must not exist when pyspark forks its JVM from this process."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlglot import exp

from streamdb import types as T
from streamdb.catalog import CatalogSnapshot, ColumnDef, RelationDef, RoleDef
from streamdb.errors import InsufficientPrivilege, StreamDBError
from streamdb.planner import create_plain_view
from streamdb.planner.context import PlanContext, SessionInfo
from streamdb.planner.query import RENAMED_COLUMNS, plan_query
from streamdb.sql.parser import parse_one

USERS = RelationDef(id=1, name="users", kind="table", primary_key=("id",), owner="owner",
                    columns=(ColumnDef("id", T.INTEGER), ColumnDef("name", T.TEXT)))
PV = RelationDef(id=2, name="pv", kind="view", depends_on=(1,), owner="owner",
                 create_sql="CREATE VIEW pv AS SELECT id, upper(name) AS uname FROM users WHERE id > 1",
                 columns=(ColumnDef("id", T.INTEGER), ColumnDef("uname", T.TEXT)),
                 grants=(("reader", "SELECT"),))
VV = RelationDef(id=3, name="vv", kind="view", depends_on=(1, 2), owner="owner",
                 create_sql="CREATE VIEW vv (k) AS SELECT id FROM pv", extra=((RENAMED_COLUMNS, True),),
                 columns=(ColumnDef("k", T.INTEGER),))
ROLES = {r.name: r for r in (RoleDef("owner", 2_000_001, can_login=True), RoleDef("reader", 2_000_002))}
CATALOG = CatalogSnapshot(1, {r.name: r for r in (USERS, PV, VV)}, stored_roles=ROLES)


def ctx(user: str = "streamdb") -> PlanContext:
    return PlanContext(catalog=CATALOG, session=SessionInfo(user=user, database="streamdb"))


def test_views_are_inlined_down_to_stored_relations() -> None:
    q = plan_query(parse_one("SELECT * FROM vv"), ctx())
    assert [i.relation_id for i in q.inputs] == [1]
    assert set(q.views) == {2, 3}
    assert [c.name for c in q.columns] == ["k"]
    tables = {t.name for t in parse_one(q.duckdb_sql).find_all(exp.Table)}
    assert tables == {"r1"}


def test_a_lookup_shaped_read_of_a_view_is_no_index_lookup() -> None:
    q = plan_query(parse_one("SELECT uname FROM pv WHERE id = 2"), ctx())
    assert q.lookup is None and [i.relation_id for i in q.inputs] == [1]


def test_reading_a_view_checks_the_view_for_the_reader_and_the_table_for_its_owner() -> None:
    assert [c.name for c in plan_query(parse_one("SELECT * FROM pv"), ctx("reader")).columns] == ["id", "uname"]
    with pytest.raises(InsufficientPrivilege):
        plan_query(parse_one("SELECT * FROM users"), ctx("reader"))
    with pytest.raises(InsufficientPrivilege):
        plan_query(parse_one("SELECT * FROM vv"), ctx("reader"))


def test_create_plain_view_plan_records_columns_and_dependencies() -> None:
    sql = "CREATE VIEW w (a) AS SELECT k, k + 1 AS nxt FROM vv"
    p = create_plain_view.plan(parse_one(sql), ctx(), sql)
    assert p.relation.kind == "view" and p.relation.create_sql == sql
    assert [(c.name, c.type) for c in p.relation.columns] == [("a", T.INTEGER), ("nxt", T.INTEGER)]
    assert p.relation.depends_on == (1, 2, 3)
    assert dict(p.relation.extra)[RENAMED_COLUMNS] is True


def test_or_replace_keeps_the_existing_columns_in_front() -> None:
    def new(*cols: tuple[str, T.SqlType]) -> RelationDef:
        return replace(PV, id=0, owner="someone", columns=tuple(ColumnDef(n, t) for n, t in cols))

    kept = create_plain_view.replacement(PV, new(("id", T.INTEGER), ("uname", T.TEXT), ("extra", T.BIGINT)))
    assert (kept.id, kept.owner, kept.grants) == (PV.id, PV.owner, PV.grants)
    for cols in ([("id", T.INTEGER)], [("id", T.INTEGER), ("other", T.TEXT)], [("id", T.BIGINT), ("uname", T.TEXT)]):
        with pytest.raises(StreamDBError) as info:
            create_plain_view.replacement(PV, new(*cols))
        assert info.value.sqlstate == "42P16"
    with pytest.raises(StreamDBError) as info:
        create_plain_view.replacement(USERS, new(("id", T.INTEGER)))
    assert info.value.sqlstate == "42809"


def test_window_table_function_over_a_view() -> None:
    ev = RelationDef(id=4, name="ev", kind="stream", columns=(ColumnDef("k", T.TEXT), ColumnDef("ts", T.TIMESTAMPTZ)))
    v = RelationDef(id=5, name="ev_view", kind="view", depends_on=(4,),
                    create_sql="CREATE VIEW ev_view AS SELECT k, ts FROM ev WHERE k <> 'x'",
                    columns=(ColumnDef("k", T.TEXT), ColumnDef("ts", T.TIMESTAMPTZ)))
    c = PlanContext(catalog=CatalogSnapshot(1, {"ev": ev, "ev_view": v}),
                    session=SessionInfo(user="streamdb", database="streamdb"))
    q = plan_query(parse_one("SELECT window_start, count(*) AS n FROM TUMBLE(ev_view, ts, INTERVAL '1' MINUTE) "
                             "GROUP BY window_start"), c)
    assert [(col.name, col.type) for col in q.columns] == [("window_start", T.TIMESTAMPTZ), ("n", T.BIGINT)]
    assert [i.relation_id for i in q.inputs] == [4] and q.views == (5,)
