"""pgjdbc (Debian's libpostgresql-jdbc-java) against a real server: a Java program compiled with
javac runs DDL, inserts (plain and a PreparedStatement batch), parameterized reads, and the
DatabaseMetaData calls BI tools make first (tests/java/StreamDbJdbc.java prints what it saw)."""

from __future__ import annotations

import datetime as dt
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

JAVA_SOURCE = ROOT / "tests" / "java" / "StreamDbJdbc.java"
JAR_DIR = Path("/usr/share/java")


def pgjdbc_jar() -> Path:
    for name in ("postgresql.jar", "postgresql-jdbc4.jar"):
        if (JAR_DIR / name).exists():
            return JAR_DIR / name
    return sorted(JAR_DIR.glob("postgresql*.jar"))[0]


@pytest.fixture(scope="session")
def jdbc_classpath() -> Iterator[str]:
    """javac and the pgjdbc jar (installed by scripts/ensure-jdbc.sh when missing), and the
    program compiled into a directory of its own."""
    subprocess.run([str(ROOT / "scripts" / "ensure-jdbc.sh")], check=True, timeout=600)
    jar = pgjdbc_jar()
    with tempfile.TemporaryDirectory(prefix="streamdb-jdbc-") as classes:
        out = subprocess.run(["javac", "-cp", str(jar), "-d", classes, str(JAVA_SOURCE)],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        yield f"{classes}:{jar}"


def run_jdbc_program(classpath: str, server, suffix: str) -> dict[str, list[tuple[str, ...]]]:
    url = f"jdbc:postgresql://{server.host}:{server.port}/streamdb"
    # A JVM zone other than UTC: pgjdbc sends it as the TimeZone startup parameter and with
    # timestamp and date parameters; instants and dates must still come back unchanged.
    out = subprocess.run(["java", "-Duser.timezone=Asia/Kolkata", "-cp", classpath, "StreamDbJdbc", url, suffix],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"stdout:\n{out.stdout}\nstderr:\n{out.stderr}"
    facts: dict[str, list[tuple[str, ...]]] = defaultdict(list)
    for line in out.stdout.splitlines():
        label, *values = line.split("|")
        facts[label].append(tuple(values))
    assert facts["done"] == [()], out.stdout
    return facts


def test_pgjdbc_ddl_inserts_reads_and_metadata(jdbc_classpath, server, conn, unique):
    facts = run_jdbc_program(jdbc_classpath, server, unique)
    clicks, users, per_user, slow = (f"{p}_{unique}" for p in ("jclicks", "jusers", "jper_user", "jslow"))

    product_name, product_version = facts["product"][0]
    assert product_name == "PostgreSQL" and product_version.startswith("15")
    assert facts["ddl"] == [("ok",)]
    assert facts["insert"] == [("3",)]
    assert facts["update"] == [("1",)]
    assert facts["batch"] == [("[1, 1, 1, 1, 1]",)]

    # The materialized view read with a bound parameter, twice (the statement is reused).
    assert facts["result_column"] == [("user_id", "text", "java.lang.String"),
                                      ("views", "int8", "java.lang.Long"),
                                      ("total_ms", "int8", "java.lang.Long")]
    assert facts["view_row"] == [("1", "ann", "3", "625"), ("1", "bob", "1", "340"), ("1", "cid", "1", "7"),
                                 ("2", "ann", "3", "625")]
    assert facts["user_row"] == [("2", "bob", "pro"), ("3", "cid", "team")]
    assert facts["slow_row"] == [("ann", "/pay")]
    # What the Java program wrote is what psycopg reads.
    assert conn.execute(f"SELECT count(*), sum(ms) FROM {clicks}").fetchone() == (5, 972)

    assert {"public", "pg_catalog", "information_schema"} <= {s for (s,) in facts["schema"]}
    assert {"TABLE", "VIEW", "MATERIALIZED VIEW"} <= {t for (t,) in facts["table_type"]}
    # Streams and tables are TABLEs (a derived stream too), views MATERIALIZED VIEWs.
    assert sorted(facts["table"]) == sorted([
        ("public", clicks, "TABLE"), ("public", users, "TABLE"), ("public", slow, "TABLE"),
        ("public", per_user, "MATERIALIZED VIEW")])

    # java.sql.Types: VARCHAR 12, INTEGER 4, BIGINT -5.
    columns = {(table, int(pos)): (name, type_name, int(sql_type), nullable)
               for table, pos, name, type_name, sql_type, nullable in facts["column"]}
    assert columns == {
        (clicks, 1): ("user_id", "text", 12, "YES"), (clicks, 2): ("page", "text", 12, "YES"),
        (clicks, 3): ("ms", "int4", 4, "YES"),
        (users, 1): ("id", "int4", 4, "NO"), (users, 2): ("name", "text", 12, "YES"),
        (users, 3): ("plan", "text", 12, "YES"),
        (per_user, 1): ("user_id", "text", 12, "YES"), (per_user, 2): ("views", "int8", -5, "YES"),
        (per_user, 3): ("total_ms", "int8", -5, "YES"),
        (slow, 1): ("user_id", "text", 12, "YES"), (slow, 2): ("page", "text", 12, "YES"),
    }
    assert facts["primary_key"] == [(users, "id", "1", f"{users}_pkey")]
    # getTypeInfo: java.sql.Types INTEGER 4, BIGINT -5, VARCHAR 12, DOUBLE 8, BIT -7, TIMESTAMP 93.
    assert facts["type_info"] == [("int4:4",), ("int8:-5",), ("text:12",), ("float8:8",), ("bool:-7",),
                                  ("timestamptz:93",)]
    assert facts["index"] == [(f"{users}_pkey", "id", "1", "false")]

    # Typed values through setters and getters; rounds 6-8 run as a named server-side statement
    # with binary results (pgjdbc's prepareThreshold is 5).
    expected = {
        1: ("1", "5000000000", "12.25", "0.25", "true", "2025-01-02T03:04:05.123Z", "2025-03-01", "note 1"),
        2: ("2", "10000000000", "24.5", "0.5", "false", "2025-01-02T03:04:05.123Z", "2025-03-02", "note 2"),
        3: ("3", "15000000000", "36.75", "0.75", "true", "2025-01-02T03:04:05.123Z", "2025-03-03", "null"),
    }
    assert facts["typed_row"] == [(str(r), *expected[(r - 1) % 3 + 1]) for r in range(1, 9)]
    assert conn.execute(f"SELECT amount, at, day FROM jtyped_{unique} WHERE id = 3").fetchone() == (
        Decimal("36.75"), dt.datetime(2025, 1, 2, 3, 4, 5, 123000, tzinfo=dt.UTC), dt.date(2025, 3, 3))
