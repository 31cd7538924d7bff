"""Reads a relation at a storage snapshot as an Arrow table, for ad hoc queries.

Streams only grow, so each partition's decoded rows are cached and extended
from the cached end offset; a snapshot older than the cache is a slice of it.
Tables are rebuilt from their state store when their log has moved on.
"""

from __future__ import annotations

import bisect
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamdb import types as T
from streamdb.catalog import RelationDef
from streamdb.errors import InternalError
from streamdb.runtime import changes as C
from streamdb.storage.base import Snapshot, Storage

log = logging.getLogger("streamdb.reader")

LOG_FROM = "log_from"  # in a view's stored progress: kept as its change log from this offset on


def state_store(rel_id: int) -> str:
    return f"state:{rel_id}"


def log_only_from(snap: Snapshot, view_id: int) -> int | None:
    """The offset from which an append-only view's change log is its contents (its pipeline keeps
    no per-row state for it: runtime/pipelines.py), or None for a view kept in its state store."""
    raw = snap.get("meta", f"view:{view_id}".encode())
    if not raw:
        return None
    stored = json.loads(raw).get("pipeline") or {}
    value = stored.get(LOG_FROM)
    return int(value) if value is not None else None


def read_log(snap: Snapshot, rel_id: int, partition: int, start: int, end: int) -> Iterator[pa.Table]:
    """The stored change batches holding offsets [start, end) of a partition, each cut to them."""
    for first, count, payload in snap.read(rel_id, partition, start, end):
        lo, hi = max(start - first, 0), min(end - first, count)
        if hi > lo:
            yield C.decode_batch(payload).slice(lo, hi - lo)



def keyed_rows_table(rel: RelationDef, rows: list[tuple[Any, ...]], keys: list[bytes]) -> pa.Table:
    """Rows of a table or view as a query reads them: its columns, then each row's key (__rowkey)."""
    arrays = [pa.array([C.to_arrow_value(r[i], c.type) for r in rows], c.type.arrow())
              for i, c in enumerate(rel.columns)]
    arrays.append(pa.array(keys, pa.binary()))
    schema = pa.schema([*(pa.field(c.name, c.type.arrow()) for c in rel.columns),
                        pa.field(C.ROWKEY, pa.binary())])
    return pa.Table.from_arrays(arrays, schema=schema)

class _PartitionCache:
    __slots__ = ("end", "tables", "starts", "events", "rowtimes")

    def __init__(self) -> None:
        self.end = 0
        self.tables: list[pa.Table] = []  # decoded batches, small ones merged (typed streams, change logs)
        self.starts: list[int] = []  # the offset of each table's first change
        self.events: list[dict[str, Any]] = []  # schemaless streams: parsed JSON events
        self.rowtimes: list[Any] = []


# A log written by single-row INSERTs has a batch per row. Read as one table per batch, a scan
# of n of them costs the embedded engine O(n) chunks: 20,000 single-row INSERTs made
# `SELECT v FROM s WHERE id = 7` take 88 ms. Small batches are merged as they are cached, the
# last two while the older is at most twice the newer (so sizes fall geometrically, and a row
# is copied O(log n) times) and together they hold at most this many rows (so large batches,
# a COPY's, stay as they are decoded and are not copied again).
_MERGED_BATCH_ROWS = 1 << 16


def _append_batch(cache: _PartitionCache, start: int, table: pa.Table) -> None:
    tables, starts = cache.tables, cache.starts
    tables.append(table)
    starts.append(start)
    while (len(tables) > 1 and tables[-2].num_rows <= 2 * tables[-1].num_rows
           and tables[-2].num_rows + tables[-1].num_rows <= _MERGED_BATCH_ROWS
           and tables[-2].schema.equals(tables[-1].schema)):
        merged = pa.concat_tables(tables[-2:]).combine_chunks()
        del tables[-1], starts[-1]
        tables[-1] = merged


def _changes_between(cache: _PartitionCache, begin: int, end: int) -> pa.Table | None:
    """The cached changes at offsets [begin, end), touching only the batches that hold them."""
    if end <= begin or not cache.tables:
        return None
    first = max(bisect.bisect_right(cache.starts, begin) - 1, 0)
    last = bisect.bisect_left(cache.starts, end)
    tables = cache.tables[first:last]
    joined = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    return joined.slice(begin - cache.starts[first], end - begin)


class RelationReader:
    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._lock = threading.Lock()
        self._partitions: dict[tuple[int, int], _PartitionCache] = {}
        self._tables: dict[int, tuple[tuple[int, ...], pa.Table]] = {}
        self._counts: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}  # view: (offsets, rows per partition)
        # Hash indexes for point lookups, by (relation, key columns): the cached table they
        # index and key -> row positions in it.
        self._indexes: dict[tuple[int, tuple[str, ...]], KeyIndex] = {}
        # Indexes whose table changed by rows that moved (`_Patches`): patched by the next lookup
        # that needs them, so a write followed by no lookup pays no copy of the index.
        self._patches: dict[tuple[int, tuple[str, ...]], _Patches] = {}

    def forget(self, rel_id: int) -> None:
        with self._lock:
            for k in [k for k in self._partitions if k[0] == rel_id]:
                del self._partitions[k]
            self._tables.pop(rel_id, None)
            self._counts.pop(rel_id, None)
            for key in [key for key in self._indexes if key[0] == rel_id]:
                del self._indexes[key]
            for key in [key for key in self._patches if key[0] == rel_id]:
                del self._patches[key]

    def end_offsets(self, rel: RelationDef, snap: Snapshot) -> tuple[int, ...]:
        return tuple(snap.end_offset(rel.id, p) for p in range(rel.partitions))

    def row_count(self, rel: RelationDef, snap: Snapshot) -> int:
        if rel.kind == "stream":
            return sum(self.end_offsets(rel, snap))
        if rel.kind == "materialized_view":
            return self._view_row_count(rel, snap)
        return self.read_state(rel, snap).num_rows

    def _view_row_count(self, rel: RelationDef, snap: Snapshot) -> int:
        """The sum of the weights in the view's change log, per partition from the furthest of
        the storage's running sum (`Snapshot.weight_sum`, kept with the view's commits) and this
        process's last count, reading only the weights of the changes after it: counting (SHOW
        QUERIES, count(*)) neither builds nor keeps the view's rows in memory (it did, O(view)
        per view, for a client polling it), nor reads a log the storage has summed already (after
        a restart, or a backfill of millions of rows)."""
        offsets = self.end_offsets(rel, snap)
        with self._lock:
            cached = self._tables.get(rel.id)
            if cached is not None and cached[0] == offsets:
                return cached[1].num_rows
            done, totals = self._counts.get(rel.id, ((0,) * len(offsets), (0,) * len(offsets)))
        if len(done) != len(offsets) or any(d > o for d, o in zip(done, offsets, strict=True)):
            done, totals = (0,) * len(offsets), (0,) * len(offsets)
        ends, sums = list(done), list(totals)
        for p, end in enumerate(offsets):
            kept = snap.weight_sum(rel.id, p)
            if kept is not None and ends[p] < kept[0] <= end:
                ends[p], sums[p] = kept
            if ends[p] == end:
                continue
            for batch in read_log(snap, rel.id, p, ends[p], end):
                sums[p] += pc.sum(batch.column(C.WEIGHT)).as_py() or 0
        with self._lock:
            self._counts[rel.id] = (offsets, tuple(sums))
        return sum(sums)

    # ---- change logs ---------------------------------------------------------------

    def _log_partition(self, rel: RelationDef, snap: Snapshot, partition: int) -> tuple[_PartitionCache, int]:
        end = snap.end_offset(rel.id, partition)
        with self._lock:
            cache = self._partitions.setdefault((rel.id, partition), _PartitionCache())
            if cache.end < end:
                for first, count, payload in snap.read(rel.id, partition, cache.end, end):
                    table = C.decode_batch(payload)
                    skip = cache.end - first if first < cache.end else 0
                    if skip:
                        table = table.slice(skip)
                    if rel.schemaless:
                        cache.events.extend(json.loads(s) for s in table.column(C.JSON_VALUE).to_pylist())
                        cache.rowtimes.extend(table.column(C.ROWTIME).to_pylist())
                    else:
                        _append_batch(cache, cache.end, table)
                    cache.end = first + count
            return cache, end

    def _log_table(self, rel: RelationDef, snap: Snapshot) -> pa.Table:
        """Every change of the relation as of the snapshot, partition by partition."""
        parts = []
        schema = C.batch_schema(rel) if not rel.schemaless else None
        for p in range(rel.partitions):
            cache, end = self._log_partition(rel, snap, p)
            if rel.schemaless:
                parts.append(self._schemaless_table(rel, cache.events[:end], cache.rowtimes[:end]))
            elif cache.tables:
                parts.append(pa.concat_tables(cache.tables).slice(0, end))
        if not parts:
            if rel.schemaless:
                return self._schemaless_table(rel, [], [])
            assert schema is not None
            return schema.empty_table()
        return pa.concat_tables(parts) if len(parts) > 1 else parts[0]

    def _schemaless_table(self, rel: RelationDef, events: list[dict[str, Any]], rowtimes: list[Any]) -> pa.Table:
        arrays = []
        fields = []
        for c in rel.columns:
            vals = [_json_value(e.get(c.name), c.type) for e in events]
            arrays.append(pa.array(vals, c.type.arrow()))
            fields.append(pa.field(c.name, c.type.arrow()))
        arrays.append(pa.array(rowtimes, pa.timestamp("us", tz="UTC")))
        fields.append(pa.field(C.ROWTIME, pa.timestamp("us", tz="UTC")))
        arrays.append(pa.array([1] * len(events), pa.int64()))
        fields.append(pa.field(C.WEIGHT, pa.int64()))
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))

    # ---- what queries see ----------------------------------------------------------

    def read_state(self, rel: RelationDef, snap: Snapshot) -> pa.Table:
        """Current contents: a stream's every event (with rowtime); a table's current rows (with __rowkey)."""
        user_cols = [c.name for c in rel.columns]
        if rel.kind == "stream":
            return self._log_table(rel, snap).select([*user_cols, C.ROWTIME])
        offsets = self.end_offsets(rel, snap)
        with self._lock:
            cached = self._tables.get(rel.id)
        if cached is not None and cached[0] == offsets:
            return cached[1]
        if rel.kind == "materialized_view" and (log_from := log_only_from(snap, rel.id)) is not None:
            grown = self._grown_view(rel, snap, cached, offsets) if cached is not None else None
            if grown is not None:
                return grown
            table = self._log_rows(rel, snap, log_from)
            with self._lock:
                self._tables[rel.id] = (offsets, table)
            return table
        if cached is not None and rel.kind in ("table", "materialized_view") and not rel.schemaless:
            try:
                changed = self._changed_rows(rel, snap, cached, offsets)
            except (pa.ArrowException, KeyError):  # a log that does not fit the cached rows: rescan
                log.warning("relation %s: its cached rows could not take its changes; rescanning", rel.name,
                            exc_info=True)
                changed = None
            if changed is not None:
                return changed
        rows, keys = [], []
        if rel.kind == "materialized_view":
            for key, value in snap.scan(state_store(rel.id)):
                row, count = C.decode_view_row(value)
                rows.extend([row] * count)
                keys.extend([key] * count)
        else:
            for key, value in snap.scan(state_store(rel.id)):
                row, _rowtime = C.decode_state_row(value)
                rows.append(row)
                keys.append(key)
        table = keyed_rows_table(rel, rows, keys)
        with self._lock:
            self._tables[rel.id] = (offsets, table)
        return table

    def key_index(self, rel: RelationDef, snap: Snapshot, columns: tuple[str, ...]) -> KeyIndex:
        """The relation's current rows indexed by `columns`, built if need be."""
        table = self.read_state(rel, snap)
        with self._lock:
            index = self._indexes.get((rel.id, columns))
            patches = self._patches.get((rel.id, columns))
            steps = list(patches.steps) if patches is not None else []
        if index is not None and index.table is table:
            return index
        if patches is not None and steps[-1][0] is table:
            index = patches.apply(steps)
            with self._lock:
                if self._patches.get((rel.id, columns)) is patches and patches.table is table:
                    del self._patches[(rel.id, columns)]
                    self._indexes[(rel.id, columns)] = index
            return index
        index = KeyIndex(table, columns)
        with self._lock:
            self._indexes[(rel.id, columns)] = index
        return index

    def current_key_index(self, rel: RelationDef, offsets: tuple[int | None, ...],
                          columns: tuple[str, ...]) -> KeyIndex | None:
        """The index by `columns` if it is built over the rows at `offsets` (the latest committed
        ones), else None: what the event loop may answer from without touching disk."""
        if None in offsets:
            return None
        with self._lock:
            cached = self._tables.get(rel.id)
            index = self._indexes.get((rel.id, columns))
        if cached is None or cached[0] != offsets or index is None or index.table is not cached[1]:
            return None
        return index

    def _log_rows(self, rel: RelationDef, snap: Snapshot, log_from: int) -> pa.Table:
        """An append-only view's rows: its log's changes from `log_from` on, each as many times
        as its weight."""
        cache, end = self._log_partition(rel, snap, 0)
        names = [*(c.name for c in rel.columns), C.ROWKEY]
        schema = pa.schema([*(pa.field(c.name, c.type.arrow()) for c in rel.columns), pa.field(C.ROWKEY, pa.binary())])
        changes = _changes_between(cache, log_from, end)
        if changes is None:
            return schema.empty_table()
        return _repeated(changes, names).cast(schema)

    def _grown_view(self, rel: RelationDef, snap: Snapshot, cached: tuple[tuple[int, ...], pa.Table],
                    offsets: tuple[int, ...]) -> pa.Table | None:
        """A view kept as its log alone (a filter over a stream, say) whose changes since the
        cached table only add rows is the cached table plus those rows: no re-read of its log.
        (Its rows have no keys; other views are brought up to date by `_changed_rows`.)"""
        done, table = cached
        if len(done) != len(offsets) or any(d > o for d, o in zip(done, offsets, strict=True)):
            return None
        parts = []
        for p in range(rel.partitions):
            cache, end = self._log_partition(rel, snap, p)
            changes = _changes_between(cache, done[p] if p < len(done) else 0, end)
            if changes is not None:
                parts.append(changes)
        if parts:
            log = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
            if pc.any(pc.less_equal(log.column(C.WEIGHT), 0)).as_py():
                return None  # rows go away: rebuild from the state
            added = _repeated(log, [*(c.name for c in rel.columns), C.ROWKEY]).cast(table.schema)
            return self._store(rel, offsets, table, pa.concat_tables([table, added]), added)
        return self._store(rel, offsets, table, table, None)

    def _store(self, rel: RelationDef, offsets: tuple[int, ...], old: pa.Table, new: pa.Table,
               added: pa.Table | None, refilled: tuple[Refill, pa.Table] | None = None) -> pa.Table:
        """Caches `new`, the relation's rows at `offsets`, made from the cached `old`. `added`:
        `new` is `old` then these rows, so the indexes of `old` stay valid (extended; readers
        still holding `old` skip positions past its end). `refilled`: `new` is `old` with some
        rows replaced as the Refill says, with these rows; the indexes of `old` wait as
        `_Patches`, applied to a copy by the next lookup that needs them (readers still holding
        an index of `old` keep it whole). Neither: rows moved, the indexes go (rebuilt by the
        next lookup)."""
        if new is not old and new.num_columns and new.column(0).num_chunks > 64:
            new = new.combine_chunks()
        with self._lock:
            waiting = [k for k in self._patches if k[0] == rel.id and new is not old]
            for key in [k for k in self._indexes if k[0] == rel.id and new is not old]:
                index = self._indexes.pop(key)
                if index.table is not old:
                    continue
                if added is not None:
                    index.extend(new, added)
                    self._indexes[key] = index
                elif refilled is not None:
                    self._patches[key] = _Patches(index, [(new, *refilled)])
            for key in waiting:
                patches = self._patches[key]
                if patches.table is not old or not patches.add(new, added, refilled):
                    del self._patches[key]
            self._tables[rel.id] = (offsets, new)
        return new

    def _changed_rows(self, rel: RelationDef, snap: Snapshot, cached: tuple[tuple[int, ...], pa.Table],
                      offsets: tuple[int, ...]) -> pa.Table | None:
        """A table's or view's rows after its changes since the cached ones, from those changes
        alone. Each change carries its row key, and a key's changes keep their order within
        its partition: a key's rows after them are its cached ones plus the sum of its weights
        (a table's key holds one row, a view's key is its row, held as many times as its
        count), with the row of its last insertion (a table's update retracts the old row and
        inserts the new one under the same key). Rescanning and decoding the whole state store
        at every change cost every read O(relation) (~1.4 s at 500k rows). The old rows keep
        their positions (changes that only insert are appended; others fill the positions of
        the rows they remove, `Refill`), so the point-lookup indexes are extended or patched,
        not rebuilt. None if the cached rows and the log disagree (they are rebuilt then)."""
        done, table = cached
        if len(done) != len(offsets) or any(d > o for d, o in zip(done, offsets, strict=True)):
            return None
        if rel.kind == "materialized_view" and table.num_rows and pc.any(pc.equal(table.column(C.ROWKEY), b"")).as_py():
            return None  # rows read from the view's log when it was kept as its log alone: no keys
        parts = [batch for p, (start, end) in enumerate(zip(done, offsets, strict=True))
                 for batch in read_log(snap, rel.id, p, start, end)]
        changes = pa.concat_tables(parts) if len(parts) > 1 else parts[0] if parts else None
        if changes is None or changes.num_rows == 0:
            return self._store(rel, offsets, table, table, None)
        names = [*(c.name for c in rel.columns), C.ROWKEY]
        applied = apply_changes(table, changes.combine_chunks(), names)
        if applied is None:
            return None
        new, added, refill = applied
        if refill is None:  # only insertions: the old rows keep their positions
            return self._store(rel, offsets, table, new, added)
        return self._store(rel, offsets, table, new, None, (refill, added))

    def read_delta(self, rel: RelationDef, snap: Snapshot, start: tuple[int, ...]) -> pa.Table:
        """Changes after `start` (per-partition offsets) up to the snapshot: columns, rowtime, __weight."""
        parts = []
        for p in range(rel.partitions):
            cache, end = self._log_partition(rel, snap, p)
            begin = start[p] if p < len(start) else 0
            if rel.schemaless:
                parts.append(self._schemaless_table(rel, cache.events[begin:end], cache.rowtimes[begin:end]))
            elif (changes := _changes_between(cache, begin, end)) is not None:
                parts.append(changes)
        names = [*(c.name for c in rel.columns), C.ROWTIME, C.WEIGHT]
        if not parts:
            return C.batch_schema(rel).empty_table().select(names) if not rel.schemaless else \
                self._schemaless_table(rel, [], []).select(names)
        table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        return table.select(names)

    def read_changes(self, rel: RelationDef, snap: Snapshot) -> pa.Table:
        """The change log: op ('insert' | 'delete'), rowtime, then the columns."""
        log = self._log_table(rel, snap)
        weights = log.column(C.WEIGHT).to_pylist()
        ops = pa.array(["insert" if w > 0 else "delete" for w in weights], pa.string())
        cols = [log.column(c.name) for c in rel.columns]
        names = ["op", C.ROWTIME, *(c.name for c in rel.columns)]
        return pa.Table.from_arrays([ops, log.column(C.ROWTIME), *cols], names=names)


def apply_changes(table: pa.Table, changes: pa.Table, names: list[str]
                  ) -> tuple[pa.Table, pa.Table, Refill | None] | None:
    """A table's or view's cached rows (`table`: `names`, the row key last) after `changes`
    (one chunk, in log order, with their weights): (the new rows, the rows added, how they
    were placed: None when appended). None if a key's count would fall below zero.

    Each change's key becomes a number by one hash pass over the changes' keys (with the cached
    rows' keys after them when those are fewer): numbered in order of first appearance, so the
    changed keys are 0..m-1 and a cached row is stale when its number is below m. The sums and
    last changes per key are numpy's. (A hash aggregation, then a lookup of the cached keys in
    the changed ones, hashed the changes' keys twice: 1M changes of a session view took 2.6 s.)"""
    n = changes.num_rows
    if n == 0:
        return table, table.schema.empty_table(), None
    change_keys = changes.column(C.ROWKEY).chunk(0)
    cached_keys = table.column(C.ROWKEY)
    together = table.num_rows <= n
    encoded = pc.dictionary_encode(pa.concat_arrays([change_keys, *cached_keys.chunks]) if together
                                   else change_keys)
    numbers = encoded.indices.to_numpy()
    which = numbers[:n].astype(np.int64)
    m = int(which.max()) + 1
    weights = changes.column(C.WEIGHT).chunk(0).to_numpy()
    if m == n:  # each change a key of its own (a load of new rows)
        sums = weights.astype(np.int64)
        pick = np.arange(n, dtype=np.int64)
    else:
        sums = np.zeros(m, np.int64)
        np.add.at(sums, which, weights)
        # A key's row: its last insertion's (an update's new row), else its last change's.
        pick = _last_per_key(which, np.arange(n, dtype=np.int64), m)
        positive = np.flatnonzero(weights > 0)
        inserted = _last_per_key(which[positive], positive, m)
        pick = np.where(inserted >= 0, inserted, pick)
    rows = changes.select(names)
    if m != n:
        rows = rows.take(pa.array(pick))
    if bool((sums > 0).all()):
        added = _take_repeated(rows, sums).cast(table.schema)
        return pa.concat_tables([table, added]), added, None
    if together:
        cached = numbers[n:]
        stale_mask = cached < m
        stale = np.flatnonzero(stale_mask)
        counts = sums + np.bincount(cached[stale_mask], minlength=m)
    else:
        found = pc.index_in(cached_keys, value_set=encoded.dictionary)
        stale = pc.indices_nonzero(pc.is_valid(found)).to_numpy()
        counts = sums.copy()
        np.add.at(counts, pc.drop_null(found).to_numpy().astype(np.int64), 1)
    if bool((counts < 0).any()):
        return None
    added = _take_repeated(rows, counts).cast(table.schema)
    refill = Refill.of(table.num_rows, stale, added.num_rows)
    return refill.apply(table, added), added, refill


def _last_per_key(which: np.ndarray, positions: np.ndarray, m: int) -> np.ndarray:
    """For each key 0..m-1, the last of `positions` whose entry of `which` is it (-1: none)."""
    out = np.full(m, -1, np.int64)
    if len(which):
        keys, first_from_end = np.unique(which[::-1], return_index=True)
        out[keys] = positions[::-1][first_from_end]
    return out


def _take_repeated(rows: pa.Table, counts: np.ndarray) -> pa.Table:
    """Each row as many times as its count (0: left out)."""
    if bool((counts == 1).all()):
        return rows
    if bool((counts <= 1).all()):
        return rows.filter(pa.array(counts == 1))
    return rows.take(pa.array(np.repeat(np.arange(len(counts), dtype=np.int64), counts)))


def _repeated(changes: pa.Table, names: list[str]) -> pa.Table:
    """Changes that only add rows (weights > 0) as rows: each as many times as its weight."""
    weights = changes.column(C.WEIGHT).to_numpy()
    if bool((weights <= 0).any()):
        raise InternalError("an append-only view's log holds a retraction")
    return _take_repeated(changes.select(names), weights)


class _Patches:
    """An index and the changes of its table since: each the new table and either the rows
    appended (`added`) or a Refill and its rows. At most MAX_REFILLS refills wait (each is a copy
    of the index when applied); past that, rebuilding it is as cheap."""

    MAX_REFILLS = 4

    def __init__(self, base: KeyIndex, steps: list[tuple[pa.Table, Refill, pa.Table]]) -> None:
        self.base = base
        self.steps: list[tuple[pa.Table, Refill | None, pa.Table]] = list(steps)

    @property
    def table(self) -> pa.Table:
        return self.steps[-1][0]

    def add(self, table: pa.Table, added: pa.Table | None, refilled: tuple[Refill, pa.Table] | None) -> bool:
        if added is not None:
            self.steps.append((table, None, added))
            return True
        if refilled is None or sum(1 for _, r, _ in self.steps if r is not None) >= self.MAX_REFILLS:
            return False
        self.steps.append((table, *refilled))
        return True

    def apply(self, steps: list[tuple[pa.Table, Refill | None, pa.Table]]) -> KeyIndex:
        """The index of the table of the last of `steps` (the first ones of this). The first
        step is a refill (`_store`), so the base, which readers may hold, is copied before
        anything extends it."""
        index = self.base
        for table, refill, rows in steps:
            if refill is None:
                assert index is not self.base
                index.extend(table, rows)
            else:
                index = index.refilled(table, refill, rows)
        return index


class Refill:
    """Where the rows of a change that removes rows go, so that most rows keep their positions
    (and the point-lookup indexes can be patched, not rebuilt): the `holes` (positions of rows
    gone, ascending) are filled first by the `added` rows, then, if fewer rows were added than
    removed, by the last rows of the table (`movers`); added rows beyond the holes are appended.
    `targets[i]` takes added row i for i < added, and `movers[i - added]` after that."""

    __slots__ = ("rows", "holes", "added", "targets", "movers")

    def __init__(self, rows: int, holes: list[int], added: int, targets: list[int], movers: list[int]) -> None:
        self.rows, self.holes, self.added, self.targets, self.movers = rows, holes, added, targets, movers

    @staticmethod
    def of(rows: int, holes: np.ndarray | list[int], added: int) -> Refill:
        """`holes`: ascending positions."""
        holes = np.asarray(holes, dtype=np.int64)
        size = rows - len(holes) + added
        targets = np.concatenate([holes[holes < size], np.arange(rows, size, dtype=np.int64)])
        kept = np.ones(max(rows - size, 0), bool)
        kept[holes[holes >= size] - size] = False
        movers = np.arange(size, rows, dtype=np.int64)[kept] if rows > size else np.zeros(0, np.int64)
        assert len(targets) == added + len(movers)
        return Refill(rows, holes.tolist(), added, targets.tolist(), movers.tolist())

    @property
    def size(self) -> int:
        return self.rows - len(self.holes) + self.added

    def sources(self) -> list[int]:
        """For each target, its row in the old rows followed by the added ones."""
        return list(range(self.rows, self.rows + self.added)) + self.movers

    def apply(self, table: pa.Table, added: pa.Table) -> pa.Table:
        holes = len(self.holes)
        if holes <= self.added:  # every hole takes an added row, the rest are appended
            if holes == 0:
                return pa.concat_tables([table, added])
            mask = np.zeros(self.rows, bool)
            mask[self.holes] = True
            mask_array = pa.array(mask)
            try:  # a copy of each column with its holes replaced: cheaper than a gather of every row
                filled = pa.Table.from_arrays(
                    [pc.replace_with_mask(table.column(i).combine_chunks(), mask_array,
                                          added.column(i).slice(0, holes).combine_chunks())
                     for i in range(table.num_columns)], schema=table.schema)
            except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
                pass  # a type replace_with_mask does not take: the gather below
            else:
                return pa.concat_tables([filled, added.slice(holes)])
        take = np.arange(self.size, dtype=np.int64)
        take[np.asarray(self.targets, dtype=np.int64)] = np.asarray(self.sources(), dtype=np.int64)
        both = pa.concat_tables([table, added]) if added.num_rows else table
        return both.take(pa.array(take))


class KeyIndex:
    """A cached table's rows by the values of some columns (a scalar key for one column, a
    tuple for several), and its columns as Python values, converted once per column read."""

    __slots__ = ("table", "columns", "positions", "_values", "_owned")

    def __init__(self, table: pa.Table, columns: tuple[str, ...]) -> None:
        self.table = table
        self.columns = columns
        self.positions: dict[Any, list[int]] = {}
        self._values: dict[str, list[Any]] = {}
        # A refilled copy shares the lists of the keys it did not touch with the index it was
        # copied from: the keys whose lists are its own (None: all), copied before they grow.
        self._owned: set[Any] | None = None
        self._add(table, 0)

    def values(self, column: str) -> list[Any]:
        values = self._values.get(column)
        if values is None:
            values = self._values[column] = self.table.column(column).to_pylist()
        return values

    def extend(self, grown: pa.Table, added: pa.Table) -> None:
        """`grown` is the indexed table with `added` after it: positions so far stay valid.
        Readers still holding the old table skip positions past its end."""
        self._add(added, self.table.num_rows)
        for name, values in self._values.items():
            values.extend(added.column(name).to_pylist())
        self.table = grown

    def refilled(self, table: pa.Table, refill: Refill, added: pa.Table) -> KeyIndex:
        """This index for `table`, this index's table with rows replaced as `refill` says: a
        copy, so readers holding this one keep a whole index of their table. Only the keys of
        the rows gone, moved and added change."""
        index = KeyIndex.__new__(KeyIndex)
        index.table, index.columns = table, self.columns
        positions = index.positions = dict(self.positions)
        owned = index._owned = set()
        old = self.table
        gone: dict[Any, set[int]] = {}
        for key, p in zip(self._keys(old.take(pa.array(refill.holes + refill.movers, pa.int64()))),
                          refill.holes + refill.movers, strict=True):
            gone.setdefault(key, set()).add(p)
        came: dict[Any, list[int]] = {}
        mover_rows = old.take(pa.array(refill.movers, pa.int64())) if refill.movers else None
        for key, t in zip(self._keys(added), refill.targets, strict=False):
            came.setdefault(key, []).append(t)
        if mover_rows is not None:
            for key, t in zip(self._keys(mover_rows), refill.targets[refill.added:], strict=True):
                came.setdefault(key, []).append(t)
        for key in gone.keys() | came.keys():
            dropped = gone.get(key, set())
            kept = [p for p in positions.get(key, ()) if p not in dropped] + came.get(key, [])
            if kept:
                positions[key] = kept
                owned.add(key)
            else:
                positions.pop(key, None)
        index._values = {}
        sources = refill.sources()
        for name, values in self._values.items():
            moved = list(values)
            extra = added.column(name).to_pylist()
            if refill.size > len(moved):
                moved.extend([None] * (refill.size - len(moved)))
            for t, src in zip(refill.targets, sources, strict=True):
                moved[t] = extra[src - refill.rows] if src >= refill.rows else values[src]
            del moved[refill.size:]
            index._values[name] = moved
        return index

    def _keys(self, table: pa.Table) -> Iterator[Any]:
        if len(self.columns) == 1:
            return iter(table.column(self.columns[0]).to_pylist())
        return zip(*(table.column(c).to_pylist() for c in self.columns), strict=True)

    def _add(self, table: pa.Table, first: int) -> None:
        keys = self._keys(table)
        positions = self.positions
        owned = self._owned
        for i, key in enumerate(keys, first):
            found = positions.get(key)
            if found is None:
                positions[key] = [i]
                if owned is not None:
                    owned.add(key)
            elif owned is None or key in owned:
                found.append(i)
            else:
                positions[key] = [*found, i]
                owned.add(key)


def _json_value(v: Any, t: T.SqlType) -> Any:
    if v is None:
        return None
    if t in (T.JSONB, T.JSON) or (T.is_textual(t) and not isinstance(v, str)):
        return json.dumps(v)
    if t is T.DOUBLE and isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if t is T.BIGINT and isinstance(v, bool):
        return int(v)
    return v
