"""The view engine's JVM operators (streamdb.spark.Operators) against a recomputation, without Spark.

streamdb.spark.Harness runs the operators over state in hash maps, one call per (operator, key)
and batch as the pipeline makes them; hypothesis drives random inserts and deletes in random
batches, and after every batch the sum of everything an operator emitted must equal its query
recomputed in Python over the current input. The same operators run in the pipelines (state in
Spark's state store); tests/test_e2e_views.py checks them there, through the server.
"""

from __future__ import annotations

import decimal
import itertools
import json
import os
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdb.runtime.spark.jvm import jar_path, pyspark_jars


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    assert found, "java is installed by scripts/ensure-java.sh (make test)"
    return found


class Harness:
    """One JVM running streamdb.spark.Harness's line protocol."""

    def __init__(self) -> None:
        classpath = f"{jar_path()}{os.pathsep}{pyspark_jars()}/*"
        self.proc = subprocess.Popen([_java(), "-Xmx512m", "-cp", classpath, "streamdb.spark.Harness"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8")

    def spec(self, ops: list[dict[str, Any]], texts: dict[str, dict[str, str]] | None = None) -> None:
        """New operators, with empty state or `texts` ({"<op id>\\u0000<key>": {text: value}})."""
        self._send(json.dumps({"ops": ops} | ({"texts": texts} if texts else {})))

    def at(self, ms: int) -> None:
        """The processing time (ms) of the next batches: a temporal filter's now()."""
        self._send(f"@{ms}")

    def restart(self) -> None:
        """A new run of the pipeline: the timers set so far are an earlier run's (ClockCounts)."""
        self._send("!")

    def batch(self, records: list[list[Any]]) -> tuple[list[list[Any]], int]:
        self._send(json.dumps(records))
        assert self.proc.stdout is not None
        out = json.loads(self.proc.stdout.readline())
        assert not isinstance(out, dict), out.get("error")
        return out, int(self.proc.stdout.readline())

    def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    h = Harness()
    yield h
    h.close()


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _batches(draw: st.DrawFn, make: Any, n_batches: int = 6, n_changes: int = 12) -> list[list[tuple[Any, int]]]:
    """Random batches of changes (item, +1/-1) where a delete always removes an item present."""
    present: Counter[Any] = Counter()
    batches = []
    for _ in range(draw(st.integers(1, n_batches))):
        batch = []
        for _ in range(draw(st.integers(1, n_changes))):
            live = sorted((k for k, c in present.items() if c > 0), key=repr)
            if live and draw(st.booleans()):
                item = draw(st.sampled_from(live))
                present[item] -= 1
                batch.append((item, -1))
            else:
                item = make(draw)
                present[item] += 1
                batch.append((item, 1))
        batches.append(batch)
    return batches


def _accumulate(total: Counter[Any], out: list[list[Any]], key: Any) -> None:
    for rec in out:
        total[key(rec)] += rec[6]
    for k in [k for k, c in total.items() if c == 0]:
        del total[k]


# ---- GROUP BY with retractions ---------------------------------------------------------------

REDUCE = {"id": 1, "kind": "reduce", "aggs": [
    {"fn": "count_star"}, {"fn": "count", "arg": 0, "type": "long"}, {"fn": "min", "arg": 0, "type": "long"},
    {"fn": "max", "arg": 0, "type": "long"}, {"fn": "sum", "arg": 0, "type": "long"},
    {"fn": "count_distinct", "arg": 0, "type": "long"}]}


def _reduce_expected(rows: Counter[tuple[str, int | None, int]]) -> Counter[Any]:
    groups: dict[str, list[int | None]] = {}
    for (g, v, _), c in rows.items():
        groups.setdefault(g, []).extend([v] * c)
    out: Counter[Any] = Counter()
    for g, vs in groups.items():
        if not vs:
            continue
        xs = [v for v in vs if v is not None]
        out[(g, (str(len(vs)), str(len(xs)), str(min(xs)) if xs else None, str(max(xs)) if xs else None,
                 str(sum(xs)) if xs else None, str(len(set(xs)))))] += 1
    return out


@st.composite
def reduce_changes(draw: st.DrawFn) -> list[list[tuple[Any, int]]]:
    # (group, value, row id): many values per group, so the min/max cache (32 values) overflows.
    if draw(st.booleans()):  # one group, many values: past the min/max cache (32 values)
        return _batches(draw, lambda d: ("a", d(st.none() | st.integers(-200, 200)), 0), n_batches=10, n_changes=40)
    return _batches(draw, lambda d: (d(st.sampled_from("ab")), d(st.none() | st.integers(0, 5)), d(st.integers(0, 3))),
                    n_batches=10)


@SETTINGS
@given(reduce_changes())
def test_reduce_with_retractions_equals_recomputation(harness: Harness, batches: list[list[tuple[Any, int]]]) -> None:
    harness.spec([REDUCE])
    rows: Counter[Any] = Counter()
    total: Counter[Any] = Counter()
    keys = 0
    for batch in batches:
        recs = [[1, 0, g, None, None, [None if v is None else str(v)], w] for (g, v, _), w in batch]
        out, keys = harness.batch(recs)
        for item, w in batch:
            rows[item] += w
        _accumulate(total, out, lambda r: (r[2], tuple(r[5])))
        assert total == _reduce_expected(rows)
    live_groups = {g for (g, _, _), c in rows.items() if c > 0}
    assert keys == len(live_groups)  # a group whose rows are all gone keeps no state


def test_min_retracted_repeatedly_past_the_cache(harness: Harness) -> None:
    """Deleting a group's minimum 200 times over 500 distinct values: each answer is the next one."""
    harness.spec([REDUCE])
    out, _ = harness.batch([[1, 0, "g", None, None, [str(v)], 1] for v in range(500)])
    assert [r[5] for r in out] == [["500", "500", "0", "499", str(sum(range(500))), "500"]]
    for lo in range(200):
        out, _ = harness.batch([[1, 0, "g", None, None, [str(lo)], -1]])
        after = [r[5] for r in out if r[6] > 0]
        assert after[0][2] == str(lo + 1), (lo, out)
        assert after[0][3] == "499"


def test_a_closed_windows_group_is_dropped_by_its_expiry_record(harness: Harness) -> None:
    """An EMIT ON WINDOW CLOSE view feeds its emitted rows back (side 1, weight 0): the group's
    state goes, nothing is emitted; a late change starts a group of its own (the server drops it)."""
    harness.spec([REDUCE])
    out, keys = harness.batch([[1, 0, w, None, None, [str(v)], 1] for w in ("w1", "w2") for v in range(40)])
    assert keys == 2 and len(out) == 2
    out, keys = harness.batch([[1, 1, "w1", None, None, None, 0]])
    assert out == [] and keys == 1
    out, keys = harness.batch([[1, 0, "w1", None, None, ["7"], 1], [1, 1, "w2", None, None, None, 0]])
    assert [(r[2], r[5][0], r[6]) for r in out] == [("w1", "1", 1)] and keys == 1


# ---- partial aggregation before the shuffle (PartialAgg) -------------------------------------

LINEAR_AGGS = [{"fn": "count_star"}, {"fn": "count", "arg": 0, "type": "long"},
               {"fn": "sum", "arg": 0, "type": "long"}, {"fn": "avg", "arg": 0, "type": "long"},
               {"fn": "sum", "arg": 1, "type": "decimal"}, {"fn": "avg", "arg": 1, "type": "decimal"},
               {"fn": "sum", "arg": 2, "type": "double"}, {"fn": "avg", "arg": 2, "type": "double"},
               {"fn": "bool_and", "arg": 3, "type": "bool"}, {"fn": "bool_or", "arg": 3, "type": "bool"}]
EXTREMES = [{"fn": "min", "arg": 0, "type": "long"}, {"fn": "max", "arg": 2, "type": "double"},
            {"fn": "max", "arg": 1, "type": "decimal"}]
DOUBLES = [0.1, 0.2, 1.5, -2.25, 1e300, float("nan"), float("inf"), float("-inf")]


@st.composite
def linear_changes(draw: st.DrawFn) -> tuple[bool, list[list[tuple[Any, int]]]]:
    append_only = draw(st.booleans())

    def make(d: st.DrawFn) -> tuple[Any, ...]:
        return (d(st.sampled_from("ab")), d(st.none() | st.integers(-5, 5)),
                d(st.none() | st.sampled_from(["1.50", "2.5", "-0.125", "3"])),
                d(st.none() | st.sampled_from(DOUBLES)), d(st.none() | st.booleans()), d(st.integers(0, 3)))

    batches = _batches(draw, make, n_batches=8, n_changes=20)
    if append_only:
        batches = [[c for c in b if c[1] > 0] or [(make(draw), 1)] for b in batches]
    return append_only, batches


def _args(item: tuple[Any, ...]) -> list[str | None]:
    _, i, dec, dbl, b, _ = item
    java = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}  # as Spark casts a double to text
    return [None if i is None else str(i), dec, None if dbl is None else java.get(repr(dbl), repr(dbl)),
            None if b is None else str(b).lower()]


def _numeric(values: list[str | None]) -> tuple[str | None, ...]:
    """Decimal sums compared by value: a value inserted and deleted leaves its scale in the sum
    (1.50 - 1.50 + 2.5 is 2.50) unless the combiner netted the pair first. The server stores an
    unconstrained NUMERIC at a fixed scale and prints it without trailing zeros, so either way
    reads 2.5."""
    return tuple(str(decimal.Decimal(v).normalize()) if i in (4, 5) and v is not None else v
                 for i, v in enumerate(values))


@SETTINGS
@given(linear_changes())
def test_partial_aggregation_equals_change_by_change(harness: Harness, case: tuple[bool, list[Any]]) -> None:
    """Op 1's aggregates all add up, so the combiner sums each group's records into one partial;
    op 2 has the same aggregates and a count(DISTINCT), so its records go one by one. After every
    batch both must have emitted the same rows, and counts and sums must be right."""
    append_only, batches = case
    aggs = LINEAR_AGGS + (EXTREMES if append_only else [])
    harness.spec([{"id": 1, "kind": "reduce", "append_only": append_only, "aggs": aggs},
                  {"id": 2, "kind": "reduce", "append_only": append_only,
                   "aggs": [*aggs, {"fn": "count_distinct", "arg": 0, "type": "long"}]}])
    rows: Counter[Any] = Counter()
    totals: dict[int, Counter[Any]] = {1: Counter(), 2: Counter()}
    for batch in batches:
        out = []
        for op in (1, 2):  # a batch of each alone: the combiner must flush partials with nothing else
            out += harness.batch([[op, 0, item[0], None, None, _args(item), w] for item, w in batch])[0]
        for item, w in batch:
            rows[item] += w
        for op in (1, 2):
            _accumulate(totals[op], [r for r in out if r[0] == op], lambda r: (r[2], _numeric(r[5][:len(aggs)])))
        assert totals[1] == totals[2]
        assert {g for g, _ in totals[1]} == {item[0] for item, n in rows.items() if n > 0}
        for (g, values), c in totals[1].items():
            assert c == 1
            live = [item for item, n in rows.items() if item[0] == g for _ in range(n)]
            ints = [it[1] for it in live if it[1] is not None]
            assert values[:3] == (str(len(live)), str(len(ints)), str(sum(ints)) if ints else None)
    assert all(n >= 0 for n in rows.values())


# ---- joins by the delta rule ----------------------------------------------------------------

def _join_expected(left: Counter[Any], right: Counter[Any], how: str) -> Counter[Any]:
    out: Counter[Any] = Counter()
    keys = {k for (k, _), c in left.items() if c > 0} | {k for (k, _), c in right.items() if c > 0}
    for k in keys:
        ls = [(row, c) for (kk, row), c in left.items() if kk == k and c > 0]
        rs = [(row, c) for (kk, row), c in right.items() if kk == k and c > 0]
        for lrow, lc in ls:
            for rrow, rc in rs:
                out[(k, lrow, rrow)] += lc * rc
        if not rs and how in ("left", "full"):
            for lrow, lc in ls:
                out[(k, lrow, None)] += lc
        if not ls and how in ("right", "full"):
            for rrow, rc in rs:
                out[(k, None, rrow)] += rc
    return out


@st.composite
def join_changes(draw: st.DrawFn) -> tuple[str, list[list[tuple[Any, int]]]]:
    how = draw(st.sampled_from(["inner", "left", "right", "full"]))
    return how, _batches(draw, lambda d: (d(st.integers(0, 1)), d(st.sampled_from("xy")), d(st.integers(0, 2))),
                         n_batches=8)


@SETTINGS
@given(join_changes())
def test_join_delta_rule_equals_recomputation(harness: Harness, case: tuple[str, list[list[tuple[Any, int]]]]) -> None:
    how, batches = case
    harness.spec([{"id": 2, "kind": "join", "join": how}])
    sides: tuple[Counter[Any], Counter[Any]] = (Counter(), Counter())
    total: Counter[Any] = Counter()
    keys = 0
    for batch in batches:
        # the join key is the value: several keys, both sides changing in one batch
        recs = [[2, side, json.dumps({"v": v}), json.dumps({"v": v}), None, None, w] for (side, v, _), w in batch]
        out, keys = harness.batch(recs)
        for (side, v, _), w in batch:
            sides[side][(json.dumps({"v": v}), json.dumps({"v": v}))] += w
        _accumulate(total, out, lambda r: (r[2], r[3], r[4]))
        assert total == _join_expected(*sides, how)
    assert keys == len({k for s in sides for (k, _), c in s.items() if c > 0})


@SETTINGS
@given(st.data())
def test_join_comparisons_keep_the_pairs_that_pass(harness: Harness, data: st.DataObject) -> None:
    """An inner join with comparisons (Residual.java) emits the pairs of the delta rule that
    pass them, NULLs passing none: its output is the recomputed join, filtered."""
    op = data.draw(st.sampled_from(["ge", "lt", "ne", "eq"]))
    add = data.draw(st.sampled_from([0, 1, -1]))
    harness.spec([{"id": 6, "kind": "join", "join": "inner", "residual": [
        {"op": op, "type": "long", "l": {"side": 0, "field": "a", "add": add}, "r": {"side": 1, "field": "b"}}]}])
    value = st.one_of(st.integers(0, 2), st.none())
    batches = _batches(data.draw, lambda d: (d(st.integers(0, 1)), d(st.sampled_from("xy")), d(value)), n_batches=8)
    tests = {"ge": lambda a, b: a >= b, "lt": lambda a, b: a < b, "ne": lambda a, b: a != b, "eq": lambda a, b: a == b}
    sides: tuple[Counter[Any], Counter[Any]] = (Counter(), Counter())
    total: Counter[Any] = Counter()
    for batch in batches:
        recs = []
        for (side, k, v), w in batch:
            row = json.dumps({"a" if side == 0 else "b": v})
            recs.append([6, side, k, row, None, None, w])
            sides[side][(k, row)] += w
        out, _ = harness.batch(recs)
        _accumulate(total, out, lambda r: (r[2], r[3], r[4]))
        expected = Counter({(k, lrow, rrow): c for (k, lrow, rrow), c in _join_expected(*sides, "inner").items()
                            if (a := json.loads(lrow)["a"]) is not None and (b := json.loads(rrow)["b"]) is not None
                            and tests[op](a + add, b)})
        assert total == expected


# ---- top-N per partition ----------------------------------------------------------------------

@st.composite
def topn_changes(draw: st.DrawFn) -> tuple[dict[str, Any], list[list[tuple[Any, int]]]]:
    """A top-N's spec (with or without ties, over a stream or not, a reserve of 0-2 rows past the
    top so that deletes empty the cache) and batches of (p, v, i) rows ordered by v DESC, and i
    unless `by_v` (then rows of one v are peers, ordered by their text without ties)."""
    ties = draw(st.booleans())
    op = {"append_only": draw(st.booleans()), "limit": draw(st.integers(1, 3)),
          "offset": 0 if ties else draw(st.integers(0, 1)), "reserve": draw(st.integers(0, 2)), "ties": ties,
          "by_v": ties or draw(st.booleans())}
    make = lambda d: (d(st.sampled_from("pq")), d(st.integers(0, 5 if op["by_v"] else 9)),  # noqa: E731
                      d(st.integers(0, 3)))
    batches = _batches(draw, make)
    if op["append_only"]:
        batches = [[c for c in b if c[1] > 0] or [(make(draw), 1)] for b in batches]
    return op, batches


def _topn_expected(rows: Counter[Any], op: dict[str, Any]) -> Counter[Any]:
    expected: Counter[Any] = Counter()
    limit, offset = op["limit"], op["offset"]
    for p in "pq":
        ordered = sorted((item for item, c in rows.items() for _ in range(c) if item[0] == p),
                         key=lambda it: (-it[1], json.dumps(list(it))) if op.get("by_v") else (-it[1], it[2]))
        if op.get("ties"):  # RANK() <= limit: 1 + the rows before a row's peers
            chosen = [it for it in ordered if 1 + next(j for j, x in enumerate(ordered) if x[1] == it[1]) <= limit]
        else:
            chosen = ordered[offset:offset + limit]
        for item in chosen:
            expected[json.dumps(list(item))] += 1
    return expected


def _topn_spec(op: dict[str, Any]) -> dict[str, Any]:
    order = [{"arg": 0, "type": "long", "desc": True}] + ([] if op.get("by_v") else [{"arg": 1, "type": "long"}])
    return {"id": 3, "kind": "topn", "order": order,
            **{k: v for k, v in op.items() if k in ("limit", "offset", "reserve", "ties", "append_only")}}


def _check_topn_batches(harness: Harness, op: dict[str, Any], batches: list[list[tuple[Any, int]]],
                        rows: Counter[Any]) -> None:
    """Sends each batch to operator 3; what it emitted, added to the top of `rows` (the state
    before), is the top of the rows after each batch."""
    total = _topn_expected(rows, op)
    for batch in batches:
        recs = [[3, 0, p, json.dumps([p, v, i]), None, [str(v), str(i)], w] for (p, v, i), w in batch]
        out, _ = harness.batch(recs)
        for item, w in batch:
            rows[item] += w
        _accumulate(total, out, lambda r: r[3])
        assert total == _topn_expected(rows, op)


@SETTINGS
@given(topn_changes())
def test_topn_equals_recomputation(harness: Harness, case: tuple[dict[str, Any], list[list[tuple[Any, int]]]]) -> None:
    """ROW_NUMBER's top (with OFFSET) and RANK's (ties), over tables and streams; with a reserve of
    0-2 rows past the top, deletes empty the cache, rows arrive both before and after its last
    row, and the partition is read again."""
    op, batches = case
    harness.spec([_topn_spec(op)])
    _check_topn_batches(harness, op, batches, Counter())


def test_topn_state_of_the_layout_before_the_cache_is_read_and_rewritten(harness: Harness) -> None:
    """A partition whose value held only its top (as before the cache) gives the same top after
    its next changes."""
    before = {("p", 5, 0): 1, ("p", 3, 1): 2, ("p", 1, 0): 1, ("q", 2, 0): 1}
    texts: dict[str, dict[str, str]] = {}
    for (p, v, i), count in before.items():
        texts.setdefault(f"3\u0000{p}", {})[json.dumps([p, v, i])] = json.dumps([str(count), str(v), str(i)])
    values = {"3\u0000p": json.dumps([[json.dumps(["p", 5, 0]), 1], [json.dumps(["p", 3, 1]), 1]]),
              "3\u0000q": json.dumps([[json.dumps(["q", 2, 0]), 1]])}
    op = {"limit": 2, "offset": 0, "reserve": 1}
    harness._send(json.dumps({"ops": [_topn_spec(op)], "texts": texts, "values": values}))
    _check_topn_batches(harness, op, [
        [(("p", 4, 0), 1)], [(("p", 5, 0), -1), (("q", 7, 0), 1)], [(("p", 4, 0), -1), (("p", 3, 1), -1)],
        [(("p", 0, 0), 1), (("q", 2, 0), -1)], [(("p", 3, 1), -1), (("p", 1, 0), -1)]], Counter(before))


def test_topn_reads_only_its_cache_while_it_holds_the_top(harness: Harness) -> None:
    """A partition of 100 rows whose cache holds the top 3 and a reserve of 2, and whose other
    rows' texts are unreadable: changes after the cache's last row and retractions the reserve
    covers never read them (the top stays right), and the retraction that leaves the cache short
    reads the partition again (and meets them)."""
    rows = Counter({("p", v, 0): 1 for v in range(100)})
    cached = [("p", v, 0) for v in range(99, 94, -1)]
    texts = {"3\u0000p": {json.dumps(list(item)): json.dumps(["1", str(item[1]), "0"]) if item in cached else "!"
                          for item in rows}}
    value = json.dumps({"c": [[json.dumps(list(item)), 1, str(item[1]), "0"] for item in cached], "m": True})
    op = {"limit": 3, "offset": 0, "reserve": 2}
    harness._send(json.dumps({"ops": [_topn_spec(op)], "texts": texts, "values": {"3\u0000p": value}}))
    _check_topn_batches(harness, op, [
        [(("p", 99, 0), -1)], [(("p", 10, 1), 1)], [(("p", 98, 0), -1), (("p", 200, 0), 1)],
        [(("p", 97, 0), -1)], [(("p", 150, 0), 1), (("p", 150, 0), -1)]], rows)
    harness._send(json.dumps([[3, 0, "p", json.dumps(["p", v, 0]), None, [str(v), "0"], -1] for v in (200, 96)]))
    assert harness.proc.stdout is not None
    failed = json.loads(harness.proc.stdout.readline())
    harness.proc.stdout.readline()  # the count of keys with state, which follows every batch
    assert "corrupt state" in failed["error"], failed


# ---- session windows per partition -----------------------------------------------------------

def _sessions_expected(rows: Counter[tuple[str, int | None, int]], gap: int) -> Counter[Any]:
    """Each row with its session's bounds, the way SESSION(...) defines them (windows.py)."""
    out: Counter[Any] = Counter()
    for p in {item[0] for item, c in rows.items() if c > 0}:
        items = sorted((item for item, c in rows.items() if c > 0 and item[0] == p and item[1] is not None),
                       key=lambda it: it[1])
        runs: list[list[tuple[str, int | None, int]]] = []
        for item in items:
            if runs and item[1] - runs[-1][-1][1] <= gap:
                runs[-1].append(item)
            else:
                runs.append([item])
        bounds = {item: (run[0][1], run[-1][1] + gap) for run in runs for item in run}
        for item, c in rows.items():
            if c > 0 and item[0] == p:
                start, end = bounds.get(item, (None, None))
                out[json.dumps({"p": item[0], "t": item[1], "i": item[2], "ws": start, "we": end},
                               sort_keys=True)] += c
    return out


@st.composite
def session_changes(draw: st.DrawFn) -> tuple[int, list[list[tuple[Any, int]]]]:
    gap = draw(st.sampled_from([0, 1, 3]))
    make = lambda d: (d(st.sampled_from("pq")), d(st.none() | st.integers(0, 20)), d(st.integers(0, 2)))  # noqa: E731
    return gap, _batches(draw, make, n_batches=8, n_changes=10)


@SETTINGS
@given(session_changes())
def test_session_equals_recomputation(harness: Harness, case: tuple[int, list[list[tuple[Any, int]]]]) -> None:
    """Sessions merge when a row bridges two, split when it goes, and equal times share one."""
    gap, batches = case
    harness.spec([{"id": 5, "kind": "session", "gap": gap, "bounds": ["ws", "we"]}])
    _check_session_batches(harness, gap, batches, Counter())


def _check_session_batches(harness: Harness, gap: int, batches: list[list[tuple[Any, int]]],
                           rows: Counter[Any]) -> None:
    """Sends each batch of (row, weight) to operator 5; the changes it emits, added to the sessions
    of `rows` (the state before), are the sessions of the rows after each batch."""
    total = _sessions_expected(rows, gap)
    for batch in batches:
        recs = [[5, 0, p, json.dumps({"p": p, "t": t, "i": i}), None, [None if t is None else str(t)], w]
                for (p, t, i), w in batch]
        out, keys = harness.batch(recs)
        for item, w in batch:
            rows[item] += w
        _accumulate(total, out, lambda r: json.dumps(json.loads(r[3]), sort_keys=True))
        assert total == _sessions_expected(rows, gap)
        assert keys == len({item[0] for item, c in rows.items() if c})  # an emptied key keeps no state


def test_session_state_of_the_layout_before_buckets_is_read_and_rewritten(harness: Harness) -> None:
    """A partition kept one row per text (row -> [count, time], as before the time buckets) gives
    the same sessions after the change, and its later batches too."""
    gap = 3
    before = {("p", 1, 0): 1, ("p", 3, 1): 2, ("p", 10, 0): 1, ("p", None, 2): 1, ("q", 5, 0): 1}
    texts: dict[str, dict[str, str]] = {}
    for (p, t, i), count in before.items():
        row = json.dumps({"p": p, "t": t, "i": i})
        texts.setdefault(f"5\u0000{p}", {})[row] = json.dumps([str(count), None if t is None else str(t)])
    harness.spec([{"id": 5, "kind": "session", "gap": gap, "bounds": ["ws", "we"]}], texts=texts)
    _check_session_batches(harness, gap, [
        [(("p", 7, 0), 1)], [(("p", 3, 1), -1), (("q", 20, 1), 1)], [(("p", None, 2), -1), (("p", 7, 0), -1)],
        [(("p", 3, 1), -1), (("q", 5, 0), -1), (("q", 20, 1), -1)]], Counter(before))


# ---- temporal filters ---------------------------------------------------------------------------

TEMPORAL = {"id": 6, "kind": "temporal", "clock": [{"kind": "from", "offset": 0},
                                                   {"kind": "until", "offset": 5_000}]}


def _temporal_expected(rows: Counter[tuple[int | None, int]], now_ms: int) -> Counter[Any]:
    """The rows shown at `now_ms`: t <= now() < t + 5 ms (t in microseconds), as the filter
    `t <= now() AND t > now() - INTERVAL '5 milliseconds'` keeps them."""
    now = now_ms * 1000
    return Counter({json.dumps({"t": t, "i": i}): c for (t, i), c in rows.items()
                    if c > 0 and t is not None and t <= now < t + 5_000})


@st.composite
def temporal_changes(draw: st.DrawFn) -> list[tuple[int, list[tuple[Any, int]]]]:
    """Batches at increasing times (ms), with rows whose time is around them: already gone, shown,
    or to come (microseconds, some between two milliseconds), and NULLs, which never show."""
    batches = _batches(draw, lambda d: (d(st.none() | st.integers(0, 40_000)), d(st.integers(0, 2))),
                       n_batches=10, n_changes=8)
    steps = draw(st.lists(st.integers(0, 9), min_size=len(batches), max_size=len(batches)))
    times = list(itertools.accumulate(s + 3 for s in steps))  # each after the last one's tick
    # a negative time: the pipeline restarts before that batch
    restarts = draw(st.lists(st.booleans(), min_size=len(batches), max_size=len(batches)))
    return [(-t if r else t, b) for t, r, b in zip(times, restarts, batches, strict=True)]


@SETTINGS
@given(temporal_changes())
def test_temporal_filter_equals_recomputation_at_each_batchs_time(
        harness: Harness, case: list[tuple[int, list[tuple[Any, int]]]]) -> None:
    """Rows come as their start passes and go as their end passes, by timers, whether or not
    a batch brings changes; a row keeps state only while its showing can still change. The
    driver's count of pending timers matches them, through restarts, and says when one is due
    (the Harness checks both)."""
    harness.spec([TEMPORAL])
    rows: Counter[Any] = Counter()
    total: Counter[Any] = Counter()
    for signed_ms, batch in case:
        if signed_ms < 0:
            harness.restart()
        now_ms = abs(signed_ms)
        for tick in (now_ms, now_ms + 3):  # a batch with changes, then one without (a tick)
            harness.at(tick)
            recs = [[6, 0, json.dumps({"t": t, "i": i}), None, None, [None if t is None else str(t)] * 2, w]
                    for (t, i), w in (batch if tick == now_ms else [])]
            out, keys = harness.batch(recs)
            for item, w in (batch if tick == now_ms else []):
                rows[item] += w
            _accumulate(total, out, lambda r: r[3])
            assert total == _temporal_expected(rows, tick)
            waiting = {item for item, c in rows.items()
                       if c and item[0] is not None and tick * 1000 < item[0] + 5_000}
            assert keys == len({json.dumps({"t": t, "i": i}) for t, i in waiting})
