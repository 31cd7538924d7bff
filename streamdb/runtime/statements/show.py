"""SHOW STREAMS | TABLES | ALL, SHOW CREATE, DESCRIBE."""

from __future__ import annotations

import asyncio
import datetime as dt

from streamdb.catalog import RelationDef
from streamdb.errors import UndefinedTable
from streamdb.planner import DESCRIBE_COLUMNS, SHOW_COLUMNS, SHOW_CREATE_COLUMNS
from streamdb.planner.plans import DescribeRelationPlan, ShowCreatePlan, ShowObjectsPlan
from streamdb.runtime.api import ExecutionResult
from streamdb.runtime.statements.context import ExecContext
from streamdb.runtime.watermarks import delay_of

_KIND_FOR = {"STREAMS": "stream", "TABLES": "table", "VIEWS": "view", "MATERIALIZED VIEWS": "materialized_view"}


def _connector_rows(ctx: ExecContext, kind: str) -> list[tuple[object, ...]]:
    catalog = ctx.engine.catalog.snapshot()
    rows: list[tuple[object, ...]] = []
    if kind == "CONNECTORS":
        from streamdb.planner.connectors import MASK, is_secret

        for c in catalog.objects_of("connector"):
            opts = dict(c.options)
            shown = ", ".join(f"{k} = '{MASK if is_secret(k) else v}'" for k, v in sorted(opts.items())
                              if k not in ("type", "direction"))
            rows.append((c.name, opts.get("direction"), opts.get("type"), shown))
        return rows
    if kind == "SOURCES":
        for r in sorted(catalog.relations.values(), key=lambda r: r.name):
            extra = dict(r.extra)
            if not extra.get("external"):
                continue
            opts = dict(r.options)
            conn = catalog.object_by_id(r.depends_on[0]) if r.depends_on else None
            origin = (opts.get("kafka_topic") if extra["external"] == "kafka"
                      else opts.get("mqtt_topic") if extra["external"] == "mqtt"
                      else opts.get("postgres_table") if extra["external"] == "postgres"
                      else dict(conn.options).get("path") if conn is not None else None)
            st = ctx.engine.sources.status(r.id)
            failed = ctx.engine.sources.failed.get(r.id)
            rows.append((r.name, conn.name if conn is not None else None, origin, r.value_format,
                         "failed" if failed else (st.state if st else "stopped"),
                         st.records if st else 0, st.bad_records if st else 0, extra.get("dead_letters"),
                         failed or (st.last_error if st else None)))
        return rows
    for sink in catalog.objects_of("sink"):
        opts = dict(sink.options)
        sink_st = ctx.engine.sinks.status(sink.id)
        rows.append((sink.name, opts.get("from"), opts.get("connector"), sink_st.state if sink_st else "stopped",
                     sink_st.changes if sink_st else 0, sink_st.last_error if sink_st else None))
    return rows


def _row_counts(ctx: ExecContext, rels: list[RelationDef]) -> dict[int, int]:
    with ctx.engine.storage.snapshot() as snap:
        return {r.id: ctx.engine.reader.row_count(r, snap) for r in rels}


def _count_and_offsets(ctx: ExecContext, rel: RelationDef) -> tuple[int, tuple[int, ...]]:
    with ctx.engine.storage.snapshot() as snap:
        return ctx.engine.reader.row_count(rel, snap), ctx.engine.reader.end_offsets(rel, snap)


async def execute_objects(plan: ShowObjectsPlan, ctx: ExecContext) -> ExecutionResult:
    rels = sorted(ctx.engine.catalog.snapshot().relations.values(), key=lambda r: r.name)
    rows: list[tuple[object, ...]]
    if plan.kind == "FUNCTIONS":
        rows = [(f.name, "aggregate" if dict(f.extra).get("aggregate") else "function",
                 ", ".join(f"{c.name} {c.type.spelled()}" for c in f.columns), dict(f.extra).get("returns"),
                 dict(f.extra).get("language", "python"), f.owner)
                for f in ctx.engine.catalog.snapshot().objects_of("function")]
        return ExecutionResult(f"SELECT {len(rows)}", columns=SHOW_COLUMNS[plan.kind], rows=rows)
    if plan.kind in ("CONNECTORS", "SOURCES", "SINKS"):
        rows = _connector_rows(ctx, plan.kind)
        return ExecutionResult(f"SELECT {len(rows)}", columns=SHOW_COLUMNS[plan.kind], rows=rows)
    if plan.kind == "QUERIES":
        rows = []
        views = ctx.engine.views
        # Off the event loop: counting a view's rows may read its stored changes (O(changes since
        # the last count), 1/3 of the loop's time when a client polled SHOW QUERIES during a load).
        counts = await asyncio.to_thread(_row_counts, ctx, [r for r in rels if r.kind == "materialized_view"])
        for r in rels:
            if r.kind != "materialized_view":
                continue  # derived streams and tables are maintained the same way and listed too
            st = views.status.get(r.id)
            lag = views.lag(r)
            status = "failed" if st and st.error else ("running" if st and st.epochs else "starting")
            if st and st.epochs and not st.error:
                if st.pipeline is not None:
                    status += " (incremental)"
                else:
                    status += (" (incremental aggregate)" if st.partials else " (incremental)" if st.incremental
                               else " (recompute)")
            count = counts[r.id]
            late = _late_events(ctx, r.depends_on)
            rows.append((r.name, r.shown_kind.replace("_", " ") + (" (derived)" if r.shown_kind != r.kind else ""),
                         status, st.epochs if st else 0, lag,
                         count, st.last_epoch_ms if st else None, st.error if st else None, late,
                         (f"pipeline {st.pipeline}" if st.pipeline else st.spark_job) if st else None))
        catalog = ctx.engine.catalog.snapshot()
        for sub in list(views.subscriptions.values()):
            status = "failed" if sub.error else ("running" if sub.started else "starting")
            status += " (incremental)" if sub.plan.delta_sql or sub.view_id is not None else " (recompute)"
            inputs = tuple(i.relation_id for i in sub.plan.query.inputs if i.relation_id is not None)
            runs_on = "own"
            view = catalog.by_id(sub.view_id) if sub.view_id is not None else None
            if view is not None:  # it reads its own view's changes (transient_views.py)
                inputs = view.depends_on
                st = views.status.get(view.id)
                runs_on = f"pipeline {st.pipeline}" if st is not None and st.pipeline else "own"
            rows.append((f"push query {sub.id}", "push query", status, sub.epochs, None, sub.unread,
                         sub.last_epoch_ms, sub.error.message if sub.error else None, _late_events(ctx, inputs),
                         runs_on))
        return ExecutionResult(f"SELECT {len(rows)}", columns=SHOW_COLUMNS[plan.kind], rows=rows)
    if plan.kind == "ALL":
        rows = [(r.name, r.shown_kind.replace("_", " ")) for r in rels]
    else:
        wanted = _KIND_FOR[plan.kind]
        chosen = [r for r in rels if r.shown_kind == wanted]
        if plan.kind == "STREAMS":
            rows = [(r.name, r.partitions, r.value_format, r.timestamp_column or "ROWTIME (arrival time)")
                    for r in chosen]
        elif plan.kind == "TABLES":
            rows = [(r.name, ", ".join(r.primary_key) or None) for r in chosen]
        elif plan.kind == "MATERIALIZED VIEWS":
            rows = [(r.name, dict(r.extra).get("query_sql")) for r in chosen]
        else:
            rows = [(r.name,) for r in chosen]
    return ExecutionResult(f"SELECT {len(rows)}", columns=SHOW_COLUMNS[plan.kind], rows=rows)


def _late_events(ctx: ExecContext, inputs: tuple[int, ...]) -> int | None:
    """Late events of the watermarked streams a query reads (None when none has a watermark)."""
    catalog = ctx.engine.catalog.snapshot()
    counts = [ctx.engine.watermarks.state(rel.id).late_events for rid in inputs
              if (rel := catalog.by_id(rid)) is not None and delay_of(rel) is not None]
    return sum(counts) if counts else None


async def execute_create(plan: ShowCreatePlan, ctx: ExecContext) -> ExecutionResult:
    if plan.create_sql is not None:
        return ExecutionResult("SELECT 1", columns=SHOW_CREATE_COLUMNS, rows=[(plan.name, plan.create_sql)])
    rel = ctx.engine.catalog.snapshot().get(plan.name)
    if rel is None:
        raise UndefinedTable(f'relation "{plan.name}" does not exist')
    return ExecutionResult("SELECT 1", columns=SHOW_CREATE_COLUMNS, rows=[(rel.name, rel.create_sql)])


async def execute_describe(plan: DescribeRelationPlan, ctx: ExecContext) -> ExecutionResult:
    engine = ctx.engine
    rel = engine.catalog.snapshot().get(plan.name)
    if rel is None:
        raise UndefinedTable(f'relation "{plan.name}" does not exist')
    rows: list[tuple[str, str | None]] = [("name", rel.name), ("kind", rel.shown_kind.replace("_", " "))]
    if rel.shown_kind != rel.kind:
        rows.append(("derived by", dict(rel.extra).get("query_sql")))
    for c in rel.columns:
        notes = [c.type.name]
        if c.name in rel.key_columns:
            notes.append("primary key" if rel.kind == "table" else "key")
        if not c.nullable:
            notes.append("not null")
        if c.default_sql:
            notes.append(f"default {c.default_sql}")
        if rel.timestamp_column == c.name:
            notes.append("event time")
        rows.append((f"column {c.name}", ", ".join(notes)))
    if rel.kind == "stream":
        rows.append(("column rowtime", "timestamp with time zone, pseudo-column (event time)"))
        rows.append(("event time", rel.timestamp_column or "ROWTIME (arrival time unless given on insert)"))
        if rel.schemaless:
            rows.append(("schema", "schemaless JSON (columns are the keys seen so far)"))
        delay = delay_of(rel)
        if delay is not None:
            state = engine.watermarks.state(rel.id)
            current = state.watermark(delay)
            rows.append(("watermark", f"{rel.timestamp_column or 'rowtime'} - {delay:g} seconds"
                         + (f" (now {current.isoformat(sep=' ')})" if current else " (no events yet)")))
            rows.append(("late events", str(state.late_events)))
    if rel.kind == "table":
        rows.append(("primary key", ", ".join(rel.primary_key) or "(none: a multiset)"))
    if rel.kind == "view":  # a named query: nothing stored, so no format, rows or offsets
        rows.append(("query", dict(rel.extra).get("query_sql")))
        rows.append(("maintenance", "none: queries that read the view run its query in its place"))
        rows.append(("created", dt.datetime.fromtimestamp(rel.created_at, dt.UTC).isoformat(timespec="seconds")))
        return ExecutionResult(f"SELECT {len(rows)}", columns=DESCRIBE_COLUMNS, rows=rows)
    rows.append(("format", rel.value_format))
    rows.append(("partitions", str(rel.partitions)))
    count, offsets = await asyncio.to_thread(_count_and_offsets, ctx, rel)
    rows.append(("row count", str(count)))
    rows.append(("log offsets", ", ".join(f"partition {p}: 0..{o}" for p, o in enumerate(offsets))))
    rows.append(("created", dt.datetime.fromtimestamp(rel.created_at, dt.UTC).isoformat(timespec="seconds")))
    return ExecutionResult(f"SELECT {len(rows)}", columns=DESCRIBE_COLUMNS, rows=rows)
