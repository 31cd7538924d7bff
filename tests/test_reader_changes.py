"""A cached table's or view's rows brought up to date from its changes alone
(`reader.apply_changes`) equal the rows rebuilt from scratch: each key's count moves by its
weights, and its row is its last insertion's. Both ways of numbering the keys (the changes with
the cached keys after them, or the cached keys looked up in the changes) are exercised."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdb.runtime import changes as C
from streamdb.runtime.reader import apply_changes

NAMES = ["v", "s", C.ROWKEY]
SCHEMA = pa.schema([("v", pa.int64()), ("s", pa.string()), (C.ROWKEY, pa.binary())])


def _rows(entries: list[tuple[int, int, str]]) -> pa.Table:
    return pa.table({"v": pa.array([e[1] for e in entries], pa.int64()),
                     "s": pa.array([e[2] for e in entries], pa.string()),
                     C.ROWKEY: pa.array([b"k%d" % e[0] for e in entries], pa.binary())}, schema=SCHEMA)


def _changes(entries: list[tuple[int, int, str, int]]) -> pa.Table:
    table = _rows([e[:3] for e in entries])
    return table.append_column(C.WEIGHT, pa.array([e[3] for e in entries], pa.int64()))


def _as_counter(table: pa.Table) -> Counter[tuple]:
    return Counter(zip(*(table.column(n).to_pylist() for n in NAMES), strict=True))


def _check(table: pa.Table, cached: list[tuple[int, int, str]], changes: list[tuple[int, int, str, int]],
           want: Counter[tuple] | None) -> None:
    got = apply_changes(table, _changes(changes), NAMES)
    if want is None:
        assert got is None
        return
    assert got is not None
    new, added, refill = got
    assert _as_counter(new) == want
    assert new.schema == table.schema
    changed = {c[0] for c in changes}
    if refill is None:  # appended
        assert new.slice(0, table.num_rows).equals(table)
        assert _as_counter(added) + _as_counter(table) == want
    else:
        assert set(refill.holes) == {i for i, r in enumerate(cached) if r[0] in changed}
        for p, r in enumerate(cached):
            if p not in refill.holes and p < new.num_rows:
                assert new.slice(p, 1).column("v").to_pylist() == [r[1]]  # rows not changed stay put


def _view_row(key: int) -> tuple[int, int, str]:
    return (key, key % 4, "ab"[key % 2])  # a view's row key is its row


@settings(max_examples=400, deadline=None)
@given(cached=st.lists(st.integers(0, 12), max_size=30),
       changes=st.lists(st.tuples(st.integers(0, 12), st.sampled_from([1, 1, 2, -1])), min_size=1, max_size=30))
def test_a_views_rows_after_changes_equal_the_rows_rebuilt(cached, changes) -> None:
    """A view's key is its row, held as many times as its count (a large cache or a small one
    against the changes: both ways of numbering the keys)."""
    counts = Counter(cached)
    for key, w in changes:
        counts[key] += w
    want = None if any(n < 0 for n in counts.values()) else \
        Counter({(k % 4, "ab"[k % 2], b"k%d" % k): n for k, n in counts.items() if n > 0})
    rows = [_view_row(k) for k in cached]
    _check(_rows(rows), rows, [(*_view_row(k), w) for k, w in changes], want)


@settings(max_examples=400, deadline=None)
@given(cached=st.dictionaries(st.integers(0, 12), st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", None])),
                              max_size=12),
       ops=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 3), st.sampled_from(["a", "b", None]),
                              st.booleans()), min_size=1, max_size=30))
def test_a_tables_rows_after_inserts_updates_and_deletes_equal_the_rows_rebuilt(cached, ops) -> None:
    """A table's key holds one row: an update retracts the old row and inserts the new one."""
    rows = dict(cached)
    changes = []
    for key, v, s, delete in ops:
        if key in rows:
            changes.append((key, *rows.pop(key), -1))
        if not delete:
            rows[key] = (v, s)
            changes.append((key, v, s, 1))
    if not changes:
        return
    before = [(k, *r) for k, r in cached.items()]
    want = Counter({(v, s, b"k%d" % k): 1 for k, (v, s) in rows.items()})
    _check(_rows(before), before, changes, want)


def test_a_load_of_new_keys_is_appended_as_it_came() -> None:
    table = _rows([(1, 1, "a")])
    got = apply_changes(table, _changes([(k, k, "x", 1) for k in range(2, 50)]), NAMES)
    assert got is not None and got[2] is None
    assert got[0].column("v").to_pylist() == [1, *range(2, 50)]


def test_columns_replace_with_mask_cannot_take_are_refilled_by_a_gather() -> None:
    schema = pa.schema([("l", pa.list_(pa.int64())), (C.ROWKEY, pa.binary())])
    table = pa.table({"l": [[1], [2], [3]], C.ROWKEY: [b"a", b"b", b"c"]}, schema=schema)
    changes = pa.table({"l": [[2], [9, 9]], C.ROWKEY: [b"b", b"d"], C.WEIGHT: pa.array([-1, 1], pa.int64())})
    got = apply_changes(table, changes, ["l", C.ROWKEY])
    assert got is not None
    assert sorted(got[0].column("l").to_pylist()) == [[1], [3], [9, 9]]


def test_no_changes_leave_the_rows_as_they_are() -> None:
    table = _rows([(1, 1, "a")])
    got = apply_changes(table, _changes([]), NAMES)
    assert got is not None and got[0].equals(table) and got[1].num_rows == 0 and got[2] is None
