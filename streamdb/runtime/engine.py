"""The engine: storage, catalog, readers and Spark, shared by every session."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path

from streamdb.config import Settings
from streamdb.errors import InvalidAuthorization, InvalidCatalogName, Notice
from streamdb.metrics import Metrics
from streamdb.runtime import embedded
from streamdb.runtime.api import LoginInfo
from streamdb.runtime.catalog_store import CatalogStore
from streamdb.runtime.queued_rows import QueuedRows
from streamdb.runtime.reader import RelationReader
from streamdb.runtime.views import ViewMaintainer
from streamdb.runtime.watermarks import Watermarks
from streamdb.storage import open_storage

log = logging.getLogger("streamdb.engine")


class Engine:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        data_dir = Path(settings.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        self.storage = open_storage(settings.log, str(data_dir / "log"),
                                    kafka_bootstrap=settings.kafka_bootstrap,
                                    ingest_bytes=settings.storage_ingest_bytes)
        self.metrics = Metrics(self)
        self.catalog = CatalogStore(self.storage)
        self.reader = RelationReader(self.storage)
        self.watermarks = Watermarks(self.storage)
        self.ddl_lock = asyncio.Lock()
        self._table_locks: dict[int, asyncio.Lock] = {}
        self._queued_rows: dict[int, QueuedRows] = {}
        self._pids = itertools.count(os.getpid() * 100 % 1_000_000 + 1)
        self.sessions: dict[int, object] = {}
        self.views = ViewMaintainer(self)
        from streamdb.runtime.indexes import IndexWarmer

        self.indexes = IndexWarmer(self)
        self.catalog.listeners.append(lambda: self.views.progressed(wake=True))
        from streamdb.runtime.connectors.manager import SourceManager

        self.sources = SourceManager(self)
        from streamdb.runtime.connectors.sinks import SinkManager

        self.sinks = SinkManager(self)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.spark = None
        if settings.spark_enabled:
            from streamdb.runtime.spark.session import SparkRuntime

            self.spark = SparkRuntime(
                settings.spark_master, work_dir=str(data_dir / "spark"),
                conf={"spark.sql.shuffle.partitions": str(settings.spark_shuffle_partitions),
                      **settings.spark_conf},
                nice=settings.spark_nice,
                jvm_options=settings.spark_jvm_options or "",
            )

    def start(self) -> None:
        """Start background work; call from the event loop."""
        self.loop = asyncio.get_running_loop()
        if self.spark is not None:
            gate = self.spark.gateway_launched
            embedded.launch_gate.clear()
            self.spark.start_background()

            def open_gate() -> None:
                gate.wait(embedded.GATE_TIMEOUT_SECONDS)
                embedded.launch_gate.set()

            threading.Thread(target=open_gate, name="embedded-gate", daemon=True).start()
        self._drop_pending_relations()
        from streamdb.runtime import transient_views

        transient_views.drop_leftovers(self)
        self.views.pipelines.drop_stale_checkpoints()
        self.views.pipelines.drop_push_checkpoints()
        self.views.start()
        self.indexes.start()
        self.sources.sync()
        self.sinks.sync()
        log.info("catalog version %d with %d relations", self.catalog.snapshot().version,
                 len(self.catalog.snapshot().relations))

    def _drop_pending_relations(self) -> None:
        """The data of replaced views whose drop a restart interrupted (create_relation.drop_pending)."""
        from streamdb.runtime.statements.create_relation import META, background, drop_pending

        with self.storage.snapshot() as snap:
            pending = [int(key.split(b":")[1]) for key, _ in snap.scan(META, b"pending-drop:")]
        if pending:
            background(drop_pending(self, pending))

    def sync_connectors(self) -> None:
        """After DDL: sources for new external streams and new sinks start, dropped ones stop."""
        self.sources.sync()
        self.sinks.sync()

    def file_root(self) -> Path:
        """Where FILE connectors may read and write: nothing outside it."""
        root = self.settings.file_root or Path(self.settings.data_dir) / "files"
        root.mkdir(parents=True, exist_ok=True)
        return root.resolve()

    def table_lock(self, rel_id: int, *, queued_ok: bool = False) -> contextlib.AbstractAsyncContextManager[None]:
        """The table's write lock. Taken, it waits for the table's queued commits (QueuedRows) to
        be durable, as its holder reads the store; `queued_ok`: the holder reads them from
        `queued_rows` instead (a write by primary key)."""
        lock = self._table_locks.get(rel_id)
        if lock is None:
            lock = self._table_locks[rel_id] = asyncio.Lock()
        return lock if queued_ok else self._drained(lock, self.queued_rows(rel_id))

    @staticmethod
    @contextlib.asynccontextmanager
    async def _drained(lock: asyncio.Lock, queued: QueuedRows) -> AsyncIterator[None]:
        async with lock:
            await queued.drain()
            yield

    def queued_rows(self, rel_id: int) -> QueuedRows:
        queued = self._queued_rows.get(rel_id)
        if queued is None:
            queued = self._queued_rows[rel_id] = QueuedRows()
        return queued

    def forget_writes(self, rel_id: int) -> None:
        """A dropped table: its write lock and queued rows go, unless a writer still has them."""
        lock = self._table_locks.get(rel_id)
        if lock is not None and not lock.locked():
            del self._table_locks[rel_id]
        queued = self._queued_rows.get(rel_id)
        if queued is not None and queued.idle:
            del self._queued_rows[rel_id]

    def notify_write(self, rel_id: int) -> None:
        """A relation changed: views over it have work to do."""
        self.views.notify()

    async def flush(self, only: set[int] | None = None, raise_failing: bool = False) -> list[Notice]:
        """Acknowledged writes are durable and visible to ad hoc reads at once; wait for the views
        (all, or those in `only`). Returns a warning for each view that is failing and so could not
        catch up, or with `raise_failing` raises the first one's error."""
        return await self.views.flush(only, raise_failing)

    def login_info(self, user: str) -> LoginInfo | None:
        role = self.catalog.snapshot().role(user)
        if role is None:
            return None
        return LoginInfo(role.name, role.can_login, role.superuser, role.scram_verifier, role.md5_hash)

    def new_session(self, user: str, database: str, options: dict[str, str]):
        from streamdb.runtime.session import EngineSession

        role = self.catalog.snapshot().role(user)
        if role is None:
            raise InvalidAuthorization(f'role "{user}" does not exist')
        if not role.can_login:
            raise InvalidAuthorization(f'role "{user}" is not permitted to log in')
        if database not in (self.settings.database, user) and database != "":
            raise InvalidCatalogName(f'database "{database}" does not exist',
                                     hint=f'The database is called "{self.settings.database}".')
        pid = next(self._pids)
        session = EngineSession(self, user, self.settings.database, options, pid)
        self.sessions[pid] = session
        return session

    def close(self) -> None:
        self.indexes.stop()
        if self.spark is not None:
            try:
                self.spark.stop()
            except Exception:  # noqa: BLE001 - shutting down; report and go on
                log.exception("stopping Spark failed")
        self.storage.close()
