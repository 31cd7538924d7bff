"""Tests for streamdb.storage (RocksDB backend): group commit, atomicity, snapshots, recovery."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from streamdb.errors import (
    ConfigurationError,
    DiskFull,
    InternalError,
    ObjectNotInPrerequisiteState,
)
from streamdb.storage import Append, Commit, CommitResult, open_storage
from streamdb.storage.rocksdb import RocksDBStorage, batch_key, store_key

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[RocksDBStorage]:
    s = open_storage("rocksdb", str(tmp_path / "db"))
    assert isinstance(s, RocksDBStorage)
    yield s
    s.close()


def reopen(s: RocksDBStorage) -> RocksDBStorage:
    s.close()
    again = open_storage("rocksdb", s.path)
    assert isinstance(again, RocksDBStorage)
    return again


def batches(s: RocksDBStorage, rel: int, part: int) -> list[tuple[int, int, bytes]]:
    with s.snapshot() as snap:
        return list(snap.read(rel, part))


def assert_contiguous(found: list[tuple[int, int, bytes]], end: int) -> None:
    expected = 0
    for first, count, _ in found:
        assert first == expected, f"gap or overlap at {first}, expected {expected}"
        expected = first + count
    assert expected == end


# ---------------------------------------------------------------------------------------------
# Basics


def test_append_read_and_offsets(storage: RocksDBStorage) -> None:
    r = storage.commit(
        Commit(appends=[Append(1, 0, b"a", 3), Append(1, 0, b"b", 2), Append(1, 1, b"c", 4), Append(2, 0, b"d", 1)])
    )
    assert r == CommitResult([0, 3, 0, 0], 1)
    r = storage.commit(Commit(appends=[Append(1, 0, b"e", 5)]))
    assert r == CommitResult([5], 2)
    assert storage.last_sequence() == 2
    with storage.snapshot() as snap:
        assert list(snap.read(1, 0)) == [(0, 3, b"a"), (3, 2, b"b"), (5, 5, b"e")]
        # start inside a batch returns that batch; end is exclusive
        assert list(snap.read(1, 0, 4)) == [(3, 2, b"b"), (5, 5, b"e")]
        assert list(snap.read(1, 0, 3, 5)) == [(3, 2, b"b")]
        assert list(snap.read(1, 0, 2, 4)) == [(0, 3, b"a"), (3, 2, b"b")]
        assert list(snap.read(1, 0, 9)) == [(5, 5, b"e")]
        assert list(snap.read(1, 0, 10)) == []
        assert list(snap.read(1, 0, 3, 3)) == []
        assert list(snap.read(1, 1)) == [(0, 4, b"c")]
        assert list(snap.read(1, 2)) == []
        assert list(snap.read(3, 0)) == []
        assert snap.end_offset(1, 0) == 10
        assert snap.end_offset(1, 1) == 4
        assert snap.end_offset(2, 0) == 1
        assert snap.end_offset(1, 2) == 0
        assert snap.end_offset(0, 0) == 0


def test_extreme_partition_and_relation_ids(storage: RocksDBStorage) -> None:
    top = 0xFFFF_FFFF
    storage.commit(Commit(appends=[Append(7, top, b"x", 2), Append(8, 0, b"y", 1), Append(7, 0, b"z", 1)]))
    storage = reopen(storage)
    with storage.snapshot() as snap:
        assert list(snap.read(7, top)) == [(0, 2, b"x")]
        assert snap.end_offset(7, top) == 2
        assert snap.end_offset(8, 0) == 1
    assert storage.commit(Commit(appends=[Append(7, top, b"w", 1)])).first_offsets == [2]
    storage.close()


def test_empty_commit_gets_a_sequence(storage: RocksDBStorage) -> None:
    assert storage.commit(Commit()) == CommitResult([], 1)
    assert storage.last_sequence() == 1


def test_invalid_commits_are_rejected_alone(storage: RocksDBStorage) -> None:
    bad = [
        Commit(appends=[Append(1, 0, b"x", 0)]),
        Commit(appends=[Append(-1, 0, b"x", 1)]),
        Commit(appends=[Append(1, -1, b"x", 1)]),
        Commit(appends=[Append(1, 0, "text", 1)]),  # type: ignore[arg-type]
        Commit(puts=[("bad\x00store", b"k", b"v")]),
        Commit(puts=[("", b"k", b"v")]),
        Commit(deletes=[("catalog", "k")]),  # type: ignore[list-item]
    ]
    for c in bad:
        with pytest.raises(InternalError):
            storage.commit(c)
    assert storage.last_sequence() == 0
    lenient = Append(1, 0, bytearray(b"ok"), 1)  # type: ignore[arg-type]
    assert storage.commit(Commit(appends=[lenient])) == CommitResult([0], 1)
    assert batches(storage, 1, 0) == [(0, 1, b"ok")]


def test_open_storage_kinds(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as e:
        open_storage("kafka", str(tmp_path / "k"))  # a Kafka log needs a cluster to write to
    assert "--kafka-bootstrap" in str(e.value)
    with pytest.raises(ConfigurationError):
        open_storage("nope", str(tmp_path / "n"))
    with pytest.raises(ConfigurationError):
        open_storage("rocksdb", str(tmp_path / "o"), no_such_option=1)
    with pytest.raises(ConfigurationError):
        open_storage("rocksdb", str(tmp_path / "c"), compression="lzma")
    # options of other backends are ignored, so the engine can pass its whole configuration
    open_storage("rocksdb", str(tmp_path / "r"), kafka_bootstrap="localhost:9092", sync=True).close()


def test_second_open_is_refused(storage: RocksDBStorage) -> None:
    with pytest.raises(ConfigurationError, match="in use"):
        open_storage("rocksdb", storage.path)


def test_unknown_format_version_is_refused(tmp_path: Path) -> None:
    from rocksdict import Options, Rdict

    from streamdb.storage.rocksdb import META_FORMAT

    path = str(tmp_path / "db")
    open_storage("rocksdb", path).close()
    db = Rdict(path, Options(raw_mode=True))
    db[META_FORMAT] = (99).to_bytes(8, "big")
    db.close()
    with pytest.raises(ConfigurationError, match="format version 99"):
        open_storage("rocksdb", path)
    # the failed open released the directory
    db = Rdict(path, Options(raw_mode=True))
    db.close()


def test_rocksdict_snapshot_iter_ignores_snapshot(tmp_path: Path) -> None:
    """Why snapshots are iterators: rocksdict's Snapshot.iter() reads the latest data.

    If this starts failing, rocksdict fixed it and db.snapshot() could be used instead.
    """
    from rocksdict import Options, Rdict

    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    db = Rdict(str(tmp_path / "raw"), opts)
    db[b"a"] = b"1"
    snap = db.snapshot()
    pinned = db.iter()
    db[b"b"] = b"2"
    it = snap.iter()
    it.seek(b"b")
    assert it.valid() and it.key() == b"b"  # the bug: sees a later write
    pinned.seek(b"b")
    assert not pinned.valid()  # an iterator's implicit snapshot does not
    del snap, it, pinned
    db.close()


def test_close_is_idempotent_and_final(tmp_path: Path) -> None:
    s = open_storage("rocksdb", str(tmp_path / "db"))
    s.commit(Commit(appends=[Append(1, 0, b"a", 1)]))
    snap = s.snapshot()
    gen = snap.read(1, 0)
    s.close()
    s.close()
    with pytest.raises(ObjectNotInPrerequisiteState):
        s.commit(Commit())
    with pytest.raises(ObjectNotInPrerequisiteState):
        s.snapshot()
    # Storage.close() closed the open snapshot, so the directory lock was released.
    with pytest.raises(ObjectNotInPrerequisiteState):
        next(gen)
    with pytest.raises(ObjectNotInPrerequisiteState):
        snap.end_offset(1, 0)
    with open_storage("rocksdb", str(tmp_path / "db")) as again:
        assert again.commit(Commit(appends=[Append(1, 0, b"b", 1)])).first_offsets == [1]


def test_close_waits_for_queued_commits(tmp_path: Path) -> None:
    s = RocksDBStorage(str(tmp_path / "db"))
    futures = [s._submit(Commit(appends=[Append(1, 0, b"x", 1)])) for _ in range(50)]
    s.close()
    assert sorted(f.result().first_offsets[0] for f in futures) == list(range(50))


# ---------------------------------------------------------------------------------------------
# Group commit


def test_group_commit_8_threads_offsets_unique_and_contiguous(storage: RocksDBStorage) -> None:
    per_thread = 60
    results: dict[int, list[tuple[Commit, CommitResult]]] = defaultdict(list)
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def worker(t: int) -> None:
        try:
            barrier.wait()
            for i in range(per_thread):
                appends = [
                    Append(1, (t + i + j) % 3, f"{t}:{i}:{j}".encode(), 1 + (t * 7 + i + j) % 4)
                    for j in range(1 + i % 3)
                ]
                c = Commit(appends=appends, puts=[("meta", f"t{t}".encode(), str(i).encode())])
                results[t].append((c, storage.commit(c)))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors

    all_results = [r for rs in results.values() for r in rs]
    assert len(all_results) == 8 * per_thread
    sequences = [r.sequence for _, r in all_results]
    assert sorted(sequences) == list(range(1, 8 * per_thread + 1))
    assert storage.last_sequence() == 8 * per_thread

    expected: dict[int, dict[int, tuple[int, bytes]]] = defaultdict(dict)
    for c, r in all_results:
        assert len(r.first_offsets) == len(c.appends)
        for a, first in zip(c.appends, r.first_offsets, strict=True):
            assert first not in expected[a.partition]
            expected[a.partition][first] = (a.count, a.payload)
    with storage.snapshot() as snap:
        for part in range(3):
            found = list(snap.read(1, part))
            assert_contiguous(found, snap.end_offset(1, part))
            assert {f: (c, p) for f, c, p in found} == expected[part]
        for t in range(8):
            assert snap.get("meta", f"t{t}".encode()) == str(per_thread - 1).encode()
    # Offsets follow commit order within a partition: a later sequence gets a later offset.
    for part in range(3):
        by_seq = sorted(
            (r.sequence, first)
            for c, r in all_results
            for a, first in zip(c.appends, r.first_offsets, strict=True)
            if a.partition == part
        )
        assert [f for _, f in by_seq] == sorted(f for _, f in by_seq)
    # With 8 writers and one fsync per group, commits must have been merged.
    assert storage.groups_written < storage.commits_written


def test_commits_queued_during_a_write_share_one_group(
    storage: RocksDBStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered = threading.Event()
    release = threading.Event()
    real_write = storage._write_batch
    calls = 0

    def slow_write(wb: object) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            entered.set()
            assert release.wait(10)
        real_write(wb)  # type: ignore[arg-type]

    monkeypatch.setattr(storage, "_write_batch", slow_write)
    first = storage._submit(Commit(appends=[Append(1, 0, b"first", 1)]))
    assert entered.wait(10)
    rest = [storage._submit(Commit(appends=[Append(1, 0, b"%d" % i, 1)])) for i in range(7)]
    release.set()
    assert first.result(10).first_offsets == [0]
    assert [f.result(10).first_offsets[0] for f in rest] == list(range(1, 8))
    assert [f.result(10).sequence for f in rest] == list(range(2, 9))
    assert calls == 2
    assert storage.groups_written == 2 and storage.commits_written == 8


@pytest.mark.parametrize(
    ("message", "error", "sqlstate"),
    [
        ("IO error: No space left on device: While appending to file: 000004.log", DiskFull, "53100"),
        ("IO error: Input/output error", InternalError, "XX000"),
    ],
)
def test_failed_write_fails_whole_group_and_assigns_nothing(
    storage: RocksDBStorage,
    monkeypatch: pytest.MonkeyPatch,
    message: str,
    error: type[Exception],
    sqlstate: str,
) -> None:
    storage.commit(Commit(appends=[Append(1, 0, b"ok", 2)], puts=[("s", b"k", b"old")]))
    entered = threading.Event()
    release = threading.Event()
    calls = 0

    def failing_write(wb: object) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            entered.set()
            assert release.wait(10)
        raise Exception(message)

    real_write = storage._write_batch
    monkeypatch.setattr(storage, "_write_batch", failing_write)
    first = storage._submit(Commit(appends=[Append(1, 0, b"f", 1)]))
    assert entered.wait(10)
    group = [
        storage._submit(Commit(appends=[Append(1, i % 2, b"g", 1)], puts=[("s", b"k", b"new")]))
        for i in range(8)
    ]
    release.set()
    for f in [first, *group]:
        exc = f.exception(10)
        assert isinstance(exc, error)
        assert exc.sqlstate == sqlstate  # type: ignore[attr-defined]
        assert message in str(exc) or message in (exc.detail or "")  # type: ignore[attr-defined]
    assert calls == 2  # the 8 queued commits failed together, in one group
    assert storage.last_sequence() == 1
    assert storage.end_offset(1, 0) == 2 and storage.end_offset(1, 1) == 0

    monkeypatch.setattr(storage, "_write_batch", real_write)
    r = storage.commit(Commit(appends=[Append(1, 0, b"next", 1), Append(1, 1, b"n1", 1)]))
    assert r == CommitResult([2, 0], 2)
    with storage.snapshot() as snap:
        assert list(snap.read(1, 0)) == [(0, 2, b"ok"), (2, 1, b"next")]
        assert snap.get("s", b"k") == b"old"


# ---------------------------------------------------------------------------------------------
# Atomicity and snapshots


def test_commit_applies_appends_puts_deletes_atomically(storage: RocksDBStorage) -> None:
    storage.commit(Commit(puts=[("state:1", b"a", b"1"), ("state:1", b"b", b"2"), ("catalog", b"t", b"x")]))
    storage.commit(
        Commit(
            appends=[Append(1, 0, b"batch", 3)],
            puts=[("state:1", b"c", b"3"), ("state:1", b"a", b"10")],
            deletes=[("state:1", b"b"), ("catalog", b"missing")],
        )
    )
    with storage.snapshot() as snap:
        assert list(snap.scan("state:1")) == [(b"a", b"10"), (b"c", b"3")]
        assert snap.get("state:1", b"b") is None
        assert snap.get("catalog", b"t") == b"x"
        assert list(snap.read(1, 0)) == [(0, 3, b"batch")]
    # Within a commit, deletes come after puts.
    storage.commit(Commit(puts=[("state:1", b"z", b"1")], deletes=[("state:1", b"z")]))
    with storage.snapshot() as snap:
        assert snap.get("state:1", b"z") is None


def test_readers_never_see_half_a_commit(storage: RocksDBStorage) -> None:
    """A writer keeps two keys and a log in lock-step; concurrent snapshots must agree."""
    stop = threading.Event()
    problems: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            with storage.snapshot() as snap:
                a = snap.get("state:1", b"a")
                b = snap.get("state:1", b"b")
                end = snap.end_offset(1, 0)
                n = sum(1 for _ in snap.read(1, 0))
                if a != b or end != 2 * n or (a is not None and int(a) != n):
                    problems.append(f"a={a!r} b={b!r} end={end} batches={n}")

    readers = [threading.Thread(target=reader) for _ in range(2)]
    for r in readers:
        r.start()
    try:

        # One serial writer keeps the invariant; puts carry the number of batches so far.
        for i in range(1, 121):
            storage.commit(
                Commit(
                    appends=[Append(1, 0, b"p%d" % i, 2)],
                    puts=[("state:1", b"a", b"%d" % i), ("state:1", b"b", b"%d" % i)],
                )
            )
    finally:
        stop.set()
        for r in readers:
            r.join()
    assert not problems, problems[:5]


def test_snapshot_isolation(storage: RocksDBStorage) -> None:
    storage.commit(Commit(appends=[Append(1, 0, b"a", 1)], puts=[("state:1", b"k", b"v1"), ("c", b"x", b"1")]))
    snap = storage.snapshot()
    storage.commit(
        Commit(
            appends=[Append(1, 0, b"b", 1), Append(1, 1, b"c", 1)],
            puts=[("state:1", b"k", b"v2"), ("state:1", b"new", b"n")],
            deletes=[("c", b"x")],
        )
    )
    storage.commit(Commit(drop_relations=[1]))
    storage.commit(Commit(appends=[Append(2, 0, b"d", 1)]))
    with snap:
        assert list(snap.read(1, 0)) == [(0, 1, b"a")]
        assert snap.end_offset(1, 0) == 1
        assert list(snap.read(1, 1)) == [] and snap.end_offset(1, 1) == 0
        assert snap.end_offset(2, 0) == 0
        assert snap.get("state:1", b"k") == b"v1"
        assert list(snap.scan("state:1")) == [(b"k", b"v1")]
        assert snap.get("c", b"x") == b"1"
        # Many keys at once: in order, absent ones None, as of the snapshot; a key of another
        # store with the same bytes is not this store's.
        assert snap.get_many("state:1", [b"new", b"k", b"x", b"k"]) == [None, b"v1", None, b"v1"]
        assert snap.get_many("c", [b"x", b"k"]) == [b"1", None]
        assert snap.get_many("state:1", []) == []
    with storage.snapshot() as now:
        assert list(now.read(1, 0)) == [] and now.end_offset(1, 0) == 0
        assert list(now.scan("state:1")) == []
        assert now.get("c", b"x") is None
        assert now.get_many("state:1", [b"k", b"new"]) == [None, None]
        assert list(now.read(2, 0)) == [(0, 1, b"d")]


def test_interleaved_reads_on_one_snapshot(storage: RocksDBStorage) -> None:
    storage.commit(Commit(appends=[Append(1, 0, b"%d" % i, 1) for i in range(20)]))
    storage.commit(Commit(appends=[Append(1, 1, b"q%d" % i, 2) for i in range(20)]))
    storage.commit(Commit(puts=[("s", b"%02d" % i, b"v") for i in range(20)]))
    with storage.snapshot() as snap:
        r0, r1, sc = snap.read(1, 0), snap.read(1, 1, 10), snap.scan("s")
        out0: list[int] = []
        out1: list[int] = []
        outs: list[bytes] = []
        for _ in range(25):
            out0.extend(x[0] for x in [next(r0, None)] if x)
            assert snap.get("s", b"05") == b"v"
            out1.extend(x[0] for x in [next(r1, None)] if x)
            assert snap.end_offset(1, 1) == 40
            outs.extend(x[0] for x in [next(sc, None)] if x)
        assert out0 == list(range(20))
        assert out1 == list(range(10, 40, 2))
        assert outs == [b"%02d" % i for i in range(20)]


def test_drop_relations(storage: RocksDBStorage) -> None:
    storage.commit(
        Commit(
            appends=[Append(1, 0, b"a", 2), Append(1, 3, b"b", 1), Append(10, 0, b"c", 1), Append(2, 0, b"d", 1)],
            puts=[
                ("state:1", b"k", b"1"),
                ("state:10", b"k", b"10"),
                ("state:1x", b"k", b"x"),
                ("state:2", b"k", b"2"),
                ("catalog", b"rel:1", b"meta"),
            ],
        )
    )
    r = storage.commit(Commit(drop_relations=[1], appends=[Append(1, 3, b"again", 1)]))
    assert r.first_offsets == [0]  # appends after a drop in the same commit start again at 0
    storage.commit(Commit(drop_relations=[1]))
    for reopened in (False, True):
        if reopened:
            storage = reopen(storage)
        with storage.snapshot() as snap:
            assert list(snap.read(1, 0)) == [] and list(snap.read(1, 3)) == []
            assert snap.end_offset(1, 0) == 0 and snap.end_offset(1, 3) == 0
            assert list(snap.scan("state:1")) == []
            assert list(snap.read(10, 0)) == [(0, 1, b"c")]
            assert list(snap.read(2, 0)) == [(0, 1, b"d")]
            assert snap.get("state:10", b"k") == b"10"
            assert snap.get("state:1x", b"k") == b"x"
            assert snap.get("state:2", b"k") == b"2"
            assert snap.get("catalog", b"rel:1") == b"meta"
        assert storage.end_offset(1, 0) == 0
    assert storage.commit(Commit(appends=[Append(1, 0, b"new", 1)])).first_offsets == [0]
    storage.close()


def hold_the_writer(storage: RocksDBStorage, monkeypatch: pytest.MonkeyPatch) -> tuple[Future[CommitResult],
                                                                                     threading.Event]:
    """Blocks the writer thread inside a write until the returned event is set, so the commits
    submitted meanwhile are written as one group; also returns the blocking commit's future."""
    entered, release = threading.Event(), threading.Event()
    real_write = storage._write_batch

    def gate(wb: object) -> None:
        if not entered.is_set():
            entered.set()
            assert release.wait(10)
        real_write(wb)  # type: ignore[arg-type]

    monkeypatch.setattr(storage, "_write_batch", gate)
    blocker = storage._submit(Commit())
    assert entered.wait(10)
    return blocker, release


def test_drop_then_append_within_one_group(storage: RocksDBStorage, monkeypatch: pytest.MonkeyPatch) -> None:
    storage.commit(Commit(appends=[Append(5, 0, b"old", 4)]))
    blocker, release = hold_the_writer(storage, monkeypatch)
    f1 = storage._submit(Commit(appends=[Append(5, 0, b"x", 1)]))
    f2 = storage._submit(Commit(drop_relations=[5]))
    f3 = storage._submit(Commit(appends=[Append(5, 0, b"y", 2)]))
    release.set()
    blocker.result(10)
    assert f1.result(10).first_offsets == [4]
    f2.result(10)
    assert f3.result(10).first_offsets == [0]
    assert batches(storage, 5, 0) == [(0, 2, b"y")]
    assert storage.commit(Commit(appends=[Append(5, 0, b"z", 1)])).first_offsets == [2]


def test_scan_with_prefixes(storage: RocksDBStorage) -> None:
    keys = [b"", b"a", b"a\x00", b"ab", b"abc", b"b", b"\xff", b"\xff\xff"]
    storage.commit(
        Commit(
            puts=[("store", k, b"v" + k) for k in reversed(keys)]
            + [("store2", b"a", b"other"), ("stor", b"ea", b"other")]
        )
    )
    with storage.snapshot() as snap:
        assert list(snap.scan("store")) == [(k, b"v" + k) for k in keys]
        assert [k for k, _ in snap.scan("store", b"a")] == [b"a", b"a\x00", b"ab", b"abc"]
        assert [k for k, _ in snap.scan("store", b"ab")] == [b"ab", b"abc"]
        assert [k for k, _ in snap.scan("store", b"\xff")] == [b"\xff", b"\xff\xff"]
        assert list(snap.scan("store", b"c")) == []
        assert list(snap.scan("store2")) == [(b"a", b"other")]
        assert list(snap.scan("nothing")) == []
        assert snap.get("store", b"") == b"v"
        assert snap.get("store", b"zz") is None


def test_key_layout_orders_by_offset() -> None:
    assert batch_key(1, 0, 255, 1) < batch_key(1, 0, 256, 1) < batch_key(1, 1, 0, 1) < batch_key(2, 0, 0, 1)
    assert not store_key("state:17", b"").startswith(store_key("state:1", b""))
    assert batch_key(1, 0, 0, 1)[:1] != store_key("x", b"")[:1]


# ---------------------------------------------------------------------------------------------
# Recovery


def test_recovery_after_reopen(storage: RocksDBStorage) -> None:
    expected: dict[tuple[int, int], int] = {}
    for i in range(30):
        rel, part = i % 4 + 1, i % 7
        r = storage.commit(Commit(appends=[Append(rel, part, b"%d" % i, i + 1)], puts=[("meta", b"i", b"%d" % i)]))
        assert r.first_offsets == [expected.get((rel, part), 0)]
        expected[(rel, part)] = r.first_offsets[0] + i + 1
    storage = reopen(storage)
    assert storage.last_sequence() == 30
    assert {(r, p): n for r, parts in storage._next_offsets.items() for p, n in parts.items()} == expected
    r = storage.commit(Commit(appends=[Append(rel, part, b"x", 1) for (rel, part) in expected]))
    assert r.sequence == 31
    assert r.first_offsets == list(expected.values())
    with storage.snapshot() as snap:
        assert snap.get("meta", b"i") == b"29"
        for (rel, part), end in expected.items():
            assert_contiguous(list(snap.read(rel, part)), end + 1)
    storage.close()


async def _async_commits(s: RocksDBStorage, n: int) -> list[CommitResult]:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    t = asyncio.create_task(ticker())
    results = await asyncio.gather(*(s.commit_async(Commit(appends=[Append(1, 0, b"a", 1)])) for _ in range(n)))
    t.cancel()
    assert ticks > 0  # the event loop kept running while commits were in flight
    return list(results)


def test_commit_async(storage: RocksDBStorage) -> None:
    results = asyncio.run(_async_commits(storage, 50))
    assert sorted(r.first_offsets[0] for r in results) == list(range(50))
    assert sorted(r.sequence for r in results) == list(range(1, 51))

    async def invalid() -> None:
        await storage.commit_async(Commit(appends=[Append(1, 0, b"a", 0)]))

    with pytest.raises(InternalError):
        asyncio.run(invalid())


CRASH_WORKER = textwrap.dedent(
    """
    import sys, threading
    from streamdb.storage import Append, Commit, open_storage

    s = open_storage("rocksdb", sys.argv[1])
    lock = threading.Lock()

    def work(t):
        i = 0
        while True:
            part = (t + i) % 2
            count = 1 + (i % 3)
            payload = b"%d:%d" % (t, i)
            r = s.commit(Commit(appends=[Append(1, part, payload, count)],
                                puts=[("state:1", b"t%d" % t, b"%d" % i)]))
            with lock:
                sys.stdout.write("ACK %d %d %d %d %d %s\\n" % (
                    t, i, part, r.first_offsets[0], count, payload.decode()))
                sys.stdout.flush()
            i += 1

    for t in range(4):
        threading.Thread(target=work, args=(t,), daemon=True).start()
    threading.Event().wait()
    """
)


def test_crash_kill_9_keeps_every_acknowledged_commit(tmp_path: Path) -> None:
    path = str(tmp_path / "db")
    script = tmp_path / "worker.py"
    script.write_text(CRASH_WORKER)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    acks: list[tuple[int, int, int, int, int, bytes]] = []
    last_round: list[tuple[int, int, int, int, int, bytes]] = []
    for round_ in range(2):  # crash twice: recovery must also survive a second crash
        proc = subprocess.Popen([sys.executable, str(script), path], stdout=subprocess.PIPE, env=env)
        assert proc.stdout is not None
        seen = 0
        last_round = []
        while seen < 1000:
            line = proc.stdout.readline()
            assert line, f"worker exited early with {proc.wait()}"
            seen += 1
            last_round.append(parse_ack(line))
        os.kill(proc.pid, signal.SIGKILL)
        rest = proc.stdout.read()  # acknowledgements already printed before the kill
        proc.wait()
        for line in rest.split(b"\n"):
            if line.startswith(b"ACK") and line.count(b" ") == 6:
                last_round.append(parse_ack(line))
        acks.extend(last_round)
        assert proc.returncode == -signal.SIGKILL, round_

    s = open_storage("rocksdb", path)
    assert isinstance(s, RocksDBStorage)
    try:
        with s.snapshot() as snap:
            logs = {part: list(snap.read(1, part)) for part in (0, 1)}
            ends = {part: snap.end_offset(1, part) for part in (0, 1)}
            state = dict(snap.scan("state:1"))
        for part in (0, 1):
            assert_contiguous(logs[part], ends[part])  # no gaps, no duplicates
        stored = {(part, first): (count, payload) for part in (0, 1) for first, count, payload in logs[part]}
        for t, i, part, first, count, payload in acks:
            assert stored.get((part, first)) == (count, payload), (t, i, part, first)
        last_i: dict[int, int] = {}
        for t, i, *_ in last_round:
            last_i[t] = max(last_i.get(t, -1), i)
        for t, i in last_i.items():
            assert int(state[b"t%d" % t]) >= i
        assert s.last_sequence() >= len(acks)
        r = s.commit(Commit(appends=[Append(1, 0, b"after", 1), Append(1, 1, b"after", 1)]))
        assert r.first_offsets == [ends[0], ends[1]]
        assert r.sequence == s.last_sequence()
    finally:
        s.close()


def parse_ack(line: bytes) -> tuple[int, int, int, int, int, bytes]:
    _, t, i, part, first, count, payload = line.split()
    return int(t), int(i), int(part), int(first), int(count), payload


def test_real_disk_full_surfaces_as_disk_full(tmp_path: Path) -> None:
    """On a tiny tmpfs (needs root and mount), a full disk fails commits with DiskFull."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount tmpfs here")
    try:
        filler = mnt / "filler"
        filler.write_bytes(b"\0" * (4 << 20))
        path = str(mnt / "db")
        s = RocksDBStorage(path, block_cache_size=1 << 20)
        acked: list[tuple[int, bytes]] = []
        with pytest.raises(DiskFull) as e:
            for _ in range(1000):
                payload = os.urandom(200_000)
                r = s.commit(Commit(appends=[Append(1, 0, payload, 1)]))
                acked.append((r.first_offsets[0], payload))
        assert e.value.sqlstate == "53100"
        assert acked
        assert s.end_offset(1, 0) == len(acked)  # nothing assigned to the failed commit
        assert s.last_sequence() == len(acked)
        with pytest.raises(DiskFull):  # RocksDB stays read-only after a failed WAL write
            s.commit(Commit(appends=[Append(1, 0, b"x", 1)]))
        try:
            s.close()
        except (DiskFull, InternalError):
            pass
        # Free space and reopen: every acknowledged batch is there and offsets continue.
        filler.unlink()
        s = RocksDBStorage(path, block_cache_size=1 << 20)
        try:
            with s.snapshot() as snap:
                found = {first: payload for first, _, payload in snap.read(1, 0)}
                end = snap.end_offset(1, 0)
            assert all(found.get(first) == payload for first, payload in acked)
            assert end >= len(acked)
            assert s.commit(Commit(appends=[Append(1, 0, b"x", 1)])).first_offsets == [end]
        finally:
            s.close()
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


class _DiskFullDB:
    """Stands in for the Rdict: writes fail with ENOSPC (or are counted once space is "freed")."""

    def __init__(self, db: object) -> None:
        self.db = db
        self.full = True
        self.writes = 0

    def write(self, wb: object, options: object) -> None:
        self.writes += 1
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.db.write(wb, options)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self.db, name)


def test_after_a_failed_rocksdb_write_no_write_is_attempted_until_reopen(storage: RocksDBStorage) -> None:
    """RocksDB keeps a failed WAL write's error (and may still persist a later "failed" write), so
    the storage stops writing: every commit fails with 53100 until restart, reads keep working."""
    storage.commit(Commit(appends=[Append(1, 0, b"kept", 1)]))
    db = _DiskFullDB(storage._db)
    storage._db = db  # type: ignore[assignment]
    with pytest.raises(DiskFull) as e:
        storage.commit(Commit(appends=[Append(1, 0, b"lost", 1)]))
    assert e.value.sqlstate == "53100"
    assert "until the server restarts" in e.value.message and e.value.hint
    db.full = False  # space freed: still no write reaches RocksDB
    with pytest.raises(DiskFull):
        storage.commit(Commit(appends=[Append(1, 0, b"after", 1)]))
    assert db.writes == 1
    assert storage.end_offset(1, 0) == 1
    with storage.snapshot() as snap:
        assert list(snap.read(1, 0)) == [(0, 1, b"kept")]
    storage._db = db.db  # type: ignore[assignment]
    reopened = reopen(storage)
    try:
        assert reopened.commit(Commit(appends=[Append(1, 0, b"next", 1)])).first_offsets == [1]
        with reopened.snapshot() as snap:
            assert list(snap.read(1, 0)) == [(0, 1, b"kept"), (1, 1, b"next")]
    finally:
        reopened.close()


def test_snapshot_end_offsets_are_the_logs_without_a_seek(storage: RocksDBStorage) -> None:
    """A snapshot answers end_offset from the ends it took with its iterator (a seek onto a
    partition's last batch reads that batch's whole block: tens of MB after a large COPY). They
    must be what a seek of the same snapshot finds, through appends, drops and a reopen, and stay
    those of the moment it was taken."""
    import random

    from rocksdict import ReadOptions

    from streamdb.storage.rocksdb import RocksDBSnapshot

    def seeked(s: RocksDBStorage) -> dict[tuple[int, int], int]:
        snap = RocksDBSnapshot(s._db.iter(ReadOptions()))  # no ends given: each one a seek
        try:
            return {(r, p): snap.end_offset(r, p) for r in range(1, 6) for p in range(3)}
        finally:
            snap.close()

    rng = random.Random(7)
    for round_ in range(60):
        if rng.random() < 0.1:
            storage.commit(Commit(drop_relations=[rng.randint(1, 5)]))
        else:
            storage.commit(Commit(appends=[Append(rng.randint(1, 5), rng.randint(0, 2), b"x" * rng.randint(1, 64),
                                                  rng.randint(1, 9)) for _ in range(rng.randint(1, 4))]))
        with storage.snapshot() as snap:
            taken = {(r, p): snap.end_offset(r, p) for r in range(1, 6) for p in range(3)}
            assert taken == seeked(storage), round_
            storage.commit(Commit(appends=[Append(1, 0, b"later", 3)]))
            assert {(r, p): snap.end_offset(r, p) for r in range(1, 6) for p in range(3)} == taken
    ends = seeked(storage)
    storage = reopen(storage)
    with storage.snapshot() as snap:
        assert {(r, p): snap.end_offset(r, p) for r in range(1, 6) for p in range(3)} == ends
    storage.close()


def test_end_keys_follow_every_partition_through_drops_and_an_older_server(storage: RocksDBStorage) -> None:
    """Every append writes its partition's end key (what Spark's tasks read instead of seeking
    onto the last batch) in the same batch; a drop removes them; opening repairs keys that a
    server of an older version left stale or missing."""
    from streamdb.storage.rocksdb import META_END, META_FORMAT, WriteBatch, end_key

    def end_keys(s: RocksDBStorage) -> dict[bytes, int]:
        out = {}
        it = s._db.iter()
        it.seek(META_END)
        while it.valid() and it.key().startswith(META_END):
            out[it.key()] = int.from_bytes(it.value(), "big")
            it.next()
        return out

    def expected(s: RocksDBStorage) -> dict[bytes, int]:
        return {end_key(r, p): n for r, parts in s._next_offsets.items() for p, n in parts.items()}

    storage.commit(Commit(appends=[Append(1, 0, b"a", 3), Append(1, 1, b"b", 2), Append(2, 0, b"c", 5)]))
    storage.commit(Commit(appends=[Append(1, 0, b"d", 4)]))
    assert end_keys(storage) == {end_key(1, 0): 7, end_key(1, 1): 2, end_key(2, 0): 5} == expected(storage)
    storage.commit(Commit(drop_relations=[1], appends=[Append(3, 2, b"e", 1)]))
    assert end_keys(storage) == {end_key(2, 0): 5, end_key(3, 2): 1} == expected(storage)
    # As a server without end keys would leave them: one stale, one missing, one of no partition
    # (in a database of format 1: end keys lag the log there; in format 2 they bound it).
    wb = WriteBatch(raw_mode=True)
    wb.put(META_FORMAT, (1).to_bytes(8, "big"))
    wb.put(end_key(2, 0), (2).to_bytes(8, "big"))
    wb.delete(end_key(3, 2))
    wb.put(end_key(9, 0), (4).to_bytes(8, "big"))
    storage._db.write(wb)
    storage = reopen(storage)
    try:
        assert end_keys(storage) == {end_key(2, 0): 5, end_key(3, 2): 1} == expected(storage)
    finally:
        storage.close()


def test_weight_sums_follow_the_appends_that_carry_weights(storage: RocksDBStorage,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A partition's running weight sum (what a view's row count starts from) moves with every
    append that carries `weights`, in the append's own write, within a group too; an append
    without weights leaves it behind the partition's end (still true of the offsets it names),
    and it never starts again past offset 0; a drop clears it; a reopen keeps it, and drops one
    past its partition's end."""
    from streamdb.storage.rocksdb import _WSUM, WriteBatch, weight_sum_key

    def kept(s: RocksDBStorage, rel: int, part: int = 0) -> tuple[int, int] | None:
        with s.snapshot() as snap:
            return snap.weight_sum(rel, part)

    storage.commit(Commit(appends=[Append(1, 0, b"a", 3, weights=3), Append(1, 1, b"b", 2, weights=-2),
                                   Append(2, 0, b"s", 5)]))
    assert (kept(storage, 1), kept(storage, 1, 1), kept(storage, 2)) == ((3, 3), (2, -2), None)
    with storage.snapshot() as before:
        storage.commit(Commit(appends=[Append(1, 0, b"c", 4, weights=1), Append(1, 0, b"d", 1, weights=-1)]))
        assert before.weight_sum(1, 0) == (3, 3)  # a snapshot sees the sum of its own log
    assert kept(storage, 1) == (8, 3)

    # Three commits in one group: the sum moves within it, and a weightless append stops it.
    blocker, release = hold_the_writer(storage, monkeypatch)
    f1 = storage._submit(Commit(appends=[Append(1, 0, b"e", 2, weights=2)]))
    f2 = storage._submit(Commit(appends=[Append(1, 1, b"f", 1)]))
    f3 = storage._submit(Commit(appends=[Append(1, 1, b"g", 1, weights=1)]))
    release.set()
    for f in (blocker, f1, f2, f3):
        f.result(10)
    monkeypatch.undo()
    assert kept(storage, 1) == (10, 5)
    assert kept(storage, 1, 1) == (2, -2)  # behind the end (4): the records after it are counted by reading
    storage.commit(Commit(appends=[Append(1, 1, b"h", 1, weights=1)]))
    assert kept(storage, 1, 1) == (2, -2)

    storage.commit(Commit(drop_relations=[1], appends=[Append(1, 0, b"i", 2, weights=2)]))
    assert (kept(storage, 1), kept(storage, 1, 1)) == ((2, 2), None)
    storage.commit(Commit(appends=[Append(3, 0, b"j", 1, weights=1)]))
    wb = WriteBatch(raw_mode=True)  # as if written by hand past its partition's end
    wb.put(weight_sum_key(3, 0), _WSUM.pack(9, 9))
    storage._db.write(wb)
    storage = reopen(storage)
    try:
        assert (kept(storage, 1), kept(storage, 3)) == ((2, 2), None)
        storage.commit(Commit(appends=[Append(1, 0, b"k", 1, weights=-1)]))
        assert kept(storage, 1) == (3, 1)
        with pytest.raises(InternalError, match="weight sum"):
            storage.commit(Commit(appends=[Append(1, 0, b"l", 1, weights=1 << 63)]))
    finally:
        storage.close()


def test_large_batches_are_ingested_files_readable_like_any_batch(tmp_path: Path) -> None:
    """A batch of at least `ingest_bytes` to a partition already written goes to an SST file of
    its own, ingested on the lowest level it does not overlap: read back, ended, summed and
    reopened like a batch of the WriteBatch; a snapshot taken before it does not see it. The
    first batch of a partition, a batch after it in the same group and a batch after a drop in
    the same group go through the WriteBatch (no durable end key bounds them)."""
    s = RocksDBStorage(str(tmp_path / "db"), ingest_bytes=1000)
    big = [bytes([i]) * 5000 for i in range(4)]
    try:
        s.commit(Commit(appends=[Append(1, 0, big[0], 10, weights=10)]))  # first batch: WriteBatch
        assert s._ingested == 0
        with s.snapshot() as before:
            s.commit(Commit(appends=[Append(1, 0, big[1], 5, weights=5), Append(1, 0, b"small", 1, weights=-1)],
                            puts=[("meta", b"k", b"v")]))
            assert s._ingested == 1
            assert list(before.read(1, 0)) == [(0, 10, big[0])]
        # On the bottom level at once (nothing there overlaps it), not through L0 and compactions.
        levels = [s._db.property_int_value(f"rocksdb.num-files-at-level{k}") for k in range(7)]
        assert levels == [0, 0, 0, 0, 0, 0, 1]
        with s.snapshot() as snap:
            assert list(snap.read(1, 0)) == [(0, 10, big[0]), (10, 5, big[1]), (15, 1, b"small")]
            assert (snap.end_offset(1, 0), snap.weight_sum(1, 0), snap.get("meta", b"k")) == (16, (16, 14), b"v")
        s.commit(Commit(appends=[Append(9, 0, b"first", 1), Append(9, 0, big[2], 1)]))
        assert s._ingested == 1
        s.commit(Commit(drop_relations=[1], appends=[Append(1, 0, big[2], 3)]))
        assert s._ingested == 1
        assert batches(s, 1, 0) == [(0, 3, big[2])]
        s.commit(Commit(appends=[Append(1, 0, big[3], 2)]))
        assert s._ingested == 2
        s = reopen(s)
        assert batches(s, 1, 0) == [(0, 3, big[2]), (3, 2, big[3])]
        assert os.listdir(os.path.join(s.path, "ingest")) == []
    finally:
        s.close()


def test_an_ingested_batch_whose_commit_did_not_land_is_gone_after_reopen(tmp_path: Path) -> None:
    """The crash between an ingested file and its group's WriteBatch: the batch lies past its
    partition's end key, no reader sees it, the commit fails, and the next open deletes it, so
    the offsets it would have taken are assigned again (format 2: end keys bound the log)."""
    from streamdb.storage.rocksdb import Rdict

    s = RocksDBStorage(str(tmp_path / "db"), ingest_bytes=1000)
    try:
        s.commit(Commit(appends=[Append(3, 1, b"a" * 10, 4)]))

        def write_then_die(*args: object) -> None:
            raise RuntimeError("killed between the ingest and the write")

        real_write = Rdict.write
        Rdict.write = write_then_die  # type: ignore[method-assign]
        try:
            with pytest.raises(InternalError):
                s.commit(Commit(appends=[Append(3, 1, b"b" * 2000, 6)]))
        finally:
            Rdict.write = real_write  # type: ignore[method-assign]
        with s.snapshot() as snap:
            assert list(snap.read(3, 1, 0, snap.end_offset(3, 1))) == [(0, 4, b"a" * 10)]
        s = reopen(s)
        assert batches(s, 3, 1) == [(0, 4, b"a" * 10)]
        assert s.commit(Commit(appends=[Append(3, 1, b"c", 2)])).first_offsets == [4]
        assert batches(s, 3, 1) == [(0, 4, b"a" * 10), (4, 2, b"c")]
    finally:
        s.close()


def test_the_keys_of_a_format_2_directory_move_before_the_log(tmp_path: Path) -> None:
    """Formats 1 and 2 kept the stores' and metadata's keys ("S", "M") after the log's; opening
    one moves them before it ("D", "C"), and everything reads as it did."""
    from rocksdict import Options, Rdict, WriteBatch

    from streamdb.storage.rocksdb import META, STORE

    path = str(tmp_path / "db")
    s = RocksDBStorage(path)
    s.commit(Commit(appends=[Append(1, 0, b"a", 3, weights=2), Append(2, 1, b"b", 1)],
                    puts=[("catalog", b"r1", b"stream"), ("state:2", b"k", b"v")]))
    s.close()
    db = Rdict(path, Options(raw_mode=True))  # rewritten as a server of format 2 left it
    wb = WriteBatch(raw_mode=True)
    for key, value in db.items():
        if key[:1] in (META, STORE):
            wb.delete(key)
            wb.put({META: b"M", STORE: b"S"}[key[:1]] + key[1:], value)
    wb.put(b"Mformat", (2).to_bytes(8, "big"))
    db.write(wb)
    assert db.get(META + b"format") is None
    db.close()

    s = RocksDBStorage(path)
    try:
        with s.snapshot() as snap:
            assert list(snap.read(1, 0)) == [(0, 3, b"a")] and list(snap.read(2, 1)) == [(0, 1, b"b")]
            assert (snap.end_offset(1, 0), snap.weight_sum(1, 0)) == (3, (3, 2))
            assert (snap.get("catalog", b"r1"), snap.get("state:2", b"k")) == (b"stream", b"v")
        assert s.commit(Commit(appends=[Append(1, 0, b"c", 1)])).sequence == 2
        assert sorted({k[:1] for k in s._db.keys()}) == [META, STORE, b"L"]
        assert int.from_bytes(s._db[META + b"format"], "big") == 3
    finally:
        s.close()


def test_the_newest_relations_ingested_batches_land_on_the_bottom_level(tmp_path: Path) -> None:
    """The commits' keys sort before the log, so after they are flushed and compacted no file
    spans past the newest relation's last batch: its large batches go to the bottom level and
    no compaction rewrites them (formats 1 and 2 put them one level up)."""
    s = RocksDBStorage(str(tmp_path / "db"), ingest_bytes=1000)
    try:
        for rel in (1, 2):
            s.commit(Commit(appends=[Append(rel, 0, b"x", 1)], puts=[("meta", b"progress", b"1")]))
        s._db.flush(True)
        s._db.compact_range(None, None)
        for i in range(3):
            s.commit(Commit(appends=[Append(2, 0, bytes([i]) * 5000, 10)], puts=[("meta", b"progress", b"2")]))
        assert s.batches_ingested == 3
        levels = [s._db.property_int_value(f"rocksdb.num-files-at-level{k}") for k in range(7)]
        assert levels[:6] == [0] * 6 and levels[6] >= 4, levels
    finally:
        s.close()
