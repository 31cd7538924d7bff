"""Relations' change logs in Kafka topics; key/value stores and the log's index in RocksDB.

`streamdb serve --log kafka --kafka-bootstrap host:port`: every appended batch is one Kafka
message (the same Arrow IPC payload) in the relation's topic, produced with an idempotent
producer and acks=all, so a commit is acknowledged only once its batches are replicated. Then
one atomic RocksDB write records, next to the commit's puts and deletes, where each batch lives
(an index: relation, partition, first offset -> Kafka offset, count) and each partition's end.

Why an index: our offsets count change records, Kafka's count messages, and a crash between
producing and the local write leaves messages nobody acknowledged. Those orphans are never
indexed, so readers never see them, and the offsets they would have taken are assigned again
by the next commit. Reads fetch indexed messages by Kafka offset and skip the rest.

Topics are named `<prefix>-r<relation id>` with a prefix made once per data directory, so many
servers can share one cluster. All partitions of a relation go to Kafka partition 0 of its
topic (a total order, and no assumption about how many partitions an auto-created topic has);
the record's partition is in the index. Dropping a relation forgets its index; the topic stays
(deleting topics needs admin rights some clusters do not grant).
"""

from __future__ import annotations

import asyncio
import struct
import threading
import uuid
from collections.abc import Iterator
from typing import Any

from streamdb.errors import ConfigurationError, InternalError, ObjectNotInPrerequisiteState
from streamdb.storage.base import Commit, CommitResult, Snapshot, Storage

INDEX = "kafkalog"  # (relation, partition, first offset) -> (Kafka offset, count)
ENDS = "kafkalog-end"  # (relation, partition) -> next offset
META = "meta"
PREFIX_KEY = b"kafka-log-prefix"
_KEY = struct.Struct(">QIQ")  # big-endian so keys sort by relation, partition, first offset
_END = struct.Struct(">QI")
_ENTRY = struct.Struct(">QQ")
PRODUCE_TIMEOUT_SECONDS = 30.0


def _index_key(rel: int, partition: int, first: int) -> bytes:
    return _KEY.pack(rel, partition, first)


class KafkaLogStorage(Storage):
    def __init__(self, path: str, bootstrap: str | None, **local_opts: Any) -> None:
        if not bootstrap:
            raise ConfigurationError("--log kafka needs --kafka-bootstrap host:port")
        from confluent_kafka import Producer

        from streamdb.storage.rocksdb import RocksDBStorage

        self.local = RocksDBStorage(path, **local_opts)
        self.bootstrap = bootstrap
        with self.local.snapshot() as snap:
            prefix = snap.get(META, PREFIX_KEY)
        if prefix is None:
            prefix = f"streamdb-{uuid.uuid4().hex[:12]}".encode()
            self.local.commit(Commit(puts=[(META, PREFIX_KEY, prefix)]))
        self.prefix = prefix.decode()
        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                   "linger.ms": 0, "message.max.bytes": 64 << 20})
        self._lock = threading.Lock()  # commits are serialized: offsets are assigned in order
        self._closed = False
        self._fetcher = _Fetcher(bootstrap, self.prefix)

    def topic(self, rel: int) -> str:
        return self._fetcher.topic(rel)

    # ---- writes --------------------------------------------------------------------------

    def commit(self, commit: Commit) -> CommitResult:
        if self._closed:
            raise ObjectNotInPrerequisiteState("storage is closed")
        with self._lock:
            local = Commit(puts=list(commit.puts), deletes=list(commit.deletes))
            ends: dict[tuple[int, int], int] = {}
            dropped = set(commit.drop_relations)
            with self.local.snapshot() as snap:
                for rel in dropped:
                    # Forget the dropped relation's index and ends (its topic stays).
                    for store in (INDEX, ENDS):
                        local.deletes.extend((store, key) for key, _ in snap.scan(store, struct.pack(">Q", rel)))
                firsts: list[int] = []
                for a in commit.appends:
                    key = (a.relation_id, a.partition)
                    if key not in ends:
                        raw = None if a.relation_id in dropped else snap.get(ENDS, _END.pack(*key))
                        ends[key] = int.from_bytes(raw, "big") if raw else 0
                    firsts.append(ends[key])
                    ends[key] += a.count
            offsets = self._produce(commit, firsts)
            for a, first, kafka_offset in zip(commit.appends, firsts, offsets, strict=True):
                local.puts.append((INDEX, _index_key(a.relation_id, a.partition, first),
                                   _ENTRY.pack(kafka_offset, a.count)))
            for (rel, partition), end in ends.items():
                local.puts.append((ENDS, _END.pack(rel, partition), end.to_bytes(8, "big")))
            # Deletes apply after puts: those of a dropped relation's index must not remove the
            # entries this commit adds for it again.
            put_keys = {(p[0], p[1]) for p in local.puts}
            local.deletes = [d for d in local.deletes if d not in put_keys]
            result = self.local.commit(local)
        return CommitResult(first_offsets=firsts, sequence=result.sequence)

    def _produce(self, commit: Commit, firsts: list[int]) -> list[int]:
        """Produce every append; return their Kafka offsets once all are acknowledged by the cluster."""
        if not commit.appends:
            return []
        offsets: list[int | None] = [None] * len(commit.appends)
        errors: list[str] = []

        def delivered(i: int) -> Any:
            def callback(err: Any, msg: Any) -> None:
                if err is not None:
                    errors.append(str(err))
                else:
                    offsets[i] = msg.offset()
            return callback

        for i, (a, first) in enumerate(zip(commit.appends, firsts, strict=True)):
            headers = {"partition": str(a.partition), "first": str(first), "count": str(a.count)}
            self._producer.produce(self.topic(a.relation_id), value=a.payload, partition=0,
                                   headers=list(headers.items()), on_delivery=delivered(i))
        remaining = self._producer.flush(PRODUCE_TIMEOUT_SECONDS)
        if remaining or errors or any(o is None for o in offsets):
            raise InternalError("the Kafka log did not acknowledge a commit: "
                                + (errors[0] if errors else f"{remaining} message(s) not delivered in time"))
        return [int(o) for o in offsets if o is not None]

    async def commit_async(self, commit: Commit) -> CommitResult:
        return await asyncio.to_thread(self.commit, commit)

    # ---- reads ---------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        return _KafkaSnapshot(self._fetcher, self.local.snapshot())

    def fetch(self, rel: int, kafka_offsets: list[int]) -> dict[int, bytes]:
        """Payloads of the messages at these offsets of the relation's topic."""
        return self._fetcher.fetch(rel, kafka_offsets)

    def last_sequence(self) -> int:
        return self.local.last_sequence()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._producer.flush(PRODUCE_TIMEOUT_SECONDS)
        self._fetcher.close()
        self.local.close()


class _KafkaSnapshot(Snapshot):
    def __init__(self, fetcher: _Fetcher, local: Snapshot) -> None:
        self.fetcher = fetcher
        self.local = local

    def read(self, relation_id: int, partition: int, start: int = 0,
             end: int | None = None) -> Iterator[tuple[int, int, bytes]]:
        limit = self.end_offset(relation_id, partition) if end is None else end
        entries = []
        for key, value in self.local.scan(INDEX, _END.pack(relation_id, partition)):
            _, _, first = _KEY.unpack(key)
            kafka_offset, count = _ENTRY.unpack(value)
            if first + count <= start:
                continue
            if first >= limit:
                break
            entries.append((first, count, kafka_offset))
        payloads = self.fetcher.fetch(relation_id, [e[2] for e in entries])
        for first, count, kafka_offset in entries:
            yield first, count, payloads[kafka_offset]

    def end_offset(self, relation_id: int, partition: int) -> int:
        raw = self.local.get(ENDS, _END.pack(relation_id, partition))
        return int.from_bytes(raw, "big") if raw else 0

    def get(self, store: str, key: bytes) -> bytes | None:
        return self.local.get(store, key)

    def get_many(self, store: str, keys: list[bytes]) -> list[bytes | None]:
        return self.local.get_many(store, keys)

    def scan(self, store: str, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        return self.local.scan(store, prefix)

    def close(self) -> None:
        self.local.close()


class _Fetcher:
    """Reads messages of the relations' topics by Kafka offset (one consumer per thread)."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix
        self._consumers = threading.local()
        self._all: list[Any] = []

    def topic(self, rel: int) -> str:
        return f"{self.prefix}-r{rel}"

    def fetch(self, rel: int, kafka_offsets: list[int]) -> dict[int, bytes]:
        from confluent_kafka import Consumer, TopicPartition

        consumer = getattr(self._consumers, "consumer", None)
        if consumer is None:
            consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"{self.prefix}-reader",
                                 "enable.auto.commit": False, "enable.partition.eof": False,
                                 "fetch.max.bytes": 64 << 20})
            self._consumers.consumer = consumer
            self._all.append(consumer)
        wanted = set(kafka_offsets)
        out: dict[int, bytes] = {}
        if not wanted:
            return out
        consumer.assign([TopicPartition(self.topic(rel), 0, min(wanted))])
        last = max(wanted)
        misses = 0
        while len(out) < len(wanted):
            messages = consumer.consume(num_messages=1000, timeout=1.0)
            if not messages:
                misses += 1
                if misses > 30:
                    raise InternalError(f"the Kafka log of relation {rel} is missing messages "
                                        f"{sorted(wanted - set(out))[:5]}")
                continue
            for m in messages:
                if m.error() is not None:
                    continue
                offset = m.offset()
                if offset in wanted and offset is not None:
                    out[offset] = bytes(m.value() or b"")
                if offset is not None and offset >= last:
                    break
        return out

    def close(self) -> None:
        for consumer in self._all:
            try:
                consumer.close()
            except Exception:  # noqa: BLE001 - closing anyway
                pass
        self._all.clear()


class KafkaIndexReader:
    """For a Spark task: batches fetched from Kafka through the index in a RocksDB secondary."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._fetcher: _Fetcher | None = None

    def snapshot(self, local: Snapshot) -> Snapshot:
        if self._fetcher is None:
            prefix = local.get(META, PREFIX_KEY)
            if prefix is None:
                raise InternalError("the Kafka log has no topic prefix in its index")
            self._fetcher = _Fetcher(self.bootstrap, prefix.decode())
        return _KafkaSnapshot(self._fetcher, local)

    def close(self) -> None:
        if self._fetcher is not None:
            self._fetcher.close()


__all__ = ["KafkaIndexReader", "KafkaLogStorage"]
