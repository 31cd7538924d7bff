"""Durable storage: per-partition logs of change batches plus key/value stores.

``open_storage("rocksdb", path)`` returns a Storage; see ``base`` for the interface
and docs/storage.md for the design.
"""

from __future__ import annotations

from typing import Any

from streamdb.errors import ConfigurationError
from streamdb.storage.base import Append, Commit, CommitResult, Snapshot, Storage, state_store

__all__ = [
    "Append",
    "Commit",
    "CommitResult",
    "Snapshot",
    "Storage",
    "open_storage",
    "state_store",
]


def open_storage(kind: str, path: str, **opts: Any) -> Storage:
    """Open the storage backend ``kind`` ('rocksdb', or 'kafka': logs in Kafka topics, stores in RocksDB) at ``path``.

    ``opts`` are backend options (for rocksdb: sync, write_buffer_size,
    block_cache_size, compression, max_group_commits, max_group_bytes). Options
    meant for another backend (kafka_*) are ignored, so callers can pass the whole
    configuration; unknown options raise ConfigurationError.
    """
    if kind == "rocksdb":
        from streamdb.storage.rocksdb import RocksDBStorage

        own = {k: v for k, v in opts.items() if not k.startswith("kafka_")}
        try:
            return RocksDBStorage(path, **own)
        except TypeError as exc:
            raise ConfigurationError(f"invalid rocksdb storage option: {exc}") from exc
    if kind == "kafka":
        from streamdb.storage.kafka_log import KafkaLogStorage

        own = {k: v for k, v in opts.items() if not k.startswith("kafka_")}
        return KafkaLogStorage(path, opts.get("kafka_bootstrap"), **own)
    raise ConfigurationError(f"unknown storage kind {kind!r} (expected 'rocksdb' or 'kafka')")
