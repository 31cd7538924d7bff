"""SparkRuntime against a real local Spark (one session for the whole module)."""

from __future__ import annotations

import datetime as dt
import decimal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest

from streamdb.errors import (
    DivisionByZero,
    FeatureNotSupported,
    ObjectNotInPrerequisiteState,
    SyntaxErrorSQL,
    UndefinedColumn,
    UndefinedTable,
)
from streamdb.runtime.spark import SparkRuntime

pytestmark = pytest.mark.timeout(180)

START_STATES: list[str] = []
START_CALL_SECONDS: list[float] = []


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkRuntime]:
    work = tmp_path_factory.mktemp("spark")
    rt = SparkRuntime("local[2]", work_dir=str(work))
    assert rt.status == "stopped"
    t0 = time.monotonic()
    rt.start_background()
    START_CALL_SECONDS.append(time.monotonic() - t0)
    START_STATES.append(rt.status)
    rt.wait_ready(120)
    START_STATES.append(rt.status)
    yield rt
    rt.stop()


def orders() -> pa.Table:
    return pa.table(
        {
            "id": pa.array([1, 2, 3, 4, 5], pa.int32()),
            "cust": pa.array([10, 20, 10, 30, None], pa.int64()),
            "amount": pa.array(
                [decimal.Decimal("1.50"), decimal.Decimal("2.25"), decimal.Decimal("3.00"), None,
                 decimal.Decimal("4.00")],
                pa.decimal128(38, 10),
            ),
        }
    )


def customers() -> pa.Table:
    return pa.table({"cust": pa.array([10, 20, 40], pa.int64()), "name": ["ann", "bob", "cy"]})


def test_start_background_is_async_and_becomes_ready(runtime: SparkRuntime) -> None:
    assert START_CALL_SECONDS[0] < 0.5
    assert START_STATES == ["starting", "ready"]
    assert runtime.status == "ready"
    assert runtime.error is None
    assert runtime.start_seconds is not None and runtime.start_seconds > 0


def test_group_by_join(runtime: SparkRuntime) -> None:
    sql = (
        "SELECT c.name, count(*) AS n, sum(o.amount) AS total "
        "FROM r1 o JOIN r2 c ON o.cust = c.cust GROUP BY c.name ORDER BY c.name"
    )
    before = runtime.job_count
    out = runtime.run_query(sql, {"r1": orders(), "r2": customers()})
    assert out.column_names == ["name", "n", "total"]
    rows = out.to_pylist()
    assert [(r["name"], r["n"], r["total"]) for r in rows] == [
        ("ann", 2, decimal.Decimal("4.5")),
        ("bob", 1, decimal.Decimal("2.25")),
    ]
    assert runtime.job_count == before + 1


def test_empty_input(runtime: SparkRuntime) -> None:
    empty = orders().slice(0, 0)
    out = runtime.run_query("SELECT id, cust, amount FROM r1", {"r1": empty})
    assert out.num_rows == 0
    assert out.schema.equals(empty.schema)
    agg = runtime.run_query("SELECT count(*) AS n FROM r1", {"r1": empty})
    assert agg.to_pylist() == [{"n": 0}]


def test_an_input_with_an_empty_record_batch_keeps_every_row(runtime: SparkRuntime) -> None:
    """pyspark's createDataFrame kept no row after an empty record batch (a cached table brought
    up to date by a delete, then an insert, has one)."""
    t = pa.table({"id": [1, 2, 3], "s": ["a", None, "b"]})
    chunked = pa.concat_tables([t.slice(0, 2), t.slice(0, 0), t.slice(2, 1)])
    assert [b.num_rows for b in chunked.to_batches()] == [2, 0, 1]
    out = runtime.run_query("SELECT id, s FROM r1 ORDER BY id", {"r1": chunked})
    assert out.to_pylist() == [{"id": 1, "s": "a"}, {"id": 2, "s": None}, {"id": 3, "s": "b"}]


def test_types_round_trip(runtime: SparkRuntime) -> None:
    from streamdb.types import ALL_TYPES

    samples: dict[str, object] = {
        "boolean": True, "bytea": b"\x00ab", "bigint": 2**40, "smallint": 7, "integer": -3,
        "text": "héllo", "oid": 26, "json": '{"a": 1}', "real": 1.5, "double precision": 2.25,
        "character varying": "v", "date": dt.date(2024, 2, 29), "time without time zone": dt.time(1, 2, 3, 4),
        "timestamp without time zone": dt.datetime(2024, 1, 2, 3, 4, 5, 6),
        "timestamp with time zone": dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC),
        "interval": pa.MonthDayNano([0, 2, 3_000_000_000]),
        "numeric": decimal.Decimal("12345.6789"), "uuid": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "jsonb": "{}", "name": "pg_class", '"char"': "r",
    }
    columns = {}
    for i, t in enumerate(ALL_TYPES):
        columns[f"c{i}"] = pa.array([samples[t.name], None], type=t.arrow())
    table = pa.table(columns)
    out = runtime.run_query("SELECT * FROM r1", {"r1": table})
    assert out.schema.equals(table.schema), f"{out.schema} != {table.schema}"
    got = out.to_pylist()
    want = table.to_pylist()
    assert got[1] == want[1]
    for key in want[0]:
        if key == f"c{[t.name for t in ALL_TYPES].index('timestamp with time zone')}":
            assert got[0][key] == want[0][key]  # tz objects differ but instants compare
        else:
            assert got[0][key] == want[0][key], key
    empty = runtime.run_query("SELECT * FROM r1", {"r1": table.slice(0, 0)})
    assert empty.schema.equals(table.schema)


def test_interval_with_months_not_supported(runtime: SparkRuntime) -> None:
    t = pa.table({"iv": pa.array([pa.MonthDayNano([1, 0, 0])], pa.month_day_nano_interval())})
    with pytest.raises(FeatureNotSupported):
        runtime.run_query("SELECT * FROM r1", {"r1": t})


def test_error_translation(runtime: SparkRuntime) -> None:
    failures = runtime.failure_count
    tables = {"r1": orders()}
    with pytest.raises(UndefinedColumn) as info:
        runtime.run_query("SELECT nope FROM r1", tables)
    assert info.value.sqlstate == "42703"
    assert "nope" in info.value.message
    assert "\tat " not in info.value.message and "\n" not in info.value.message
    with pytest.raises(UndefinedTable) as t_info:
        runtime.run_query("SELECT * FROM missing_table", tables)
    assert t_info.value.sqlstate == "42P01"
    with pytest.raises(SyntaxErrorSQL):
        runtime.run_query("SELEC 1", tables)
    with pytest.raises(DivisionByZero):
        runtime.run_query("SELECT id / (id - id) FROM r1", tables)
    assert runtime.failure_count == failures + 4


def test_concurrent_queries(runtime: SparkRuntime) -> None:
    def work(i: int) -> list[tuple[int, int]]:
        table = pa.table({"k": pa.array([j % 3 for j in range(30)], pa.int64()),
                          "v": pa.array([i] * 30, pa.int64())})
        # Every caller uses the same view name: sessions must not see each other's views.
        out = runtime.run_query("SELECT k, sum(v) AS s FROM r1 GROUP BY k ORDER BY k", {"r1": table})
        return [(r["k"], r["s"]) for r in out.to_pylist()]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, range(1, 9)))
    for i, rows in enumerate(results, start=1):
        assert rows == [(0, 10 * i), (1, 10 * i), (2, 10 * i)]


def test_wait_ready_when_not_started(tmp_path: Path) -> None:
    rt = SparkRuntime("local[1]", work_dir=str(tmp_path))
    with pytest.raises(ObjectNotInPrerequisiteState) as info:
        rt.wait_ready(0.1)
    assert info.value.sqlstate == "55000"
    rt.stop()  # stopping a runtime that never started is a no-op
    assert rt.status == "stopped"


def test_stop_is_clean_and_idempotent(runtime: SparkRuntime) -> None:
    # Runs last in this module (pytest keeps file order): stops the shared runtime.
    t0 = time.monotonic()
    runtime.stop()
    assert time.monotonic() - t0 < 20
    assert runtime.status == "stopped"
    runtime.stop()
    assert runtime.status == "stopped"
    with pytest.raises(ObjectNotInPrerequisiteState):
        runtime.run_query("SELECT 1", {})
