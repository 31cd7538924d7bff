"""Sinks: a relation's changes delivered to a Kafka topic, a Postgres table or files.

One thread per sink polls the relation's change log. A round reads the changes after the
sink's stored per-partition offsets, delivers them, and only once the target acknowledged them
commits the new offsets (META key `sink:<id>`): at-least-once. A round after a crash may deliver
changes again, so every delivery is idempotent where the relation has a key: the changes of a
round are consolidated per key into the key's final state (an upsert of its row, or a delete),
which a repeat applies to the same effect. Append-only streams have no key: their events are
appended (Postgres INSERT, one Kafka message each) and a repeat can duplicate them, except for
Kafka with exactly_once (transactions: the offsets are committed in the Kafka transaction) and
for files (the batch boundaries are stored before the file is written, so a repeat rewrites the
same file under the same name). See docs/connectors.md.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from streamdb import types as T
from streamdb.catalog import CatalogSnapshot, ColumnDef, RelationDef
from streamdb.errors import ConfigurationError, InsufficientPrivilege, StreamDBError
from streamdb.planner.aggregate import append_only
from streamdb.planner.connectors import mask_text, refuse_file_properties
from streamdb.runtime import changes as C
from streamdb.runtime.connectors.file_source import confined
from streamdb.runtime.reader import RelationReader
from streamdb.storage.base import Commit, Snapshot

if TYPE_CHECKING:
    from streamdb.runtime.engine import Engine

log = logging.getLogger("streamdb.sinks")

META = "meta"
POLL_SECONDS = 0.2
# Changes read per round: bounds memory after a long outage; a round is one delivery.
MAX_ROUND_CHANGES = 50_000
MAX_RETRY_SECONDS = 30.0
DELIVERY_TIMEOUT_SECONDS = 60.0


def sink_key(sink_id: int) -> bytes:
    return f"sink:{sink_id}".encode()


@dataclass
class SinkStatus:
    state: str = "starting"  # starting | running | retrying | failed
    changes: int = 0  # changes of the relation's log delivered
    last_error: str | None = None


@dataclass(frozen=True)
class Change:
    op: str  # 'insert' | 'delete'
    row: tuple[Any, ...]
    rowtime: dt.datetime | None


@dataclass(frozen=True)
class Batch:
    changes: list[Change]
    first: int  # position of the batch's first change in the relation's log (sum over partitions)
    last: int
    offsets: tuple[int, ...]  # per-partition offsets after the batch


# ---- reading and consolidating changes -----------------------------------------------------------

def read_range(reader: RelationReader, rel: RelationDef, snap: Snapshot, start: tuple[int, ...],
               stop: tuple[int, ...]) -> pa.Table:
    """The changes at per-partition offsets [start, stop): columns, rowtime, __weight."""
    table = reader.read_delta(rel, snap, start)
    if tuple(reader.end_offsets(rel, snap)) == stop:
        return table
    # read_delta returns each partition's changes up to the snapshot, partition after partition.
    parts, at = [], 0
    for p, end in enumerate(reader.end_offsets(rel, snap)):
        available = max(end - start[p], 0)
        parts.append(table.slice(at, max(stop[p] - start[p], 0)))
        at += available
    return pa.concat_tables(parts) if parts else table.slice(0, 0)


def changes_of(table: pa.Table, columns: tuple[ColumnDef, ...], key: tuple[int, ...],
               consolidate: bool) -> list[Change]:
    """Log changes -> what to deliver. Consolidated: one change per key, its final state (an
    insert of its row, or a delete), whatever order the log holds an update's -old and +new in.
    Otherwise each change as it is, a weight of n as n changes."""
    values = [[C.from_arrow_value(v, c.type) for v in table.column(c.name).to_pylist()] for c in columns]
    rows = list(zip(*values, strict=True)) if values else [() for _ in range(table.num_rows)]
    rowtimes = table.column(C.ROWTIME).to_pylist()
    weights = table.column(C.WEIGHT).to_pylist()
    if not consolidate:
        return [Change("insert" if w > 0 else "delete", row, at)
                for row, at, w in zip(rows, rowtimes, weights, strict=True) for _ in range(abs(w))]
    by_key: dict[tuple[Any, ...], dict[tuple[Any, ...], list[Any]]] = {}
    for row, at, w in zip(rows, rowtimes, weights, strict=True):
        frozen = _hashable(row)
        states = by_key.setdefault(tuple(frozen[i] for i in key), {})
        net = states.pop(frozen, [0])  # popped and put back: the dict keeps the order of last change
        states[frozen] = [net[0] + w, at, row]
    out = []
    for states in by_key.values():
        present = [(row, at) for n, at, row in states.values() if n > 0]
        gone = [(row, at) for n, at, row in states.values() if n < 0]
        if present:
            out.append(Change("insert", *present[-1]))
        elif gone:
            out.append(Change("delete", *gone[-1]))
    return out


def _hashable(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(tuple(v) if isinstance(v, list) else v for v in row)


def json_value(v: Any, t: T.SqlType) -> Any:
    """A column value as JSON: JSON columns embedded, numbers as numbers, times as ISO text."""
    if v is None:
        return None
    if t in (T.JSON, T.JSONB) and isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            return v
    if isinstance(v, (list, tuple)):
        element = t.element if isinstance(t, T.ArraySqlType) and t.element is not None else T.TEXT
        return [json_value(x, element) for x in v]
    if isinstance(v, (bool, int, float, str)):
        return v
    return C.json_default(v)


def row_json(columns: tuple[ColumnDef, ...], row: tuple[Any, ...]) -> dict[str, Any]:
    return {c.name: json_value(v, c.type) for c, v in zip(columns, row, strict=True)}


# ---- targets ------------------------------------------------------------------------------------------

class Target:
    """Where a sink's changes go. `deliver` returns only once the target holds the batch."""

    columns: tuple[ColumnDef, ...]  # the relation's (a schemaless stream's grow as events arrive)

    # Whether a round after a crash must deliver exactly the batch that was in flight (files:
    # the batch names the file, so the repeat overwrites it instead of adding another).
    fixed_batches = False

    def deliver(self, batch: Batch) -> None:
        raise NotImplementedError

    def recovered_offsets(self) -> tuple[int, ...] | None:
        """Offsets the target itself recorded with the last batch it holds (exactly-once targets)."""
        return None

    def reset(self) -> None:
        """After a failure: drop connections, so the next round starts afresh."""

    def close(self) -> None:
        self.reset()


class KafkaTarget(Target):
    def __init__(self, conf: dict[str, Any], topic: str, columns: tuple[ColumnDef, ...], key: tuple[int, ...],
                 op_headers: bool, exactly_once: bool, transactional_id: str) -> None:
        self.conf = {**conf, "enable.idempotence": True, "acks": "all"}
        if exactly_once:
            self.conf["transactional.id"] = transactional_id
        self.topic = topic
        self.columns = columns
        self.key = key
        self.op_headers = op_headers  # a relation without key whose rows also go away: say which is which
        self.exactly_once = exactly_once
        self.group_id = transactional_id  # the group whose offsets the transactions commit
        self._producer: Any = None
        self._consumer: Any = None

    def _open(self) -> Any:
        if self._producer is None:
            from confluent_kafka import Consumer, Producer

            producer = Producer(self.conf)
            if self.exactly_once:
                producer.init_transactions(DELIVERY_TIMEOUT_SECONDS)  # fences an older instance, aborts its txn
                group_conf = {k: v for k, v in self.conf.items()
                              if k in ("bootstrap.servers", "logger", "client.id") or k.startswith(("security.",
                                                                                                   "sasl.", "ssl."))}
                self._consumer = Consumer({**group_conf, "group.id": self.group_id, "enable.auto.commit": False})
            self._producer = producer
        return self._producer

    def _message_key(self, row: tuple[Any, ...]) -> bytes | None:
        if not self.key:
            return None
        if len(self.key) == 1 and isinstance(row[self.key[0]], str):
            return row[self.key[0]].encode()
        return json.dumps({self.columns[i].name: json_value(row[i], self.columns[i].type) for i in self.key},
                          separators=(",", ":")).encode()

    def deliver(self, batch: Batch) -> None:
        producer = self._open()
        errors: list[str] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        if self.exactly_once:
            producer.begin_transaction()
        try:
            for ch in batch.changes:
                value = None if ch.op == "delete" and self.key else json.dumps(
                    row_json(self.columns, ch.row), separators=(",", ":")).encode()
                kwargs: dict[str, Any] = {"key": self._message_key(ch.row), "value": value, "on_delivery": delivered}
                if ch.rowtime is not None:
                    kwargs["timestamp"] = int(ch.rowtime.timestamp() * 1000)
                if self.op_headers:
                    kwargs["headers"] = [("op", ch.op.encode())]
                while True:
                    try:
                        producer.produce(self.topic, **kwargs)
                        break
                    except BufferError:  # the client's queue is full: let it send
                        producer.poll(0.5)
                producer.poll(0)
            if self.exactly_once:
                from confluent_kafka import TopicPartition

                # The sink's offsets, committed atomically with the messages (a consumer group's
                # offset for partition 0 of the topic; the offsets themselves in its metadata).
                progress = TopicPartition(self.topic, 0, batch.last + 1,
                                          metadata=",".join(str(o) for o in batch.offsets))
                producer.send_offsets_to_transaction([progress], self._consumer.consumer_group_metadata(),
                                                     DELIVERY_TIMEOUT_SECONDS)
                producer.commit_transaction(DELIVERY_TIMEOUT_SECONDS)
            else:
                left = producer.flush(DELIVERY_TIMEOUT_SECONDS)
                if left:
                    raise TimeoutError(f"{left} message(s) to topic {self.topic} not acknowledged within "
                                       f"{DELIVERY_TIMEOUT_SECONDS:.0f}s")
        except Exception:
            if self.exactly_once:
                self._abort()
            raise
        if errors:
            raise RuntimeError(f"delivery to topic {self.topic} failed: {errors[0]}")

    def _abort(self) -> None:
        try:
            self._producer.abort_transaction(DELIVERY_TIMEOUT_SECONDS)
        except Exception:  # noqa: BLE001 - a producer that cannot abort is replaced
            self.reset()

    def recovered_offsets(self) -> tuple[int, ...] | None:
        if not self.exactly_once:
            return None
        from confluent_kafka import TopicPartition

        self._open()
        committed = self._consumer.committed([TopicPartition(self.topic, 0)], timeout=DELIVERY_TIMEOUT_SECONDS)
        metadata = getattr(committed[0], "metadata", None) if committed else None
        if not metadata:
            return None
        return tuple(int(o) for o in str(metadata).split(","))

    def reset(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:  # noqa: BLE001 - closing a broken client
                pass
        self._producer, self._consumer = None, None


class PostgresTarget(Target):
    def __init__(self, dsn: str, table: str, columns: tuple[ColumnDef, ...], key: tuple[int, ...],
                 create_table: bool) -> None:
        self.dsn = dsn
        self.table_parts = tuple(p.strip() for p in table.split(".", 1))
        self.columns = columns
        self.key = key
        self.create_table = create_table
        self._conn: Any = None

    def _open(self) -> Any:
        if self._conn is None:
            import psycopg

            conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=10,
                                   application_name="streamdb-sink")
            if self.create_table:
                conn.execute(self._create_sql(conn.info.server_version))
            self._conn = conn
        return self._conn

    def _create_sql(self, server_version: int) -> Any:
        from psycopg import sql

        cols = [sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(_pg_type(c.type))) for c in self.columns]
        if self.key:
            keys = sql.SQL(", ").join(sql.Identifier(self.columns[i].name) for i in self.key)
            # A group key may be NULL: Postgres 15 can hold it in a unique key, a primary key cannot.
            unique = "UNIQUE NULLS NOT DISTINCT ({})" if server_version >= 150000 else "PRIMARY KEY ({})"
            cols.append(sql.SQL(unique).format(keys))
        return sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(sql.Identifier(*self.table_parts),
                                                                      sql.SQL(", ").join(cols))

    def deliver(self, batch: Batch) -> None:
        from psycopg import sql

        conn = self._open()
        table = sql.Identifier(*self.table_parts)
        names = [sql.Identifier(c.name) for c in self.columns]
        insert = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
            table, sql.SQL(", ").join(names), sql.SQL(", ").join(sql.Placeholder() * len(names)))
        inserts = [ch.row for ch in batch.changes if ch.op == "insert"]
        deletes = [ch.row for ch in batch.changes if ch.op == "delete"]
        with conn.transaction(), conn.cursor() as cur:
            if not self.key:
                if deletes:
                    raise StreamDBError("a sink without key cannot delete rows in Postgres; give it key = '...'")
                if inserts:
                    cur.executemany(insert, inserts)
                return
            key_names = [names[i] for i in self.key]
            others = [n for i, n in enumerate(names) if i not in self.key]
            update = sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(
                sql.SQL("{} = EXCLUDED.{}").format(n, n) for n in others)) if others else sql.SQL("DO NOTHING")
            upsert = sql.Composed([insert, sql.SQL(" ON CONFLICT ({}) ").format(sql.SQL(", ").join(key_names)),
                                   update])
            if deletes:
                # `k = %s` can use the key's index; a NULL key value needs `k IS NULL`.
                by_nulls: dict[tuple[bool, ...], list[tuple[Any, ...]]] = {}
                for row in deletes:
                    values = tuple(row[i] for i in self.key)
                    by_nulls.setdefault(tuple(v is None for v in values), []).append(values)
                for nulls, rows in by_nulls.items():
                    where = sql.SQL(" AND ").join(
                        sql.SQL("{} IS NULL").format(n) if null else sql.SQL("{} = %s").format(n)
                        for n, null in zip(key_names, nulls, strict=True))
                    delete = sql.SQL("DELETE FROM {} WHERE {}").format(table, where)
                    cur.executemany(delete, [tuple(v for v in r if v is not None) for r in rows])
            if inserts:
                cur.executemany(upsert, inserts)

    def reset(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
        self._conn = None


def _pg_type(t: T.SqlType) -> str:
    return "text" if t is T.UNKNOWN else t.name


class FileTarget(Target):
    """One file per batch, `part-<first>-<last>.<ext>`: rows with an `op` column, then the columns.
    Written to a dot-named .tmp file, synced and renamed, so readers never see half a file."""

    fixed_batches = True

    def __init__(self, directory: Path, file_format: str, columns: tuple[ColumnDef, ...]) -> None:
        self.directory = directory
        self.format = file_format
        self.columns = columns

    def deliver(self, batch: Batch) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        name = f"part-{batch.first:012d}-{batch.last:012d}.{'jsonl' if self.format == 'json' else self.format}"
        final = self.directory / name
        tmp = self.directory / f".{name}.tmp"
        if self.format == "parquet":
            import pyarrow.parquet as pq

            arrays = [pa.array([ch.op for ch in batch.changes], pa.string())]
            arrays += [pa.array([C.to_arrow_value(ch.row[i], c.type) for ch in batch.changes], c.type.arrow())
                       for i, c in enumerate(self.columns)]
            pq.write_table(pa.Table.from_arrays(arrays, names=["op", *(c.name for c in self.columns)]), tmp)
        else:
            with tmp.open("w", newline="", encoding="utf-8") as f:
                if self.format == "csv":
                    writer = csv.writer(f)
                    writer.writerow(["op", *(c.name for c in self.columns)])
                    writer.writerows([ch.op, *(_csv_value(v) for v in ch.row)] for ch in batch.changes)
                else:
                    for ch in batch.changes:
                        f.write(json.dumps({"op": ch.op, **row_json(self.columns, ch.row)}, separators=(",", ":"))
                                + "\n")
        with tmp.open("rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _csv_value(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, bytes):
        return "\\x" + v.hex()
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, (list, tuple)):
        return json.dumps([json_value(x, T.TEXT) for x in v])
    return str(v)


# ---- one sink's thread -----------------------------------------------------------------------------

class SinkRunner:
    def __init__(self, engine: Engine, sink: RelationDef, target: Target, key: tuple[int, ...],
                 consolidate: bool) -> None:
        self.engine = engine
        self.sink = sink
        self.target = target
        self.key = key
        self.consolidate = consolidate
        self.from_id = int(dict(sink.options)["from_id"])
        self.status = SinkStatus()
        self.offsets: tuple[int, ...] = ()
        self.pending: tuple[int, ...] | None = None  # a batch whose delivery may have begun
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start_thread(self) -> None:
        with self.engine.storage.snapshot() as snap:
            raw = snap.get(META, sink_key(self.sink.id))
        if raw:
            meta = json.loads(raw)
            self.offsets = tuple(meta.get("offsets", ()))
            self.status.changes = int(meta.get("changes", 0))
            self.pending = tuple(meta["pending"]) if meta.get("pending") else None
        self._thread = threading.Thread(target=self._run, name=f"sink-{self.sink.name}", daemon=True)
        self._thread.start()

    def signal_stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float = 10.0) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        backoff = 1.0
        recovered = False
        while not self._stop.is_set():
            try:
                if not recovered:
                    self._recover()
                    recovered = True
                delivered = self._round()
                self.status.state = "running"
                self.status.last_error = None
                backoff = 1.0
                if not delivered:
                    self._stop.wait(POLL_SECONDS)
            except Exception as e:  # noqa: BLE001 - the target is down or refuses: report, retry
                message = mask_text(e.message if isinstance(e, StreamDBError) else f"{type(e).__name__}: {e}")
                self.status.state = "retrying"
                self.status.last_error = message
                log.warning("sink %s: %s (retrying in %.0fs)", self.sink.name, message, backoff)
                self.target.reset()
                self._stop.wait(backoff)
                backoff = min(backoff * 2, MAX_RETRY_SECONDS)
        self.target.close()
        if self.engine.catalog.snapshot().object_by_id(self.sink.id) is None:
            # Dropped while a round was in flight: its progress must not outlive it.
            try:
                self.engine.storage.commit(Commit(deletes=[(META, sink_key(self.sink.id))]))
            except StreamDBError as e:
                log.warning("sink %s: progress not removed: %s", self.sink.name, e.message)

    def _recover(self) -> None:
        recovered = self.target.recovered_offsets()
        if recovered is not None and sum(recovered) > sum(self.offsets):
            log.info("sink %s: the target holds changes up to %s; resuming there", self.sink.name, recovered)
            self.offsets, self.pending = recovered, None

    def _round(self) -> bool:
        """Deliver the next batch of changes; False when there were none."""
        engine = self.engine
        rel = engine.catalog.snapshot().by_id(self.from_id)
        if rel is None:
            return False  # being dropped
        if rel.columns != self.target.columns:
            self.target.columns = rel.columns  # new columns only ever come last: key positions hold
        with engine.storage.snapshot() as snap:
            end = engine.reader.end_offsets(rel, snap)
            start = tuple(self.offsets[p] if p < len(self.offsets) else 0 for p in range(len(end)))
            stop = self.pending if self.pending is not None and len(self.pending) == len(end) else \
                _capped(start, end)
            if stop == start:
                self.pending = None
                return False
            table = read_range(engine.reader, rel, snap, start, stop)
        if self.target.fixed_batches and self.pending is None:
            self._store(start, stop)
        batch = Batch(changes_of(table, rel.columns, self.key, self.consolidate), first=sum(start),
                      last=sum(stop) - 1, offsets=stop)
        if batch.changes:
            self.target.deliver(batch)
        changes = self.status.changes + sum(stop) - sum(start)
        self._store(stop, None, changes)
        self.offsets, self.pending = stop, None
        self.status.changes = changes
        return True

    def _store(self, offsets: tuple[int, ...], pending: tuple[int, ...] | None, changes: int | None = None) -> None:
        meta: dict[str, Any] = {"offsets": list(offsets),
                                "changes": self.status.changes if changes is None else changes}
        if pending is not None:
            meta["pending"] = list(pending)
        self.engine.storage.commit(Commit(puts=[(META, sink_key(self.sink.id), json.dumps(meta).encode())]))
        if pending is not None:
            self.pending = pending


def _capped(start: tuple[int, ...], end: tuple[int, ...]) -> tuple[int, ...]:
    budget = MAX_ROUND_CHANGES
    out = []
    for s, e in zip(start, end, strict=True):
        take = min(max(e - s, 0), budget)
        budget -= take
        out.append(s + take)
    return tuple(out)


# ---- all sinks ----------------------------------------------------------------------------------------

class SinkManager:
    """Runs a thread for every sink in the catalog (started at boot and after DDL)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.runners: dict[int, SinkRunner] = {}
        self.failed: dict[int, str] = {}  # sink id -> why it could not start

    def status(self, sink_id: int) -> SinkStatus | None:
        runner = self.runners.get(sink_id)
        if runner is not None:
            return runner.status
        if sink_id in self.failed:
            return SinkStatus(state="failed", last_error=self.failed[sink_id])
        return None

    def sync(self) -> None:
        """Start threads for new sinks; stop those of dropped ones (without waiting for them)."""
        catalog = self.engine.catalog.snapshot()
        wanted = {s.id: s for s in catalog.objects_of("sink")}
        for sink_id in [i for i in self.runners if i not in wanted]:
            self.runners.pop(sink_id).signal_stop()
        for sink_id in [i for i in self.failed if i not in wanted]:
            del self.failed[sink_id]
        for sink_id, sink in wanted.items():
            if sink_id in self.runners:
                continue
            try:
                runner = self._runner(sink, catalog)
            except Exception as e:  # noqa: BLE001 - a sink that cannot start must not fail the DDL
                self.failed[sink_id] = mask_text(e.message if isinstance(e, StreamDBError) else str(e))
                log.error("sink %s cannot start: %s", sink.name, self.failed[sink_id])
                continue
            self.failed.pop(sink_id, None)
            self.runners[sink_id] = runner
            runner.start_thread()

    def stop(self) -> None:
        runners = list(self.runners.values())
        self.runners.clear()
        for runner in runners:
            runner.signal_stop()
        deadline = time.monotonic() + 10.0
        for runner in runners:
            runner.join(max(deadline - time.monotonic(), 0.1))

    def _runner(self, sink: RelationDef, catalog: CatalogSnapshot) -> SinkRunner:
        opts = dict(sink.options)
        rel = catalog.by_id(int(opts["from_id"]))
        if rel is None:
            raise ConfigurationError(f'relation "{opts.get("from")}" of sink "{sink.name}" does not exist')
        names = rel.column_names()
        key = tuple(names.index(k) for k in opts.get("key", "").split(",") if k in names)
        make = _TARGETS[opts["type"]]
        target = make(self.engine, sink, rel, key, catalog)
        consolidate = bool(key) and (not append_only(rel) or opts["type"] == "postgres")
        return SinkRunner(self.engine, sink, target, key, consolidate)


def _connector_options(sink: RelationDef, catalog: CatalogSnapshot) -> dict[str, str]:
    conn = catalog.object_by_id(sink.depends_on[1]) if len(sink.depends_on) > 1 else None
    return dict(conn.options) if conn is not None else {}


def _kafka_target(engine: Engine, sink: RelationDef, rel: RelationDef, key: tuple[int, ...],
                  catalog: CatalogSnapshot) -> Target:
    from streamdb.runtime.connectors.manager import _KafkaLog

    opts = dict(sink.options)
    conn_opts = _connector_options(sink, catalog)
    bootstrap = conn_opts.get("bootstrap_servers") or opts.get("bootstrap_servers")
    if not bootstrap:
        raise ConfigurationError(f'sink "{sink.name}" has no Kafka bootstrap servers')
    props = {k: v for k, v in {**conn_opts, **opts}.items() if "." in k}
    if not engine.settings.allow_kafka_file_properties:
        refuse_file_properties(props)
    conf = {**props, "bootstrap.servers": bootstrap, "client.id": f"streamdb-sink-{sink.name}",
            "logger": _KafkaLog(sink.name)}
    # Unique per sink ever created (a sink dropped and created again, or another server's sink
    # with the same id, must not fence this one's transactions).
    transactional_id = f"streamdb-sink-{sink.name}-{sink.id}-{int(sink.created_at * 1000)}"
    return KafkaTarget(conf, opts["topic"], rel.columns, key, op_headers=not key and not append_only(rel),
                       exactly_once=opts.get("exactly_once") == "true", transactional_id=transactional_id)


def _postgres_target(engine: Engine, sink: RelationDef, rel: RelationDef, key: tuple[int, ...],
                     catalog: CatalogSnapshot) -> Target:
    opts = dict(sink.options)
    dsn = _connector_options(sink, catalog).get("dsn")
    if not dsn:
        raise ConfigurationError(f'sink "{sink.name}" has no Postgres connector')
    return PostgresTarget(dsn, opts["table"], rel.columns, key, create_table=opts.get("create_table") == "true")


def _file_target(engine: Engine, sink: RelationDef, rel: RelationDef, key: tuple[int, ...],
                 catalog: CatalogSnapshot) -> Target:
    opts = dict(sink.options)
    return FileTarget(sink_directory(engine, sink, catalog), opts.get("format", "json"), rel.columns)


_TARGETS: dict[str, Callable[[Engine, RelationDef, RelationDef, tuple[int, ...], CatalogSnapshot], Target]] = {
    "kafka": _kafka_target, "postgres": _postgres_target, "file": _file_target}


def sink_directory(engine: Engine, sink: RelationDef, catalog: CatalogSnapshot) -> Path:
    """A FILE sink's directory: its connector's path, then its own `path`, under the file root."""
    root = engine.file_root()
    directory = confined(root, _connector_options(sink, catalog).get("path", ""))
    sub = dict(sink.options).get("path")
    if not sub:
        return directory
    candidate = (directory / sub).resolve()
    if Path(sub).is_absolute() or directory not in candidate.parents:
        raise InsufficientPrivilege(f'sink path "{sub}" is outside its connector\'s directory',
                                    hint="A FILE sink's path is a subdirectory of its connector's path.")
    return candidate


def check_object(engine: Engine, obj: RelationDef, catalog: CatalogSnapshot) -> None:
    """Before CREATE commits: refuse what could never run (a FILE path outside the file root,
    Kafka properties that read files)."""
    opts = dict(obj.options)
    if obj.kind == "connector" and opts.get("type") == "file":
        confined(engine.file_root(), opts.get("path", ""))
    if obj.kind == "sink" and opts.get("type") == "file":
        sink_directory(engine, obj, catalog)
    if obj.kind == "sink" and not engine.settings.allow_kafka_file_properties:
        refuse_file_properties(opts)
