"""`streamdb` command line."""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable

from streamdb.config import load_settings
from streamdb.errors import StreamDBError

log = logging.getLogger("streamdb")
# Heap blocks at least this large get mmaps of their own (_fixed_mmap_threshold).
MMAP_THRESHOLD_BYTES = 4 << 20


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="streamdb", description="StreamDB: a streaming SQL database")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run the server")
    s.add_argument("--config", help="TOML configuration file (also STREAMDB_CONFIG)")
    s.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, help="port to listen on (default 6875)")
    s.add_argument("--data-dir", dest="data_dir", help="data directory (default ./streamdb-data)")
    s.add_argument("--spark-master", dest="spark_master", help="Spark master URL (default local[*])")
    s.add_argument("--log", choices=["rocksdb", "kafka"], help="log backend (default rocksdb)")
    s.add_argument("--kafka-bootstrap", dest="kafka_bootstrap", help="Kafka bootstrap servers")
    s.add_argument("--log-level", dest="log_level", choices=["debug", "info", "warning", "error"])
    s.add_argument("--spark-read-threshold-rows", dest="spark_read_threshold_rows", type=int,
                   help="ad hoc reads over more rows than this run on Spark")
    s.add_argument("--max-connections", dest="max_connections", type=int,
                   help="further clients are refused with 53300 (default 100)")
    s.add_argument("--statement-timeout-ms", dest="statement_timeout_ms", type=int,
                   help="default statement_timeout of sessions in ms, 0 = off (default 300000)")
    s.add_argument("--auth-method", dest="auth_method", choices=["trust", "scram-sha-256", "md5"],
                   help="client authentication (default trust, allowed only on a loopback address)")
    s.add_argument("--tls-cert-file", dest="tls_cert_file", help="TLS certificate (PEM); with --tls-key-file")
    s.add_argument("--tls-key-file", dest="tls_key_file", help="TLS private key (PEM)")
    s.add_argument("--tls-required", dest="tls_required", action="store_const", const=True,
                   help="refuse plaintext connections")
    s.add_argument("--console-port", dest="console_port", type=int,
                   help="port of the web console and /metrics (default 6876, 0 = any free port)")
    s.add_argument("--no-console", dest="console", action="store_const", const=False,
                   help="no web console (UI and /api); /metrics is still served on the console port")
    s.add_argument("--no-metrics", dest="metrics", action="store_const", const=False,
                   help="no /metrics endpoint (with --no-console: no HTTP listener at all)")
    return p


def _deeper_recursion() -> None:
    """sqlglot parses and plans by recursion, ~20 Python frames per level of nesting: with
    Python's default limit of 1,000 a statement with 50 nested parentheses failed (54001). 20,000
    frames take 8 MB of C stack at most here (measured: a RecursionError, not a crash, at that
    depth on the main thread); worker threads, which plan long statements, get 64 MB."""
    sys.setrecursionlimit(20_000)
    threading.stack_size(64 * 1024 * 1024)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    cli = {k: v for k, v in vars(args).items() if k not in ("command", "config")}
    try:
        settings = load_settings(cli, config_file=args.config)
    except StreamDBError as e:
        print(f"streamdb: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("py4j", "sqlglot"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    _deeper_recursion()
    _fixed_mmap_threshold()
    _arrow_memory_pool()
    from streamdb.server import run_server

    try:
        with asyncio.Runner(loop_factory=_event_loop_factory()) as runner:
            return runner.run(run_server(settings, install_signals=(signal.SIGTERM, signal.SIGINT)))
    except StreamDBError as e:
        log.error("%s", e)
        return 1


def _fixed_mmap_threshold() -> None:
    """glibc raises its mmap threshold to the size of each large block freed (up to 32 MiB), after
    which a view's backfill (its 250,000-row batches and their Arrow payloads) is served from the
    heap, which it never gives back: the server held ~1.2 GiB after backfilling Nexmark q0's 9.2M
    rows (560 MiB with 4 MiB fixed, the backfill's rate within the noise). A fixed threshold keeps
    blocks this large in mmaps of their own, returned when freed. Only this process: the Spark JVM
    keeps glibc's defaults (with 1 MiB in its environment its tasks took 40% more CPU)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return  # not glibc
    libc.mallopt(-3, MMAP_THRESHOLD_BYTES)  # M_MMAP_THRESHOLD


def _arrow_memory_pool() -> None:
    """Arrow's buffers from jemalloc, not pyarrow's default mimalloc (unless
    ARROW_DEFAULT_MEMORY_POOL chooses): mimalloc gives a freed huge block back to the system at
    once, so a buffer or hash table grown by doubling faults its pages in again at each step.
    The first read of a session view after 1M clicks (its cached rows brought up to date: one
    hash pass over 1M keys of ~94 bytes) took 2.35 s with mimalloc, 1.32 s with jemalloc and
    1.27 s with glibc's malloc; Nexmark q0 at 1M events ran 5-8% faster and the server's peak
    RSS was ~40 MiB lower; point reads and ingest moved within the noise (docs/serving.md)."""
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    import pyarrow as pa

    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except NotImplementedError:  # a pyarrow built without jemalloc
        return


def _event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop (libuv; a dependency where it has wheels) where it is installed: the
    same asyncio API, with the loop, transports and futures in C. Point reads over the wire took
    ~10% less of the server's CPU (docs/serving.md). Otherwise asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


if __name__ == "__main__":
    sys.exit(main())
