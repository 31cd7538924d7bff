"""RocksDB implementation of the storage interface (via rocksdict, raw bytes mode).

Key layout (one keyspace, the first byte says what a key is; integers are
big-endian and fixed-width so byte order is numeric order):

    b"C" | name                                                        -> internal metadata
    b"D" | store name (UTF-8, no NUL) | 0x00 | key                      -> value
    b"L" | relation u64 | partition u32 | first_offset u64 | count u64  -> payload

(Formats 1 and 2 had "M" and "S" for the first two; opening one moves them.)

Log keys of one partition sort by first offset, so reading from an offset is one
seek, and the next offset of a partition is the last key of the partition
(``first + count``), found with one ``seek_for_prev``. The NUL after a store name
keeps "state:1" and "state:17" apart. ``C"sequence"`` holds the last commit
sequence number and is written in the same WriteBatch as the commit.

Writes go through a single writer thread (group commit): callers enqueue their
Commit and wait; the writer drains everything queued, assigns offsets and
sequence numbers in queue order, writes ONE WriteBatch, syncs the WAL and then
acknowledges every caller. A failed write fails every caller of the group and
assigns nothing.

The write and its sync are two calls: rocksdict holds the GIL through ``write``
(a synced write froze every other thread of the server, the event loop included,
for the fsync's duration), and releases it in ``flush_wal(True)``. RocksDB
documents the difference: a write followed by a WAL sync is as durable as a
synced write, but its rows are visible to reads before the sync ends. Nothing is
acknowledged and no log offset is published before it ends (readers of the log
stop at published offsets); a read of a table's state may see a row up to one
fsync early, which only an OS crash inside that window would take back (the
writer was never told it was committed). See docs/storage.md.

Large batches are not written through the WAL and the memtable: each goes to an SST file of
its own, ingested before the group's WriteBatch (which holds its end key). The WAL, the flush and
the compactions after it rewrote every byte of a view's backfill three to four times; an ingested
file lands on the lowest level it does not overlap, where the partition's batches are, and is
not rewritten. Until the WriteBatch is durable its batch lies past its partition's end key,
where no reader looks (every read stops at published or stored ends); a crash in between leaves
it there, and the next open deletes every batch past its partition's end key (format 2: end
keys are authoritative). See docs/storage.md, "Large batches as ingested files".

Snapshots are RocksDB iterators: an iterator reads from an implicit RocksDB
snapshot taken when it is created, so every read of a Snapshot (which reuses
that one iterator) sees the same point in time. (rocksdict 0.3.29's
``Snapshot.iter()`` does not apply the snapshot to the iterator it returns, so
``db.snapshot()`` cannot be used for range reads.)
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import queue
import struct
import threading
import weakref
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from rocksdict import (
    BlockBasedOptions,
    Cache,
    DBRecoveryMode,
    IngestExternalFileOptions,
    Options,
    Rdict,
    RdictIter,
    ReadOptions,
    WriteBatch,
    WriteOptions,
)

from streamdb.errors import (
    ConfigurationError,
    DiskFull,
    InternalError,
    ObjectNotInPrerequisiteState,
    StreamDBError,
)
from streamdb.storage.base import Append, Commit, CommitResult, Snapshot, Storage, partials_store, state_store
from streamdb.storage.sst_files import SstFileBuilder, set_table_options

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# Key layout

LOG = b"L"
# Every other key sorts before the log's (format 3): a commit's keys then never lie between the
# newest relation's batches and the end of the keyspace, so no file spans past its last batch and
# its ingested batches land on the bottom level, not a level above it that a compaction must then
# rewrite (docs/storage.md, "Large batches as ingested files"). Formats 1 and 2 had them after.
STORE = b"D"
META = b"C"
_OLD_STORE, _OLD_META = b"S", b"M"
_OLD_META_FORMAT = _OLD_META + b"format"
META_SEQUENCE = META + b"sequence"
META_FORMAT = META + b"format"
# A partition's end (next offset), u64, written in the same batch as every append to it: Spark's
# tasks read it instead of seeking onto the partition's last batch (LogStore.java), a seek that
# reads that batch's whole block (tens of MB after a large COPY) every micro-batch trigger.
META_END = META + b"end\x00"
# A partition's running sum of weights, (end, total) as u64 and i64, written with the appends that
# carry `weights` (a view's changes): SHOW QUERIES and count(*) count a view's rows from it and
# the changes after `end`, instead of reading its whole log (2.3 s for a 9.2M-row view).
META_WSUM = META + b"wsum\x00"
# 1: end keys may lag the log (a server before them). 2: end keys are authoritative: a batch past
# its partition's end key was never committed (an ingested file whose WriteBatch did not land).
# 3: the stores' and metadata's keys sort before the log's (STORE, META).
FORMAT_VERSION = 3
_MOVE_BYTES = 32 << 20  # per WriteBatch while moving the keys of formats 1 and 2
# Appends at least this large, to a partition that has an end key, are ingested as SST files.
INGEST_BYTES = 4 << 20

_U64 = struct.Struct(">Q")
_REL_PART = struct.Struct(">QI")
_BATCH = struct.Struct(">QIQQ")  # relation, partition, first offset, count (after the b"L")
_WSUM = struct.Struct(">Qq")  # end offset, sum of the weights before it
_MAX_U32 = 0xFFFF_FFFF
_MAX_U63 = (1 << 63) - 1
_LAST_IN_PARTITION = b"\xff" * 16  # larger than any (first, count) suffix


def log_prefix(relation_id: int) -> bytes:
    return LOG + _U64.pack(relation_id)


def partition_prefix(relation_id: int, partition: int) -> bytes:
    return LOG + _REL_PART.pack(relation_id, partition)


def partition_upper(relation_id: int, partition: int) -> bytes:
    """First key after every batch key of the partition."""
    if partition == _MAX_U32:
        return log_prefix(relation_id + 1)
    return partition_prefix(relation_id, partition + 1)


def batch_key(relation_id: int, partition: int, first: int, count: int) -> bytes:
    return LOG + _BATCH.pack(relation_id, partition, first, count)


def end_key(relation_id: int, partition: int) -> bytes:
    return META_END + _REL_PART.pack(relation_id, partition)


def weight_sum_key(relation_id: int, partition: int) -> bytes:
    return META_WSUM + _REL_PART.pack(relation_id, partition)


def parse_batch_key(key: bytes) -> tuple[int, int, int, int]:
    """(relation, partition, first offset, count) of a log key."""
    rel, part, first, count = _BATCH.unpack_from(key, 1)
    return rel, part, first, count


def store_prefix(store: str) -> bytes:
    return STORE + store.encode() + b"\x00"


def store_key(store: str, key: bytes) -> bytes:
    return store_prefix(store) + key


def prefix_upper(prefix: bytes) -> bytes:
    """Smallest key greater than every key starting with ``prefix`` (prefix must not be all 0xff)."""
    stripped = prefix.rstrip(b"\xff")
    return stripped[:-1] + bytes([stripped[-1] + 1])


# ---------------------------------------------------------------------------------------------
# Errors


def storage_error(exc: BaseException, action: str) -> StreamDBError:
    """Map an exception from RocksDB (or the OS) to the client-facing error."""
    message = str(exc) or type(exc).__name__
    enospc = isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
    if enospc or "No space left" in message or "Disk quota exceeded" in message:
        err: StreamDBError = DiskFull(f"could not {action}: disk full", detail=message)
    else:
        err = InternalError(f"could not {action}: {message}")
    err.__cause__ = exc
    return err


@contextmanager
def _reading(action: str) -> Iterator[None]:
    """Map errors raised by RocksDB reads to client-facing errors."""
    try:
        yield
    except StreamDBError:
        raise
    except Exception as exc:
        raise storage_error(exc, action) from exc


def _check_int(value: Any, what: str, low: int, high: int) -> None:
    if type(value) is not int or not low <= value <= high:
        raise InternalError(f"storage: {what} must be an integer in [{low}, {high}], got {value!r}")


def _check_store(store: Any) -> None:
    if not isinstance(store, str) or not store or "\x00" in store:
        raise InternalError(f"storage: invalid store name {store!r}")


def _check_bytes(value: Any, what: str) -> None:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InternalError(f"storage: {what} must be bytes, got {type(value).__name__}")


def validate_commit(commit: Commit) -> None:
    """Reject malformed commits in the caller's thread, so they never fail a whole group."""
    if not isinstance(commit, Commit):
        raise InternalError(f"storage: expected a Commit, got {type(commit).__name__}")
    for a in commit.appends:
        if not isinstance(a, Append):
            raise InternalError(f"storage: expected an Append, got {type(a).__name__}")
        _check_int(a.relation_id, "relation id", 0, _MAX_U63 - 1)
        _check_int(a.partition, "partition", 0, _MAX_U32)
        _check_int(a.count, "batch record count", 1, _MAX_U63)
        _check_bytes(a.payload, "payload")
        if a.weights is not None:
            _check_int(a.weights, "batch weight sum", -(1 << 63), _MAX_U63)
    for store, key, value in commit.puts:
        _check_store(store)
        _check_bytes(key, "key")
        _check_bytes(value, "value")
    for store, key in commit.deletes:
        _check_store(store)
        _check_bytes(key, "key")
    for rel in commit.drop_relations:
        _check_int(rel, "relation id", 0, _MAX_U63 - 1)


def _b(value: bytes | bytearray | memoryview) -> bytes:
    return value if type(value) is bytes else bytes(value)


# ---------------------------------------------------------------------------------------------
# Fault injection (tests only)

# Test-only: while the file this names contains "enospc", every durable write fails as on a full
# disk (tests/test_e2e_faults.py). Unset in production: the check is one falsy test per write group.
_TEST_FAULT_FILE = os.environ.get("STREAMDB_TEST_FAULT_FILE", "")


def _inject_test_fault() -> None:
    try:
        with open(_TEST_FAULT_FILE, encoding="utf-8") as f:
            fault = f.read()
    except OSError:
        return
    if "enospc" in fault:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC) + " (injected by STREAMDB_TEST_FAULT_FILE)")


# ---------------------------------------------------------------------------------------------
# Storage


@dataclass
class _Pending:
    commit: Commit
    future: Future[CommitResult]
    size: int


_STOP = object()


def _commit_size(commit: Commit) -> int:
    return (
        sum(len(a.payload) for a in commit.appends)
        + sum(len(k) + len(v) for _, k, v in commit.puts)
        + 64 * (len(commit.appends) + len(commit.puts) + len(commit.deletes))
    )


class RocksDBStorage(Storage):
    """Storage in one RocksDB database directory. One process may open it read-write."""

    def __init__(
        self,
        path: str,
        *,
        sync: bool = True,
        write_buffer_size: int = 64 << 20,
        block_cache_size: int = 128 << 20,
        compression: str = "zstd",
        max_group_commits: int = 1024,
        max_group_bytes: int = 64 << 20,
        ingest_bytes: int = INGEST_BYTES,
    ) -> None:
        """Open (creating if missing) the database at ``path``.

        ``sync=False`` skips the fsync (tests and benchmarks only: commits are then
        not durable across an OS crash). ``compression`` is the bottom level's (the levels
        above it are not compressed). Groups hold at most ``max_group_commits``
        commits and stop growing past ``max_group_bytes``. An append of at least
        ``ingest_bytes`` (to a partition already written) goes to an SST file of its own.
        """
        self.path = path
        self._ingest_bytes = ingest_bytes
        self._ingest_dir = os.path.join(path, "ingest")
        self._ingested = 0  # names the files
        self.batches_ingested = 0
        self._sync = sync
        self._max_group_commits = max(1, max_group_commits)
        self._max_group_bytes = max(1, max_group_bytes)
        self._options = self._make_options(write_buffer_size, block_cache_size, compression)
        self.sst_files = SstFileBuilder(compression)
        try:
            os.makedirs(path, exist_ok=True)
            self._db = Rdict(path, self._options)
        except Exception as exc:
            message = str(exc)
            if "/LOCK" in message:
                raise ConfigurationError(
                    f"storage directory {path} is in use by another process", detail=message
                ) from exc
            raise storage_error(exc, f"open storage at {path}") from exc
        self._write_options = WriteOptions()
        self._write_options.sync = False  # synced by flush_wal, outside the GIL (module docstring)

        # Writer-owned state; other threads only read the ints (atomic in CPython).
        # The partitions' ends, as of the last durable write (_next_offsets) and as of the last
        # write before its sync (_written_ends). Each group replaces them with one new mapping
        # (_ends_after), never changing one in place: a snapshot answers end_offset from the one
        # it took.
        self._next_offsets: dict[int, dict[int, int]] = {}
        self._written_ends: dict[int, dict[int, int]] = {}
        self._pending_ends: dict[int, dict[int, int]] | None = None  # the group being written's
        self._pending_ingests: list[tuple[bytes, bytes]] = []  # its large batches: (key, payload)
        # (end, total) of the partitions whose running weight sum is kept (META_WSUM), as written.
        self._weight_sums: dict[tuple[int, int], tuple[int, int]] = {}
        self._snapshot_lock = threading.Lock()
        self._sequence = 0
        self.groups_written = 0
        self.commits_written = 0
        # Set once RocksDB itself failed a write: its handle then stays in an error state (with
        # ENOSPC on the WAL it keeps failing after space is freed) and a later write may still
        # reach the WAL although it reports failure, so no further write is attempted.
        self._write_failure: StreamDBError | None = None
        try:
            version = self._check_format()
            self._sequence = self._recover_sequence()
            self._next_offsets = self._recover_next_offsets()
            if version >= 2:
                self._drop_uncommitted_batches()
            self._written_ends = self._next_offsets
            self._repair_end_keys()
            if version < FORMAT_VERSION:
                wb = WriteBatch(raw_mode=True)
                wb.put(META_FORMAT, _U64.pack(FORMAT_VERSION))
                self._write_batch(wb)
            os.makedirs(self._ingest_dir, exist_ok=True)
            for leftover in os.listdir(self._ingest_dir):  # files of an ingestion a crash cut short
                os.unlink(os.path.join(self._ingest_dir, leftover))
            self._weight_sums = self._recover_weight_sums()
        except BaseException as exc:
            self._db.close()
            if isinstance(exc, StreamDBError) or not isinstance(exc, Exception):
                raise
            raise storage_error(exc, f"open storage at {path}") from exc

        self._lock = threading.Lock()  # guards _closed, enqueueing and _snapshots
        self._close_lock = threading.Lock()
        self._closed = False
        self._snapshots: weakref.WeakSet[RocksDBSnapshot] = weakref.WeakSet()
        self._queue: queue.SimpleQueue[_Pending | object] = queue.SimpleQueue()
        self._writer = threading.Thread(target=self._run_writer, name=f"storage-writer:{path}", daemon=True)
        self._writer.start()

    # -- options and recovery --------------------------------------------------------------

    @staticmethod
    def _make_options(write_buffer_size: int, block_cache_size: int, compression: str) -> Options:
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.increase_parallelism(max(2, os.cpu_count() or 2))
        opts.set_max_background_jobs(4)
        # Append-heavy: big memtables, few large L0 files, level compaction.
        opts.set_write_buffer_size(write_buffer_size)
        opts.set_max_write_buffer_number(4)
        opts.set_target_file_size_base(64 << 20)
        opts.set_max_bytes_for_level_base(256 << 20)
        opts.set_level_compaction_dynamic_level_bytes(True)
        opts.set_bytes_per_sync(1 << 20)
        opts.set_wal_recovery_mode(DBRecoveryMode.point_in_time())
        opts.set_keep_log_file_num(5)
        table = BlockBasedOptions()
        table.set_block_cache(Cache(block_cache_size))
        set_table_options(opts, compression, table)  # compression and blocks, as ingested files'
        return opts

    def _check_format(self) -> int:
        """The stored format version (a new database gets the current one); the keys of a
        database of format 1 or 2 are moved before the log first (the version is kept: what
        it says of the end keys still holds until the open is done)."""
        raw = self._db.get(META_FORMAT)
        if raw is None:
            old = self._db.get(_OLD_META_FORMAT)
            if old is None:
                wb = WriteBatch(raw_mode=True)
                wb.put(META_FORMAT, _U64.pack(FORMAT_VERSION))
                self._write_batch(wb)
                return FORMAT_VERSION
            version = self._known_version(old)
            self._move_keys_before_the_log(version)
            return version
        return self._known_version(raw)

    def _known_version(self, raw: bytes) -> int:
        version = int(_U64.unpack(raw)[0])
        if version not in (1, 2, FORMAT_VERSION):
            raise ConfigurationError(f"storage at {self.path} has format version {version}; "
                                     f"this server reads 1 to {FORMAT_VERSION}")
        return version

    def _scan_raw(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) of every key starting with `prefix`, in order, read at open (no snapshot
        object, no store prefix stripped). Writes while it runs are not seen by it."""
        it = self._db.iter()
        try:
            it.seek(prefix)
            while it.valid() and it.key().startswith(prefix):
                yield it.key(), it.value()
                it.next()
            it.status()
        finally:
            del it

    def _move_keys_before_the_log(self, version: int) -> None:
        """Formats 1 and 2 kept the stores' and metadata's keys after the log's: copy them under
        the new prefixes, then delete the old ones and record the version in one write (a crash
        before it leaves the old keys, and the next open copies them again)."""
        moved = 0
        for old, new in ((_OLD_META, META), (_OLD_STORE, STORE)):
            wb, size = WriteBatch(raw_mode=True), 0
            for key, value in self._scan_raw(old):
                wb.put(new + key[len(old):], value)
                size += len(key) + len(value)
                moved += 1
                if size >= _MOVE_BYTES:
                    self._write_batch(wb)
                    wb, size = WriteBatch(raw_mode=True), 0
            if size:
                self._write_batch(wb)
        wb = WriteBatch(raw_mode=True)
        for old in (_OLD_META, _OLD_STORE):
            wb.delete_range(old, prefix_upper(old))
        wb.put(META_FORMAT, _U64.pack(version))
        self._write_batch(wb)
        log.info("storage: moved %d keys before the log (format %d -> %d)", moved, version, FORMAT_VERSION)

    def _drop_uncommitted_batches(self) -> None:
        """Delete the batches past their partition's end key: ingested files whose commit (the
        WriteBatch with the end key) a crash cut off. Nothing was acknowledged or read there."""
        wb = WriteBatch(raw_mode=True)
        dropped = 0
        for rel, parts in self._next_offsets.items():
            for part, log_end in parts.items():
                raw = self._db.get(end_key(rel, part))
                if raw is None:
                    continue
                end = _U64.unpack(raw)[0]
                if end < log_end:
                    wb.delete_range(partition_prefix(rel, part) + _U64.pack(end), partition_upper(rel, part))
                    parts[part] = end
                    dropped += 1
        if dropped:
            log.warning("storage: removed the uncommitted batches of %d partitions (a write cut short)", dropped)
            self._write_batch(wb)

    def _recover_sequence(self) -> int:
        raw = self._db.get(META_SEQUENCE)
        return 0 if raw is None else int(_U64.unpack(raw)[0])

    def _repair_end_keys(self) -> None:
        """Make every partition's end key say what its log says (a server of an older version,
        which did not write them, may have appended since), and drop those of no partition."""
        ends = {end_key(rel, part): nxt for rel, parts in self._next_offsets.items() for part, nxt in parts.items()}
        wb = WriteBatch(raw_mode=True)
        stale = 0
        for key, value in self._scan_raw(META_END):
            if key not in ends:
                wb.delete(key)
                stale += 1
            elif _U64.unpack(value)[0] == ends[key]:
                del ends[key]
        for key, nxt in ends.items():
            wb.put(key, _U64.pack(nxt))
        if stale or ends:
            self._write_batch(wb)

    def _recover_weight_sums(self) -> dict[tuple[int, int], tuple[int, int]]:
        """The kept weight sums; one past its partition's end (not written by this version) is
        dropped."""
        sums: dict[tuple[int, int], tuple[int, int]] = {}
        wb = WriteBatch(raw_mode=True)
        stale = 0
        for key, value in self._scan_raw(META_WSUM):
            rel, part = _REL_PART.unpack_from(key, len(META_WSUM))
            end, total = _WSUM.unpack(value)
            if end <= self._next_offsets.get(rel, {}).get(part, 0):
                sums[(rel, part)] = (end, total)
            else:
                wb.delete(key)
                stale += 1
        if stale:
            self._write_batch(wb)
        return sums

    def _recover_next_offsets(self) -> dict[int, dict[int, int]]:
        """Next offset of every partition: one seek to its last batch, one seek to skip it."""
        offsets: dict[int, dict[int, int]] = {}
        it = self._db.iter()
        try:
            it.seek(LOG)
            while it.valid():
                key = it.key()
                if not key.startswith(LOG):
                    break
                rel, part, _, _ = parse_batch_key(key)
                it.seek_for_prev(partition_prefix(rel, part) + _LAST_IN_PARTITION)
                _, _, first, count = parse_batch_key(it.key())
                offsets.setdefault(rel, {})[part] = first + count
                it.seek(partition_upper(rel, part))
            it.status()
        except StreamDBError:
            raise
        except Exception as exc:
            raise storage_error(exc, "recover log offsets") from exc
        finally:
            del it
        return offsets

    # -- public API ------------------------------------------------------------------------

    def commit(self, commit: Commit) -> CommitResult:
        return self._submit(commit).result()

    async def commit_async(self, commit: Commit) -> CommitResult:
        # Cancelling the awaiting task withdraws the commit if the writer has not taken it yet;
        # once taken it completes regardless.
        return await asyncio.wrap_future(self._submit(commit))

    writes_in_order = True

    def submit_in_order(self, commit: Commit) -> Future[CommitResult]:
        # One writer thread takes the queue in order. A failed write leaves the handle refusing
        # every later one (_write_batch), so what was queued after it fails too; a commit that
        # could fail on its own (malformed) is refused here, by validate_commit. The caller must
        # not cancel the future (asyncio.shield): a later commit may build on this one's rows.
        return self._submit(commit)

    def snapshot(self) -> RocksDBSnapshot:
        with self._lock:
            if self._closed:
                raise ObjectNotInPrerequisiteState("storage is closed")
            try:
                with self._snapshot_lock:  # the iterator and the ends of the same writes
                    it = self._db.iter(ReadOptions())
                    ends = self._written_ends
            except Exception as exc:
                raise storage_error(exc, "take a snapshot") from exc
            snap = RocksDBSnapshot(it, ends)
            self._snapshots.add(snap)
            return snap

    def last_sequence(self) -> int:
        return self._sequence

    def end_offset(self, relation_id: int, partition: int) -> int:
        """Next offset to be assigned to the partition (latest, not a snapshot)."""
        return self._next_offsets.get(relation_id, {}).get(partition, 0)

    def committed_end_offset(self, relation_id: int, partition: int) -> int | None:
        # Offsets are published only once their commit is durable.
        return self.end_offset(relation_id, partition)

    def close(self) -> None:
        with self._close_lock:
            with self._lock:
                if self._closed:
                    return
                self._closed = True
                self._queue.put(_STOP)  # after every commit enqueued before close
            self._writer.join()
            self.sst_files.close()
            with self._lock:
                snapshots = list(self._snapshots)
                self._snapshots.clear()
            for snap in snapshots:
                snap.close()
            try:
                self._db.close()
            except Exception as exc:
                if self._write_failure is not None:
                    return  # the handle is in its error state (it was reported): closing releases it
                raise storage_error(exc, "close storage") from exc

    # -- group commit ------------------------------------------------------------------------

    def _submit(self, commit: Commit) -> Future[CommitResult]:
        validate_commit(commit)
        future: Future[CommitResult] = Future()
        pending = _Pending(commit, future, _commit_size(commit))
        with self._lock:
            if self._closed:
                raise ObjectNotInPrerequisiteState("storage is closed")
            self._queue.put(pending)
        return future

    def _run_writer(self) -> None:
        stop = False
        while not stop:
            item = self._queue.get()
            if item is _STOP:
                break
            assert isinstance(item, _Pending)
            group = [item]
            size = item.size
            while len(group) < self._max_group_commits and size < self._max_group_bytes:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stop = True
                    break
                assert isinstance(item, _Pending)
                group.append(item)
                size += item.size
            # Withdrawn (cancelled) commits are skipped; the rest can no longer be cancelled.
            group = [p for p in group if p.future.set_running_or_notify_cancel()]
            if group:
                self._write_group(group)

    def _write_group(self, group: list[_Pending]) -> None:
        try:
            wb = WriteBatch(raw_mode=True)
            pending_next: dict[tuple[int, int], int] = {}
            # The weight sums this group moves: (end, total), or None where an append without
            # weights (or not at the kept end) leaves the kept sum behind the partition's end.
            pending_sums: dict[tuple[int, int], tuple[int, int] | None] = {}
            dropped: set[int] = set()
            ingests: list[tuple[bytes, bytes]] = []  # (batch key, payload): each its own SST file
            sequence = self._sequence
            results: list[CommitResult] = []
            for p in group:
                c = p.commit
                sequence += 1
                for rel in c.drop_relations:
                    wb.delete_range(log_prefix(rel), log_prefix(rel + 1))
                    wb.delete_range(end_key(rel, 0), end_key(rel + 1, 0))
                    wb.delete_range(weight_sum_key(rel, 0), weight_sum_key(rel + 1, 0))
                    for store in (state_store(rel), partials_store(rel)):
                        prefix = store_prefix(store)
                        wb.delete_range(prefix, prefix_upper(prefix))
                    dropped.add(rel)
                    for stale in [k for k in pending_next if k[0] == rel]:
                        del pending_next[stale]
                    for stale in [k for k in pending_sums if k[0] == rel]:
                        del pending_sums[stale]
                firsts: list[int] = []
                for a in c.appends:
                    pk = (a.relation_id, a.partition)
                    # The partition's end as of the last write (0 after a drop in this group).
                    durable_end = 0 if a.relation_id in dropped else self.end_offset(*pk)
                    first = pending_next.get(pk, durable_end)
                    key = batch_key(a.relation_id, a.partition, first, a.count)
                    # Ingested only where a durable end key bounds what readers see: not after one of
                    # this group's appends (its end key is not written yet: a crash would leave the
                    # ingested batch after a gap) nor after a drop.
                    if len(a.payload) >= self._ingest_bytes and durable_end > 0:
                        ingests.append((key, _b(a.payload)))
                    else:
                        wb.put(key, _b(a.payload))
                    pending_next[pk] = first + a.count
                    firsts.append(first)
                    if a.weights is not None or pk in pending_sums or pk in self._weight_sums:
                        pending_sums[pk] = self._sum_after(pending_sums, pk, a, first, a.relation_id in dropped)
                for store, key, value in c.puts:
                    wb.put(store_key(store, _b(key)), _b(value))
                for store, key in c.deletes:
                    wb.delete(store_key(store, _b(key)))
                results.append(CommitResult(firsts, sequence))
            for (rel, part), nxt in pending_next.items():
                wb.put(end_key(rel, part), _U64.pack(nxt))
            for (rel, part), kept in pending_sums.items():
                if kept is not None:
                    wb.put(weight_sum_key(rel, part), _WSUM.pack(*kept))
            wb.put(META_SEQUENCE, _U64.pack(sequence))
            ends = self._pending_ends = self._ends_after(dropped, pending_next)
            self._pending_ingests = ingests
            self._write_batch(wb)
        except BaseException as exc:
            # Nothing was assigned: offsets and sequence stay where they were.
            for p in group:
                p.future.set_exception(self._after_write_failure() or storage_error(exc, "commit"))
            return
        # Durable: publish the new offsets, then acknowledge.
        self._next_offsets = ends
        for rel in dropped:
            for gone in [k for k in self._weight_sums if k[0] == rel]:
                del self._weight_sums[gone]
        for pk, kept in pending_sums.items():
            if kept is not None:
                self._weight_sums[pk] = kept
        self._sequence = sequence
        self.groups_written += 1
        self.commits_written += len(group)
        for p, result in zip(group, results, strict=True):
            p.future.set_result(result)

    def _ingest(self, key: bytes, payload: bytes) -> None:
        """One batch as an SST file of its own (compressed as the bottom level is), moved into the
        database. Outside the snapshots' lock: writing the file takes ~100 ms for 30 MB (by the
        helper process of sst_files.py, without the GIL)."""
        path = os.path.join(self._ingest_dir, f"{os.getpid()}-{self._ingested}.sst")
        self._ingested += 1
        self.sst_files.build(path, key, payload)
        options = IngestExternalFileOptions()
        options.set_move_files(True)
        try:
            self._db.ingest_external_file([path], options)
            self.batches_ingested += 1
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # linked into the database by then, or not to be used

    def _sum_after(self, pending: dict[tuple[int, int], tuple[int, int] | None], pk: tuple[int, int],
                   a: Append, first: int, dropped: bool) -> tuple[int, int] | None:
        """The partition's weight sum once `a` is appended at `first`: extended when the sum so
        far ends at `first` (none before offset 0), else None (the kept one stays, behind)."""
        if a.weights is None:
            return None
        before = (0, 0) if first == 0 else pending.get(pk) if pk in pending else (
            None if dropped else self._weight_sums.get(pk))
        if before is None or before[0] != first:
            return None
        return first + a.count, before[1] + a.weights

    def _after_write_failure(self) -> StreamDBError | None:
        """A fresh copy of the error RocksDB's failed write was reported with (None if none)."""
        failed = self._write_failure
        if failed is None:
            return None
        return type(failed)(failed.message, sqlstate=failed.sqlstate, detail=failed.detail, hint=failed.hint)

    def _ends_after(self, dropped: set[int], pending_next: dict[tuple[int, int], int]) -> dict[int, dict[int, int]]:
        """The partitions' ends once this group is written: a new mapping (snapshots keep the
        one they took), sharing the partitions of the relations it does not change."""
        if not dropped and not pending_next:
            return self._next_offsets
        ends = dict(self._next_offsets)
        for rel in dropped:
            ends.pop(rel, None)
        changed: dict[int, dict[int, int]] = {}
        for (rel, part), nxt in pending_next.items():
            partitions = changed.get(rel)
            if partitions is None:
                partitions = changed[rel] = dict(ends.get(rel, {}))
            partitions[part] = nxt
        ends.update(changed)
        return ends

    def _write_batch(self, wb: WriteBatch) -> None:
        """The single durable write (a seam for fault-injection tests), after the group's large
        batches (`_pending_ingests`) are ingested. It makes the group's partition ends
        (`_pending_ends`) the ones snapshots taken after it answer with."""
        ingests, self._pending_ingests = self._pending_ingests, []
        if self._write_failure is not None:
            raise InternalError("storage refused the write after an earlier write failure")
        if _TEST_FAULT_FILE:
            _inject_test_fault()
        try:
            for key, payload in ingests:
                self._ingest(key, payload)
            # With the snapshots' lock: a snapshot sees the write and its ends, or neither.
            with self._snapshot_lock:
                self._db.write(wb, self._write_options)
                ends, self._pending_ends = self._pending_ends, None
                if ends is not None:
                    self._written_ends = ends
            if self._sync:
                self._db.flush_wal(True)
        except Exception as exc:
            err = storage_error(exc, "commit")
            err.message += "; storage accepts no more writes until the server restarts"
            err.hint = "Free disk space, then restart the server; reads keep working meanwhile."
            self._write_failure = err
            raise


class RocksDBSnapshot(Snapshot):
    """A point-in-time view: one RocksDB iterator (implicit snapshot) shared by all reads.

    Reads are thread-safe; several generators may be open at once (each re-seeks to
    its own position when another read moved the shared iterator). An open
    snapshot pins memtables and SST files: keep it short-lived and close it.
    """

    def __init__(self, it: RdictIter, end_offsets: dict[int, dict[int, int]] | None = None) -> None:
        """`end_offsets`: every partition's end as of the iterator (the storage's, taken with
        it); None: each is found by a seek (a secondary instance)."""
        self._it: RdictIter | None = it
        self._end_offsets = end_offsets
        self._lock = threading.Lock()
        self._owner: object | None = None  # which reader the iterator is positioned for

    def _iter(self) -> RdictIter:
        if self._it is None:
            raise ObjectNotInPrerequisiteState("snapshot is closed")
        return self._it

    def read(
        self, relation_id: int, partition: int, start: int = 0, end: int | None = None
    ) -> Iterator[tuple[int, int, bytes]]:
        prefix = partition_prefix(relation_id, partition)
        if end is not None and end <= start:
            return
        token = object()
        last_key: bytes | None = None
        while True:
            with self._lock, _reading("read the log"):
                it = self._iter()
                if last_key is None:
                    # The batch containing `start`, if any, else the first batch after it.
                    it.seek_for_prev(prefix + _U64.pack(start) + b"\xff" * 8)
                    if not self._overlaps(it, prefix, start):
                        it.seek(prefix + _U64.pack(start))
                elif self._owner is token:
                    it.next()
                else:
                    it.seek(last_key)  # the view is immutable: last_key is still there
                    it.next()
                self._owner = token
                if not it.valid():
                    it.status()
                    return
                key = it.key()
                if not key.startswith(prefix):
                    return
                _, _, first, count = parse_batch_key(key)
                if end is not None and first >= end:
                    return
                payload = it.value()
                last_key = key
            yield first, count, payload

    @staticmethod
    def _overlaps(it: RdictIter, prefix: bytes, start: int) -> bool:
        """Whether the iterator is on a batch of the partition that ends after ``start``."""
        if not it.valid():
            return False
        key = it.key()
        if not key.startswith(prefix):
            return False
        _, _, first, count = parse_batch_key(key)
        return first + count > start

    def end_offset(self, relation_id: int, partition: int) -> int:
        if self._end_offsets is not None:
            # Not a seek: seek_for_prev lands on the partition's last batch and reads its whole
            # block, and a batch of a large COPY or view backfill is one value of tens of MB
            # (5-47 ms a call on a 10M-row view's log, for SHOW QUERIES, FLUSH and reads).
            self._iter()  # a closed snapshot answers nothing
            return self._end_offsets.get(relation_id, {}).get(partition, 0)
        prefix = partition_prefix(relation_id, partition)
        with self._lock, _reading("read the log"):
            it = self._iter()
            self._owner = None
            # The end key first: a batch past it was not committed (an ingested file, format 2).
            key = end_key(relation_id, partition)
            it.seek(key)
            if it.valid() and it.key() == key:
                return int(_U64.unpack(it.value())[0])
            it.seek_for_prev(prefix + _LAST_IN_PARTITION)
            if it.valid() and it.key().startswith(prefix):
                _, _, first, count = parse_batch_key(it.key())
                return first + count
            it.status()
            return 0

    def weight_sum(self, relation_id: int, partition: int) -> tuple[int, int] | None:
        key = weight_sum_key(relation_id, partition)
        with self._lock, _reading("read the log"):
            it = self._iter()
            self._owner = None
            it.seek(key)
            if it.valid() and it.key() == key:
                end, total = _WSUM.unpack(it.value())
                return end, total
            it.status()
            return None

    def get(self, store: str, key: bytes) -> bytes | None:
        return self.get_many(store, [key])[0]

    def get_many(self, store: str, keys: list[bytes]) -> list[bytes | None]:
        # One lock and one error mapping for the lot: a view's commit reads thousands of keys,
        # and per key the Python around the seek cost ten times the seek. The seeks go in key
        # order: each lands near the last, in blocks it just read (200,000 random keys of a 1M-key
        # store: 0.40 s with the sort, 0.63 s in their own order).
        _check_store(store)
        prefix = store_prefix(store)
        values: list[bytes | None] = [None] * len(keys)
        order = sorted(range(len(keys)), key=keys.__getitem__) if len(keys) > 1 else range(len(keys))
        with self._lock, _reading(f"read store {store}"):
            it = self._iter()
            self._owner = None
            for i in order:
                full = prefix + keys[i]
                it.seek(full)
                if it.valid():
                    if it.key() == full:
                        values[i] = it.value()
                else:
                    it.status()  # a failed seek is invalid too: raise its error, never read it as absent
        return values

    def scan(self, store: str, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        _check_store(store)
        sp = store_prefix(store)
        full = sp + prefix
        token = object()
        last_key: bytes | None = None
        while True:
            with self._lock, _reading(f"scan store {store}"):
                it = self._iter()
                if last_key is None:
                    it.seek(full)
                elif self._owner is token:
                    it.next()
                else:
                    it.seek(last_key)
                    it.next()
                self._owner = token
                if not it.valid():
                    it.status()
                    return
                key = it.key()
                if not key.startswith(full):
                    return
                value = it.value()
                last_key = key
            yield key[len(sp) :], value

    def close(self) -> None:
        with self._lock:
            self._it = None  # releases the iterator and its implicit snapshot
