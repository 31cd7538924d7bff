"""Python UDFs (streamdb/udf.py) registered in a Spark session, and the JVM functions of our
jar that the planner's Spark SQL calls (`sdb_exact_avg`, planner/typing.py).

Each function is registered twice, as Arrow-optimized Python UDFs (Spark ships batches of rows to
its Python workers as Arrow, where the executors run): `sdb_udf_<id>` returns the value and
fails the job on the function's error (ad hoc queries and the epoch driver, where the error is
the statement's), and `sdb_udf_<id>_e` returns `struct<v, e>`, the value or the error's text, for
the view pipelines, which carry a row's error as data (the row goes to the view's errors, 38000)
instead of failing the streaming query of every view sharing it.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.functions import udf as spark_udf
from pyspark.sql.pandas.types import from_arrow_type
from pyspark.sql.types import DecimalType, StringType, StructField, StructType

from streamdb import udf

ERROR_SUFFIX = "_e"


def register(session: SparkSession, functions: list[udf.FunctionDef]) -> None:
    for f in functions:
        returns = from_arrow_type(f.returns.arrow())
        call = udf.callable_for(f)
        session.udf.register(f.registered_name, spark_udf(udf.positional(call, udf.call_arity(f)), returns,
                                                          useArrow=True))
        carried = StructType([StructField("v", returns), StructField("e", StringType())])
        session.udf.register(f.registered_name + ERROR_SUFFIX,
                             spark_udf(udf.positional(call.with_error, udf.call_arity(f)), carried,
                                       useArrow=True))


# The planner's names for functions of streamdb/runtime/spark/jvm -> (class, Spark result type).
JVM_FUNCTIONS = {"sdb_exact_avg": ("streamdb.spark.ExactAvg", DecimalType(38, 16))}


def register_jvm_functions(session: SparkSession, sqls: list[str] | None = None) -> None:
    """The jar's functions (those these SQL texts call; all without texts)."""
    lowered = None if sqls is None else [sql.lower() for sql in sqls]  # sqlglot prints SDB_EXACT_AVG
    for name, (cls, returns) in JVM_FUNCTIONS.items():
        if lowered is None or any(name in sql for sql in lowered):
            session.udf.registerJavaFunction(name, cls, returns)


def register_used(session: SparkSession, sqls: list[str]) -> None:
    """The functions these SQL texts call."""
    register_jvm_functions(session, sqls)
    used: dict[str, Any] = {}
    for sql in sqls:
        for f in udf.used_in(sql):
            used[f.registered_name] = f
    if used:
        register(session, list(used.values()))
