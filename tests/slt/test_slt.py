"""The sqllogictest runner: parser unit tests (no server) and a curated file against a server.

The server test uses the `server` fixture from tests/conftest.py (an object with `.dsn`).
Until that fixture exists the test is skipped. To run the curated file against any other
Postgres-wire server: STREAMDB_SLT_DSN=postgresql://... [STREAMDB_SLT_LABELS=postgres].
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.slt.runner import (
    FileResult,
    Runner,
    SkipList,
    compare_results,
    created_object,
    drop_statement,
    format_failure,
    normalize_value,
    parse,
    parse_duration,
)

HERE = Path(__file__).parent
SUITE = HERE.parents[2] / "shared" / "suites" / "risingwave" / "e2e_test"

# Records copied from the RisingWave e2e files (streaming/basic.slt, streaming/union.slt,
# streaming/join/interval_join.slt.part, batch/explain.slt, streaming/nexmark_snapshot.slt).
RW_SAMPLE = """\
statement ok
create table t1 (v1 int, v2 int, v3 int);

# a comment between records
query RII rowsort
select avg_v1, sum_v2, count_v3 from mv2;
----
1.5 7 2

statement error
create materialized view v5 as select * from t1 union corresponding by (vxx, v1) select * from t2
----
db error: ERROR: Failed to run the query

Caused by:
  Invalid input syntax: Column name `vxx` in CORRESPONDING BY is not found.


statement error Not supported: EXPLAIN CREATE VIEW
explain create view v as select 1;

query error
explain (trace, format json) select 1;
----
    db error: ERROR: Failed to run the query

Caused by:
  Not supported: EXPLAIN (TRACE, JSON FORMAT)


control substitution on

let left_state_table_id, left_state_table
SELECT id, name
FROM rw_catalog.rw_internal_table_info
LIMIT 1

query IT rowsort retry 21 backoff 1s
SELECT left_table_id, left_table_ts FROM ${left_state_table};
----
2 2024-01-01 00:00:30+00:00

system ok
./risedev ctl hummock trigger-manual-compaction -t "$table_id"

include ../nexmark/create_tables.slt.part

sleep 5s

skipif streamdb
statement count 2
insert into t1 values (1, 2, 3), (4, 5, 6);

onlyif streamdb
connection other
query I valuesort
select 1
----
1

halt
"""


def test_parse_rw_records() -> None:
    recs = parse(RW_SAMPLE, "sample.slt")
    kinds = [r.kind for r in recs]
    assert kinds == ["statement", "query", "statement", "statement", "query", "control", "let", "query",
                     "system", "include", "sleep", "statement", "query", "halt"]
    create, q1, err1, err2, qerr, ctl, let, qretry, system, inc, slp, count, qconn, _ = recs
    assert create.line == 1 and create.expect == "ok" and create.sql.startswith("create table t1")
    assert q1.types == "RII" and q1.sort_mode == "rowsort" and q1.results == ["1.5 7 2"]
    assert q1.line == 5
    assert err1.expect == "error" and err1.error_regex is None
    assert err1.error_text is not None and err1.error_text.startswith("db error: ERROR: Failed to run")
    assert "Caused by:" in err1.error_text and "CORRESPONDING BY" in err1.error_text
    assert err2.error_regex == "Not supported: EXPLAIN CREATE VIEW"
    assert err2.sql == "explain create view v as select 1;"
    assert qerr.kind == "query" and qerr.expect == "error" and "EXPLAIN (TRACE" in (qerr.error_text or "")
    assert ctl.arg == "substitution on"
    assert let.arg == "left_state_table_id, left_state_table" and "rw_internal_table_info" in let.sql
    assert qretry.retry == 21 and qretry.backoff == 1.0 and qretry.sort_mode == "rowsort"
    assert qretry.results == ["2 2024-01-01 00:00:30+00:00"]
    assert system.reason and "risedev" in system.arg
    assert inc.arg == "../nexmark/create_tables.slt.part"
    assert parse_duration(slp.arg) == 5.0
    assert count.expect == "count" and count.count == 2 and count.conditions == [("skipif", "streamdb")]
    assert qconn.connection == "other" and qconn.conditions == [("onlyif", "streamdb")]
    assert qconn.sort_mode == "valuesort" and qconn.results == ["1"]


def test_parse_query_without_results_and_unknown_kind() -> None:
    recs = parse("query I\nselect 1 where false\n\nfrobnicate now\nxyz\n\nhash-threshold 8\n", "x.slt")
    assert recs[0].results is None and recs[0].sql == "select 1 where false"
    assert recs[1].kind == "unsupported" and "frobnicate" in recs[1].reason


@pytest.mark.skipif(not SUITE.exists(), reason="RisingWave suite not present beside the project")
def test_parse_whole_risingwave_suite() -> None:
    files = sorted(SUITE.rglob("*.slt")) + sorted(SUITE.rglob("*.slt.part"))
    assert files
    total = 0
    for f in files:
        recs = parse(f.read_text(), str(f))
        assert all(r.kind != "unsupported" for r in recs), f
        total += len(recs)
    assert total > 800


def test_compare_results() -> None:
    rows = [[normalize_value("b"), normalize_value(None)], [normalize_value("a"), normalize_value("")]]
    assert compare_results(rows, ["b NULL", "a (empty)"], "nosort")
    assert not compare_results(rows, ["a (empty)", "b NULL"], "nosort")
    assert compare_results(rows, ["a   (empty)", "b NULL"], "rowsort")
    assert compare_results(rows, ["NULL a", "(empty) b"], "valuesort")
    assert compare_results([[normalize_value("x  y")]], ["x y"], "nosort")
    assert compare_results([], [], "nosort")


def test_created_objects_and_drops() -> None:
    assert created_object("create materialized view mv1 as select 1") == ("materialized view", "mv1")
    assert created_object("CREATE TABLE IF NOT EXISTS public.t3 (v int)") == ("table", "public.t3")
    assert created_object("-- c\ncreate stream s (a int)") == ("stream", "s")
    assert created_object("create source if not exists src with (connector='x')") == ("source", "src")
    assert created_object("insert into t values (1)") is None
    assert drop_statement("materialized view", "mv1") == "DROP MATERIALIZED VIEW IF EXISTS mv1 CASCADE"
    assert drop_statement("database", "d") == "DROP DATABASE IF EXISTS d"


def test_skiplist(tmp_path: Path) -> None:
    p = tmp_path / "skip.toml"
    p.write_text('[files]\n"ddl/show.slt" = "r1"\n"extended_mode/*.slt" = "r2"\n'
                 '[records]\n"streaming/join/main.slt:9" = "r3"\n')
    s = SkipList.load(p)
    assert s.file_reason("/x/e2e_test/ddl/show.slt") == "r1"
    assert s.file_reason("/x/e2e_test/extended_mode/basic.slt") == "r2"
    assert s.file_reason("/x/e2e_test/streaming/basic.slt") is None
    assert s.record_reason("/x/streaming/join/main.slt", 9) == "r3"
    assert s.record_reason("/x/streaming/join/main.slt", 10) is None
    p.write_text('[files]\n"a.slt" = ""\n')
    with pytest.raises(ValueError):
        SkipList.load(p)
    # The committed skip list loads and every entry has a reason.
    committed = SkipList.load(HERE / "skiplist.toml")
    assert committed.files


def _dsn_and_labels(request: pytest.FixtureRequest) -> tuple[str, frozenset[str]]:
    env = os.environ.get("STREAMDB_SLT_DSN")
    if env:
        labels = os.environ.get("STREAMDB_SLT_LABELS", "streamdb")
        return env, frozenset(x for x in labels.split(",") if x)
    try:
        server = request.getfixturevalue("server")
    except pytest.FixtureLookupError:
        pytest.skip("no `server` fixture yet (tests/conftest.py) and STREAMDB_SLT_DSN is not set")
    return server.dsn, frozenset({"streamdb"})


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", ["basic.slt", "materialized_view.slt"])
def test_case_file(request: pytest.FixtureRequest, case: str) -> None:
    dsn, labels = _dsn_and_labels(request)
    runner = Runner(dsn=dsn, timeout=60, labels=labels, skiplist=SkipList())
    result: FileResult = runner.run_file(HERE / "cases" / case)
    details = "\n".join(format_failure(f) for f in result.failures)
    assert result.status == "pass", f"{result.reason or ''}\n{details}"
    assert result.passed >= 4 and result.failed == 0
