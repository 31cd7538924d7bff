"""An external stream's Kafka topic, copied into the stream's log exactly once.

One thread per external stream consumes the topic with explicitly assigned partitions (no
consumer-group offsets): the next offset of every Kafka partition is stored in the same atomic
commit as the rows it produced and the dead letters it found. After kill -9 the source resumes
from those offsets, so each record lands in the stream once, and views over the stream (which
read the stream's log with their own committed offsets) see it once.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from streamdb.catalog import RelationDef
from streamdb.runtime.connectors.decode import Decoder, Record
from streamdb.runtime.connectors.source_base import SourceThread

if TYPE_CHECKING:
    from streamdb.runtime.engine import Engine

log = logging.getLogger("streamdb.sources")

BATCH_RECORDS = 5000
POLL_SECONDS = 0.1


class KafkaSource(SourceThread):
    """Copies `topic` into stream `rel` (bad records into `errors_rel`)."""

    kind = "kafka-source"

    def __init__(self, engine: Engine, rel: RelationDef, errors_rel: RelationDef | None, topic: str,
                 consumer_conf: dict[str, Any], decoder: Decoder, start: str = "earliest") -> None:
        super().__init__(engine, rel, errors_rel, decoder)
        self.topic = topic
        self.consumer_conf = consumer_conf
        self.start = start

    def restore(self, meta: dict[str, Any]) -> None:
        self.status.partitions = {int(k): int(v) for k, v in meta.get("next", {}).items()}

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
        rows, rowtimes, bad = self.decode(records)
        next_offsets = dict(self.status.partitions)
        for rec in records:
            next_offsets[rec.partition] = max(next_offsets.get(rec.partition, 0), rec.offset + 1)
        self.commit(rows, rowtimes, bad, {"next": {str(k): v for k, v in next_offsets.items()}})
        self.status.partitions = next_offsets


def _bytes(v: str | bytes | None) -> bytes | None:
    return v.encode() if isinstance(v, str) else v
