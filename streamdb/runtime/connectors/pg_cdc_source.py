"""A table whose rows follow a PostgreSQL table: a snapshot, then its changes through logical
replication (change data capture), exactly once.

The source reads a logical replication slot of the `pgoutput` plugin through SQL
(`pg_logical_slot_peek_binary_changes`) with psycopg: no replication-protocol connection, so the
same driver and DSN as the Postgres sink. Each batch of whole upstream transactions becomes one
write of the table (upserts and deletes by key), committed together with the end LSN of its last
transaction; only then is the slot advanced (`pg_replication_slot_advance`). After a crash the
slot gives the changes since its last advance again, and those at or before the stored LSN are
skipped: every upstream change is applied once.

The first start creates the slot, then copies the table in a REPEATABLE READ transaction. Changes
made between the two are in the copy and again in the slot; applying them again by key gives the
same rows (an upsert of the row as it is, a delete of a row that is gone), so the table converges.
"""

from __future__ import annotations

import hashlib
import logging
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streamdb import values
from streamdb.catalog import RelationDef
from streamdb.planner.connectors import mask_text
from streamdb.runtime.connectors.decode import Decoder
from streamdb.runtime.connectors.source_base import META, SourceThread, source_key
from streamdb.storage.base import Commit

if TYPE_CHECKING:
    from streamdb.runtime.engine import Engine

log = logging.getLogger("streamdb.sources")

BATCH_CHANGES = 10_000  # pgoutput messages per read (whole transactions: it may return more)
SNAPSHOT_CHUNK = 10_000
POLL_SECONDS = 0.2


class UpstreamError(Exception):
    """The upstream table, slot or publication is not as the source needs it; said in words."""


@dataclass
class _Relation:
    """An upstream relation as pgoutput describes it (its columns in upstream order)."""

    namespace: str
    name: str
    columns: list[str]


@dataclass
class _Batch:
    upserts: list[tuple[Any, ...]] = field(default_factory=list)
    deletes: list[tuple[Any, ...]] = field(default_factory=list)  # key values
    lsn: int = 0  # end LSN of the last whole transaction in the batch


class PostgresCdcSource(SourceThread):
    """Keeps table `rel` equal to PostgreSQL table `schema.table` of `dsn`."""

    kind = "postgres-cdc"

    def __init__(self, engine: Engine, rel: RelationDef, decoder: Decoder, *, dsn: str, table: str,
                 publication: str | None) -> None:
        super().__init__(engine, rel, None, decoder)
        self.dsn = dsn
        self.schema, self.table = table.split(".", 1)
        tag = hashlib.sha1(f"{rel.id}/{rel.created_at!r}".encode()).hexdigest()[:8]  # kept across renames
        self.slot = f"streamdb_{rel.id}_{tag}"
        self.publication = publication or self.slot
        self.own_publication = publication is None
        self.lsn: int | None = None  # end LSN of the last transaction applied; None: no snapshot yet
        self.relations: dict[int, _Relation] = {}
        self.columns = rel.column_names()
        self.key_columns = list(rel.primary_key)

    def restore(self, meta: dict[str, Any]) -> None:
        self.lsn = meta.get("lsn")

    # ---- the source's thread -------------------------------------------------------------

    def _run(self) -> None:
        import psycopg

        conn = None
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=10)
                    self._prepare(conn)
                    self.status.state = "running"
                    self.status.last_error = None
                if not self._poll(conn):
                    self._stop.wait(POLL_SECONDS)
            except Exception as e:  # noqa: BLE001 - upstream down or changed: report it, retry
                self.status.state = "retrying"
                self.status.last_error = mask_text(str(e).strip())
                log.warning("source %s: %s", self.rel.name, self.status.last_error)
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:  # noqa: BLE001
                        pass
                conn = None
                self._stop.wait(1.0)
        if conn is not None:
            conn.close()

    def _prepare(self, conn: Any) -> None:
        """The publication and slot exist; the table holds the snapshot."""
        qualified = f"{_ident(self.schema)}.{_ident(self.table)}"
        found = conn.execute("SELECT c.relreplident FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                             "WHERE n.nspname = %s AND c.relname = %s", (self.schema, self.table)).fetchone()
        if found is None:
            raise UpstreamError(f'the upstream table "{self.schema}.{self.table}" does not exist')
        upstream_columns = [r[0] for r in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped "
            "ORDER BY attnum", (qualified,)).fetchall()]
        missing = [c for c in self.columns if c not in upstream_columns]
        if missing:
            raise UpstreamError(f'the upstream table "{self.schema}.{self.table}" has no column "{missing[0]}"')
        if not conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (self.publication,)).fetchone():
            if not self.own_publication:
                raise UpstreamError(f'the publication "{self.publication}" does not exist upstream')
            conn.execute(f"CREATE PUBLICATION {_ident(self.publication)} FOR TABLE {qualified}")
        slot = conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (self.slot,)).fetchone()
        if self.lsn is None:
            if slot is not None:  # a snapshot that did not finish: start over
                conn.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (self.slot,))
            self._snapshot(conn, qualified)
        elif slot is None:
            raise UpstreamError(f'the replication slot "{self.slot}" was dropped upstream: the changes since are '
                                "lost to this table; drop and create it again to copy the table afresh")

    def _snapshot(self, conn: Any, qualified: str) -> None:
        """The whole upstream table, as of a moment after the slot was created."""
        import psycopg

        from streamdb.storage.base import state_store

        cols = ", ".join(f"{_ident(c)}::text" for c in self.columns)
        # Rows of an earlier snapshot that did not finish: the copy starts from an empty table.
        with self.engine.storage.snapshot() as stored:
            stale = [key for key, _ in stored.scan(state_store(self.rel.id))]
        if stale:
            self._apply(_Batch(), snapshot_done=False, delete_keys=stale)
        with psycopg.connect(self.dsn, connect_timeout=10) as snap:
            snap.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            rows_read = 0
            with snap.cursor(name="streamdb_snapshot") as cur:
                cur.execute(f"SELECT {cols} FROM {qualified}")
                while True:
                    chunk = cur.fetchmany(SNAPSHOT_CHUNK)
                    if not chunk:
                        break
                    rows_read += len(chunk)
                    self._apply(_Batch(upserts=[self._row(list(r)) for r in chunk]), snapshot_done=False)
        self._apply(_Batch(), snapshot_done=True)
        log.info("source %s: copied %d rows of %s", self.rel.name, rows_read, qualified)

    def _poll(self, conn: Any) -> bool:
        """Apply the changes the slot has; False when it had none."""
        # Up to a position taken first: when nothing of this table committed before it, the slot can
        # move there (else an upstream busy with other tables keeps its WAL for this slot forever).
        # The flushed position, not the written one: decoding stops at the flushed WAL, so with
        # asynchronous commits a written-only transaction would be passed over, then the advance
        # below (clamped to the flush, which moves meanwhile) would move the slot past it: lost.
        upto = conn.execute("SELECT pg_current_wal_flush_lsn()").fetchone()[0]
        rows = conn.execute(
            "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, %s, %s, 'proto_version', '1', "
            "'publication_names', %s)", (self.slot, upto, BATCH_CHANGES, self.publication)).fetchall()
        if not rows:
            conn.execute("SELECT pg_replication_slot_advance(%s, %s)", (self.slot, upto))
            return False
        batch, pending = _Batch(), _Batch()
        for (data,) in rows:
            self._message(bytes(data), pending)
            if data[0:1] == b"C":  # a whole transaction: it is applied, unless it was already
                if self.lsn is None or pending.lsn > self.lsn:
                    batch.upserts.extend(pending.upserts)
                    batch.deletes.extend(pending.deletes)
                    batch.lsn = pending.lsn
                pending = _Batch()
        if batch.lsn:
            self._apply(batch)
        # Applied (or applied before): the slot may let its WAL go.
        last_end = self.lsn
        if last_end:
            conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (self.slot, _lsn_text(last_end)))
        return True

    def _message(self, data: bytes, tx: _Batch) -> None:
        kind = data[0:1]
        if kind == b"R":
            oid, pos = _int32(data, 1)
            namespace, pos = _cstring(data, pos)
            name, pos = _cstring(data, pos)
            pos += 1  # replica identity
            ncols = struct.unpack_from("!h", data, pos)[0]
            pos += 2
            columns = []
            for _ in range(ncols):
                pos += 1  # flags
                col, pos = _cstring(data, pos)
                pos += 8  # type oid, typmod
                columns.append(col)
            missing = [c for c in self.columns if c not in columns]
            if missing:
                raise UpstreamError(f'the upstream table "{namespace}.{name}" changed: it has no column '
                                    f'"{missing[0]}" any more; this table cannot follow it')
            self.relations[oid] = _Relation(namespace, name, columns)
        elif kind == b"I":
            rel, pos = self._relation(data)
            pos += 1  # 'N'
            new, _ = _tuple(data, pos)
            tx.upserts.append(self._row(self._named(rel, new)))
        elif kind == b"U":
            rel, pos = self._relation(data)
            old = None
            if data[pos:pos + 1] in (b"K", b"O"):
                old, pos = _tuple(data, pos + 1)
            new, _ = _tuple(data, pos + 1)
            named = self._named(rel, new)
            if any(v is _UNCHANGED for v in named.values()):
                named = self._unchanged_filled(named, self._named(rel, old) if old is not None else None, tx)
            new_row = self._row(named)
            if old is not None:  # the key changed (K), or REPLICA IDENTITY FULL (O)
                old_key = self._key(self._named(rel, old))
                if old_key != tuple(new_row[self.columns.index(k)] for k in self.key_columns):
                    tx.deletes.append(old_key)
            tx.upserts.append(new_row)
        elif kind == b"D":
            rel, pos = self._relation(data)
            old, _ = _tuple(data, pos + 1)
            tx.deletes.append(self._key(self._named(rel, old)))
        elif kind == b"C":
            tx.lsn = struct.unpack_from("!q", data, 10)[0]  # flags, commit LSN, then the end LSN
        elif kind == b"T":
            raise UpstreamError(f'the upstream table "{self.schema}.{self.table}" was truncated: this table '
                                "does not follow a TRUNCATE; drop and create it again to copy the table afresh")
        # B(egin), O(rigin), Y(type) need nothing here.

    def _unchanged_filled(self, named: dict[str, Any], old: dict[str, Any] | None, tx: _Batch) -> dict[str, Any]:
        """An update leaves out TOASTed values it did not change ('u'): take them from the row as it
        was, the old tuple (REPLICA IDENTITY FULL) or else this table's row of that key."""
        from streamdb.runtime import changes as C
        from streamdb.storage.base import state_store

        if old is not None and not any(v is _UNCHANGED for v in old.values()):
            prior = {c: old.get(c) for c in self.columns}
        else:
            key = self._key(named)
            idx = [self.columns.index(k) for k in self.key_columns]
            row = next((r for r in reversed(tx.upserts) if tuple(r[i] for i in idx) == key), None)
            if row is None:
                with self.engine.storage.snapshot() as stored:
                    raw = stored.get(state_store(self.rel.id), C.key_of(key))
                if raw is None:
                    raise UpstreamError(f"an update of a row this table does not hold left out unchanged values; "
                                        f"set REPLICA IDENTITY FULL on {self.schema}.{self.table}")
                row = C.decode_state_row(raw)[0]
            types = {c.name: c.type for c in self.rel.columns}
            prior = {c: None if v is None else values.format_text(v, types[c]) for c, v in zip(self.columns, row, strict=True)}
        return {c: prior.get(c) if v is _UNCHANGED else v for c, v in named.items()}

    def _relation(self, data: bytes) -> tuple[_Relation, int]:
        oid, pos = _int32(data, 1)
        rel = self.relations.get(oid)
        if rel is None:
            raise UpstreamError(f"a change of upstream relation {oid} came before its description")
        return rel, pos

    def _named(self, rel: _Relation, tup: list[Any]) -> dict[str, Any]:
        return dict(zip(rel.columns, tup, strict=False))

    def _row(self, named: dict[str, Any] | list[Any]) -> tuple[Any, ...]:
        """Upstream text values -> a row of this table (Postgres' text forms, as COPY reads them)."""
        if isinstance(named, list):
            named = dict(zip(self.columns, named, strict=True))
        out = []
        for col in self.rel.columns:
            text = named.get(col.name)
            if text is _UNCHANGED:
                raise UpstreamError(f'column "{col.name}" of an update came as "unchanged TOAST": set REPLICA '
                                    f"IDENTITY FULL on the upstream table so every update carries every value")
            out.append(None if text is None else values.parse_text(text, col.type))
        return tuple(out)

    def _key(self, named: dict[str, Any]) -> tuple[Any, ...]:
        types = {c.name: c.type for c in self.rel.columns}
        return tuple(values.parse_text(named[k], types[k]) for k in self.key_columns)

    def _apply(self, batch: _Batch, snapshot_done: bool = True, delete_keys: list[bytes] | None = None) -> None:
        """One write of the table: the batch's rows and the LSN they reach (or the snapshot's progress)."""
        import asyncio

        from streamdb.runtime import changes as C
        from streamdb.runtime.writer import apply_table_changes

        lsn = batch.lsn or self.lsn or 0
        progress: dict[str, Any] = {"records": self.status.records + len(batch.upserts) + len(batch.deletes),
                                    "bad_records": 0}
        if snapshot_done:
            progress["lsn"] = lsn
        extra = Commit(puts=[(META, source_key(self.rel.id), _json(progress))])
        # A key deleted and upserted in one batch (a row deleted and inserted again) ends upserted:
        # apply_table_changes applies deletes first.
        idx = [self.columns.index(k) for k in self.key_columns]
        latest = {tuple(r[i] for i in idx): r for r in batch.upserts}  # a key's last version in the batch
        deletes = [C.key_of(k) for k in dict.fromkeys(batch.deletes) if k not in latest] + (delete_keys or [])
        upserts = list(latest.values())
        loop = self.engine.loop
        assert loop is not None
        asyncio.run_coroutine_threadsafe(
            apply_table_changes(self.engine, self.rel, upserts=upserts, deletes=deletes, extra=extra), loop).result()
        self.status.records = progress["records"]
        if snapshot_done:
            self.lsn = lsn

    def dropped(self) -> None:
        """Drop the slot (it would keep the upstream's WAL for good) and the publication StreamDB made."""
        import threading

        def drop() -> None:
            import psycopg

            try:
                with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
                    conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                                 "WHERE slot_name = %s", (self.slot,))
                    if self.own_publication:
                        conn.execute(f"DROP PUBLICATION IF EXISTS {_ident(self.publication)}")
            except Exception as e:  # noqa: BLE001 - best effort; the upstream may be away
                log.warning("source %s: its replication slot %s was not dropped: %s", self.rel.name, self.slot,
                            mask_text(str(e)))

        threading.Thread(target=drop, name=f"{self.kind}-{self.rel.name}-drop", daemon=True).start()


_UNCHANGED = object()  # pgoutput's 'u': an unchanged TOASTed value an update did not carry


def _tuple(data: bytes, pos: int) -> tuple[list[Any], int]:
    """pgoutput TupleData at `pos`: values as text (None for NULL, _UNCHANGED for 'u')."""
    n = struct.unpack_from("!h", data, pos)[0]
    pos += 2
    out: list[Any] = []
    for _ in range(n):
        kind = data[pos:pos + 1]
        pos += 1
        if kind == b"n":
            out.append(None)
        elif kind == b"u":
            out.append(_UNCHANGED)
        else:  # b"t" (text); protocol 1 has no binary values
            length = struct.unpack_from("!i", data, pos)[0]
            pos += 4
            out.append(data[pos:pos + length].decode("utf-8"))
            pos += length
    return out, pos


def _int32(data: bytes, pos: int) -> tuple[int, int]:
    return struct.unpack_from("!i", data, pos)[0], pos + 4


def _cstring(data: bytes, pos: int) -> tuple[str, int]:
    end = data.index(b"\0", pos)
    return data[pos:end].decode("utf-8"), end + 1


def _lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _json(progress: dict[str, Any]) -> bytes:
    import json

    return json.dumps(progress).encode()
