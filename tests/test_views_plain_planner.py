"""Planning plain views without a server: inlining, dependencies, OR REPLACE rules, privileges.
(Planning describes queries on DuckDB in this process: tests/conftest.py runs the in-process Spark
tests before any such module.)"""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlglot import exp

from streamdb import types as T
from streamdb.catalog import CatalogSnapshot, ColumnDef, RelationDef, RoleDef
from streamdb.errors import InsufficientPrivilege, StreamDBError
from streamdb.planner import create_plain_view, create_view
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


# ---- views merged into the queries that read them --------------------------------------

EVENTS = RelationDef(id=10, name="events", kind="stream",
                     columns=(ColumnDef("k", T.TEXT), ColumnDef("n", T.INTEGER), ColumnDef("ts", T.TIMESTAMPTZ)))


def _view(id_: int, sql: str, *columns: tuple[str, T.SqlType], renamed: bool = False) -> RelationDef:
    return RelationDef(id=id_, name=sql.split()[2], kind="view", create_sql=sql, depends_on=(10,),
                       columns=tuple(ColumnDef(n, t) for n, t in columns),
                       extra=((RENAMED_COLUMNS, True),) if renamed else ())


BIG = _view(11, "CREATE VIEW big AS SELECT k, n * 2 AS n2, ts FROM events WHERE n > 1",
            ("k", T.TEXT), ("n2", T.INTEGER), ("ts", T.TIMESTAMPTZ))
BIG_AB = _view(12, "CREATE VIEW big_ab (key, twice) AS SELECT k, n2 + 1 FROM big WHERE k IN ('a', 'b')",
               ("key", T.TEXT), ("twice", T.INTEGER), renamed=True)
TOTALS = _view(13, "CREATE VIEW totals AS SELECT k, sum(n) AS s FROM events GROUP BY k",
               ("k", T.TEXT), ("s", T.BIGINT))
DISTINCT_KEYS = _view(14, "CREATE VIEW distinct_keys AS SELECT DISTINCT k, n FROM events", ("k", T.TEXT),
                      ("n", T.INTEGER))
NOISY = _view(15, "CREATE VIEW noisy AS SELECT k, random() AS r FROM events", ("k", T.TEXT), ("r", T.DOUBLE))


def events_ctx(*extra: RelationDef) -> PlanContext:
    rels = (EVENTS, BIG, BIG_AB, TOTALS, DISTINCT_KEYS, NOISY, *extra)
    return PlanContext(catalog=CatalogSnapshot(1, {r.name: r for r in rels}),
                       session=SessionInfo(user="streamdb", database="streamdb"))


def mv_strategy(query: str, derived: str | None = None) -> tuple[str, tuple[int | None, ...]]:
    sql = f"CREATE MATERIALIZED VIEW m AS {query}"
    p = create_view.plan(parse_one(sql), events_ctx(), sql, derived)
    strategy = next(line for line in p.explain().splitlines() if line.startswith("  strategy: "))
    return strategy.split(":")[1].strip(), tuple(i.relation_id for i in p.query.inputs)


@pytest.mark.parametrize(("over_view", "over_relation"), [
    ("SELECT k, n2 FROM big", "SELECT k, n * 2 AS n2 FROM events WHERE n > 1"),
    ("SELECT * FROM big WHERE n2 > 10", "SELECT k, n * 2 AS n2, ts FROM events WHERE n > 1 AND n * 2 > 10"),
    ("SELECT key, twice FROM big_ab", "SELECT k AS key, n * 2 + 1 AS twice FROM events WHERE n > 1"),
    ("SELECT k, count(*) AS c, sum(n2) AS s FROM big GROUP BY k",
     "SELECT k, count(*) AS c, sum(n * 2) AS s FROM events WHERE n > 1 GROUP BY k"),
    ("SELECT key, max(twice) AS top FROM big_ab GROUP BY key",
     "SELECT k AS key, max(n * 2 + 1) AS top FROM events WHERE n > 1 GROUP BY k"),
    ("SELECT window_start, count(*) AS c FROM TUMBLE(big, ts, INTERVAL '1' MINUTE) GROUP BY window_start",
     "SELECT window_start, count(*) AS c FROM TUMBLE(events, ts, INTERVAL '1' MINUTE) GROUP BY window_start"),
])
def test_a_materialized_view_over_filtering_views_plans_like_one_over_the_relation(over_view: str,
                                                                                 over_relation: str) -> None:
    strategy, inputs = mv_strategy(over_view)
    assert (strategy, inputs) == mv_strategy(over_relation)
    assert strategy.startswith("incremental") and inputs == (10,)


def test_a_stream_can_be_derived_from_a_filtering_view() -> None:
    strategy = mv_strategy("SELECT key FROM big_ab WHERE twice < 100", derived="stream")[0]
    assert strategy.startswith("incremental") and "with 0 stateful layer(s)" in strategy  # linear: no state


def test_the_merged_query_reads_the_relation_with_the_views_filters() -> None:
    q = plan_query(parse_one("SELECT twice * 3 AS t FROM big_ab AS x WHERE x.key = 'a' ORDER BY t"), events_ctx())
    merged = parse_one(q.resolved_sql)
    assert not list(merged.find_all(exp.Subquery))
    # The view's expression keeps its own precedence inside the reader's: (n * 2 + 1) * 3.
    assert q.resolved_sql == ('SELECT (("x".n * 2) + 1) * 3 AS t FROM r10 AS "x" WHERE ("x".n > 1 AND '
                              """"x".k IN ('a', 'b')) AND "x".k = 'a' ORDER BY t""")
    assert [(c.name, c.type) for c in q.columns] == [("t", T.INTEGER)]
    assert q.views == (12, 11)


@pytest.mark.parametrize("query", [
    "SELECT k, s FROM totals WHERE s > 3",  # an aggregate
    "SELECT k FROM distinct_keys",  # DISTINCT
    "SELECT r FROM noisy WHERE r < 0.5",  # random(): merging would draw it twice
    "SELECT b.k FROM big b JOIN events e ON e.k = b.k",  # the reader joins
])
def test_views_that_cannot_merge_stay_subqueries(query: str) -> None:
    q = plan_query(parse_one(query), events_ctx())
    assert list(parse_one(q.resolved_sql).find_all(exp.Subquery))


def test_merging_keeps_the_views_columns_and_nothing_else() -> None:
    # ROWTIME is the stream's, not the view's: still unknown through the view.
    with pytest.raises(StreamDBError) as info:
        plan_query(parse_one("SELECT rowtime FROM big"), events_ctx())
    assert info.value.sqlstate == "42703"
    with pytest.raises(StreamDBError) as info:
        plan_query(parse_one("SELECT n FROM big"), events_ctx())
    assert info.value.sqlstate == "42703"


def test_star_in_a_view_is_frozen_at_creation() -> None:
    sql = "CREATE VIEW snapshot_cols (key) AS SELECT *, n + 1 AS next FROM events WHERE n > 0"
    p = create_plain_view.plan(parse_one(sql), events_ctx(), sql)
    expanded = "SELECT k, n, ts, n + 1 AS next FROM events WHERE n > 0"
    assert p.relation.create_sql == f"CREATE VIEW snapshot_cols (key) AS {expanded}"
    assert dict(p.relation.extra)["query_sql"] == expanded
    assert [c.name for c in p.relation.columns] == ["key", "n", "ts", "next"]
    # The stream widens (a schemaless stream sees a new key): the view does not.
    wider = replace(EVENTS, columns=(*EVENTS.columns, ColumnDef("extra", T.TEXT)))
    view = replace(p.relation, id=20)
    q = plan_query(parse_one("SELECT * FROM snapshot_cols"), events_ctx(wider, view))
    assert [c.name for c in q.columns] == ["key", "n", "ts", "next"]
    # Qualified stars and joins expand per relation; a query without `*` is kept as written.
    sql = "CREATE VIEW j AS SELECT e.*, b.n2 FROM events AS e JOIN big AS b ON b.k = e.k"
    assert create_plain_view.plan(parse_one(sql), events_ctx(), sql).relation.create_sql == \
        "CREATE VIEW j AS SELECT e.k, e.n, e.ts, b.n2 FROM events AS e JOIN big AS b ON b.k = e.k"
    sql = "CREATE VIEW kept AS SELECT k FROM  events"
    assert create_plain_view.plan(parse_one(sql), events_ctx(), sql).relation.create_sql == sql


@pytest.mark.parametrize(("query", "incremental"), [
    ("SELECT window_start, count(*) AS c FROM HOP(events, ts, INTERVAL '1' MINUTE, INTERVAL '5' MINUTE) "
     "GROUP BY window_start", True),
    ("SELECT e.k, v.m FROM events e CROSS JOIN (VALUES (1), (-2), (NULL), (CAST('3' AS INT))) AS v(m)", True),
    ("SELECT e.k, v.m FROM events e CROSS JOIN (VALUES (random())) AS v(m)", False),
    ("SELECT e.k, v.m FROM events e JOIN (VALUES (1, 'a'), (2, 'b')) AS v(m, t) ON v.t = e.k", True),
    ("SELECT e.k, v.m FROM events e LEFT JOIN (VALUES (1, 'a')) AS v(m, t) ON v.t = e.k", False),
    ("SELECT e.k, v.m FROM events e CROSS JOIN (VALUES (e.n)) AS v(m)", False),
])
def test_joins_with_constant_values_are_linear(query: str, incremental: bool) -> None:
    """HOP windows are a join with VALUES (the window offsets): one Map per row, so no recompute."""
    assert mv_strategy(query)[0].startswith("incremental" if incremental else "recompute")


@pytest.mark.parametrize(("query", "joins"), [
    # the join tests the comparison across its sides itself (dataflow.fuse_residuals)
    ("SELECT a.k, b.n FROM events a, events b WHERE a.k = b.k AND a.n > b.n", ["on c0 = c4, pairs kept where c1 > c5"]),
    ("SELECT a.k FROM events a, events b, events c WHERE a.k = b.k AND c.n = b.n AND a.n + c.n > 3",
     ["on c5 = c9", "on c0 = c4"]),
    # an integer and a numeric compare as SQL does in a filter (as keys, 1 and 1.0 would not match)
    ("SELECT a.k FROM events a, events b WHERE a.n = b.n::numeric", ["on true"]),
    # an outer join keeps WHERE as a filter above it (it rejects the padded rows)
    ("SELECT a.k FROM events a LEFT JOIN events b ON a.k = b.k WHERE a.n = b.n", ["left on c0 = c4"]),
])
def test_where_equalities_become_join_keys(query: str, joins: list[str]) -> None:
    """FROM a, b WHERE a.x = b.y is an equi-join indexed by key, not a cross product (Nexmark q4)."""
    sql = f"CREATE MATERIALIZED VIEW m AS {query}"
    explain = create_view.plan(parse_one(sql), events_ctx(), sql, None).explain()
    shown = [line.strip().removeprefix("Join ").removeprefix("inner ").split(" (")[0]
             for line in explain.splitlines() if line.strip().startswith("Join")]
    assert shown == joins
