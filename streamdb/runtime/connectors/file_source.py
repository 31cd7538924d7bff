"""An external stream over a directory of JSON-lines or CSV files, picking up new files.

The connector's path is confined to the server's file root. Files are read in name order, a
line at a time; how many lines of each file are done is stored in the same commit as the rows
(and dead letters) they produced, so a restart resumes where it stopped and never reads a line
twice. Names starting with '.' or ending in '.tmp' are in-progress files and are skipped: write
a file under such a name and rename it when complete.
"""

from __future__ import annotations

import fnmatch
import itertools
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from streamdb.catalog import RelationDef
from streamdb.errors import InsufficientPrivilege
from streamdb.runtime.connectors.decode import Decoder, Record
from streamdb.runtime.connectors.source_base import DEAD_LETTER_KEPT_BYTES, SourceThread

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


def read_lines(f: BinaryIO, max_bytes: int) -> Iterator[tuple[bytes, int]]:
    """(line, its size) for each line of `f`, without the line end. A line over `max_bytes` is
    cut to its first DEAD_LETTER_KEPT_BYTES bytes (it can only become a dead letter) and the rest
    is skipped in chunks, so a huge line never sits in memory whole."""
    while True:
        line = f.readline(max_bytes + 1)
        if not line:
            return
        size = len(line)
        if len(line) > max_bytes and not line.endswith(b"\n"):
            line = line[:DEAD_LETTER_KEPT_BYTES]
            while True:
                rest = f.readline(1 << 16)
                size += len(rest)
                if not rest:
                    break
                if rest.endswith(b"\n"):
                    size -= 2 if rest.endswith(b"\r\n") else 1
                    break
        if line.endswith(b"\n"):
            line, size = line[:-1], size - 1
        if line.endswith(b"\r"):
            line, size = line[:-1], size - 1
        yield line, size


class FileSource(SourceThread):
    kind = "file-source"

    def __init__(self, engine: Engine, rel: RelationDef, errors_rel: RelationDef | None, root: Path, path: str,
                 pattern: str | None, decoder: Decoder) -> None:
        super().__init__(engine, rel, errors_rel, decoder)
        self.directory = confined(root, path)
        self.pattern = pattern or ("*.csv" if decoder.value_format == "csv" else "*")
        self.done: dict[str, int] = {}  # file name -> lines consumed

    def restore(self, meta: dict[str, Any]) -> None:
        self.done = {k: int(v) for k, v in meta.get("files", {}).items()}

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
            start = self.done.get(name, 0)
            with path.open("rb") as f:
                lines = read_lines(f, self.decoder.max_record_bytes)
                for _ in range(start):  # lines already done
                    if next(lines, None) is None:
                        break
                while not self._stop.is_set():
                    chunk = list(itertools.islice(lines, BATCH_LINES))
                    if not chunk:
                        break
                    self._ingest(name, start, chunk)
                    start += len(chunk)

    def _ingest(self, name: str, first: int, lines: list[tuple[bytes, int]]) -> None:
        records = [Record(value=line, source=name, partition=0, offset=first + i,
                          size=size if size > len(line) else None)
                   for i, (line, size) in enumerate(lines) if line.strip() or size > len(line)]
        rows, rowtimes, bad = self.decode(records)
        done = {**self.done, name: first + len(lines)}
        self.commit(rows, rowtimes, bad, {"files": done})
        self.done = done
