"""An external stream over a directory of JSON-lines or CSV files, picking up new files.

The connector's path is confined to the server's file root. Files are read in name order, a
line at a time; how many lines of each file are done is stored in the same commit as the rows
(and dead letters) they produced, so a restart resumes where it stopped and never reads a line
twice. Names starting with '.' or ending in '.tmp' are in-progress files and are skipped: write
a file under such a name and rename it when complete.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import fnmatch
import json
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamdb.catalog import RelationDef
from streamdb.errors import InsufficientPrivilege
from streamdb.runtime.connectors.decode import BadRecord, Decoder, Record
from streamdb.runtime.connectors.kafka_source import META, SourceStatus, dead_letters, source_key
from streamdb.storage.base import Commit

if TYPE_CHECKING:
    from streamdb.runtime.engine import Engine

log = logging.getLogger("streamdb.sources")
POLL_SECONDS = 0.5
BATCH_LINES = 5000


def confined(root: Path, path: str) -> Path:
    """`path` (relative to root, or absolute) if it lies under root; else refuse."""
    candidate = (root / path).resolve() if not Path(path).is_absolute() else Path(path).resolve()
    if candidate != root and root not in candidate.parents:
        raise InsufficientPrivilege(f'path "{path}" is outside the server\'s file root',
                                    hint="FILE connectors read and write under the file_root setting "
                                         f"({root}).")
    return candidate


class FileSource:
    def __init__(self, engine: Engine, rel: RelationDef, errors_rel: RelationDef | None, root: Path, path: str,
                 pattern: str | None, decoder: Decoder) -> None:
        self.engine = engine
        self.rel = rel
        self.errors_rel = errors_rel
        self.directory = confined(root, path)
        self.pattern = pattern or ("*.csv" if decoder.value_format == "csv" else "*")
        self.decoder = decoder
        self.status = SourceStatus()
        self.done: dict[str, int] = {}  # file name -> lines consumed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start_thread(self) -> None:
        with self.engine.storage.snapshot() as snap:
            raw = snap.get(META, source_key(self.rel.id))
        if raw:
            meta = json.loads(raw)
            self.done = {k: int(v) for k, v in meta.get("files", {}).items()}
            self.status.records = int(meta.get("records", 0))
            self.status.bad_records = int(meta.get("bad_records", 0))
        self._thread = threading.Thread(target=self._run, name=f"file-source-{self.rel.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._scan()
                self.status.state = "running"
                self.status.last_error = None
            except Exception as e:  # noqa: BLE001 - report and retry
                self.status.state = "retrying"
                self.status.last_error = str(e)
                log.warning("file source %s: %s", self.rel.name, e)
            self._stop.wait(POLL_SECONDS)

    def _scan(self) -> None:
        if not self.directory.is_dir():
            raise FileNotFoundError(f"directory {self.directory} does not exist")
        for path in sorted(self.directory.iterdir()):
            name = path.name
            if name.startswith(".") or name.endswith(".tmp") or not path.is_file():
                continue
            if not fnmatch.fnmatch(name, self.pattern):
                continue
            with path.open("rb") as f:
                lines = f.read().splitlines()
            start = self.done.get(name, 0)
            while start < len(lines) and not self._stop.is_set():
                chunk = lines[start:start + BATCH_LINES]
                self._ingest(name, start, chunk)
                start += len(chunk)

    def _ingest(self, name: str, first: int, lines: list[bytes]) -> None:
        rows: list[tuple[Any, ...]] = []
        rowtimes: list[dt.datetime] = []
        bad: list[tuple[Record, str]] = []
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            rec = Record(value=line, source=name, partition=0, offset=first + i)
            try:
                row, at = self.decoder.row(rec)
                rows.append(row)
                rowtimes.append(at)
            except BadRecord as e:
                bad.append((rec, e.reason))
        done = {**self.done, name: first + len(lines)}
        extra = Commit()
        if bad and self.errors_rel is not None:
            extra.appends.extend(dead_letters(self.errors_rel, bad))
        records, bad_total = self.status.records + len(rows), self.status.bad_records + len(bad)
        extra.puts.append((META, source_key(self.rel.id), json.dumps(
            {"files": done, "records": records, "bad_records": bad_total}).encode()))
        from streamdb.runtime.writer import append_rows

        loop = self.engine.loop
        assert loop is not None
        asyncio.run_coroutine_threadsafe(append_rows(self.engine, self.rel, rows, rowtimes, extra), loop).result()
        self.done = done
        self.status.records, self.status.bad_records = records, bad_total
