"""Spark's errors in Postgres's terms (runtime/spark/session.py translate_spark_error), without
Spark: the exceptions carry Spark's error condition as PySpark's captured exceptions do."""

from __future__ import annotations

import pytest

from streamdb.errors import InvalidDatetimeFormat, InvalidTextRepresentation
from streamdb.runtime.spark.session import translate_spark_error


class _Captured(Exception):
    def __init__(self, condition: str, message: str) -> None:
        super().__init__(message)
        self.condition = condition

    def getCondition(self) -> str:  # noqa: N802 - PySpark's name
        return self.condition


@pytest.mark.parametrize(("spark_type", "error", "postgres_type"), [
    ("INT", InvalidTextRepresentation, "integer"),
    ("BIGINT", InvalidTextRepresentation, "bigint"),
    ("DECIMAL(10,2)", InvalidTextRepresentation, "numeric"),
    ("DOUBLE", InvalidTextRepresentation, "double precision"),
    ("DATE", InvalidDatetimeFormat, "date"),
    ("TIMESTAMP", InvalidDatetimeFormat, "timestamp with time zone"),
])
def test_a_cast_spark_cannot_do_is_said_as_postgres_says_it(spark_type, error, postgres_type):
    spark = (f"[CAST_INVALID_INPUT] The value 'a b' of the type \"STRING\" cannot be cast to \"{spark_type}\" "
             "because it is malformed. Correct the value as per the syntax, or change its target type. Use "
             "`try_cast` to tolerate malformed input and return NULL instead. SQLSTATE: 22018\n"
             "== SQL (line 1, position 10) ==\n...")
    translated = translate_spark_error(_Captured("CAST_INVALID_INPUT", spark))
    assert type(translated) is error
    assert translated.message == f'invalid input syntax for type {postgres_type}: "a b"'
