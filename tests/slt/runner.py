"""A sqllogictest runner that talks to a server over the Postgres wire protocol (psycopg 3).

It follows the flavour of sqllogictest-rs that RisingWave's e2e tests use:

  statement ok | statement error [regex] | statement count N      (+ optional `retry N backoff 1s`)
  query <types> [nosort|rowsort|valuesort] [label] [retry N backoff Xs]
  query error [regex]
  ----                       results (query) or expected error text (statement/query error,
                             terminated by two blank lines)
  include <path or glob>     relative to the including file
  let var1, var2 + query     binds variables from the first row (used with `control substitution on`)
  control substitution on|off, control sortmode <mode>
  sleep 5s | 100ms
  skipif <label> / onlyif <label>   before a record
  connection <name>          before a record: run it on a named connection
  halt                       stop the current file
  system ok                  never run: skipped with a reason
  hash-threshold N, subtest  ignored

Values are compared as Postgres text, the way sqllogictest-rs' postgres engine prints them:
NULL -> "NULL", the empty string -> "(empty)", booleans as the server sends them (t/f). Each
row is its values joined by one space, with runs of whitespace collapsed on both sides.

Run:  python -m tests.slt.runner --dsn postgresql://streamdb@127.0.0.1:6875/streamdb PATH...
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import glob
import json
import os
import re
import socket
import sys
import threading
import time
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_SKIPLIST = Path(__file__).with_name("skiplist.toml")
DEFAULT_LABELS = ("streamdb",)

# ---------------------------------------------------------------------------- records


@dataclass
class Record:
    """One sqllogictest record. `line` is the 1-based line of its header in `path`."""

    kind: str  # statement | query | include | control | let | sleep | halt | system | unsupported
    path: str
    line: int
    sql: str = ""
    # statement: 'ok' | 'error' | 'count'; query: 'ok' | 'error'
    expect: str = "ok"
    error_regex: str | None = None
    error_text: str | None = None  # multi-line expected error after ----
    count: int | None = None
    types: str = ""
    sort_mode: str | None = None  # None = file default (control sortmode) / nosort
    label: str | None = None
    results: list[str] | None = None  # expected result lines (None = no ---- block)
    retry: int = 0
    backoff: float = 0.0
    arg: str = ""  # include target, control args, sleep duration, system command, let variables
    conditions: list[tuple[str, str]] = field(default_factory=list)  # ('skipif'|'onlyif', label)
    connection: str | None = None
    reason: str = ""  # why a record of kind 'unsupported'/'system' cannot run


class ParseError(Exception):
    pass


_RETRY = re.compile(r"\s+retry\s+(\d+)\s+backoff\s+(\S+)\s*$")


def parse_duration(text: str) -> float:
    """'5s' | '100ms' | '1m' | '2' (seconds) -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|us)?\s*", text)
    if not m:
        raise ParseError(f"invalid duration {text!r}")
    value = float(m.group(1))
    unit = m.group(2) or "s"
    return value * {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}[unit]


def parse(text: str, path: str = "<string>") -> list[Record]:
    """Parse sqllogictest text into records (includes are not expanded here)."""
    lines = text.split("\n")
    records: list[Record] = []
    conditions: list[tuple[str, str]] = []
    connection: str | None = None
    i = 0
    n = len(lines)

    def block(start: int) -> tuple[list[str], int]:
        """Lines from `start` until a blank line or '----'."""
        out: list[str] = []
        j = start
        while j < n and lines[j].strip() != "" and lines[j].rstrip() != "----":
            if not lines[j].lstrip().startswith("#"):
                out.append(lines[j])
            j += 1
        return out, j

    def results_block(start: int) -> tuple[list[str], int]:
        out: list[str] = []
        j = start
        while j < n and lines[j].strip() != "":
            out.append(lines[j])
            j += 1
        return out, j

    def error_block(start: int) -> tuple[str, int]:
        """Multi-line expected error: ends at two consecutive blank lines (or EOF)."""
        out: list[str] = []
        j = start
        while j < n:
            if lines[j].strip() == "" and (j + 1 >= n or lines[j + 1].strip() == ""):
                break
            out.append(lines[j])
            j += 1
        return "\n".join(out).strip(), j

    while i < n:
        raw = lines[i]
        line = raw.strip()
        if not line or line.startswith("#"):
            i += 1
            continue
        lineno = i + 1
        toks = line.split()
        head = toks[0]
        if head in ("skipif", "onlyif"):
            if len(toks) < 2:
                raise ParseError(f"{path}:{lineno}: {head} needs a label")
            conditions.append((head, toks[1]))
            i += 1
            continue
        if head == "connection":
            if len(toks) < 2:
                raise ParseError(f"{path}:{lineno}: connection needs a name")
            connection = toks[1]
            i += 1
            continue
        rec = Record(kind=head, path=path, line=lineno, conditions=conditions, connection=connection)
        conditions = []
        connection = None
        if head == "statement":
            header = line
            m = _RETRY.search(header)
            if m:
                rec.retry, rec.backoff = int(m.group(1)), parse_duration(m.group(2))
                header = header[: m.start()]
            parts = header.split(None, 2)
            if len(parts) < 2:
                raise ParseError(f"{path}:{lineno}: statement needs ok|error|count")
            rec.expect = parts[1]
            if rec.expect == "error":
                rec.error_regex = parts[2].strip() if len(parts) > 2 and parts[2].strip() else None
            elif rec.expect == "count":
                if len(parts) < 3 or not parts[2].strip().isdigit():
                    raise ParseError(f"{path}:{lineno}: statement count needs a number")
                rec.count = int(parts[2].strip())
            elif rec.expect != "ok":
                raise ParseError(f"{path}:{lineno}: unknown statement expectation {rec.expect!r}")
            body, j = block(i + 1)
            rec.sql = "\n".join(body)
            if j < n and lines[j].rstrip() == "----":
                if rec.expect == "error":
                    rec.error_text, j = error_block(j + 1)
                else:
                    _, j = results_block(j + 1)
            i = j
        elif head == "query":
            header = line
            m = _RETRY.search(header)
            if m:
                rec.retry, rec.backoff = int(m.group(1)), parse_duration(m.group(2))
                header = header[: m.start()]
            parts = header.split()
            if len(parts) >= 2 and parts[1] == "error":
                rec.expect = "error"
                rest = header.split(None, 2)
                rec.error_regex = rest[2].strip() if len(rest) > 2 and rest[2].strip() else None
            else:
                rec.types = parts[1] if len(parts) > 1 else ""
                for opt in parts[2:]:
                    if opt in ("nosort", "rowsort", "valuesort"):
                        rec.sort_mode = opt
                    else:
                        rec.label = opt
            body, j = block(i + 1)
            rec.sql = "\n".join(body)
            if j < n and lines[j].rstrip() == "----":
                if rec.expect == "error":
                    rec.error_text, j = error_block(j + 1)
                else:
                    rec.results, j = results_block(j + 1)
            i = j
        elif head == "let":
            rec.arg = line[len("let"):].strip()
            body, j = block(i + 1)
            rec.sql = "\n".join(body)
            i = j
        elif head == "system":
            body, j = block(i + 1)
            rec.arg = "\n".join(body)
            rec.reason = "system commands are not run by this runner"
            if j < n and lines[j].rstrip() == "----":
                _, j = results_block(j + 1)
            i = j
        elif head in ("include", "control", "sleep"):
            rec.arg = line[len(head):].strip()
            i += 1
        elif head == "halt":
            i += 1
        elif head in ("hash-threshold", "subtest"):
            i += 1
            continue
        else:
            # Unknown record kind: skip its whole block, report it as skipped.
            rec.kind = "unsupported"
            rec.arg = line
            rec.reason = f"unsupported record kind {head!r}"
            _, j = block(i + 1)
            if j < n and lines[j].rstrip() == "----":
                _, j = results_block(j + 1)
            i = j
        records.append(rec)
    return records


# ---------------------------------------------------------------------------- skip list


@dataclass
class SkipList:
    files: dict[str, str] = field(default_factory=dict)  # path suffix or glob -> reason
    records: dict[str, str] = field(default_factory=dict)  # "path suffix:line" -> reason

    @classmethod
    def load(cls, path: Path | None) -> SkipList:
        if path is None or not path.exists():
            return cls()
        data = tomllib.loads(path.read_text())
        files = {str(k): str(v) for k, v in data.get("files", {}).items()}
        records = {str(k): str(v) for k, v in data.get("records", {}).items()}
        for key, reason in list(files.items()) + list(records.items()):
            if not reason.strip():
                raise ValueError(f"{path}: skip entry {key!r} has no reason")
        return cls(files, records)

    @staticmethod
    def _match(path: str, pattern: str) -> bool:
        p = Path(path).as_posix()
        if any(ch in pattern for ch in "*?["):
            return fnmatch.fnmatch(p, pattern) or fnmatch.fnmatch(p, "*/" + pattern)
        return p == pattern or p.endswith("/" + pattern)

    def file_reason(self, path: str) -> str | None:
        for pattern, reason in self.files.items():
            if self._match(path, pattern):
                return reason
        return None

    def record_reason(self, path: str, line: int) -> str | None:
        for key, reason in self.records.items():
            pattern, _, num = key.rpartition(":")
            if num.isdigit() and int(num) == line and self._match(path, pattern):
                return reason
        return None


# ---------------------------------------------------------------------------- results


@dataclass
class Failure:
    path: str
    line: int
    sql: str
    message: str
    expected: list[str] | None = None
    actual: list[str] | None = None


@dataclass
class Skip:
    path: str
    line: int
    reason: str


@dataclass
class FileResult:
    path: str
    status: str = "pass"  # pass | fail | skip | error
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0
    reason: str | None = None
    failures: list[Failure] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)
    error_message_mismatches: int = 0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def normalize_value(value: str | None) -> str:
    if value is None:
        return "NULL"
    if value == "":
        return "(empty)"
    return " ".join(value.split())


def normalize_line(line: str) -> str:
    return " ".join(line.split())


def compare_results(actual_rows: list[list[str]], expected: list[str], sort_mode: str) -> bool:
    got = [" ".join(row) for row in actual_rows]
    want = [normalize_line(x) for x in expected]
    if sort_mode == "rowsort":
        return sorted(got) == sorted(want)
    if sort_mode == "valuesort":
        return sorted(" ".join(got).split()) == sorted(" ".join(want).split())
    return got == want


# ---------------------------------------------------------------------------- execution


class QueryError(Exception):
    """The server rejected a statement (or the connection broke)."""

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate


class Timeout(QueryError):
    pass


_CREATE = re.compile(
    r"^\s*create\s+(?:or\s+replace\s+)?(?:(?:temp|temporary|external|unlogged)\s+)?"
    r"(materialized\s+view|view|table|stream|source|sink|index|function|schema|secret|connection|"
    r"type|subscription|database|user|role|sequence|aggregate)\s+"
    r"(?:if\s+not\s+exists\s+)?((?:\"[^\"]+\"|[\w$]+)(?:\s*\.\s*(?:\"[^\"]+\"|[\w$]+))?)",
    re.IGNORECASE,
)
_NO_CASCADE = {"database", "user", "role"}


def created_object(sql: str) -> tuple[str, str] | None:
    """('materialized view', 'mv1') for a CREATE statement, else None."""
    m = _CREATE.match(_strip_leading_comments(sql))
    if not m:
        return None
    kind = " ".join(m.group(1).lower().split())
    return kind, re.sub(r"\s+", "", m.group(2))


def _strip_leading_comments(sql: str) -> str:
    out = sql
    while True:
        s = out.lstrip()
        if s.startswith("--"):
            nl = s.find("\n")
            out = "" if nl < 0 else s[nl + 1 :]
        else:
            return s


def drop_statement(kind: str, name: str) -> str:
    cascade = "" if kind in _NO_CASCADE else " CASCADE"
    return f"DROP {kind.upper()} IF EXISTS {name}{cascade}"


class Connection:
    """A psycopg connection that returns every value as the server's text (or None)."""

    def __init__(self, dsn: str, connect_timeout: float) -> None:
        import psycopg
        from psycopg.adapt import Loader

        class RawText(Loader):
            def load(self, data: Any) -> str:
                return bytes(data).decode("utf-8", "replace")

        self._psycopg = psycopg
        self.conn = psycopg.connect(dsn, autocommit=True, connect_timeout=max(1, int(connect_timeout)))
        adapters = self.conn.adapters
        adapters.register_loader(0, RawText)  # fallback for every oid without a loader
        for info in psycopg.postgres.types:
            adapters.register_loader(info.oid, RawText)
            if info.array_oid:
                adapters.register_loader(info.array_oid, RawText)

    def execute(self, sql: str, timeout: float) -> tuple[list[list[str | None]] | None, int]:
        """Run `sql` with the simple query protocol. Returns (rows or None, rowcount)."""
        psycopg = self._psycopg
        fired = threading.Event()

        def on_timeout() -> None:
            fired.set()
            try:
                self.conn.cancel_safe(timeout=3)
            except Exception:  # noqa: BLE001 - best effort
                pass

        def hard_kill() -> None:
            # The server ignored the cancel request: break the socket so the call returns.
            try:
                sock = socket.socket(fileno=os.dup(self.conn.fileno()))
                sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            except Exception:  # noqa: BLE001
                pass

        timer = threading.Timer(timeout, on_timeout)
        killer = threading.Timer(timeout + 5, hard_kill)
        timer.daemon = killer.daemon = True
        timer.start()
        killer.start()
        try:
            with self.conn.cursor() as cur:
                cur.execute(sql.encode("utf-8"))  # no params => simple query protocol
                rows = None
                if cur.description is not None:
                    rows = [list(r) for r in cur.fetchall()]
                return rows, cur.rowcount
        except psycopg.Error as exc:
            if fired.is_set():
                raise Timeout(f"timed out after {timeout:g}s: {_pg_message(exc)}", "57014") from None
            raise QueryError(_pg_message(exc), getattr(exc, "sqlstate", None)) from None
        finally:
            timer.cancel()
            killer.cancel()

    @property
    def broken(self) -> bool:
        return bool(self.conn.closed) or self.conn.broken

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:  # noqa: BLE001
            pass


def _pg_message(exc: Exception) -> str:
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    if primary:
        severity = getattr(diag, "severity", None) or "ERROR"
        text = f"db error: {severity}: {primary}"
        detail = getattr(diag, "message_detail", None)
        hint = getattr(diag, "message_hint", None)
        if detail:
            text += f"\nDETAIL: {detail}"
        if hint:
            text += f"\nHINT: {hint}"
        return text
    return str(exc).strip() or type(exc).__name__


_SUBST = re.compile(r"\\\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


class FileRunner:
    """Runs one top-level file (and what it includes) on fresh connections."""

    def __init__(self, runner: Runner, path: Path, result: FileResult) -> None:
        self.runner = runner
        self.top = path
        self.result = result
        self.connections: dict[str, Connection] = {}
        self.created: list[tuple[str, str]] = []
        self.variables: dict[str, str] = {}
        self.substitution = False
        self.sort_mode = "nosort"
        self.halted = False

    # -- connections

    def conn(self, name: str | None) -> Connection:
        key = name or "default"
        c = self.connections.get(key)
        if c is not None and c.broken:
            c.close()
            c = None
        if c is None:
            c = Connection(self.runner.dsn, self.runner.connect_timeout)
            self.connections[key] = c
        return c

    def close(self) -> None:
        for c in self.connections.values():
            c.close()
        self.connections.clear()

    def cleanup(self) -> None:
        """Drop what the file created (best effort, newest first) on a fresh connection."""
        if not self.created:
            return
        try:
            c = Connection(self.runner.dsn, self.runner.connect_timeout)
        except Exception:  # noqa: BLE001
            return
        try:
            seen: set[tuple[str, str]] = set()
            for kind, name in reversed(self.created):
                if (kind, name.lower()) in seen:
                    continue
                seen.add((kind, name.lower()))
                try:
                    c.execute(drop_statement(kind, name), self.runner.timeout)
                except QueryError:
                    pass
        finally:
            c.close()

    # -- records

    def substitute(self, sql: str) -> str:
        if not self.substitution:
            return sql

        def repl(m: re.Match[str]) -> str:
            if m.group(0) == "\\$":
                return "$"
            name = m.group(1) or m.group(2)
            if name in self.variables:
                return self.variables[name]
            if name == "__TEST_DIR__":
                return str(self.runner.work_dir)
            if name == "__DATABASE__":
                return self.runner.database
            if name in os.environ:
                return os.environ[name]
            return m.group(0)

        return _SUBST.sub(repl, sql)

    def run_records(self, records: Iterable[Record], depth: int = 0) -> None:
        for rec in records:
            if self.halted:
                return
            self.run_record(rec, depth)

    def skip(self, rec: Record, reason: str) -> None:
        self.result.skipped += 1
        self.result.skips.append(Skip(rec.path, rec.line, reason))

    def fail(self, rec: Record, message: str, sql: str | None = None,
             expected: list[str] | None = None, actual: list[str] | None = None) -> None:
        self.result.failed += 1
        self.result.failures.append(Failure(rec.path, rec.line, sql if sql is not None else rec.sql,
                                            message, expected, actual))
        if self.runner.verbose:
            print(f"  FAIL {rec.path}:{rec.line}: {message.splitlines()[0] if message else ''}",
                  file=sys.stderr)

    def run_record(self, rec: Record, depth: int) -> None:
        labels = self.runner.labels
        for cond, label in rec.conditions:
            if (cond == "skipif" and label in labels) or (cond == "onlyif" and label not in labels):
                return  # not this engine's record: neither run nor counted
        if rec.kind not in ("halt", "control"):
            reason = self.runner.skiplist.record_reason(rec.path, rec.line)
            if reason:
                self.skip(rec, reason)
                return
        if rec.kind == "halt":
            self.halted = True
        elif rec.kind == "include":
            self.include(rec, depth)
        elif rec.kind == "control":
            self.control(rec)
        elif rec.kind == "sleep":
            try:
                time.sleep(min(parse_duration(rec.arg), self.runner.max_sleep))
            except ParseError as exc:
                self.fail(rec, str(exc), sql=f"sleep {rec.arg}")
        elif rec.kind in ("system", "unsupported"):
            self.skip(rec, rec.reason)
        elif rec.kind == "let":
            self.run_let(rec)
        elif rec.kind == "statement":
            self.run_with_retry(rec, self.run_statement)
        elif rec.kind == "query":
            self.run_with_retry(rec, self.run_query)

    def include(self, rec: Record, depth: int) -> None:
        if depth > 16:
            self.fail(rec, "include nesting too deep", sql=f"include {rec.arg}")
            return
        base = Path(rec.path).parent
        target = self.substitute(rec.arg)
        pattern = target if os.path.isabs(target) else str(base / target)
        matches = sorted(glob.glob(pattern, recursive=True))
        if not matches:
            self.fail(rec, f"include target not found: {target}", sql=f"include {rec.arg}")
            return
        for m in matches:
            if self.halted:
                return
            reason = self.runner.skiplist.file_reason(m)
            if reason:
                self.skip(Record(kind="include", path=m, line=0), f"included file skipped: {reason}")
                continue
            try:
                records = parse(Path(m).read_text(), m)
            except (OSError, ParseError) as exc:
                self.fail(rec, f"cannot parse included file {m}: {exc}", sql=f"include {rec.arg}")
                continue
            self.run_records(records, depth + 1)

    def control(self, rec: Record) -> None:
        parts = rec.arg.split()
        if len(parts) == 2 and parts[0] == "substitution" and parts[1] in ("on", "off"):
            self.substitution = parts[1] == "on"
        elif len(parts) == 2 and parts[0] == "sortmode" and parts[1] in ("nosort", "rowsort", "valuesort"):
            self.sort_mode = parts[1]
        else:
            self.skip(rec, f"unsupported control: {rec.arg}")

    def run_with_retry(self, rec: Record, fn: Any) -> None:
        retries = rec.retry if self.runner.max_retry is None else min(rec.retry, self.runner.max_retry)
        attempts = retries + 1
        last: tuple[str, list[str] | None, list[str] | None] | None = None
        for attempt in range(attempts):
            last = fn(rec)
            if last is None:
                self.result.passed += 1
                return
            if attempt + 1 < attempts:
                time.sleep(rec.backoff)
        assert last is not None
        message, expected, actual = last
        self.fail(rec, message, sql=self.substitute(rec.sql), expected=expected, actual=actual)

    def _check_error(self, rec: Record, err: QueryError) -> tuple[str, None, None] | None:
        """An expected error happened: check its message if asked to."""
        if rec.error_regex:
            try:
                ok = re.search(rec.error_regex, err.message) is not None
            except re.error:
                ok = rec.error_regex in err.message
            if not ok:
                self.result.error_message_mismatches += 1
                if self.runner.strict_errors:
                    return (f"error message does not match /{rec.error_regex}/: {err.message}", None, None)
        elif rec.error_text:
            if normalize_line(rec.error_text) not in normalize_line(err.message):
                self.result.error_message_mismatches += 1
                if self.runner.strict_errors:
                    return (f"error message differs:\nexpected: {rec.error_text}\nactual:   {err.message}",
                            None, None)
        return None

    def run_statement(self, rec: Record) -> tuple[str, list[str] | None, list[str] | None] | None:
        sql = self.substitute(rec.sql)
        obj = created_object(sql)
        if obj is not None:
            self.created.append(obj)
        try:
            _, rowcount = self.conn(rec.connection).execute(sql, self.runner.timeout)
        except QueryError as err:
            if rec.expect == "error" and not isinstance(err, Timeout):
                return self._check_error(rec, err)
            return (f"statement failed: {err.message}", None, None)
        except Exception as exc:  # noqa: BLE001 - connection failures
            return (f"connection error: {exc}", None, None)
        if rec.expect == "error":
            return ("statement succeeded but an error was expected", None, None)
        if rec.expect == "count" and rowcount != rec.count:
            return (f"statement affected {rowcount} rows, expected {rec.count}", None, None)
        return None

    def run_query(self, rec: Record) -> tuple[str, list[str] | None, list[str] | None] | None:
        sql = self.substitute(rec.sql)
        try:
            rows, _ = self.conn(rec.connection).execute(sql, self.runner.timeout)
        except QueryError as err:
            if rec.expect == "error" and not isinstance(err, Timeout):
                return self._check_error(rec, err)
            return (f"query failed: {err.message}", rec.results, None)
        except Exception as exc:  # noqa: BLE001
            return (f"connection error: {exc}", rec.results, None)
        if rec.expect == "error":
            return ("query succeeded but an error was expected", None, None)
        actual_rows = [[normalize_value(v) for v in row] for row in (rows or [])]
        expected = rec.results or []
        sort_mode = rec.sort_mode or self.sort_mode
        if compare_results(actual_rows, expected, sort_mode):
            return None
        actual = [" ".join(r) for r in actual_rows]
        if sort_mode == "rowsort":
            actual = sorted(actual)
            expected = sorted(normalize_line(x) for x in expected)
        return ("query result mismatch", list(expected), actual)

    def run_let(self, rec: Record) -> None:
        names = [x.strip() for x in rec.arg.split(",") if x.strip()]
        sql = self.substitute(rec.sql)
        try:
            rows, _ = self.conn(rec.connection).execute(sql, self.runner.timeout)
        except QueryError as err:
            self.fail(rec, f"let query failed: {err.message}", sql=sql)
            return
        except Exception as exc:  # noqa: BLE001
            self.fail(rec, f"connection error: {exc}", sql=sql)
            return
        if not rows or len(rows[0]) < len(names):
            self.fail(rec, f"let query returned no row with {len(names)} columns", sql=sql)
            return
        for name, value in zip(names, rows[0], strict=False):
            self.variables[name] = "NULL" if value is None else str(value)
        self.result.passed += 1


@dataclass
class Runner:
    dsn: str
    timeout: float = 30.0
    connect_timeout: float = 10.0
    skiplist: SkipList = field(default_factory=SkipList)
    labels: frozenset[str] = frozenset(DEFAULT_LABELS)
    strict_errors: bool = False
    max_sleep: float = 60.0
    max_retry: int | None = None  # cap for `retry N` (None = as the file says)
    verbose: bool = False
    work_dir: Path = field(default_factory=lambda: Path.cwd())

    @property
    def database(self) -> str:
        m = re.search(r"/([^/?]+)(\?|$)", self.dsn.split("://", 1)[-1])
        return m.group(1) if m else ""

    def run_file(self, path: Path) -> FileResult:
        result = FileResult(path=str(path))
        reason = self.skiplist.file_reason(str(path))
        if reason:
            result.status = "skip"
            result.reason = reason
            return result
        t0 = time.monotonic()
        try:
            records = parse(path.read_text(), str(path))
        except (OSError, ParseError) as exc:
            result.status = "error"
            result.reason = f"cannot parse: {exc}"
            result.seconds = time.monotonic() - t0
            return result
        fr = FileRunner(self, path, result)
        try:
            fr.run_records(records)
        except Exception as exc:  # noqa: BLE001 - e.g. cannot connect at all
            result.status = "error"
            result.reason = f"{type(exc).__name__}: {exc}"
        finally:
            fr.close()
            fr.cleanup()
        result.seconds = time.monotonic() - t0
        if result.status != "error":
            result.status = "fail" if result.failed else "pass"
        return result

    def run(self, paths: Iterable[Path]) -> Iterator[FileResult]:
        for p in paths:
            yield self.run_file(p)


def collect(paths: Iterable[str]) -> list[Path]:
    """Expand arguments: files as given, directories -> **/*.slt (not .slt.part), globs."""
    out: list[Path] = []
    for arg in paths:
        p = Path(arg)
        if p.is_dir():
            out.extend(sorted(x for x in p.rglob("*.slt") if x.is_file()))
        elif p.is_file():
            out.append(p)
        else:
            matches = sorted(glob.glob(arg, recursive=True))
            if not matches:
                raise SystemExit(f"no such file: {arg}")
            out.extend(Path(m) for m in matches)
    seen: set[Path] = set()
    unique = []
    for p in out:
        if p not in seen:
            seen.add(p)
            unique.append(p)
    return unique


def summarize(results: list[FileResult]) -> dict[str, Any]:
    return {
        "files": len(results),
        "files_passed": sum(r.status == "pass" for r in results),
        "files_failed": sum(r.status == "fail" for r in results),
        "files_errored": sum(r.status == "error" for r in results),
        "files_skipped": sum(r.status == "skip" for r in results),
        "records_passed": sum(r.passed for r in results),
        "records_failed": sum(r.failed for r in results),
        "records_skipped": sum(r.skipped for r in results),
        "error_message_mismatches": sum(r.error_message_mismatches for r in results),
        "seconds": round(sum(r.seconds for r in results), 3),
    }


def format_file_line(r: FileResult) -> str:
    status = r.status.upper()
    line = f"{status:<5} {r.path}  passed={r.passed} failed={r.failed} skipped={r.skipped}  ({r.seconds:.2f}s)"
    if r.reason:
        line += f"  [{r.reason}]"
    return line


def format_failure(f: Failure, max_lines: int = 12) -> str:
    out = [f"    {f.path}:{f.line}: {f.message.splitlines()[0] if f.message else ''}"]
    extra = f.message.splitlines()[1:]
    out += [f"      {x}" for x in extra[:max_lines]]
    sql = " ".join(f.sql.split())
    out.append(f"      sql: {sql[:300]}")
    if f.expected is not None:
        out.append("      expected:")
        out += [f"        {x}" for x in f.expected[:max_lines]]
        if len(f.expected) > max_lines:
            out.append(f"        ... ({len(f.expected) - max_lines} more)")
    if f.actual is not None:
        out.append("      actual:")
        out += [f"        {x}" for x in f.actual[:max_lines]]
        if len(f.actual) > max_lines:
            out.append(f"        ... ({len(f.actual) - max_lines} more)")
    return "\n".join(out)


def format_total(t: dict[str, Any]) -> str:
    return (
        f"TOTAL files={t['files']} (pass={t['files_passed']} fail={t['files_failed']} "
        f"error={t['files_errored']} skip={t['files_skipped']}) "
        f"records: passed={t['records_passed']} failed={t['records_failed']} skipped={t['records_skipped']}"
        f"  error-message-mismatches={t['error_message_mismatches']}  ({t['seconds']:.1f}s)"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.slt.runner",
                                 description="Run sqllogictest files against a Postgres-wire server.")
    ap.add_argument("paths", nargs="+", metavar="PATH", help=".slt files, directories or globs")
    ap.add_argument("--dsn", default=os.environ.get("STREAMDB_DSN",
                                                    "postgresql://streamdb@127.0.0.1:6875/streamdb"))
    ap.add_argument("--json", metavar="OUT", help="write a JSON report to OUT")
    ap.add_argument("--timeout-per-record", type=float, default=30.0, metavar="SECONDS")
    ap.add_argument("--connect-timeout", type=float, default=10.0, metavar="SECONDS")
    ap.add_argument("--skiplist", default=str(DEFAULT_SKIPLIST), help="TOML skip list ('' for none)")
    ap.add_argument("--label", action="append", default=None,
                    help="engine label for skipif/onlyif (repeatable; default: streamdb)")
    ap.add_argument("--strict-errors", action="store_true",
                    help="an expected error must also match the expected message/regex")
    ap.add_argument("--max-failures-shown", type=int, default=5, help="per file (0 = none)")
    ap.add_argument("--max-sleep", type=float, default=60.0, help="cap for `sleep` records, seconds")
    ap.add_argument("--max-retry", type=int, default=None,
                    help="cap the `retry N` of records (default: as written; 0 = never retry)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)

    runner = Runner(
        dsn=args.dsn,
        timeout=args.timeout_per_record,
        connect_timeout=args.connect_timeout,
        skiplist=SkipList.load(Path(args.skiplist) if args.skiplist else None),
        labels=frozenset(args.label or DEFAULT_LABELS),
        strict_errors=args.strict_errors,
        max_sleep=args.max_sleep,
        max_retry=args.max_retry,
        verbose=args.verbose,
    )
    results: list[FileResult] = []
    for r in runner.run(collect(args.paths)):
        results.append(r)
        print(format_file_line(r), flush=True)
        for f in r.failures[: args.max_failures_shown]:
            print(format_failure(f), flush=True)
        if len(r.failures) > args.max_failures_shown > 0:
            print(f"    ... {len(r.failures) - args.max_failures_shown} more failures", flush=True)
    totals = summarize(results)
    print(format_total(totals), flush=True)
    if args.json:
        report = {"dsn": args.dsn, "labels": sorted(runner.labels), "strict_errors": args.strict_errors,
                  "totals": totals, "files": [r.to_json() for r in results]}
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0 if totals["records_failed"] == 0 and totals["files_errored"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
