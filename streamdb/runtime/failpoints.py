"""Faults the test suite switches on to reach failure paths no real input reaches today (as
Materialize's failpoints): all off unless $STREAMDB_TEST_FAILPOINTS names them, comma-separated.

- `view-commit`: applying a pipeline batch to a view fails while the batch holds a text value
  containing VIEW_COMMIT_MARKER, so a test can break one view of a shared pipeline with a row,
  and mend it by deleting the row.
- `read-pause`: a read of a relation whose name contains READ_PAUSE_MARKER pauses 1 s between
  taking the catalog it was planned with and the storage snapshot it reads, so a test can drop
  the relation in between; one whose name contains PLANNED_PAUSE_MARKER pauses 1 s after it is
  planned, before it looks its relations up, so a test can replace a view in between.
- `commit-beside-kill`: a batch committed beside Spark's next (StreamingPipeline) that holds a
  text value containing COMMIT_BESIDE_KILL_MARKER kills the server (SIGKILL) once Spark has
  recorded the batch as done and before the server commits it: the window a restart rewinds."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from streamdb.errors import InternalError

ENABLED = frozenset(filter(None, os.environ.get("STREAMDB_TEST_FAILPOINTS", "").split(",")))
VIEW_COMMIT_MARKER = "streamdb-failpoint:view-commit"
COMMIT_BESIDE_KILL_MARKER = "streamdb-failpoint:commit-beside-kill"
READ_PAUSE_MARKER = "failpoint_read_pause"
PLANNED_PAUSE_MARKER = "failpoint_planned_pause"


def _holds(table: pa.Table, marker: str) -> bool:
    return any(pc.any(pc.match_substring(column, marker)).as_py() for column in table.columns
               if pa.types.is_string(column.type) or pa.types.is_large_string(column.type))


def view_commit(view_name: str, table: pa.Table | None) -> None:
    """Raise as a bug in applying `table` (a view's batch) would, if the failpoint is on and hit."""
    if "view-commit" not in ENABLED or table is None:
        return
    if _holds(table, VIEW_COMMIT_MARKER):
        raise InternalError(f'failpoint view-commit: view "{view_name}" met its marker')


def commit_beside(tables: dict[int, pa.Table], spark_commit: Path) -> None:
    """Kill the server once `spark_commit` (Spark's record of the batch) exists, if the failpoint
    is on and a view's changes in `tables` hold its marker."""
    if "commit-beside-kill" not in ENABLED or not any(_holds(t, COMMIT_BESIDE_KILL_MARKER) for t in tables.values()):
        return
    deadline = time.monotonic() + 30
    while not spark_commit.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGKILL)


def read_pause(relation_name: str, marker: str = READ_PAUSE_MARKER) -> None:
    """Pause a read (1 s) where it calls this, if the failpoint is on and the name has `marker`."""
    if "read-pause" in ENABLED and marker in relation_name:
        time.sleep(1.0)
