"""An external stream's Kafka topic, copied into the stream's log exactly once.

One thread per external stream consumes the topic with explicitly assigned partitions (no
consumer-group offsets): the next offset of every Kafka partition is stored in the same atomic
commit as the rows it produced and the dead letters it found. After kill -9 the source resumes
from those offsets, so each record lands in the stream once, and views over the stream (which
read the stream's log with their own committed offsets) see it once.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streamdb.catalog import RelationDef
from streamdb.runtime.connectors.decode import BadRecord, Decoder, Record
from streamdb.storage.base import Commit

if TYPE_CHECKING:
    from streamdb.runtime.engine import Engine

log = logging.getLogger("streamdb.sources")

META = "meta"
BATCH_RECORDS = 5000
POLL_SECONDS = 0.1


def source_key(rel_id: int) -> bytes:
    return f"source:{rel_id}".encode()


@dataclass
class SourceStatus:
    records: int = 0  # rows added to the stream
    bad_records: int = 0  # records kept in the dead-letter stream
    last_error: str | None = None
    state: str = "starting"
    partitions: dict[int, int] = field(default_factory=dict)  # Kafka partition -> next offset


class KafkaSource:
    """Copies `topic` into stream `rel` (bad records into `errors_rel`)."""

    def __init__(self, engine: Engine, rel: RelationDef, errors_rel: RelationDef | None, topic: str,
                 consumer_conf: dict[str, Any], decoder: Decoder, start: str = "earliest") -> None:
        self.engine = engine
        self.rel = rel
        self.errors_rel = errors_rel
        self.topic = topic
        self.consumer_conf = consumer_conf
        self.decoder = decoder
        self.start = start
        self.status = SourceStatus()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start_thread(self) -> None:
        self._load_offsets()
        self._thread = threading.Thread(target=self._run, name=f"kafka-source-{self.rel.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _load_offsets(self) -> None:
        with self.engine.storage.snapshot() as snap:
            raw = snap.get(META, source_key(self.rel.id))
        if raw:
            meta = json.loads(raw)
            self.status.partitions = {int(k): int(v) for k, v in meta.get("next", {}).items()}
            self.status.records = int(meta.get("records", 0))
            self.status.bad_records = int(meta.get("bad_records", 0))

    # ---- the consuming thread ----------------------------------------------------------

    def _run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException, TopicPartition

        consumer = None
        assigned: set[int] = set()
        last_refresh = 0.0
        while not self._stop.is_set():
            try:
                if consumer is None:
                    consumer = Consumer(self.consumer_conf)
                if time.monotonic() - last_refresh > 5 or not assigned:
                    # Partitions: the topic's, refreshed now and then (a topic may grow).
                    md = consumer.list_topics(self.topic, timeout=5)
                    topic_md = md.topics.get(self.topic)
                    if topic_md is None or topic_md.error is not None:
                        raise KafkaException(topic_md.error if topic_md is not None else "topic not found")
                    partitions = sorted(topic_md.partitions)
                    last_refresh = time.monotonic()
                    if set(partitions) != assigned:
                        default = OFFSET_BEGINNING if self.start == "earliest" else OFFSET_END
                        consumer.assign([TopicPartition(self.topic, p, self.status.partitions.get(p, default))
                                         for p in partitions])
                        assigned = set(partitions)
                messages = consumer.consume(num_messages=BATCH_RECORDS, timeout=POLL_SECONDS)
                records = []
                for m in messages:
                    err = m.error()
                    if err is not None:
                        if err.code() == -191:  # _PARTITION_EOF: nothing more for now
                            continue
                        raise KafkaException(err)
                    ts_type, ts = m.timestamp()
                    raw_headers: Any = m.headers() or []
                    headers = [(str(k), _bytes(v)) for k, v in raw_headers]
                    records.append(Record(value=_bytes(m.value()), key=_bytes(m.key()), headers=headers,
                                          timestamp_ms=ts if ts_type != 0 else None, source=m.topic() or self.topic,
                                          partition=m.partition() or 0, offset=m.offset() or 0))
                if records:
                    self._ingest(records)
                self.status.state = "running"
                self.status.last_error = None
            except Exception as e:  # noqa: BLE001 - a broker problem: report it, retry
                self.status.state = "retrying"
                self.status.last_error = str(e)
                log.warning("source %s: %s", self.rel.name, e)
                if consumer is not None:
                    try:
                        consumer.close()
                    except Exception:  # noqa: BLE001
                        pass
                consumer, assigned = None, set()
                self._stop.wait(1.0)
        if consumer is not None:
            consumer.close()

    def _ingest(self, records: list[Record]) -> None:
        rows: list[tuple[Any, ...]] = []
        rowtimes: list[dt.datetime] = []
        bad: list[tuple[Record, str]] = []
        next_offsets = dict(self.status.partitions)
        for rec in records:
            try:
                row, at = self.decoder.row(rec)
                rows.append(row)
                rowtimes.append(at)
            except BadRecord as e:
                bad.append((rec, e.reason))
            next_offsets[rec.partition] = max(next_offsets.get(rec.partition, 0), rec.offset + 1)
        extra = Commit()
        if bad and self.errors_rel is not None:
            extra.appends.extend(dead_letters(self.errors_rel, bad))
        records_total = self.status.records + len(rows)
        bad_total = self.status.bad_records + len(bad)
        extra.puts.append((META, source_key(self.rel.id), json.dumps(
            {"next": {str(k): v for k, v in next_offsets.items()}, "records": records_total,
             "bad_records": bad_total}).encode()))
        from streamdb.runtime.writer import append_rows

        loop = self.engine.loop
        assert loop is not None
        future = asyncio.run_coroutine_threadsafe(append_rows(self.engine, self.rel, rows, rowtimes, extra), loop)
        future.result()
        self.status.partitions = next_offsets
        self.status.records = records_total
        self.status.bad_records = bad_total
        if bad:
            log.warning("source %s: %d bad record(s) kept in %s (first: %s)", self.rel.name, len(bad),
                        self.errors_rel.name if self.errors_rel else "-", bad[0][1])


def _bytes(v: str | bytes | None) -> bytes | None:
    return v.encode() if isinstance(v, str) else v


DEAD_LETTER_COLUMNS = (("source", "text"), ("partition", "integer"), ("offset", "bigint"), ("reason", "text"),
                       ("raw_key", "bytea"), ("raw_value", "bytea"), ("raw_text", "text"))


def dead_letters(errors_rel: RelationDef, bad: list[tuple[Record, str]]) -> list[Any]:
    """Appends for the dead-letter stream: where each record came from, why, and its bytes."""
    from streamdb.runtime.writer import _stream_appends

    now = dt.datetime.now(dt.UTC)
    rows = [(rec.source, rec.partition, rec.offset, reason, rec.key, rec.value,
             None if rec.value is None else rec.value[:10_000].decode("utf-8", "replace"))
            for rec, reason in bad]
    return _stream_appends(errors_rel, rows, [now] * len(rows), [None] * len(rows))
