"""Large log batches as SST files, written by a helper process.

rocksdict holds the GIL through ``SstFileWriter``'s put and finish, and finish compresses and
syncs the whole file: ~100 ms for a view backfill's 30 MB batch, during which no other thread of
the server ran (the event loop, the pipelines' sinks reading Spark's next batch). Over a
10M-event backfill of Nexmark q0's view that was 5.1 of 19 s (py-spy ``--gil``).

A helper process (``python -m streamdb.storage.sst_files``) builds the files instead. The
storage's writer thread hands it the payload through a file beside the SST (one ``write``, the
GIL released) and a line on its stdin, then waits for its answer without the GIL. The helper
exits when its stdin closes: at the storage's close, or when the server dies.

The helper starts at the first build, which is done here while it starts. If it dies, hangs or
fails a build, that build is done here and the next starts a new helper; after ``MAX_STARTS``
losses every file is built here (as before the helper, only slower for the other threads).
Whatever fails here fails the commit, as it did.

The ingestion itself (``ingest_external_file``: a link and the MANIFEST's sync, 12 ms alone and
~54 ms under a backfill's disk load) still holds the GIL: it changes the database, which only its
one process may open.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from rocksdict import BlockBasedOptions, DBCompressionType, Options, SstFileWriter

from streamdb.errors import ConfigurationError

log = logging.getLogger(__name__)

# ZSTD level 1, not its default 3: the bottom level is where compaction rewrites the log's
# payloads, and level 3 took ~10 of 41 CPU s of a 10M-event view backfill on 2 cores (level 1:
# ~5.5 s, for ~1.4x the disk; docs/storage.md, "Tuning").
BOTTOMMOST_ZSTD_LEVEL = 1
BLOCK_SIZE = 32 << 10
MAX_STARTS = 3
ANSWER_TIMEOUT_S = 120.0  # a hung helper: its build is done here, and it is killed


def compression_type(name: str) -> DBCompressionType:
    kinds = {
        "none": DBCompressionType.none,
        "snappy": DBCompressionType.snappy,
        "lz4": DBCompressionType.lz4,
        "zstd": DBCompressionType.zstd,
    }
    if name not in kinds:
        raise ConfigurationError(f"unknown storage compression {name!r} (use one of {', '.join(kinds)})")
    return kinds[name]()


def set_table_options(opts: Options, compression: str, table: BlockBasedOptions) -> None:
    """What decides an SST file's bytes, for the database and the files built for it alike."""
    # Only the bottom level is compressed: the levels above it hold ~10% of the data and every
    # byte passes through them (the flush, the first compactions, the freshest reads), so
    # compressing them cost CPU for little disk (a 10M-event view backfill: 485k -> 522k
    # events/s, 1,254 -> 1,326 MiB on disk; docs/storage.md, "Tuning"). An SST file built for
    # ingestion is compressed as the bottom level is, where it lands.
    opts.set_compression_type(DBCompressionType.none())
    opts.set_bottommost_compression_type(compression_type(compression))
    opts.set_bottommost_compression_options(-14, BOTTOMMOST_ZSTD_LEVEL, 0, 0, True)
    table.set_block_size(BLOCK_SIZE)
    table.set_format_version(5)
    opts.set_block_based_table_factory(table)


def sst_options(compression: str) -> Options:
    opts = Options(raw_mode=True)
    set_table_options(opts, compression, BlockBasedOptions())
    return opts


def build_sst(options: Options, path: str, key: bytes, payload: bytes) -> None:
    """An SST file at `path` holding the one key, synced."""
    writer = SstFileWriter(options)
    writer.open(path)
    writer[key] = payload
    writer.finish()


def helper_command(compression: str) -> list[str]:
    return [sys.executable, "-m", "streamdb.storage.sst_files", compression]


class _HelperLost(Exception):
    pass


class SstFileBuilder:
    """Builds the SST files of one storage directory's ingestions. One thread calls `build`
    (the storage's writer); `close` comes after its last call."""

    def __init__(self, compression: str) -> None:
        self._compression = compression
        self._options = sst_options(compression)
        self._helper: subprocess.Popen[bytes] | None = None
        self._starts = 0
        self.built_by_helper = 0
        self.built_here = 0

    @property
    def helper_pid(self) -> int | None:
        return self._helper.pid if self._helper is not None else None

    def build(self, path: str, key: bytes, payload: bytes) -> None:
        helper = self._helper
        if helper is not None:
            try:
                self._build_by(helper, path, key, payload)
                self.built_by_helper += 1
                return
            except Exception as exc:  # noqa: BLE001 - whatever the helper did, the file is built here
                log.warning("storage: the SST file helper (pid %d) failed (%s); building the file in the "
                            "server", helper.pid, exc)
                self._stop_helper()  # what it left at `path`, the build here overwrites
        elif self._starts < MAX_STARTS:
            self._start_helper()  # for the next build: this one is done here while it starts
        build_sst(self._options, path, key, payload)
        self.built_here += 1

    def close(self) -> None:
        self._stop_helper()

    def _start_helper(self) -> None:
        self._starts += 1
        if self._starts == MAX_STARTS:
            log.warning("storage: starting the SST file helper for the last time; after it, files are "
                        "built in the server")
        package_root = str(Path(__file__).resolve().parents[2])  # the helper runs the server's code
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (package_root, os.environ.get("PYTHONPATH")) if p))
        try:
            self._helper = subprocess.Popen(
                helper_command(self._compression),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True)
        except Exception as exc:  # noqa: BLE001 - no helper (no interpreter to run it): files are built here
            log.warning("storage: could not start the SST file helper (%s); building files in the server", exc)
            self._helper = None

    def _build_by(self, helper: subprocess.Popen[bytes], path: str, key: bytes, payload: bytes) -> None:
        assert helper.stdin is not None and helper.stdout is not None
        handoff = path + ".payload"
        try:
            with open(handoff, "wb") as f:
                f.write(payload)
            request = {"payload": handoff, "path": path, "key": key.hex()}
            helper.stdin.write(json.dumps(request).encode() + b"\n")
            helper.stdin.flush()
            answer = json.loads(self._answer(helper))
            if "error" in answer:
                raise _HelperLost(answer["error"])
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(handoff)

    @staticmethod
    def _answer(helper: subprocess.Popen[bytes]) -> bytes:
        """The helper's answer line, read from its pipe (not through the pipe's buffered reader) so
        that the timeout holds for the whole line, a part of one included."""
        assert helper.stdout is not None
        fd = helper.stdout.fileno()
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        line = b""
        while not line.endswith(b"\n"):
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise _HelperLost(f"no answer in {ANSWER_TIMEOUT_S:.0f} s")
            chunk = os.read(fd, 4096)
            if not chunk:
                raise _HelperLost(f"its output ended (exit status {helper.poll()})")
            line += chunk
        return line

    def _stop_helper(self) -> None:
        helper, self._helper = self._helper, None
        if helper is None:
            return
        with contextlib.suppress(OSError):
            assert helper.stdin is not None
            helper.stdin.close()  # it exits at the end of its input
        try:
            helper.wait(timeout=5)
        except subprocess.TimeoutExpired:
            helper.kill()
            helper.wait()
        if helper.stdout is not None:
            helper.stdout.close()


def main(argv: list[str]) -> int:
    """The helper: one JSON request per line on stdin, one JSON answer per line on stdout."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the server's to handle
    options = sst_options(argv[0])
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        request = json.loads(line)
        payload = b""
        try:
            with open(request["payload"], "rb") as f:
                payload = f.read()
            build_sst(options, request["path"], bytes.fromhex(request["key"]), payload)
            answer: dict[str, object] = {"ok": True}
        except Exception as exc:  # noqa: BLE001 - reported to the server, which builds the file itself
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        del payload
        out.write(json.dumps(answer).encode() + b"\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
