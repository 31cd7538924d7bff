"""PostgreSQL protocol v3 framing: backend message builders and a frontend message reader.

Pure byte manipulation; the connection state machine lives in server.py.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

from streamdb.errors import CharacterNotInRepertoire, ProtocolViolation

PROTOCOL_3_0 = 196608  # 3 << 16
SSL_REQUEST_CODE = 80877103
GSSENC_REQUEST_CODE = 80877104
CANCEL_REQUEST_CODE = 80877102
MAX_STARTUP_PACKET = 10_000

FORMAT_TEXT = 0
FORMAT_BINARY = 1

_INT16 = struct.Struct("!h")
_INT32 = struct.Struct("!i")
_UINT32 = struct.Struct("!I")
_HEADER = struct.Struct("!ci")
_FIELD = struct.Struct("!ihihih")
_NULL_FIELD = _INT32.pack(-1)


def message(kind: bytes, body: bytes = b"") -> bytes:
    """Frame one backend message: type byte, int32 length (including itself), body."""
    return _HEADER.pack(kind, len(body) + 4) + body


def cstring(text: str) -> bytes:
    return text.encode("utf-8") + b"\x00"


# --- backend messages ------------------------------------------------------------------

def authentication_ok() -> bytes:
    return message(b"R", _INT32.pack(0))


def authentication_md5_password(salt: bytes) -> bytes:
    return message(b"R", _INT32.pack(5) + salt)


def authentication_sasl(mechanisms: Sequence[str]) -> bytes:
    return message(b"R", _INT32.pack(10) + b"".join(cstring(m) for m in mechanisms) + b"\x00")


def authentication_sasl_continue(data: bytes) -> bytes:
    return message(b"R", _INT32.pack(11) + data)


def authentication_sasl_final(data: bytes) -> bytes:
    return message(b"R", _INT32.pack(12) + data)


def parameter_status(name: str, value: str) -> bytes:
    return message(b"S", cstring(name) + cstring(value))


def backend_key_data(pid: int, secret: int) -> bytes:
    return message(b"K", _UINT32.pack(pid) + _UINT32.pack(secret))


def ready_for_query(status: str) -> bytes:
    return message(b"Z", status.encode("ascii")[:1] or b"I")


def negotiate_protocol_version(newest_minor: int, unrecognized: Sequence[str]) -> bytes:
    body = _INT32.pack(newest_minor) + _INT32.pack(len(unrecognized))
    body += b"".join(cstring(name) for name in unrecognized)
    return message(b"v", body)


def row_description(fields: Sequence[tuple[str, int, int, int, int, int, int]]) -> bytes:
    """fields: (name, table_oid, column_number, type_oid, typlen, typmod, format)."""
    parts = [_INT16.pack(len(fields))]
    for name, table_oid, column_number, type_oid, typlen, typmod, fmt in fields:
        parts.append(cstring(name))
        parts.append(_FIELD.pack(table_oid, column_number, type_oid, typlen, typmod, fmt))
    return message(b"T", b"".join(parts))


def data_row(cells: Sequence[bytes | None]) -> bytes:
    parts = [_INT16.pack(len(cells))]
    for cell in cells:
        if cell is None:
            parts.append(_NULL_FIELD)
        else:
            parts.append(_INT32.pack(len(cell)))
            parts.append(cell)
    return message(b"D", b"".join(parts))


def command_complete(tag: str) -> bytes:
    return message(b"C", cstring(tag))


def empty_query_response() -> bytes:
    return message(b"I")


def parse_complete() -> bytes:
    return message(b"1")


def bind_complete() -> bytes:
    return message(b"2")


def close_complete() -> bytes:
    return message(b"3")


def no_data() -> bytes:
    return message(b"n")


def portal_suspended() -> bytes:
    return message(b"s")


def parameter_description(type_oids: Sequence[int]) -> bytes:
    return message(b"t", _INT16.pack(len(type_oids)) + b"".join(_UINT32.pack(oid) for oid in type_oids))


def copy_in_response(overall_format: int, column_formats: Sequence[int]) -> bytes:
    return message(b"G", _copy_response_body(overall_format, column_formats))


def copy_out_response(overall_format: int, column_formats: Sequence[int]) -> bytes:
    return message(b"H", _copy_response_body(overall_format, column_formats))


def _copy_response_body(overall_format: int, column_formats: Sequence[int]) -> bytes:
    return (bytes([overall_format]) + _INT16.pack(len(column_formats))
            + b"".join(_INT16.pack(f) for f in column_formats))


def copy_data(data: bytes) -> bytes:
    return message(b"d", data)


def copy_done() -> bytes:
    return message(b"c")


def error_or_notice(kind: bytes, fields: Iterable[tuple[str, str | None]]) -> bytes:
    """ErrorResponse ('E') or NoticeResponse ('N'); fields with a None value are left out."""
    body = b"".join(code.encode("ascii") + cstring(value) for code, value in fields if value is not None)
    return message(kind, body + b"\x00")


# --- frontend message parsing ----------------------------------------------------------

class MessageReader:
    """Reads fields sequentially out of one frontend message body."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolViolation("insufficient data left in message")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def byte(self) -> int:
        return self._take(1)[0]

    def int16(self) -> int:
        return int(_INT16.unpack(self._take(2))[0])

    def int32(self) -> int:
        return int(_INT32.unpack(self._take(4))[0])

    def uint32(self) -> int:
        return int(_UINT32.unpack(self._take(4))[0])

    def raw(self, n: int) -> bytes:
        return self._take(n)

    def cstring(self) -> str:
        end = self.data.find(b"\x00", self.pos)
        if end < 0:
            raise ProtocolViolation("invalid string in message")
        raw = self.data[self.pos : end]
        self.pos = end + 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            # PostgreSQL's wording and SQLSTATE (22021), naming the offending bytes.
            bad = " ".join(f"0x{b:02x}" for b in raw[e.start:e.end])
            raise CharacterNotInRepertoire(f'invalid byte sequence for encoding "UTF8": {bad}') from None

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def rest(self) -> bytes:
        return self._take(self.remaining())

    def end(self) -> None:
        """The message must be fully read: trailing bytes (e.g. after a NUL inside a query
        string) are refused, as PostgreSQL's pq_getmsgend does, rather than silently ignored."""
        if self.pos != len(self.data):
            raise ProtocolViolation("invalid message format")


def parse_startup_parameters(body: bytes) -> dict[str, str]:
    """Name/value pairs of a StartupMessage after the protocol version."""
    reader = MessageReader(body)
    params: dict[str, str] = {}
    while reader.remaining():
        name = reader.cstring()
        if not name:
            break
        params[name] = reader.cstring()
    return params


def parse_options_switches(options: str) -> dict[str, str]:
    """Settings in the libpq 'options' startup parameter: '-c name=value --name=value'.

    Backslash escapes a space inside a value, as in Postgres."""
    words: list[str] = []
    current: list[str] = []
    escaped = False
    for ch in options:
        if escaped:
            current.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch.isspace():
            if current:
                words.append("".join(current))
                current = []
        else:
            current.append(ch)
    if current:
        words.append("".join(current))
    settings: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        setting = None
        if word == "-c" and i + 1 < len(words):
            setting = words[i + 1]
            i += 1
        elif word.startswith("-c"):
            setting = word[2:]
        elif word.startswith("--"):
            setting = word[2:]
        i += 1
        if setting and "=" in setting:
            name, _, value = setting.partition("=")
            settings[name.strip().lower().replace("-", "_")] = value
    return settings
