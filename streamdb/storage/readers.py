"""Log readers for other processes than the server's: Spark tasks read the log where they run.

The server opens its RocksDB read-write (one process may); a task opens it as a RocksDB
*secondary* instance, which replays the server's latest writes on ``try_catch_up_with_primary``
(about a millisecond) and never writes. With ``--log kafka`` the batches themselves are read from
Kafka by the task, through the index a secondary instance reads. Each process keeps its readers
open (tasks of one executor reuse them); see docs/views.md.
"""

from __future__ import annotations

import os
import tempfile
import threading
from typing import Any

from streamdb.errors import ConfigurationError
from streamdb.storage.base import LogReader, LogReaderSpec, Snapshot

_lock = threading.Lock()
_open: dict[LogReaderSpec, LogReader] = {}


class RocksDBLogReader(LogReader):
    def __init__(self, path: str) -> None:
        from rocksdict import AccessType, Options, Rdict

        self.path = path
        # A secondary instance keeps its own info log: one directory per process.
        self._secondary = tempfile.mkdtemp(prefix=f"streamdb-secondary-{os.getpid()}-")
        self._db: Any = Rdict(path, Options(raw_mode=True), access_type=AccessType.secondary(self._secondary))
        self._lock = threading.Lock()

    def snapshot(self) -> Snapshot:
        from rocksdict import ReadOptions

        from streamdb.storage.rocksdb import RocksDBSnapshot, storage_error

        with self._lock:
            try:
                self._db.try_catch_up_with_primary()
                return RocksDBSnapshot(self._db.iter(ReadOptions()))
            except Exception as exc:
                raise storage_error(exc, f"read the log at {self.path}") from exc

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


class KafkaLogReader(LogReader):
    """The index through a RocksDB secondary, the batches from Kafka."""

    def __init__(self, path: str, bootstrap: str) -> None:
        from streamdb.storage.kafka_log import KafkaIndexReader

        self.index = RocksDBLogReader(path)
        self._kafka = KafkaIndexReader(bootstrap)

    def snapshot(self) -> Snapshot:
        return self._kafka.snapshot(self.index.snapshot())

    def close(self) -> None:
        self.index.close()
        self._kafka.close()


def open_log_reader(spec: LogReaderSpec) -> LogReader:
    """This process's reader for `spec` (opened once, shared by the process's tasks)."""
    with _lock:
        reader = _open.get(spec)
        if reader is None:
            if spec.kind == "rocksdb":
                reader = RocksDBLogReader(spec.path)
            elif spec.kind == "kafka":
                if not spec.kafka_bootstrap:
                    raise ConfigurationError("a Kafka log reader needs the brokers' address")
                reader = KafkaLogReader(spec.path, spec.kafka_bootstrap)
            else:
                raise ConfigurationError(f"unknown log kind {spec.kind!r}")
            _open[spec] = reader
        return reader


def forget_log_reader(spec: LogReaderSpec) -> None:
    """Close and drop this process's reader for `spec` (after a read error: the next opens anew)."""
    with _lock:
        reader = _open.pop(spec, None)
    if reader is not None:
        try:
            reader.close()
        except Exception:  # noqa: BLE001 - it failed already; a new one will be opened
            pass
