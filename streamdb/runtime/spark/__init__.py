"""Spark runtime. The only package in StreamDB that may import pyspark."""

from streamdb.runtime.spark.session import SparkRuntime, translate_spark_error

__all__ = ["SparkRuntime", "translate_spark_error"]
