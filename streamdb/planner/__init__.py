"""The planner: statement -> plan, without touching Spark or disk.

One module per statement kind; this module only dispatches.
"""

from __future__ import annotations

from sqlglot import exp

from streamdb import types as T
from streamdb.errors import FeatureNotSupported, StreamDBError
from streamdb.planner import (
    copy,
    create_stream,
    create_table,
    create_view,
    drop,
    insert,
    session,
    show,
    subscribe,
    update,
)
from streamdb.planner import query as query_planner
from streamdb.planner.context import PlanContext
from streamdb.planner.names import normalize
from streamdb.planner.plans import (
    CloseCursorPlan,
    CopyToPlan,
    DeclareCursorPlan,
    DescribeRelationPlan,
    ExplainPlan,
    FlushPlan,
    Plan,
    QueryPlan,
    ShowCreatePlan,
    ShowObjectsPlan,
    ShowVariablePlan,
    SubscribePlan,
)
from streamdb.runtime.api import Column
from streamdb.sql import ast as S

QUERY_TYPES = (exp.Select, exp.Union, exp.Intersect, exp.Except, exp.Values, exp.Subquery)


def is_query(node: exp.Expression) -> bool:
    return isinstance(node, QUERY_TYPES) or isinstance(node, S.SelectStream)


def plan(node: exp.Expression, ctx: PlanContext, sql: str = "") -> Plan:
    if isinstance(node, S.SelectStream):
        return query_planner.plan_query(node.this, ctx, changes=True)
    if isinstance(node, QUERY_TYPES):
        return query_planner.plan_query(node, ctx)
    if isinstance(node, S.CreateStream):
        return create_stream.plan(node, ctx, sql)
    if isinstance(node, S.CreateConnector):
        from streamdb.planner import connectors

        return connectors.plan_create_connector(node, ctx)
    if isinstance(node, S.CreateSource):
        return create_stream.plan_create_source(node, ctx, sql)
    if isinstance(node, S.CreateSink):
        from streamdb.planner import sinks

        return sinks.plan_create_sink(node, ctx)
    if isinstance(node, S.DropConnector):
        return drop.plan_object(node, "connector")
    if isinstance(node, exp.Create):
        kind = str(node.args.get("kind") or "").upper()
        props = node.args.get("properties")
        if props is not None and any(isinstance(p, exp.TemporaryProperty) for p in props.expressions):
            # Not ignored: a TEMP relation here would outlive the session and be visible to all.
            raise FeatureNotSupported(f"temporary {kind.lower() or 'relation'}s are not supported",
                                      hint=f"Create an ordinary {kind.lower()} and drop it when you are done.")
        if kind == "TABLE":
            return create_table.plan(node, ctx, sql)
        if kind in ("FUNCTION", "AGGREGATE"):
            from streamdb.planner import functions

            return functions.plan_create(node, ctx, sql)
        materialized = props is not None and any(
            isinstance(p, exp.MaterializedProperty) for p in props.expressions)
        if kind == "VIEW" and materialized:
            return create_view.plan(node, ctx, sql)
        if kind == "VIEW":
            from streamdb.planner import create_plain_view

            return create_plain_view.plan(node, ctx, sql)
        if kind == "INDEX":
            from streamdb.planner import create_index

            return create_index.plan(node, ctx, sql)
        raise FeatureNotSupported(f"CREATE {kind} is not supported")
    if isinstance(node, exp.Drop):
        return drop.plan(node, ctx)
    if isinstance(node, exp.Insert):
        return insert.plan(node, ctx)
    if isinstance(node, exp.Update):
        return update.plan_update(node, ctx)
    if isinstance(node, exp.Delete):
        return update.plan_delete(node, ctx)
    if isinstance(node, S.CopyStatement):
        return copy.plan(node, ctx)
    if isinstance(node, S.ShowObjects):
        return show.plan_show_objects(node, ctx)
    if isinstance(node, S.ShowCreate):
        return show.plan_show_create(node, ctx)
    if isinstance(node, S.DescribeRelation):
        return show.plan_describe(node, ctx)
    if isinstance(node, S.ShowVariable):
        return show.plan_show_variable(node, ctx)
    if isinstance(node, S.SetVariable):
        return session.plan_set(node)
    if isinstance(node, S.TransactionControl):
        return session.plan_transaction(node)
    if isinstance(node, S.Discard):
        return session.plan_discard(node)
    if isinstance(node, S.Deallocate):
        return session.plan_deallocate(node)
    if isinstance(node, S.ExplainStatement):
        return ExplainPlan(plan(node.this, ctx, sql))
    if isinstance(node, S.Flush):
        target = node.this
        return FlushPlan(target.name if isinstance(target, exp.Expression) else None)
    if isinstance(node, S.EmitChanges):
        return subscribe.plan_emit_changes(node, ctx)
    if isinstance(node, S.Subscribe):
        return subscribe.plan_subscribe(node, ctx)
    if isinstance(node, S.DeclareCursor):
        inner = plan(node.expression, ctx, sql)
        if not isinstance(inner, (QueryPlan, SubscribePlan)):
            raise FeatureNotSupported("a cursor is declared for a query or a SUBSCRIBE")
        return DeclareCursorPlan(normalize(node.this), inner)
    if isinstance(node, S.FetchCursor):
        return subscribe.plan_fetch(node)
    if isinstance(node, S.CloseCursor):
        target = node.this
        return CloseCursorPlan(None if isinstance(target, exp.Literal) else normalize(target))
    if isinstance(node, S.RenameRelation):
        from streamdb.planner import rename

        return rename.plan(node, ctx)
    if isinstance(node, (S.CreateRole, S.AlterRole)):
        from streamdb.planner import roles

        return roles.plan_role(node, ctx)
    if isinstance(node, S.DropRole):
        from streamdb.planner import roles

        return roles.plan_drop_role(node, ctx)
    if isinstance(node, (S.GrantPrivileges, S.RevokePrivileges)):
        from streamdb.planner import roles

        return roles.plan_grant(node, ctx)
    if isinstance(node, exp.Command):
        raise FeatureNotSupported(f"{str(node.this).upper()} is not supported")
    raise FeatureNotSupported(f"statement {type(node).__name__} is not supported")


def _text(*names: str) -> tuple[Column, ...]:
    return tuple(Column(n, T.TEXT) for n in names)


SHOW_COLUMNS: dict[str, tuple[Column, ...]] = {
    "STREAMS": (Column("name", T.TEXT), Column("partitions", T.INTEGER), Column("format", T.TEXT),
                Column("timestamp", T.TEXT)),
    "TABLES": _text("name", "primary_key"),
    "ALL": _text("name", "kind"),
    "VIEWS": _text("name"),
    "MATERIALIZED VIEWS": _text("name", "query"),
    "QUERIES": (Column("name", T.TEXT), Column("kind", T.TEXT), Column("status", T.TEXT),
                Column("epochs", T.BIGINT), Column("lag", T.BIGINT), Column("rows", T.BIGINT),
                Column("last_epoch_ms", T.DOUBLE), Column("error", T.TEXT), Column("late_events", T.BIGINT),
                # "shared": the last epoch ran in one Spark job with other views over the same input
                Column("spark_job", T.TEXT)),
    "CONNECTORS": _text("name", "direction", "type", "options"),
    "FUNCTIONS": _text("name", "kind", "arguments", "returns", "language", "owner"),
    "SOURCES": (Column("name", T.TEXT), Column("connector", T.TEXT), Column("origin", T.TEXT),
                Column("format", T.TEXT), Column("status", T.TEXT), Column("records", T.BIGINT),
                Column("bad_records", T.BIGINT), Column("dead_letters", T.TEXT), Column("error", T.TEXT)),
    "SINKS": (Column("name", T.TEXT), Column("from", T.TEXT), Column("connector", T.TEXT), Column("status", T.TEXT),
              Column("changes", T.BIGINT), Column("error", T.TEXT)),
}
DESCRIBE_COLUMNS = _text("property", "value")
SHOW_CREATE_COLUMNS = _text("name", "create_sql")
EXPLAIN_COLUMNS = _text("QUERY PLAN")


def result_columns(p: Plan) -> tuple[Column, ...] | None:
    """What a plan returns, known before running it."""
    if isinstance(p, QueryPlan):
        return p.columns
    if isinstance(p, ShowObjectsPlan):
        return SHOW_COLUMNS[p.kind]
    if isinstance(p, ShowCreatePlan):
        return SHOW_CREATE_COLUMNS
    if isinstance(p, DescribeRelationPlan):
        return DESCRIBE_COLUMNS
    if isinstance(p, ShowVariablePlan):
        return (Column(p.name, T.TEXT),)
    if isinstance(p, ExplainPlan):
        return EXPLAIN_COLUMNS
    if isinstance(p, SubscribePlan):
        return p.columns
    if isinstance(p, CopyToPlan):
        return None
    return None


def describe(node: exp.Expression, ctx: PlanContext,
             declared: list[T.SqlType | None]) -> tuple[tuple[T.SqlType, ...], tuple[Column, ...] | None]:
    """Parameter and result types for Parse/Describe."""
    if is_query(node):
        inner = node.this if isinstance(node, S.SelectStream) else node
        q = query_planner.plan_query(inner, ctx, changes=isinstance(node, S.SelectStream),
                                     declared_params=declared)
        return q.param_types, q.columns
    if isinstance(node, S.EmitChanges) and (declared or query_planner.parameter_count(node)):
        # A push query's parameters are typed by its query (`WHERE seq >= $1`), not as text.
        subscribe.snapshot_option(node, "EMIT CHANGES")  # bad options fail at Parse, as without parameters
        q = query_planner.plan_query(node.this, ctx, declared_params=declared)
        return q.param_types, (*subscribe.CHANGE_COLUMNS, *q.columns)
    n = query_planner.parameter_count(node)
    if n == 0 and not declared:
        try:
            return (), result_columns(plan(node, ctx))
        except StreamDBError:
            raise
    # Statements with parameters (INSERT ... VALUES ($1, $2), UPDATE ... WHERE id = $1, ...):
    # infer the types from the target columns.
    types = _dml_param_types(node, ctx, declared, n)
    return types, None


def _dml_param_types(node: exp.Expression, ctx: PlanContext, declared: list[T.SqlType | None],
                     n: int) -> tuple[T.SqlType, ...]:
    from streamdb.planner.names import lookup_relation, normalize

    out: list[T.SqlType | None] = list(declared) + [None] * max(0, n - len(declared))
    if isinstance(node, exp.Insert):
        target = node.this
        names: list[str] = []
        if isinstance(target, exp.Schema):
            names = [normalize(c.this if isinstance(c, exp.Column) else c) for c in target.expressions]
            target = target.this
        rel = lookup_relation(ctx, target)
        names = names or rel.column_names()
        types = {c.name: c.type for c in rel.columns}
        types.setdefault("rowtime", T.TIMESTAMPTZ)
        src = node.expression
        if isinstance(src, exp.Values):
            for tup in src.expressions:
                for i, e in enumerate(tup.expressions if isinstance(tup, exp.Tuple) else [tup]):
                    if isinstance(e, exp.Parameter) and i < len(names):
                        k = int(e.this.this) - 1
                        if out[k] is None:
                            out[k] = types.get(names[i], T.TEXT)
    if isinstance(node, (exp.Update, exp.Delete)):
        rel = lookup_relation(ctx, node.this)
        types = {c.name: c.type for c in rel.columns}

        def column_type(col: exp.Column) -> T.SqlType | None:
            return types.get(normalize(col.this)) if isinstance(col.this, exp.Identifier) else None

        inferred = query_planner.infer_parameter_types(node, out, column_type)
        for eq in node.expressions if isinstance(node, exp.Update) else []:
            if isinstance(eq.expression, exp.Parameter):
                k = int(eq.expression.this.this) - 1
                col = eq.this
                inferred[k] = types.get(normalize(col.this if isinstance(col, exp.Column) else col), T.TEXT)
        return tuple(inferred)
    return tuple(t if t is not None else T.TEXT for t in out)
