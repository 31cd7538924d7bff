"""What every source shares: its thread, its status, and one atomic commit per batch of the
rows it decoded, the dead letters it refused and the progress (offsets, files) they reflect."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streamdb.catalog import RelationDef
from streamdb.runtime.connectors.decode import BadRecord, Decoder, Record
from streamdb.storage.base import Append, Commit

if TYPE_CHECKING:
    from streamdb.runtime.engine import Engine

log = logging.getLogger("streamdb.sources")
META = "meta"


def source_key(rel_id: int) -> bytes:
    return f"source:{rel_id}".encode()


@dataclass
class SourceStatus:
    records: int = 0  # rows added to the stream
    bad_records: int = 0  # records kept in the dead-letter stream
    last_error: str | None = None
    state: str = "starting"
    partitions: dict[int, int] = field(default_factory=dict)  # Kafka partition -> next offset


class SourceThread:
    """A thread copying records from outside into stream `rel` (bad ones into `errors_rel`)."""

    kind = "source"

    def __init__(self, engine: Engine, rel: RelationDef, errors_rel: RelationDef | None, decoder: Decoder) -> None:
        self.engine = engine
        self.rel = rel
        self.errors_rel = errors_rel
        self.decoder = decoder
        self.status = SourceStatus()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start_thread(self) -> None:
        with self.engine.storage.snapshot() as snap:
            raw = snap.get(META, source_key(self.rel.id))
        if raw:
            meta = json.loads(raw)
            self.status.records = int(meta.get("records", 0))
            self.status.bad_records = int(meta.get("bad_records", 0))
            self.restore(meta)
        self._thread = threading.Thread(target=self._run, name=f"{self.kind}-{self.rel.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def restore(self, meta: dict[str, Any]) -> None:
        """Resume from the progress stored with the last batch."""

    def dropped(self) -> None:
        """The stream was dropped (its thread has stopped): release what it held outside."""

    def _run(self) -> None:
        raise NotImplementedError

    def decode(self, records: list[Record]) -> tuple[list[tuple[Any, ...]], list[dt.datetime],
                                                      list[tuple[Record, str]]]:
        rows: list[tuple[Any, ...]] = []
        rowtimes: list[dt.datetime] = []
        bad: list[tuple[Record, str]] = []
        for rec in records:
            try:
                row, at = self.decoder.row(rec)
                rows.append(row)
                rowtimes.append(at)
            except BadRecord as e:
                bad.append((rec, e.reason))
            except ConnectionError:
                raise  # e.g. the schema registry is down: not the record's fault, retry the batch
            except RecursionError:
                bad.append((rec, "the record is nested too deeply"))
            except Exception as e:  # noqa: BLE001 - one odd record must not stop the source forever
                log.exception("%s %s: decoding record %s:%d failed", self.kind, self.rel.name, rec.source, rec.offset)
                bad.append((rec, f"the record could not be decoded: {type(e).__name__}: {e}"))
        return rows, rowtimes, bad

    def commit(self, rows: list[tuple[Any, ...]], rowtimes: list[dt.datetime], bad: list[tuple[Record, str]],
               progress: dict[str, Any]) -> None:
        """Rows, dead letters and progress in one atomic commit (so a restart neither loses nor
        repeats a record); returns once it is durable."""
        extra = Commit()
        if bad and self.errors_rel is not None:
            extra.appends.extend(dead_letters(self.errors_rel, bad))
        records, bad_total = self.status.records + len(rows), self.status.bad_records + len(bad)
        extra.puts.append((META, source_key(self.rel.id), json.dumps(
            {**progress, "records": records, "bad_records": bad_total}).encode()))
        from streamdb.runtime.writer import append_rows

        loop = self.engine.loop
        assert loop is not None
        asyncio.run_coroutine_threadsafe(append_rows(self.engine, self.rel, rows, rowtimes, extra), loop).result()
        self.status.records, self.status.bad_records = records, bad_total
        if bad:
            log.warning("%s %s: %d bad record(s) kept in %s (first: %s)", self.kind, self.rel.name, len(bad),
                        self.errors_rel.name if self.errors_rel else "-", bad[0][1])


# How much of a bad record's key, value and text the dead-letter stream keeps: enough to find and
# recognise the record, bounded so an oversize record does not become an oversize dead letter.
DEAD_LETTER_KEPT_BYTES = 10_000


def dead_letters(errors_rel: RelationDef, bad: list[tuple[Record, str]]) -> list[Append]:
    """Appends for the dead-letter stream: where each record came from, why, and (the start of) its bytes."""
    from streamdb.runtime.writer import _stream_appends

    now = dt.datetime.now(dt.UTC)
    kept = DEAD_LETTER_KEPT_BYTES
    rows = [(rec.source, rec.partition, rec.offset, reason,
             None if rec.key is None else rec.key[:kept], None if rec.value is None else rec.value[:kept],
             None if rec.value is None else rec.value[:kept].decode("utf-8", "replace"))
            for rec, reason in bad]
    return _stream_appends(errors_rel, rows, [now] * len(rows), [None] * len(rows))
