"""Push queries: each change of a query's result, sent to the client as it happens.

A subscription is maintained like a view, by the same epoch driver and on Spark,
but its result lives in memory and its changes go to a bounded queue that the
wire layer drains. Linear queries run on their inputs' changes only; others are
recomputed and diffed with the previous result. A subscriber that falls more than
`max_buffered` changes behind (setting `subscriber_buffer_changes`) gets a clear error
instead of growing memory.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import threading
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from streamdb.errors import StreamDBError
from streamdb.planner.plans import SubscribePlan
from streamdb.storage.base import Snapshot

DEFAULT_MAX_BUFFERED_CHANGES = 100_000

_ids = itertools.count(1)


@dataclass(eq=False)
class Subscription:
    plan: SubscribePlan
    loop: asyncio.AbstractEventLoop
    max_buffered: int = DEFAULT_MAX_BUFFERED_CHANGES
    id: int = field(default_factory=lambda: next(_ids))
    processed: dict[int, tuple[int, ...]] = field(default_factory=dict)
    previous: Counter[tuple[Any, ...]] | None = None  # recompute mode: the last result
    started: bool = False
    buffered: int = 0
    snapshot_unread: int = 0  # rows of the snapshot still queued (not in `buffered`)
    epochs: int = 0
    last_epoch_ms: float | None = None
    error: StreamDBError | None = None
    closed: bool = False
    baseline: Snapshot | None = None  # recompute mode: the inputs as of the subscription
    view_id: int | None = None  # a query that is not linear: its own view's (transient_views.py)
    waiting: bool = False  # its view is catching up: no epoch yet
    _queue: asyncio.Queue[list[tuple[Any, ...]] | None] = field(default_factory=asyncio.Queue)
    _leftover: list[tuple[Any, ...]] = field(default_factory=list)
    _baseline_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def unread(self) -> int:
        """Changes queued for the client, the snapshot's included (SHOW QUERIES, metrics)."""
        return self.buffered + self.snapshot_unread

    def deliver(self, changes: list[tuple[tuple[Any, ...], int]], at: dt.datetime, *, snapshot: bool = False) -> None:
        """From the maintainer's thread: queue the changes as (op, rowtime, *row) rows. The
        snapshot (the current result, sent first) is queued whatever its size: the limit is on
        changes a reader leaves unread, and a push query over a stream of a million events must
        not fail before its reader has had a chance to read."""
        rows: list[tuple[Any, ...]] = []
        for row, weight in changes:
            op = "insert" if weight > 0 else "delete"
            rows.extend([(op, at, *row)] * abs(weight))
        if rows:
            self.loop.call_soon_threadsafe(self._push, rows, snapshot)

    def take_baseline(self) -> Snapshot | None:
        """The baseline snapshot, now the caller's to close (None: already taken)."""
        with self._baseline_lock:
            snap, self.baseline = self.baseline, None
        return snap

    def release_baseline(self) -> None:
        if (snap := self.take_baseline()) is not None:
            snap.close()

    def fail(self, error: StreamDBError) -> None:
        self.loop.call_soon_threadsafe(self._fail, error)

    def _push(self, rows: list[tuple[Any, ...]], snapshot: bool = False) -> None:
        if self.closed:
            return
        if snapshot:  # read first (it is the first batch queued), and not counted against the limit
            self.snapshot_unread += len(rows)
            self._queue.put_nowait(rows)
            return
        if self.buffered + len(rows) > self.max_buffered:
            self._fail(StreamDBError(
                f"subscriber too slow: more than {self.max_buffered} changes waiting to be read",
                sqlstate="53000", hint="Read results faster, or subscribe to a narrower query."))
            return
        self.buffered += len(rows)
        self._queue.put_nowait(rows)

    def _fail(self, error: StreamDBError) -> None:
        if not self.closed:
            self.error = error
            self._queue.put_nowait(None)

    async def take(self, limit: int | None, timeout: float | None) -> list[tuple[Any, ...]]:
        """Up to `limit` rows (None: all that are ready). Waits for the first row until `timeout`
        seconds (None: as long as it takes), then returns what is ready without waiting more."""
        out: list[tuple[Any, ...]] = []
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while limit is None or len(out) < limit:
            if self._leftover:
                room = len(self._leftover) if limit is None else limit - len(out)
                out.extend(self._leftover[:room])
                del self._leftover[:room]
                continue
            if out and self._queue.empty():
                break
            try:
                if deadline is None:
                    rows = await self._queue.get()
                else:
                    rows = await asyncio.wait_for(self._queue.get(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                break
            if rows is None:
                assert self.error is not None
                raise self.error
            self._taken(len(rows))
            self._leftover = list(rows)
        return out

    async def batches(self) -> AsyncIterator[list[tuple[Any, ...]]]:
        while True:
            rows = await self._queue.get()
            if rows is None:
                assert self.error is not None
                raise self.error
            self._taken(len(rows))
            yield rows

    def _taken(self, n: int) -> None:
        from_snapshot = min(n, self.snapshot_unread)
        self.snapshot_unread -= from_snapshot
        self.buffered -= n - from_snapshot
