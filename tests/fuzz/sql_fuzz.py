"""A SQL fuzzer over StreamDB's dialect, run over psycopg against a real server.

Statements come from productions (CREATE STREAM/TABLE/MATERIALIZED VIEW with random column types
and options, INSERT with literals of every type, SELECT with random expressions, functions, joins,
GROUP BY and TUMBLE/HOP windows, EMIT CHANGES cancelled after a moment, SHOW, DROP, COPY) and
from mutations of them (token deletions, swaps, random keywords). Pass criteria: no internal
error (SQLSTATE XX000) unless docs/known-issues.md files it (matched by a fragment of its
message), and the connection answers SELECT 1 after every error.

    python -m tests.fuzz.sql_fuzz --statements 5000 --seed 1 --host 127.0.0.1 --port 5432
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

KNOWN_ISSUES = Path(__file__).resolve().parents[2] / "docs" / "known-issues.md"

TYPES = ["INT", "BIGINT", "SMALLINT", "TEXT", "VARCHAR(8)", "BOOLEAN", "DOUBLE PRECISION", "REAL",
         "NUMERIC(10,2)", "NUMERIC", "DATE", "TIMESTAMP", "TIMESTAMPTZ", "INTERVAL", "JSONB", "BYTEA",
         "INT[]", "TEXT[]", "UUID", "TIME"]
KEYWORDS = ["SELECT", "FROM", "WHERE", "GROUP", "BY", "ORDER", "LIMIT", "JOIN", "ON", "AS", "EMIT", "CHANGES",
            "WINDOW", "TUMBLE", "HOP", "INTERVAL", "NULL", "NOT", "AND", "OR", "CASE", "WHEN", "THEN", "END",
            "(", ")", ",", "*", "=", "::", "'", "DISTINCT", "HAVING", "UNION", "VALUES", "KEY", "PRIMARY",
            "MATERIALIZED", "VIEW", "STREAM", "TABLE", "DROP", "CASCADE", "WITH", "COPY", "STDIN", "STDOUT",
            "SHOW", "CREATE", "INSERT", "INTO", "OVER", "PARTITION", "ROWTIME", "[", "]", "$1", ";"]
LITERALS: dict[str, list[str]] = {
    "INT": ["0", "1", "-1", "2147483647", "-2147483648", "2147483648", "99999999999999999999", "'7'", "'x'"],
    "BIGINT": ["9223372036854775807", "-9223372036854775808", "9223372036854775808", "42"],
    "SMALLINT": ["32767", "32768", "-32769", "5"],
    "TEXT": ["''", "'hello'", "'it''s'", "'ünïcødé 🚀'", "E'tab\\there'", "E'nul\\x00byte'", "'" + "z" * 300 + "'"],
    "VARCHAR(8)": ["'short'", "'much too long for eight'"],
    "BOOLEAN": ["true", "false", "'t'", "'maybe'", "NULL"],
    "DOUBLE PRECISION": ["1.5", "'NaN'", "'Infinity'", "-1e308", "1e309", "1e-320", "0.1"],
    "REAL": ["3.4e38", "3.5e38", "1.25"],
    "NUMERIC(10,2)": ["12345678.91", "123456789012.5", "0.005", "'NaN'"],
    "NUMERIC": ["1e1000", "0.000000000000000000001", "-0"],
    "DATE": ["'2024-02-29'", "'2023-02-29'", "'0001-01-01'", "'infinity'", "DATE '2024-01-01'"],
    "TIMESTAMP": ["'2024-01-01 00:00:00'", "'2024-13-01 00:00'", "TIMESTAMP '2024-06-01 12:00:00'", "now()"],
    "TIMESTAMPTZ": ["'2024-01-01 00:00:00+02'", "'epoch'", "now()", "'294277-01-01'"],
    "INTERVAL": ["INTERVAL '1' SECOND", "'1 day 2 hours'", "'P1Y2M'", "'-1 minute'", "'forever'"],
    "JSONB": ["'{\"a\": [1, 2, {\"b\": null}]}'", "'[]'", "'{bad json'", "'\"\\u0000\"'"],
    "BYTEA": ["'\\xdeadbeef'", "'\\xZZ'", "'plain'", "decode('00ff', 'hex')"],
    "INT[]": ["ARRAY[1, 2, 3]", "'{1,2,NULL}'", "'{1,{2}}'", "ARRAY[]::INT[]"],
    "TEXT[]": ["ARRAY['a', 'b']", "'{\"x\", y}'"],
    "UUID": ["'00000000-0000-0000-0000-000000000000'", "'not-a-uuid'", "gen_random_uuid()"],
    "TIME": ["'12:34:56'", "'25:00:00'", "TIME '00:00:01'"],
}
FUNCTIONS_1 = ["abs", "lower", "upper", "length", "round", "ceil", "floor", "trim", "md5", "sqrt", "ln", "exp",
               "sign", "reverse", "to_json", "pg_typeof", "octet_length", "char_length", "initcap", "cardinality",
               "jsonb_typeof", "array_length", "date_trunc", "extract", "to_char", "not_a_function"]
AGGREGATES = ["count(*)", "count({e})", "sum({e})", "avg({e})", "min({e})", "max({e})", "count(DISTINCT {e})",
              "string_agg({e}::text, ',')", "bool_and({e} IS NULL)", "array_agg({e})", "stddev({e})"]
BINARY_OPS = ["+", "-", "*", "/", "%", "||", "=", "<>", "<", ">=", "AND", "OR", "LIKE", "IS DISTINCT FROM", "->",
              "->>", "@>", "^", "&", "<<"]


@dataclass
class Relation:
    name: str
    kind: str  # stream | table | view
    columns: list[tuple[str, str]]
    time_column: str | None = None


@dataclass
class Finding:
    statement: str
    sqlstate: str
    message: str


@dataclass
class State:
    prefix: str
    relations: list[Relation] = field(default_factory=list)
    counter: int = 0

    def new_name(self, kind: str) -> str:
        self.counter += 1
        return f"{self.prefix}_{kind}{self.counter}"


class Generator:
    def __init__(self, rng: random.Random, state: State) -> None:
        self.rng = rng
        self.state = state

    # --- pieces --------------------------------------------------------------------------------

    def literal(self, sql_type: str | None = None) -> str:
        t = sql_type if sql_type in LITERALS else self.rng.choice(list(LITERALS))
        value = self.rng.choice(LITERALS[t])
        if self.rng.random() < 0.1:
            return "NULL"
        if self.rng.random() < 0.1:
            return f"CAST({value} AS {self.rng.choice(TYPES)})"
        return value

    def expr(self, rel: Relation | None, depth: int = 0) -> str:
        r = self.rng.random()
        if rel is not None and rel.columns and (r < 0.35 or depth > 2):
            return self.rng.choice(rel.columns)[0]
        if r < 0.5 or depth > 2:
            return self.literal()
        if r < 0.65:
            return f"({self.expr(rel, depth + 1)} {self.rng.choice(BINARY_OPS)} {self.expr(rel, depth + 1)})"
        if r < 0.75:
            f = self.rng.choice(FUNCTIONS_1)
            arg = self.expr(rel, depth + 1)
            if f == "date_trunc":
                return f"date_trunc('{self.rng.choice(['hour', 'day', 'bogus'])}', {arg})"
            if f == "extract":
                return f"extract({self.rng.choice(['epoch', 'year', 'dow', 'nope'])} FROM {arg})"
            if f == "to_char":
                return f"to_char({arg}, 'YYYY-MM-DD')"
            return f"{f}({arg})"
        if r < 0.82:
            return f"CASE WHEN {self.expr(rel, depth + 1)} THEN {self.expr(rel, depth + 1)} ELSE NULL END"
        if r < 0.88:
            return f"{self.expr(rel, depth + 1)}::{self.rng.choice(TYPES)}"
        if r < 0.93:
            return f"coalesce({self.expr(rel, depth + 1)}, {self.expr(rel, depth + 1)})"
        return f"nullif({self.expr(rel, depth + 1)}, {self.literal()})"

    def relation(self, *kinds: str) -> Relation | None:
        candidates = [r for r in self.state.relations if not kinds or r.kind in kinds]
        return self.rng.choice(candidates) if candidates else None

    def columns(self, with_time: bool) -> list[tuple[str, str]]:
        cols = [(f"c{i}", self.rng.choice(TYPES)) for i in range(self.rng.randint(1, 6))]
        if with_time:
            cols.append(("ts", self.rng.choice(["TIMESTAMP", "TIMESTAMPTZ"])))
        return cols

    # --- productions ---------------------------------------------------------------------------

    def create_stream(self) -> tuple[str, Relation]:
        name = self.state.new_name("s")
        with_time = self.rng.random() < 0.6
        cols = self.columns(with_time)
        parts = [f"{n} {t}" for n, t in cols]
        if self.rng.random() < 0.2:
            parts[0] += " KEY"
        options = []
        if self.rng.random() < 0.3:
            options.append(f"partitions = {self.rng.choice([1, 2, 3, 0, -1, 1000])}")
        if with_time and self.rng.random() < 0.4:
            options.append("timestamp = 'ts'")
            if self.rng.random() < 0.5:
                options.append(f"watermark = '{self.rng.choice(['1 minute', '5 seconds', 'soon'])}'")
        if self.rng.random() < 0.05:
            options.append("colour = 'red'")
        with_clause = f" WITH ({', '.join(options)})" if options else ""
        return (f"CREATE STREAM {name} ({', '.join(parts)}){with_clause}",
                Relation(name, "stream", cols, "ts" if with_time else None))

    def create_table(self) -> tuple[str, Relation]:
        name = self.state.new_name("t")
        cols = [("id", self.rng.choice(["INT", "BIGINT", "TEXT"]))] + self.columns(False)
        parts = [f"{n} {t}" for n, t in cols]
        if self.rng.random() < 0.85:
            parts[0] += " PRIMARY KEY"
        if self.rng.random() < 0.2:
            parts[-1] += " NOT NULL"
        return f"CREATE TABLE {name} ({', '.join(parts)})", Relation(name, "table", cols)

    def select(self, rel: Relation | None = None, allow_emit: bool = False) -> str:
        rel = rel or self.relation()
        if rel is None:
            return f"SELECT {self.expr(None)}"
        r = self.rng.random()
        if r < 0.2 and rel.time_column:
            size = self.rng.choice(["INTERVAL '10' SECOND", "INTERVAL '1' MINUTE", "INTERVAL '0' SECOND"])
            if self.rng.random() < 0.5:
                src = f"TUMBLE({rel.name}, {rel.time_column}, {size})"
            else:
                src = f"HOP({rel.name}, {rel.time_column}, INTERVAL '5' SECOND, {size})"
            sql = f"SELECT window_start, window_end, count(*) AS n FROM {src} GROUP BY window_start, window_end"
        elif r < 0.4:
            key = self.rng.choice(rel.columns)[0]
            agg = self.rng.choice(AGGREGATES).format(e=self.expr(rel, 1))
            sql = f"SELECT {key}, {agg} AS a FROM {rel.name} GROUP BY {key}"
            if self.rng.random() < 0.3:
                sql += f" HAVING count(*) > {self.rng.randint(0, 3)}"
        elif r < 0.55:
            other = self.relation() or rel
            left, right = rel.columns[0][0], other.columns[0][0]
            join = self.rng.choice(["JOIN", "LEFT JOIN", "FULL JOIN", "CROSS JOIN"])
            on = "" if join == "CROSS JOIN" else f" ON a.{left} = b.{right}"
            sql = f"SELECT a.{left}, b.{right} FROM {rel.name} a {join} {other.name} b{on}"
        else:
            exprs = ", ".join(f"{self.expr(rel)} AS e{i}" for i in range(self.rng.randint(1, 4)))
            sql = f"SELECT {exprs} FROM {rel.name}"
            if self.rng.random() < 0.5:
                sql += f" WHERE {self.expr(rel)}"
        if not allow_emit and self.rng.random() < 0.3:
            sql += f" ORDER BY 1 LIMIT {self.rng.choice([0, 1, 10, -1])}"
        return sql

    def insert(self) -> str:
        rel = self.relation("stream", "table")
        if rel is None:
            return f"INSERT INTO nowhere VALUES ({self.literal()})"
        rows = []
        for _ in range(self.rng.randint(1, 3)):
            values = [self.literal(t) if self.rng.random() < 0.85 else self.literal() for _, t in rel.columns]
            if self.rng.random() < 0.05:
                values.append(self.literal())
            rows.append(f"({', '.join(values)})")
        return f"INSERT INTO {rel.name} VALUES {', '.join(rows)}"

    def statement(self) -> tuple[str, Relation | None, str]:
        """(sql, relation it creates or None, kind)."""
        r = self.rng.random()
        if r < 0.10 or not self.state.relations:
            sql, rel = self.create_stream() if self.rng.random() < 0.5 else self.create_table()
            return sql, rel, "create"
        if r < 0.13:
            base = self.relation("stream", "table")
            name = self.state.new_name("v")
            query = self.select(base, allow_emit=True)
            return f"CREATE MATERIALIZED VIEW {name} AS {query}", None, "create_view"
        if r < 0.40:
            return self.insert(), None, "insert"
        if r < 0.70:
            return self.select(), None, "select"
        if r < 0.73:
            return self.select(allow_emit=True) + " EMIT CHANGES", None, "emit_changes"
        if r < 0.78:
            what = self.rng.choice(["STREAMS", "TABLES", "MATERIALIZED VIEWS", "SOURCES", "SINKS", "CONNECTORS",
                                    "QUERIES", "ALL", "statement_timeout", "nonsense_setting"])
            return f"SHOW {what}", None, "show"
        if r < 0.82:
            rel = self.relation("stream", "table")
            if rel is not None:
                if self.rng.random() < 0.5:
                    return f"COPY {rel.name} TO STDOUT", None, "copy_out"
                return f"COPY {rel.name} FROM STDIN", None, "copy_in"
        if r < 0.85:
            rel = self.relation()
            if rel is not None:
                return f"SHOW CREATE {self.rng.choice(['STREAM', 'TABLE', 'MATERIALIZED VIEW'])} {rel.name}", None, \
                    "show"
        if r < 0.88:
            rel = self.relation()
            if rel is not None:
                word = {"stream": "STREAM", "table": "TABLE", "view": "MATERIALIZED VIEW"}[rel.kind]
                cascade = " CASCADE" if self.rng.random() < 0.5 else ""
                return f"DROP {word} {rel.name}{cascade}", None, "drop"
        # A mutation of some other production.
        base, _rel, _kind = self.statement()
        return self.mutate(base), None, "mutation"

    def mutate(self, sql: str) -> str:
        tokens = re.findall(r"'(?:[^']|'')*'|\w+|::|[^\s\w]", sql)
        for _ in range(self.rng.randint(1, 3)):
            if not tokens:
                break
            op = self.rng.randrange(4)
            i = self.rng.randrange(len(tokens))
            if op == 0:
                del tokens[i]
            elif op == 1:
                j = self.rng.randrange(len(tokens))
                tokens[i], tokens[j] = tokens[j], tokens[i]
            elif op == 2:
                tokens.insert(i, self.rng.choice(KEYWORDS))
            else:
                tokens[i] = self.literal()
        return " ".join(tokens)


# --- running ------------------------------------------------------------------------------------

def known_issue_fragments(path: Path = KNOWN_ISSUES) -> list[str]:
    """Message fragments of filed, still open internal errors in docs/known-issues.md: the
    `- **Error**: `...`` line of each `### ` entry whose `- **Status**:` starts with "open"."""
    if not path.exists():
        return []
    fragments: list[str] = []
    for entry in path.read_text().split("\n### ")[1:]:
        if re.search(r"^- \*\*Status\*\*: open", entry, flags=re.MULTILINE):
            fragments += re.findall(r"^- \*\*Error\*\*: `([^`]+)`", entry, flags=re.MULTILINE)
    return fragments


def _copy_rows(rng: random.Random) -> bytes:
    lines = [rng.choice(["1\tx", "\\N", "a\tb\tc", "", "2024-01-01", "\\x41", "é\t1"]) for _ in range(3)]
    return ("\n".join(lines) + "\n").encode()


def run_statement(conn: psycopg.Connection, sql: str, kind: str, rng: random.Random,
                  cancel_after: float) -> tuple[str | None, str]:
    """Run one statement; (sqlstate or None, message). A statement still running after
    `cancel_after` seconds (EMIT CHANGES always) is cancelled."""
    if sql.lstrip().upper().startswith("COPY"):  # e.g. a mutation: psycopg runs COPY only via copy()
        kind = "copy_in" if "STDIN" in sql.upper() else "copy_out"
    timer = threading.Timer(cancel_after, conn.cancel)
    timer.start()
    try:
        with conn.cursor() as cur:
            if kind == "copy_in":
                with cur.copy(sql) as copy:
                    copy.write(_copy_rows(rng))
            elif kind == "copy_out":
                with cur.copy(sql) as copy:
                    for _ in copy:
                        pass
            else:
                cur.execute(sql)
                if cur.description is not None:
                    cur.fetchall()
        return None, ""
    except psycopg.Error as e:
        text = str(e).strip()
        return e.sqlstate or "?", f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"
    finally:
        timer.cancel()


# Ties under ORDER BY ... LIMIT are broken arbitrarily, and the clock and random() differ per run.
_UNCOMPARABLE = re.compile(r"\b(ORDER BY|LIMIT|now|random|gen_random_uuid|current_timestamp|clock_timestamp)\b",
                           re.I)


def answer(conn: psycopg.Connection, sql: str) -> tuple[str, Any]:
    """("ok", (columns, sorted rows as printed)) or ("error", sqlstate). Doubles are compared to
    12 significant digits: the engines add them in different orders."""
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            if cur.description is None or cur.pgresult is None:
                return "ok", None
            result = cur.pgresult
            floats = {i for i, d in enumerate(cur.description) if d.type_code in (700, 701)}
            rows = []
            for r in range(result.ntuples):
                row = []
                for c in range(result.nfields):
                    v = result.get_value(r, c)
                    text = None if v is None else bytes(v).decode()
                    if text is not None and c in floats:
                        try:
                            text = f"{float(text):.12g}"
                        except ValueError:
                            pass
                    row.append(text)
                rows.append(tuple(row))
            columns = [(d.name, d.type_code) for d in cur.description]
            return "ok", (columns, sorted(rows, key=lambda r: tuple((v is None, v or "") for v in r)))
    except psycopg.Error as e:
        return "error", e.sqlstate


def engines_differ(conn: psycopg.Connection, spark: psycopg.Connection, sql: str) -> dict[str, Any] | None:
    """The same query through the embedded engine (`conn`) and Spark (`spark`, told to use it for
    every read): None when both give the same columns and rows (or both fail), else both answers."""
    embedded = answer(conn, sql)
    used = conn.execute("SHOW streamdb.last_query_engine").fetchone()
    on_spark = answer(spark, sql)
    if embedded[0] == on_spark[0] == "error" or embedded == on_spark:
        return None
    return {"sql": sql, "embedded": embedded, "spark": on_spark, "engine": used[0] if used else None}


def fuzz(dsn: str, statements: int, seed: int, *, cancel_after: float = 0.3, slow_after: float = 20.0,
         log: Callable[[str], None] | None = None, compare_engines: bool = False) -> dict[str, Any]:
    """`compare_engines`: each plain SELECT that ran (no ORDER BY or LIMIT: ties would be
    arbitrary) runs again through both engines, and differing answers are reported."""
    rng = random.Random(seed)
    state = State(prefix=f"fz{seed % 10000}_{rng.randrange(10**6)}")
    gen = Generator(rng, state)
    known = known_issue_fragments()
    internal: list[Finding] = []
    filed: list[Finding] = []
    lost: list[str] = []
    sqlstates: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    slowest: list[tuple[float, str]] = []
    started = time.monotonic()
    conn = psycopg.connect(dsn, autocommit=True, connect_timeout=10)
    spark = psycopg.connect(dsn, autocommit=True, connect_timeout=10) if compare_engines else None
    if spark is not None:
        spark.execute("SET streamdb.spark_read_threshold_rows = 0")
    differences: list[dict[str, Any]] = []
    compared = 0
    try:
        for _ in range(statements):
            sql, rel, kind = gen.statement()
            kinds[kind] += 1
            limit = cancel_after if kind == "emit_changes" or "EMIT" in sql.upper() else slow_after
            t0 = time.monotonic()
            sqlstate, message = run_statement(conn, sql, kind, rng, limit)
            took = time.monotonic() - t0
            slowest = sorted([*slowest, (round(took, 2), sql[:200])], reverse=True)[:3]
            sqlstates[sqlstate or "ok"] += 1
            if sqlstate is None:
                if spark is not None and kind == "select" and not _UNCOMPARABLE.search(sql):
                    compared += 1
                    difference = engines_differ(conn, spark, sql)
                    if difference is not None:
                        differences.append(difference)
                        if log:
                            log(f"engines differ: {difference}")
                if rel is not None:
                    state.relations.append(rel)
                elif kind == "create_view":
                    name = sql.split()[3]
                    state.relations.append(Relation(name, "view", [("window_start", "TIMESTAMP")]))
                elif kind == "drop":
                    dropped = sql.split()[-2] if sql.endswith("CASCADE") else sql.split()[-1]
                    state.relations = [r for r in state.relations if r.name != dropped]
                continue
            if sqlstate == "XX000":
                finding = Finding(sql, sqlstate, message)
                (filed if any(f in message for f in known) else internal).append(finding)
                if log:
                    log(f"XX000: {message}\n    {sql}")
            try:  # the connection must stay usable after every error
                if conn.execute("SELECT 1").fetchone() != (1,):
                    lost.append(sql)
            except psycopg.Error as e:
                lost.append(f"{sql}  [{sqlstate}: {message}]  -> then SELECT 1 failed: {e}")
                conn.close()
                conn = psycopg.connect(dsn, autocommit=True, connect_timeout=10)
    finally:
        with conn.cursor() as cur:
            for rel in reversed(state.relations):
                word = {"stream": "STREAM", "table": "TABLE", "view": "MATERIALIZED VIEW"}[rel.kind]
                try:
                    cur.execute(f"DROP {word} IF EXISTS {rel.name} CASCADE")
                except psycopg.Error:
                    pass
        conn.close()
        if spark is not None:
            spark.close()
    elapsed = time.monotonic() - started
    return {
        "seed": seed,
        "statements": statements,
        "seconds": round(elapsed, 1),
        "statements_per_second": round(statements / elapsed, 1) if elapsed else 0.0,
        "kinds": dict(sorted(kinds.items())),
        "sqlstates": dict(sqlstates.most_common()),
        "internal_errors": [f.__dict__ for f in internal],
        "filed_internal_errors": len(filed),
        "connection_lost": lost,
        "slowest": slowest,
        "compared": compared,
        "engine_differences": differences,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--statements", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=5432)
    ap.add_argument("--user", default="streamdb")
    ap.add_argument("--database", default="streamdb")
    ap.add_argument("--compare-engines", action="store_true",
                    help="run each plain SELECT through both engines and report differing answers")
    args = ap.parse_args(argv)
    dsn = f"postgresql://{args.user}@{args.host}:{args.port}/{args.database}"
    report = fuzz(dsn, args.statements, args.seed, log=lambda line: print(line, file=sys.stderr),
                  compare_engines=args.compare_engines)
    print(json.dumps(report, indent=2, default=str))
    return 1 if report["internal_errors"] or report["connection_lost"] or report["engine_differences"] else 0


if __name__ == "__main__":
    sys.exit(main())
