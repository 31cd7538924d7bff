"""The routing projection's dispatch (runtime/spark/pipeline.py): each arm's condition starts with
the test of its rows' source, which groups the arms so a row tests only its source's arms."""

from __future__ import annotations

from streamdb.runtime.spark.pipeline import _cannot_fail, _guarded, _guarded_overflows, _source_test


def test_source_tests_are_found_as_leading_conjuncts() -> None:
    assert _source_test("op = 17") == "op = 17"
    assert _source_test("op = 17 AND NOT ((x) IS NULL)") == "op = 17"
    assert _source_test("(__rel = 3 AND (__tag IS NULL OR __tag = 12)) AND ((`c_3_1` > 2))") == "__rel = 3"
    assert _source_test("(__rel = -1 AND __tag = 5)") == "__rel = -1"
    assert _source_test("(__rel = 3)") == "__rel = 3"


def test_conditions_without_a_leading_source_test_are_not_grouped() -> None:
    assert _source_test("op = 17 OR op = 18") is None
    assert _source_test("op = 170x") is None
    assert _source_test("(x = 1 AND op = 2)") is None
    assert _source_test("opt = 2") is None


def test_only_fields_that_cannot_fail_are_computed_once_for_every_arm() -> None:
    """Record fields shared by several arms are computed before the explode, outside the arms'
    conditions (`_hoist_shared`): only what no row can make raise."""
    key = ("to_json(named_struct('k0', `r1_1`, 'k1', `__d0`.`k0`), map('ignoreNullFields', 'false', "
           "'dateFormat', 'yyyy-MM-dd'))")
    assert _cannot_fail(key)
    assert _cannot_fail("array(CAST((`r1_2`) AS STRING), CAST(-1.5 AS STRING), NULL)")
    assert _cannot_fail("'it''s (not) a / call'")
    assert not _cannot_fail("CAST(`r1_2` AS INT)")  # a string that is no number
    assert not _cannot_fail("CAST(`r1_2` AS DECIMAL(10,2))")
    assert not _cannot_fail("array(CAST((`a` / `b`) AS STRING))")
    assert not _cannot_fail("to_json(named_struct('k0', unix_micros(`r1_3`)))")
    assert not _cannot_fail("`a` - 1")
    assert not _cannot_fail("`a` -1")  # a subtraction, however spaced
    assert not _cannot_fail("array(CAST((`a`-1) AS STRING))")
    assert not _cannot_fail("CAST(`x` AS")
    # word operators: PostgreSQL's integer division is Spark's DIV, which raises on a zero
    assert not _cannot_fail("to_json(named_struct('k0', `a` DIV `b`))")
    assert not _cannot_fail("array(CAST(`s` RLIKE `p` AS STRING))")
    assert not _cannot_fail("array(CAST(x AS STRING))")  # a bare name: only quoted columns


def _guarded_sql(sql: str) -> list[str]:
    from sqlglot import exp, parse_one
    from sqlglot.optimizer.annotate_types import annotate_types

    tree = annotate_types(parse_one(sql, dialect="postgres"), schema={"t": {"a": "INT", "b": "INT", "s": "TEXT"}})
    select = tree.find(exp.Select)
    assert select is not None
    out = []
    for e in [*select.expressions, *([select.args["where"].this] if select.args.get("where") else [])]:
        out += [g.sql(dialect="postgres") for g in _guarded(e.unalias())]
    return out


def test_a_conditional_that_may_raise_in_one_branch_is_guarded_whole() -> None:
    """The outermost CASE, COALESCE, AND or OR above something Spark may raise on for some rows
    only; what is always evaluated keeps its own error term (`_failures`)."""
    assert _guarded_sql("SELECT CASE WHEN s = 'r' THEN a / b ELSE 0 END FROM t") == [
        "CASE WHEN s = 'r' THEN a / b ELSE 0 END"]
    assert _guarded_sql("SELECT coalesce(a, CASE WHEN b > 0 THEN s::INT END) + 1 FROM t") == [
        "COALESCE(a, CASE WHEN b > 0 THEN CAST(s AS INT) END)"]
    assert _guarded_sql("SELECT a FROM t WHERE s = 'x' OR s::INT > 0") == ["s = 'x' OR CAST(s AS INT) > 0"]
    assert _guarded_sql("SELECT a / b, s::INT, CASE WHEN a > 0 THEN 'p' END, coalesce(a, b) FROM t") == []
    assert _guarded_sql("SELECT a FROM t WHERE a > 0 AND s = 'x'") == []
    # Divisions that cannot divide by zero, and integer arithmetic (rarely out of range, common in
    # filters, and far slower under sdb_error), are not guarded.
    assert _guarded_sql("SELECT CASE WHEN b > 0 THEN a / 2 ELSE coalesce(a / NULLIF(b, 0), 0) END FROM t") == []
    assert _guarded_sql("SELECT a FROM t WHERE a + 1 > 5 AND b * 2 < 1000 OR s = 'x'") == []


def _overflow_terms(sql: str) -> list[str]:
    """The guarded integer overflow conditions of the select list and WHERE, the term before
    the try_ call only (when a row evaluates the arithmetic)."""
    from sqlglot import exp, parse_one
    from sqlglot.optimizer.annotate_types import annotate_types
    from sqlglot.optimizer.qualify import qualify

    schema = {"t": {"a": "INT", "b": "INT", "s": "TEXT"}}
    tree = annotate_types(qualify(parse_one(sql, dialect="postgres"), schema=schema), schema=schema)
    select = tree.find(exp.Select)
    assert select is not None
    names = {"a": "a", "b": "b", "s": "s"}
    out = []
    for e in [*select.expressions, *([select.args["where"].this] if select.args.get("where") else [])]:
        out += [cond.split(" AND (`", 1)[0] + ")" for cond, _ in _guarded_overflows(e.unalias(), names, _guarded(e.unalias()))]
    return out


def test_integer_arithmetic_some_rows_evaluate_is_checked_under_their_conditions() -> None:
    """Arithmetic under a CASE, COALESCE, AND or OR is an error for the rows that evaluate it
    only, by a condition Spark's generated code runs (no sdb_error), innermost and leftmost first."""
    assert _overflow_terms("SELECT CASE WHEN a > 1000 THEN a * 1000000 ELSE a - 1 END FROM t") == [
        "((coalesce((`a` > 1000), false)))", "((NOT coalesce((`a` > 1000), false)))"]
    assert _overflow_terms("SELECT a FROM t WHERE a + 1 > 5 AND b * 2 < 1000 OR s = 'x'") == [
        "((true))", "((coalesce((`a` + 1 > 5), true)))"]
    assert _overflow_terms("SELECT a FROM t WHERE s = 'x' OR b * 2 < 1000") == ["((NOT coalesce((`s` = 'x'), false)))"]
    assert _overflow_terms("SELECT coalesce(a, b * 1000000) FROM t") == ["(((`a`) IS NULL))"]
    assert _overflow_terms("SELECT CASE a WHEN 1 THEN 0 WHEN 2 THEN b + 1 END FROM t") == [
        "((NOT coalesce((`a`) = (1), false) AND coalesce((`a`) = (2), false)))"]
    # Always evaluated: `_failures`' own terms. Under sdb_error already: not again.
    assert _overflow_terms("SELECT a * 2, coalesce(a, 0) + 1 FROM t") == []
    assert _overflow_terms("SELECT CASE WHEN s = 'r' THEN a / b + a * 2 END FROM t") == []


def test_deeply_nested_guarded_arithmetic_falls_back_to_one_caught_conditional() -> None:
    """Each term repeats the conditions above it: past a budget, the outermost conditional is
    evaluated under sdb_error once instead of a quadratic number of characters of conditions."""
    e = "a"
    for i in range(20):
        e = f"CASE WHEN a > {i} THEN ({e}) + 1 ELSE a * 2 END"
    terms = _overflow_terms(f"SELECT {e} FROM t")
    assert len(terms) == 1 and terms[0].startswith("(sdb_error(CASE WHEN")
