"""Helpers for the source tests (Kafka, MQTT, Postgres CDC): wait until a query or SHOW SOURCES shows
what a source did."""

from __future__ import annotations

import time

import psycopg


def wait_for(conn: psycopg.Connection, sql: str, expected, timeout: float = 60):
    """Poll `sql` until it returns `expected` (sources read in the background)."""
    deadline = time.monotonic() + timeout
    got = None
    while time.monotonic() < deadline:
        got = conn.execute(sql).fetchall()
        if got == expected:
            return got
        time.sleep(0.2)
    raise AssertionError(f"{sql}: waited for {expected!r}, last saw {got!r}")


def wait_source(conn: psycopg.Connection, name: str, state: str, error_part: str | None = None,
                timeout: float = 60) -> tuple:
    """Poll SHOW SOURCES until `name` is in `state` (and its error mentions `error_part`); its row."""
    deadline = time.monotonic() + timeout
    row = None
    while time.monotonic() < deadline:
        row = {r[0]: r for r in conn.execute("SHOW SOURCES").fetchall()}.get(name)
        if row is not None and row[4] == state and (error_part is None or error_part in (row[8] or "")):
            return row
        time.sleep(0.2)
    raise AssertionError(f"source {name}: waited for {state} ({error_part}), last saw {row!r}")
