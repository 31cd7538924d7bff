"""The reader's cache of a log partition merges small batches as they come: the changes between
any two offsets stay the same, and a log of many one-row batches is held in few tables."""

from __future__ import annotations

import math

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdb.runtime import reader as R


def _batch(start: int, n: int) -> pa.Table:
    return pa.table({"offset": pa.array(range(start, start + n), pa.int64())})


def _cache_of(sizes: list[int]) -> R._PartitionCache:
    cache = R._PartitionCache()
    for n in sizes:
        R._append_batch(cache, cache.end, _batch(cache.end, n))
        cache.end += n
    return cache


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.one_of(st.just(1), st.integers(0, 50), st.integers(1000, 70_000)), max_size=60),
       picks=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=8))
def test_changes_between_any_offsets_are_the_logs(sizes: list[int], picks: list[tuple[float, float]]) -> None:
    cache = _cache_of(sizes)
    total = sum(sizes)
    assert cache.end == total
    assert sum(t.num_rows for t in cache.tables) == total
    assert cache.starts == sorted(cache.starts)
    for t, start in zip(cache.tables, cache.starts, strict=True):
        assert t.num_rows == 0 or t.column("offset")[0].as_py() == start
    for a, b in picks:
        begin, end = sorted((int(a * total), int(b * total)))
        got = R._changes_between(cache, begin, end)
        if end <= begin or total == 0:
            assert got is None or got.num_rows == 0
            continue
        assert got is not None
        assert got.column("offset").to_pylist() == list(range(begin, end))


def test_one_row_batches_are_held_in_logarithmically_few_tables() -> None:
    cache = _cache_of([1] * 20_000)
    assert len(cache.tables) <= 2 * math.log2(20_000) + 2
    assert R._changes_between(cache, 0, 20_000).column("offset").to_pylist() == list(range(20_000))  # type: ignore[union-attr]


def test_large_batches_are_not_merged_again() -> None:
    cache = _cache_of([50_000, 50_000, 10])
    assert [t.num_rows for t in cache.tables] == [50_000, 50_000, 10]


def test_batches_of_another_schema_are_kept_apart() -> None:
    cache = R._PartitionCache()
    R._append_batch(cache, 0, _batch(0, 1))
    R._append_batch(cache, 1, pa.table({"offset": pa.array([1], pa.int64()), "x": pa.array([None], pa.int64())}))
    assert len(cache.tables) == 2
