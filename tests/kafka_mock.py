"""A throwaway Kafka cluster for tests: librdkafka's built-in mock cluster, in a process of its own.

Run ``python tests/kafka_mock.py`` (or ``python -m tests.kafka_mock`` from the repository root).
It prints the bootstrap address (``127.0.0.1:PORT``, comma-separated with ``--brokers N``) as
one line on stdout and keeps the cluster alive until SIGTERM/SIGINT or until its stdin closes, so
a test session that dies, even by SIGKILL, takes the cluster with it (the fixture holds the pipe).
Everything else, librdkafka's own log included, goes to stderr.

How: a ``confluent_kafka.Producer`` configured with ``test.mock.num.brokers`` makes librdkafka
start an in-process mock cluster (its own thread, listening on 127.0.0.1) and point the producer
at it. Any client, in any process, can then use the address as ``bootstrap.servers``. Nothing
to install: the confluent-kafka wheel bundles librdkafka with the mock built in.

What the mock supports, as tried with confluent-kafka 2.16.1 / librdkafka 2.16.0:

Works
  * produce: keys, values, None values (tombstones), headers (repeated keys kept, in
    order), explicit CreateTime timestamps, explicit partitions; idempotent producer;
    gzip, snappy, lz4 and zstd compression.
  * topics are created automatically on first use, ALWAYS with 4 partitions (the mock's
    built-in default, replication factor min(3, brokers)).
  * consume with ``assign()`` and explicit offsets; ``get_watermark_offsets()``.
  * consumer groups: ``subscribe()``, auto.offset.reset, commit, ``committed()``. The first
    assignment takes about 3 s (the mock's group.initial.rebalance.delay.ms is 3000).
  * transactional producer API: init/begin/commit/abort all succeed, and commit/abort markers
    take up an offset each, as on a real broker.

Does not work / differs from a real broker
  * AdminClient ``create_topics()`` / ``create_partitions()`` fail with ``_TIMED_OUT "Failed
    while waiting for controller"`` (the mock has no CreateTopics handler and no controller).
    Producing to partition >= 4 of an auto-created topic fails locally with
    ``_UNKNOWN_PARTITION``. librdkafka 2.16 has only two mock properties,
    ``test.mock.num.brokers`` and ``test.mock.broker.rtt`` (nothing like
    ``test.mock.topic.create``). Other partition counts need the C function
    ``rd_kafka_mock_topic_create()`` (reachable through ctypes on a cluster made with
    ``rd_kafka_mock_cluster_new()``; confluent-kafka does not expose it), not used here.
  * ``isolation.level=read_committed`` does NOT hide aborted or still-open transactions:
    the mock keeps no last-stable-offset / aborted-transaction index, so a read_committed
    consumer sees everything a read_uncommitted one sees.
  * ``offsets_for_times()`` returns offset -1 for every timestamp (the mock's ListOffsets
    answers only earliest/latest).
  * retention: each partition keeps at most about 5 MiB or 100,000 produce batches; older
    batches are deleted and the low watermark moves (6 MB into one partition gave (1101, 6000)).
  * the data lives in memory only and is lost when this process ends.
  * tried only with librdkafka clients (confluent-kafka); Java clients are untested.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from confluent_kafka import Producer


def start_cluster(brokers: int = 1) -> tuple[Producer, str]:
    """Start a mock cluster; returns the producer that owns it (keep it referenced) and its address."""
    producer = Producer({
        "test.mock.num.brokers": brokers,
        "client.id": "streamdb-kafka-mock",
    })
    metadata = producer.list_topics(timeout=10)
    addresses = sorted(f"{b.host}:{b.port}" for b in metadata.brokers.values())
    if len(addresses) != brokers:
        raise RuntimeError(f"mock cluster reported {len(addresses)} brokers, expected {brokers}")
    return producer, ",".join(addresses)


def _stdin_is_watchable() -> bool:
    """False when stdin is missing or /dev/null (e.g. a background job), which is at EOF at once."""
    if sys.stdin is None or sys.stdin.closed:
        return False
    try:
        st, null = os.fstat(sys.stdin.fileno()), os.stat(os.devnull)
    except (OSError, ValueError):
        return False
    return (st.st_dev, st.st_ino) != (null.st_dev, null.st_ino)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=1, help="number of mock brokers (default 1)")
    args = parser.parse_args(argv)

    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def watch_stdin() -> None:
        # Returns at end of file: the parent has closed the pipe or died.
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except (OSError, ValueError):
            pass
        stop.set()

    producer, bootstrap = start_cluster(args.brokers)
    print(bootstrap, flush=True)
    if _stdin_is_watchable():
        threading.Thread(target=watch_stdin, name="stdin-watch", daemon=True).start()
    while not stop.is_set():
        producer.poll(0.5)
    print("kafka mock: stopping", file=sys.stderr, flush=True)
    del producer  # destroys the client and with it the mock cluster
    return 0


if __name__ == "__main__":
    sys.exit(main())
