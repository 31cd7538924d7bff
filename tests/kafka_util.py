"""Helpers for tests against Kafka (the `kafka_bootstrap` fixture): produce records, read a topic back."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition


class Record(NamedTuple):
    """One consumed message; compares equal to the plain tuple it is."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    partition: int
    offset: int
    timestamp: int  # milliseconds since the epoch, as carried by the message


def _payload(data: Any) -> bytes | None:
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode()
    return json.dumps(data, separators=(",", ":")).encode()


def produce(bootstrap: str, topic: str, records: Iterable[Mapping[str, Any]],
            partition: int | None = None, timeout: float = 30) -> list[tuple[int, int]]:
    """Produce ``records`` to ``topic`` and wait until every one is acknowledged.

    Each record is a dict with ``value`` (bytes, str, None for a tombstone, anything else is
    JSON-encoded) and optionally ``key`` (same rules), ``headers`` (dict or list of (name,
    value) pairs), ``timestamp_ms`` and ``partition`` (else ``partition``, else the partitioner).
    Returns the (partition, offset) of each record, in the order given; fails the test if any
    record is not delivered.
    """
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "message.timeout.ms": int(timeout * 1000)})
    records = list(records)
    results: list[tuple[int, int] | KafkaError | None] = [None] * len(records)

    def delivered(index: int):
        def callback(err: KafkaError | None, msg: Message) -> None:
            results[index] = err if err is not None else (int(msg.partition() or 0), int(msg.offset() or 0))
        return callback

    for i, rec in enumerate(records):
        unknown = set(rec) - {"value", "key", "headers", "timestamp_ms", "partition"}
        assert not unknown, f"record {i}: unknown fields {sorted(unknown)}"
        kwargs: dict[str, Any] = {"value": _payload(rec.get("value")), "key": _payload(rec.get("key")),
                                  "on_delivery": delivered(i)}
        if rec.get("headers") is not None:
            headers = rec["headers"]
            items = headers.items() if isinstance(headers, Mapping) else headers
            kwargs["headers"] = [(k, _payload(v)) for k, v in items]
        if rec.get("timestamp_ms") is not None:
            kwargs["timestamp"] = int(rec["timestamp_ms"])
        part = rec.get("partition", partition)
        if part is not None:
            kwargs["partition"] = part
        producer.produce(topic, **kwargs)
        producer.poll(0)
    left = producer.flush(timeout)
    assert left == 0, f"{left} of {len(records)} records to {topic!r} not delivered within {timeout}s"
    failed = [(i, r) for i, r in enumerate(results) if not isinstance(r, tuple)]
    assert not failed, f"delivery to {topic!r} failed: {failed}"
    return [r for r in results if isinstance(r, tuple)]


def consume_all(bootstrap: str, topic: str, timeout: float = 10,
                expected: int | None = None) -> list[Record]:
    """Read ``topic`` from the start of every partition, without a consumer group.

    Uses ``assign()`` with each partition's low watermark as the explicit start offset. Stops
    once ``expected`` records have arrived or, when ``expected`` is None, once every partition
    has been read up to the high watermark it had when reading began; else at ``timeout``
    seconds, returning what arrived (the caller's assertion shows the shortfall). Records come
    sorted by (partition, offset). Waits (within ``timeout``) for the topic to exist.
    """
    deadline = time.monotonic() + timeout
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "streamdb-tests-unused",
                         "enable.auto.commit": False, "enable.auto.offset.store": False,
                         "allow.auto.create.topics": False})
    try:
        partitions: list[int] = []
        while True:
            meta = consumer.list_topics(topic, timeout=max(0.5, min(5.0, deadline - time.monotonic())))
            tmeta = meta.topics.get(topic)
            if tmeta is not None and tmeta.error is None and tmeta.partitions:
                partitions = sorted(tmeta.partitions)
                break
            if time.monotonic() >= deadline:
                return []
            time.sleep(0.2)
        assignment, end = [], {}
        for p in partitions:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=max(1.0, deadline - time.monotonic()))
            assignment.append(TopicPartition(topic, p, low))
            end[p] = high
        consumer.assign(assignment)
        out: list[Record] = []
        pending = {p for p in partitions if end[p] > 0}
        while time.monotonic() < deadline:
            if expected is not None and len(out) >= expected:
                break
            if expected is None and not pending:
                break
            msg = consumer.poll(min(0.5, max(0.0, deadline - time.monotonic())))
            if msg is None:
                if expected is None:
                    # Transaction markers take offsets but are never delivered: use the position.
                    positions = consumer.position([TopicPartition(topic, p) for p in pending])
                    pending -= {tp.partition for tp in positions if tp.offset >= end[tp.partition]}
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(err)
            _, ts = msg.timestamp()
            part, offset = int(msg.partition() or 0), int(msg.offset() or 0)
            raw_headers = msg.headers() or []
            headers = list(raw_headers.items() if isinstance(raw_headers, dict) else raw_headers)
            out.append(Record(msg.key(), msg.value(), headers, part, offset, ts))  # type: ignore[arg-type]
            if offset + 1 >= end.get(part, 0):
                pending.discard(part)
        return sorted(out, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()
