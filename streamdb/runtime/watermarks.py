"""Event-time watermarks of streams, and the late events they reveal.

A stream declared with a watermark (`WITH (timestamp = 'ts', watermark = '5 seconds')` or
`WATERMARK FOR ts AS ts - INTERVAL '5' SECOND`) has watermark = the largest event time seen so
far minus the delay. An event older than the watermark when it arrives is late: as RisingWave's
watermark filter does, it is not added to the stream, so no query, view, join or window sees it;
it is counted (DESCRIBE, SHOW QUERIES), and an INSERT or COPY that brought it says so in a
WARNING. The state is committed with the events that move it, so it survives a crash exactly as
they do.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

from streamdb.catalog import RelationDef
from streamdb.storage.base import Snapshot, Storage

META = "meta"
DELAY_KEY = "watermark_delay_seconds"


def delay_of(rel: RelationDef) -> float | None:
    value = dict(rel.extra).get(DELAY_KEY)
    return None if value is None else float(value)


def _key(rel_id: int) -> bytes:
    return f"wm:{rel_id}".encode()


@dataclass(frozen=True)
class WatermarkState:
    max_event_time: dt.datetime | None = None
    late_events: int = 0

    def watermark(self, delay: float) -> dt.datetime | None:
        if self.max_event_time is None:
            return None
        return self.max_event_time - dt.timedelta(seconds=delay)

    def admitted(self, event_times: list[dt.datetime | None], delay: float) -> tuple[list[int], WatermarkState]:
        """The positions of the events that are on time, in order (each against the watermark the
        events before it left), and the state after them. An event without an event time (NULL)
        is kept and moves nothing."""
        top, late = self.max_event_time, self.late_events
        lag = dt.timedelta(seconds=delay)
        on_time = []
        for i, t in enumerate(event_times):
            if t is None:
                on_time.append(i)
                continue
            if top is not None and t < top - lag:
                late += 1
                continue
            on_time.append(i)
            if top is None or t > top:
                top = t
        return on_time, WatermarkState(top, late)

    def to_json(self) -> bytes:
        top = self.max_event_time.isoformat() if self.max_event_time else None
        return json.dumps({"max_event_time": top, "late_events": self.late_events}).encode()

    @staticmethod
    def from_json(raw: bytes) -> WatermarkState:
        d = json.loads(raw)
        top = dt.datetime.fromisoformat(d["max_event_time"]) if d.get("max_event_time") else None
        return WatermarkState(top, int(d.get("late_events", 0)))


class Watermarks:
    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._states: dict[int, WatermarkState] = {}

    def state(self, rel_id: int) -> WatermarkState:
        st = self._states.get(rel_id)
        if st is None:
            with self._storage.snapshot() as snap:
                raw = snap.get(META, _key(rel_id))
            st = WatermarkState.from_json(raw) if raw else WatermarkState()
            self._states[rel_id] = st
        return st

    def put(self, rel_id: int, state: WatermarkState) -> tuple[str, bytes, bytes]:
        """The storage put recording `state`; call `installed` once it is committed."""
        return (META, _key(rel_id), state.to_json())

    def installed(self, rel_id: int, state: WatermarkState) -> None:
        self._states[rel_id] = state

    def forget(self, rel_id: int) -> None:
        self._states.pop(rel_id, None)

    def watermark(self, rel: RelationDef, snap: Snapshot | None = None) -> dt.datetime | None:
        """The relation's watermark; at `snap`, the one committed with the events that snapshot
        holds (the in-memory state is installed only after the commit, a moment later)."""
        delay = delay_of(rel)
        if delay is None:
            return None
        if snap is not None:
            raw = snap.get(META, _key(rel.id))
            return (WatermarkState.from_json(raw) if raw else WatermarkState()).watermark(delay)
        return self.state(rel.id).watermark(delay)
