"""Which view runs in which streaming pipeline, and what the server does with their batches.

Views whose query has a dataflow (planner/dataflow.py) are maintained by Spark Structured
Streaming pipelines (runtime/spark/pipeline.py): one per number of stateful layers, so a new
view restarts only the pipeline of its depth (a push query's view runs in one of its own,
`PUSH_PIPELINES`, removed with its checkpoint when the push query ends). For each view the
manager keeps, in the view's stored progress (`view:<id>` in the meta store, beside the epoch
driver's fields):

- `ops_base`: the ids of its operator instances, whose state lives in Spark's state store;
- `joins`: the offsets from which it takes live changes (its history before them came as its
  backfill), fixed when it joined its pipeline so a replayed batch reads what it read before;
- `fp`: its dataflow's fingerprint; a different plan (new code, a changed relation) gets new
  operator ids, new join points and its stored rows retracted, then a fresh backfill;
- `batch`: the last batch of its pipeline it reflects. A batch is committed once per view: its
  changes, its stored rows and the input offsets it reflects go into one atomic write, so a
  batch Spark replays after a crash changes nothing twice (exactly-once).

A failing pipeline marks its views failed (SHOW QUERIES, FLUSH, reads of the views) and is
restarted with backoff; see docs/views.md.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import logging
import shutil
import threading
import time
import weakref
from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from streamdb import metrics as M
from streamdb.catalog import CatalogSnapshot, RelationDef
from streamdb.errors import InternalError, StreamDBError
from streamdb.planner import dataflow as D
from streamdb.planner import query as query_planner
from streamdb.planner.context import PlanContext, SessionInfo
from streamdb.runtime import changes as C
from streamdb.runtime import failpoints
from streamdb.runtime.reader import LOG_FROM, read_log
from streamdb.runtime.spark.session import SPARK_ROW_ERROR, translate_row_error
from streamdb.storage.base import Append, Commit, LogReaderSpec, partials_store, state_store

if TYPE_CHECKING:
    from streamdb.runtime.engine import Engine
    from streamdb.runtime.views import ViewMaintainer

log = logging.getLogger("streamdb.pipelines")

META = "meta"
_SYSTEM_SESSION = SessionInfo("streamdb", "streamdb")
# Operator ids: every generation of a view gets a range no view has used, since an old
# generation's state is not deleted from the state store. Ids below FIRST_ALLOCATED_OPS are the
# first scheme's (view id * 1024 + (generation % 16) * 64, which a 17th generation would reuse),
# kept by views made before; new ranges come from a counter in the meta store.
FIRST_ALLOCATED_OPS = 1 << 30
NEXT_OPS_KEY = b"pipeline-next-ops"
RETRY_MIN_SECONDS = 1.0
RETRY_MAX_SECONDS = 60.0
# The stored plan fingerprint of a view whose batch could not be applied: no plan has it, so the
# pipeline's next start rebuilds the view from its inputs.
_BROKEN = "broken"
# Bumped when the compiled form of dataflows changes: views then rebuild their state.
PLAN_VERSION = "2"  # 2: timestamps and dates as integers in row and key JSON
# The stateful operators' state variables (DeltaProcessor.java), written in the checkpoints'
# directory; a checkpoint of another layout is dropped at start (drop_stale_checkpoints).
STATE_LAYOUT = "2"  # 2: two map variables per layer, not four
LAYOUT_FILE = "STATE_LAYOUT"


_FINGERPRINTS: weakref.WeakKeyDictionary[D.Dataflow, str] = weakref.WeakKeyDictionary()


def fingerprint(dataflow: D.Dataflow) -> str:
    # Kept per dataflow (planned once per catalog version): printing 100 views' plans took a
    # third of the server's time while a pipeline waited to retry (sync runs every epoch then).
    fp = _FINGERPRINTS.get(dataflow)
    if fp is None:
        text = PLAN_VERSION + "\n" + "\n".join(dataflow.explain())
        fp = _FINGERPRINTS[dataflow] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return fp


@dataclass
class _Hold:
    """A push query's view held at its inputs' offsets as of the push query's start: no batch of
    its (own, fresh) pipeline crosses them, and `log_end` is the view's log end once a batch ends
    exactly there, the result as of that start (`held_result`). `missed`: that cannot be (its
    pipeline is shared, was not fresh, or reads a log the offsets do not name), so the push query
    computes that result another way."""

    offsets: dict[int, tuple[int, ...]]
    log_end: tuple[int, ...] | None = None
    missed: bool = False


@dataclass
class _Failed:
    """A view whose pipeline batch failed (a bug in the server's commit, or a recomputed view's own
    query failing in Spark). It stays
    out of its pipeline until `retry_at` (a backoff doubling with each attempt), then is rebuilt
    from its inputs, reading as failed with `error` until the rebuild has its whole backfill."""

    error: StreamDBError
    attempts: int = 0
    retry_at: float = 0.0  # time.monotonic()
    rebuilding: bool = False


@dataclass
class _Running:
    depth: int
    pipeline: Any  # StreamingPipeline
    key: tuple[tuple[int, str], ...]  # (view id, fingerprint) of its views
    views: dict[int, D.Dataflow]
    failures: int = 0
    retry_at: float | None = None
    failed: StreamDBError | None = None
    # Entries in the pipeline's state stores, all layers, as of its last committed batch (stored
    # with it); None for a checkpoint older than the count.
    state_rows: int | None = None


@dataclass
class _ViewState:
    """A view's pipeline bookkeeping, as stored."""

    depth: int
    gen: int
    ops_base: int
    joins: dict[int, tuple[int, ...]]
    fp: str
    batch: int = -1
    done: bool = False
    closed_until: int | None = None  # EMIT ON WINDOW CLOSE: rows closing by here (µs) are out
    # An append-only view is kept as its change log alone: its rows are the log's changes from
    # this offset on (reader.LOG_FROM), with no per-row state. None: rows in its state store.
    log_from: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"depth": self.depth, "gen": self.gen, "ops_base": self.ops_base,
                "joins": {str(k): list(v) for k, v in self.joins.items()}, "fp": self.fp, "batch": self.batch,
                "done": self.done, "closed_until": self.closed_until,
                LOG_FROM: self.log_from}

    @staticmethod
    def from_json(d: dict[str, Any]) -> _ViewState:
        return _ViewState(d["depth"], d["gen"], d["ops_base"], {int(k): tuple(v) for k, v in d["joins"].items()},
                          d["fp"], d.get("batch", -1), d.get("done", False),
                          d.get("closed_until"), d.get(LOG_FROM))


@dataclass(frozen=True)
class _CloseSpec:
    """EMIT ON WINDOW CLOSE: a row is final once the watermark (its input's largest event time
    less the delay) reaches its `column` plus `offset` (µs)."""

    column: int
    offset: int
    delay: int


_OPEN = b"eowc:"  # an EMIT ON WINDOW CLOSE view's rows of windows still open, by closing time
_NEVER = (1 << 64) - 1
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _state_rows_key(depth: int) -> bytes:
    return f"pipeline-state-rows:{depth}".encode()


def _clock_timers_key(depth: int) -> bytes:
    """The pipeline's temporal filters' timers pending as of its last batch, per minute of their
    time (JSON, Ticks.java): a restart knows when the source must tick."""
    return f"pipeline-clock-timers:{depth}".encode()


def _committed_batch_key(depth: int) -> bytes:
    """The last batch of the depth's pipeline the server committed: Spark's checkpoint may be a
    batch ahead of it (a large batch is committed beside the next one), and is rewound to it at
    the pipeline's start."""
    return f"pipeline-committed-batch:{depth}".encode()


def _checkpoint_generation_key(depth: int) -> bytes:
    """How many times the depth's pipeline lost its last view (its checkpoint's path suffix)."""
    return f"pipeline-checkpoint-generation:{depth}".encode()


# Pipelines are keyed by their views' depth, but a push query's view (transient_views.py) runs
# in a pipeline of its own, keyed from here on: starting it restarts no one else's pipeline, and
# its operator state goes with its checkpoint when the push query ends (a dropped view's state
# otherwise stays in its depth's state store). Past the setting `push_pipelines` of them, more
# share their depth's pipeline.
PUSH_PIPELINES = 1 << 30
# Views with a temporal filter run apart, keyed from here on by depth: their layers are in
# Spark's processing-time mode and their batches run on the clock (Dataflow.has_clock), which
# the other views' pipelines need not pay for; a stateful operator's time mode is fixed in its
# checkpoint, so no pipeline ever switches.
CLOCK_PIPELINES = 1 << 29


def pipeline_name(key: int) -> str:
    if key >= PUSH_PIPELINES:
        return f"push-{key - PUSH_PIPELINES}"
    return f"clock-depth-{key - CLOCK_PIPELINES}" if key >= CLOCK_PIPELINES else f"depth-{key}"



def _micros(value: Any) -> int | None:
    from streamdb.runtime.views import _aware

    aware = _aware(value)  # TIMESTAMP values are UTC, as the session time zone
    return None if aware is None else (aware - _EPOCH) // dt.timedelta(microseconds=1)


def _open_key(close: int | None, row_key: bytes) -> bytes:
    slot = _NEVER if close is None else close + (1 << 63)
    return _OPEN + slot.to_bytes(8, "big") + row_key


class PipelineManager:
    def __init__(self, engine: Engine, maintainer: ViewMaintainer) -> None:
        self.engine = engine
        self.maintainer = maintainer
        self._sync_lock = threading.Lock()
        self._commit_lock = threading.Lock()
        self.synced_version = -1
        self._running: dict[int, _Running] = {}
        self._strategies: dict[int, tuple[int, D.ViewStrategy]] = {}
        self._states: dict[int, _ViewState] = {}
        self._owned: set[int] = set()
        self._errors: dict[int, dict[str, int]] = {}  # view -> "sqlstate:message" -> count
        self._closing: dict[int, _CloseSpec] = {}  # EMIT ON WINDOW CLOSE views
        self._next_ops: int | None = None  # see FIRST_ALLOCATED_OPS
        self._failed: dict[int, _Failed] = {}  # views whose batch could not be applied
        self._push_keys: dict[int, int] = {}  # push queries' views: their pipeline, chosen once
        self._holds: dict[int, _Hold] = {}  # push queries' views: their inputs as of the start

    # ---- strategy -------------------------------------------------------------------------

    def strategy(self, view: RelationDef, catalog: CatalogSnapshot) -> D.ViewStrategy:
        """The view's strategy for this catalog version (planned once per version)."""
        cached = self._strategies.get(view.id)
        if cached is not None and cached[0] == catalog.version:
            return cached[1]
        from streamdb.planner.create_view import view_query

        extra = dict(view.extra)
        try:
            plan = query_planner.plan_query(view_query(view), PlanContext(catalog, _SYSTEM_SESSION))
            strategy = D.view_strategy(plan.resolved_sql, plan.inputs, catalog, tuple(c.name for c in view.columns),
                                       eowc=int(extra["eowc_input"]) if extra.get("eowc_input") is not None else None)
            if strategy.dataflow is not None and extra.get("eowc_input") is not None:
                strategy = D.ViewStrategy(D.with_window_expiry(strategy.dataflow, view.id,
                                                               tuple(c.name for c in view.columns)))
        except StreamDBError as e:
            strategy = D.ViewStrategy(None, e.message)
        except Exception as e:  # noqa: BLE001 - a bug planning one view: the epoch driver reports it on that view
            log.exception("planning view %s for the pipelines failed", view.name)
            strategy = D.ViewStrategy(None, f"internal error: {type(e).__name__}: {e}")
        self._strategies[view.id] = (catalog.version, strategy)
        return strategy

    def _pipeline_key(self, view: RelationDef, dataflow: D.Dataflow) -> int:
        shared = dataflow.depth() + (CLOCK_PIPELINES if dataflow.has_clock() else 0)
        if not view.transient:
            return shared
        key = self._push_keys.get(view.id)
        if key is None:
            own = sum(1 for k in self._push_keys.values() if k >= PUSH_PIPELINES)
            key = PUSH_PIPELINES + view.id if own < self.engine.settings.push_pipelines else shared
            self._push_keys[view.id] = key
        return key

    def owns(self, view_id: int) -> bool:
        """Whether the view is maintained by a pipeline (the epoch driver leaves it alone)."""
        return view_id in self._owned

    def retry_pending(self) -> bool:
        return any(r.retry_at is not None for r in self._running.values())

    # ---- keeping pipelines in step with the catalog ---------------------------------------------

    def sync(self) -> None:
        """Start, restart or stop pipelines so each runs the views the catalog has (blocking: Spark
        calls; run it in a thread)."""
        from streamdb.runtime.views import topological

        spark = self.engine.spark
        if spark is not None and spark.revive_if_dead():
            for dead in self._running.values():  # their queries died with the JVM: restart them
                dead.retry_at = time.monotonic()
        if spark is None or spark.status != "ready":
            return
        with self._sync_lock:
            catalog = self.engine.catalog.snapshot()
            self._strategies = {k: v for k, v in self._strategies.items() if catalog.by_id(k) is not None}
            self._push_keys = {k: v for k, v in self._push_keys.items() if catalog.by_id(k) is not None}
            wanted: dict[int, dict[int, D.Dataflow]] = {}
            owned: set[int] = set()
            for view in topological(catalog):
                strategy = self.strategy(view, catalog)
                st = self.maintainer.status_of(view.id)
                st.strategy = strategy.label if strategy.dataflow is not None else f"recompute: {strategy.reason}"
                if strategy.dataflow is None:
                    st.pipeline = None
                    continue
                depth = self._pipeline_key(view, strategy.dataflow)
                wanted.setdefault(depth, {})[view.id] = strategy.dataflow
                owned.add(view.id)
                st.pipeline = pipeline_name(depth)
            self._owned = owned
            now = time.monotonic()
            for depth in sorted(set(wanted) | set(self._running)):
                views = wanted.get(depth, {})
                running = self._running.get(depth)
                key = tuple(sorted((vid, fingerprint(df)) for vid, df in views.items()))
                if running is not None and running.key == key:
                    if running.retry_at is None or running.retry_at > now:
                        continue  # as it should be (or waiting to retry)
                if running is not None and running.retry_at is None and self._only_dropped(running, views, catalog):
                    # Views were dropped and none added: the pipeline keeps computing them until its
                    # next restart, and their batches are ignored (a restart costs ~2 s of Spark).
                    running.views = views
                    running.key = key
                    continue
                self._restart(depth, views, key, catalog, running)
            self.synced_version = catalog.version

    @staticmethod
    def _only_dropped(running: _Running, views: dict[int, D.Dataflow], catalog: CatalogSnapshot) -> bool:
        """Whether `views` is what the pipeline runs less some dropped views, with every relation it
        reads still there (a dropped relation's log is gone, so its source must stop reading it)."""
        if not views or not set(views) < set(running.views):
            return False
        if any(fingerprint(df) != fingerprint(running.views[vid]) for vid, df in views.items()):
            return False
        return all(catalog.by_id(rid) is not None for df in running.views.values() for rid in df.relations())

    def _restart(self, depth: int, views: dict[int, D.Dataflow], key: tuple[tuple[int, str], ...],
                 catalog: CatalogSnapshot, running: _Running | None) -> None:
        from streamdb.runtime.spark.pipeline import StreamingPipeline, ViewFlow

        t0 = time.monotonic()
        name = pipeline_name(depth)
        if running is not None:
            running.pipeline.stop()
            del self._running[depth]
        log.info("pipeline %s: stopped in %.0f ms", name, (time.monotonic() - t0) * 1000)
        if not views:
            # Its last view was dropped (or its push query ended): every entry of its state store is a
            # dropped operator's, so the state goes with the checkpoint. The stopped query's state
            # stores may still write into that directory for a while, so the depth's next pipeline
            # starts at a path of its own (a new generation), never at this one.
            generation = self._checkpoint_generation(depth)
            old = self._checkpoint(depth, generation)
            commit = Commit(deletes=[(META, _state_rows_key(depth)), (META, _committed_batch_key(depth)),
                                     (META, _clock_timers_key(depth))])
            if depth < PUSH_PIPELINES:
                commit.puts.append((META, _checkpoint_generation_key(depth), str(generation + 1).encode()))
            self.engine.storage.commit(commit)
            shutil.rmtree(old, ignore_errors=True)
            log.info("pipeline %s: no views left, its checkpoint and state removed", name)
            return
        engine = self.engine
        checkpoint = self._checkpoint(depth)
        fresh = not (checkpoint / "offsets").exists()
        commit = Commit()
        rows_key = _state_rows_key(depth)
        flows = []
        now = dt.datetime.now(dt.UTC)
        with engine.storage.snapshot() as snap:
            clock_timers = "{}"
            if fresh:
                commit.deletes.extend([(META, rows_key), (META, _committed_batch_key(depth)),
                                       (META, _clock_timers_key(depth))])
                state_rows: int | None = 0
            else:
                raw = snap.get(META, rows_key)
                state_rows = int(raw) if raw is not None else None
                raw = snap.get(META, _clock_timers_key(depth))
                # Unknown (no batch committed them yet): some of unknown time, so it ticks.
                clock_timers = raw.decode() if raw is not None else '{"?": 1}'
                self._rewind(depth, checkpoint, snap, commit)
            for gone in [k for k in self._failed if catalog.by_id(k) is None]:  # dropped views
                del self._failed[gone]
            # A failed view stays out of the pipeline until its backoff ends (`retry_at` brings
            # it back), however often the pipeline restarts for other views in between.
            waiting = [vid for vid in views if (f := self._failed.get(vid)) is not None
                       and not f.rebuilding and f.retry_at > time.monotonic()]
            if len(waiting) == len(views):
                waiting = []
            for vid, df in sorted(views.items()):
                if vid in waiting:
                    continue
                view = catalog.by_id(vid)
                assert view is not None
                if (failed := self._failed.get(vid)) is not None:
                    failed.rebuilding = True  # its stored state names no plan: rebuilt below
                state = self._load_state(vid, snap)
                fp = fingerprint(df)
                if state is None or state.fp != fp or state.depth != depth or fresh:
                    gen = 0 if state is None else state.gen + 1
                    # A view's own log (EMIT ON WINDOW CLOSE: its emitted rows end their groups'
                    # state) is read from now on only: what earlier generations emitted is not this
                    # generation's to drop.
                    joins = {rid: (0,) * len(ends) if fresh and rid != vid else ends
                             for rid in df.relations()
                             if (rel := catalog.by_id(rid)) is not None
                             for ends in [engine.reader.end_offsets(rel, snap)]}
                    retracted = self._retract_all(view, state, snap, commit, now)
                    log_from = snap.end_offset(vid, 0) + retracted if self._log_only(view, df) else None
                    state = _ViewState(depth, gen, self._allocate_ops(snap, commit), joins, fp, log_from=log_from)
                    for open_key, _ in snap.scan(partials_store(vid), _OPEN):
                        commit.deletes.append((partials_store(vid), open_key))
                    commit.deletes.append((META, f"view-errors:{vid}".encode()))  # recomputed too
                    self._stage_state(vid, state, snap, commit)
                self._states[vid] = state
                spec = self._close_spec(view, catalog)
                if spec is None:
                    self._closing.pop(vid, None)
                else:
                    self._closing[vid] = spec
                self._errors.pop(vid, None)
                self._errors_of(vid, snap)
                self._show_errors(vid)
                self._show_healing(vid, state.done)
                flows.append(ViewFlow(vid, df, state.ops_base, state.joins, self._hold_of(vid, df, depth, fresh)))
        if commit.puts or commit.appends or commit.deletes:
            engine.storage.commit(commit)
        relations = {rid: rel for f in flows for rid in f.dataflow.relations()
                     if (rel := catalog.by_id(rid)) is not None}
        spark = engine.spark
        assert spark is not None
        pipeline = StreamingPipeline(spark.session(), name, checkpoint, partial(self._on_batch, depth),
                                     partial(self._on_failure, depth),
                                     async_commit_rows=engine.settings.pipeline_async_commit_rows,
                                     clock_tick_ms=engine.settings.clock_tick_ms)
        entry = _Running(depth, pipeline, key, views, state_rows=state_rows)
        if running is not None:
            entry.failures = running.failures
        if waiting:
            entry.retry_at = min(self._failed[vid].retry_at for vid in waiting)
        self._running[depth] = entry
        try:
            t1 = time.monotonic()
            layers = depth if depth < CLOCK_PIPELINES else max(df.depth() for df in views.values())
            pipeline.start(relations, flows, layers, self._log_spec(), clock_timers)
            log.info("pipeline %s: %d views, started in %.0f ms", name, len(flows),
                     (time.monotonic() - t1) * 1000)
        except StreamDBError as e:
            log.warning("pipeline %s did not start: %s", name, e.message)
            self._on_failure(depth, e)

    def _rewind(self, depth: int, checkpoint: Path, snap: Any, commit: Commit) -> None:
        """Spark's checkpoint back to the last batch the server committed. A large batch's commit
        runs beside Spark's next batch (StreamingPipeline), by when Spark has recorded the batch
        as done: a crash before the commit lands would skip it. Rewound, Spark runs it again from
        its logged offsets and the state it started from, as after any crash within a batch."""
        from streamdb.runtime.spark.pipeline import last_spark_commit, rewind_checkpoint

        raw = snap.get(META, _committed_batch_key(depth))
        if raw is None:
            # A checkpoint from before the key was kept: every batch Spark recorded was committed
            # first, inside its sink.
            commit.puts.append((META, _committed_batch_key(depth), str(last_spark_commit(checkpoint)).encode()))
            return
        batches = rewind_checkpoint(checkpoint, int(raw))
        if batches:
            log.warning("pipeline %s: its checkpoint rewound by %d batch(es) to batch %d, the last the "
                        "server committed; Spark runs the rest again", pipeline_name(depth), batches, int(raw))

    def hold(self, view_id: int, offsets: dict[int, tuple[int, ...]]) -> None:
        """Before a push query's view is added: the inputs' offsets as of the push query's start."""
        self._holds[view_id] = _Hold(offsets)

    def held_result(self, view_id: int) -> tuple[int, ...] | None:
        """The view's log end where it held the result as of its push query's start; None if it
        could not be held (`_Hold.missed`). Its hold ends here."""
        held = self._holds.pop(view_id, None)
        return None if held is None or held.missed else held.log_end

    def _hold_of(self, view_id: int, dataflow: D.Dataflow, depth: int, fresh: bool) -> dict[int, tuple[int, ...]] | None:
        held = self._holds.get(view_id)
        if held is None or held.log_end is not None or held.missed:
            return None
        # Other views share the pipeline, it went past already, or the statement did not note
        # every log the pipeline reads.
        if depth < PUSH_PIPELINES or not fresh or not set(dataflow.relations()) <= set(held.offsets):
            held.missed = True
            return None
        return held.offsets

    def _note_held(self, view: RelationDef, done: bool, processed: dict[int, tuple[int, ...]]) -> None:
        """After a view's batch is committed: where its log ends if the batch ended at its hold."""
        held = self._holds.get(view.id)
        if held is None or held.log_end is not None or held.missed or not done:
            return
        pairs = [(d, h) for rid, offsets in held.offsets.items() if rid in processed
                 for d, h in zip(processed[rid], offsets, strict=False)]
        if all(d == h for d, h in pairs):
            with self.engine.storage.snapshot() as snap:
                held.log_end = self.engine.reader.end_offsets(view, snap)
        elif any(d > h for d, h in pairs):
            held.missed = True
            log.warning("view %s: no batch ended at its push query's start; the result then is computed apart",
                        view.name)

    def _allocate_ops(self, snap: Any, commit: Commit) -> int:
        """The first id of an operator range no view has used (stored in the same commit as the
        view's state that uses it, so a failed commit wastes a range but never reuses one)."""
        from streamdb.runtime.spark.pipeline import MAX_OPS_PER_VIEW

        if self._next_ops is None:
            raw = snap.get(META, NEXT_OPS_KEY)
            self._next_ops = max(int(raw), FIRST_ALLOCATED_OPS) if raw else FIRST_ALLOCATED_OPS
        base = self._next_ops
        self._next_ops += MAX_OPS_PER_VIEW
        commit.puts.append((META, NEXT_OPS_KEY, str(self._next_ops).encode()))
        return base

    def _checkpoint(self, depth: int, generation: int | None = None) -> Path:
        if generation is None:
            generation = self._checkpoint_generation(depth)
        return self._checkpoints() / (pipeline_name(depth) + (f".{generation}" if generation else ""))

    def _checkpoint_generation(self, depth: int) -> int:
        """0 for a push query's pipeline: its path is never reused."""
        if depth >= PUSH_PIPELINES:
            return 0
        with self.engine.storage.snapshot() as snap:
            raw = snap.get(META, _checkpoint_generation_key(depth))
        return int(raw) if raw is not None else 0

    def _checkpoints(self) -> Path:
        return Path(self.engine.settings.data_dir) / "spark" / "pipelines"

    def drop_push_checkpoints(self) -> None:
        """At start: the checkpoints of push queries' pipelines a restart left (their views are
        gone, transient_views.drop_leftovers)."""
        for path in self._checkpoints().glob("push-*"):
            shutil.rmtree(path, ignore_errors=True)

    def drop_stale_checkpoints(self) -> None:
        """At start: checkpoints of another STATE_LAYOUT (or of before the marker) cannot be read
        by these operators, so they go, and every pipeline's views are rebuilt from their inputs
        (a pipeline without a checkpoint starts fresh)."""
        root = self._checkpoints()
        marker = root / LAYOUT_FILE
        if marker.exists() and marker.read_text().strip() == STATE_LAYOUT:
            return
        if root.exists():
            log.warning("pipeline checkpoints of an older state layout: removed, views are rebuilt")
            shutil.rmtree(root)
        root.mkdir(parents=True)
        marker.write_text(STATE_LAYOUT + "\n")

    def _log_spec(self) -> LogReaderSpec:
        settings = self.engine.settings
        path = str(Path(settings.data_dir) / "log")
        return LogReaderSpec(settings.log, path, settings.kafka_bootstrap)

    # ---- stored per-view bookkeeping -----------------------------------------------------------

    def _load_state(self, view_id: int, snap: Any) -> _ViewState | None:
        raw = snap.get(META, f"view:{view_id}".encode())
        if not raw:
            return None
        stored = json.loads(raw).get("pipeline")
        return _ViewState.from_json(stored) if stored else None

    def _stage_state(self, view_id: int, state: _ViewState, snap: Any, commit: Commit,
                     progress: dict[str, Any] | None = None) -> None:
        key = f"view:{view_id}".encode()
        raw = snap.get(META, key)
        meta: dict[str, Any] = json.loads(raw) if raw else {"inputs": {}, "epoch": 0}
        meta["pipeline"] = state.to_json()
        if progress is not None:
            meta.update(progress)
        commit.puts.append((META, key, json.dumps(meta).encode()))

    @staticmethod
    def _log_only(view: RelationDef, dataflow: D.Dataflow) -> bool:
        """Whether the view is kept as its change log alone: its rows only ever come (a filter or
        projection of streams, an inner join of streams), so the log is its contents and a batch
        is appended as Spark gives it, with no per-row lookups or state (see docs/views.md)."""
        return D.append_only(dataflow.root) and dict(view.extra).get("eowc_input") is None

    def _retract_all(self, view: RelationDef, state: _ViewState | None, snap: Any, commit: Commit,
                     now: dt.datetime) -> int:
        """A view rebuilt from scratch first takes back every row it holds (in its state store, or
        in its log from `log_from` on). Returns how many changes that appends to its log."""
        rows, counts, keys = [], [], []
        for key, value in snap.scan(state_store(view.id)):
            row, n = C.decode_view_row(value)
            rows.append(row)
            counts.append(-n)
            keys.append(key)
            commit.deletes.append((state_store(view.id), key))
        appended = 0
        if rows:
            payload = C.encode_batch(view, rows, [now] * len(rows), counts, keys)
            commit.appends.append(Append(view.id, 0, payload, len(rows), weights=sum(counts)))
            appended += len(rows)
        if state is not None and state.log_from is not None:
            start, end = state.log_from, snap.end_offset(view.id, 0)
            for batch in read_log(snap, view.id, 0, start, end):
                weights = pc.negate(batch.column(C.WEIGHT))
                batch = batch.set_column(batch.schema.get_field_index(C.WEIGHT), C.WEIGHT, weights)
                batch = batch.set_column(batch.schema.get_field_index(C.ROWTIME), C.ROWTIME,
                                         pa.repeat(pa.scalar(now, pa.timestamp("us", tz="UTC")), batch.num_rows))
                commit.appends.append(Append(view.id, 0, C.encode_table(batch), batch.num_rows,
                                             weights=pc.sum(weights).as_py() or 0))
                appended += batch.num_rows
        return appended

    def release(self, view: RelationDef) -> None:
        """The epoch driver takes over a view kept as its change log alone (its strategy is no
        longer a pipeline, after an upgrade say): its rows are retracted and its progress reset,
        so the driver rebuilds it from scratch in its state store, the form it maintains."""
        with self._commit_lock:
            commit = Commit()
            with self.engine.storage.snapshot() as snap:
                state = self._load_state(view.id, snap)
                self._retract_all(view, state, snap, commit, dt.datetime.now(dt.UTC))
                commit.puts.append((META, f"view:{view.id}".encode(), json.dumps({"inputs": {}, "epoch": 0}).encode()))
            self.engine.storage.commit(commit)
            self._states.pop(view.id, None)
        st = self.maintainer.status_of(view.id)
        st.processed, st.epochs, st.partials = {}, 0, None
        log.info("view %s: kept as its log until now; rebuilt by the epoch driver", view.name)

    # ---- batches --------------------------------------------------------------------------------

    def _on_batch(self, depth: int, batch_id: int, offsets: dict[str, Any], tables: dict[int, pa.Table],
                  errors: dict[int, dict[str, int]], state_rows_added: int,
                  failures: dict[int, StreamDBError]) -> None:
        """A pipeline batch's changes, per view: committed with the offsets they reflect (called
        from the pipeline's sink, in a Spark callback thread). The state's row count moves with
        them: a replayed batch, which no view takes, counted its rows before. A view in `failures`
        could not compute its changes: it fails alone, as one whose changes cannot be applied."""
        from streamdb.runtime.spark.log_source import backfill_done
        from streamdb.runtime.views import stage_changes

        engine = self.engine
        started = time.monotonic()
        running = self._running.get(depth)
        if running is None:
            return
        with self._commit_lock:
            catalog = engine.catalog.snapshot()
            commit = Commit()
            applied: list[tuple[int, bool, dict[int, tuple[int, ...]], int | None]] = []
            changed = False
            errors_changed = False  # a push query reading the view fails or goes on at once
            now = dt.datetime.now(dt.UTC)
            rels = offsets.get("rels", {})
            broken: list[int] = []
            with engine.storage.snapshot() as snap:
                for vid, df in running.views.items():
                    view = catalog.by_id(vid)
                    state = self._states.get(vid)
                    failed = self._failed.get(vid)
                    if view is None or state is None or state.batch >= batch_id or (
                            failed is not None and not failed.rebuilding):
                        continue  # dropped, this batch is a replay it already reflects, or to be rebuilt
                    closed_until = state.closed_until
                    spec = self._closing.get(vid)
                    if vid in failures:  # its own query failed in Spark: it has nothing to stage
                        log.warning("view %s: pipeline batch %d failed: %s; it is rebuilt", view.name, batch_id,
                                    failures[vid].message)
                        self._stage_failure(vid, state, failures[vid], batch_id, snap, commit)
                        broken.append(vid)
                        continue
                    mark = (len(commit.appends), len(commit.puts), len(commit.deletes))
                    try:
                        failpoints.view_commit(view.name, tables.get(vid))
                        if state.log_from is not None:
                            changed |= self._append_rows(view, tables.get(vid), commit, now) > 0
                        else:
                            if spec is None:
                                weights = self._weights(view, tables.get(vid))
                            else:
                                weights, closed_until = self._emit_on_close(view, spec, state, tables.get(vid),
                                                                            snap, commit)
                            changed |= stage_changes(view, snap, weights, commit, now) > 0
                        if vid in errors:
                            self._stage_errors(vid, errors[vid], snap, commit)
                    except Exception as e:  # noqa: BLE001 - one view's bug must not stop the pipeline's others
                        # Its changes are left out, so its rows no longer follow its inputs.
                        del commit.appends[mark[0]:], commit.puts[mark[1]:], commit.deletes[mark[2]:]
                        error = e if isinstance(e, StreamDBError) else InternalError(f"{type(e).__name__}: {e}")
                        log.exception("view %s: applying pipeline batch %d failed; it is rebuilt", view.name,
                                      batch_id)
                        self._stage_failure(vid, state, error, batch_id, snap, commit)
                        broken.append(vid)
                        continue
                    done = state.done or backfill_done(offsets, vid, state.joins, state.ops_base)
                    processed = {rid: tuple(rels[str(rid)]) for rid in df.relations() if str(rid) in rels}
                    st = self.maintainer.status_of(vid)
                    progress: dict[str, Any] = {"epoch": st.epochs + (1 if done else 0)}
                    if done:
                        progress["inputs"] = {str(k): list(v) for k, v in processed.items()}
                    new_state = _ViewState(state.depth, state.gen, state.ops_base, state.joins, state.fp, batch_id,
                                           done, closed_until=closed_until, log_from=state.log_from)
                    self._stage_state(vid, new_state, snap, commit, progress)
                    applied.append((vid, done, processed, closed_until))
            commit.puts.append((META, _committed_batch_key(depth), str(batch_id).encode()))
            if not applied and not broken:
                # A replay every view reflects (or none of its views takes): only the batch is
                # recorded, so the next start does not rewind to before it.
                engine.storage.commit(commit)
                return
            state_rows = None if running.state_rows is None else running.state_rows + state_rows_added
            if state_rows is not None:
                commit.puts.append((META, _state_rows_key(depth), str(state_rows).encode()))
            clock_timers = running.pipeline.clock_timers(batch_id)
            if clock_timers is not None:
                commit.puts.append((META, _clock_timers_key(depth), clock_timers.encode()))
            engine.storage.commit(commit)
            running.state_rows = state_rows
            engine.metrics.committed(commit)
            elapsed = (time.monotonic() - started) * 1000 + (running.pipeline.last_batch_ms or 0)
            for vid, done, processed, closed_until in applied:
                if vid in self._holds and (view := catalog.by_id(vid)) is not None:
                    self._note_held(view, done, processed)
                state = self._states[vid]
                state.batch = batch_id
                state.done = done
                state.closed_until = closed_until
                st = self.maintainer.status_of(vid)
                if done:
                    st.processed = processed
                    st.epochs += 1
                    st.last_epoch_ms = elapsed
                    st.last_epoch_at = time.time()
                    engine.metrics.epoch_done(M.MATERIALIZED_VIEW, elapsed / 1000)
                shown = st.error
                self._show_errors(vid)
                errors_changed |= st.error != shown
                self._show_healing(vid, done)
            running.failures = 0
            running.failed = None
            for vid in broken:
                self._show_broken(running, vid)
        # Push queries and views recomputed by the epoch driver may read these views' changes.
        self.maintainer.progressed(wake=changed or bool(broken) or errors_changed)

    def _stage_failure(self, view_id: int, state: _ViewState, error: StreamDBError, batch_id: int, snap: Any,
                       commit: Commit) -> None:
        """The view failed in this batch: it reads as failed until a rebuild from its inputs (its
        pipeline's next start, after a backoff) replaces its rows, and its stored state names no
        plan, so a restart of the server rebuilds it too."""
        self._errors.pop(view_id, None)  # the cached multiset may hold this batch's errors
        failed = self._failed.setdefault(view_id, _Failed(error))
        failed.error, failed.rebuilding = error, False
        self._stage_state(view_id, dataclasses.replace(state, fp=_BROKEN, batch=batch_id), snap, commit)

    def _show_broken(self, running: _Running, view_id: int) -> None:
        """Show a view whose batch could not be applied as failed, and restart its pipeline (which
        rebuilds it) after a backoff that grows while its rebuilds fail again."""
        failed = self._failed[view_id]
        error = failed.error
        st = self.maintainer.status_of(view_id)
        st.error, st.error_sqlstate, st.error_in_rows = error.message, error.sqlstate, False
        failed.attempts += 1
        delay = min(RETRY_MAX_SECONDS, RETRY_MIN_SECONDS * 2 ** (failed.attempts - 1))
        at = failed.retry_at = time.monotonic() + delay
        running.retry_at = at if running.retry_at is None else min(running.retry_at, at)
        self.engine.metrics.spark_failed(M.MATERIALIZED_VIEW)
        log.warning("view %s failed (rebuilt in %.0fs): %s", view_id, delay, error.message)

    def _show_healing(self, view_id: int, done: bool) -> None:
        """A view rebuilt after its batch could not be applied reads as failed, with that failure,
        until its rebuild has its whole backfill: not as a partial result."""
        failed = self._failed.get(view_id)
        if failed is None or not failed.rebuilding:
            return
        if done:  # healed: its backoff starts over at the next failure
            del self._failed[view_id]
            return
        st = self.maintainer.status_of(view_id)
        st.error, st.error_sqlstate, st.error_in_rows = failed.error.message, failed.error.sqlstate, False

    def _stage_errors(self, view_id: int, delta: dict[str, int], snap: Any, commit: Commit) -> None:
        """The view's errors as a multiset of messages, like its rows: a retracted bad row takes its
        error back (as in Materialize: the view reads as failed while any remains)."""
        current = self._errors_of(view_id, snap)
        for message, w in delta.items():
            n = current.get(message, 0) + w
            if n:
                current[message] = n
            else:
                current.pop(message, None)
        key = f"view-errors:{view_id}".encode()
        if current:
            commit.puts.append((META, key, json.dumps(current).encode()))
        else:
            commit.deletes.append((META, key))

    def _errors_of(self, view_id: int, snap: Any) -> dict[str, int]:
        if view_id not in self._errors:
            raw = snap.get(META, f"view-errors:{view_id}".encode())
            self._errors[view_id] = json.loads(raw) if raw else {}
        return self._errors[view_id]

    def _show_errors(self, view_id: int) -> None:
        st = self.maintainer.status_of(view_id)
        live = [m for m, n in self._errors.get(view_id, {}).items() if n > 0]
        if live:
            sqlstate, _, message = sorted(live)[0].partition(":")
            if sqlstate == SPARK_ROW_ERROR:  # Spark's own error for the row: Postgres's SQLSTATE
                error = translate_row_error(message)
                sqlstate, message = error.sqlstate, error.message
            st.error, st.error_sqlstate = message, sqlstate
        else:
            st.error, st.error_sqlstate = None, None
        st.error_in_rows = bool(live)

    def _append_rows(self, view: RelationDef, table: pa.Table | None, commit: Commit, now: dt.datetime) -> int:
        """An append-only view's batch: Spark's rows go to its log as one change batch."""
        if table is None or table.num_rows == 0:
            return 0
        batch = self.maintainer.log_batch(table, view, now)
        if batch.num_rows:
            weights = pc.sum(batch.column(C.WEIGHT)).as_py() or 0
            commit.appends.append(Append(view.id, 0, C.encode_table(batch), batch.num_rows, weights=weights))
        return batch.num_rows

    def _weights(self, view: RelationDef, table: pa.Table | None) -> Counter[tuple[Any, ...]]:
        weights: Counter[tuple[Any, ...]] = Counter()
        if table is None or table.num_rows == 0:
            return weights
        rows = self.maintainer.rows_of(table, view)
        for row, w in zip(rows, table.column("__w").to_pylist(), strict=True):
            weights[row] += w
        return weights

    def _close_spec(self, view: RelationDef, catalog: CatalogSnapshot) -> _CloseSpec | None:
        from streamdb.runtime.views import closing_point
        from streamdb.runtime.watermarks import delay_of

        point = closing_point(view, [c.name for c in view.columns])
        source = catalog.by_id(int(dict(view.extra)["eowc_input"])) if point is not None else None
        if point is None or source is None:
            return None
        one = dt.timedelta(microseconds=1)
        return _CloseSpec(point[0], point[1] // one, dt.timedelta(seconds=delay_of(source) or 0.0) // one)

    def _emit_on_close(self, view: RelationDef, spec: _CloseSpec, state: _ViewState, table: pa.Table | None,
                       snap: Any, commit: Commit) -> tuple[Counter[tuple[Any, ...]], int | None]:
        """An EMIT ON WINDOW CLOSE view's batch: its rows' changes held while their window is
        open (`partials:<view>`, keyed by closing time), and the rows of the windows the batch's
        watermark closed emitted, once each. A change to a window already emitted (a late event)
        is not applied: the view's rows never change. Returns (the view's changes, the new
        closing point)."""
        closed = state.closed_until
        if table is None or table.num_rows == 0:
            return Counter(), closed
        width = len(view.columns)
        marks = table.column(width).to_pylist()
        weights_col = table.column(table.num_columns - 1).to_pylist()
        # The max's changes: its old value retracted (w < 0), its new one added.
        top = max((_micros(m) or 0 for m, w in zip(marks, weights_col, strict=True) if m is not None and w > 0),
                  default=None)
        new_closed = closed
        if top is not None and (closed is None or top - spec.delay > closed):
            new_closed = top - spec.delay
        # Before the first event the global max is NULL: its row (all NULL) is held as never
        # closing and retracted by the max's first change, so it is never emitted.
        rows_table = table.filter(pc.is_null(table.column(width))).drop_columns([table.column_names[width]])
        changes = self._weights(view, rows_table)
        store = partials_store(view.id)
        held: dict[bytes, tuple[tuple[Any, ...], int]] = {}
        late = 0
        for row, w in changes.items():
            close = _micros(row[spec.column])
            close = None if close is None else close + spec.offset
            if close is not None and closed is not None and close <= closed:
                late += abs(w)
                continue
            key = _open_key(close, C.key_of(row))
            if key not in held:
                raw = snap.get(store, key)
                held[key] = C.decode_view_row(raw) if raw else (row, 0)
            held[key] = (row, held[key][1] + w)
        out: Counter[tuple[Any, ...]] = Counter()
        if new_closed is not None and new_closed != closed:
            limit = new_closed + (1 << 63)

            def due(key: bytes) -> bool:
                return int.from_bytes(key[len(_OPEN):len(_OPEN) + 8], "big") <= limit

            for key, value in snap.scan(store, _OPEN):
                if not due(key):
                    break
                row, n = held.pop(key) if key in held else C.decode_view_row(value)
                out[row] += n
                commit.deletes.append((store, key))
            for key in [k for k in held if due(k)]:
                row, n = held.pop(key)
                out[row] += n
        for key, (row, n) in held.items():
            if n:
                commit.puts.append((store, key, C.encode_view_row(row, n)))
            else:
                commit.deletes.append((store, key))
        if late:
            log.debug("view %s: %d changes to windows already emitted, not applied", view.name, late)
        return Counter({row: n for row, n in out.items() if n}), new_closed

    def _on_failure(self, depth: int, error: StreamDBError) -> None:
        running = self._running.get(depth)
        if running is None:
            return
        running.failures += 1
        running.failed = error
        delay = min(RETRY_MAX_SECONDS, RETRY_MIN_SECONDS * 2 ** (running.failures - 1))
        running.retry_at = time.monotonic() + delay
        self.engine.metrics.spark_failed(M.MATERIALIZED_VIEW)
        for vid in running.views:
            st = self.maintainer.status_of(vid)
            st.error, st.error_sqlstate = error.message, error.sqlstate
            st.error_in_rows = False
        log.warning("pipeline %s failed (retry in %.0fs): %s", pipeline_name(depth), delay, error.message)
        self.maintainer.progressed(wake=True)

    def release_failed(self, view_id: int) -> set[int]:
        """`view_id` failed its CREATE and is gone from the catalog. If its pipeline is failing, the
        other views in it failed with it (a batch fails as a whole): their errors are cleared and
        the pipeline restarts without it at once, not after its retry delay. Returns those views
        (they fail again, with their own error, if the cause was theirs)."""
        for running in self._running.values():
            if view_id not in running.views or running.failed is None:
                continue
            others = {vid for vid in running.views if vid != view_id}
            for vid in others:
                st = self.maintainer.status_of(vid)
                if not st.error_in_rows and st.error == running.failed.message:
                    st.error, st.error_sqlstate = None, None
            running.retry_at = time.monotonic()
            self.maintainer.progressed(wake=True)
            return others
        return set()

    def stop(self) -> None:
        for running in list(self._running.values()):
            running.pipeline.stop()
        self._running.clear()

    def state_rows(self) -> dict[str, int]:
        """Entries each pipeline keeps in Spark's state stores, as of its last committed batch."""
        return {pipeline_name(r.depth): r.state_rows for r in self._running.values() if r.state_rows is not None}

    def describe(self) -> list[tuple[str, int, bool, int]]:
        """(pipeline, views, active, batches) of each pipeline, for SHOW PIPELINES-like output."""
        return [(pipeline_name(r.depth), len(r.views), bool(r.pipeline.active), r.pipeline.batches)
                for r in self._running.values()]

