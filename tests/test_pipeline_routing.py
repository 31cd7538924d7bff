"""The routing projection's dispatch (runtime/spark/pipeline.py): each arm's condition starts with
the test of its rows' source, which groups the arms so a row tests only its source's arms."""

from __future__ import annotations

from streamdb.runtime.spark.pipeline import _source_test


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
