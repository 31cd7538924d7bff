"""The Postgres CDC source's polling against a real PostgreSQL (the `postgres_server` fixture),
without a StreamDB server: what each poll would apply is collected instead of written.

The end-to-end tests (tests/test_e2e_postgres_cdc.py) poll every 0.2 s; polling back to back here
makes a race between a poll and the upstream's WAL flushes likely enough to show in one run."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from streamdb import types as T
from streamdb.catalog import ColumnDef, RelationDef
from streamdb.runtime.connectors.pg_cdc_source import PostgresCdcSource, _Batch


class _Collecting(PostgresCdcSource):
    """The source with its writes kept in a dict, as the table would hold them."""

    def __init__(self, dsn: str, table: str) -> None:
        rel = RelationDef(id=1, name="ticks", kind="table", primary_key=("id",), created_at=time.time(),
                          columns=(ColumnDef("id", T.INTEGER), ColumnDef("v", T.INTEGER)))  # a slot of its own
        super().__init__(None, rel, None, dsn=dsn, table=table, publication=None)  # type: ignore[arg-type]
        self.rows: dict[Any, tuple[Any, ...]] = {}

    def _snapshot(self, conn: Any, qualified: str) -> None:  # the upstream table starts empty
        self.lsn = 0

    def _apply(self, batch: _Batch, snapshot_done: bool = True, delete_keys: list[bytes] | None = None) -> None:
        for key in batch.deletes:
            self.rows.pop(key[0], None)
        for row in batch.upserts:
            self.rows[row[0]] = row
        if snapshot_done:
            self.lsn = batch.lsn or self.lsn or 0


def test_polls_back_to_back_miss_no_asynchronously_committed_transaction(postgres_server: str) -> None:
    """The test upstream commits asynchronously (synchronous_commit=off): its WAL is written some
    time before it is flushed. A poll that took the written position as its end, decoded only up
    to the flushed one and then advanced the slot to its end lost every transaction flushed in
    between (a few in every run of this test, before the fix)."""
    name = f"ticks_{int(time.time() * 1000) % 10**9}"
    with psycopg.connect(postgres_server, autocommit=True) as up:
        up.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT)")
    source = _Collecting(postgres_server, f"public.{name}")
    written = 300
    done = threading.Event()

    def writer() -> None:
        with psycopg.connect(postgres_server, autocommit=True) as w:
            for i in range(1, written + 1):
                w.execute(f"INSERT INTO {name} VALUES (%s, %s)", (i, i))
                time.sleep(0.01 * (i % 5))  # idle moments: the polls that find nothing are the ones at risk
        done.set()

    try:
        with psycopg.connect(postgres_server, autocommit=True) as conn:
            source._prepare(conn)  # the publication, the slot, the (empty) snapshot
            thread = threading.Thread(target=writer)
            thread.start()
            polls = 0
            while not done.is_set():
                source._poll(conn)
                polls += 1
            thread.join()
            # The last commits reach the source once the upstream has flushed them (within its
            # WAL writer's delay, 200 ms): a transaction lost by a poll never comes.
            deadline = time.monotonic() + 20
            while len(source.rows) < written and time.monotonic() < deadline:
                if not source._poll(conn):
                    time.sleep(0.05)
            assert polls > 100  # the race needs many polls; most of them find nothing
            assert sorted(source.rows) == list(range(1, written + 1))
    finally:
        with psycopg.connect(postgres_server, autocommit=True) as up:
            up.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                       (source.slot,))
            up.execute(f"DROP PUBLICATION IF EXISTS {source.publication}")
            up.execute(f"DROP TABLE {name}")
