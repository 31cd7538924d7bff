"""Live figures of relations, views and push queries for the console's charts.

Read from the engine's own state, as SHOW QUERIES / SHOW SOURCES do
(streamdb/runtime/statements/show.py), sampled once a second into small ring buffers so the
browser can draw the last two minutes without keeping state of its own.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from streamdb.runtime.watermarks import delay_of

if TYPE_CHECKING:
    from streamdb.catalog import RelationDef
    from streamdb.runtime.engine import Engine

HISTORY_POINTS = 120  # two minutes at one sample a second
SHOWN_KINDS = ("stream", "table", "view", "materialized_view")


@dataclass
class Point:
    """One sample of one relation or query, as charted."""

    t: float  # unix time, seconds
    rows: int | None
    input_rate: float  # input records per second since the previous sample
    lag: int | None
    freshness_ms: float | None
    errors: int


@dataclass
class Current:
    """The latest figures of a relation (or push query) beside its history."""

    name: str
    kind: str
    rows: int | None = None
    input_total: int = 0  # records appended (streams, tables) or processed (views, push queries)
    input_rate: float = 0.0
    lag: int | None = None
    freshness_ms: float | None = None
    epochs: int | None = None
    last_epoch_ms: float | None = None
    status: str | None = None
    error: str | None = None
    errors: int = 0  # bad records + late events + a failing view
    bad_records: int | None = None
    late_events: int | None = None
    dead_letters: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)


def _late_events(engine: Engine, inputs: tuple[int, ...]) -> int | None:
    catalog = engine.catalog.snapshot()
    counts = [engine.watermarks.state(rel.id).late_events for rid in inputs
              if (rel := catalog.by_id(rid)) is not None and delay_of(rel) is not None]
    return sum(counts) if counts else None


class StatsSampler:
    """Keeps the history; `sample()` runs off the event loop (it reads view state from storage)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.history: dict[str, deque[Point]] = {}
        self.current: dict[str, Current] = {}
        self._previous_total: dict[str, tuple[float, int]] = {}
        self._caught_up_at: dict[str, float] = {}  # when each view last had no lag
        self._lock = threading.Lock()  # the sampling task and a first poll may sample at once
        self._publish_lock = threading.Lock()  # history and current, read by the event loop

    def sample(self) -> None:
        with self._lock:
            self._sample()

    def _sample(self) -> None:
        now = time.time()
        engine = self.engine
        catalog = engine.catalog.snapshot()
        latest: dict[str, Current] = {}
        for rel in sorted(catalog.relations.values(), key=lambda r: r.name):
            if rel.kind in SHOWN_KINDS:
                latest[rel.name] = self._relation(rel, now)
        for sub in list(engine.views.subscriptions.values()):
            key = f"push query {sub.id}"
            status = "failed" if sub.error else ("running" if sub.started else "starting")
            inputs = tuple(i.relation_id for i in sub.plan.query.inputs if i.relation_id is not None)
            late = _late_events(engine, inputs)
            cur = Current(key, "push query", rows=sub.unread, epochs=sub.epochs,
                          last_epoch_ms=sub.last_epoch_ms, status=status,
                          error=sub.error.message if sub.error else None, late_events=late,
                          input_total=sum(sum(v) for v in sub.processed.values()))
            cur.errors = (late or 0) + (1 if sub.error else 0)
            latest[key] = cur
        with self._publish_lock:
            for key, cur in latest.items():
                before = self._previous_total.get(key)
                if before is not None and now > before[0]:
                    cur.input_rate = max(0.0, (cur.input_total - before[1]) / (now - before[0]))
                self._previous_total[key] = (now, cur.input_total)
                points = self.history.setdefault(key, deque(maxlen=HISTORY_POINTS))
                points.append(Point(now, cur.rows, round(cur.input_rate, 3), cur.lag, cur.freshness_ms, cur.errors))
            for gone in [k for k in self.history if k not in latest]:
                del self.history[gone]
                self._previous_total.pop(gone, None)
                self._caught_up_at.pop(gone, None)
            self.current = latest

    def _relation(self, rel: RelationDef, now: float) -> Current:
        engine = self.engine
        extra = dict(rel.extra)
        cur = Current(rel.name, rel.shown_kind, dead_letters=extra.get("dead_letters"))
        with engine.storage.snapshot() as snap:
            if rel.kind != "view":  # a plain view has no stored rows of its own
                cur.rows = engine.reader.row_count(rel, snap)
            if rel.kind in ("stream", "table"):
                cur.input_total = sum(engine.reader.end_offsets(rel, snap))
        if rel.kind == "materialized_view":
            st = engine.views.status.get(rel.id)
            cur.lag = engine.views.lag(rel)
            cur.epochs = st.epochs if st else 0
            cur.last_epoch_ms = st.last_epoch_ms if st else None
            cur.error = st.error if st else None
            cur.status = "failed" if cur.error else ("running" if st and st.epochs else "starting")
            cur.input_total = sum(sum(v) for v in st.processed.values()) if st else 0
            cur.late_events = _late_events(engine, rel.depends_on)
            # Freshness: how long the view has been behind its inputs (0 when it reflects every write).
            if cur.lag == 0 and st and st.epochs:
                self._caught_up_at[rel.name] = now
            since = self._caught_up_at.setdefault(rel.name, now)
            cur.freshness_ms = round((now - since) * 1000, 1)
        elif rel.kind == "stream" and delay_of(rel) is not None:
            cur.late_events = engine.watermarks.state(rel.id).late_events
        if extra.get("external"):
            src = engine.sources.status(rel.id)
            failed = engine.sources.failed.get(rel.id)
            cur.status = "failed" if failed else (src.state if src else "stopped")
            cur.bad_records = src.bad_records if src else 0
            cur.error = failed or (src.last_error if src else None)
        cur.errors = (cur.bad_records or 0) + (cur.late_events or 0) + (1 if cur.error else 0)
        return cur

    def snapshot(self) -> dict[str, Any]:
        """The JSON of GET /api/stats."""
        out = []
        with self._publish_lock:  # brief: the figures are read outside it
            for key, cur in self.current.items():
                item = asdict(cur)
                item["history"] = [asdict(p) for p in self.history.get(key, ())]
                out.append(item)
        return {"now": time.time(), "items": out}
