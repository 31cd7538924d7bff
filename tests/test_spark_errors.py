"""Spark's errors in Postgres's terms (runtime/spark/session.py translate_spark_error), without
Spark: the exceptions carry Spark's error condition as PySpark's captured exceptions do."""

from __future__ import annotations

import pytest

from streamdb.errors import (
    DatetimeFieldOverflow,
    InvalidDatetimeFormat,
    InvalidRegularExpression,
    InvalidTextRepresentation,
)
from streamdb.runtime.spark.session import translate_row_error, translate_spark_error


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


@pytest.mark.parametrize(("text", "error", "message"), [
    # A streaming query's failure: Spark's error inside its text, first line and all.
    ("org.apache.spark.SparkDateTimeException: [DATETIME_FIELD_OUT_OF_BOUNDS.WITHOUT_SUGGESTION] Invalid value "
     "for MonthOfYear (valid values 1 - 12): 13.  SQLSTATE: 22023\n\tat org.apache.spark...",
     DatetimeFieldOverflow, "Invalid value for MonthOfYear (valid values 1 - 12): 13."),
    ("Query [id = 1] terminated with exception: Job aborted.\nCaused by: org.apache.spark.SparkRuntimeException: "
     "[INVALID_PARAMETER_VALUE.PATTERN] The value of parameter(s) `regexp` in `regexp_replace` is invalid: "
     "'('. SQLSTATE: 22023", InvalidRegularExpression,
     "The value of parameter(s) `regexp` in `regexp_replace` is invalid: '('."),
])
def test_a_spark_error_inside_a_streaming_failure_keeps_its_sqlstate(text, error, message):
    """Before, a pipeline's failure carrying these read as XX000 with the Java class's name in
    the message; PostgreSQL says 22008 for make_date(2020, 13, 1) and 2201B for a bad pattern."""
    translated = translate_spark_error(Exception(text))
    assert type(translated) is error
    assert translated.message == message


@pytest.mark.parametrize(("text", "sqlstate", "message"), [
    # ErrorFunction.java's text for a row that raised under a CASE: Spark's words, Postgres's state.
    ("[DIVIDE_BY_ZERO] Division by zero. Use `try_divide` to tolerate divisor being 0 and return NULL "
     "instead. SQLSTATE: 22012", "22012", "division by zero"),
    ("[CAST_INVALID_INPUT] The value 'abc' of the type \"STRING\" cannot be cast to \"INT\" because it is "
     "malformed. SQLSTATE: 22018", "22P02", 'invalid input syntax for type integer: "abc"'),
    # An integer, too big for its type: PostgreSQL's reading of the text says 22003.
    ("[CAST_INVALID_INPUT] The value '99999999999' of the type \"STRING\" cannot be cast to \"INT\" because "
     "it is malformed. SQLSTATE: 22018", "22003", 'value "99999999999" is out of range for type integer'),
    # A data exception not mapped one by one keeps the SQL standard's state Spark gives it.
    ("[SOME_NEW_CONDITION] The value is bad. SQLSTATE: 22023", "22023", "The value is bad."),
    ("java.lang.IllegalStateException: boom", "XX000", "java.lang.IllegalStateException: boom"),
])
def test_a_rows_error_from_spark_is_said_in_postgres_terms(text, sqlstate, message):
    translated = translate_row_error(text)
    assert (translated.sqlstate, translated.message) == (sqlstate, message)


def test_the_java_class_before_a_spark_condition_is_left_out():
    translated = translate_spark_error(_Captured(
        "DIVIDE_BY_ZERO", "org.apache.spark.SparkArithmeticException: [DIVIDE_BY_ZERO] Division by zero. "
                          "SQLSTATE: 22012"))
    assert (translated.sqlstate, translated.message) == ("22012", "division by zero")
