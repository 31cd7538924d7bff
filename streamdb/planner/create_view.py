"""CREATE MATERIALIZED VIEW name AS SELECT ..."""

from __future__ import annotations

import time
from dataclasses import replace

import sqlglot
from sqlglot import exp

from streamdb.catalog import ColumnDef, RelationDef
from streamdb.errors import DuplicateColumn, FeatureNotSupported, InvalidParameterValue, StreamDBError
from streamdb.planner import asof
from streamdb.planner import query as query_planner
from streamdb.planner.aggregate import incremental_aggregate
from streamdb.planner.context import PlanContext
from streamdb.planner.incremental import is_time_dependent, linear_delta_sql
from streamdb.planner.names import normalize, position_of, table_name
from streamdb.planner.numeric_scale import with_fixed_scales
from streamdb.planner.plans import CreateViewPlan
from streamdb.planner.windows import interval_seconds
from streamdb.sql import ast as S

QUERY_SQL = "query_sql"


def view_query(view: RelationDef) -> exp.Expression:
    """A view's (or derived relation's) query exactly as written: from its CREATE statement, not
    regenerated SQL (regenerating through another dialect can change meaning), without the
    EMIT ON WINDOW CLOSE or EMIT CHANGES it was written with."""
    from streamdb.sql.parser import parse_one

    body = parse_one(view.create_sql).args.get("expression")
    if body is None:
        body = parse_one(str(dict(view.extra)[QUERY_SQL]))
    if isinstance(body, (S.EmitOnWindowClose, S.EmitChanges)):
        body = body.this
    if not isinstance(body, exp.Expression):
        raise FeatureNotSupported(f'the query of "{view.name}" cannot be read')
    return body


def _window_size(query: exp.Expression) -> float | None:
    for call in query.find_all(exp.Anonymous):
        name = str(call.this).upper()
        if name in ("TUMBLE", "HOP") and len(call.expressions) >= (3 if name == "TUMBLE" else 4):
            return interval_seconds(call.expressions[2 if name == "TUMBLE" else 3], "size")
    return None


def plan(stmt: exp.Expression, ctx: PlanContext, sql: str, derived: str | None = None) -> CreateViewPlan:
    """CREATE MATERIALIZED VIEW, and CREATE STREAM/TABLE AS SELECT (`derived` = 'stream' | 'table')."""
    target = stmt.this
    renamed: list[str] | None = None
    if isinstance(target, exp.Schema):  # CREATE MATERIALIZED VIEW v (a, b) AS ...: the columns' names
        renamed = [normalize(e.this if isinstance(e, exp.Column) else e) for e in target.expressions]
        target = target.this
    schema, name = table_name(target)
    if schema not in (None, "public"):
        raise FeatureNotSupported(f'schema "{schema}" is not supported; relations live in "public"')
    body = stmt.args.get("expression")
    if body is None:
        raise FeatureNotSupported("CREATE MATERIALIZED VIEW needs AS SELECT ...")
    if isinstance(body, S.EmitChanges):  # ksqlDB's persistent query: `CREATE STREAM s AS SELECT ... EMIT CHANGES`
        if body.args.get("properties"):
            raise InvalidParameterValue("EMIT CHANGES takes no options in CREATE ... AS SELECT",
                                        hint="A derived relation or view is always maintained from its inputs' "
                                             "whole history.")
        body = body.this
    for table in body.find_all(exp.Table):
        if table.args.get("version") is not None:
            # A temporal join reads the table as it was when each row arrived and never revisits
            # it; a view's join here is kept equal to the join of the current contents, which
            # would give other rows (RisingWave's temporal join tests).
            raise FeatureNotSupported(
                "a temporal join (FOR SYSTEM_TIME AS OF) is not supported in a materialized view",
                hint="Join the table without FOR SYSTEM_TIME AS OF: the view then follows the table's "
                     "changes, rows already joined included.", position=position_of(table))
    eowc_input: int | None = None
    if isinstance(body, S.EmitOnWindowClose):
        q = query_planner.plan_query(body.this, ctx)
        watermarked = [rel for i in q.inputs if i.relation_id is not None
                       and (rel := ctx.catalog.by_id(i.relation_id)) is not None
                       and dict(rel.extra).get("watermark_delay_seconds") is not None]
        if len(watermarked) != 1:
            raise FeatureNotSupported("EMIT ON WINDOW CLOSE needs exactly one input stream with a watermark",
                                      hint="Declare one: CREATE STREAM s (..., WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)")
        _refuse_unfinished_window_functions(body.this, watermarked[0].timestamp_column)
        names = [c.name for c in q.columns]
        # A row is final once the watermark passes its window's end, or its own event time.
        close_column = "window_end" if "window_end" in names else watermarked[0].timestamp_column
        close_offset = 0.0
        if close_column not in names and "window_start" in names:
            # Grouped by window_start only: the window ends one window size later.
            size = _window_size(body.this)
            if size is not None:
                close_column, close_offset = "window_start", size
        if close_column not in names:
            raise FeatureNotSupported("EMIT ON WINDOW CLOSE needs the query to output window_end "
                                      f"(or the watermark column {watermarked[0].timestamp_column})",
                                      hint="Group by the window_start and window_end of TUMBLE or HOP.")
        eowc_input = watermarked[0].id
    else:
        q = query_planner.plan_query(body, ctx)
    if q.param_types:
        raise FeatureNotSupported("a view's query cannot have parameters")
    system = [i.system_key or "" for i in q.inputs if i.relation_id is None]
    if system:
        raise FeatureNotSupported(f"a materialized view cannot read system tables ({', '.join(system)})")
    if any(asof.is_asof(j) for j in body.find_all(exp.Join)) and \
            any(asof.is_asof(j) for j in sqlglot.parse_one(q.resolved_sql, read="streamdb").find_all(exp.Join)):
        raise FeatureNotSupported(
            "this ASOF join in a materialized view",
            hint="A view takes `a ASOF [LEFT] JOIN b ON a.k = b.k [AND ...] AND a.t <= b.t` (or <, >, >=): "
                 "two tables, at least one equality and exactly one inequality.")
    if renamed is not None:
        if len(renamed) > len(q.columns):
            raise StreamDBError("CREATE MATERIALIZED VIEW specifies more column names than columns",
                                sqlstate="42601")
        if eowc_input is not None and close_column is not None:  # the closing column, as the view names it
            at = [c.name for c in q.columns].index(close_column)
            close_column = renamed[at] if at < len(renamed) else close_column
        q = replace(q, columns=tuple(
            replace(c, name=renamed[i]) if i < len(renamed) else c for i, c in enumerate(q.columns)))
    seen: set[str] = set()
    columns = []
    types = with_fixed_scales([c.type for c in q.columns], q.resolved_sql, q.inputs)
    for c, t in zip(q.columns, types, strict=True):
        if c.name in seen:
            raise DuplicateColumn(f'column "{c.name}" specified more than once',
                                  hint="Give the view's columns distinct names with AS.")
        seen.add(c.name)
        columns.append(ColumnDef(c.name, t))
    rel = RelationDef(
        id=0, name=name, kind="materialized_view", columns=tuple(columns),
        create_sql=sql.strip(), created_at=time.time(),
        # Plain views read are inlined into q.inputs, and depended on too: DROP VIEW must see them.
        depends_on=tuple(sorted({i.relation_id for i in q.inputs if i.relation_id is not None}
                               | set(q.views) | set(q.functions))),
        extra=((QUERY_SQL, body.sql(dialect="streamdb")),) + ((("derived", derived),) if derived else ())
        + ((("eowc_input", eowc_input), ("eowc_column", close_column), ("eowc_offset_seconds", close_offset))
           if eowc_input is not None else ()),
    )
    if derived == "stream" and linear_delta_sql(q.resolved_sql, q.inputs) is None:
        raise FeatureNotSupported(
            "CREATE STREAM ... AS SELECT needs a query that only filters and projects (its result only grows)",
            hint="Use CREATE TABLE ... AS SELECT for aggregates and joins, whose rows change.")
    aggregate = None
    if eowc_input is None and not is_time_dependent(q.resolved_sql) and \
            linear_delta_sql(q.resolved_sql, q.inputs) is None:
        aggregate = incremental_aggregate(body, ctx, tuple(c.type for c in q.columns))
    from streamdb.planner.dataflow import view_strategy

    strategy = view_strategy(q.resolved_sql, q.inputs, ctx.catalog, tuple(c.name for c in q.columns),
                             eowc=eowc_input)
    or_replace = derived is None and bool(stmt.args.get("replace"))
    return CreateViewPlan(rel, q, if_not_exists=bool(stmt.args.get("exists")), or_replace=or_replace,
                          aggregate_strategy=aggregate.explain() if aggregate else None,
                          aggregate_sql=aggregate.delta_sql if aggregate else None, strategy=strategy)


# Window functions whose value at a row can still change after the watermark passes the row's
# event time: they read rows after it (lead), or the whole partition's size.
_READS_LATER_ROWS = (exp.Lead, exp.Ntile, exp.PercentRank, exp.CumeDist)


def _refuse_unfinished_window_functions(query: exp.Expression, event_time: str | None) -> None:
    """EMIT ON WINDOW CLOSE emits a row once the watermark passes its event time, and never again.
    A window function's value is final then only if it reads the rows up to the current one in
    event-time order (later rows can only come after it: earlier ones would be late, and late
    events are left out), or if its partition is one window (final when the window closes).
    Anything else would be emitted before it is final: refused, as RisingWave refuses it."""
    for window in query.find_all(exp.Window):
        fn = window.this
        name = fn.sql_name() if isinstance(fn, exp.Func) else fn.sql(dialect="postgres")
        order = window.args.get("order")
        first = order.expressions[0] if order is not None and order.expressions else None
        key = first.this if isinstance(first, exp.Ordered) else None
        spec = window.args.get("spec")
        partition = window.args.get("partition_by") or []
        if any(isinstance(p, exp.Column) and p.name in ("window_start", "window_end") for p in partition):
            continue  # per window (top-N per window, say): its rows are final together, when it closes
        why = None
        if isinstance(fn, _READS_LATER_ROWS):
            why = f"{name.lower()}() reads rows after the current one (or the whole partition)"
        elif not isinstance(first, exp.Ordered) or first.args.get("desc") or not isinstance(key, exp.Column) \
                or key.name not in {event_time, "window_start", "window_end"}:
            why = f"its window is not ordered by the event time {event_time} ascending, so its rows are not final " \
                  "when the watermark passes them"
        elif isinstance(spec, exp.WindowSpec) and str(spec.args.get("end_side") or "").lower() == "following":
            why = "its frame reaches rows after the current one (FOLLOWING)"
        if why is not None:
            raise FeatureNotSupported(
                f"{name.lower()}() OVER (...) in an EMIT ON WINDOW CLOSE view: {why}",
                hint=f"Order the window by {event_time} with a frame ending at the current row (lag, row_number, "
                     "rank, running aggregates), or drop EMIT ON WINDOW CLOSE.",
                # the parser records positions of names only: the window's first column
                position=position_of(next(window.find_all(exp.Column), None)))

