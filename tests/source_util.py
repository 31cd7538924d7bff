"""Helpers for the external-source tests (Kafka, MQTT): wait until a query sees what a source read."""

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
