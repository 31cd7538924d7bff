"""The Spark runtime: one SparkSession per server process, started in the background.

Only modules under streamdb/runtime/spark may import pyspark. pyspark is imported lazily
(inside the start thread and the query path) so importing this module stays cheap.

Data crosses into Spark only as DataFrames built from Arrow tables on the driver, so the
same code path works for ``local[*]`` and for a remote ``spark://host:port`` master
(executors never read the driver's disk).

Type notes (Arrow -> Spark -> Arrow):

* ``timestamp[us]`` (no tz) <-> TimestampNTZType; ``timestamp[us, tz=UTC]`` <-> TimestampType
  (results come back as ``timestamp[us, tz=UTC]``).
* ``time64[us]`` <-> TimeType(6) (Spark returns ``time64[ns]``; cast back to ``time64[us]``).
* ``month_day_nano_interval``: Spark cannot take this Arrow type. Columns whose values have
  no month part are shipped as ``duration[us]`` (DayTimeIntervalType) and durations in
  results are returned as ``month_day_nano_interval`` (whole days split out). A value with
  a month part raises FeatureNotSupported (0A000).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import re
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from streamdb import types as T
from streamdb import udf, values
from streamdb.errors import (
    DatatypeMismatch,
    DatetimeFieldOverflow,
    DivisionByZero,
    FeatureNotSupported,
    InternalError,
    InvalidParameterValue,
    InvalidRegularExpression,
    InvalidTextRepresentation,
    NumericValueOutOfRange,
    ObjectNotInPrerequisiteState,
    StreamDBError,
    SyntaxErrorSQL,
    UndefinedColumn,
    UndefinedFunction,
    UndefinedTable,
    from_coded,
)
from streamdb.runtime.spark.jvm import jar_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

STOPPED = "stopped"
STARTING = "starting"
READY = "ready"
FAILED = "failed"

_STOP_TIMEOUT_S = 15.0
_US_PER_DAY = 86_400_000_000

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p spark %c{1}: %m%n%ex
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
logger.nativeloader.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativeloader.level = error
logger.sparkconf.name = org.apache.spark.SparkConf
logger.sparkconf.level = error
logger.utils.name = org.apache.spark.util.Utils
logger.utils.level = error
logger.sparkenv.name = org.apache.spark.SparkEnv
logger.sparkenv.level = error
# Failed queries reach the client as errors; do not also dump executor stack traces.
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = fatal
logger.tasksetmanager.name = org.apache.spark.scheduler.TaskSetManager
logger.tasksetmanager.level = error
# A pipeline's batch taking longer than its trigger interval is normal under load, not a warning.
logger.processingtime.name = org.apache.spark.sql.execution.streaming
logger.processingtime.level = error
logger.microbatch.name = org.apache.spark.scheduler.DAGScheduler
logger.microbatch.level = error
# A broadcast that fails to store rethrows, failing its job (which reaches the view's status); a
# shutdown that cancels a batch while it stores one logged an ERROR for the expected stop.
logger.torrentbroadcast.name = org.apache.spark.broadcast.TorrentBroadcast
logger.torrentbroadcast.level = fatal
# Likewise a shuffle fetch that fails fails its task (a FetchFailedException, retried or failing
# the job); a shutdown that cancels a batch mid-shuffle logged "Error occurred while fetching local
# blocks, null" for the expected stop.
logger.shufflefetch.name = org.apache.spark.storage.ShuffleBlockFetcherIterator
logger.shufflefetch.level = fatal
# The view engine's own classes (the jar) say what they set up, once.
logger.streamdb.name = streamdb.spark
logger.streamdb.level = info
"""


def _is_loopback_master(master: str) -> bool:
    m = master.strip().lower()
    if m == "local" or m.startswith("local["):
        return True
    return m.startswith("spark://127.0.0.1") or m.startswith("spark://localhost")


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return text.strip()


_BRACKET = re.compile(r"^\[[A-Z0-9_.]+\]\s*")
# "org.apache.spark.SparkArithmeticException: [DIVIDE_BY_ZERO] ...": the class says nothing to a user.
_JAVA_CLASS = re.compile(r"^(?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error): (?=\[)")
_SQLSTATE_TAIL = re.compile(r"\s*SQLSTATE:\s*[0-9A-Z]{5}.*$")


# Java exceptions that only wrap their cause: "Exception thrown in awaitResult:" says nothing, and a
# stage failure's text is the task's exception behind "Task 0 in stage 4.0 failed 1 times, ...".
_WRAPPERS = re.compile(r"Exception thrown in awaitResult|Job aborted due to stage failure")


def _java_text(java_exc: Any) -> str:
    """A Java exception's text, or its cause's past the wrappers that only carry it."""
    text = str(java_exc.toString())
    for _ in range(16):
        cause = java_exc.getCause()
        if cause is None or not _WRAPPERS.search(_first_line(text)):
            break
        java_exc, text = cause, str(cause.toString())
    return text


def _clean_message(text: str) -> str:
    """Spark's first message line without the [ERROR_CLASS] prefix and SQLSTATE suffix."""
    line = _first_line(text)
    line = _BRACKET.sub("", _JAVA_CLASS.sub("", line))
    line = _SQLSTATE_TAIL.sub("", line)
    return line.rstrip(" ;") or "Spark query failed"


# Spark error condition (prefix) -> StreamDB error class.
_BY_CONDITION: tuple[tuple[str, type[StreamDBError]], ...] = (
    ("UNRESOLVED_COLUMN", UndefinedColumn),
    ("UNRESOLVED_FIELD", UndefinedColumn),
    ("TABLE_OR_VIEW_NOT_FOUND", UndefinedTable),
    ("PARSE_SYNTAX_ERROR", SyntaxErrorSQL),
    ("PARSE_EMPTY_STATEMENT", SyntaxErrorSQL),
    ("DIVIDE_BY_ZERO", DivisionByZero),
    ("INTERVAL_DIVIDED_BY_ZERO", DivisionByZero),
    ("CAST_INVALID_INPUT", InvalidTextRepresentation),
    ("UNRESOLVED_ROUTINE", UndefinedFunction),
    ("ARITHMETIC_OVERFLOW", NumericValueOutOfRange),
    ("CAST_OVERFLOW", NumericValueOutOfRange),
    ("NUMERIC_VALUE_OUT_OF_RANGE", NumericValueOutOfRange),
    # "Cannot resolve ... due to data type mismatch" (e.g. WHERE over an INT): 42804, not XX000.
    ("DATATYPE_MISMATCH", DatatypeMismatch),
    ("AGGREGATE_FUNCTION_WITH_NONDETERMINISTIC_EXPRESSION", FeatureNotSupported),
    # make_date(2020, 13, 1): Postgres says 22008 (date/time field value out of range).
    ("DATETIME_FIELD_OUT_OF_BOUNDS", DatetimeFieldOverflow),
    # regexp_replace(s, '(', ''): Postgres says 2201B (invalid regular expression).
    ("INVALID_PARAMETER_VALUE.PATTERN", InvalidRegularExpression),
)
# Spark's error inside another exception's text (a streaming query's failure reads
# "org.apache.spark.SparkDateTimeException: [CONDITION] message SQLSTATE: 22023"): its condition.
_WRAPPED = re.compile(r"[\w.$]*(?:Exception|Error): (\[[A-Z][A-Z0-9_.]*\] [^\n]*)")
_WRAPPING_CONDITIONS = ("STREAM_FAILED",)

_CAST_INVALID = re.compile(r"The value '(.*)' of the type \"STRING\" cannot be cast to \"([A-Z_]+)", re.S)
# The SQL type behind each Spark type a cast from text can fail to reach.
_CAST_TARGETS = {"INT": T.INTEGER, "BIGINT": T.BIGINT, "SMALLINT": T.SMALLINT, "TINYINT": T.SMALLINT,
                 "DOUBLE": T.DOUBLE, "FLOAT": T.REAL, "DECIMAL": T.NUMERIC, "BOOLEAN": T.BOOLEAN, "DATE": T.DATE,
                 "TIMESTAMP": T.TIMESTAMPTZ, "TIMESTAMP_NTZ": T.TIMESTAMP}

# Spark SQLSTATE -> StreamDB error class (Spark's states mostly follow Postgres).
_BY_SQLSTATE: dict[str, type[StreamDBError]] = {
    "42703": UndefinedColumn,
    "42P01": UndefinedTable,
    "42601": SyntaxErrorSQL,
    "42883": UndefinedFunction,
    "22012": DivisionByZero,
    "22018": InvalidTextRepresentation,  # Spark: invalid character value for cast
    "22P02": InvalidTextRepresentation,
    "22003": NumericValueOutOfRange,
    "42K09": DatatypeMismatch,  # Spark: data type mismatch
}


# Spark conditions whose words Postgres says otherwise (Spark's add advice about its own settings).
_POSTGRES_WORDS = {"DIVIDE_BY_ZERO": "division by zero", "INTERVAL_DIVIDED_BY_ZERO": "division by zero"}

# A view's row error whose text is Spark's own (ErrorFunction.java): "spark:[CONDITION] message".
SPARK_ROW_ERROR = "spark"


def translate_row_error(text: str) -> StreamDBError:
    """The error of a view's row that Spark raised on (the text after SPARK_ROW_ERROR's colon)."""
    return translate_spark_error(_RowError(text))


class _RowError(Exception):
    """Spark's error text from a row, as translate_spark_error reads an exception."""

    def getSqlState(self) -> str | None:  # noqa: N802 - pyspark's name
        m = re.search(r"SQLSTATE: ([0-9A-Z]{5})", str(self))
        return m.group(1) if m else None


def translate_spark_error(exc: BaseException) -> StreamDBError:
    """Map a pyspark/py4j exception to a StreamDBError (no Java stack trace in the message)."""
    if isinstance(exc, StreamDBError):
        return exc
    if (failed := udf.failure(str(exc))) is not None:  # a Python function's own error
        return failed
    condition: str | None = None
    sqlstate: str | None = None
    get_condition = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    if callable(get_condition):
        try:
            condition = get_condition()
        except Exception:  # noqa: BLE001 - best effort introspection
            condition = None
    get_state = getattr(exc, "getSqlState", None)
    if callable(get_state):
        try:
            sqlstate = get_state()
        except Exception:  # noqa: BLE001
            sqlstate = None
    text = str(exc)
    type_name = type(exc).__name__
    if condition is None:
        m = re.match(r"^\[([A-Z0-9_.]+)\]", text.strip())
        if m:
            condition = m.group(1)
    if (condition is None or condition.startswith(_WRAPPING_CONDITIONS)) and (wrapped := _WRAPPED.search(text)):
        text = wrapped.group(1)
        condition = text[1:text.index("]")]
        if (state := re.search(r"SQLSTATE: ([0-9A-Z]{5})", text)) is not None:
            sqlstate = state.group(1)
    if type_name == "Py4JNetworkError" or "Py4JNetworkError" in text:
        return InternalError("lost connection to the Spark driver JVM")
    if type_name.startswith("Py4J"):
        # Py4JJavaError without a captured Spark condition: the message holds a Java trace.
        java_exc = getattr(exc, "java_exception", None)
        if java_exc is not None:
            try:
                text = _java_text(java_exc)
            except Exception:  # noqa: BLE001
                pass
    message = _POSTGRES_WORDS.get(condition or "") or _clean_message(text)
    if condition == "USER_RAISED_EXCEPTION" and (raised := from_coded(message)) is not None:
        return raised  # planner/query.raise_call
    detail = f"Spark error condition {condition}" if condition else None
    cls: type[StreamDBError] | None = None
    if condition:
        for prefix, candidate in _BY_CONDITION:
            if condition == prefix or condition.startswith(prefix + "."):
                cls = candidate
                break
    if condition == "CAST_INVALID_INPUT" and (m := _CAST_INVALID.search(message)) and m.group(2) in _CAST_TARGETS:
        # Postgres's words for the same failure, as a view whose cast is carried as data says it:
        # its own reading of the text says which (22P02, or 22003 for '99999999999'::int).
        target, text = _CAST_TARGETS[m.group(2)], m.group(1)
        error: StreamDBError = values.invalid_input(target, text)
        try:
            values.parse_text(text, target)
        except StreamDBError as refused:
            error = refused
        error.detail = detail
        return error
    if cls is None and type_name == "ParseException":
        cls = SyntaxErrorSQL
    if cls is None and sqlstate:
        cls = _BY_SQLSTATE.get(sqlstate)
    if cls is None and "Illegal sequence boundaries" in message and message.rstrip().endswith("by 0"):
        # generate_series(a, b, 0): Spark's sequence() asserts; Postgres says 22023.
        return InvalidParameterValue("step size cannot equal zero", detail=detail)
    if cls is None and sqlstate is not None and sqlstate.startswith("22"):
        # A data exception Spark names by its standard state (class 22 is the SQL standard's).
        return StreamDBError(message, sqlstate=sqlstate, detail=detail)
    if cls is None:
        if condition == "UNSUPPORTED_DATA_TYPE_FOR_ARROW_CONVERSION" or type_name == "PySparkTypeError":
            return FeatureNotSupported(message, detail=detail)
        if re.search(r"The data type \w+ is not supported", message):  # e.g. TIME in an expression
            return FeatureNotSupported(message, detail=detail)
        return InternalError(message, detail=detail)
    return cls(message, detail=detail)


def _to_spark_arrow(table: pa.Table) -> pa.Table:
    """Convert Arrow columns Spark cannot ingest into equivalents it can. Empty record batches go:
    pyspark's createDataFrame keeps no row after one (batches of 2, 0 and 1 rows gave 2 rows)."""
    batches = table.to_batches()
    if len(batches) > 1 and any(b.num_rows == 0 for b in batches):
        table = pa.Table.from_batches([b for b in batches if b.num_rows], schema=table.schema)
    columns = []
    changed = False
    for field, column in zip(table.schema, table.columns, strict=True):
        if pa.types.is_interval(field.type):
            columns.append(_interval_to_duration(field.name, column))
            changed = True
        else:
            columns.append(column)
    if not changed:
        return table
    return pa.table(columns, names=table.column_names)


def _interval_to_duration(name: str, column: pa.ChunkedArray) -> pa.Array:
    values: list[int | None] = []
    for v in column.to_pylist():
        if v is None:
            values.append(None)
            continue
        months, days, nanos = v.months, v.days, v.nanoseconds
        if months:
            raise FeatureNotSupported(
                f"column \"{name}\": interval values with a month part cannot be processed by Spark",
                hint="Express the interval in days (e.g. '30 days') instead of months or years.",
            )
        values.append(days * _US_PER_DAY + nanos // 1000)
    return pa.array(values, type=pa.duration("us"))


def _duration_to_interval(column: pa.ChunkedArray) -> pa.Array:
    us = column.cast(pa.duration("us")).cast(pa.int64()).to_pylist()
    out: list[tuple[int, int, int] | None] = []
    for v in us:
        if v is None:
            out.append(None)
        else:
            # Truncate toward zero so that '-1 day -01:00:00' stays one day plus nanos.
            days = int(v / _US_PER_DAY)
            out.append((0, days, (v - days * _US_PER_DAY) * 1000))
    return pa.array(out, type=pa.month_day_nano_interval())


def _from_spark_arrow(table: pa.Table) -> pa.Table:
    """Normalize Spark's Arrow output back to the types streamdb/types.py uses."""
    columns = []
    changed = False
    for field, column in zip(table.schema, table.columns, strict=True):
        t = field.type
        if pa.types.is_duration(t):
            columns.append(_duration_to_interval(column))
            changed = True
        elif pa.types.is_time64(t) and t.unit != "us":
            columns.append(pc.cast(column, pa.time64("us")))
            changed = True
        elif pa.types.is_timestamp(t) and t.unit != "us":
            columns.append(pc.cast(column, pa.timestamp("us", tz=t.tz)))
            changed = True
        else:
            columns.append(column)
    if not changed:
        return table
    return pa.table(columns, names=table.column_names)


SMALL_INPUT_ROWS = 50_000
# Compile generated methods over 8,000 bytes of bytecode too: a pipeline's routing projection over
# many views is one such method, which HotSpot otherwise leaves to its interpreter (Spark only
# splits methods past 64 KB).
COMPILE_HUGE_METHODS = "-XX:-DontCompileHugeMethods"
# HotSpot's optimizing compiler (C2) only for methods 30x hotter than its defaults. Each micro-batch
# runs Spark's planner, whose thousands of methods each cross the default thresholds after a few
# dozen batches: C2 then took a core's third to half for the whole of a run (Nexmark q17, 4M
# events: 35% of the JVM's samples in C2 threads). The per-row loops pass 30x in the first batches.
# Measured in docs/benchmarks.md ("JIT thresholds"); C1 only (TieredStopAtLevel=1) was 26% faster
# on q17 at 1M events but 26% slower on q5 at 4M.
JIT_THRESHOLDS = ("-XX:Tier4InvocationThreshold=150000 -XX:Tier4MinInvocationThreshold=20000 "
                  "-XX:Tier4CompileThreshold=450000 -XX:Tier4BackEdgeThreshold=1200000")
# ...except the code every row runs through, which gets C2 at HotSpot's default thresholds (1/30 of
# the above, per method: CompileThresholdScaling also makes its C1 compile come sooner). A backfill
# of a few large batches spent its first one in C1's profiled code: Nexmark q8 over 10M preloaded
# events, its first batch 35 -> 25-27 s and the view 63 -> 48-51 s (docs/benchmarks.md, "The JIT's
# thresholds for the per-row code"). The planner's methods keep the raised thresholds.
ROW_CODE = (
    "org/apache/spark/sql/catalyst/expressions/GeneratedClass*",  # whole-stage and projection codegen
    "org/apache/spark/sql/catalyst/expressions/Unsafe*",
    "org/apache/spark/sql/catalyst/expressions/codegen/Unsafe*",
    "org/apache/spark/sql/catalyst/expressions/json/*",
    "org/apache/spark/sql/catalyst/json/*",  # the rows between layers (from_json, to_json)
    "org/apache/spark/sql/catalyst/util/*",
    "org/apache/spark/sql/catalyst/encoders/ExpressionEncoder*",
    "org/apache/spark/sql/execution/streaming/state/*",  # the state stores
    "org/apache/spark/sql/execution/streaming/operators/*",  # transformWithState's operator
    "org/apache/spark/sql/execution/arrow/*",
    "org/apache/spark/sql/execution/BufferedRowIterator*",
    "org/apache/spark/sql/execution/UnsafeExternalRowSorter*",
    "org/apache/spark/util/collection/*",
    "org/apache/spark/unsafe/*",
    "com/fasterxml/jackson/*",
    "org/apache/arrow/*",
    "org/rocksdb/*",
    "streamdb/spark/*",  # the view engine's operators (jvm/)
    "scala/collection/Iterator*",
)
ROW_CODE_SCALING = 1 / 30
# `quiet` first: each CompileCommand is otherwise echoed on the JVM's stdout.
ROW_CODE_COMPILE_COMMANDS = " ".join(
    ["-XX:CompileCommand=quiet"]
    + [f"-XX:CompileCommand=CompileThresholdScaling,{pattern}.*,{ROW_CODE_SCALING:.4f}" for pattern in ROW_CODE])
# The driver and (on a cluster) the executors: one string, so that neither misses a later option.
JIT_OPTIONS = f"{COMPILE_HUGE_METHODS} {JIT_THRESHOLDS} {ROW_CODE_COMPILE_COMMANDS}"
MALLOC_ARENA_MAX = "2"  # the JVMs' malloc arenas (_build_session)
DRIVER_MEMORY = "768m"  # the driver JVM's heap (spark_conf)
CODEGEN_CACHE_ENTRIES = 1000  # Spark's cache of generated classes (spark_conf)
SMALL_INPUT_CONF = {"spark.sql.shuffle.partitions": "1", "spark.sql.adaptive.enabled": "false",
                     "spark.sql.codegen.wholeStage": "false"}


class SparkRuntime:
    """Owns the process's SparkSession and runs SQL over Arrow tables.

    Thread-safe: every ``run_query`` call uses its own ``spark.newSession()`` (separate temp
    views, shared SparkContext), so concurrent queries neither collide nor serialize.
    """

    def __init__(
        self,
        master: str = "local[*]",
        *,
        app_name: str = "streamdb",
        work_dir: str,
        conf: dict[str, str] | None = None,
        shuffle_partitions: int = 2,
        ready_timeout: float = 120.0,
        nice: int = 0,
        jvm_options: str = "",
    ) -> None:
        self.master = master
        # JIT_OPTIONS, then Settings.spark_jvm_options (a later option wins): the driver's and
        # the executors' one string, so that neither misses an option.
        self.jit_and_user_options = f"{JIT_OPTIONS} {jvm_options.strip()}".strip()
        # The JVM's niceness (Settings.spark_nice): view maintenance yields the local cores to
        # the server's writes and reads when both want them.
        self.nice = nice
        self.app_name = app_name
        # The JVM of a server killed with -9 can outlive it and still hold its files; each run gets
        # its own directory, and the previous run's JVM (recorded in jvm.pid) is stopped at start.
        self.base_dir = Path(work_dir)
        # Set once the JVM has been launched (or failed to): until then the server keeps other
        # native thread pools from starting.
        self.gateway_launched = threading.Event()
        self.work_dir = self.base_dir / f"run-{os.getpid()}"
        self.conf: dict[str, str] = dict(conf or {})
        self._max_input_bytes: int | None = None
        self.shuffle_partitions = shuffle_partitions
        # How long run_query waits for a session that is still starting.
        self.ready_timeout = ready_timeout
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._status = STOPPED
        self._error: str | None = None
        self._spark: SparkSession | None = None
        self._thread: threading.Thread | None = None
        self._start_seconds: float | None = None
        # Observability counters (guarded by _lock).
        self._queries_run = 0
        self._queries_failed = 0
        self._query_seconds = 0.0
        self._last_query_seconds: float | None = None
        self._active = 0
        self.jvm_restarts = 0  # JVMs that exited under the server and were replaced
        self.last_jvm_exit: str | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def status(self) -> str:
        """One of 'stopped' | 'starting' | 'ready' | 'failed'."""
        return self._status

    @property
    def error(self) -> str | None:
        """Why starting Spark failed (None unless status is 'failed')."""
        return self._error

    @property
    def start_seconds(self) -> float | None:
        """How long the SparkSession took to become ready."""
        return self._start_seconds

    def spark_conf(self) -> dict[str, str]:
        """The Spark configuration this runtime starts with (user conf wins)."""
        work = self.work_dir
        log4j = work / "log4j2.properties"
        from streamdb.runtime.spark import cds

        java_opts = [
            f"-Dlog4j.configurationFile=file:{log4j}",
            f"-Djava.io.tmpdir={work / 'tmp'}",
            # A JVM crash report goes into the data dir (not the run's work dir, which the next
            # start deletes), not into whatever directory the server was started from.
            f"-XX:ErrorFile={self.base_dir / 'hs_err_pid%p.log'}",
            *cds.java_options(),  # Spark's classes mapped from an archive: half the start time
            self.jit_and_user_options,
        ]
        conf: dict[str, str] = {
            "spark.sql.shuffle.partitions": str(self.shuffle_partitions),
            "spark.default.parallelism": str(self.shuffle_partitions),
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
            # PostgreSQL's time (without time zone) is Spark's TIME, which Spark 4.3 refuses in
            # a relation's schema unless this is on.
            "spark.sql.timeType.enabled": "true",
            "spark.sql.warehouse.dir": str(work / "spark-warehouse"),
            "spark.local.dir": str(work / "spark-local"),
            "spark.sql.catalogImplementation": "in-memory",
            "spark.driver.extraJavaOptions": " ".join(java_opts),
            "spark.executor.extraJavaOptions": self.jit_and_user_options,  # on a cluster, as in the driver
            "spark.executorEnv.MALLOC_ARENA_MAX": MALLOC_ARENA_MAX,  # as the driver's (_build_session)
            "spark.pyspark.python": sys.executable,
            # The driver's heap fills to what it is given (the rows between layers are its main
            # allocation); RocksDB state, code and G1 come on top. Nexmark q5 at 20M events:
            # 1,980 MiB for the server and the JVM with 768m, ~2,250 with Spark's 1g, at the same
            # rate (docs/benchmarks.md, "Memory"). A larger machine sets it in spark_conf.
            "spark.driver.memory": DRIVER_MEMORY,
            # A server lives long and plans many texts: Spark's SQL parser keeps an ANTLR DFA
            # cache that grows with every distinct text (144 MiB of a test server's live heap)
            # unless managed; flushed past 10% of the heap, it is learned again as needed.
            "spark.sql.parser.manageParserCaches": "true",
            "spark.sql.parser.parserDfaCacheFlushRatio": "10",
            # The status store (jobs, stages, tasks, SQL executions with their plans' text) is
            # kept for Spark's UI, which is off: every micro-batch adds to it up to these.
            "spark.ui.retainedJobs": "100",
            "spark.ui.retainedStages": "100",
            "spark.ui.retainedTasks": "2000",
            "spark.sql.ui.retainedExecutions": "50",
            "spark.sql.adaptive.enabled": "true",
            # Spark keeps the classes it generates (whole-stage code, projections, predicates) in
            # a cache of 100 by default. Every batch of every pipeline, and every recomputed view's
            # queries, need theirs again; with a few dozen views they no longer fit, and each batch
            # compiled its code again in Janino: 19% of the JVM's CPU with 32 views, 47% with 128
            # (docs/views.md, "Generated code").
            "spark.sql.codegen.cache.maxEntries": str(CODEGEN_CACHE_ENTRIES),
            # A task's result of up to 64 MiB goes to the driver in the task's status message, not
            # stored in the executor's block manager and fetched from there (over the network, the
            # loopback one in local mode): a backfill batch's collected Arrow is ~15 MB per task.
            # Nexmark q0 at 10M events: 1.10-1.15x the events/s for 15% less CPU (docs/views.md).
            # Spark caps it at spark.rpc.message.maxSize (128 MiB).
            "spark.task.maxDirectResultSize": str(64 << 20),
            # The view engine (runtime/spark/pipeline.py): its operators' jar, and their state in
            # RocksDB on the executors, checkpointed as changelogs (not whole snapshots) per batch.
            "spark.jars": str(jar_path()),
            "spark.sql.streaming.stateStore.providerClass":
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
            # One memory budget (memtables and block cache) shared by every state store instance of
            # the executor, so native memory stays flat as views and partitions are added.
            "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage": "true",
            # 256: with 128, Nexmark q5 at 5M events ran as fast with a JVM peak 158 MiB lower, but
            # at 20M (4x the state) it took 721 s, not 390, to catch up for 85 MiB less
            # (docs/benchmarks.md, "Memory").
            "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB": "256",
            # Spark reads every key before writing it to count the store's rows: a RocksDB read per
            # write, 19-26% of Nexmark q4 at 3M events. The operators count them (CountingKeyState).
            "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false",
            "spark.sql.streaming.noDataMicroBatches.enabled": "false",
            # Checkpoint and state files without a forked chmod or readlink per file (pyspark has
            # no Hadoop native library): 100-250 ms of every micro-batch (CheckpointFiles.java).
            "spark.sql.streaming.checkpointFileManagerClass": "streamdb.spark.CheckpointFiles",
        }
        if _is_loopback_master(self.master):
            conf["spark.driver.bindAddress"] = "127.0.0.1"
            conf["spark.driver.host"] = "127.0.0.1"
        conf.update(self.conf)
        return conf

    def start_background(self) -> None:
        """Start the SparkSession in a daemon thread; returns immediately."""
        with self._lock:
            if self._status in (STARTING, READY):
                return
            self._status = STARTING
            self._error = None
            self._ready.clear()
            self._thread = threading.Thread(target=self._start, name="spark-start", daemon=True)
            self._thread.start()

    def _start(self) -> None:
        t0 = time.monotonic()
        try:
            # Right after a kill -9 the previous run's JVM may still be exiting, and a new gateway
            # has been seen to exit at once then (JAVA_GATEWAY_EXITED); a later try succeeds.
            for attempt in range(3):
                try:
                    spark = self._build_session()
                    break
                except Exception as exc:  # noqa: BLE001
                    if "JAVA_GATEWAY_EXITED" not in str(exc) or attempt == 2:
                        raise
                    log.warning("Spark gateway exited at start; trying again")
                    time.sleep(2.0)
        except BaseException as exc:  # noqa: BLE001 - report any failure through status
            msg = _first_line(str(exc)) or type(exc).__name__
            self.gateway_launched.set()
            with self._lock:
                stopped = self._status != STARTING  # stop() ended the JVM under the start
                if not stopped:
                    self._status = FAILED
                    self._error = f"{type(exc).__name__}: {msg}"
            if not stopped:
                log.error("Spark failed to start: %s", msg)
            self._ready.set()
            return
        with self._lock:
            if self._status != STARTING:  # stop() was called while starting
                stop_now = True
            else:
                stop_now = False
                self._spark = spark
                self._start_seconds = time.monotonic() - t0
                self._status = READY
        if stop_now:
            proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
            _stop_session(spark)
            if proc is not None:
                _wait_jvm_exit(proc)
        else:
            gc.freeze()  # py4j's and pyspark's objects of the start, as server.py does for its own
            log.info("Spark ready in %.1fs (master %s)", self._start_seconds, self.master)
        self._ready.set()

    def _reap_previous_runs(self) -> None:
        """Stop a JVM left behind by a run that was killed, and remove old run directories."""
        pid_file = self.base_dir / "jvm.pid"
        try:
            old_pid = int(pid_file.read_text().strip())
        except (OSError, ValueError):
            old_pid = 0
        if old_pid > 0:
            try:
                cmdline = Path(f"/proc/{old_pid}/cmdline").read_bytes()
            except OSError:
                cmdline = b""
            if str(self.base_dir).encode() in cmdline:
                log.warning("stopping Spark JVM %d left by a previous run", old_pid)
                try:
                    os.kill(old_pid, signal.SIGKILL)
                except OSError:
                    pass
        for old in self.base_dir.glob("run-*"):
            if old != self.work_dir:
                shutil.rmtree(old, ignore_errors=True)

    def _record_jvm(self, spark: SparkSession) -> None:
        proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
        if proc is not None:
            try:
                (self.base_dir / "jvm.pid").write_text(str(proc.pid))
            except OSError:
                pass

    def _build_session(self) -> SparkSession:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._reap_previous_runs()
        for sub in ("spark-warehouse", "spark-local", "tmp"):
            (self.work_dir / sub).mkdir(parents=True, exist_ok=True)
        (self.work_dir / "log4j2.properties").write_text(_LOG4J2)
        if _is_loopback_master(self.master):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        # The JVM inherits this (executors on a cluster get it from spark.executorEnv): glibc's
        # default of 8 malloc arenas per core, each grown by the state stores' RocksDB threads,
        # held ~150 MiB more at Nexmark q5's peak (5M events: 1,825 -> 1,677 MiB).
        os.environ.setdefault("MALLOC_ARENA_MAX", MALLOC_ARENA_MAX)
        logging.getLogger("py4j").setLevel(logging.ERROR)
        logging.getLogger("py4j.clientserver").setLevel(logging.ERROR)
        logging.getLogger("py4j.java_gateway").setLevel(logging.ERROR)

        from pyspark import SparkConf, SparkContext
        from pyspark.sql import SparkSession

        conf = SparkConf().setMaster(self.master).setAppName(self.app_name).setAll(list(self.spark_conf().items()))
        try:
            # Launch the JVM first and alone: a launch while the embedded engine's threads start
            # has been seen to make the JVM exit at once (JAVA_GATEWAY_EXITED).
            with _spawn_without_preexec(self.nice):
                SparkContext._ensure_initialized(conf=conf)
        finally:
            self.gateway_launched.set()
        builder = SparkSession.builder.master(self.master).appName(self.app_name)
        for key, value in self.spark_conf().items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        self._record_jvm(spark)
        spark.sparkContext.setLogLevel("WARN")
        _quiet_pyspark_loggers()
        # Warm up: the first query pays for codegen/classloading; do it now, not on a client.
        warm = spark.newSession()
        warm.createDataFrame(pa.table({"k": pa.array([1, 2, 1], pa.int64())})).createOrReplaceTempView("w")
        warm.sql("SELECT k, count(*) AS n FROM w GROUP BY k").toArrow()
        return spark

    def wait_ready(self, timeout: float) -> None:
        """Block until Spark is ready; raise ObjectNotInPrerequisiteState (55000) otherwise."""
        status = self._status
        if status == READY:
            return
        if status == STOPPED:
            raise ObjectNotInPrerequisiteState("the Spark runtime is not running")
        if status == STARTING:
            self._ready.wait(timeout)
            status = self._status
        if status == READY:
            return
        if status == FAILED:
            raise ObjectNotInPrerequisiteState(
                f"the Spark runtime failed to start: {self._error}",
                hint="Check the server log and the Spark master URL.",
            )
        if status == STARTING:
            raise ObjectNotInPrerequisiteState(
                f"the Spark runtime is still starting (not ready after {timeout:g}s)",
                hint="Retry in a few seconds.",
            )
        raise ObjectNotInPrerequisiteState("the Spark runtime is not running")

    def revive_if_dead(self) -> bool:
        """If the Spark JVM has exited under a ready session (killed, or out of memory: Spark's
        handler ends the JVM on an OutOfMemoryError), forget that session and start a new JVM in
        the background. Returns whether it did; the pipelines restart once it is ready."""
        with self._lock:
            spark = self._spark
            if self._status != READY or spark is None:
                return False
            proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
            if proc is None or proc.poll() is None:
                return False
            self._spark = None
            self._status = STOPPED
            self.jvm_restarts += 1
            self.last_jvm_exit = f"the Spark JVM exited with code {proc.returncode}"
        log.error("%s (see the log above: out of memory?); starting a new one", self.last_jvm_exit)
        _forget_dead_session()
        self.start_background()
        return True

    def stop(self) -> None:
        """Stop the SparkSession. Idempotent; bounded (does not hang for more than ~15 s)."""
        with self._lock:
            spark = self._spark
            self._spark = None
            if self._status == STOPPED:
                return
            starting = self._status == STARTING
            self._status = STOPPED
            self._error = None
        self._ready.set()  # wake waiters; they see 'stopped'
        if starting:
            self._end_jvm_being_started()
        if spark is not None:
            proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
            _stop_session(spark)
            if proc is not None:
                _wait_jvm_exit(proc)

    def _end_jvm_being_started(self) -> None:
        """A stop during the start: the JVM runs in its own process group, so it would outlive
        the server and still write its scratch directories into the data directory (seen: a
        copy or removal of the directory racing with it). End it once launched, and let the
        start thread, which then fails (or stops a session it just finished), return."""
        self.gateway_launched.wait(_STOP_TIMEOUT_S)
        from pyspark import SparkContext

        proc = getattr(SparkContext._gateway, "proc", None)
        if proc is not None:
            _wait_jvm_exit(proc)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(_STOP_TIMEOUT_S)

    def __enter__(self) -> SparkRuntime:
        self.start_background()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ queries

    def session(self) -> SparkSession:
        """The root SparkSession (waits up to ready_timeout). For other runtime modules."""
        self.wait_ready(self.ready_timeout)
        spark = self._spark
        if spark is None:
            raise ObjectNotInPrerequisiteState("the Spark runtime is not running")
        return spark

    def max_input_bytes(self) -> int:
        """The most input an ad hoc query ships to Spark: its inputs become DataFrames through the
        driver's heap (`spark.driver.memory`, 768m by default), so a quarter of it. A 9.2M-row view
        (about 1 GB of Arrow) ran the heap out; above this the embedded engine answers."""
        if self._max_input_bytes is None:
            self._max_input_bytes = _size_bytes(self.spark_conf().get("spark.driver.memory", DRIVER_MEMORY)) // 4
        return self._max_input_bytes

    def run_query(self, sql: str, tables: dict[str, pa.Table]) -> pa.Table:
        """Run ``sql`` with each Arrow table registered as a temp view; return an Arrow table.

        Raises StreamDBError (translated from Spark's error) on failure.
        """
        root = self.session()
        t0 = time.monotonic()
        with self._lock:
            self._active += 1
        ok = False
        try:
            result = self._run(root, sql, tables)
            ok = True
            return result
        except StreamDBError:
            raise
        except Exception as exc:  # noqa: BLE001 - everything becomes a StreamDBError
            raise translate_spark_error(exc) from None
        finally:
            elapsed = time.monotonic() - t0
            with self._lock:
                self._active -= 1
                self._queries_run += 1
                if not ok:
                    self._queries_failed += 1
                self._query_seconds += elapsed
                self._last_query_seconds = elapsed

    def run_queries(self, sqls: list[str], tables: dict[str, pa.Table],
                    parallelism: int = 4) -> list[pa.Table | StreamDBError]:
        """Run several queries over the same inputs: each input becomes a DataFrame once (the
        main cost of a small query), then the queries run as concurrent Spark jobs. Each result
        is an Arrow table or the StreamDBError its query raised."""
        if not sqls:
            return []
        root = self.session()
        t0 = time.monotonic()
        with self._lock:
            self._active += 1
        try:
            spark = root.newSession()
            from streamdb.runtime.spark import udfs

            udfs.register_used(spark, sqls)
            if sum(t.num_rows for t in tables.values()) <= SMALL_INPUT_ROWS:
                # Small inputs (an epoch's changes): Spark's fixed costs dominate. One shuffle
                # partition, no adaptive re-planning and no code generation measured 583 -> 386 ms
                # for 16 views over 300 rows in one job (local[2]).
                for key, value in SMALL_INPUT_CONF.items():
                    spark.conf.set(key, value)
            for name, table in tables.items():
                if not _IDENT.match(name):
                    raise InternalError(f"invalid temp view name for Spark: {name!r}")
                spark.createDataFrame(_to_spark_arrow(table), schema=_spark_schema(table)).createOrReplaceTempView(
                    name)

            def one(sql: str) -> pa.Table | StreamDBError:
                try:
                    return _from_spark_arrow(spark.sql(sql).toArrow())
                except StreamDBError as exc:
                    return exc
                except Exception as exc:  # noqa: BLE001 - everything becomes a StreamDBError
                    return translate_spark_error(exc)

            if len(sqls) == 1:
                results = [one(sqls[0])]
            else:
                with ThreadPoolExecutor(max_workers=min(parallelism, len(sqls))) as pool:
                    results = list(pool.map(one, sqls))
        except StreamDBError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise translate_spark_error(exc) from None
        finally:
            elapsed = time.monotonic() - t0
            with self._lock:
                self._active -= 1
                self._queries_run += len(sqls)
                self._query_seconds += elapsed
                self._last_query_seconds = elapsed
        with self._lock:
            self._queries_failed += sum(isinstance(r, StreamDBError) for r in results)
        return results

    def _run(self, root: SparkSession, sql: str, tables: dict[str, pa.Table]) -> pa.Table:
        spark = root.newSession()
        from streamdb.runtime.spark import udfs

        udfs.register_used(spark, [sql])
        for name, table in tables.items():
            if not _IDENT.match(name):
                raise InternalError(f"invalid temp view name for Spark: {name!r}")
            spark.createDataFrame(_to_spark_arrow(table), schema=_spark_schema(table)).createOrReplaceTempView(
                name
            )
        return _from_spark_arrow(spark.sql(sql).toArrow())

    # ------------------------------------------------------------------ observability

    @property
    def job_count(self) -> int:
        """Number of run_query calls that finished (successfully or not)."""
        return self._queries_run

    @property
    def failure_count(self) -> int:
        return self._queries_failed

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "status": self._status,
                "master": self.master,
                "start_seconds": self._start_seconds,
                "queries_run": self._queries_run,
                "queries_failed": self._queries_failed,
                "queries_active": self._active,
                "query_seconds_total": round(self._query_seconds, 6),
                "last_query_seconds": self._last_query_seconds,
                "error": self._error,
            }


def _spark_schema(table: pa.Table) -> Any:
    """An explicit Spark schema: naive timestamps become TimestampNTZ, intervals day-time."""
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructField, StructType

    fields = []
    for field in table.schema:
        t = field.type
        if pa.types.is_interval(t):
            t = pa.duration("us")
        try:
            spark_type = from_arrow_type(t, prefer_timestamp_ntz=True)
        except Exception as exc:  # noqa: BLE001
            raise FeatureNotSupported(
                f"column \"{field.name}\": Arrow type {field.type} is not supported by Spark"
            ) from exc
        fields.append(StructField(field.name, spark_type, nullable=True))
    return StructType(fields)


def _size_bytes(text: str) -> int:
    """A JVM memory size as Spark spells it ("1g", "512m", "1024k", "2t" or bytes)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower().removesuffix("b")
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def _quiet_pyspark_loggers() -> None:
    """pyspark logs every failed query (with a Java stack trace) as JSON to stderr; we report
    errors to the client instead."""
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # pragma: no cover - older pyspark
        return
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL + 10)


@contextlib.contextmanager
def _spawn_without_preexec(nice: int = 0) -> Iterator[None]:
    """pyspark starts the JVM with a Python preexec_fn (to ignore SIGINT), which runs Python code
    in the forked child: in a process full of native threads (RocksDB, DuckDB: a JVM started again
    after one died) that child can die before exec. Start it in its own process group instead
    (terminal Ctrl-C does not reach it either), which the C fork/exec path does safely.

    With ``nice`` > 0 the JVM runs under ``nice -n``, so every one of its threads has that
    niceness from the start (niceness is per thread on Linux; a new thread takes its creator's)."""
    import subprocess

    import pyspark.java_gateway as gateway

    original = gateway.Popen
    nice_command = shutil.which("nice") if nice > 0 else None

    def popen(command: list[str], **kwargs: Any) -> Any:
        if kwargs.pop("preexec_fn", None) is not None:
            kwargs["process_group"] = 0
        if nice_command is not None:
            command = [nice_command, "-n", str(nice), *command]  # nice execs it: the same pid
        return subprocess.Popen(command, **kwargs)

    gateway.Popen = popen  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        gateway.Popen = original  # type: ignore[misc]


def _forget_dead_session() -> None:
    """pyspark keeps the active SparkContext and session in class attributes, and getOrCreate()
    would hand back the dead one: clear them (stopping it is impossible: its JVM is gone)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    with SparkContext._lock:
        SparkContext._active_spark_context = None
        SparkContext._gateway = None
        SparkContext._jvm = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None


def _wait_jvm_exit(proc: Any) -> None:
    """Let the gateway JVM finish its shutdown hooks (they delete Spark's scratch directories,
    state store working copies included, under the data directory) before the server exits: a
    copy of a stopped server's data directory must not race with them."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()  # the py4j launcher exits at EOF on its stdin
        proc.wait(timeout=_STOP_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - shutting down: a JVM that will not exit is killed
        log.warning("Spark JVM did not exit within %.0fs; killing it", _STOP_TIMEOUT_S)
        with contextlib.suppress(Exception):
            proc.kill()


def _stop_session(spark: SparkSession) -> None:
    done = threading.Event()

    def _do() -> None:
        try:
            spark.stop()
        except Exception as exc:  # noqa: BLE001
            log.warning("error while stopping Spark: %s", _first_line(str(exc)))
        finally:
            done.set()

    t = threading.Thread(target=_do, name="spark-stop", daemon=True)
    t.start()
    if not done.wait(_STOP_TIMEOUT_S):
        log.warning("Spark did not stop within %.0fs; abandoning it", _STOP_TIMEOUT_S)
