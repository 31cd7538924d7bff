"""A push query's own materialized view (runtime/transient_views.py): planned with the push
query, kept out of the relations, dropped with what it reads and at start. End to end:
tests/test_e2e_push.py."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from streamdb import types as T
from streamdb.catalog import CatalogSnapshot, ColumnDef, RelationDef
from streamdb.planner import plan
from streamdb.planner.context import PlanContext, SessionInfo
from streamdb.planner.plans import SubscribePlan
from streamdb.runtime import transient_views
from streamdb.runtime.catalog_store import CatalogStore
from streamdb.sql.parser import parse_one
from streamdb.storage import open_storage

TABLE = RelationDef(1, "t", "table", (ColumnDef("id", T.INTEGER), ColumnDef("plan", T.TEXT)), primary_key=("id",))
CONTEXT = PlanContext(CatalogSnapshot(1, {"t": TABLE}), SessionInfo("streamdb", "streamdb"))


def subscribe_plan(sql: str) -> SubscribePlan:
    p = plan(parse_one(sql), CONTEXT, sql)
    assert isinstance(p, SubscribePlan)
    return p


def test_only_a_query_that_is_not_linear_gets_a_view_named_by_position() -> None:
    assert subscribe_plan("SELECT id, plan FROM t WHERE id > 1 EMIT CHANGES").view is None
    p = subscribe_plan("SELECT plan, plan, count(*) FROM t GROUP BY plan EMIT CHANGES")
    assert p.view is not None and p.view.relation.transient
    # A push query may repeat a column name; its view names columns by position.
    assert [c.name for c in p.view.relation.columns] == ["c1", "c2", "c3"]
    assert [c.name for c in p.columns] == ["op", "rowtime", "plan", "plan", "count"]
    assert p.view.relation.depends_on == (1,)
    assert "maintained as a materialized view of its own" in p.explain()


def test_a_query_no_view_can_hold_is_recomputed() -> None:
    # Unbound parameters (as planned for Describe; a statement's run binds them first, and so
    # gets its view) and a temporal join: no view holds them.
    for sql in ("SELECT plan, count(*) FROM t WHERE id > $1 GROUP BY plan EMIT CHANGES",
                "SELECT a.plan, count(*) FROM t a JOIN t FOR SYSTEM_TIME AS OF PROCTIME() b ON a.id = b.id "
                "GROUP BY a.plan EMIT CHANGES"):
        p = subscribe_plan(sql)
        assert p.view is None and p.delta_sql is None, sql
        assert "recompute and diff" in p.explain()


def transient(name: str, depends_on: tuple[int, ...]) -> RelationDef:
    view = subscribe_plan("SELECT plan, count(*) FROM t GROUP BY plan EMIT CHANGES").view
    assert view is not None
    return replace(view.relation, name=name, depends_on=depends_on)


def test_the_views_are_kept_apart_dropped_with_their_inputs_and_at_start(tmp_path) -> None:
    storage = open_storage("rocksdb", str(tmp_path / "db"))
    try:
        store = CatalogStore(storage)
        other = replace(TABLE, id=0, name="u")
        commit, added, snapshot = store.plan_change(add=[replace(TABLE, id=0), other])
        storage.commit(commit)
        store.applied(snapshot)
        t, u = added
        commit, added, snapshot = store.plan_change(add=[transient("subscribe_1", (t.id,)), transient("subscribe_2", (u.id,))])
        storage.commit(commit)
        store.applied(snapshot)
        on_t, on_u = added
        catalog = store.snapshot()
        assert set(catalog.relations) == {"t", "u"}  # no listing or name lookup meets them
        assert set(catalog.transient) == {on_t.name, on_u.name}
        assert catalog.by_id(on_t.id) == on_t and catalog.dependents(t.id) == []
        # Dropping (or renaming) what one reads drops it in the same commit, data included.
        commit, _, snapshot = store.plan_change(remove=[t])
        assert on_t.id in commit.drop_relations
        storage.commit(commit)
        store.applied(snapshot)
        assert set(store.snapshot().transient) == {on_u.name}
        commit, _, snapshot = store.plan_change(rename=[(u, replace(u, name="u2"))])
        assert on_u.id in commit.drop_relations
    finally:
        storage.close()
    # A restart finds what a crash left, and drops it before the pipelines start.
    storage = open_storage("rocksdb", str(tmp_path / "db"))
    try:
        store = CatalogStore(storage)
        assert set(store.snapshot().transient) == {on_u.name}
        transient_views.drop_leftovers(SimpleNamespace(catalog=store, storage=storage))  # type: ignore[arg-type]
        assert store.snapshot().transient == {}
        assert set(CatalogStore(storage).snapshot().relations) == {"u"}
        assert CatalogStore(storage).snapshot().transient == {}
    finally:
        storage.close()
