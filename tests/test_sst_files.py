"""The SST files of large log batches, built by a helper process (storage/sst_files.py)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from rocksdict import IngestExternalFileOptions, Options, Rdict

from streamdb.storage import Append, Commit
from streamdb.storage.rocksdb import RocksDBStorage
from streamdb.storage.sst_files import MAX_STARTS, SstFileBuilder, build_sst, sst_options


def _read_back(tmp_path: Path, files: list[tuple[str, bytes]]) -> dict[bytes, bytes]:
    db = Rdict(str(tmp_path / "db"), Options(raw_mode=True))
    try:
        options = IngestExternalFileOptions()
        options.set_move_files(True)
        db.ingest_external_file([path for path, _ in files], options)
        return {key: db[key] for _, key in files}
    finally:
        db.close()


def _gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:
            os.waitpid(pid, os.WNOHANG)  # a child: reaped, or it stays a zombie
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return False


def test_the_helper_builds_every_file_after_the_first(tmp_path: Path) -> None:
    """The first build starts the helper and is done here; the next go to the helper. The files
    hold their key and payload, compressed as the database's bottom level is."""
    builder = SstFileBuilder("zstd")
    payloads = [bytes([i]) * 200_000 + os.urandom(1000) for i in range(4)]
    files = [(str(tmp_path / f"{i}.sst"), b"L%08d" % i) for i in range(4)]
    try:
        for (path, key), payload in zip(files, payloads, strict=True):
            builder.build(path, key, payload)
        assert (builder.built_here, builder.built_by_helper) == (1, 3)
        pid = builder.helper_pid
        assert pid is not None
        # Compressed (200 kB of one byte): the helper used the table options, not RocksDB's defaults.
        assert all(os.path.getsize(path) < 20_000 for path, _ in files)
        # The hand-off files are gone.
        assert sorted(p.name for p in tmp_path.iterdir()) == ["0.sst", "1.sst", "2.sst", "3.sst"]
    finally:
        builder.close()
    assert _gone(pid)
    assert _read_back(tmp_path, files) == {key: payload for (_, key), payload in zip(files, payloads, strict=True)}


def test_a_lost_helper_is_replaced_and_its_file_built_here(tmp_path: Path) -> None:
    """A helper killed between builds: that build is done here, the next starts a new helper;
    after MAX_STARTS of them every file is built here."""
    builder = SstFileBuilder("lz4")
    files: list[tuple[str, bytes]] = []
    payloads: list[bytes] = []

    def build() -> None:
        n = len(files)
        files.append((str(tmp_path / f"{n}.sst"), b"k%04d" % n))
        payloads.append(os.urandom(5000))
        builder.build(files[-1][0], files[-1][1], payloads[-1])

    try:
        build()
        build()
        assert (builder.built_here, builder.built_by_helper) == (1, 1)
        for _ in range(MAX_STARTS - 1):
            pid = builder.helper_pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            build()  # lost: built here
            build()  # starts the next helper, built here
            build()  # by the new helper
        assert (builder.built_here, builder.built_by_helper) == (1 + 2 * (MAX_STARTS - 1), MAX_STARTS)
        pid = builder.helper_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        for _ in range(3):
            build()
        assert builder.helper_pid is None
        assert (builder.built_here, builder.built_by_helper) == (4 + 2 * (MAX_STARTS - 1), MAX_STARTS)
    finally:
        builder.close()
    assert _read_back(tmp_path, files) == {key: payload for (_, key), payload in zip(files, payloads, strict=True)}


def test_a_build_the_helper_fails_is_done_here_and_fails_here_too(tmp_path: Path) -> None:
    """A file that cannot be written (its directory is gone) fails in the helper, then here: the
    commit gets the error."""
    builder = SstFileBuilder("zstd")
    try:
        builder.build(str(tmp_path / "a.sst"), b"a", b"x" * 100)
        with pytest.raises(Exception, match="(?i)no such file|not found|IO error"):
            builder.build(str(tmp_path / "missing" / "b.sst"), b"b", b"y" * 100)
        assert builder.helper_pid is None  # stopped; the next build starts another
        builder.build(str(tmp_path / "c.sst"), b"c", b"z" * 100)
        builder.build(str(tmp_path / "d.sst"), b"d", b"w" * 100)
        assert (builder.built_here, builder.built_by_helper) == (2, 1)
    finally:
        builder.close()


def test_storage_ingests_files_the_helper_built_and_ends_it_at_close(tmp_path: Path) -> None:
    s = RocksDBStorage(str(tmp_path / "db"), ingest_bytes=1000)
    big = [bytes([i]) * 5000 for i in range(5)]
    try:
        s.commit(Commit(appends=[Append(1, 0, b"first", 1)]))
        for payload in big:
            s.commit(Commit(appends=[Append(1, 0, payload, 2)]))
        assert s.batches_ingested == 5
        assert (s.sst_files.built_here, s.sst_files.built_by_helper) == (1, 4)
        pid = s.sst_files.helper_pid
        assert pid is not None
    finally:
        s.close()
    assert _gone(pid)
    s = RocksDBStorage(str(tmp_path / "db"))
    try:
        with s.snapshot() as snap:
            assert list(snap.read(1, 0)) == [(0, 1, b"first")] + [(1 + 2 * i, 2, p) for i, p in enumerate(big)]
    finally:
        s.close()


def test_build_sst_here_and_by_the_helper_read_the_same(tmp_path: Path) -> None:
    build_sst(sst_options("zstd"), str(tmp_path / "here.sst"), b"h", b"payload")
    assert _read_back(tmp_path, [(str(tmp_path / "here.sst"), b"h")]) == {b"h": b"payload"}


def test_a_hung_helper_is_killed_and_its_file_built_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A helper that does not answer (stopped by SIGSTOP) within the timeout is killed; the file
    is built here and the next build starts a new helper."""
    import streamdb.storage.sst_files as sst_files

    builder = SstFileBuilder("zstd")
    try:
        builder.build(str(tmp_path / "a.sst"), b"a", b"1" * 100)
        builder.build(str(tmp_path / "b.sst"), b"b", b"2" * 100)  # the helper started: no timeout yet
        hung = builder.helper_pid
        assert hung is not None and builder.built_by_helper == 1
        monkeypatch.setattr(sst_files, "ANSWER_TIMEOUT_S", 0.5)
        os.kill(hung, signal.SIGSTOP)
        builder.build(str(tmp_path / "c.sst"), b"c", b"3" * 100)
        assert builder.helper_pid is None and _gone(hung)
        monkeypatch.setattr(sst_files, "ANSWER_TIMEOUT_S", 120.0)  # the next helper may start slowly
        builder.build(str(tmp_path / "d.sst"), b"d", b"4" * 100)
        builder.build(str(tmp_path / "e.sst"), b"e", b"5" * 100)
        assert (builder.built_here, builder.built_by_helper) == (3, 2)
    finally:
        builder.close()
    names = ["a", "b", "c", "d", "e"]
    files = [(str(tmp_path / f"{n}.sst"), n.encode()) for n in names]
    assert _read_back(tmp_path, files) == {n.encode(): str(i + 1).encode() * 100 for i, n in enumerate(names)}


def test_a_helper_that_answers_half_a_line_and_hangs_is_killed(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The timeout holds for the whole answer line: a helper that writes part of one and stops
    answering is killed, and the file is built here."""
    import sys

    import streamdb.storage.sst_files as sst_files

    half = "import sys, time; sys.stdin.readline(); sys.stdout.write('{\"ok'); sys.stdout.flush(); time.sleep(60)"
    monkeypatch.setattr(sst_files, "helper_command", lambda compression: [sys.executable, "-c", half])
    monkeypatch.setattr(sst_files, "ANSWER_TIMEOUT_S", 1.0)
    builder = SstFileBuilder("zstd")
    try:
        builder.build(str(tmp_path / "a.sst"), b"a", b"1" * 100)  # starts the (fake) helper
        hung = builder.helper_pid
        assert hung is not None
        builder.build(str(tmp_path / "b.sst"), b"b", b"2" * 100)
        assert builder.helper_pid is None and _gone(hung)
        assert (builder.built_here, builder.built_by_helper) == (2, 0)
    finally:
        builder.close()
    files = [(str(tmp_path / "a.sst"), b"a"), (str(tmp_path / "b.sst"), b"b")]
    assert _read_back(tmp_path, files) == {b"a": b"1" * 100, b"b": b"2" * 100}
