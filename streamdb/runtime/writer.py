"""Turns inserts, updates and deletes into change batches and state updates, committed atomically.

Streams only append (+1). Tables keep their current rows in a state store keyed
by primary key (or a generated row id) and log every change: an insert over an
existing key logs the old row with -1 and the new with +1; a delete logs -1.
The log batch and the state update are one durable commit, acknowledged only
after the storage has synced it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
import logging
import uuid
import zlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import sqlglot

from streamdb import types as T
from streamdb.catalog import ColumnDef, RelationDef
from streamdb.errors import Notice, NotNullViolation, StreamDBError
from streamdb.planner.coerce import NotALiteral, coerce, literal_value
from streamdb.runtime import changes as C
from streamdb.runtime.reader import state_store
from streamdb.runtime.watermarks import delay_of
from streamdb.storage.base import Append, Commit

if TYPE_CHECKING:
    from streamdb.runtime.engine import Engine

_round_robin = itertools.count()


log = logging.getLogger("streamdb.writer")


async def _commit(engine: Engine, commit: Commit) -> None:
    """Commit durably, then count what it appended (streamdb_log_appended_*)."""
    await engine.storage.commit_async(commit)
    engine.metrics.committed(commit)


# Rows built and encoded per statement on the event loop cost ~10 us each: past this many, a
# worker thread does it, so a bulk INSERT or COPY chunk does not hold up other sessions.
OFF_LOOP_ROWS = 1000


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _default_value(col: ColumnDef) -> Any:
    if col.default_sql is None:
        return None
    text = col.default_sql.strip()
    if text.lower().rstrip("()") in ("now", "current_timestamp", "localtimestamp", "transaction_timestamp"):
        return _now()
    try:
        return literal_value(sqlglot.parse_one(text, read="postgres"))
    except (NotALiteral, sqlglot.errors.ParseError):
        raise StreamDBError(f'default expression "{text}" of column "{col.name}" is not supported',
                            sqlstate="0A000") from None


def _rowtime(value: Any) -> dt.datetime:
    v = coerce(value, T.TIMESTAMPTZ, "rowtime")
    if v is None:
        return _now()
    return v


def _partition(rel: RelationDef, key: bytes | None) -> int:
    if rel.partitions == 1:
        return 0
    if key is None:
        return next(_round_robin) % rel.partitions
    return zlib.crc32(key) % rel.partitions


def build_rows(rel: RelationDef, names: tuple[str, ...], rows: list[tuple[Any, ...]],
               rowtime_given: bool) -> tuple[list[tuple[Any, ...]], list[dt.datetime]]:
    """Full rows in column order (coerced, defaults filled, NOT NULL checked) and their event times."""
    index = {n: i for i, n in enumerate(names)}
    full_rows: list[tuple[Any, ...]] = []
    rowtimes: list[dt.datetime] = []
    defaults: dict[str, Any] = {}
    arrival = _now()  # one arrival time for the rows of one statement
    for r in rows:
        out = []
        for c in rel.columns:
            i = index.get(c.name)
            if i is not None and i < len(r):
                v = coerce(r[i], c.type, c.name)
            else:
                if c.name not in defaults:
                    defaults[c.name] = _default_value(c)
                v = coerce(defaults[c.name], c.type, c.name)
            if v is None and not c.nullable:
                raise NotNullViolation(
                    f'null value in column "{c.name}" of relation "{rel.name}" violates not-null constraint')
            out.append(v)
        full_rows.append(tuple(out))
        if rowtime_given and index.get("rowtime") is not None:
            rowtimes.append(_rowtime(r[index["rowtime"]]))
        elif rel.timestamp_column is not None:
            ts = out[[c.name for c in rel.columns].index(rel.timestamp_column)]
            rowtimes.append(_rowtime(ts) if ts is not None else arrival)
        else:
            rowtimes.append(arrival)
    return full_rows, rowtimes


def _infer_json_type(v: Any) -> T.SqlType | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return T.BOOLEAN
    if isinstance(v, int):
        return T.BIGINT
    if isinstance(v, float) or hasattr(v, "as_tuple"):
        return T.DOUBLE
    if isinstance(v, (dict, list)):
        return T.JSONB
    if isinstance(v, dt.datetime):
        return T.TIMESTAMPTZ
    return T.TEXT


def _widen(old: T.SqlType, new: T.SqlType) -> T.SqlType:
    if old == new:
        return old
    if {old, new} == {T.BIGINT, T.DOUBLE}:
        return T.DOUBLE
    return T.TEXT


def observed_columns(rel: RelationDef, events: list[dict[str, Any]]) -> tuple[ColumnDef, ...]:
    """A schemaless stream's columns after these events: new keys appended, types widened."""
    cols = {c.name: c for c in rel.columns}
    order = [c.name for c in rel.columns]
    for e in events:
        for k, v in e.items():
            t = _infer_json_type(v)
            if k not in cols:
                cols[k] = ColumnDef(k, t or T.TEXT)
                order.append(k)
            elif t is not None and cols[k].type != t:
                cols[k] = ColumnDef(k, _widen(cols[k].type, t))
    return tuple(cols[n] for n in order)


def _json_ready(v: Any) -> Any:
    if isinstance(v, T.SqlType):
        return str(v)
    if hasattr(v, "value") and hasattr(v, "type") and not isinstance(v, (dict, list)):
        return v.value  # a TypedValue from a cast literal
    return v


async def insert_rows(engine: Engine, rel: RelationDef, names: tuple[str, ...], rows: list[tuple[Any, ...]],
                      rowtime_given: bool) -> Appended:
    if not rows:
        return Appended(0)
    if rel.kind == "stream":
        return await _insert_stream(engine, rel, names, rows, rowtime_given)
    if len(rows) < OFF_LOOP_ROWS:
        full_rows, _ = build_rows(rel, names, rows, False)
    else:
        full_rows, _ = await asyncio.to_thread(build_rows, rel, names, rows, False)
    return Appended(await apply_table_changes(engine, rel, upserts=full_rows))


async def _insert_stream(engine: Engine, rel: RelationDef, names: tuple[str, ...], rows: list[tuple[Any, ...]],
                         rowtime_given: bool) -> Appended:
    commit = Commit()
    if rel.schemaless:
        events = []
        rowtimes = []
        for r in rows:
            event = {n: _json_ready(v) for n, v in zip(names, r, strict=False) if n != "rowtime"}
            events.append(event)
            rt = r[names.index("rowtime")] if rowtime_given else None
            rowtimes.append(_rowtime(rt) if rt is not None else _now())
        new_cols = observed_columns(rel, events)
        if new_cols != rel.columns:
            async with engine.ddl_lock:
                current = engine.catalog.snapshot().get(rel.name)
                if current is None or current.id != rel.id:
                    raise StreamDBError(f'stream "{rel.name}" was dropped', sqlstate="42P01")
                updated = current.with_columns(observed_columns(current, events))
                change, _, snapshot = engine.catalog.plan_change(update=[updated])
                change.appends.extend(_stream_appends(updated, [(C.dumps_event(e),) for e in events],
                                                      rowtimes, [None] * len(events)))
                await _commit(engine, change)
                engine.catalog.applied(snapshot)
            engine.notify_write(rel.id)
            return Appended(len(rows))
        payload_rows = [(C.dumps_event(e),) for e in events]
        commit.appends.extend(_stream_appends(rel, payload_rows, rowtimes, [None] * len(events)))
    else:
        if len(rows) < OFF_LOOP_ROWS:
            full_rows, rowtimes = build_rows(rel, names, rows, rowtime_given)
        else:
            full_rows, rowtimes = await asyncio.to_thread(build_rows, rel, names, rows, rowtime_given)
        return await append_rows(engine, rel, full_rows, rowtimes)
    await _commit(engine, commit)
    engine.notify_write(rel.id)
    return Appended(len(rows))


async def commit_appends(engine: Engine, rel: RelationDef, appends: list[Append]) -> None:
    """Commit log batches built by `arrow_appends` (on a worker thread, say)."""
    if not appends:
        return
    commit = Commit()
    commit.appends.extend(appends)
    await _commit(engine, commit)
    engine.notify_write(rel.id)


def arrow_appends(rel: RelationDef, table: pa.Table) -> list[Append]:
    """The log batches of `table`, spread over the stream's partitions, each row stamped with
    the arrival time and weight 1 (columns repeated, not built from Python values)."""
    n = table.num_rows
    arrival = pa.scalar(_now(), pa.timestamp("us", tz="UTC"))
    one = pa.scalar(1, pa.int64())
    columns = [table.column(i).cast(c.type.arrow()) for i, c in enumerate(rel.columns)]
    appends = []
    parts = rel.partitions
    size = -(-n // parts)
    first = next(_round_robin) % parts
    for k in range(parts):
        start = k * size
        if start >= n:
            break
        length = min(size, n - start)
        chunk = [col.slice(start, length) for col in columns]
        batch = pa.Table.from_arrays([*chunk, pa.repeat(arrival, length), pa.repeat(one, length)],
                                     schema=C.batch_schema(rel))
        appends.append(Append(rel.id, (first + k) % parts, C.encode_table(batch), length))
    return appends


@dataclass(frozen=True)
class Appended:
    """What an append to a stream stored: `rows` events, and `late` left out as older than the
    stream's watermark (counted in its state, see watermarks.py)."""

    rows: int
    late: int = 0
    watermark: dt.datetime | None = None  # the watermark after the append, when some were late


async def append_rows(engine: Engine, rel: RelationDef, full_rows: list[tuple[Any, ...]],
                      rowtimes: list[dt.datetime], extra: Commit | None = None) -> Appended:
    """Append complete rows (column order, coerced) to a typed stream, in one atomic commit with
    `extra` (a source's consumed offsets and dead letters, say). On a stream with a watermark the
    events older than it are left out and counted."""
    delay = delay_of(rel)
    if delay is None or not full_rows:
        commit = await _append_commit(rel, full_rows, rowtimes, extra)
        await _commit(engine, commit)
        _notify(engine, commit)
        return Appended(len(full_rows))
    # The watermark moves with the events that move it, in the same commit.
    async with engine.table_lock(rel.id):
        before = engine.watermarks.state(rel.id)
        on_time, state = before.admitted(_event_times(rel, full_rows, rowtimes), delay)
        if len(on_time) < len(full_rows):
            full_rows = [full_rows[i] for i in on_time]
            rowtimes = [rowtimes[i] for i in on_time]
        commit = await _append_commit(rel, full_rows, rowtimes, extra)
        commit.puts.append(engine.watermarks.put(rel.id, state))
        await _commit(engine, commit)
        engine.watermarks.installed(rel.id, state)
    _notify(engine, commit)
    late = state.late_events - before.late_events
    if late:
        log.info("stream %s: %d event(s) older than its watermark left out", rel.name, late)
    return Appended(len(full_rows), late, state.watermark(delay) if late else None)


def _event_times(rel: RelationDef, rows: list[tuple[Any, ...]], rowtimes: list[dt.datetime]
                 ) -> list[dt.datetime | None]:
    """The times the watermark judges: the rows' ROWTIME, None where the event-time column is
    NULL (its ROWTIME is then the arrival time, which must not move an event-time watermark)."""
    if rel.timestamp_column is None:
        return list(rowtimes)
    at = rel.column_names().index(rel.timestamp_column)
    return [None if row[at] is None else t for row, t in zip(rows, rowtimes, strict=True)]


def late_notices(rel: RelationDef, stored: Appended) -> list[Notice]:
    """The WARNING an INSERT or COPY gets when some of its events were older than the watermark."""
    if not stored.late:
        return []
    rows = "row was" if stored.late == 1 else "rows were"
    at = stored.watermark.isoformat(sep=" ") if stored.watermark is not None else "?"
    return [Notice(f'{stored.late} {rows} not added to {rel.kind} "{rel.name}": older than its watermark (now {at})',
                   severity="WARNING", sqlstate="01000",
                   hint="Events older than the watermark are late and left out; DESCRIBE counts them.")]


async def _append_commit(rel: RelationDef, full_rows: list[tuple[Any, ...]], rowtimes: list[dt.datetime],
                         extra: Commit | None) -> Commit:
    commit = Commit()
    if extra is not None:
        commit.appends.extend(extra.appends)
        commit.puts.extend(extra.puts)
        commit.deletes.extend(extra.deletes)
    if full_rows:
        keys: list[bytes | None] | None = None
        if rel.key_columns:
            idx = [rel.column_names().index(k) for k in rel.key_columns]
            keys = [C.key_of(tuple(r[i] for i in idx)) for r in full_rows]
        keys = keys or [None] * len(full_rows)
        if len(full_rows) < OFF_LOOP_ROWS:
            commit.appends.extend(_stream_appends(rel, full_rows, rowtimes, keys))
        else:
            commit.appends.extend(await asyncio.to_thread(_stream_appends, rel, full_rows, rowtimes, keys))
    return commit


def _notify(engine: Engine, commit: Commit) -> None:
    for rel_id in {a.relation_id for a in commit.appends}:
        engine.notify_write(rel_id)


def _stream_appends(rel: RelationDef, rows: list[tuple[Any, ...]], rowtimes: list[dt.datetime],
                    keys: list[bytes | None]) -> list[Append]:
    by_partition: dict[int, list[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        by_partition[_partition(rel, k)].append(i)
    out = []
    for p, idx in sorted(by_partition.items()):
        payload = C.encode_batch(rel, [rows[i] for i in idx], [rowtimes[i] for i in idx], [1] * len(idx))
        out.append(Append(rel.id, p, payload, len(idx)))
    return out


async def apply_table_changes(engine: Engine, rel: RelationDef, *, upserts: list[tuple[Any, ...]] = (),  # type: ignore[assignment]
                              updates: list[tuple[bytes, tuple[Any, ...]]] = (),  # type: ignore[assignment]
                              deletes: list[bytes] = (),  # type: ignore[assignment]
                              assignments: list[tuple[bytes, Callable[[tuple[Any, ...]], tuple[Any, ...]]]] = (),  # type: ignore[assignment]
                              lock_held: bool = False, extra: Commit | None = None) -> int:
    """Apply row changes to a table under its write lock; returns the number of rows affected.
    `extra` is committed in the same write (a source's progress), even when no row changes.
    `assignments` give a row's new version from the row as it is under the lock (an UPDATE's
    SET), so concurrent UPDATEs of one row never lose each other's changes. `lock_held`: the
    caller holds the table's lock already (it computed `updates` under it)."""
    rows = len(upserts) + len(updates) + len(deletes) + len(assignments)
    if not lock_held and extra is None and rows < OFF_LOOP_ROWS and engine.storage.writes_in_order:
        return await _queue_table_changes(engine, rel, upserts, updates, deletes, assignments)
    async with contextlib.nullcontext() if lock_held else engine.table_lock(rel.id):
        if rows < OFF_LOOP_ROWS and extra is None:
            commit, affected, _ = _table_changes(engine, rel, upserts, updates, deletes, assignments)
        else:  # a bulk write (COPY into a table, say: ~10 us a row) or a source's batch: off the loop
            commit, affected, _ = await asyncio.to_thread(_table_changes, engine, rel, upserts, updates, deletes,
                                                          assignments)
        if extra is not None:
            commit = commit or Commit()
            commit.appends.extend(extra.appends)
            commit.puts.extend(extra.puts)
            commit.deletes.extend(extra.deletes)
        if commit is None:
            return affected
        await _commit(engine, commit)
    engine.notify_write(rel.id)
    return affected


async def _queue_table_changes(engine: Engine, rel: RelationDef, upserts: list[tuple[Any, ...]],
                               updates: list[tuple[bytes, tuple[Any, ...]]], deletes: list[bytes],
                               assignments: list[tuple[bytes, Callable[[tuple[Any, ...]], tuple[Any, ...]]]],
                               ) -> int:
    """A few rows' changes (a write by primary key): the table's lock is held only while the
    change is computed over the rows as the commits queued before leave them and the commit is
    queued behind them, so concurrent writers of one table share a group commit."""
    queued = engine.queued_rows(rel.id)
    async with engine.table_lock(rel.id, queued_ok=True):
        commit, affected, written = _table_changes(engine, rel, upserts, updates, deletes, assignments,
                                                   queued.rows())
        if commit is None:
            return affected
        done = engine.storage.submit_in_order(commit)
        queued.queued(written, done, asyncio.get_running_loop())
    # Shielded: cancelling this statement must not withdraw a commit later ones build on.
    await asyncio.shield(asyncio.wrap_future(done))
    engine.metrics.committed(commit)
    engine.notify_write(rel.id)
    return affected


def _table_changes(engine: Engine, rel: RelationDef, upserts: list[tuple[Any, ...]],
                   updates: list[tuple[bytes, tuple[Any, ...]]], deletes: list[bytes],
                   assignments: list[tuple[bytes, Callable[[tuple[Any, ...]], tuple[Any, ...]]]],
                   queued: dict[bytes, tuple[Any, ...] | None] | None = None,
                   ) -> tuple[Commit | None, int, dict[bytes, tuple[Any, ...] | None]]:
    """The commit of `apply_table_changes` (None: nothing changes), the rows affected and the
    rows it writes (key -> row, None where deleted), computed against the table's stored rows
    as the `queued` commits leave them (the caller holds the table's lock)."""
    store = state_store(rel.id)
    pk_idx = [rel.column_names().index(k) for k in rel.primary_key]

    def key_for(row: tuple[Any, ...]) -> bytes:
        return C.key_of(tuple(row[i] for i in pk_idx)) if pk_idx else b"r" + uuid.uuid4().bytes

    now = _now()
    state: dict[bytes, tuple[Any, ...] | None] = dict(queued or {})  # pending view of the state
    dirty: set[bytes] = set()
    upsert_keys = [key_for(row) for row in upserts]
    with engine.storage.snapshot() as snap:
        def fetch(keys: list[bytes]) -> None:
            """Stored rows of these keys into `state`, read in one call (a bulk write reads
            thousands; one at a time, the Python around each read cost ten times the read)."""
            wanted = [k for k in dict.fromkeys(keys) if k not in state]
            for key, raw in zip(wanted, snap.get_many(store, wanted), strict=True):
                state[key] = C.decode_state_row(raw)[0] if raw is not None else None

        def current(key: bytes) -> tuple[Any, ...] | None:
            if key not in state:
                fetch([key])
            return state[key]

        existing = [*deletes, *(k for k, _ in updates), *(k for k, _ in assignments)]
        if pk_idx:
            existing.extend(upsert_keys)
        else:
            state.update(dict.fromkeys(upsert_keys))  # a keyless table's new rows get new keys
        fetch(existing)
        changes: list[tuple[tuple[Any, ...], int, bytes]] = []  # (row, weight, key)
        affected = 0
        if assignments:
            updates = [*updates, *((key, assign(old)) for key, assign in assignments
                                   if (old := current(key)) is not None)]
        for key in deletes:
            old = current(key)
            if old is not None:
                changes.append((old, -1, key))
                state[key] = None
                dirty.add(key)
                affected += 1
        moved_away = set()
        for key, _new_row in updates:
            old = current(key)
            if old is None:
                continue
            changes.append((old, -1, key))
            state[key] = None
            dirty.add(key)
            moved_away.add(key)
        for key, new_row in updates:
            if key not in moved_away:
                continue
            new_key = key_for(new_row) if pk_idx else key
            if new_key != key and current(new_key) is not None:
                raise StreamDBError(
                    f'duplicate key value violates unique constraint "{rel.name}_pkey"', sqlstate="23505",
                    detail="Key (" + ", ".join(rel.primary_key) + ") already exists.")
            changes.append((new_row, 1, new_key))
            state[new_key] = new_row
            dirty.add(new_key)
            affected += 1
        for row, key in zip(upserts, upsert_keys, strict=True):
            old = current(key)
            if old is not None:
                changes.append((old, -1, key))
            changes.append((row, 1, key))
            state[key] = row
            dirty.add(key)
            affected += 1
    if not changes:
        return None, affected, {}
    commit = Commit()
    by_partition: dict[int, list[tuple[tuple[Any, ...], int, bytes]]] = defaultdict(list)
    for ch in changes:
        by_partition[_partition(rel, ch[2]) if rel.partitions > 1 else 0].append(ch)
    for p, chs in sorted(by_partition.items()):
        payload = C.encode_batch(rel, [c[0] for c in chs], [now] * len(chs), [c[1] for c in chs],
                                 [c[2] for c in chs])
        commit.appends.append(Append(rel.id, p, payload, len(chs)))
    for key in dirty:
        current_row = state[key]
        if current_row is None:
            commit.deletes.append((store, key))
        else:
            commit.puts.append((store, key, C.encode_state_row(current_row, now)))
    return commit, affected, {key: state[key] for key in dirty}
