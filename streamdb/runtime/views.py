"""Maintains materialized views: an epoch driver whose relational work runs on Spark.

Writes wake the driver. Each epoch takes one storage snapshot per view (in
dependency order, so a view over a view sees its input's new state), runs the
view's query on Spark over the inputs at that snapshot, and applies the
difference from the stored result as one atomic commit: the view's change batch
(rows with weights), its new state, and the input offsets it now reflects. A
replayed epoch after a crash recomputes the same result and changes nothing, so
maintenance is exactly-once. Reads of a view come from its stored state and
never start a Spark job. See docs/views.md.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from streamdb import metrics as M
from streamdb import types as T
from streamdb.catalog import CatalogSnapshot, RelationDef
from streamdb.errors import (
    DiskFull,
    InternalError,
    Notice,
    ObjectNotInPrerequisiteState,
    QueryCanceled,
    StreamDBError,
    UndefinedTable,
)
from streamdb.planner import query as query_planner
from streamdb.planner.aggregate import IncrementalAggregate, incremental_aggregate
from streamdb.planner.coerce import coerce
from streamdb.planner.context import PlanContext, SessionInfo
from streamdb.planner.create_view import view_query
from streamdb.planner.fused import JSON_OPTIONS, FlatQuery, flatten, fused_aggregate_sql
from streamdb.planner.incremental import WEIGHT, delta_name, is_time_dependent, linear_delta_sql
from streamdb.planner.plans import QueryPlan, SubscribePlan
from streamdb.runtime import changes as C
from streamdb.runtime.api import Column
from streamdb.runtime.query import arrow_to_rows, with_planned_columns
from streamdb.runtime.reader import log_only_from, state_store
from streamdb.runtime.subscriptions import Subscription
from streamdb.storage.base import Append, Commit, partials_store

if TYPE_CHECKING:
    from streamdb.runtime.engine import Engine

log = logging.getLogger("streamdb.views")

META = "meta"
FLUSH_TIMEOUT_SECONDS = 300
# Views whose result depends on the time (temporal filters) are re-evaluated this often.
TICK_SECONDS = 1.0
DISK_FULL_RETRY_SECONDS = 2.0  # how often a view whose commit hit a full disk tries again
VIEWS_PER_JOB = 16
_SYSTEM_SESSION = SessionInfo("streamdb", "streamdb")
_WEIGHT_COLUMN = Column(WEIGHT, T.BIGINT)


def meta_key(view_id: int) -> bytes:
    return f"view:{view_id}".encode()


@dataclass
class ViewStatus:
    epochs: int = 0
    last_epoch_ms: float | None = None
    last_epoch_at: float | None = None
    error: str | None = None
    error_sqlstate: str | None = None
    # The error is in the view's rows (a pipeline view's error arm: a division by zero, a bad
    # cast), so the view still advances and a retraction can heal it; else maintenance is stuck.
    error_in_rows: bool = False
    processed: dict[int, tuple[int, ...]] = field(default_factory=dict)
    incremental: bool = False
    # Maintained from stored partial aggregates (True), by recomputation (False), or not yet decided.
    partials: bool | None = None
    time_dependent: bool = False
    # How the last epoch ran on Spark: "own" job, "batched" (a UNION ALL of views), "shared" (one
    # scan of an input's changes for every view over it, planner/fused.py).
    spark_job: str | None = None
    emitted_until: dt.datetime | None = None  # EMIT ON WINDOW CLOSE: windows ending by here are out
    # Maintained by a streaming pipeline (runtime/pipelines.py): its name; None: the epoch driver.
    pipeline: str | None = None
    strategy: str | None = None  # what SHOW QUERIES shows in brackets
    # The input offsets the failing epoch read (None: not known): FLUSH waits for another try
    # once the inputs have moved past them, since the writes after it may have removed the cause.
    failed_at: dict[int, tuple[int, ...]] | None = None


def _as_is(arrow_type: pa.DataType, t: T.SqlType) -> bool:
    """Whether to_pylist() of this Arrow type already gives what coerce() then _normalize() would
    for a column of type `t` (a row's key is the repr of its values: they must be identical)."""
    if pa.types.is_integer(arrow_type) and not pa.types.is_unsigned_integer(arrow_type):
        width = {T.SMALLINT.oid: 16, T.INTEGER.oid: 32, T.BIGINT.oid: 64}.get(t.oid)
        return width is not None and arrow_type.bit_width <= width
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return t == T.TEXT or (t.oid == T.VARCHAR.oid and t.max_length is None)
    if pa.types.is_boolean(arrow_type):
        return t == T.BOOLEAN
    if pa.types.is_float64(arrow_type):
        return t == T.DOUBLE
    if pa.types.is_timestamp(arrow_type):
        return arrow_type.tz is None and t == T.TIMESTAMP
    if pa.types.is_date32(arrow_type):
        return t == T.DATE
    return False


def _same_values(arrow_type: pa.DataType, t: T.SqlType) -> bool:
    """Whether a column of this Arrow type holds exactly what a view column of type `t` stores
    (coerce, _normalize and to_arrow_value would give back the same value for every row)."""
    if arrow_type != t.arrow():
        return False
    return t.max_length is None and t not in (T.JSON, T.JSONB, T.UUID, T.INTERVAL) \
        and not isinstance(t, T.ArraySqlType)


def _decimal_fits(arrow_type: pa.DataType, t: T.SqlType) -> bool:
    """Whether every value of a decimal Arrow type is a value of NUMERIC column type `t` as it
    is: its scale at most the stored one (no rounding), and for numeric(p, s) its integer digits
    within p - s (no overflow)."""
    if t != T.NUMERIC or not pa.types.is_decimal(arrow_type):
        return False
    target = t.arrow()
    if not pa.types.is_decimal(target) or arrow_type.scale > target.scale:
        return False
    bounds = t.precision_scale
    return bounds is None or arrow_type.precision - arrow_type.scale <= bounds[0] - bounds[1]


def _exact_decimal(arr: pa.ChunkedArray, t: T.SqlType) -> pa.ChunkedArray | None:
    """A decimal column (Spark's decimal(p, s) of `0.908 * price`, say) as a NUMERIC column's
    stored decimal, when that is exact: a scale up to the stored one only gains zeros, as
    quantize() in to_arrow_value gives, and for numeric(p, s) integer digits that fit p - s
    cannot overflow it. None: convert value by value (rounding, a precision to check, or a value
    too large, whose error that path raises)."""
    if not _decimal_fits(arr.type, t):
        return None
    target = t.arrow()
    try:
        return arr.cast(target)  # safe: raises rather than overflow
    except pa.ArrowInvalid:
        return None


def _normalize(v: Any) -> Any:
    if isinstance(v, decimal.Decimal):
        # In the stored numerics' context: the default one's 28 digits would round their 38 (a
        # keyed view's row then differed from the same row of an append-only one).
        return v.normalize(C.NUMERIC_CONTEXT) if v.is_finite() else v
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.UTC)
    if isinstance(v, list):  # arrays (array_agg, INT[] columns): rows are counted in a Counter
        return tuple(_normalize(x) for x in v)
    return v


def result_rows(table: pa.Table, columns: tuple[Column, ...]) -> Counter[tuple[Any, ...]]:
    """A query's result as a multiset of rows, values normalized so equal rows count together."""
    return Counter(tuple(_normalize(v) for v in r) for r in arrow_to_rows(table, columns))


@dataclass
class _Work:
    view: RelationDef
    st: ViewStatus
    plan: QueryPlan
    delta_sql: str | None
    offsets: dict[int, tuple[int, ...]]
    tables: dict[str, pa.Table]
    started: float
    close_until: dt.datetime | None = None  # EMIT ON WINDOW CLOSE: the input's watermark now
    eowc: bool = False
    aggregate: IncrementalAggregate | None = None
    # The inputs whose changes this epoch reads, by registered name: from which offsets.
    delta_from: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def sql(self) -> str:
        if self.aggregate is not None:
            return self.aggregate.delta_sql
        return self.delta_sql or self.plan.spark_sql

    @property
    def columns(self) -> tuple[Column, ...]:
        """The result's columns: the view's, plus the weight for an incremental epoch, or the
        partial aggregates of an incremental aggregate."""
        if self.aggregate is not None:
            return self.aggregate.partial_columns
        return (*self.plan.columns, _WEIGHT_COLUMN) if self.delta_sql is not None else self.plan.columns


def _union_sql(work: list[_Work]) -> str:
    """One Spark job for many views: each view's rows as JSON text, tagged with its slot."""
    return " UNION ALL ".join(
        f"SELECT {slot} AS __v, to_json(struct(*), {JSON_OPTIONS}) AS __r FROM ({w.sql}) AS __q{slot}"
        for slot, w in enumerate(work))


def _json_safe(t: T.SqlType) -> bool:
    """Types whose JSON text reads back exactly through the assignment rules (coerce)."""
    return t in (T.BOOLEAN, T.SMALLINT, T.INTEGER, T.BIGINT, T.REAL, T.DOUBLE, T.NUMERIC, T.TEXT, T.VARCHAR,
                 T.DATE, T.TIMESTAMP, T.TIMESTAMPTZ, T.JSON, T.JSONB, T.UUID)


def closing_point(view: RelationDef, names: list[str]) -> tuple[int, dt.timedelta] | None:
    """An EMIT ON WINDOW CLOSE view's row (of columns `names`) is final once the watermark reaches
    its column at this index plus this offset (window_end; the watermark column; window_start
    plus the size)."""
    extra = dict(view.extra)
    column = extra.get("eowc_column", "window_end")
    if extra.get("eowc_input") is None or column not in names:
        return None
    return names.index(column), dt.timedelta(seconds=float(extra.get("eowc_offset_seconds") or 0))


def _aware(t: Any) -> dt.datetime | None:
    if not isinstance(t, dt.datetime):
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def _add_weights(view: RelationDef, snap: Any, store: str, weights: Counter[tuple[Any, ...]],
                 old: dict[bytes, tuple[tuple[Any, ...], int]],
                 new_by_key: dict[bytes, tuple[tuple[Any, ...], int]]) -> None:
    """Rows' changed multiplicities: each row's stored count (into `old`) plus its weight."""
    items = list(weights.items())
    keys = [C.key_of(row) for row, _ in items]
    decode = C.decode_view_row
    for key, raw, (row, w) in zip(keys, snap.get_many(store, keys), items, strict=True):
        if raw is not None:
            old[key] = decode(raw)
        n = old.get(key, (row, 0))[1] + w
        if n < 0:
            raise InternalError(f'view "{view.name}" would hold a row {-n} times fewer than zero')
        new_by_key[key] = (row, n)


def stage_changes(view: RelationDef, snap: Any, weights: Counter[tuple[Any, ...]], commit: Commit,
                  rowtime: dt.datetime) -> int:
    """Add a view's row changes (row -> weight) to `commit`: its stored multiset updated and one change
    batch appended to its log. Returns how many rows changed."""
    store = state_store(view.id)
    old: dict[bytes, tuple[tuple[Any, ...], int]] = {}
    new_by_key: dict[bytes, tuple[tuple[Any, ...], int]] = {}
    _add_weights(view, snap, store, weights, old, new_by_key)
    rows, counts, keys = [], [], []
    for key, (row, m) in new_by_key.items():
        n = old.get(key, (row, 0))[1]
        if m == n:
            continue
        rows.append(row)
        counts.append(m - n)
        keys.append(key)
        if m == 0:
            commit.deletes.append((store, key))
        else:
            commit.puts.append((store, key, C.encode_view_row(row, m)))
    if rows:
        payload = C.encode_batch(view, rows, [rowtime] * len(rows), counts, keys)
        commit.appends.append(Append(view.id, 0, payload, len(rows), weights=sum(counts)))
    return len(rows)


def _coerce_partial(value: Any, column: Column) -> Any:
    t = column.type
    if isinstance(t, T.ArraySqlType) and t.element is not None:  # count(DISTINCT)'s values
        return None if value is None else [coerce(v, t.element, column.name) for v in value]
    return coerce(value, t, column.name)


def levels(views: list[RelationDef]) -> list[list[RelationDef]]:
    """Views grouped so each group depends only on earlier groups (views in topological order)."""
    depth: dict[int, int] = {}
    for v in views:
        depth[v.id] = 1 + max((depth[d] for d in v.depends_on if d in depth), default=-1)
    grouped: dict[int, list[RelationDef]] = {}
    for v in views:
        grouped.setdefault(depth[v.id], []).append(v)
    return [grouped[k] for k in sorted(grouped)]


def topological(catalog: CatalogSnapshot) -> list[RelationDef]:
    views = {r.id: r for r in (*catalog.relations.values(), *catalog.transient.values())
             if r.kind == "materialized_view"}
    order: list[RelationDef] = []
    seen: set[int] = set()

    def visit(r: RelationDef) -> None:
        if r.id in seen:
            return
        seen.add(r.id)
        for dep in r.depends_on:
            if dep in views:
                visit(views[dep])
        order.append(r)

    for r in sorted(views.values(), key=lambda r: r.id):
        visit(r)
    return order


class ViewMaintainer:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.status: dict[int, ViewStatus] = {}
        self._wake = asyncio.Event()
        self._progress = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._epoch_lock = asyncio.Lock()
        self.subscriptions: dict[int, Subscription] = {}
        # Planning a view (typing, Spark SQL) costs milliseconds; with many views it would
        # dominate an epoch, so plans are kept per view for the catalog version they were made at.
        self._plans: dict[int, tuple[int, QueryPlan, str | None, IncrementalAggregate | None]] = {}
        self._flat_cache: dict[str, FlatQuery | None] = {}
        self._in_state_store: set[int] = set()  # views known not to be kept as their log alone
        from streamdb.runtime.pipelines import PipelineManager

        # Views with a dataflow run on streaming pipelines; this loop recomputes the rest.
        self.pipelines = PipelineManager(engine, self)

    def read_error(self, relation_id: int) -> StreamDBError | None:
        """The error reading this relation gives while it is a failing view (None: readable)."""
        st = self.status.get(relation_id)
        if st is None or st.error is None:
            return None
        view = self.engine.catalog.snapshot().by_id(relation_id)
        if view is None or view.kind != "materialized_view":
            return None
        return StreamDBError(f'materialized view "{view.name}" is failing: {st.error}',
                             sqlstate=st.error_sqlstate or "XX000",
                             hint="SHOW QUERIES shows each view's state; the view recovers once the cause "
                                  "is gone (the row retracted, the fault over).")

    def status_of(self, view_id: int) -> ViewStatus:
        return self.status.setdefault(view_id, ViewStatus())

    def progressed(self, wake: bool = False) -> None:
        """Some view moved on (callable from any thread): FLUSH waiters look again."""
        loop = self.engine.loop
        if loop is None or loop.is_closed():
            return

        async def notify() -> None:
            async with self._progress:
                self._progress.notify_all()

        def schedule() -> None:
            loop.create_task(notify())
            if wake:
                self._wake.set()

        loop.call_soon_threadsafe(schedule)

    def start(self) -> None:
        self._load_progress()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="view-maintainer")
        self._wake.set()  # catch up on anything written before a restart

    async def stop(self) -> None:
        await asyncio.to_thread(self.pipelines.stop)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - shutting down
                pass

    def notify(self) -> None:
        self._wake.set()

    def _load_progress(self) -> None:
        with self.engine.storage.snapshot() as snap:
            for view in topological(self.engine.catalog.snapshot()):
                raw = snap.get(META, meta_key(view.id))
                st = self.status.setdefault(view.id, ViewStatus())
                if raw:
                    meta = json.loads(raw)
                    st.processed = {int(k): tuple(v) for k, v in meta["inputs"].items()}
                    st.epochs = meta.get("epoch", 0)
                    st.partials = bool(meta.get("partials"))
                    if meta.get("emitted_until"):
                        st.emitted_until = dt.datetime.fromisoformat(meta["emitted_until"])

    async def _run(self) -> None:
        spark = self.engine.spark
        if spark is not None:
            # Nothing to maintain before Spark is up; starting the embedded engine's threads
            # while the JVM is being launched has made the launch fail.
            try:
                await asyncio.to_thread(spark.wait_ready, FLUSH_TIMEOUT_SECONDS)
            except StreamDBError as e:
                log.error("views cannot be maintained: %s", e.message)
        while True:
            # Time-dependent views tick; views whose commit failed for lack of disk space retry
            # (the space may be freed without any new write to wake the loop).
            timeout = None
            if any(st.time_dependent for st in self.status.values()) or self.pipelines.retry_pending():
                timeout = TICK_SECONDS
            elif any(st.error_sqlstate == DiskFull.sqlstate for st in self.status.values()):
                timeout = DISK_FULL_RETRY_SECONDS
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)
            except TimeoutError:
                pass
            self._wake.clear()
            await asyncio.sleep(0.01)  # let a burst of writes land in one epoch
            try:
                await self.run_epoch()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - keep maintaining; the error is on the view's status
                log.exception("view maintenance epoch failed")
            async with self._progress:
                self._progress.notify_all()

    # ---- one epoch -----------------------------------------------------------------------

    async def run_epoch(self) -> None:
        async with self._epoch_lock:
            catalog = self.engine.catalog.snapshot()
            for view_id in [v for v in self.status if catalog.by_id(v) is None]:
                del self.status[view_id]  # dropped: forget it, time-dependent ticks included
                self._plans.pop(view_id, None)
                self._in_state_store.discard(view_id)
            if self.pipelines.synced_version != catalog.version or self.pipelines.retry_pending():
                try:
                    await asyncio.to_thread(self.pipelines.sync)
                except Exception:  # noqa: BLE001 - the views keep their errors; try again next epoch
                    log.exception("starting the view pipelines failed")
            mine = [v for v in topological(catalog) if not self.pipelines.owns(v.id)]
            for level in levels(mine):
                await asyncio.to_thread(self._maintain_level, level)
            for sub in list(self.subscriptions.values()):
                try:
                    await asyncio.to_thread(self._advance, sub)
                except StreamDBError as e:
                    sub.fail(e)
                except Exception as e:  # noqa: BLE001
                    log.exception("push query failed")
                    sub.fail(InternalError(f"internal error: {type(e).__name__}: {e}"))

    def input_offsets(self, view: RelationDef, catalog: CatalogSnapshot, snap) -> dict[int, tuple[int, ...]]:
        """The ends, in `snap`, of the logs of what the view depends on."""
        out = {}
        for rel_id in view.depends_on:
            rel = catalog.by_id(rel_id)
            if rel is not None:
                out[rel_id] = self.engine.reader.end_offsets(rel, snap)
        return out

    def _plan(self, view: RelationDef,
              catalog: CatalogSnapshot) -> tuple[QueryPlan, str | None, IncrementalAggregate | None]:
        """The view's query plan; when the query is linear, the Spark SQL of its delta; when it is
        an aggregate that partials can maintain, how."""
        cached = self._plans.get(view.id)
        if cached is not None and cached[0] == catalog.version:
            return cached[1], cached[2], cached[3]
        ctx = PlanContext(catalog, _SYSTEM_SESSION)
        query = view_query(view)
        plan = query_planner.plan_query(query, ctx)
        delta_sql = linear_delta_sql(plan.resolved_sql, plan.inputs)
        aggregate = None
        if delta_sql is None and "eowc_input" not in dict(view.extra) and not is_time_dependent(plan.resolved_sql):
            aggregate = incremental_aggregate(query, ctx, tuple(c.type for c in plan.columns))
        self._plans[view.id] = (catalog.version, plan, delta_sql, aggregate)
        return plan, delta_sql, aggregate

    def _row(self, values: tuple[Any, ...], view: RelationDef) -> tuple[Any, ...]:
        return tuple(_normalize(coerce(v, c.type, c.name)) for v, c in zip(values, view.columns, strict=True))

    @staticmethod
    def rows_of(table: pa.Table, view: RelationDef) -> list[tuple[Any, ...]]:
        """The table's rows (its first columns are the view's) as the view's row values, the same
        as `_row` gives row by row, converted a column at a time: a column whose Arrow type
        already holds the column type's values (a bigint as int64) is taken as it is."""
        columns = []
        for i, c in enumerate(view.columns):
            arr = table.column(i)
            if _as_is(arr.type, c.type):
                columns.append(arr.to_pylist())
                continue
            if _decimal_fits(arr.type, c.type):
                # Neither rounded nor out of range (nor NaN: Arrow has none), so coerce() keeps
                # each value's number and _normalize() is all that is left: 4x faster (Nexmark
                # q17's avg and sum).
                columns.append([_normalize(v) for v in arr.to_pylist()])
                continue
            values = arrow_to_rows(table.select([i]), (Column(c.name, c.type),))
            t, name = c.type, c.name
            columns.append([_normalize(coerce(v, t, name)) for (v,) in values])
        return list(zip(*columns, strict=True)) if columns else [() for _ in range(table.num_rows)]

    @classmethod
    def log_batch(cls, table: pa.Table, view: RelationDef, rowtime: dt.datetime) -> pa.Table:
        """An append-only view's new rows (the table's first columns, weights in its last) as a
        batch of its change log (changes.batch_schema), built a column at a time. A column whose
        Arrow type already is the view column's is taken as it is (the values `stage_changes`
        would store are the same); the others go value by value through the same conversions.
        Rows with weight 0 are left out; a retraction is an internal error (the view is kept
        as its log only because its rows never go away). No row keys: no state is keyed by them."""
        weights = table.column(table.num_columns - 1).cast(pa.int64())
        if pc.any(pc.less(weights, 0)).as_py():
            raise InternalError(f'append-only view "{view.name}" received a retraction')
        if pc.any(pc.equal(weights, 0)).as_py():
            keep = pc.not_equal(weights, 0)
            table, weights = table.filter(keep), weights.filter(keep)
        n = table.num_rows
        arrays: list[pa.Array | pa.ChunkedArray] = []
        for i, c in enumerate(view.columns):
            arr, target = table.column(i), c.type.arrow()
            if _same_values(arr.type, c.type):
                arrays.append(arr)
            elif pa.types.is_integer(arr.type) and pa.types.is_integer(target) \
                    and _as_is(arr.type, c.type):  # a narrower integer: widening is exact
                arrays.append(arr.cast(target))
            elif (exact := _exact_decimal(arr, c.type)) is not None:
                arrays.append(exact)
            else:
                values = cls.rows_of(table.select([i]), view.with_columns((c,)))
                arrays.append(pa.array([C.to_arrow_value(v, c.type) for (v,) in values], target))
        arrays.append(pa.repeat(pa.scalar(rowtime, pa.timestamp("us", tz="UTC")), n))
        arrays.append(weights)
        arrays.append(pa.nulls(n, pa.binary()))
        return pa.Table.from_arrays(arrays, schema=C.batch_schema(view))

    def _maintain_level(self, level: list[RelationDef]) -> None:
        """One epoch for views that do not depend on each other: their queries share the
        inputs' DataFrames and run as concurrent jobs in one Spark session."""
        engine = self.engine
        catalog = engine.catalog.snapshot()
        # A view this loop has not maintained yet may be kept as its log by the pipelines: it is
        # theirs until they have synced, then rebuilt here (checked once per view, not per epoch).
        unchecked = [v for v in level if v.id not in self._in_state_store]
        with engine.storage.snapshot() as snap:
            kept_as_log = {v.id for v in unchecked if log_only_from(snap, v.id) is not None}
        if kept_as_log and self.pipelines.synced_version < 0:
            level = [v for v in level if v.id not in kept_as_log]
            unchecked = [v for v in unchecked if v.id not in kept_as_log]
        for view in unchecked:
            if view.id in kept_as_log:
                self.pipelines.release(view)
            self._in_state_store.add(view.id)
        work: list[_Work] = []
        with engine.storage.snapshot() as snap:
            for view in level:
                st = self.status.setdefault(view.id, ViewStatus())
                try:
                    item = self._prepare(view, st, catalog, snap)
                except StreamDBError as e:
                    self._record_error(view, st, e)
                    continue
                except Exception as e:  # noqa: BLE001 - a bug in one view fails that view, loudly, not the epoch
                    log.exception("view %s failed", view.name)
                    self._record_error(view, st, InternalError(f"{type(e).__name__}: {e}"))
                    continue
                if item is not None:
                    work.append(item)
        if not work:
            return
        spark = engine.spark
        if spark is None:
            for item in work:
                self._record_error(item.view, item.st, ObjectNotInPrerequisiteState(
                    "materialized views need Spark, which is disabled"))
            return
        # Views whose inputs' changes start at different offsets (a view just created beside
        # older ones) register different tables under the same names: they run separately.
        groups: list[tuple[dict[str, tuple[int, ...]], list[_Work]]] = []
        for item in work:
            for starts, members in groups:
                if all(starts.get(name, start) == start for name, start in item.delta_from.items()):
                    starts.update(item.delta_from)
                    members.append(item)
                    break
            else:
                groups.append((dict(item.delta_from), [item]))
        results: list[list[tuple[Any, ...]] | StreamDBError] = []
        work = [item for _, group in groups for item in group]
        for _, group in groups:
            tables: dict[str, pa.Table] = {}
            for item in group:
                tables.update(item.tables)
            try:
                spark.wait_ready(timeout=FLUSH_TIMEOUT_SECONDS)
                results += self._run_level(spark, group, tables)
            except StreamDBError as e:
                results += [e] * len(group)
        failed_on_spark = sum(isinstance(r, StreamDBError) for r in results)
        if failed_on_spark:
            engine.metrics.spark_failed(M.MATERIALIZED_VIEW, failed_on_spark)
        # Every view's changes, state and offsets go into one atomic commit (one sync for the
        # level, not one per view); a view whose epoch failed is left out and keeps its error.
        level_commit = Commit()
        applied: list[tuple[_Work, Callable[[], None]]] = []
        for item, result in zip(work, results, strict=True):
            try:
                if isinstance(result, StreamDBError):
                    raise result
                done = self._apply(item, result, level_commit)
                if done is not None:
                    applied.append((item, done))
            except StreamDBError as e:
                self._record_error(item.view, item.st, e, attempted=item.offsets)
            except Exception as e:  # noqa: BLE001
                log.exception("view %s failed", item.view.name)
                self._record_error(item.view, item.st, InternalError(f"{type(e).__name__}: {e}"),
                                   attempted=item.offsets)
        if not applied:
            return
        try:
            engine.storage.commit(level_commit)
        except StreamDBError as e:
            for item, _ in applied:
                self._record_error(item.view, item.st, e)
            return
        engine.metrics.committed(level_commit)
        for item, done in applied:
            done()
            item.st.error = item.st.failed_at = None
            item.st.error_sqlstate = None

    def _run_level(self, spark: Any, work: list[_Work],
                   tables: dict[str, pa.Table]) -> list[list[tuple[Any, ...]] | StreamDBError]:
        """Every view's result rows. Views whose columns travel well as JSON run as one Spark job
        (a job costs 50-90 ms here whatever its size); the rest, or all if that job fails (one
        view's error must not fail the others), run as concurrent jobs of one session."""
        results: list[list[tuple[Any, ...]] | StreamDBError | None] = [None] * len(work)
        fused_sqls, decoders, fused = self._fused_jobs(work)
        batched = [i for i, w in enumerate(work) if len(work) > 1 and i not in fused
                   and all(_json_safe(c.type) for c in w.columns)]
        # Chunks of views per job: a UNION of very many subqueries is slow for Spark to plan, and
        # chunks run concurrently.
        chunks = [batched[k:k + VIEWS_PER_JOB] for k in range(0, len(batched), VIEWS_PER_JOB)]
        chunks = [c for c in chunks if len(c) > 1]

        # One registration of the inputs as DataFrames serves every job; the jobs run concurrently.
        single = [i for i in range(len(work)) if i not in fused and not any(i in chunk for chunk in chunks)]
        answers = spark.run_queries([_union_sql([work[i] for i in chunk]) for chunk in chunks]
                                    + [work[i].sql for i in single] + fused_sqls, tables)
        for decode, table in zip(decoders, answers[len(chunks) + len(single):], strict=True):
            if not isinstance(table, StreamDBError):
                decode(table, results)  # a failed fused job: its views run one by one below
        for i, w in enumerate(work):
            w.st.spark_job = "shared" if i in fused and results[i] is not None else "batched" if any(
                i in chunk for chunk in chunks) and results[i] is not None else "own"
        for chunk, table in zip(chunks, answers, strict=False):
            if isinstance(table, StreamDBError):
                continue  # these views run one by one below, so each error stays with its view
            per_view: dict[int, list[tuple[Any, ...]]] = {i: [] for i in chunk}
            for slot, text in zip(table.column(0).to_pylist(), table.column(1).to_pylist(), strict=True):
                per_view[chunk[slot]].append(tuple(json.loads(text, parse_float=decimal.Decimal).values()))
            for i, rows in per_view.items():
                results[i] = rows
        for i, answer in zip(single, answers[len(chunks):len(chunks) + len(single)], strict=True):
            results[i] = answer if isinstance(answer, StreamDBError) else arrow_to_rows(answer, work[i].columns)
        rest = [i for i, r in enumerate(results) if r is None]
        if rest:
            answers = spark.run_queries([work[i].sql for i in rest], tables)
            for i, answer in zip(rest, answers, strict=True):
                results[i] = answer if isinstance(answer, StreamDBError) else arrow_to_rows(answer, work[i].columns)
        return [r for r in results if r is not None]

    def _flat(self, sql: str) -> FlatQuery | None:
        if sql not in self._flat_cache:
            if len(self._flat_cache) > 10_000:
                self._flat_cache.clear()
            self._flat_cache[sql] = flatten(sql)
        return self._flat_cache[sql]

    def _fused_jobs(self, work: list[_Work]) -> tuple[list[str], list[Callable[[pa.Table, list[Any]], None]], set[int]]:
        """Spark jobs that each serve every view over one input's changes (see planner/fused.py):
        their SQL, how each result becomes the views' rows, and which views they serve."""
        by_input: dict[str, list[tuple[int, FlatQuery, IncrementalAggregate | None]]] = {}
        for i, w in enumerate(work):
            if len(w.delta_from) != 1 or w.eowc:
                continue
            q = None
            if w.aggregate is not None:
                keys = w.aggregate.argument_columns[:w.aggregate.group_count]
                q = self._flat(w.aggregate.rows_sql) if all(_json_safe(c.type) for c in keys) else None
            elif w.delta_sql is not None and all(_json_safe(c.type) for c in w.columns):
                q = self._flat(w.delta_sql)
            if q is not None:
                by_input.setdefault(q.table, []).append((i, q, w.aggregate))
        sqls: list[str] = []
        decoders: list[Callable[[pa.Table, list[Any]], None]] = []
        fused: set[int] = set()
        for table_name, items in by_input.items():
            plan = fused_aggregate_sql(table_name, [(q, a) for _, q, a in items]) if len(items) > 1 else None
            if plan is None:
                continue
            sqls.append(plan.sql)

            def decode(table: pa.Table, results: list[Any], items: list[tuple[int, FlatQuery,
                       IncrementalAggregate | None]] = items, slots: tuple[tuple[int, ...], ...] = plan.slots) -> None:
                rows: list[list[tuple[Any, ...]]] = [[] for _ in items]
                for row in zip(*(c.to_pylist() for c in table.columns), strict=True):
                    v = row[0]
                    agg = items[v][2]
                    if agg is None:  # a linear view: a changed row and its weight
                        if row[2]:
                            rows[v].append((*json.loads(row[1], parse_float=decimal.Decimal).values(), row[2]))
                        continue
                    group = list(json.loads(row[1], parse_float=decimal.Decimal).values()) if agg.group_count else []
                    rows[v].append((*group, row[2], *(row[c] for c in slots[v])))
                for (i, _, agg), view_rows, view_slots in zip(items, rows, slots, strict=True):
                    if agg is not None and not view_rows and not agg.group_count:
                        view_rows.append((None,) * (1 + len(view_slots)))  # a global aggregate's row
                    results[i] = view_rows

            decoders.append(decode)
            fused.update(i for i, _, _ in items)
        return sqls, decoders, fused

    def _record_error(self, view: RelationDef, st: ViewStatus, e: StreamDBError,
                      attempted: dict[int, tuple[int, ...]] | None = None) -> None:
        st.error, st.error_sqlstate, st.failed_at = e.message, e.sqlstate, attempted
        log.warning("view %s: %s", view.name, e.message)

    def _query_inputs(self, plan: QueryPlan, changes_only: bool, processed: dict[int, tuple[int, ...]],
                      catalog: CatalogSnapshot, snap) -> tuple[dict[str, pa.Table], dict[int, tuple[int, ...]]]:
        """A query's inputs at this snapshot, registered for Spark, and their end offsets. For a
        linear query only the changes since `processed`, under their delta names."""
        tables: dict[str, pa.Table] = {}
        offsets: dict[int, tuple[int, ...]] = {}
        for inp in plan.inputs:
            rel = catalog.by_id(inp.relation_id) if inp.relation_id is not None else None
            if rel is None:
                raise ObjectNotInPrerequisiteState(f'input "{inp.registered_name}" of the query no longer exists')
            offsets[rel.id] = self.engine.reader.end_offsets(rel, snap)
            if changes_only:
                delta = C.consolidated(self.engine.reader.read_delta(rel, snap, processed.get(rel.id, ())),
                                       [name for name, _ in inp.columns])
                tables[delta_name(inp.registered_name)] = with_planned_columns(delta, inp.columns)
            else:
                tables[inp.registered_name] = with_planned_columns(self.engine.reader.read_state(rel, snap),
                                                                   inp.columns)
        return tables, offsets

    def _prepare(self, view: RelationDef, st: ViewStatus, catalog: CatalogSnapshot, snap) -> _Work | None:
        """What a view's epoch needs: its inputs (or their changes) at this snapshot, and its SQL."""
        offsets = self.input_offsets(view, catalog, snap)
        due = st.time_dependent and (st.last_epoch_at is None or time.time() - st.last_epoch_at >= TICK_SECONDS)
        if offsets == st.processed and st.epochs > 0 and not due:
            return None
        started = time.monotonic()
        plan, delta_sql, aggregate = self._plan(view, catalog)
        st.time_dependent = is_time_dependent(plan.resolved_sql)
        eowc_input = dict(view.extra).get("eowc_input")
        close_until = None
        if eowc_input is not None:
            delta_sql = None  # final windows come from the whole input
            source = catalog.by_id(int(eowc_input))
            close_until = self.engine.watermarks.watermark(source, snap) if source is not None else None
        if st.partials is False:
            aggregate = None  # maintained by recomputation so far (stored partials would be stale)
        tables, _ = self._query_inputs(plan, delta_sql is not None or aggregate is not None, st.processed,
                                       catalog, snap)
        delta_from = {} if delta_sql is None and aggregate is None else {
            delta_name(i.registered_name): st.processed.get(i.relation_id, ()) for i in plan.inputs
            if i.relation_id is not None}
        return _Work(view, st, plan, delta_sql, offsets, tables, started, close_until, eowc_input is not None,
                     aggregate, delta_from)

    def _apply(self, item: _Work, result: list[tuple[Any, ...]], level_commit: Commit) -> Callable[[], None] | None:
        """Turn a query result into the view's changes, added to `level_commit` with the offsets
        they reflect; return what to record once that commit is durable (None: nothing to do)."""
        engine = self.engine
        view, st = item.view, item.st
        store = state_store(view.id)
        old: dict[bytes, tuple[tuple[Any, ...], int]] = {}
        new_by_key: dict[bytes, tuple[tuple[Any, ...], int]] = {}
        with engine.storage.snapshot() as snap:
            if item.eowc:
                # Only windows the watermark closed since the last epoch; each is emitted once
                # and never changes after (late events for it are counted, not applied).
                point = closing_point(view, [c.name for c in item.plan.columns])
                assert point is not None
                end_at, offset = point
                lo, hi = _aware(st.emitted_until), _aware(item.close_until)
                closing: Counter[tuple[Any, ...]] = Counter()
                if hi is not None:
                    for r in result:
                        row = self._row(r, view)
                        end = _aware(row[end_at])
                        end = end + offset if end is not None else None
                        if end is not None and end <= hi and (lo is None or end > lo):
                            closing[row] += 1
                _add_weights(view, snap, store, closing, old, new_by_key)
            elif item.delta_sql is not None:
                weights: Counter[tuple[Any, ...]] = Counter()
                for r in result:
                    weights[self._row(r[:-1], view)] += int(r[-1])
                _add_weights(view, snap, store, weights, old, new_by_key)
            elif item.aggregate is None:
                new_rows = Counter(self._row(r, view) for r in result)
                new_by_key = {C.key_of(row): (row, n) for row, n in new_rows.items()}
                for key, value in snap.scan(store):
                    old[key] = C.decode_view_row(value)
                    new_by_key.setdefault(key, (old[key][0], 0))
        commit = Commit()
        if item.aggregate is not None:
            weights = self._merge_partials(item, result, commit)
            with engine.storage.snapshot() as snap:
                _add_weights(view, snap, store, weights, old, new_by_key)
        changes: list[tuple[tuple[Any, ...], int, bytes]] = []
        for key, (row, m) in new_by_key.items():
            n = old.get(key, (row, 0))[1]
            if m == n:
                continue
            changes.append((row, m - n, key))
            if m == 0:
                commit.deletes.append((store, key))
            else:
                commit.puts.append((store, key, C.encode_view_row(row, m)))
        now = dt.datetime.now(dt.UTC)
        if changes:
            payload = C.encode_batch(view, [c[0] for c in changes], [now] * len(changes),
                                     [c[1] for c in changes], [c[2] for c in changes])
            commit.appends.append(Append(view.id, 0, payload, len(changes), weights=sum(c[1] for c in changes)))
        epoch = st.epochs + 1
        meta: dict[str, Any] = {"inputs": {str(k): list(v) for k, v in item.offsets.items()}, "epoch": epoch,
                                "partials": item.aggregate is not None}
        emitted_until = st.emitted_until
        if item.eowc and item.close_until is not None:
            emitted_until = item.close_until
        if emitted_until is not None:
            meta["emitted_until"] = emitted_until.isoformat()
        commit.puts.append((META, meta_key(view.id), json.dumps(meta).encode()))
        # The view may have been dropped while Spark ran: then there is nothing to store.
        if engine.catalog.snapshot().by_id(view.id) is None:
            return None
        level_commit.appends += commit.appends
        level_commit.puts += commit.puts
        level_commit.deletes += commit.deletes

        def done() -> None:
            st.processed = item.offsets
            st.epochs = epoch
            st.emitted_until = emitted_until
            st.incremental = item.delta_sql is not None or item.aggregate is not None
            st.partials = item.aggregate is not None
            st.last_epoch_ms = (time.monotonic() - item.started) * 1000
            st.last_epoch_at = time.time()
            engine.metrics.epoch_done(M.MATERIALIZED_VIEW, st.last_epoch_ms / 1000)
            if changes and engine.loop is not None:
                engine.loop.call_soon_threadsafe(self._wake.set)  # views over this view
        return done

    def _merge_partials(self, item: _Work, result: list[tuple[Any, ...]], commit: Commit) -> Counter[tuple[Any, ...]]:
        """Add an epoch's partial aggregates to the stored ones (puts go into `commit`); return the
        view's row changes: each touched group's old row out, its new row in."""
        agg = item.aggregate
        assert agg is not None
        view = item.view
        store = partials_store(view.id)
        g = agg.group_count
        types = agg.partial_columns
        weights: Counter[tuple[Any, ...]] = Counter()
        with self.engine.storage.snapshot() as snap:
            for r in result:
                values = [_coerce_partial(v, c) for v, c in zip(r, types, strict=True)]
                group = tuple(_normalize(v) for v in values[:g])
                key = C.key_of(group)
                raw = snap.get(store, key)
                if raw is not None:
                    (partials, old_row), n = C.decode_view_row(raw)
                    partials = list(partials)
                else:
                    partials, old_row, n = [None] * (len(types) - g - 1), None, 0
                n += values[g] or 0
                for j, spec in enumerate(agg.aggregates):
                    if spec.kind == "count_distinct":
                        p = spec.partials[0]
                        partials[p - g - 1] = (partials[p - g - 1] or 0) + self._new_distinct(
                            snap, store, commit, (group, j), values[p] or ())
                        continue
                    for p in spec.partials:
                        mine, theirs = partials[p - g - 1], values[p]
                        if theirs is None:
                            continue
                        if mine is None:
                            partials[p - g - 1] = theirs
                        elif spec.kind == "min":
                            partials[p - g - 1] = min(mine, theirs)
                        elif spec.kind == "max":
                            partials[p - g - 1] = max(mine, theirs)
                        else:
                            partials[p - g - 1] = mine + theirs
                if n < 0:
                    raise InternalError(f'view "{view.name}" would hold a group {-n} times fewer than zero')
                new_row = None
                if n > 0 or agg.global_aggregate:
                    new_row = self._aggregate_row(agg, item, group, n, partials)
                    commit.puts.append((store, key, C.encode_view_row((tuple(partials), new_row), n)))
                else:
                    commit.deletes.append((store, key))
                if old_row != new_row:
                    if old_row is not None:
                        weights[old_row] -= 1
                    if new_row is not None:
                        weights[new_row] += 1
        return weights

    @staticmethod
    def _new_distinct(snap: Any, store: str, commit: Commit, where: tuple[Any, ...], seen: Any) -> int:
        """count(DISTINCT): store each value not seen before in this group (one key per value);
        return how many were new."""
        new = 0
        for value in {_normalize(v) for v in seen if v is not None}:
            key = b"d" + repr((*where, value)).encode()
            if snap.get(store, key) is None:
                commit.puts.append((store, key, b""))
                new += 1
        return new

    def _aggregate_row(self, agg: IncrementalAggregate, item: _Work, group: tuple[Any, ...], n: int,
                       partials: list[Any]) -> tuple[Any, ...]:
        """A group's output row from its partial aggregates."""
        base = agg.group_count + 1
        out: list[Any] = []
        for (what, index), column in zip(agg.outputs, item.plan.columns, strict=True):
            if what == "group":
                out.append(group[index])
                continue
            spec = agg.aggregates[index]
            parts = [partials[p - base] for p in spec.partials]
            if spec.kind == "count_star":
                out.append(n)
            elif spec.kind in ("count", "count_distinct"):
                out.append(parts[0] or 0)
            elif spec.kind in ("min", "max"):
                out.append(parts[0])
            elif not parts[0]:
                out.append(None)  # sum and avg of no values are NULL
            elif spec.kind == "sum":
                out.append(parts[1])
            elif column.type == T.NUMERIC:
                with decimal.localcontext() as context:
                    context.prec = 38
                    out.append(decimal.Decimal(parts[1]) / parts[0])
            else:
                out.append(parts[1] / parts[0])
        return self._row(tuple(out), item.view)

    # ---- push queries --------------------------------------------------------------------

    async def subscribe(self, plan: SubscribePlan, user: str) -> Subscription:
        """Start a push query; returns once it has its starting point (a query that is not linear:
        once its view holds the result, transient_views.py)."""
        sub = Subscription(plan, asyncio.get_running_loop(), self.engine.settings.subscriber_buffer_changes)
        if plan.view is not None and self.engine.spark is not None:
            from streamdb.runtime import transient_views

            if not plan.snapshot:
                # Its changes are those after this moment, writes made while its view starts included.
                sub.baseline = self.engine.storage.snapshot()
            sub.waiting = True
            self.subscriptions[sub.id] = sub  # SHOW QUERIES lists it, starting, while its view catches up
            try:
                await transient_views.start(self.engine, sub, plan.view, user)
            except BaseException:
                self.unsubscribe(sub)
                raise
            self._wake.set()
            return sub
        if plan.delta_sql is not None and not plan.snapshot:
            # Only changes from now on: start from the inputs' current ends.
            catalog = self.engine.catalog.snapshot()
            with self.engine.storage.snapshot() as snap:
                for inp in plan.query.inputs:
                    rel = catalog.by_id(inp.relation_id) if inp.relation_id is not None else None
                    if rel is not None:
                        sub.processed[rel.id] = self.engine.reader.end_offsets(rel, snap)
            sub.started = True
        elif not plan.snapshot:
            # Recomputed: changes are diffs against the result as of now, not as of the first
            # epoch (which waits for Spark and would take in writes made meanwhile unseen).
            sub.baseline = self.engine.storage.snapshot()
        self.subscriptions[sub.id] = sub
        self._wake.set()
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        if sub.closed:
            return
        sub.closed = True
        self.subscriptions.pop(sub.id, None)
        sub.release_baseline()
        if sub.view_id is not None:
            from streamdb.runtime import transient_views

            transient_views.stop(self.engine, sub)

    def _advance(self, sub: Subscription) -> None:
        """Compute a subscription's changes since its last epoch (in a worker thread)."""
        engine = self.engine
        spark = engine.spark
        if spark is None:
            raise ObjectNotInPrerequisiteState("push queries need Spark, which is disabled")
        catalog = engine.catalog.snapshot()
        plan = sub.plan
        if sub.waiting:
            return
        if sub.view_id is not None:
            if catalog.by_id(sub.view_id) is None:
                raise UndefinedTable("push query ended: a relation it reads was dropped or renamed",
                                     hint="Run the push query again.")
            st = self.status.get(sub.view_id)
            if st is not None and st.error is not None:
                raise StreamDBError(f"push query failed: {st.error}", sqlstate=st.error_sqlstate or "XX000")
        if sub.baseline is not None:
            self._advance_baseline(sub, catalog)
        with engine.storage.snapshot() as snap:
            offsets = {rid: engine.reader.end_offsets(rel, snap) for i in plan.query.inputs
                       if (rid := i.relation_id) is not None and (rel := catalog.by_id(rid)) is not None}
            if sub.started and offsets == sub.processed:
                return
            snapshot = plan.snapshot and not sub.started  # this epoch's changes are the current result
            changes: list[tuple[tuple[Any, ...], int]] = []
            started = time.monotonic()
            tables, offsets = self._query_inputs(plan.query, plan.delta_sql is not None, sub.processed, catalog, snap)
            if sub.view_id is not None:
                # Its own view's changes, as they are (transient_views.py): no Spark job to read them.
                [view_changes] = tables.values()
                answer = view_changes.select([*(c.name for c in plan.query.columns), WEIGHT])
            else:
                spark.wait_ready(timeout=FLUSH_TIMEOUT_SECONDS)
                started = time.monotonic()
                try:
                    answer = spark.run_query(plan.delta_sql or plan.query.spark_sql, tables)
                except StreamDBError:
                    engine.metrics.spark_failed(M.PUSH_QUERY)
                    raise
            if plan.delta_sql is not None:
                weights: Counter[tuple[Any, ...]] = Counter()
                for r in arrow_to_rows(answer, (*plan.query.columns, _WEIGHT_COLUMN)):
                    weights[tuple(_normalize(v) for v in r[:-1])] += r[-1]
                changes = [(row, w) for row, w in weights.items() if w]
            else:
                result = result_rows(answer, plan.query.columns)
                previous = sub.previous if sub.previous is not None else Counter()
                if sub.started or plan.snapshot:
                    changes = [(row, result[row] - previous[row]) for row in (result | previous)
                               if result[row] != previous[row]]
                sub.previous = result
        sub.processed = offsets
        sub.started = True
        sub.epochs += 1
        sub.last_epoch_ms = (time.monotonic() - started) * 1000
        engine.metrics.epoch_done(M.PUSH_QUERY, sub.last_epoch_ms / 1000)
        sub.deliver(changes, dt.datetime.now(dt.UTC), snapshot=snapshot)

    def _advance_baseline(self, sub: Subscription, catalog: CatalogSnapshot) -> None:
        """A recomputed subscription's first result, at the snapshot taken when it began."""
        baseline = self.baseline_result(sub, sub.plan.query, catalog)
        if baseline is not None:
            sub.previous, sub.processed = baseline
            sub.started = True

    def baseline_result(self, sub: Subscription, query: QueryPlan, catalog: CatalogSnapshot,
                        ) -> tuple[Counter[tuple[Any, ...]], dict[int, tuple[int, ...]]] | None:
        """The query's result over the snapshot taken when the push query began (run once, from
        the whole inputs), and the inputs' offsets then; None when it was taken already."""
        spark = self.engine.spark
        snap = sub.take_baseline()
        if spark is None or snap is None:
            return None
        try:
            tables, offsets = self._query_inputs(query, False, {}, catalog, snap)
        finally:
            snap.close()
        spark.wait_ready(timeout=FLUSH_TIMEOUT_SECONDS)
        answer = spark.run_query(query.spark_sql, tables)
        return result_rows(answer, query.columns), offsets

    # ---- FLUSH and status ----------------------------------------------------------------

    def lag(self, view: RelationDef) -> int:
        """Input records written but not yet reflected in the view."""
        st = self.status.get(view.id)
        catalog = self.engine.catalog.snapshot()
        with self.engine.storage.snapshot() as snap:
            current = self.input_offsets(view, catalog, snap)
        done = st.processed if st else {}
        return sum(sum(c) - sum(done.get(k, (0,) * len(c))) for k, c in current.items())

    async def flush(self, only: set[int] | None = None, raise_failing: bool = False) -> list[Notice]:
        """Wait until every view (or those in `only`, with the views they read) reflects every write
        acknowledged before this call.

        Base inputs (streams, tables) must reach their offsets as of the call; a view over
        a view must reach the offsets its input had once that input was itself done. A failing
        view cannot catch up: it is reported (a warning, or with `raise_failing` its error once the
        other views are done).
        """
        catalog = self.engine.catalog.snapshot()
        # Push queries' views only when named: they have their own readers, FLUSH is for the user's.
        views = [v for v in topological(catalog) if not v.transient or (only is not None and v.id in only)]
        if only is not None:
            wanted = set(only)
            for v in reversed(views):
                if v.id in wanted:
                    wanted.update(v.depends_on)
            views = [v for v in views if v.id in wanted]
        notices: list[Notice] = []
        failing: list[StreamDBError] = []
        if not views:
            return notices
        with self.engine.storage.snapshot() as snap:
            base_targets = {}
            for v in views:
                for dep in v.depends_on:
                    rel = catalog.by_id(dep)
                    if rel is not None and rel.kind not in ("materialized_view", "view"):
                        base_targets[dep] = self.engine.reader.end_offsets(rel, snap)
        done_at: dict[int, tuple[int, ...]] = {}
        deadline = time.monotonic() + FLUSH_TIMEOUT_SECONDS
        self._wake.set()
        while True:
            pending = []
            with self.engine.storage.snapshot() as snap:
                for v in views:
                    if v.id in done_at:
                        continue
                    if self.engine.catalog.snapshot().by_id(v.id) is None:
                        done_at[v.id] = ()
                        continue
                    st = self.status.get(v.id)
                    if st is not None and st.error is not None and not st.error_in_rows and (
                            st.failed_at is None or _reached(st.failed_at, {
                                d: base_targets[d] for d in v.depends_on if d in base_targets})):
                        # A view that failed on all the input this FLUSH waits for cannot catch
                        # up; say so, and do not hold up the others.
                        self._report_failing(v, st, failing, notices, brought_up=False)
                        done_at[v.id] = self.engine.reader.end_offsets(v, snap)
                        continue
                    target: dict[int, tuple[int, ...]] = {}
                    ready = True
                    for dep in v.depends_on:
                        if dep in base_targets:
                            target[dep] = base_targets[dep]
                        elif dep in done_at:
                            target[dep] = done_at[dep]
                        elif (rel := catalog.by_id(dep)) is None or rel.kind == "view":
                            continue  # a plain view has no log of its own: its relations are deps too
                        else:
                            ready = False
                    if ready and st is not None and st.epochs > 0 and _reached(st.processed, target):
                        done_at[v.id] = self.engine.reader.end_offsets(v, snap)
                        if st.error is not None:  # errors in its rows as of the flushed input
                            self._report_failing(v, st, failing, notices, brought_up=True)
                    else:
                        pending.append(v)
            if not pending:
                if raise_failing and failing:
                    raise failing[0]
                return notices
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise QueryCanceled(f"FLUSH timed out waiting for {', '.join(v.name for v in pending)}")
            async with self._progress:
                try:
                    await asyncio.wait_for(self._progress.wait(), timeout=min(remaining, 1.0))
                except TimeoutError:
                    self._wake.set()

    def _report_failing(self, v: RelationDef, st: ViewStatus, failing: list[StreamDBError],
                        notices: list[Notice], brought_up: bool) -> None:
        error = self.read_error(v.id)
        if error is not None:
            failing.append(error)
        what = "holds errors" if brought_up else "is failing and was not brought up to date"
        notices.append(Notice(f'materialized view "{v.name}" {what}: {st.error}', severity="WARNING",
                              sqlstate=st.error_sqlstate or "XX000",
                              hint="SHOW QUERIES shows the error of each view."))


def _reached(processed: dict[int, tuple[int, ...]], target: dict[int, tuple[int, ...]]) -> bool:
    for rel_id, offsets in target.items():
        done = processed.get(rel_id)
        if done is None or len(done) != len(offsets) or any(d < o for d, o in zip(done, offsets, strict=True)):
            return False
    return True
