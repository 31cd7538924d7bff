"""Shared by the benchmarks that time FLUSH after a one-row write (idle_views.py,
recomputed_views.py): the samples, and the results file with each step's ratio to the first."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent / "nexmark"))

from run_streamdb import Server  # noqa: E402


def arguments(steps: str, steps_help: str, out: Path) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", default=steps, help=steps_help)
    ap.add_argument("--samples", type=int, default=7)
    ap.add_argument("--spark-master", default="local[2]")
    ap.add_argument("--out", type=Path, default=out)
    return ap.parse_args()


@contextlib.contextmanager
def fresh_server(spark_master: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection to a fresh server (real Spark) on a temporary data directory."""
    with tempfile.TemporaryDirectory() as d:
        server = Server(Path(d), spark_master)
        try:
            with server.connect() as conn:
                conn.execute("SET statement_timeout = '600s'")
                yield conn
        finally:
            server.stop()


def flush_samples(conn: psycopg.Connection[Any], insert: str, rows: list[tuple[Any, ...]]) -> list[float]:
    """For each of `rows`: the row written by `insert`, then the seconds FLUSH takes (the
    pipeline's batch)."""
    flushes = []
    for row in rows:
        conn.execute(insert, row)
        t = time.monotonic()
        conn.execute("FLUSH")
        flushes.append(time.monotonic() - t)
    return flushes


def step_figures(flushes: list[float]) -> dict[str, object]:
    return {"flush_s_median": statistics.median(flushes), "flush_s": [round(x, 3) for x in flushes]}


def machine_summary() -> dict[str, Any]:
    """What a result file says of the machine it was measured on."""
    return {"cores": os.cpu_count(), "python": platform.python_version(), "load_avg": os.getloadavg()}


def write_results(out: Path, figures: list[dict[str, Any]], peer: str, samples: int, ratio_key: str) -> None:
    """Each step's median as a ratio to the first step's (the peer), written with the machine."""
    base = float(figures[0]["flush_s_median"])
    for f in figures:
        f[ratio_key] = round(float(f["flush_s_median"]) / base, 2)
    result = {"machine": machine_summary(), "peer": peer, "samples": samples, "steps": figures}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
