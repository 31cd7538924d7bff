"""Records from outside (a Kafka message, a line of a file) into a stream's columns.

A record that cannot become a row (invalid JSON, a value of the wrong type, too large) raises
BadRecord with a reason a person understands; the source keeps it, with its raw bytes, in the
stream's dead-letter stream `<stream>_errors` and goes on.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from dataclasses import dataclass, field
from typing import Any

from streamdb import types as T
from streamdb.catalog import RelationDef
from streamdb.errors import StreamDBError
from streamdb.planner.coerce import coerce

FORMATS = ("json", "csv", "text", "bytes", "avro")
DEFAULT_MAX_RECORD_BYTES = 1 << 20


class BadRecord(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Record:
    value: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp_ms: int | None = None
    source: str = ""  # topic or file name
    partition: int = 0
    offset: int = 0
    # The record's full size when `value` holds only its start (a file line over max_record_bytes,
    # cut while reading so memory stays bounded); None: len(key) + len(value).
    size: int | None = None


@dataclass(frozen=True)
class Decoder:
    """Turns records into full rows of `rel` (column order) and their event times."""

    rel: RelationDef
    value_format: str = "json"
    key_format: str = "text"
    csv_delimiter: str = ","
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    avro_schema: Any = None  # a parsed Avro schema (fastavro), for value_format avro
    schema_registry: SchemaRegistry | None = None  # writer schemas by id (Confluent wire format)

    def row(self, rec: Record) -> tuple[tuple[Any, ...], dt.datetime]:
        size = rec.size if rec.size is not None else len(rec.value or b"") + len(rec.key or b"")
        if size > self.max_record_bytes:
            raise BadRecord(f"record of {size} bytes exceeds the limit of {self.max_record_bytes} bytes "
                            "(option max_record_bytes)")
        fields = self._value_fields(rec.value)
        out: list[Any] = []
        for c in self.rel.columns:
            if c.role == "KEY":
                raw: Any = self._key(rec.key)
            elif c.role == "HEADERS":
                raw = json.dumps([{"key": k, "value": None if v is None else v.decode("utf-8", "replace")}
                                  for k, v in rec.headers])
            elif c.role == "HEADER":
                found = [v for k, v in rec.headers if k == c.header_key]
                raw = found[-1] if found else None
                if isinstance(raw, bytes) and c.type is not T.BYTEA:
                    raw = raw.decode("utf-8", "replace")
            else:
                raw = fields.get(c.name)
            try:
                value = coerce(_plain(raw, c.type), c.type, c.name)
            except StreamDBError as e:
                raise BadRecord(f'column "{c.name}": {e.message}') from None
            if value is None and not c.nullable:
                raise BadRecord(f'column "{c.name}" is null but declared NOT NULL')
            out.append(value)
        row = tuple(out)
        return row, self._event_time(row, rec)

    def _event_time(self, row: tuple[Any, ...], rec: Record) -> dt.datetime:
        ts_col = self.rel.timestamp_column
        if ts_col is not None:
            v = row[self.rel.column_names().index(ts_col)]
            if isinstance(v, int):
                return dt.datetime.fromtimestamp(v / 1000, dt.UTC)
            if isinstance(v, dt.datetime):
                return v if v.tzinfo is not None else v.replace(tzinfo=dt.UTC)
        if rec.timestamp_ms is not None and rec.timestamp_ms > 0:
            return dt.datetime.fromtimestamp(rec.timestamp_ms / 1000, dt.UTC)
        return dt.datetime.now(dt.UTC)

    def _key(self, key: bytes | None) -> Any:
        if key is None:
            return None
        if self.key_format == "bytes":
            return key
        try:
            text = key.decode("utf-8")
        except UnicodeDecodeError:
            raise BadRecord("the record key is not UTF-8 text (key_format = 'text')") from None
        if self.key_format == "json":
            try:
                return json.loads(text)
            except json.JSONDecodeError as e:
                raise BadRecord(f"the record key is not valid JSON: {e}") from None
        return text

    def _value_columns(self) -> list[str]:
        return [c.name for c in self.rel.columns if c.role is None]

    def _value_fields(self, value: bytes | None) -> dict[str, Any]:
        names = self._value_columns()
        if value is None:
            return {}  # a tombstone or an empty record: the value columns are NULL
        fmt = self.value_format
        if fmt == "bytes":
            return {names[0]: value} if names else {}
        try:
            text = value.decode("utf-8") if fmt != "avro" else ""
        except UnicodeDecodeError:
            raise BadRecord(f"the record value is not UTF-8 text (value_format = '{fmt}')") from None
        if fmt == "text":
            return {names[0]: text} if names else {}
        if fmt == "csv":
            try:
                cells = next(csv.reader(io.StringIO(text), delimiter=self.csv_delimiter), [])
            except csv.Error as e:
                raise BadRecord(f"invalid CSV: {e}") from None
            if len(cells) != len(names):
                raise BadRecord(f"CSV record has {len(cells)} fields, the stream has {len(names)} value columns")
            return {n: (None if cell == "" else cell) for n, cell in zip(names, cells, strict=True)}
        if fmt == "avro":
            return self._avro(value)
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise BadRecord(f"invalid JSON: {e}") from None
        except RecursionError:  # e.g. 100,000 levels of '[': refuse the record, keep the source
            raise BadRecord("invalid JSON: nested too deeply") from None
        if not isinstance(doc, dict):
            if len(names) == 1:
                return {names[0]: doc}
            raise BadRecord(f"the JSON value is a {type(doc).__name__}, not an object with the stream's columns")
        lowered = {str(k).lower(): v for k, v in doc.items()}
        return {n: doc[n] if n in doc else lowered.get(n) for n in names}

    def _avro(self, value: bytes) -> dict[str, Any]:
        import fastavro

        payload, schema = value, self.avro_schema
        if value[:1] == b"\x00" and len(value) >= 5:
            payload = value[5:]  # Confluent wire format: magic byte, 4-byte schema id
            if self.schema_registry is not None:
                schema = self.schema_registry.schema(int.from_bytes(value[1:5], "big"))
        if schema is None:
            raise BadRecord("the Avro record does not name a schema id (Confluent wire format) and the stream "
                            "has no avro_schema")
        try:
            doc = fastavro.schemaless_reader(io.BytesIO(payload), schema)
        except Exception as e:  # noqa: BLE001 - any decoding failure is the record's fault
            raise BadRecord(f"invalid Avro for the stream's schema: {e}") from None
        if not isinstance(doc, dict):
            raise BadRecord("the Avro value is not a record")
        lowered = {str(k).lower(): v for k, v in doc.items()}
        return {n: lowered.get(n) for n in self._value_columns()}


class SchemaRegistry:
    """Avro writer schemas by id from a Confluent-compatible schema registry, cached. A registry
    that cannot be reached is not the record's fault: the error stops the batch, which the
    source retries (nothing is committed, nothing is dead-lettered)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self._schemas: dict[int, Any] = {}

    def schema(self, schema_id: int) -> Any:
        if schema_id not in self._schemas:
            import urllib.error
            import urllib.request

            import fastavro

            try:
                with urllib.request.urlopen(f"{self.url}/schemas/ids/{schema_id}", timeout=10) as resp:
                    doc = json.loads(resp.read())
            except urllib.error.HTTPError as e:
                if e.code == 404:
                    raise BadRecord(f"schema id {schema_id} is not in the schema registry") from None
                raise ConnectionError(f"schema registry: HTTP {e.code}") from None
            self._schemas[schema_id] = fastavro.parse_schema(json.loads(doc["schema"]))
        return self._schemas[schema_id]


def _plain(v: Any, t: T.SqlType) -> Any:
    """JSON values as assignment expects them: nested objects and arrays as JSON text."""
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    if isinstance(v, float) and t in (T.NUMERIC,):
        return repr(v)
    return v
