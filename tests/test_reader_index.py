"""The point-lookup index after a change that removes rows: patched, not rebuilt (issue 14). The
patched index must equal one built afresh over the new rows, and the new rows must be the old
ones less those removed plus those added."""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa

from streamdb.runtime.reader import KeyIndex, Refill


def _table(rows: list[tuple[int, str]]) -> pa.Table:
    return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()), "grp": pa.array([r[1] for r in rows], pa.string())})


def _as_sets(index: KeyIndex) -> dict:
    return {k: sorted(v) for k, v in index.positions.items()}


def test_a_refilled_index_equals_one_built_afresh():
    rng = random.Random(7)
    for _ in range(300):
        rows = [(rng.randrange(50), rng.choice("abc")) for _ in range(rng.randrange(0, 40))]
        table = _table(rows)
        holes = sorted(rng.sample(range(len(rows)), rng.randrange(0, len(rows) + 1))) if rows else []
        added_rows = [(rng.randrange(50), rng.choice("abcd")) for _ in range(rng.randrange(0, 12))]
        added = _table(added_rows)
        refill = Refill.of(len(rows), holes, len(added_rows))
        new = refill.apply(table, added)
        gone = set(holes)
        want = Counter([r for i, r in enumerate(rows) if i not in gone] + added_rows)
        assert Counter(zip(new.column("id").to_pylist(), new.column("grp").to_pylist(), strict=True)) == want
        assert new.num_rows == refill.size
        kept = [p for p in range(refill.size) if p < len(rows) and p not in gone]
        assert all(new.slice(p, 1).to_pylist() == table.slice(p, 1).to_pylist() for p in kept)  # rows stay put
        for columns in (("id",), ("grp",), ("id", "grp")):
            index = KeyIndex(table, columns)
            index.values("grp")  # a column converted before the change is patched too
            patched = index.refilled(new, refill, added)
            fresh = KeyIndex(new, columns)
            assert _as_sets(patched) == _as_sets(fresh)
            assert patched.values("grp") == new.column("grp").to_pylist()
            assert patched.values("id") == new.column("id").to_pylist()
            assert _as_sets(index) == _as_sets(KeyIndex(table, columns))  # the old one is whole


def test_patches_chain_refills_and_appends_into_one_index():
    """Changes between two lookups wait as patches (a refill, then appends, then a refill) and
    the lookup applies them in order; the index readers held before is left whole."""
    from streamdb.runtime.reader import _Patches

    rng = random.Random(11)
    for _ in range(100):
        rows = [(rng.randrange(30), rng.choice("ab")) for _ in range(rng.randrange(1, 30))]
        table = _table(rows)
        base = KeyIndex(table, ("id",))
        base.values("grp")
        before = _as_sets(base)
        holes = sorted(rng.sample(range(len(rows)), rng.randrange(0, len(rows) + 1)))
        first_added = _table([(rng.randrange(30), "c") for _ in range(rng.randrange(0, 5))])
        first = Refill.of(table.num_rows, holes, first_added.num_rows)
        t1 = first.apply(table, first_added)
        appended = _table([(rng.randrange(30), "d") for _ in range(rng.randrange(0, 5))])
        t2 = pa.concat_tables([t1, appended])
        holes2 = sorted(rng.sample(range(t2.num_rows), rng.randrange(0, t2.num_rows + 1)))
        second_added = _table([(rng.randrange(30), "e") for _ in range(rng.randrange(0, 5))])
        second = Refill.of(t2.num_rows, holes2, second_added.num_rows)
        t3 = second.apply(t2, second_added)
        patches = _Patches(base, [(t1, first, first_added)])
        assert patches.add(t2, appended, None) and patches.add(t3, None, (second, second_added))
        index = patches.apply(patches.steps)
        assert index.table is t3
        assert _as_sets(index) == _as_sets(KeyIndex(t3, ("id",)))
        assert index.values("grp") == t3.column("grp").to_pylist()
        assert _as_sets(base) == before and base.table is table
