"""Runs ad hoc queries over one consistent snapshot.

Small reads run on the embedded engine (no Spark job latency); reads over more
input rows than `spark_read_threshold_rows` run on Spark with the same inputs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from streamdb import types as T
from streamdb.errors import DataException, UndefinedTable
from streamdb.planner.context import SessionInfo
from streamdb.planner.plans import QueryPlan
from streamdb.runtime import changes as C
from streamdb.runtime import embedded, failpoints, limits, system_catalog
from streamdb.runtime.api import Column
from streamdb.runtime.catalog_store import stored_in
from streamdb.runtime.changes import from_arrow_value
from streamdb.runtime.reader import KeyIndex, keyed_rows_table, state_store

if TYPE_CHECKING:
    from streamdb.catalog import RelationDef
    from streamdb.runtime.engine import Engine

log = logging.getLogger("streamdb.query")


def gather_inputs(engine: Engine, plan: QueryPlan, session: SessionInfo) -> dict[str, pa.Table]:
    if failpoints.ENABLED:
        for inp in plan.inputs:
            if inp.relation_id is not None and (rel := engine.catalog.by_id(inp.relation_id)) is not None:
                failpoints.read_pause(rel.name, failpoints.PLANNED_PAUSE_MARKER)
    catalog = engine.catalog.snapshot()
    tables: dict[str, pa.Table] = {}
    for inp in plan.inputs:
        if inp.relation_id is not None and (rel := engine.catalog.by_id(inp.relation_id)) is not None:
            failpoints.read_pause(rel.name)
    with engine.storage.snapshot() as snap:
        for inp in plan.inputs:
            if inp.relation_id is not None:
                # Planned before a CREATE OR REPLACE swapped the view: the old one's rows, while kept.
                rel = engine.catalog.by_id(inp.relation_id)
                # A DROP that committed after the catalog above was taken has removed the data
                # from this snapshot: say so, rather than read it as empty.
                if rel is None or not stored_in(snap, rel):
                    raise UndefinedTable(f'relation "{inp.registered_name}" was dropped while the query ran')
                if inp.mode == "changes":
                    table = engine.reader.read_changes(rel, snap)
                else:
                    table = engine.reader.read_state(rel, snap)
                tables[inp.registered_name] = with_planned_columns(table, inp.columns)
            else:
                assert inp.system_key is not None
                tables[inp.registered_name] = system_catalog.build_system_table(inp.system_key, catalog, session)
    return tables


def with_planned_columns(table: pa.Table, columns: tuple[tuple[str, T.SqlType], ...]) -> pa.Table:
    """Add the columns the plan expects but the data lacks (a schemaless stream's unseen keys) as NULLs."""
    present = set(table.column_names)
    for name, t in columns:
        if name not in present:
            table = table.append_column(pa.field(name, t.arrow()), pa.nulls(table.num_rows, t.arrow()))
    return table


class NeedsLiterals(Exception):
    """A query with parameter values needs Spark, which takes them only as literals."""


def run_blocking(engine: Engine, plan: QueryPlan, session: SessionInfo,
                 handle: embedded.Interruptible | None = None,
                 limit_result: bool = False) -> tuple[str, list[tuple[Any, ...]]]:
    """Returns the engine used and the rows. `limit_result`: a result for the client, held in
    memory, so max_result_rows / max_result_bytes apply (54000)."""
    if plan.count_of is not None:
        return "count", [(_row_count(engine, plan.count_of),)]
    tables = gather_inputs(engine, plan, session)
    input_rows = sum(t.num_rows for t in tables.values())
    spark = engine.spark
    threshold = engine.settings.spark_read_threshold_rows
    override = session.settings.get("streamdb.spark_read_threshold_rows")
    chosen = False
    if override is not None and override.strip().lstrip("-").isdigit():
        threshold = int(override)  # per-session override, e.g. to force Spark in tests
        chosen = True
    # Reading a view never starts a Spark job unless the session asks for one: its rows are in
    # the driver already, and shipping them to the pipelines' JVM made a 2M-row view's read take
    # 1.4-12 s (0.04-0.09 s embedded) and once ran that heap out under a load (docs/serving.md).
    use_spark = (spark is not None and input_rows > threshold and (chosen or not _reads_a_view(engine, plan))
                 and all(not n.startswith("sys_") for n in tables)
                 and sum(t.nbytes for t in tables.values()) <= spark.max_input_bytes())
    if use_spark and plan.params:
        raise NeedsLiterals
    if use_spark:
        assert spark is not None
        spark.wait_ready(timeout=120)
        result = spark.run_query(plan.spark_sql, tables)
        engine_used = "spark"
    else:
        result = embedded.run(plan.duckdb_sql, tables, [duck_value(v) for v in plan.params], handle)
        engine_used = "embedded"
    if limit_result:
        limits.check_result_size(
            result, limits.effective_max_rows(engine.settings.max_result_rows, session.settings),
            engine.settings.max_result_bytes)
    return engine_used, arrow_to_rows(result, plan.columns)


def _reads_a_view(engine: Engine, plan: QueryPlan) -> bool:
    return any(inp.relation_id is not None and (rel := engine.catalog.by_id(inp.relation_id)) is not None
               and rel.kind == "materialized_view" for inp in plan.inputs)


def _row_count(engine: Engine, relation_id: int) -> int:
    """`SELECT count(*) FROM rel`: the row count the reader keeps from the relation's log (a
    stream's events, a view's weights; a table's cached rows), without building a view's rows."""
    rel = engine.catalog.by_id(relation_id)
    if rel is None:
        raise UndefinedTable(f"relation {relation_id} was dropped while the query ran")
    if failpoints.ENABLED:
        failpoints.read_pause(rel.name)
    with engine.storage.snapshot() as snap:
        if not stored_in(snap, rel):  # a DROP committed after the catalog above was read
            raise UndefinedTable(f'relation "{rel.name}" was dropped while the query ran')
        return engine.reader.row_count(rel, snap)


def lookup_rows(engine: Engine, plan: QueryPlan, *, build: bool) -> list[tuple[Any, ...]] | None:
    """A point lookup answered from the relation's hash index (a table's whole primary key: by
    its row's key, `_row_by_primary_key`). Without `build`, None unless the index is current
    (then it costs microseconds, fit for the event loop)."""
    lookup = plan.lookup
    assert lookup is not None
    rel = engine.catalog.by_id(lookup.relation_id)
    if rel is None:
        raise UndefinedTable(f"relation {lookup.relation_id} was dropped while the query ran")
    values = tuple(plan.params[p - 1] if p else v for p, v in zip(lookup.key_params, lookup.key_literals,
                                                                  strict=True))
    if rel.kind == "table" and rel.primary_key and not rel.schemaless \
            and sorted(lookup.key_columns) == sorted(rel.primary_key):
        return _row_by_primary_key(engine, rel, plan, dict(zip(lookup.key_columns, values, strict=True)))
    if build:
        with engine.storage.snapshot() as snap:
            if not stored_in(snap, rel):  # dropped since the catalog above (gather_inputs)
                raise UndefinedTable(f'relation "{rel.name}" was dropped while the query ran')
            index: KeyIndex | None = engine.reader.key_index(rel, snap, lookup.key_columns)
    else:
        offsets = tuple(engine.storage.committed_end_offset(rel.id, p) for p in range(rel.partitions))
        index = engine.reader.current_key_index(rel, offsets, lookup.key_columns)  # type: ignore[arg-type]
    if index is None:
        return None
    # NULL equals nothing, itself included.
    positions = () if None in values else index.positions.get(values[0] if len(values) == 1 else values, ())
    if not positions:
        return []
    end = index.table.num_rows  # an index extended for a newer table holds rows past this one
    return _picked_rows(plan, index.table.schema, index.values, [p for p in positions if p < end])


def _picked_rows(plan: QueryPlan, schema: pa.Schema, values_of: Callable[[str], list[Any]],
                 positions: list[int]) -> list[tuple[Any, ...]]:
    """A lookup's output columns at `positions` of a table's columns (as Python values), as
    clients get them."""
    assert plan.lookup is not None
    out = []
    for name, col in zip(plan.lookup.outputs, plan.columns, strict=True):
        if isinstance(name, int):  # a constant
            out.append([name] * len(positions))
            continue
        raw = values_of(name)
        convert = value_converter(schema.field(name).type, col.type)
        picked = [raw[p] for p in positions]
        out.append(picked if convert is None else [convert(v) for v in picked])
    return list(zip(*out, strict=True))


def _row_by_primary_key(engine: Engine, rel: RelationDef, plan: QueryPlan,
                        key: dict[str, Any]) -> list[tuple[Any, ...]]:
    """A table's row by its whole primary key: one read of its state store, where a table's
    rows are kept by their key (as UPDATE and DELETE by key read them). Whatever the table's
    size and however recently it was written, unlike the hash index over its cached rows,
    which a change that removes rows makes the next lookup patch (~20 ms at 500k rows): a few
    reads of RocksDB, fit for the event loop."""
    lookup = plan.lookup
    assert lookup is not None
    if any(v is None for v in key.values()):
        return []  # NULL equals nothing
    row_key = C.key_of(tuple(key[name] for name in rel.primary_key))
    with engine.storage.snapshot() as snap:
        raw = snap.get(state_store(rel.id), row_key)
        # No row: the table may have been dropped since the planner's catalog (its rows go in
        # the same commit), which is an error, not an empty answer. Checked only then, as a row
        # found was the table's in this snapshot.
        if raw is None and not stored_in(snap, rel):
            raise UndefinedTable(f'relation "{rel.name}" was dropped while the query ran')
    if raw is None:
        return []
    row = C.decode_state_row(raw)[0]
    types = {c.name: c.type for c in rel.columns}
    if all(isinstance(name, int) or (types[name].oid in _AS_STORED and col.type.oid == types[name].oid)
           for name, col in zip(lookup.outputs, plan.columns, strict=True)):
        names = rel.column_names()
        return [tuple(name if isinstance(name, int) else row[names.index(name)] for name in lookup.outputs)]
    table = keyed_rows_table(rel, [row], [row_key])  # the values as a query over the rows gives them
    return _picked_rows(plan, table.schema, lambda name: table.column(name).to_pylist(), [0])


# Types whose stored Python values are what a read through Arrow gives back (a real is not: as a
# float32 it reads back rounded).
_AS_STORED = frozenset(t.oid for t in (T.BOOLEAN, T.SMALLINT, T.INTEGER, T.BIGINT, T.TEXT, T.VARCHAR, T.DOUBLE))


def duck_value(v: Any) -> Any:
    """A parameter value as DuckDB binds it (intervals and the like travel as text)."""
    import datetime as dt
    import decimal

    if v is None or isinstance(v, (bool, int, float, str, bytes, decimal.Decimal, dt.date, dt.datetime, dt.time)):
        return v
    return str(v)


async def run(engine: Engine, plan: QueryPlan, session: SessionInfo) -> list[tuple[Any, ...]]:
    return (await run_reporting_engine(engine, plan, session))[1]


def check_views_readable(engine: Engine, plan: QueryPlan) -> None:
    """A failing materialized view is read as its error (as Materialize does), not as stale rows."""
    for inp in plan.inputs:
        if inp.relation_id is not None:
            error = engine.views.read_error(inp.relation_id)
            if error is not None:
                raise error


async def run_reporting_engine(engine: Engine, plan: QueryPlan, session: SessionInfo,
                               limit_result: bool = False) -> tuple[str, list[tuple[Any, ...]]]:
    check_views_readable(engine, plan)
    if plan.lookup is not None:
        # A current index answers on the event loop: a thread hop would cost more than the lookup.
        rows = lookup_rows(engine, plan, build=False)
        if rows is None:
            rows = await asyncio.to_thread(lookup_rows, engine, plan, build=True)
        assert rows is not None
        return "index", rows
    handle = embedded.Interruptible()
    try:
        return await asyncio.to_thread(run_blocking, engine, plan, session, handle, limit_result)
    except asyncio.CancelledError:
        handle.interrupt()  # a timeout or cancel request: stop the embedded query's work too
        raise


def _pg_array_text(v: list[Any]) -> str:
    def item(x: Any) -> str:
        if x is None:
            return "NULL"
        if isinstance(x, list):
            return _pg_array_text(x)
        if isinstance(x, bool):
            return "t" if x else "f"
        s = str(x)
        if s == "" or any(ch in s for ch in ',{}" \\') or s.upper() == "NULL":
            return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return s
    return "{" + ",".join(item(x) for x in v) + "}"


def value_converter(arrow_type: pa.DataType, t: T.SqlType) -> Any:
    """What turns a column's Python values (to_pylist) into the values clients get; None: as they are."""
    if (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)) and \
            not isinstance(t, T.ArraySqlType):
        return lambda v: None if v is None else _pg_array_text(v)
    if pa.types.is_struct(arrow_type) or pa.types.is_map(arrow_type):
        import json

        return lambda v: None if v is None else json.dumps(v, default=str)
    if t is T.INTERVAL or t == T.NUMERIC:
        return lambda v: from_arrow_value(v, t)
    if isinstance(t, T.ArraySqlType) and t.element in (T.INTERVAL, T.NUMERIC):
        # e.g. array_agg over an INTERVAL: Arrow's MonthDayNano elements (tuples) would otherwise
        # be formatted as nested arrays.
        element = t.element
        return lambda v: None if v is None else [from_arrow_value(x, element) for x in v]
    return None


def arrow_to_rows(table: pa.Table, columns: tuple[Column, ...]) -> list[tuple[Any, ...]]:
    cols: list[list[Any]] = []
    for i, col in enumerate(columns):
        arr = table.column(i)
        try:
            values = arr.to_pylist()
        except (OverflowError, ValueError) as e:  # e.g. 'infinity'::date: no Python date holds it
            raise DataException(f'{col.type.name} value of column "{col.name}" out of the range StreamDB '
                                f"can return: {e}", sqlstate="22008",
                                hint="Infinite dates and timestamps are not supported.") from e
        convert = value_converter(arr.type, col.type)
        cols.append(values if convert is None else [convert(v) for v in values])
    return list(zip(*cols, strict=True)) if cols else [() for _ in range(table.num_rows)]
