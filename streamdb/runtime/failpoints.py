"""Faults the test suite switches on to reach failure paths no real input reaches today (as
Materialize's failpoints): all off unless $STREAMDB_TEST_FAILPOINTS names them, comma-separated.

- `view-commit`: applying a pipeline batch to a view fails while the batch holds a text value
  containing VIEW_COMMIT_MARKER, so a test can break one view of a shared pipeline with a row,
  and mend it by deleting the row.
- `read-pause`: a read of a relation whose name contains READ_PAUSE_MARKER pauses 1 s between
  taking the catalog it was planned with and the storage snapshot it reads, so a test can drop
  the relation in between; one whose name contains PLANNED_PAUSE_MARKER pauses 1 s after it is
  planned, before it looks its relations up, so a test can replace a view in between."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pyarrow.compute as pc

from streamdb.errors import InternalError

ENABLED = frozenset(filter(None, os.environ.get("STREAMDB_TEST_FAILPOINTS", "").split(",")))
VIEW_COMMIT_MARKER = "streamdb-failpoint:view-commit"
READ_PAUSE_MARKER = "failpoint_read_pause"
PLANNED_PAUSE_MARKER = "failpoint_planned_pause"


def view_commit(view_name: str, table: pa.Table | None) -> None:
    """Raise as a bug in applying `table` (a view's batch) would, if the failpoint is on and hit."""
    if "view-commit" not in ENABLED or table is None:
        return
    for column in table.columns:
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            if pc.any(pc.match_substring(column, VIEW_COMMIT_MARKER)).as_py():
                raise InternalError(f'failpoint view-commit: view "{view_name}" met its marker')


def read_pause(relation_name: str, marker: str = READ_PAUSE_MARKER) -> None:
    """Pause a read (1 s) where it calls this, if the failpoint is on and the name has `marker`."""
    if "read-pause" in ENABLED and marker in relation_name:
        time.sleep(1.0)
