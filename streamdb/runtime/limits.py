"""Session time limits and result size limits (docs/limits.md).

Timeouts are PostgreSQL duration settings: a number in milliseconds, or with a unit
(`'2s'`, `'1min'`, `'500ms'`), 0 meaning off. They are stored in the session's settings in
the canonical form PostgreSQL's SHOW prints (`5min`, `500ms`, `0`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

import pyarrow as pa

from streamdb.errors import InvalidParameterValue, ProgramLimitExceeded

TIMEOUT_SETTINGS = frozenset({"statement_timeout", "idle_in_transaction_session_timeout"})
# Per-session lowering of the server's max_result_rows (SET streamdb.max_result_rows = n).
RESULT_ROWS_SETTING = "streamdb.max_result_rows"
_MAX_TIMEOUT_MS = 2**31 - 1  # PostgreSQL's range for these settings: 0 .. INT_MAX
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(us|ms|s|min|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS = {"us": 0.001, "ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
# Largest first: SHOW prints a value in the largest unit that divides it.
_DISPLAY_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000))

_RESULT_HINT = ("Add a LIMIT or a narrower WHERE clause, or read the result in parts with "
                "LIMIT/OFFSET; the server setting max_result_rows / max_result_bytes raises the cap.")


@functools.lru_cache(maxsize=256)
def parse_duration_ms(name: str, value: str) -> int:
    """`value` of the duration setting `name` in milliseconds; 22023 when it is not one."""
    m = _DURATION.match(value)
    if m is None:
        if value.strip().startswith("-"):
            raise InvalidParameterValue(
                f'{value.strip()} ms is outside the valid range for parameter "{name}" (0 .. {_MAX_TIMEOUT_MS})')
        raise InvalidParameterValue(
            f'invalid value for parameter "{name}": "{value}"',
            hint='Valid units for this parameter are "us", "ms", "s", "min", "h", and "d".')
    ms = round(float(m.group(1)) * _UNIT_MS[(m.group(2) or "ms").lower()])
    if ms > _MAX_TIMEOUT_MS:
        raise InvalidParameterValue(
            f'{ms} ms is outside the valid range for parameter "{name}" (0 .. {_MAX_TIMEOUT_MS})')
    return ms


def format_duration_ms(ms: int) -> str:
    """How PostgreSQL's SHOW prints a millisecond setting: `0`, `500ms`, `2s`, `5min`."""
    if ms == 0:
        return "0"
    for unit, size in _DISPLAY_UNITS:
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def normalize_setting(name: str, value: str, server_max_result_rows: int) -> str:
    """The value to store for a limit setting (validated); other settings pass through."""
    if name in TIMEOUT_SETTINGS:
        return format_duration_ms(parse_duration_ms(name, value))
    if name == RESULT_ROWS_SETTING:
        text = value.strip()
        if not text:
            return ""  # RESET: the server's cap
        if not text.isdigit():
            raise InvalidParameterValue(
                f'invalid value for parameter "{name}": "{value}"', hint="Use a row count; 0 means the server's cap.")
        rows = int(text)
        if server_max_result_rows and rows > server_max_result_rows:
            raise InvalidParameterValue(
                f'{rows} is outside the valid range for parameter "{name}" (0 .. {server_max_result_rows})',
                hint="A session may lower the server's max_result_rows, not raise it.")
        return str(rows)
    return value


def effective_max_rows(server_max: int, settings: Mapping[str, str]) -> int:
    """The row cap for a session's results (0: none)."""
    override = settings.get(RESULT_ROWS_SETTING, "").strip()
    if override.isdigit() and int(override) > 0:
        return min(int(override), server_max) if server_max else int(override)
    return server_max


def check_result_size(table: pa.Table, max_rows: int, max_bytes: int) -> None:
    """Fail (54000) before a result too big to hold is turned into Python rows."""
    if max_rows and table.num_rows > max_rows:
        raise ProgramLimitExceeded(
            f"result exceeds max_result_rows ({max_rows})",
            detail=f"The query returned {table.num_rows} rows.", hint=_RESULT_HINT)
    if max_bytes and table.nbytes > max_bytes:
        raise ProgramLimitExceeded(
            f"result exceeds max_result_bytes ({max_bytes})",
            detail=f"The query returned {table.nbytes} bytes in {table.num_rows} rows.", hint=_RESULT_HINT)
