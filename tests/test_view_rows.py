"""A pipeline batch's rows converted a column at a time give the same values, and so the same
row keys in the view's stored multiset, as the row-by-row conversion they replace."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import uuid
from typing import Any

import pyarrow as pa
import pytest

from streamdb import types as T
from streamdb.catalog import ColumnDef, RelationDef
from streamdb.runtime import changes as C
from streamdb.runtime.api import Column
from streamdb.runtime.query import arrow_to_rows
from streamdb.runtime.views import ViewMaintainer

UTC = dt.UTC
CASES: list[tuple[str, pa.DataType, T.SqlType, list[Any]]] = [
    ("bigint from int64", pa.int64(), T.BIGINT, [1, None, -(2**63), 2**63 - 1]),
    ("bigint from int32", pa.int32(), T.BIGINT, [7, None]),
    ("integer from int64", pa.int64(), T.INTEGER, [5, None, -3]),
    ("smallint from int16", pa.int16(), T.SMALLINT, [3, None]),
    ("text", pa.string(), T.TEXT, ["a", None, "", "ünï"]),
    ("varchar", pa.string(), T.VARCHAR, ["x", None]),
    ("varchar(3)", pa.string(), T.varchar(3), ["abc", "ab   ", None]),
    ("boolean", pa.bool_(), T.BOOLEAN, [True, False, None]),
    ("double", pa.float64(), T.DOUBLE, [1.5, float("nan"), None, -0.0]),
    ("real from double", pa.float64(), T.REAL, [2.25, None]),
    ("timestamp", pa.timestamp("us"), T.TIMESTAMP, [dt.datetime(2024, 1, 2, 3, 4, 5, 6), None]),
    ("timestamptz", pa.timestamp("us", tz="UTC"), T.TIMESTAMPTZ,
     [dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), None]),
    ("date", pa.date32(), T.DATE, [dt.date(2024, 2, 29), None]),
    ("numeric", pa.decimal128(38, 10), T.NUMERIC, [decimal.Decimal("12.5000000000"), None]),
    ("numeric(10,2)", pa.decimal128(10, 2), T.numeric(10, 2), [decimal.Decimal("3.10"), None]),
    ("text from int64", pa.int64(), T.TEXT, [42, None]),
    ("numeric from decimal(24,3)", pa.decimal128(24, 3), T.NUMERIC,
     [decimal.Decimal("908.000"), None, decimal.Decimal("-1.500"), decimal.Decimal("0.001")]),
    ("numeric from decimal(38,12)", pa.decimal128(38, 12), T.NUMERIC,
     [decimal.Decimal("1.123456789012"), None, decimal.Decimal("2.000000000005")]),
    ("numeric(38,3) from decimal(24,3)", pa.decimal128(24, 3), T.numeric(38, 3),
     [decimal.Decimal("90.800"), None, decimal.Decimal("-302.364")]),
    ("numeric(10,4) from decimal(6,2)", pa.decimal128(6, 2), T.numeric(10, 4), [decimal.Decimal("1234.50"), None]),
    ("numeric(5,2) from decimal(10,2)", pa.decimal128(10, 2), T.numeric(5, 2), [decimal.Decimal("123.45"), None]),
    ("numeric(6,1) from decimal(6,2)", pa.decimal128(6, 2), T.numeric(6, 1), [decimal.Decimal("1.25"), None]),
    # Decimals taken by normalize() alone: zeros, integers, 38 significant digits (normalize
    # rounds them to its context's precision on both paths), negative values.
    ("numeric from decimal(38,10), wide", pa.decimal128(38, 10), T.NUMERIC,
     [decimal.Decimal("1234567890123456789012345678.1234567891"), decimal.Decimal("0E-10"),
      decimal.Decimal("-20.0000000000"), decimal.Decimal("-0.0000000001"), None]),
    ("numeric(38,2) from decimal(20,0)", pa.decimal128(20, 0), T.numeric(38, 2),
     [decimal.Decimal("0"), decimal.Decimal("-99999999999999999999"), decimal.Decimal("1000"), None]),
    ("numeric(12,6) from decimal(8,4)", pa.decimal128(8, 4), T.numeric(12, 6),
     [decimal.Decimal("-0.0000"), decimal.Decimal("9999.9999"), decimal.Decimal("0.5000")]),
]


def test_a_decimal_column_is_cast_whole_only_when_every_value_fits_exactly() -> None:
    """An append-only view's decimal column (Spark's `0.908 * price`, decimal(24, 3)) is cast as
    a column into a numeric(p, s) it always fits; one that may round or overflow goes value by
    value (whose rounding and 22003 are the stored rows')."""
    from streamdb.runtime.views import _exact_decimal

    column = pa.chunked_array([pa.array([decimal.Decimal("90.800")], pa.decimal128(24, 3))])
    assert _exact_decimal(column, T.numeric(38, 3)) is not None
    assert _exact_decimal(column, T.NUMERIC) is not None
    assert _exact_decimal(column, T.numeric(20, 3)) is None  # 21 integer digits may not fit 17
    assert _exact_decimal(column, T.numeric(30, 2)) is None  # rounds


@pytest.mark.parametrize(("arrow_type", "sql_type", "values"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rows_of_matches_row_by_row(arrow_type: pa.DataType, sql_type: T.SqlType, values: list[Any]) -> None:
    view = RelationDef(id=1, name="v", kind="materialized_view",
                       columns=(ColumnDef("c", sql_type), ColumnDef("n", T.BIGINT)))
    table = pa.table({"c": pa.array(values, arrow_type), "n": pa.array(range(len(values)), pa.int64()),
                      "__w": pa.array([1] * len(values), pa.int64())})
    maintainer = ViewMaintainer.__new__(ViewMaintainer)  # _row uses no state
    columns = tuple(Column(c.name, c.type) for c in view.columns)
    expected = [maintainer._row(r, view) for r in arrow_to_rows(table, columns)]  # the row-by-row way
    got = ViewMaintainer.rows_of(table, view)
    assert repr(got) == repr(expected)  # repr: NaN is not equal to itself, and types must match too
    assert [C.key_of(r) for r in got] == [C.key_of(r) for r in expected]


def test_view_row_count_follows_its_change_log(tmp_path) -> None:
    """SHOW QUERIES' row count of a view sums the weights of its change log, incrementally: it
    equals the stored rows after inserts, duplicates, retractions and a later count."""
    from collections import Counter

    from streamdb.runtime.reader import RelationReader
    from streamdb.runtime.views import stage_changes
    from streamdb.storage import Commit
    from streamdb.storage.rocksdb import RocksDBStorage

    view = RelationDef(id=7, name="v", kind="materialized_view",
                       columns=(ColumnDef("k", T.TEXT), ColumnDef("n", T.BIGINT)))
    storage = RocksDBStorage(str(tmp_path / "db"))
    reader = RelationReader(storage)
    now = dt.datetime(2024, 1, 1, tzinfo=UTC)
    changes = [Counter({("a", 1): 2, ("b", 2): 1}), Counter({("a", 1): -1, ("c", 3): 3}),
               Counter({("c", 3): -3}), Counter({("d", 4): 1, ("b", 2): -1})]
    try:
        for i, weights in enumerate(changes):
            with storage.snapshot() as snap:
                commit = Commit()
                stage_changes(view, snap, weights, commit, now)
            storage.commit(commit)
            with storage.snapshot() as snap:
                counted = reader.row_count(view, snap)
                if i % 2:  # sometimes with the read cache built (row_count then uses it), sometimes not
                    assert counted == reader.read_state(view, snap).num_rows
            expected = sum(sum(w.values()) for w in changes[:i + 1])
            assert counted == expected
    finally:
        storage.close()


def test_a_view_row_count_after_a_restart_reads_only_what_the_storage_has_not_summed(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a restart (no count in memory) a view's row count comes from the storage's running
    weight sum, kept with each commit of its changes: no log read. Changes appended without
    weights (as a server of an older version did) are read, and only they."""
    from collections import Counter

    from streamdb.runtime.reader import RelationReader
    from streamdb.runtime.views import stage_changes
    from streamdb.storage import Commit
    from streamdb.storage.rocksdb import RocksDBSnapshot, RocksDBStorage

    view = RelationDef(id=7, name="v", kind="materialized_view",
                       columns=(ColumnDef("k", T.TEXT), ColumnDef("n", T.BIGINT)))
    now = dt.datetime(2024, 1, 1, tzinfo=UTC)
    path = str(tmp_path / "db")
    storage = RocksDBStorage(path)
    for weights in (Counter({("a", 1): 2, ("b", 2): 1}), Counter({("a", 1): -1, ("c", 3): 3})):
        with storage.snapshot() as snap:
            commit = Commit()
            stage_changes(view, snap, weights, commit, now)
        storage.commit(commit)
    storage.close()

    read: list[tuple[int, int]] = []
    real_read = RocksDBSnapshot.read

    def spy(self, relation_id, partition, start=0, end=None):  # noqa: ANN001, ANN202
        read.append((start, end))
        return real_read(self, relation_id, partition, start, end)

    monkeypatch.setattr(RocksDBSnapshot, "read", spy)
    storage = RocksDBStorage(path)
    try:
        with storage.snapshot() as snap:
            assert RelationReader(storage).row_count(view, snap) == 5
        assert read == []
        # An older server's append: no weights, so the sum stays at offset 4 and the rest is read.
        with storage.snapshot() as snap:
            commit = Commit()
            stage_changes(view, snap, Counter({("d", 4): 2}), commit, now)
        storage.commit(Commit(appends=[dataclasses.replace(a, weights=None) for a in commit.appends],
                              puts=commit.puts))
        with storage.snapshot() as snap:
            assert snap.weight_sum(view.id, 0) == (4, 5)
            assert RelationReader(storage).row_count(view, snap) == 7
        assert read == [(4, 5)]
    finally:
        storage.close()


@pytest.mark.parametrize(("arrow_type", "sql_type", "values"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_log_batch_matches_the_stored_rows(arrow_type: pa.DataType, sql_type: T.SqlType, values: list[Any]) -> None:
    """An append-only view's batch, appended to its log as Arrow columns, holds the same values as
    the change batch the row-by-row path (rows_of, then encode_batch) writes."""
    view = RelationDef(id=1, name="v", kind="materialized_view",
                       columns=(ColumnDef("c", sql_type), ColumnDef("n", T.BIGINT)))
    weights = [1 + i % 3 for i in range(len(values))]
    table = pa.table({"c": pa.array(values, arrow_type), "n": pa.array(range(len(values)), pa.int64()),
                      "__w": pa.array(weights, pa.int64())})
    now = dt.datetime(2024, 1, 1, tzinfo=UTC)
    rows = ViewMaintainer.rows_of(table, view)
    expected = C.decode_batch(C.encode_batch(view, rows, [now] * len(rows), weights))
    got = C.decode_batch(C.encode_table(ViewMaintainer.log_batch(table, view, now)))
    assert got.schema == expected.schema
    for name in ("c", "n", C.ROWTIME, C.WEIGHT):
        assert repr(got.column(name).to_pylist()) == repr(expected.column(name).to_pylist()), name


def test_log_batch_leaves_out_zero_weights_and_refuses_retractions() -> None:
    from streamdb.errors import InternalError

    view = RelationDef(id=1, name="v", kind="materialized_view", columns=(ColumnDef("k", T.BIGINT),))
    now = dt.datetime(2024, 1, 1, tzinfo=UTC)
    table = pa.table({"k": pa.array([1, 2, 3], pa.int64()), "__w": pa.array([1, 0, 2], pa.int64())})
    got = ViewMaintainer.log_batch(table, view, now)
    assert got.column("k").to_pylist() == [1, 3] and got.column(C.WEIGHT).to_pylist() == [1, 2]
    with pytest.raises(InternalError, match="retraction"):
        ViewMaintainer.log_batch(table.set_column(1, "__w", pa.array([1, -1, 1], pa.int64())), view, now)


def test_a_view_kept_as_its_log_reads_its_rows_from_the_log(tmp_path) -> None:
    """Reads of an append-only view kept as its change log: the log's rows from `log_from` on
    (each as many times as its weight), grown batch by batch, and counted the same."""
    import json

    from streamdb.runtime.reader import RelationReader
    from streamdb.storage import Append, Commit
    from streamdb.storage.rocksdb import RocksDBStorage

    view = RelationDef(id=9, name="v", kind="materialized_view",
                       columns=(ColumnDef("k", T.TEXT), ColumnDef("n", T.BIGINT)))
    storage = RocksDBStorage(str(tmp_path / "db"))
    reader = RelationReader(storage)
    now = dt.datetime(2024, 1, 1, tzinfo=UTC)

    def append(rows: list[tuple[Any, ...]], weights: list[int], meta: dict[str, Any] | None = None) -> None:
        commit = Commit()
        commit.appends.append(Append(view.id, 0, C.encode_batch(view, rows, [now] * len(rows), weights), len(rows)))
        if meta is not None:
            commit.puts.append(("meta", f"view:{view.id}".encode(), json.dumps(meta).encode()))
        storage.commit(commit)

    def current() -> list[tuple[Any, ...]]:
        with storage.snapshot() as snap:
            table = reader.read_state(view, snap)
            assert reader.row_count(view, snap) == table.num_rows
            return sorted(zip(table.column("k").to_pylist(), table.column("n").to_pylist(), strict=True))

    try:
        # Rows of an earlier representation, retracted, then the log holds the view from offset 4.
        append([("old", 1), ("old", 2)], [1, 1])
        append([("old", 1), ("old", 2)], [-1, -1], {"inputs": {}, "epoch": 0, "pipeline": {"log_from": 4}})
        assert current() == []
        append([("a", 1), ("b", 2)], [1, 2])
        assert current() == [("a", 1), ("b", 2), ("b", 2)]
        append([("c", 3)], [1])
        assert current() == [("a", 1), ("b", 2), ("b", 2), ("c", 3)]
        reader.forget(view.id)  # built from the log alone, not grown from a cached table
        assert current() == [("a", 1), ("b", 2), ("b", 2), ("c", 3)]
    finally:
        storage.close()


def test_the_epoch_driver_taking_over_a_log_only_view_retracts_its_rows(tmp_path) -> None:
    """PipelineManager.release: a view kept as its log, handed to the epoch driver (its strategy
    changed), has its rows retracted from the log and its progress reset, so the driver's rebuild
    from scratch does not count them twice."""
    import json
    import threading
    from types import SimpleNamespace

    from streamdb.runtime.pipelines import PipelineManager
    from streamdb.runtime.reader import RelationReader, log_only_from
    from streamdb.runtime.views import ViewStatus
    from streamdb.storage import Append, Commit
    from streamdb.storage.rocksdb import RocksDBStorage

    view = RelationDef(id=11, name="v", kind="materialized_view", columns=(ColumnDef("k", T.BIGINT),))
    storage = RocksDBStorage(str(tmp_path / "db"))
    status = ViewStatus(epochs=3, processed={1: (5,)})
    manager = PipelineManager.__new__(PipelineManager)
    manager.engine = SimpleNamespace(storage=storage)
    manager.maintainer = SimpleNamespace(status_of=lambda _vid: status)
    manager._commit_lock, manager._states = threading.Lock(), {}
    now = dt.datetime(2024, 1, 1, tzinfo=UTC)
    pipeline = {"depth": 0, "gen": 0, "ops_base": 0, "joins": {}, "fp": "x", "batch": 4, "log_from": 1}
    try:
        commit = Commit()
        for rows, weights in (([7], [1]), ([1, 2], [1, 2]), ([3], [1])):  # offset 0 is from before log_from
            table = pa.table({"k": pa.array(rows, pa.int64()), "__w": pa.array(weights, pa.int64())})
            batch = ViewMaintainer.log_batch(table, view, now)
            commit.appends.append(Append(view.id, 0, C.encode_table(batch), batch.num_rows))
        commit.puts.append(("meta", f"view:{view.id}".encode(),
                            json.dumps({"inputs": {"1": [5]}, "epoch": 3, "pipeline": pipeline}).encode()))
        storage.commit(commit)
        manager.release(view)
        with storage.snapshot() as snap:
            assert log_only_from(snap, view.id) is None
            assert json.loads(snap.get("meta", f"view:{view.id}".encode())) == {"inputs": {}, "epoch": 0}
            reader = RelationReader(storage)
            # The row before log_from (7) was not the view's: only the view's rows are taken back.
            assert reader.row_count(view, snap) == 1
            retracted = [(k, w) for _, _, p in snap.read(view.id, 0, 4, snap.end_offset(view.id, 0))
                         for k, w in zip(C.decode_batch(p).column("k").to_pylist(),
                                         C.decode_batch(p).column(C.WEIGHT).to_pylist(), strict=True)]
            assert sorted(retracted) == [(1, -1), (2, -2), (3, -1)]
        assert (status.epochs, status.processed) == (0, {})
    finally:
        storage.close()


def test_operator_ranges_are_never_reused(tmp_path) -> None:
    """Every generation of every view gets operator ids no view had: an old generation's state
    stays in the state store, so reusing its ids would start a view from stale state. The counter
    is stored with the state that uses it and survives a new manager (a restart)."""
    from types import SimpleNamespace

    from streamdb.runtime.pipelines import FIRST_ALLOCATED_OPS, NEXT_OPS_KEY, PipelineManager
    from streamdb.runtime.spark.pipeline import MAX_OPS_PER_VIEW
    from streamdb.storage import Commit
    from streamdb.storage.rocksdb import RocksDBStorage

    storage = RocksDBStorage(str(tmp_path / "db"))
    try:
        seen: list[int] = []
        for _restart in range(3):
            manager = PipelineManager(SimpleNamespace(storage=storage), SimpleNamespace())  # type: ignore[arg-type]
            commit = Commit()
            with storage.snapshot() as snap:
                seen += [manager._allocate_ops(snap, commit) for _ in range(20)]  # 20 generations
            storage.commit(commit)
        assert seen == [FIRST_ALLOCATED_OPS + i * MAX_OPS_PER_VIEW for i in range(60)]
        with storage.snapshot() as snap:
            assert int(snap.get("meta", NEXT_OPS_KEY)) == FIRST_ALLOCATED_OPS + 60 * MAX_OPS_PER_VIEW
        assert seen[-1] + MAX_OPS_PER_VIEW - 1 < 2**31  # the records' op column is a Java int
    finally:
        storage.close()


@pytest.mark.parametrize(("sql_type", "values"), [
    (T.BIGINT, [1, None, -(2**63)]),
    (T.TEXT, ["a", None, "ünï"]),
    (T.TIMESTAMPTZ, [dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), None]),
    (T.NUMERIC, [decimal.Decimal("12.5"), None, decimal.Decimal("NaN")]),
    (T.numeric(10, 2), [decimal.Decimal("3.1"), None]),
    (T.INTERVAL, [dt.timedelta(days=1, microseconds=5), None]),
    (T.UUID, [uuid.UUID(int=7), None]),
    (T.DOUBLE, [1.5, None, float("inf")]),
], ids=lambda v: str(v) if isinstance(v, T.SqlType) else "")
def test_change_batches_take_columns_as_they_are_only_where_the_value_would_not_change(
        sql_type: T.SqlType, values: list[Any]) -> None:
    """encode_batch passes a column's values straight to Arrow unless to_arrow_value changes values
    of its type (`_converted`): the batch equals one built value by value."""
    rel = RelationDef(id=1, name="v", kind="materialized_view", columns=(ColumnDef("c", sql_type),))
    rows = [(v,) for v in values]
    now = dt.datetime(2026, 1, 1, tzinfo=UTC)
    got = C.decode_batch(C.encode_batch(rel, rows, [now] * len(rows), [1] * len(rows), [b"k"] * len(rows)))
    schema = C.batch_schema(rel)
    expected = pa.array([C.to_arrow_value(v, sql_type) for v in values], schema.field(0).type)
    assert got.column(0).combine_chunks().equals(expected)
    for v in values:  # where the fast path is taken, the value by value path changes nothing
        if not C._converted(sql_type) and v is not None:
            assert C.to_arrow_value(v, sql_type) is v


def test_state_rows_keep_their_rowtime_and_old_rows_still_read() -> None:
    import pickle

    for rowtime in (dt.datetime(2026, 11, 26, 1, 2, 3, 456789, tzinfo=UTC),
                    dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), dt.datetime(9999, 12, 31, tzinfo=UTC)):
        row, back = C.decode_state_row(C.encode_state_row((1, "a", None), rowtime))
        assert row == (1, "a", None) and back == rowtime and back.tzinfo is UTC
    # Rows a server stored before the rowtime became an integer.
    old = pickle.dumps(([2, "b"], dt.datetime(2025, 1, 1, tzinfo=UTC)), protocol=5)
    assert C.decode_state_row(old) == ((2, "b"), dt.datetime(2025, 1, 1, tzinfo=UTC))


def test_stored_view_rows_round_trip_with_utc_times_as_integers() -> None:
    """A view's stored row keeps exact values and types, the very time zone objects of UTC values
    (row keys are made from reprs), and rows stored before the change still read."""
    import pickle
    import zoneinfo

    zone = zoneinfo.ZoneInfo("UTC")
    rows = [
        (dt.datetime(2024, 1, 1, tzinfo=zone), dt.datetime(2024, 1, 1, 0, 0, 10, 123456, tzinfo=UTC), 17, None, "x"),
        (dt.datetime(1900, 1, 1, tzinfo=zone), dt.datetime(2024, 1, 1), dt.date(2024, 1, 1), 1.5),
        (dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=zone), decimal.Decimal("1.50")),
        (dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=2))), 3),
        (), (None,),
    ]
    for row in rows:
        back, count = C.decode_view_row(C.encode_view_row(row, 3))
        assert (back, count) == (row, 3) and repr(back) == repr(row)
        assert [getattr(v, "tzinfo", None) is getattr(w, "tzinfo", None) for v, w in zip(row, back, strict=True)
                if getattr(v, "tzinfo", None) in (zone, UTC)] == [True] * sum(
            getattr(v, "tzinfo", None) in (zone, UTC) for v in row)
        assert C.decode_view_row(pickle.dumps((row, 2), protocol=5)) == (row, 2)  # the earlier form


def test_a_delta_is_consolidated_on_the_columns_a_query_reads():
    """An UPDATE and the one after it: the row between them is inserted and retracted in one
    delta (with other rowtimes), so it must not reach the view's query at all."""
    delta = pa.table({"id": [1, 1, 1, 1, 2], "x": [1, 0, 0, 1, float("nan")], "rowtime": [1, 2, 3, 3, 4],
                      C.WEIGHT: pa.array([-1, 1, -1, 1, 1], pa.int64())})
    out = C.consolidated(delta, ["id", "x"])
    assert out.column_names == ["id", "x", C.WEIGHT]
    (row,) = out.to_pylist()  # (1, 1) and (1, 0) cancel; rowtime is not read, so not compared
    assert row["id"] == 2 and row["x"] != row["x"] and row[C.WEIGHT] == 1
    inserts_only = delta.slice(4)
    assert C.consolidated(inserts_only, ["id", "x"]) is inserts_only  # nothing retracted: as it is
