"""Declared indexes (CREATE INDEX) kept current off the event loop.

A point lookup is answered on the event loop only from an index built over the relation's latest
committed rows (`RelationReader.current_key_index`); after a change, the first lookup would
otherwise patch the index in a worker thread. For a declared index a thread of its own does that
as soon as the change is committed, so lookups keep the fast path (docs/serving.md, "Declared
indexes"). Undeclared lookups still build and patch their indexes on demand.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from streamdb.catalog import RelationDef
from streamdb.planner.lookup import key_order
from streamdb.runtime.catalog_store import stored_in

if TYPE_CHECKING:
    from streamdb.runtime.engine import Engine

log = logging.getLogger("streamdb.indexes")

POLL_SECONDS = 0.02
_FAILURE_BACKOFF_SECONDS = 5.0


def index_columns(rel: RelationDef, columns: tuple[str, ...]) -> tuple[str, ...]:
    """The index's key columns in the order point lookups use, so a lookup finds it."""
    return key_order(columns, tuple(c.name for c in rel.columns))


def build_index(engine: Engine, rel: RelationDef, columns: tuple[str, ...]) -> bool:
    """Build or patch the relation's index by `columns` over its latest rows (blocking). False
    when the relation's data is gone (dropped meanwhile)."""
    with engine.storage.snapshot() as snap:
        if not stored_in(snap, rel):
            return False
        engine.reader.key_index(rel, snap, columns)
    return True


class IndexWarmer:
    """Keeps every declared index current: polls the committed offsets of indexed relations
    (a dictionary read each) and patches an index whose relation has changed."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed: dict[int, float] = {}  # index id -> monotonic time of its last failure
        self._checked: dict[int, float] = {}  # index id -> when a snapshot last checked it

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="index-warmer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            catalog = self._engine.catalog.snapshot()
            for index in catalog.objects_of("index"):
                rel = catalog.by_id(index.depends_on[0]) if index.depends_on else None
                if rel is None or self._stop.is_set():
                    continue
                failed = self._failed.get(index.id)
                if failed is not None and time.monotonic() - failed < _FAILURE_BACKOFF_SECONDS:
                    continue
                columns = index_columns(rel, tuple(c.name for c in index.columns))
                storage = self._engine.storage
                offsets = tuple(storage.committed_end_offset(rel.id, p) for p in range(rel.partitions))
                if None in offsets:  # a log that needs a snapshot to know its ends (Kafka): once a second
                    if time.monotonic() - self._checked.get(index.id, 0.0) < 1.0:
                        continue
                    self._checked[index.id] = time.monotonic()
                elif self._engine.reader.current_key_index(rel, offsets, columns) is not None:  # type: ignore[arg-type]
                    continue
                try:
                    build_index(self._engine, rel, columns)
                    self._failed.pop(index.id, None)
                except Exception:  # noqa: BLE001 - a lookup builds it on demand and reports the error
                    log.warning("keeping index %s of %s current failed", index.name, rel.name, exc_info=True)
                    self._failed[index.id] = time.monotonic()
