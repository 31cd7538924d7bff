"""Views compiled into one Spark Structured Streaming query: the pipeline.

A pipeline serves every view with the same number of stateful layers (views of depth 0 are
linear: filters and projections; depth 1 has one join, aggregate or top-N on each path; ...).
Its streaming query is

    log source -> [route, encode] -> layer 1 -> [decode, route, encode] -> layer 2 ... -> [decode]
        -> foreachBatch (the sink: the views' changes go to the server, which commits them)

Each layer is ONE transformWithState operator (streamdb.spark.Layers in the jar) holding the
state of every operator instance of the layer, keyed by (instance, key). The stateless parts of
every view (filters, projections, join keys, aggregate arguments) are Spark SQL expressions
evaluated in the projections between layers: every change is routed to the instances it feeds
(`explode` of the arms it passes), so the input is scanned once for all views. Because the
stateful operators and their state schema never change, a view can be added or dropped by
restarting the query with new projections: the other views' state stays where it is, in Spark's
state store (RocksDB, on the executors), and the new view's history comes through the source as
its backfill (log_source.py).

Records between layers carry rows as JSON text (`to_json` / `from_json`, exact for every type
used here), keys as the JSON of their values, and aggregate arguments as text; see docs/views.md.
Timestamps and dates in rows and keys are written as integers (microseconds, days since the
epoch): formatting and parsing them as ISO text took most of a layer's encoding time (Nexmark q4).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp

from streamdb import types as T
from streamdb import udf
from streamdb.catalog import RelationDef
from streamdb.errors import FeatureNotSupported, InternalError, StreamDBError
from streamdb.planner import dataflow as D
from streamdb.planner.query import INTEGER_NAMES, RAISE_FUNCTION, spark_semantics
from streamdb.runtime.spark import log_source
from streamdb.runtime.spark.log_source import BASE_FIELDS, SEED_RELATION, column_name
from streamdb.runtime.spark.session import SPARK_ROW_ERROR
from streamdb.storage.base import LogReaderSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("streamdb.pipeline")

JSON_OPTIONS = ("map('ignoreNullFields', 'false', 'timestampFormat', 'yyyy-MM-dd HH:mm:ss.SSSSSSXXX', "
                "'timestampNTZFormat', 'yyyy-MM-dd HH:mm:ss.SSSSSS', 'dateFormat', 'yyyy-MM-dd')")
RECORD_FIELDS = ("op", "side", "k", "row", "row2", "a", "w")
RECORD_TYPES = {"op": "INT", "side": "INT", "k": "STRING", "row": "STRING", "row2": "STRING",
                "a": "ARRAY<STRING>", "w": "BIGINT"}
MAX_OPS_PER_VIEW = 64
_WHOLE_RECORDS_FROM = 16  # arms at a boundary from which each arm builds its record whole (_boundary)
_SLOT = re.compile(r"o(\d+)_\d+")  # a sink column shared by type (_sink_columns)
JVM_SOURCE = "streamdb.spark.LogProvider"


@dataclass
class ViewFlow:
    """One view as the pipeline sees it."""

    view_id: int
    dataflow: D.Dataflow
    ops_base: int  # this view's operator instances are ops_base + 0 .. MAX_OPS_PER_VIEW - 1
    joins: dict[int, tuple[int, ...]]  # relation -> offsets from which it takes live changes
    # relation -> offsets no batch crosses until all are reached (a push query's start; only in a
    # pipeline of its own, where it holds up no other view): LogStream.holding.
    hold: dict[int, tuple[int, ...]] | None = None


@dataclass
class SinkView:
    """How the sink reads one view's changes out of a batch."""

    view_id: int
    columns: tuple[str, ...]  # the wide output columns holding its values, in view column order
    recompute: D.Recompute | None = None
    input_columns: tuple[str, ...] = ()  # Recompute: its input rows' columns
    input_types: tuple[str, ...] = ()  # and their Spark types
    global_: bool = False


@dataclass
class CompiledPipeline:
    frame: Any  # the streaming DataFrame feeding the sink
    sink: dict[int, SinkView]
    specs: list[str]
    source_plan: dict[str, Any]
    state_rows: Any  # a LongAccumulator (JVM): entries the layers added to their state stores minus removed
    clock_counts: Any = None  # the timers its temporal filters set and removed (ClockCounts.java); None without them


# ---- rendering expressions --------------------------------------------------------------


FIELD = "\x00"  # in a column map: struct FIELD field


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def select(frame: DataFrame, items: Sequence[str | tuple[str, str]]) -> DataFrame:
    """`frame.select` of SQL expressions, each "*" or (name, expression), in one call into the
    JVM (Layers.select). Building them as Columns took ~6 py4j round trips each (the function's
    lookup, the call, the alias, the list's conversion): ~2,000 per start of a 12-view pipeline,
    ~300 of its ~380 ms."""
    from pyspark.sql import DataFrame

    exprs = [i if isinstance(i, str) else f"{i[1]} AS {quote(i[0])}" for i in items]
    jvm: Any = frame.sparkSession._jvm  # type: ignore[attr-defined]
    return DataFrame(jvm.streamdb.spark.Layers.select(frame._jdf, json.dumps(exprs)), frame.sparkSession)


def render(e: exp.Expression, names: dict[str, str], carry_errors: bool = True) -> str:
    """Spark SQL for `e` (over a view's internal column names) with each column renamed.
    `carry_errors`: Python functions return their errors with their values (see
    `_carried_udf_calls`), for plans whose rows' errors are routed to the views' errors."""
    def fix(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column):
            target = names.get(node.name)
            if target is None:
                raise FeatureNotSupported(f"internal: column {node.name} is not available here")
            if FIELD in target:  # a field of a struct column
                struct, name = target.split(FIELD, 1)
                c = exp.column(name, table=struct, quoted=True)
            else:
                c = exp.column(target, quoted=True)
            c.type = node.type
            return c
        return node

    copied = e.copy()
    if carry_errors:
        copied = _carried_udf_calls(copied)
    return spark_semantics(copied.transform(fix)).sql(dialect="spark")


def _udf_calls(e: exp.Expression) -> list[exp.Anonymous]:
    """Calls of Python functions (streamdb/udf.py) in `e` that are always evaluated, innermost first."""
    return [node for node in e.walk() if isinstance(node, exp.Anonymous) and str(node.this).lower().startswith(udf.PREFIX)
            and _always_evaluated(node)][::-1]


def _carried_udf_calls(e: exp.Expression) -> exp.Expression:
    """A Python function always evaluated calls its form that returns the error with the value
    (`f_e(x).v`; `_failures` routes the row to the view's errors on `f_e(x).e`). One under a CASE
    or a COALESCE keeps the form that raises: its error fails the pipeline, loudly."""
    for call in _udf_calls(e):
        carried = exp.Anonymous(this=f"{call.this}_e", expressions=[a.copy() for a in call.expressions])
        dot = exp.Dot(this=carried, expression=exp.to_identifier("v"))
        if call is e:
            return dot
        call.replace(dot)
    return e


def substitute(e: exp.Expression, defs: dict[str, exp.Expression]) -> exp.Expression:
    """`e` with each column defined in `defs` replaced by its definition."""
    def fix(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.name in defs:
            d = defs[node.name]
            out = d.copy() if isinstance(d, (exp.Column, exp.Literal)) else exp.Paren(this=d.copy())
            if out.type is None or out.type.this == exp.DataType.Type.UNKNOWN:
                out.type = node.type  # Spark SQL with Postgres semantics needs it (integer division)
            return out
        return node

    return e.copy().transform(fix)


# ---- paths through stateless nodes --------------------------------------------------------


@dataclass
class _Path:
    """Rows of one frontier (a Scan, a stateful node, or a view's seed) through filters and
    projections: they pass if `cond` holds, then have the values `exprs` (over the frontier's columns)."""

    frontier: Any  # D.Node or ("seed", view id)
    cond: list[exp.Expression]
    exprs: list[exp.Expression]


def _paths(node: D.Node) -> list[_Path]:
    if isinstance(node, (D.Scan, *D.STATEFUL)):
        return [_Path(node, [], [exp.column(c) for c in node.columns])]
    if isinstance(node, D.Filter):
        out = []
        for p in _paths(node.input):
            defs = dict(zip(node.input.columns, p.exprs, strict=True))
            out.append(_Path(p.frontier, [*p.cond, substitute(node.predicate, defs)], p.exprs))
        return out
    if isinstance(node, D.Map):
        out = []
        for p in _paths(node.input):
            defs = dict(zip(node.input.columns, p.exprs, strict=True))
            out.append(_Path(p.frontier, p.cond, [substitute(e, defs) for e in node.exprs]))
        return out
    if isinstance(node, D.UnionAll):
        return [p for b in node.branches for p in _paths(b)]
    raise FeatureNotSupported(f"internal: no path through {type(node).__name__}")


# ---- the compiler --------------------------------------------------------------------------


@dataclass
class _Op:
    id: int
    kind: str  # join, reduce, topn, arrange, pass
    spec: dict[str, Any] = field(default_factory=dict)


SEED = "seed"
EXPIRE_SIDE = 1  # a Reduce's records that drop a group's state (Operators.EXPIRE_SIDE)


@dataclass
class _Arm:
    """One way rows reach one consumer at a boundary: which rows (`cond`), the values to compute
    (`values`, Spark SQL over the boundary's columns), then the record or sink fields."""

    view: ViewFlow
    consumer: Any  # "sink", a stateful node, or ("pass", op id)
    side: int
    cond: str
    values: dict[str, str] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    fields: dict[str, str] = field(default_factory=dict)
    child: D.Node | None = None
    seed: bool = False


class _Compiler:
    def __init__(self, spark: SparkSession, relations: dict[int, RelationDef], views: list[ViewFlow],
                 depth: int, log_spec: LogReaderSpec, tick_ms: int = 1000, tick_key: str = "",
                 clock_timers: str = "{}") -> None:
        self.spark = spark
        self.tick_ms = tick_ms
        self.tick_key = tick_key
        self.clock_timers = clock_timers
        self.relations = relations
        self.views = views
        self.depth = depth
        self.log_spec = log_spec
        # A temporal filter's operator reads the micro-batch's time and sets timers on it: every
        # layer of the pipeline then runs in Spark's processing-time mode.
        self.clock = uses_clock(views)
        self.layer_ops: list[dict[int, _Op]] = [{} for _ in range(depth + 2)]
        self.sink: dict[int, SinkView] = {}
        # What the records of a node's rows hold, for decoding them at a later boundary:
        # (node, side) -> [(column, Spark type)] of the rows a consumer took in.
        self.schemas: dict[Any, Any] = {}
        self.op_of: dict[Any, int] = {}
        self.pass_of: dict[tuple[Any, int], int] = {}  # (frontier, layer) -> PASS op carrying it there
        self.pass_frontier: dict[int, Any] = {}
        self.view_of_op: dict[int, ViewFlow] = {}
        self._next_of: dict[int, int] = {}  # view -> its next free operator slot
        # (view, layer) -> the PASS op carrying the view's error rows into that layer.
        self.err_pass: dict[tuple[int, int], int] = {}
        self._slot_types: dict[str, int] = {}  # Spark type of a sink column -> its number in slot names

    # -- the source --

    def source_plan(self) -> dict[str, Any]:
        from pyspark.sql.pandas.types import from_arrow_schema

        fields = [pa.field(n, t) for n, t in BASE_FIELDS]
        rels: dict[str, Any] = {}
        needed = sorted({rid for v in self.views for rid in v.dataflow.relations()})
        for rid in needed:
            rel = self.relations[rid]
            cols = []
            for i, c in enumerate(rel.columns):
                arrow = c.type.arrow()
                try:
                    from_arrow_schema(pa.schema([pa.field("x", arrow)]))
                except Exception as e:  # noqa: BLE001 - a type Spark cannot take
                    raise FeatureNotSupported(f'column "{c.name}" of {rel.name} has a type Spark cannot read '
                                              f"({c.type.name})") from e
                fields.append(pa.field(column_name(rid, i), arrow))
                cols.append([c.name, column_name(rid, i)])
            rels[str(rid)] = {"partitions": rel.partitions, "columns": cols}
        spark_schema = from_arrow_schema(pa.schema(fields))
        views = {str(v.view_id): {str(r): list(j) for r, j in v.joins.items()} for v in self.views}
        return {"log": {"kind": self.log_spec.kind, "path": self.log_spec.path,
                        "kafka_bootstrap": self.log_spec.kafka_bootstrap},
                "relations": rels, "views": views, "spark_schema": spark_schema.json(),
                # A view's generation: its first operator's id, new at each rebuild (LogStream.java).
                "gens": {str(v.view_id): v.ops_base for v in self.views},
                "hold": {str(rid): list(offsets) for v in self.views if v.hold
                         for rid, offsets in v.hold.items() if rid in self.relations},
                "max_rows": log_source.MAX_ROWS,
                # temporal filters: a batch at a tick, new input or not, when a timer may be due
                # (LogStream.tickOf, Ticks.java)
                "tick_ms": self.tick_ms if self.clock else 0, "tick_key": self.tick_key}

    # -- which operator instances there are --

    def plan_ops(self) -> None:
        for v in self.views:
            stateful = v.dataflow.stateful()
            for i, n in enumerate(stateful):
                self.op_of[n] = v.ops_base + i
                self.view_of_op[v.ops_base + i] = v
            self._next_of[v.view_id] = len(stateful)
            self._view = v
            for _consumer, layer, child in self._consumers_of(v):
                if child is None:
                    self._carrier((SEED, v.view_id), layer - 1)
                    continue
                for p in _paths(child):
                    self._carrier(p.frontier, layer - 1)

    def _consumers_of(self, v: ViewFlow) -> list[tuple[Any, int, D.Node | None]]:
        """(consumer, its layer, the subtree it reads; None for a global node's seed)."""
        out: list[tuple[Any, int, D.Node | None]] = [("sink", self.depth + 1, v.dataflow.root)]
        for n in v.dataflow.stateful():
            for child in n.inputs():
                out.append((n, D.level(n), child))
            if _needs_seed(n):
                out.append((n, D.level(n), None))
        return out

    def _carrier(self, frontier: Any, boundary: int) -> int | None:
        """The op whose records carry `frontier`'s rows at `boundary` (None: the source itself),
        adding PASS ops to lift them there."""
        lvl = D.level(frontier) if isinstance(frontier, D.Node) else 0
        carrier = self.op_of.get(frontier) if lvl > 0 else None
        for layer in range(lvl + 1, boundary + 1):
            key = (frontier, layer)
            if key not in self.pass_of:
                pid = self._new_op(self._view)
                self.pass_of[key] = pid
                self.pass_frontier[pid] = frontier
                self.view_of_op[pid] = self._view
                self.layer_ops[layer][pid] = _Op(pid, "pass")
            carrier = self.pass_of[key]
        return carrier

    def _new_op(self, v: ViewFlow) -> int:
        n = self._next_of[v.view_id]
        if n >= MAX_OPS_PER_VIEW:
            raise FeatureNotSupported("a view with this many stateful operators")
        self._next_of[v.view_id] = n + 1
        return v.ops_base + n

    def _error_carrier(self, v: ViewFlow, layer: int) -> int:
        """The PASS op taking the view's error rows into `layer` (made on first use)."""
        key = (v.view_id, layer)
        if key not in self.err_pass:
            pid = self._new_op(v)
            self.err_pass[key] = pid
            self.view_of_op[pid] = v
            self.layer_ops[layer][pid] = _Op(pid, "pass")
        return self.err_pass[key]

    def _error_arm(self, v: ViewFlow, b: int, cond: str, text: str, w: str) -> _Arm:
        """Rows that would raise an error in the view's expressions: they become the view's errors
        (with their weights, so a retraction takes an error back), not a failure of the pipeline.
        `text`: Spark SQL giving 'SQLSTATE:message' (or the carried error)."""
        arm = _Arm(v, ("error", v.view_id), 0, cond)
        if b == self.depth:
            arm.fields.update({"__view": str(v.view_id), "__w": w, "__err": text})
        else:
            arm.fields.update({"op": str(self._error_carrier(v, b + 1)), "side": "0", "k": text, "row": "NULL",
                               "row2": "NULL", "a": "NULL", "w": w})
        return arm

    def _carrier_at(self, frontier: Any, boundary: int) -> int | None:
        lvl = D.level(frontier) if isinstance(frontier, D.Node) else 0
        if boundary == lvl:
            return self.op_of.get(frontier) if lvl > 0 else None
        return self.pass_of[(frontier, boundary)]

    # -- building --

    def build(self) -> CompiledPipeline:
        from pyspark.sql import DataFrame

        self.plan_ops()
        plan = self.source_plan()
        # The RocksDB log is read in the JVM (jvm/.../LogProvider.java: no Python process per source
        # or task); the Kafka log through pyspark's Python data source (log_source.py).
        source = JVM_SOURCE if self.log_spec.kind == "rocksdb" else log_source.NAME
        frame = self.spark.readStream.format(source).option("plan", json.dumps(plan)).load()
        specs = []
        # Counted by the operators (CountingKeyState.java), not by Spark's state store, which reads
        # every key before writing it to count (stateStore.rocksdb.trackTotalNumberOfRows, off).
        state_rows = self.spark.sparkContext._jsc.sc().longAccumulator(f"state rows, depth {self.depth}")
        clock_counts = None
        run = time.time_ns() // 1_000_000  # names the timers this run of the pipeline sets (ClockCounts)
        if self.clock:
            jvm_: Any = self.spark._jvm  # type: ignore[attr-defined]
            clock_counts = jvm_.streamdb.spark.ClockCounts()
            self.spark.sparkContext._jsc.sc().register(clock_counts)
            jvm_.streamdb.spark.Ticks.register(self.tick_key, clock_counts, self.clock_timers)
        for b in range(self.depth + 1):
            frame = self._boundary(frame, b)
            if b == self.depth:
                break
            for node, op in self.op_of.items():
                if (isinstance(node, D.Join) and node.residual is not None and D.level(node) == b + 1
                        and "residual" not in self.layer_ops[b + 1][op].spec):
                    raise FeatureNotSupported("internal: a join's comparisons were not compiled")
            spec = json.dumps({"ops": [{"id": o.id, "kind": o.kind, **o.spec}
                                       for o in self.layer_ops[b + 1].values()], "run": run})
            specs.append(spec)
            jvm: Any = self.spark._jvm  # type: ignore[attr-defined]
            frame = DataFrame(jvm.streamdb.spark.Layers.layer(frame._jdf, spec, state_rows, clock_counts), self.spark)
        return CompiledPipeline(frame, self.sink, specs, plan, state_rows, clock_counts)

    def _boundary(self, frame: DataFrame, b: int) -> DataFrame:
        """The projection after layer b (0: after the source): decode what comes out, route each
        row to the arms it feeds, encode the next layer's records (or the sink's columns)."""
        self._errors: list[_Arm] = []
        self._convert: dict[str, str] = {}  # fields of decoded structs back from their JSON form
        # Decoded aggregate results that can be out of their type's range ({column: (condition,
        # 'SQLSTATE:message')}): a sum past what a numeric or bigint holds is the view's error.
        self._decode_failures: dict[str, tuple[str, str]] = {}
        decode = _Decoded()
        arms: list[_Arm] = []
        for v in self.views:
            self._view = v
            for consumer, layer, child in self._consumers_of(v):
                if layer != b + 1:
                    continue
                if child is None:
                    arms.append(self._seed_arm(v, consumer, b))
                    continue
                if consumer == "sink" and isinstance(child, D.Recompute):
                    arms.append(self._recompute_sink_arm(v, child, b))
                    continue
                for p in _paths(child):
                    arms.append(self._path_arm(v, consumer, list(consumer.inputs()).index(child)
                                               if consumer != "sink" else 0, child, p, b, decode))
            for (frontier, layer), pid in self.pass_of.items():
                if layer == b + 1 and self.view_of_op[pid] is v:
                    arms.append(self._pass_arm(v, pid, frontier, b, decode))
            carried = self.err_pass.get((v.view_id, b))
            if carried is not None:  # errors from below go on up
                arms.append(self._error_arm(v, b, f"op = {carried}", "''", "w"))
                arms[-1].fields["__err" if b == self.depth else "k"] = "k"
        arms.extend(self._errors)
        self._errors = []
        if not arms:
            raise FeatureNotSupported("internal: a pipeline boundary with nothing to route")
        frame = select(frame, ["*", *decode.columns().items()])
        if self._convert:
            frame = select(frame, ["*", *self._convert.items()])
        self._probe(frame, arms)
        for arm in arms:
            self._encode(arm, b)
        whole = len(arms) > _WHOLE_RECORDS_FROM  # records built whole, as structs (below)
        if b == self.depth:
            names = ["__view", "__w", "__side", "__k", "__row", "__err",
                     *dict.fromkeys(c for s in self.sink.values() for c in s.columns)]
            types: dict[str, str] = {"__view": "INT", "__w": "BIGINT", "__side": "INT", "__k": "STRING",
                                     "__row": "STRING", "__err": "STRING"}
            slot_type = {n: t for t, n in self._slot_types.items()}
            for name in names[6:]:
                slot = _SLOT.fullmatch(name)
                if slot and slot_type[int(slot[1])] != "void" and whole:
                    types[name] = slot_type[int(slot[1])]  # a struct field's type; NULL AS x has none
        else:
            names, types = list(RECORD_FIELDS), RECORD_TYPES
        # With many arms (views), each arm a row takes makes its record whole, as a struct in an
        # array of the row's records (the arms it does not take are NULLs, filtered out before
        # the explode): picking each field after the explode by `CASE arm WHEN 0 .. WHEN n` costs
        # O(arms) per field and record, 60% of the JVM with 100 views. With few arms that CASE
        # is cheap, and building, filtering and exploding structs costs more than it saves
        # (Nexmark q5, 10 arms: -24%), so the records carry the arm's number only. Fields without
        # one type for every arm (UNION ALL branches a view's sink columns widen) are always
        # picked by the arm's number.
        typed = [n for n in names if n in types] if whole else []
        untyped = [n for n in names if n not in typed]

        def record(i: int, a: _Arm, test: str | None) -> str:
            if not whole:
                return f"CASE WHEN {a.cond} THEN {i} END"
            fields = [f"'__arm', {i}"] if untyped else []
            fields += [f"'{n}', CAST({a.fields.get(n, 'NULL')} AS {types[n]})" for n in typed]
            if a.cond in (test, f"({test})"):
                return f"named_struct({', '.join(fields)})"  # the dispatch's test is the arm's whole condition
            return f"CASE WHEN {a.cond} THEN named_struct({', '.join(fields)}) END"

        def chosen(idx: list[int], test: str | None = None) -> str:
            """The records of the arms `idx` a row takes. `test`: the rows reaching here passed it
            (the dispatch below), so an arm whose condition it is always takes them: no CASE to
            evaluate, and with only such arms no NULLs to filter out (above a layer, an operator
            feeding one arm is most of them: a view's sink)."""
            records = [record(i, arms[i], test) for i in idx]
            if test is not None and all(arms[i].cond in (test, f"({test})") for i in idx):
                return f"array({', '.join(records)})"
            return f"filter(array({', '.join(records)}), r -> r IS NOT NULL)"

        # With many arms, dispatch on where a row comes from first (its relation, or the operator
        # that emitted it): a row then tests only the arms fed by its source, not every view's.
        # (With few, the gain is nil, and Spark 4.3's optimizer fails on that CASE around arm
        # numbers: "Could not find __d2" in an ASOF view's boundary.)
        groups: dict[str | None, list[int]] = {}
        for i, a in enumerate(arms):
            groups.setdefault(_source_test(a.cond) if whole else None, []).append(i)
        if whole:
            frame = _hoist_shared(frame, arms, groups, typed)
        if None in groups or len(groups) == 1:
            records = chosen(list(range(len(arms))))
        else:
            records = "CASE " + " ".join(f"WHEN {d} THEN {chosen(idx, d)}" for d, idx in groups.items()) + " END"
        routed = select(frame, ["*", ("__r", f"explode({records})")])
        out: list[str | tuple[str, str]] = []
        for name in names:
            if name in typed:
                out.append((name, f"__r.{quote(name)}"))
                continue
            cases = " ".join(f"WHEN {i} THEN {a.fields[name]}" for i, a in enumerate(arms) if name in a.fields)
            expr = f"CASE {'__r.__arm' if whole else '__r'} {cases} END" if cases else "NULL"
            typ = types.get(name)
            out.append((name, f"CAST({expr} AS {typ})" if typ else expr))
        return select(routed, out)

    def _probe(self, frame: DataFrame, arms: list[_Arm]) -> None:
        """The Spark types of every arm's values: one analysis for the whole boundary."""
        exprs = [(a, k, e) for a in arms for k, e in a.values.items()]
        if not exprs:
            return
        schema = select(frame, [(f"t{i}", e) for i, (_, _, e) in enumerate(exprs)]).schema
        for (a, k, _), f in zip(exprs, schema.fields, strict=True):
            a.types[k] = f.dataType.simpleString()

    # -- arms --

    def _decode(self, v: ViewFlow, frontier: Any, b: int, decode: _Decoded) -> tuple[dict[str, str], str]:
        """The frontier's columns at boundary b ({internal name: column of the frame}) and the
        condition picking its rows."""
        if isinstance(frontier, tuple):
            return {}, f"(__rel = {SEED_RELATION} AND __tag = {frontier[1]})"
        if isinstance(frontier, D.Scan) and b == 0:
            rel = self.relations[frontier.relation_id]
            positions = {c.name: i for i, c in enumerate(rel.columns)}
            names = {col: "__rowtime" if src == "rowtime" else column_name(frontier.relation_id, positions[src])
                     for col, src in zip(frontier.columns, frontier.source_columns, strict=True)}
            joins = v.joins.get(frontier.relation_id)
            live = "__tag IS NULL"
            if joins and any(joins):
                floor = " ".join(f"WHEN {p} THEN {j}" for p, j in enumerate(joins))
                live = f"(__tag IS NULL AND __off >= CASE __part {floor} END)"
            if frontier.relation_id == v.view_id:
                # The view's own emitted rows (D.with_window_expiry): this generation's, as they come.
                return names, f"(__rel = {v.view_id} AND {live} AND __w > 0)"
            return names, f"(__rel = {frontier.relation_id} AND ({live} OR __tag = {v.view_id}))"
        carrier = self._carrier_at(frontier, b)
        assert carrier is not None
        names = {}

        def struct(source: str, schema: list[tuple[str, str]]) -> str:
            ddl = ", ".join(f"{quote(n)}: {_json_type(t)}" for n, t in schema)
            return decode.column(carrier, f"from_json({source}, 'struct<{_esc(ddl)}>', {JSON_OPTIONS})")

        def field(column: str, schema: list[tuple[str, str]], i: int) -> str:
            """The frame column of the struct's i-th field, converted back from its JSON form."""
            n, t = schema[i]
            if _json_type(t) == t:
                return f"{column}{FIELD}{n}"
            converted = f"{column}__f{i}"
            self._convert.setdefault(converted, _from_json_value(f"{quote(column)}.{quote(n)}", t))
            return converted

        if isinstance(frontier, D.Join):
            for side, source in ((0, "row"), (1, "row2")):
                schema = self.schemas[(frontier, side)]
                column = struct(source, schema)
                for i, (n, _) in enumerate(schema):
                    names[n] = field(column, schema, i)
        elif isinstance(frontier, D.Reduce):
            group = self.schemas.get((frontier, "group"), [])
            column = struct("k", group) if group else ""
            ngroup = len(frontier.group)
            for i, col in enumerate(frontier.columns):
                if i < ngroup:
                    names[col] = field(column, group, i)
                else:
                    out_type, template = self.schemas[(frontier, "agg", i - ngroup)]
                    raw = f"a[{i - ngroup}]"
                    failure = _range_failure(frontier.aggs[i - ngroup].fn, out_type)
                    if failure is None:
                        names[col] = decode.column(carrier, template.format(raw))
                    else:
                        # TRY_CAST: the decoding is computed for every row of the frame, so it
                        # must not raise; the arms reading it route an out-of-range value to
                        # the view's errors instead.
                        names[col] = decode.column(carrier, "TRY_" + template.format(raw))
                        self._decode_failures[names[col]] = (f"({raw} IS NOT NULL AND {names[col]} IS NULL)", failure)
        else:  # a TopN's, a Session's or a Temporal's rows, or a Scan's carried up by PASS ops
            key = (frontier, 0) if isinstance(frontier, (D.TopN, D.Session, D.Temporal)) else frontier
            schema = self.schemas[key]
            if isinstance(frontier, D.Session):  # each row with its session's bounds appended
                bound = self.schemas[(frontier, "bound")]
                schema = [*schema, *((c, bound) for c in frontier.columns[-2:])]
            column = struct("row", schema)
            for i, (n, _) in enumerate(schema):
                names[n] = field(column, schema, i)
        return names, f"op = {carrier}"

    def _path_arm(self, v: ViewFlow, consumer: Any, side: int, child: D.Node, p: _Path, b: int,
                  decode: _Decoded) -> _Arm:
        names, cond = self._decode(v, p.frontier, b, decode)
        conds = [cond, *(f"({render(c, names)})" for c in p.cond)]
        arm = _Arm(v, consumer, side, " AND ".join(conds), child=child)
        defs = dict(zip(child.columns, p.exprs, strict=True))
        for i, e in enumerate(p.exprs):
            arm.values[f"c{i}"] = render(e, names)

        def value(key: str, e: exp.Expression) -> None:
            arm.values[key] = render(substitute(e, defs), names)

        if isinstance(consumer, D.Join):
            for i, k in enumerate(consumer.left_keys if side == 0 else consumer.right_keys):
                value(f"k{i}", k)
        elif isinstance(consumer, D.Reduce) and side == EXPIRE_SIDE:
            for i, k in enumerate(consumer.expire_keys):
                value(f"k{i}", k)
        elif isinstance(consumer, D.Reduce):
            for i, k in enumerate(consumer.group):
                value(f"k{i}", k)
            for j, call in enumerate(consumer.aggs):
                if call.arg is not None:
                    value(f"x{j}", call.arg)
        elif isinstance(consumer, D.TopN):
            for i, k in enumerate(consumer.partition):
                value(f"k{i}", k)
            for j, key in enumerate(consumer.order):
                value(f"x{j}", key.expr)
        elif isinstance(consumer, D.Recompute):
            for i, k in enumerate(consumer.partition):
                value(f"k{i}", k)
        elif isinstance(consumer, D.Session):
            for i, k in enumerate(consumer.partition):
                value(f"k{i}", k)
            value("x0", consumer.ts)
        elif isinstance(consumer, D.Temporal):
            for j, bound in enumerate(consumer.bounds):
                value(f"x{j}", bound.expr)
        arm.fields["w"] = "__w" if isinstance(p.frontier, D.Scan) and b == 0 else "w"
        if isinstance(consumer, D.Reduce) and side == EXPIRE_SIDE:
            arm.fields["w"] = "0"  # not a change: the Combiner passes it on, the Reduce drops the group
        asts = [*p.exprs, *(substitute(e, defs) for e in _value_asts(consumer, side))]
        decoded = [self._decode_failures[c] for c in dict.fromkeys(names.values()) if c in self._decode_failures]
        if decoded and consumer == "sink" and b == self.depth and not p.cond and _row_errors([], asts, names) is None:
            # Only an aggregate out of range can fail, and the row goes to the sink: the arm's
            # error column names the rows that fail (the sink keeps them apart), rather than a
            # second arm: sums are common, and every arm costs each batch's planning.
            arm.fields["__err"] = "CASE " + " ".join(f"WHEN coalesce({c}, false) THEN {m}" for c, m in decoded) + " END"
            return arm
        err = _row_errors(p.cond, asts, names, decoded)
        if err is not None:
            failing, text = err
            arm.cond = f"{cond} AND NOT ({failing})" + "".join(f" AND ({render(c, names)})" for c in p.cond)
            self._errors.append(self._error_arm(v, b, f"{cond} AND ({failing})", text, arm.fields["w"]))
        return arm

    def _seed_arm(self, v: ViewFlow, consumer: Any, b: int) -> _Arm:
        carrier = self._carrier_at((SEED, v.view_id), b)
        cond = f"(__rel = {SEED_RELATION} AND __tag = {v.view_id})" if carrier is None else f"op = {carrier}"
        arm = _Arm(v, consumer, 0, cond, seed=True)
        arm.fields.update({"op": str(self.op_of[consumer]), "side": "0", "k": "''", "row": "NULL", "row2": "NULL",
                           "a": "NULL", "w": "0"})
        return arm

    def _recompute_sink_arm(self, v: ViewFlow, root: D.Recompute, b: int) -> _Arm:
        """A recomputed view's arranged rows go to the sink as they are (foreachBatch runs its query)."""
        carrier = self._carrier_at(root, b)
        schema = self.schemas[(root, 0)]
        self.sink[v.view_id] = SinkView(v.view_id, (), root, tuple(n for n, _ in schema),
                                        tuple(t for _, t in schema), global_=not root.partition)
        arm = _Arm(v, "sink", 0, f"op = {carrier}")
        arm.fields.update({"__view": str(v.view_id), "__w": "w", "__side": "side", "__k": "k", "__row": "row"})
        return arm

    def _pass_arm(self, v: ViewFlow, pid: int, frontier: Any, b: int, decode: _Decoded) -> _Arm:
        """`frontier`'s rows carried one layer up, unchanged, by PASS op `pid`."""
        if isinstance(frontier, tuple):
            carrier = self._carrier_at(frontier, b)
            cond = f"(__rel = {SEED_RELATION} AND __tag = {v.view_id})" if carrier is None else f"op = {carrier}"
            arm = _Arm(v, ("pass", pid), 0, cond)
            arm.fields.update({"op": str(pid), "side": "0", "k": "''", "row": "NULL", "row2": "NULL", "a": "NULL",
                               "w": "0"})
            return arm
        if isinstance(frontier, D.Scan) and b == 0:
            names, cond = self._decode(v, frontier, b, decode)
            rel = self.relations[frontier.relation_id]
            types = [_spark_type_name(rel, src) for src in frontier.source_columns]
            self.schemas[frontier] = list(zip(frontier.columns, types, strict=True))
            row = _row_json(frontier.columns, [_ref(names[c]) for c in frontier.columns], types)
            arm = _Arm(v, ("pass", pid), 0, cond)
            arm.fields.update({"op": str(pid), "side": "0", "k": f"CAST(pmod(hash({row}), 64) AS STRING)",
                               "row": row, "row2": "NULL", "a": "NULL", "w": "__w"})
            return arm
        carrier = self._carrier_at(frontier, b)
        arm = _Arm(v, ("pass", pid), 0, f"op = {carrier}")
        arm.fields.update({"op": str(pid), "side": "side", "k": "k", "row": "row", "row2": "row2", "a": "a",
                           "w": "w"})
        return arm

    def _encode(self, arm: _Arm, b: int) -> None:
        """The arm's record fields (or sink columns), now that its values' types are known."""
        consumer = arm.consumer
        if isinstance(consumer, tuple) and consumer[0] == "error":
            return
        if consumer == "sink" and arm.child is None:
            return  # a recomputed view's arranged rows: nothing to encode
        if arm.seed or (isinstance(consumer, tuple) and consumer[0] == "pass"):
            if arm.seed:
                self._add_op(consumer, _node_kind(consumer), self._node_spec(consumer, None))
            return
        child = arm.child
        assert child is not None
        ncols = len(child.columns)
        cols = [arm.values[f"c{i}"] for i in range(ncols)]
        types = [arm.types[f"c{i}"] for i in range(ncols)]
        if consumer == "sink":
            self._sink_arm(arm, cols)
            return
        schema = list(zip(child.columns, types, strict=True))
        previous = self.schemas.get((consumer, arm.side))
        if previous is not None and [t for _, t in previous] != types:
            # UNION ALL branches of other types: every branch is cast to the first one's types.
            cols = [f"CAST({c} AS {t})" for c, (_, t) in zip(cols, previous, strict=True)]
            schema = previous
        self.schemas[(consumer, arm.side)] = schema
        op = self.op_of[consumer]
        row = _row_json(child.columns, cols, [t for _, t in schema])
        keys = [arm.values[k] for k in sorted((k for k in arm.values if k.startswith("k")), key=lambda k: int(k[1:]))]
        key_types = [arm.types[f"k{i}"] for i in range(len(keys))]
        expiring = isinstance(consumer, D.Reduce) and arm.side == EXPIRE_SIDE
        if expiring:  # the group's key exactly as its changes have it: the same types, the same JSON
            group_types = [t for _, t in self.schemas[(consumer, "group")]]
            keys = [k if t == g else f"CAST({k} AS {g})" for k, t, g in zip(keys, key_types, group_types, strict=True)]
            key_types = group_types
        keys = [f"(({k}) + 0.0)" if t in ("double", "float") else k for k, t in zip(keys, key_types, strict=True)]
        key_json = _key_json(keys, key_types) if keys else "''"
        arm.fields.update({"op": str(op), "side": str(arm.side), "k": key_json, "row": "NULL", "row2": "NULL",
                           "a": "NULL"})
        if isinstance(consumer, D.Join):
            null_key = " OR ".join(f"({k}) IS NULL" for k in keys) or "false"
            arm.fields["k"] = f"CASE WHEN {null_key} THEN 'N{arm.side}' ELSE {key_json} END"
            arm.fields["row"] = row
        elif expiring:
            pass
        elif isinstance(consumer, D.Reduce):
            self.schemas[(consumer, "group")] = [(f"k{i}", t) for i, t in enumerate(key_types)]
            args: list[str] = []
            # Aggregates of one argument that travel alike share its slot (Nexmark q17's min, max,
            # avg and sum of price: one text per record, not four). Slots follow from the node
            # alone, so every arm into it lays its records out the same way.
            slots: dict[tuple[str, str], int] = {}
            for j, call in enumerate(consumer.aggs):
                if call.arg is None:
                    self.schemas[(consumer, "agg", j)] = ("bigint", "CAST({} AS BIGINT)")
                    continue
                encoded, code, decoder, out_type = _arg_codec(call.fn, arm.types[f"x{j}"], arm.values[f"x{j}"])
                slot = slots.setdefault((call.arg.sql(dialect="postgres"), _arg_class(call.fn)), len(args))
                if slot == len(args):
                    args.append(encoded)
                self.schemas[(consumer, "agg", j)] = (out_type, decoder)
                self.schemas[(consumer, "code", j)] = (slot, code)
            if args:
                arm.fields["a"] = f"array({', '.join(args)})"
        elif isinstance(consumer, D.TopN):
            arm.fields["row"] = row
            args = []
            for j in range(len(consumer.order)):
                encoded, code, _, _ = _arg_codec("min", arm.types[f"x{j}"], arm.values[f"x{j}"])
                args.append(encoded)
                self.schemas[(consumer, "code", j)] = (len(args) - 1, code)
            if args:
                arm.fields["a"] = f"array({', '.join(args)})"
        elif isinstance(consumer, D.Recompute):
            arm.fields["row"] = row
        elif isinstance(consumer, D.Session):
            arm.fields["row"] = row
            encoded, code, _, _ = _arg_codec("min", arm.types["x0"], arm.values["x0"])
            if code != "long":
                raise FeatureNotSupported(f"internal: a session time of type {arm.types['x0']}")
            arm.fields["a"] = f"array({encoded})"
            self.schemas[(consumer, "bound")] = arm.types["x0"]
        elif isinstance(consumer, D.Temporal):
            # A row is its own key (its count and timers are the key's state), carried in `k`
            # alone: the combiner nets a batch's equal changes of it before the shuffle.
            arm.fields["k"] = row
            args = []
            for j in range(len(consumer.bounds)):
                encoded, code, _, _ = _arg_codec("min", arm.types[f"x{j}"], arm.values[f"x{j}"])
                if code != "long":
                    raise FeatureNotSupported(f"internal: a temporal filter's time of type {arm.types[f'x{j}']}")
                args.append(encoded)
            arm.fields["a"] = f"array({', '.join(args)})"
        self._add_op(consumer, _node_kind(consumer), self._node_spec(consumer, child))

    def _node_spec(self, node: Any, child: D.Node | None) -> dict[str, Any]:
        if isinstance(node, D.Join):
            spec: dict[str, Any] = {"join": node.kind}
            if node.residual is not None and (node, 0) in self.schemas and (node, 1) in self.schemas:
                spec["residual"] = self._residual_spec(node)
            return spec
        if isinstance(node, D.Reduce):
            aggs = []
            for j, call in enumerate(node.aggs):
                arg, code = self.schemas.get((node, "code", j), (-1, "long"))
                aggs.append({"fn": call.fn, "arg": arg if call.arg is not None else -1, "type": code})
            return {"aggs": aggs, "global": node.global_, "append_only": D.append_only(node.input)}
        if isinstance(node, D.TopN):
            order = []
            for j, key in enumerate(node.order):
                arg, code = self.schemas.get((node, "code", j), (j, "string"))
                order.append({"arg": arg, "type": code, "desc": key.desc, "nulls_first": key.nulls_first})
            return {"limit": -1 if node.limit is None else node.limit, "offset": node.offset, "order": order,
                    "ties": node.with_ties, "append_only": D.append_only(node.input)}
        if isinstance(node, D.Session):
            return {"gap": node.gap_micros, "bounds": list(node.columns[-2:])}
        if isinstance(node, D.Temporal):
            return {"clock": [{"kind": "from" if b.starts else "until", "offset": b.offset_micros}
                              for b in node.bounds]}
        return {}

    def _residual_spec(self, node: D.Join) -> list[dict[str, Any]]:
        """The comparisons the join operator tests on each pair (Residual.java): operands as
        the fields of the side rows' JSON, compared as the encoding of their class allows."""
        fields = {name: (side, t) for side in (0, 1) for name, t in self.schemas[(node, side)]}
        out = []
        for c in D._conjuncts(node.residual):
            code = _RESIDUAL_CODES.get(D.residual_class(c) or "")
            if code is None:
                raise FeatureNotSupported(f"internal: a join comparison the operator cannot test: {c.sql()}")
            if isinstance(c, exp.Between):
                x = _residual_operand(c.this, code, fields)
                out.append({"op": "ge", "type": code, "l": x, "r": _residual_operand(c.args["low"], code, fields)})
                out.append({"op": "le", "type": code, "l": x, "r": _residual_operand(c.args["high"], code, fields)})
            else:
                out.append({"op": _RESIDUAL_OPS[type(c)], "type": code, "l": _residual_operand(c.this, code, fields),
                            "r": _residual_operand(c.expression, code, fields)})
        return out

    def _add_op(self, node: Any, kind: str, spec: dict[str, Any]) -> None:
        op = self.op_of[node]
        layer = D.level(node)
        existing = self.layer_ops[layer].get(op)
        if existing is None:
            self.layer_ops[layer][op] = _Op(op, kind, spec)
        else:
            existing.spec.update(spec)

    def _sink_arm(self, arm: _Arm, cols: list[str]) -> None:
        v = arm.view
        root = v.dataflow.root
        if isinstance(root, D.Recompute):
            raise FeatureNotSupported("internal: a recomputed view's rows come from its arrange operator")
        sv = self.sink.get(v.view_id)
        if sv is None:
            sv = self.sink[v.view_id] = SinkView(v.view_id, self._sink_columns(v, arm, len(cols)))
        arm.fields.update({"__view": str(v.view_id), "__w": arm.fields["w"]})
        for c, e in zip(sv.columns, cols, strict=True):
            arm.fields[c] = e

    def _sink_columns(self, v: ViewFlow, arm: _Arm, width: int) -> tuple[str, ...]:
        """The sink columns holding a view's values. A row of the sink is one view's, so views
        share columns by type (the j-th column of type t of every view is slot `o{t}_{j}`): the
        sink is as wide as the widest view per type, not as all views together (each row's
        projection and Arrow conversion wrote every view's columns, most of a 100-view batch's
        time). A view whose rows come by several paths (UNION ALL) keeps columns of its own: its
        branches may have other types, which Spark widens to a common one."""
        if len(_paths(v.dataflow.root)) > 1:
            return tuple(f"v{v.view_id}_o{i}" for i in range(width))
        taken: Counter[int] = Counter()
        out = []
        for i in range(width):
            t = self._slot_types.setdefault(arm.types[f"c{i}"], len(self._slot_types))
            out.append(f"o{t}_{taken[t]}")
            taken[t] += 1
        return tuple(out)


class _Decoded:
    """The columns a boundary decodes from the records of the layer below, shared by the
    operators whose records decode the same way (a row has one operator, so one column can hold
    the value of each): 83 aggregate views had 300 such columns, and a row that wide made Spark
    give up whole-stage code generation (`spark.sql.codegen.maxFields`, 100) and copy every
    column at each step, most of a many-view batch's time. Grouped by expression, they are as
    many as the distinct shapes of output."""

    def __init__(self) -> None:
        self._by_expr: dict[str, tuple[str, set[int]]] = {}

    def column(self, carrier: int, expr: str) -> str:
        """The column holding `expr` over the records of operator `carrier`."""
        name, carriers = self._by_expr.setdefault(expr, (f"__d{len(self._by_expr)}", set()))
        carriers.add(carrier)
        return name

    def columns(self) -> dict[str, str]:
        return {name: f"CASE WHEN op IN ({', '.join(map(str, sorted(carriers)))}) THEN {expr} END"
                for expr, (name, carriers) in self._by_expr.items()}


def _value_asts(consumer: Any, side: int) -> list[exp.Expression]:
    """The expressions over its input's columns a consumer evaluates (keys, arguments)."""
    if isinstance(consumer, D.Join):
        return list(consumer.left_keys if side == 0 else consumer.right_keys)
    if isinstance(consumer, D.Reduce):
        if side == EXPIRE_SIDE:
            return list(consumer.expire_keys)
        return [*consumer.group, *(c.arg for c in consumer.aggs if c.arg is not None)]
    if isinstance(consumer, D.TopN):
        return [*consumer.partition, *(k.expr for k in consumer.order)]
    if isinstance(consumer, D.Recompute):
        return list(consumer.partition)
    if isinstance(consumer, D.Session):
        return [*consumer.partition, consumer.ts]
    if isinstance(consumer, D.Temporal):
        return [b.expr for b in consumer.bounds]
    return []


_CONDITIONAL = (exp.Case, exp.If, exp.Coalesce, exp.And, exp.Or, exp.Nullif)


_SOURCE_TEST = re.compile(r"\(?((?:__rel|op) = -?\d+)(?: AND |\)|$)")


def _hoist_shared(frame: DataFrame, arms: list[_Arm], groups: dict[str | None, list[int]],
                  fields: list[str]) -> DataFrame:
    """Record fields several arms compute alike (the group key's JSON of every view grouping a
    stream by the same column, an aggregate's argument), computed once per row in a column of
    their own, before the explode, which the arms then read: one `to_json` per row instead of
    one per view, and a plan (analyzed, optimized and serialized into every task each batch)
    without the copies. Behind the dispatch's test where there is one, so a row computes only
    its source's. Only expressions that cannot fail (`_cannot_fail`): an arm's condition no
    longer guards them."""
    dispatched = None not in groups and len(groups) > 1
    test_of = {i: d if dispatched else None for d, idx in groups.items() for i in idx}
    uses: dict[tuple[str | None, str], int] = {}
    for i, a in enumerate(arms):
        for n in fields:
            e = a.fields.get(n)
            if e is not None and len(e) > 24 and _cannot_fail(e):
                uses[(test_of[i], e)] = uses.get((test_of[i], e), 0) + 1
    shared = {key: f"__h{j}" for j, key in enumerate(k for k, c in uses.items() if c > 1)}
    if not shared:
        return frame
    for i, a in enumerate(arms):
        for n in fields:
            name = shared.get((test_of[i], a.fields.get(n, "")))
            if name is not None:
                a.fields[n] = name
    return select(frame, ["*", *((name, f"CASE WHEN {d} THEN {e} END" if d else e)
                                 for (d, e), name in shared.items())])


_TOKEN = re.compile(r"\s+|`(?:[^`]|``)*`|'(?:[^'\\]|\\.)*'|-?\d+(?:\.\d+)?|[A-Za-z_][A-Za-z_0-9]*|[(),.]|.")
_SAFE_CALLS = {"to_json", "named_struct", "map", "array", "cast"}


def _cannot_fail(e: str) -> bool:
    """Whether the Spark SQL `e` is built only of quoted columns, literals, to_json,
    named_struct, map, array and casts to STRING: nothing that can raise, whatever the row. Any
    other word is refused, keywords that are operators (`DIV`, `RLIKE`) among them."""
    tokens = [t for t in _TOKEN.findall(e) if not t.isspace()]
    for i, t in enumerate(tokens):
        if t[0] in "`'(),." or t[0].isdigit():
            continue
        if t[0] == "-" and t[1:2].isdigit() and (i == 0 or tokens[i - 1] in ("(", ",")):
            continue  # a negative literal, not a subtraction
        low = t.lower()
        following = tokens[i + 1].lower() if i + 1 < len(tokens) else ""
        if low in _SAFE_CALLS and following == "(" or low in ("null", "true", "false"):
            continue
        if low == "as" and following == "string" or low == "string" and i and tokens[i - 1].lower() == "as":
            continue
        return False  # an operator, a bare name, another function or type
    return True


def _source_test(cond: str) -> str | None:
    """The test of a row's source (`__rel = n` at the log, `op = n` above a layer) that an arm's
    condition starts with, as a conjunct; None if it has none."""
    m = _SOURCE_TEST.match(cond)
    return m[1] if m else None


def _divisors(e: exp.Expression) -> list[exp.Expression]:
    """Divisors of the divisions in `e` that are always evaluated (not under CASE, COALESCE, AND, ...)."""
    return [node.expression for node in e.walk()
            if isinstance(node, (exp.Div, exp.Mod, exp.IntDiv)) and _always_evaluated(node)]


def _always_evaluated(node: exp.Expr) -> bool:
    """Whether no CASE, COALESCE, AND, ... above `node` may skip it (so a row it raises on fails)."""
    p = node.parent
    while p is not None and not isinstance(p, _CONDITIONAL):
        p = p.parent
    return p is None


def _casts(e: exp.Expression) -> list[exp.Cast]:
    """Casts in `e` that are always evaluated and can fail on a row's value."""
    return [node for node in e.walk() if isinstance(node, exp.Cast) and _may_fail_cast(node) and _always_evaluated(node)]


def _may_fail_cast(node: exp.Cast) -> bool:
    """Whether a cast can fail on a row's value: to anything but text, from text (or a type not
    known here) or from a number (a narrower one)."""
    if isinstance(node, exp.TryCast) or node.to.is_type(*_TEXT_TYPES) or isinstance(node.this, (exp.Literal, exp.Null)):
        return False
    source = node.this.type
    # e.g. a timestamp to timestamptz, an int to a double: cannot fail
    return source is None or source.is_type(exp.DataType.Type.UNKNOWN, *_TEXT_TYPES) or _may_overflow(source, node.to)


_TEXT_TYPES = (exp.DataType.Type.TEXT, exp.DataType.Type.VARCHAR, exp.DataType.Type.CHAR)
_INTEGER_WIDTH = {exp.DataType.Type.TINYINT: 1, exp.DataType.Type.SMALLINT: 2, exp.DataType.Type.INT: 3,
                  exp.DataType.Type.BIGINT: 4}


def _may_overflow(source: exp.DataType, target: exp.DataType) -> bool:
    """Whether a number of type `source` may not fit `target`: a narrower integer, an integer
    from a fraction or a decimal, or a decimal with a precision."""
    if not source.is_type(*exp.DataType.NUMERIC_TYPES) or not target.is_type(*exp.DataType.NUMERIC_TYPES):
        return False
    if target.this in _INTEGER_WIDTH:
        return _INTEGER_WIDTH.get(source.this, 99) > _INTEGER_WIDTH[target.this]
    return target.is_type(exp.DataType.Type.DECIMAL) and bool(target.expressions)


# Integer arithmetic Spark (ANSI) raises on when the result does not fit: its TRY_ form (Postgres's
# name of the result type: INTEGER_NAMES).
_TRY_ARITHMETIC = {exp.Add: "try_add", exp.Sub: "try_subtract", exp.Mul: "try_multiply"}


def _overflows(e: exp.Expression) -> list[tuple[exp.Binary, str]]:
    """Integer additions, subtractions and multiplications in `e` that are always evaluated, the
    innermost first (so a row is blamed on the first one that overflows)."""
    out = []
    for node in e.walk():
        if isinstance(node, exp.Binary) and (name := _overflow_type(node)) is not None and _always_evaluated(node):
            out.append((node, name))
    return out[::-1]


def _overflow_type(node: exp.Expr) -> str | None:
    """Postgres's name of the integer type an addition, subtraction or multiplication may overflow."""
    if type(node) not in _TRY_ARITHMETIC or not isinstance(node, exp.Expression) or node.type is None:
        return None
    return INTEGER_NAMES.get(node.type.this)


def _may_raise(node: exp.Expr) -> bool:
    """Whether Spark may raise on some row's values in `node` itself (its operands aside), for
    `_guarded`: a division by anything but a literal other than zero or a NULLIF(x, 0), a cast that
    may fail, a function of `_RAISING`, sdb_raise. Integer arithmetic out of its range is left out:
    common in filters (`a + 1 > 5 AND ...`) and rare to overflow, it would put those filters'
    conditions under sdb_error, which Spark runs outside its generated code (COPY and FLUSH of
    200,000 rows through `WHERE a + 1 > 5 AND b * 2 < 1000 OR s = 'x'`: 0.55-0.67 s guarded,
    0.40-0.42 s not); an overflow there fails the pipeline, loudly, as before."""
    if isinstance(node, (exp.Div, exp.Mod, exp.IntDiv)):
        divisor = node.expression.unnest()
        if isinstance(divisor, exp.Literal) and divisor.is_number and float(divisor.name) != 0:
            return False
        return not (isinstance(divisor, exp.Nullif) and isinstance(divisor.expression, exp.Literal)
                    and divisor.expression.is_number and float(divisor.expression.name) == 0)
    return ((isinstance(node, exp.Cast) and _may_fail_cast(node)) or _raising_failure(node) is not None
            or (isinstance(node, exp.Anonymous) and node.name.lower() == RAISE_FUNCTION))


def _guarded(e: exp.Expression) -> list[exp.Expression]:
    """The outermost CASE, COALESCE, AND, ... of `e` under which something Spark may raise on is
    evaluated for some rows only (a division in a THEN): whether a row raises depends on the branch
    it takes, so the whole conditional is evaluated under sdb_error (ErrorFunction.java)."""
    out: dict[int, exp.Expression] = {}
    for node in e.walk():
        if not _may_raise(node) or _always_evaluated(node):
            continue
        top = _outermost_conditional(node, e)
        if isinstance(top, exp.Expression):
            out.setdefault(id(top), top)
    return list(out.values())


def _outermost_conditional(node: exp.Expr, e: exp.Expression) -> exp.Expr:
    """The outermost CASE, COALESCE, AND, ... of `e` above `node` (`node` if none)."""
    top, p = node, node
    while p is not e and p.parent is not None:
        p = p.parent
        if isinstance(p, _CONDITIONAL):
            top = p
    return top


def _caught(guarded: exp.Expression, names: dict[str, str]) -> tuple[str, str]:
    """The failure term of a conditional evaluated once more under sdb_error."""
    caught = f"sdb_error({render(guarded, names)})"
    return f"({caught} IS NOT NULL)", f"concat('{SPARK_ROW_ERROR}:', {caught})"


def _failures(e: exp.Expression, names: dict[str, str]) -> list[tuple[str, str]]:
    """What makes `e` raise on a row, as (Spark SQL condition, Spark SQL 'SQLSTATE:message'): a zero
    divisor (Postgres: 22012), a cast Spark cannot do (22P02 for text input, 22003 for a number out
    of the target's range), integer arithmetic out of its type's range (22003). The conditions use
    TRY_CAST and try_add & co., which give NULL where the plain forms raise; arithmetic comes last,
    as its operands may hold a failing cast or division that an earlier condition catches. A
    conditional that may raise for the rows taking one of its branches comes first, as the other
    conditions may evaluate it; its rows' errors are Spark's own, translated on the driver
    (`translate_row_error`)."""
    caught = _guarded(e)
    out = [_caught(guarded, names) for guarded in caught]
    out += [(f"({render(d, names)}) = 0", "'22012:division by zero'") for d in _divisors(e)]
    for cast in _casts(e):
        src = render(cast.this, names)
        cast_sql = render(cast, names)
        if not cast_sql.upper().startswith("CAST("):
            continue  # rendered as something else (a Spark function): its errors still fail the pipeline
        tried = "TRY_" + cast_sql  # sqlglot writes exp.TryCast as a plain CAST for Spark
        spelled = cast.to.sql(dialect="postgres").lower()
        known = T.type_from_name(spelled)
        name = _esc(known.spelled() if known is not None else spelled)
        message = (f"CASE WHEN typeof({src}) = 'string' THEN concat('22P02:invalid input syntax for type {name}: \"', "
                   f"CAST({src} AS STRING), '\"') ELSE '22003:{name} out of range' END")
        out.append((f"(({src}) IS NOT NULL AND ({tried}) IS NULL)", message))
    for call in _udf_calls(e):
        carried = render(call, names)  # sdb_udf_<id>_e(...).v
        error = carried.removesuffix(".v") + ".e"
        out.append((f"({error} IS NOT NULL)", f"concat('38000:', {error})"))
    for raising, failure in _raising_calls(e):
        # Spark raises on some rows of these (make_date(2020, 13, 1), a pattern that is not a
        # regular expression): evaluated under sdb_try (TryFunction.java), the struct around the
        # call is NULL exactly when it raised.
        out.append((f"(sdb_try(named_struct('v', {render(raising, names)})) IS NULL)", f"'{_esc(failure)}'"))
    for node, type_name in _overflows(e):
        left, right = render(node.this, names), render(node.expression, names)
        tried = f"{_TRY_ARITHMETIC[type(node)]}({left}, {right})"
        out.append((f"(({left}) IS NOT NULL AND ({right}) IS NOT NULL AND {tried} IS NULL)",
                    f"'22003:{type_name} out of range'"))
    out += _guarded_overflows(e, names, caught)
    return out


def _guarded_overflows(e: exp.Expression, names: dict[str, str],
                       caught: list[exp.Expression]) -> list[tuple[str, str]]:
    """Integer arithmetic that only some rows evaluate (under a CASE, COALESCE, AND or OR), with
    the condition under which a row evaluates it (`_reach`): Spark's generated code runs these
    conditions, so a filter such as `a + 1 > 5 AND b * 2 < 1000` stays as cheap as it was, and an
    overflow is the view's error, not a failure of its pipeline. In evaluation order (operands
    and conditions before what they guard), so a term's own condition cannot raise: an overflow
    in it is an earlier term, and the terms are tried in order. `caught`: the conditionals
    evaluated under sdb_error (`_guarded`), which catch their arithmetic themselves."""
    out: list[tuple[str, str]] = []
    nodes = []
    for node in _evaluation_order(e):
        type_name = _overflow_type(node)
        if (type_name is None or not isinstance(node, exp.Binary) or _always_evaluated(node)
                or any(node is g or _is_under(node, g) for g in caught)):
            continue
        nodes.append(node)
        reach = _reach(node, e, names)
        left, right = render(node.this, names), render(node.expression, names)
        tried = f"{_TRY_ARITHMETIC[type(node)]}({left}, {right})"
        out.append((f"({reach} AND ({left}) IS NOT NULL AND ({right}) IS NOT NULL AND {tried} IS NULL)",
                    f"'22003:{type_name} out of range'"))
    if sum(len(cond) for cond, _ in out) > _REACH_SQL_BUDGET:
        # Deeply nested conditionals repeat their conditions in each term (quadratic): the
        # outermost ones are evaluated under sdb_error instead (slower, but of bounded size).
        tops = {id(top): top for top in (_outermost_conditional(n, e) for n in nodes)}
        return [_caught(top, names) for top in tops.values() if isinstance(top, exp.Expression)]
    return out


# Characters of Spark SQL the guarded overflow terms of one expression may take (a CASE nested
# 20 deep with arithmetic in each branch takes ~34,000).
_REACH_SQL_BUDGET = 8_000


def _evaluation_order(e: exp.Expression) -> Iterator[exp.Expression]:
    """`e`'s nodes, each after its operands (post-order, in the order of the arguments: a CASE's
    WHEN before its THEN, an AND's left before its right)."""
    stack: list[tuple[exp.Expression, bool]] = [(e, False)]
    while stack:  # iterative: a view may nest thousands of CASEs
        node, expanded = stack.pop()
        if expanded:
            yield node
            continue
        stack.append((node, True))
        stack += [(child, False) for child in reversed(list(node.iter_expressions()))]


def _is_under(node: exp.Expr, top: exp.Expr) -> bool:
    p = node.parent
    while p is not None:
        if p is top:
            return True
        p = p.parent
    return False


def _reach(node: exp.Expression, root: exp.Expression, names: dict[str, str]) -> str:
    """Spark SQL true for the rows whose evaluation of `root` evaluates `node`, as Postgres and
    Spark evaluate CASE, COALESCE, AND and OR: a THEN when its WHEN is true and no WHEN before
    it is, an ELSE when none is, a COALESCE argument when every one before it is NULL, an AND's
    right side unless its left is false, an OR's right side unless its left is true."""
    path: list[exp.Expr] = [node]
    while path[-1] is not root and (parent := path[-1].parent) is not None:
        path.append(parent)
    path.reverse()  # root ... node
    terms: list[str] = []

    def is_true(x: exp.Expression) -> str:
        return f"coalesce(({render(x, names)}), false)"

    for i, p in enumerate(path[:-1]):
        child = path[i + 1]
        if isinstance(p, exp.Case):
            if child is p.args.get("this"):
                continue
            whens = p.args.get("ifs") or []
            before = whens if child is p.args.get("default") else whens[:next(
                (k for k, w in enumerate(whens) if w is child), len(whens))]
            terms += [f"NOT {_when_taken(p, w, names)}" for w in before]
            if child is not p.args.get("default") and i + 2 < len(path) and path[i + 2] is child.args.get("true"):
                terms.append(_when_taken(p, child, names))
        elif isinstance(p, exp.If) and not isinstance(p.parent, exp.Case):
            if child is p.args.get("true"):
                terms.append(is_true(p.this))
            elif child is p.args.get("false"):
                terms.append(f"NOT {is_true(p.this)}")
        elif isinstance(p, exp.And) and child is p.expression:
            terms.append(f"coalesce(({render(p.this, names)}), true)")
        elif isinstance(p, exp.Or) and child is p.expression:
            terms.append(f"NOT {is_true(p.this)}")
        elif isinstance(p, exp.Coalesce) and child is not p.this:
            args = [p.this, *p.expressions]
            index = next((k for k, a in enumerate(args) if a is child), len(args))
            terms += [f"({render(a, names)}) IS NULL" for a in args[:index]]
    return "(" + " AND ".join(terms or ["true"]) + ")"


def _when_taken(case: exp.Case, when: exp.Expr, names: dict[str, str]) -> str:
    """Spark SQL true when a CASE's WHEN holds (`CASE x WHEN v`: x = v)."""
    operand = case.args.get("this")
    if operand is None:
        return f"coalesce(({render(when.this, names)}), false)"
    return f"coalesce(({render(operand, names)}) = ({render(when.this, names)}), false)"


# Functions Spark raises on for some values of a row, with Postgres's SQLSTATE and words for it.
_RAISING: dict[type[exp.Expr], str] = {
    exp.TimestampFromParts: "22008:date/time field value out of range",
    exp.RegexpReplace: "2201B:invalid regular expression",
    exp.RegexpLike: "2201B:invalid regular expression",
    exp.RegexpILike: "2201B:invalid regular expression",
    exp.RegexpExtract: "2201B:invalid regular expression",
    exp.RegexpExtractAll: "2201B:invalid regular expression",
    exp.RegexpSplit: "2201B:invalid regular expression",
    exp.SimilarTo: "2201B:invalid regular expression",
    exp.StrToDate: "22007:invalid value for the date format",
    exp.StrToTime: "22007:invalid value for the timestamp format",
    exp.SplitPart: "22023:field position must not be zero",
    exp.Repeat: "54000:requested length too large",
}
_RAISING_NAMED = {"make_date": "22008:date field value out of range",
                  "make_interval": "22008:interval field value out of range",
                  "regexp_match": "2201B:invalid regular expression",
                  "regexp_matches": "2201B:invalid regular expression"}


def _raising_calls(e: exp.Expression) -> list[tuple[exp.Expression, str]]:
    """Calls in `e` that are always evaluated and that Spark raises on for some rows, each with
    its failure ('SQLSTATE:message')."""
    out: list[tuple[exp.Expression, str]] = []
    for node in e.walk():
        failure = _raising_failure(node)
        if failure is not None and isinstance(node, exp.Expression) and _always_evaluated(node):
            out.append((node, failure))
    return out


def _raising_failure(node: exp.Expr) -> str | None:
    failure = _RAISING.get(type(node))
    if failure is None and isinstance(node, exp.Anonymous):
        failure = _RAISING_NAMED.get(str(node.this).lower())
    return failure


def _row_errors(conds: list[exp.Expression], values: list[exp.Expression],
                names: dict[str, str], decoded: Sequence[tuple[str, str]] = ()) -> tuple[str, str] | None:
    """When a row of a path would raise an error, as Postgres would: (a condition over the
    frontier's columns, true for the rows whose filters before the failing expression pass and that
    fail it; the error's 'SQLSTATE:message' as Spark SQL). None: nothing on the path can fail.
    `decoded`: failures of the frontier's own columns (an aggregate out of range), which come
    before any filter."""
    terms: list[tuple[str, str]] = list(decoded)
    for i, c in enumerate(conds):
        before = [f"({render(x, names)})" for x in conds[:i]]
        terms += [(" AND ".join([*before, f]), m) for f, m in _failures(c, names)]
    before = [f"({render(x, names)})" for x in conds]
    terms += [(" AND ".join([*before, f]), m) for v in values for f, m in _failures(v, names)]
    if not terms:
        return None
    failing = "coalesce(" + " OR ".join(f"({t})" for t, _ in terms) + ", false)"
    text = "CASE " + " ".join(f"WHEN coalesce({t}, false) THEN {m}" for t, m in terms) + " END"
    return failing, text


def _needs_seed(n: D.Node) -> bool:
    return (isinstance(n, D.Reduce) and n.global_) or (isinstance(n, D.Recompute) and not n.partition)


def _node_kind(n: Any) -> str:
    return {D.Join: "join", D.Reduce: "reduce", D.TopN: "topn", D.Recompute: "arrange", D.Session: "session",
            D.Temporal: "temporal"}[type(n)]


def uses_clock(views: Sequence[ViewFlow]) -> bool:
    """Whether a pipeline of these views has a temporal filter (its batches run on the clock)."""
    return any(v.dataflow.has_clock() for v in views)


def _residual_operand(o: exp.Expression, code: str, fields: dict[str, tuple[int, str]]) -> dict[str, Any]:
    """A join comparison's operand for Residual.java: a literal's text, or a side row's field
    (plus a fixed interval's microseconds)."""
    if isinstance(o, exp.Literal):
        return {"lit": o.name}
    add = 0
    if isinstance(o, (exp.Add, exp.Sub)):
        micros = D.interval_micros(o.expression)
        assert micros is not None
        add = micros if isinstance(o, exp.Add) else -micros
        o = o.this
    assert isinstance(o, exp.Column)
    side, spark_type = fields[o.name]
    encoding = _RESIDUAL_ENCODINGS.get(spark_type.split("(")[0])
    numbers = ("long", "decimal") if code == "decimal" else ("long", "decimal", "double") if code == "double" else ()
    if encoding != code and encoding not in numbers:
        raise FeatureNotSupported(f"internal: a join comparison over {spark_type} as {code}")
    return {"side": side, "field": o.name, "add": add}


def _row_json(columns: tuple[str, ...], exprs: list[str], types: list[str]) -> str:
    parts = ", ".join(f"'{_esc(c)}', {_to_json_value(e, t)}" for c, e, t in zip(columns, exprs, types, strict=True))
    return f"to_json(named_struct({parts}), {JSON_OPTIONS})" if parts else "'{}'"


def _key_json(keys: list[str], types: list[str]) -> str:
    parts = ", ".join(f"'k{i}', {_to_json_value(e, t)}" for i, (e, t) in enumerate(zip(keys, types, strict=True)))
    return f"to_json(named_struct({parts}), {JSON_OPTIONS})"


# Top-level timestamps and dates travel in row and key JSON as integers (exact, and far cheaper
# than ISO text both ways); nested ones keep JSON_OPTIONS' text formats. Spark type -> (its type in
# the JSON, encoding, decoding). The session's time zone is UTC, so timestamp_ntz's round trip
# through a timestamp is exact.
_JSON_CODECS = {
    "timestamp": ("bigint", "unix_micros({})", "timestamp_micros({})"),
    "timestamp_ntz": ("bigint", "unix_micros(CAST({} AS TIMESTAMP))", "CAST(timestamp_micros({}) AS TIMESTAMP_NTZ)"),
    "date": ("int", "unix_date({})", "date_from_unix_date({})"),
}


def _json_type(spark_type: str) -> str:
    """The type a value of `spark_type` has inside row and key JSON."""
    codec = _JSON_CODECS.get(spark_type)
    return spark_type if codec is None else codec[0]


def _to_json_value(e: str, spark_type: str) -> str:
    codec = _JSON_CODECS.get(spark_type)
    return e if codec is None else codec[1].format(e)


def _from_json_value(e: str, spark_type: str) -> str:
    codec = _JSON_CODECS.get(spark_type)
    return e if codec is None else codec[2].format(e)


def _ref(target: str) -> str:
    if FIELD in target:
        struct, name = target.split(FIELD, 1)
        return f"{quote(struct)}.{quote(name)}"
    return quote(target)


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def _spark_type_name(rel: RelationDef, column: str) -> str:
    from pyspark.sql.pandas.types import from_arrow_type

    if column == "rowtime":
        return "timestamp"
    for c in rel.columns:
        if c.name == column:
            return from_arrow_type(c.type.arrow()).simpleString()
    raise FeatureNotSupported(f"internal: no column {column} in {rel.name}")


_INTEGRAL = ("tinyint", "smallint", "int", "bigint")
# A join comparison's class (dataflow.residual_class) -> how Residual.java compares its values;
# and the Spark types whose row JSON encodes values that way.
_RESIDUAL_CODES = {"integer": "long", "timestamp": "long", "timestamptz": "long", "date": "long",
                   "numeric": "decimal", "double": "double", "text": "string", "boolean": "bool"}
_RESIDUAL_OPS: dict[type, str] = {exp.EQ: "eq", exp.NEQ: "ne", exp.LT: "lt", exp.LTE: "le", exp.GT: "gt",
                                  exp.GTE: "ge"}
_RESIDUAL_ENCODINGS = {**{t: "long" for t in _INTEGRAL}, "timestamp": "long", "timestamp_ntz": "long", "date": "long",
                       "decimal": "decimal", "double": "double", "float": "double", "string": "string",
                       "boolean": "bool"}


def _arg_class(fn: str) -> str:
    """Aggregates whose arguments `_arg_codec` encodes alike (for one value type)."""
    if fn in ("count", "count_distinct", "count_star"):
        return "count"
    return "bool" if fn in ("bool_and", "bool_or") else "value"


def _range_failure(fn: str, out_type: str) -> str | None:
    """The view error ('SQLSTATE:message' as Spark SQL) of an aggregate result the operator
    computed exactly (BigDecimal) that does not fit its Spark type; None if every result fits
    (counts, and min/max, which are input values)."""
    if fn not in ("sum", "avg"):
        return None
    if out_type == "bigint":
        return "'22003:bigint out of range'"
    if out_type.startswith("decimal("):
        precision, scale = (int(x) for x in out_type[len("decimal("):-1].split(","))
        return (f"'22003:numeric field overflow (a numeric here holds less than 10^{precision - scale} "
                "in absolute value)'")
    return None


def _arg_codec(fn: str, vtype: str, value: str) -> tuple[str, str, str, str]:
    """How an aggregate argument (or sort key) travels as text: (encoding SQL, value type code for
    the operator, decoding template of the aggregate's result, the result's Spark type)."""
    base = vtype.split("(")[0]
    if fn in ("count", "count_distinct", "count_star"):
        enc = f"CAST(({value}) AS STRING)" if base != "string" else f"({value})"
        if base in ("array", "map", "struct") or vtype.startswith(("array", "map", "struct")):
            enc = f"to_json({value}, {JSON_OPTIONS})"
        return enc, "string", "CAST({} AS BIGINT)", "bigint"
    if fn in ("bool_and", "bool_or"):
        return f"CAST(({value}) AS STRING)", "bool", "CAST({} AS BOOLEAN)", "boolean"
    if base in _INTEGRAL:
        if fn == "sum":
            out = "bigint" if base != "bigint" else "decimal(38,0)"
            return f"CAST(({value}) AS STRING)", "long", f"CAST({{}} AS {out.upper()})", out
        if fn == "avg":
            return f"CAST(({value}) AS STRING)", "long", "CAST({} AS DECIMAL(38,16))", "decimal(38,16)"
        return f"CAST(({value}) AS STRING)", "long", f"CAST({{}} AS {vtype.upper()})", vtype
    if base in ("double", "float"):
        out = "double" if fn in ("sum", "avg") else vtype
        return f"CAST(CAST(({value}) AS DOUBLE) AS STRING)", "double", f"CAST({{}} AS {out.upper()})", out
    if base == "decimal":
        scale = int(vtype.split(",")[1].rstrip(")")) if "," in vtype else 0
        if fn == "sum":
            out = f"decimal(38,{scale})"
        elif fn == "avg":
            out = f"decimal(38,{max(scale, 16)})"
        else:
            out = vtype
        return f"CAST(({value}) AS STRING)", "decimal", f"CAST({{}} AS {out.upper()})", out
    if fn in ("sum", "avg"):
        raise FeatureNotSupported(f"{fn} over {vtype}")
    if base == "string":
        return f"({value})", "string", "{}", "string"
    if base == "boolean":
        return f"CAST(({value}) AS STRING)", "bool", "CAST({} AS BOOLEAN)", "boolean"
    if base == "timestamp":
        return f"CAST(unix_micros({value}) AS STRING)", "long", "timestamp_micros(CAST({} AS BIGINT))", "timestamp"
    if base == "timestamp_ntz":
        return (f"CAST(unix_micros(CAST(({value}) AS TIMESTAMP)) AS STRING)", "long",
                "CAST(timestamp_micros(CAST({} AS BIGINT)) AS TIMESTAMP_NTZ)", "timestamp_ntz")
    if base == "date":
        return f"CAST(unix_date({value}) AS STRING)", "long", "date_from_unix_date(CAST({} AS INT))", "date"
    if base == "time":
        # Spark prints a time as HH:MM:SS with the fraction's trailing zeros dropped: in the
        # order of the values, as the operators compare text.
        return f"CAST(({value}) AS STRING)", "string", f"CAST({{}} AS {vtype.upper()})", vtype
    raise FeatureNotSupported(f"{fn} over values of type {vtype}")


# ---- running a pipeline ------------------------------------------------------------------


# (batch id, its end offsets, each view's changes, each view's error changes: message -> weight,
# the state entries its operators added minus those they removed, the recomputed views whose own
# query failed with their error)
BatchHandler = Callable[[int, dict[str, Any], dict[int, pa.Table], dict[int, dict[str, int]], int,
                         dict[int, StreamDBError]], None]
FailureHandler = Callable[[StreamDBError], None]


_OPTIMIZER = "org.apache.spark.sql.catalyst.optimizer."
_UNUSED_OPTIMIZER_RULES = tuple(_OPTIMIZER + r for r in (
    "ReorderAssociativeOperator", "RemoveRedundantAliases", "OptimizeOneRowRelationSubquery",
    "NullDownPropagation", "ReplaceNullWithFalseInPredicate", "SimplifyBinaryComparison",
    "OptimizeCsvJsonExprs", "UnwrapCastInBinaryComparison", "FoldablePropagation",
    "EliminateAggregateFilter", "SimplifyCaseConversionExpressions"))


SINK_ARROW_ROWS = 2_500


class StreamingPipeline:
    """One running streaming query and its sink. The handler gets each batch's id, the source
    offsets it reflects and every view's changes (its columns then `__w`), and commits them; a
    batch the handler has already committed (a replay after a crash) it ignores.

    A batch with at least `async_commit_rows` changes is committed beside Spark's next batch: the
    sink hands it to a thread of its own and returns, so Spark plans and runs the next batch while
    the server writes this one. The sink waits for that commit before the next one, so at most
    one is in flight; Spark's checkpoint may then record a batch the server has not committed,
    which the manager rewinds at the pipeline's next start (`rewind_checkpoint`)."""

    def __init__(self, spark: SparkSession, name: str, checkpoint: Path, on_batch: BatchHandler,
                 on_failure: FailureHandler, trigger_ms: int = 100, async_commit_rows: int = 50_000,
                 clock_tick_ms: int = 1000) -> None:
        self.spark = spark
        self.name = name
        self.checkpoint = checkpoint
        self.on_batch = on_batch
        self.on_failure = on_failure
        self.trigger_ms = trigger_ms
        self.clock_tick_ms = clock_tick_ms
        self.compiled: CompiledPipeline | None = None
        self._query: Any = None
        self._watcher: threading.Thread | None = None
        self._stopping = False
        self._sink_error: StreamDBError | None = None
        self.batches = 0
        self.last_batch_ms: float | None = None
        self._rows_counted = 0  # the state-rows accumulator's value at the last batch
        # batch -> its temporal filters' timers pending after it, read when its job ended (a
        # batch's commit may run beside the next batch, whose operators count on)
        self._clock_at: dict[int, str] = {}
        self.last_batch_rows = 0
        self._session: SparkSession | None = None
        self._reads: _SinkReads | None = None  # what the sink takes of every batch
        # Sink.java's class, looked up once: each lookup is ~3 py4j calls (~5 ms a batch under load).
        self._sink_class: Any = None
        self.async_commit_rows = async_commit_rows
        self._committing: threading.Thread | None = None  # a batch's commit beside the next batch
        self._commit_error: StreamDBError | None = None

    def start(self, relations: dict[int, RelationDef], views: list[ViewFlow], depth: int,
              log_spec: LogReaderSpec, clock_timers: str = "{}") -> None:
        """`clock_timers`: its temporal filters' timers pending at its last committed batch, per
        minute of their time (JSON, Ticks.java)."""
        from pyspark.sql.utils import StreamingQueryException  # noqa: F401 - imported for the watcher

        from streamdb.runtime.spark.session import translate_spark_error

        moved = relocate_checkpoint(self.checkpoint)
        if moved:
            log.info("pipeline %s: %d checkpoint metadata files now name this data directory", self.name, moved)
        session = self.spark.newSession()
        if log_spec.kind != "rocksdb":
            # Only the Kafka log is read through pyspark's Python data source. Registering one
            # makes Spark look for Python data sources in a Python worker, whose daemon and worker
            # (~100 MiB) then stay for the server's life.
            session.dataSource.register(log_source.LogSource)
        from streamdb.runtime.spark import udfs

        udfs.register(session, udf.defined())
        udfs.register_jvm_functions(session)
        session._jvm.streamdb.spark.TryFunction.register(session._jsparkSession)  # type: ignore[union-attr]
        session._jvm.streamdb.spark.ErrorFunction.register(session._jsparkSession)  # type: ignore[union-attr]
        # Small micro-batches: fixed costs dominate (one shuffle partition per core is plenty).
        session.conf.set("spark.sql.adaptive.enabled", "false")
        # The sink's collect makes one byte array per Arrow batch: at Spark's 10,000 rows a batch
        # 1-2 MB, humongous objects in G1's 1 MB regions (a 768m heap), each of which could start
        # a concurrent mark cycle: 52-58 in a backfill of Nexmark q0 over 10M events, ~5 CPU s
        # and 10-15% of its rate. Under half a region, 2-4 (docs/benchmarks.md, "G1's concurrent
        # cycles").
        session.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(SINK_ARROW_ROWS))
        # Spark 4.3's nested column aliasing under a generator replaced a decoded struct by the
        # fields it extracted below the routing's explode while an expression above still read
        # the whole struct: INTERNAL_ERROR_ATTRIBUTE_NOT_FOUND ("Could not find __d2"; an ASOF
        # view created after tests/test_e2e_views.py's views). Both switches gate that rule.
        session.conf.set("spark.sql.optimizer.expression.nestedPruning.enabled", "false")
        session.conf.set("spark.sql.optimizer.nestedSchemaPruning.enabled", "false")
        # Catalyst optimizes the whole plan again every micro-batch, and with many views the
        # routing makes that plan huge. These rules never changed a pipeline's plan (RuleExecutor's
        # metrics, 100 views), yet each walked all of its expressions every batch. They only
        # optimize, so leaving them out changes no result (queryPlanning -15 to -28%).
        session.conf.set("spark.sql.optimizer.excludedRules", ",".join(_UNUSED_OPTIMIZER_RULES))
        # Spark checks some of a plan's types against the calling thread's active session, not
        # the plan's: this thread may have none, and the defaults refuse TIME columns.
        jvm_session = session._jvm.org.apache.spark.sql.SparkSession  # type: ignore[union-attr]
        jvm_session.setActiveSession(session._jsparkSession)
        try:
            self.compiled = _Compiler(session, relations, views, depth, log_spec, self.clock_tick_ms,
                                      str(self.checkpoint), clock_timers).build()
            self._session = session
            self._sink_class = session._jvm.streamdb.spark.Sink  # type: ignore[union-attr]
            self._reads = _SinkReads.of(self.compiled)
            writer = (self.compiled.frame.writeStream.queryName(self.name)
                      .option("checkpointLocation", str(self.checkpoint))
                      .trigger(processingTime=f"{self.trigger_ms} milliseconds"))
            _foreach_batch(session, writer, self._sink)
            self._stopping = False
            self._query = writer.start()
        except StreamDBError:
            raise
        except Exception as e:  # noqa: BLE001 - a plan Spark refuses: the views' error
            if not _from_spark(e):
                log.exception("compiling pipeline %s", self.name)
                raise InternalError(f"compiling the views failed: {type(e).__name__}: {e}") from e
            raise translate_spark_error(e) from e
        finally:
            jvm_session.clearActiveSession()
        self._watcher = threading.Thread(target=self._watch, args=(self._query,), name=f"pipeline-{self.name}",
                                         daemon=True)
        self._watcher.start()

    def _watch(self, query: Any) -> None:
        from streamdb.runtime.spark.session import translate_spark_error

        try:
            query.awaitTermination()
        except Exception as e:  # noqa: BLE001 - the query failed: report it
            if not self._stopping:
                # A commit still running beside the failed batch lands first: landing after the
                # failure was reported, it would clear the views' error while they wait to restart.
                self._commit_landed()
                err = self._sink_error or _unwrap(e) or translate_spark_error(e)
                self._sink_error = None
                log.warning("pipeline %s failed: %s", self.name, err.message)
                self.on_failure(err)
            return
        if not self._stopping:
            # Stopped by a failed commit beside the next batch (its error), or by no one.
            self._commit_landed()
            self.on_failure(self._sink_error or StreamDBError(f"pipeline {self.name} stopped", sqlstate="XX000"))

    def stop(self) -> None:
        self._stopping = True
        if self._query is not None:
            try:
                self._query.stop()
            except Exception:  # noqa: BLE001 - stopping anyway
                log.debug("stopping pipeline %s", self.name, exc_info=True)
            self._query = None
        # A commit still running beside the next batch lands before the pipeline is restarted (or
        # the server ends), so the restart finds the checkpoint no further than the server.
        self._commit_landed()

    def _commit_landed(self) -> None:
        """Wait for the commit running beside Spark's batch, if any (its failure is kept)."""
        committing = self._committing
        if committing is not None:
            committing.join()

    @property
    def active(self) -> bool:
        return self._query is not None and bool(self._query.isActive)

    def clock_timers(self, batch_id: int) -> str | None:
        """Its temporal filters' timers pending after batch `batch_id`, per minute (JSON; None
        without them): kept by the server with the batch, so a restart knows when to tick."""
        return self._clock_at.pop(batch_id, None)

    def _offsets(self, batch_id: int) -> dict[str, Any]:
        text = (self.checkpoint / "offsets" / str(batch_id)).read_text()
        return json.loads(text.strip().splitlines()[-1])

    def _collect(self, jdf: Any, reads: _SinkReads) -> pa.Table:
        """The batch's rows of the views maintained here and its error rows, as Arrow: PySpark's
        `where(...).select(...).toArrow()` in two calls into the JVM instead of ~40 (Sink.java)."""
        from pyspark.sql.pandas.serializers import ArrowCollectSerializer
        from pyspark.util import _load_from_socket  # type: ignore[attr-defined]

        sink = self._sink_class
        assert sink is not None
        port, secret = sink.serve(jdf, reads.condition, reads.columns).split("\n")
        try:
            with _load_from_socket((int(port), secret), ArrowCollectSerializer()) as stream:
                batches = list(stream)
        finally:
            sink.finish(port)  # raises what the collection raised
        if not batches:
            return reads.schema.empty_table()
        return pa.Table.from_batches(batches).cast(reads.schema)

    def _frame(self, jdf: Any) -> DataFrame:
        """The batch as a DataFrame of its own session, as PySpark's foreachBatch gives it."""
        from pyspark.sql import DataFrame, SparkSession

        assert self._session is not None
        return DataFrame(jdf, SparkSession(self._session.sparkContext, jdf.sparkSession()))

    def _sink(self, jdf: Any, batch_id: int) -> None:
        from streamdb.runtime.spark.session import translate_spark_error

        try:
            self._sink_batch(jdf, batch_id)
        except Exception as e:
            if self._stopping:  # the stop cancelled the batch's job: expected, nothing to report
                raise BatchStopped(f"pipeline {self.name}: batch {batch_id} stopped") from e
            if isinstance(e, StreamDBError):
                self._sink_error = e
            elif _from_spark(e):  # the batch failed: keep why, for the views' status
                self._sink_error = translate_spark_error(e)
            else:
                log.exception("pipeline %s: batch %d", self.name, batch_id)
                self._sink_error = InternalError(f"{type(e).__name__}: {e}")
            raise

    def _sink_batch(self, jdf: Any, batch_id: int) -> None:
        started = time.monotonic()
        reads = self._reads
        assert reads is not None
        offsets = self._offsets(batch_id)
        frame = self._frame(jdf).persist() if reads.recomputed else None  # read once per recomputed view
        try:
            tables: dict[int, pa.Table] = {}
            table = self._collect(jdf, reads)
            assert self.compiled is not None
            counted = int(self.compiled.state_rows.value())  # complete: the batch's job has ended
            added, self._rows_counted = counted - self._rows_counted, counted
            if self.compiled.clock_counts is not None:
                jvm: Any = self.spark._jvm  # type: ignore[attr-defined]
                self._clock_at = {batch_id: str(jvm.streamdb.spark.Ticks.state(str(self.checkpoint)))}
            computed = time.monotonic()
            self.last_batch_rows = table.num_rows
            errors = _errors(table)
            tables.update(_split(table, reads.plain))
            # A view without rows in the batch keeps its result: its recomputation (several Spark
            # jobs, ~100 ms each even over nothing) would give no changes.
            changed, rows = _views_with_rows(frame, reads.recomputed) if frame is not None else ({}, 0)
            failures: dict[int, StreamDBError] = {}
            with _recompute_conf(frame, rows):
                for s in reads.recomputed:
                    assert frame is not None
                    if s.view_id not in changed:
                        continue
                    try:
                        result = self._recompute(frame, s, fresh=changed[s.view_id])
                    except Exception as e:
                        from streamdb.runtime.spark.session import translate_spark_error

                        error = translate_spark_error(e) if _from_spark(e) else None
                        if error is None or error.sqlstate.startswith("XX") or self._stopping:
                            raise  # not the view's: its job cancelled by a stop, a lost executor, a bug
                        # The view's own query failed on its data (a cast of a value it cannot take,
                        # a function's error): that view fails, the pipeline's others go on.
                        failures[s.view_id] = error
                        continue
                    if result is not None and result.num_rows:
                        tables[s.view_id] = result
            committing = time.monotonic()
            self._wait_for_commit()  # the previous batch's, if it went beside this one
            waited = time.monotonic() - committing
            beside = sum(t.num_rows for t in tables.values()) >= self.async_commit_rows and not self._stopping
            if beside:
                thread = threading.Thread(target=self._commit_beside, name=f"commit-{self.name}", daemon=True,
                                          args=(batch_id, offsets, tables, errors, added, failures))
                self._committing = thread
                thread.start()
            else:
                self.on_batch(batch_id, offsets, tables, errors, added, failures)
        finally:
            if frame is not None:
                frame.unpersist()
        self.batches += 1
        self.last_batch_ms = (time.monotonic() - started) * 1000
        log.info("pipeline %s: batch %d in %.0f ms (sink: Spark job %.0f ms, %d rows; %s %.0f ms)", self.name,
                 batch_id, self.last_batch_ms, (computed - started) * 1000, self.last_batch_rows,
                 "commit beside the next batch, waited for the last" if beside else "commit",
                 (waited if beside else time.monotonic() - committing) * 1000)
        if log.isEnabledFor(logging.DEBUG) and self._query is not None:
            # Where the previous batch's time went outside the sink (offsets, planning, checkpoint).
            progress = self._query.lastProgress
            if progress:
                log.debug("pipeline %s: batch %s durations %s", self.name, progress.get("batchId"),
                          progress.get("durationMs"))

    def _wait_for_commit(self) -> None:
        """Wait for the batch committed beside this one; its failure fails this batch too."""
        self._commit_landed()
        self._committing = None
        if self._commit_error is not None:
            raise self._commit_error

    def _commit_beside(self, batch_id: int, offsets: dict[str, Any], tables: dict[int, pa.Table],
                       errors: dict[int, dict[str, int]], added: int, failures: dict[int, StreamDBError]) -> None:
        from streamdb.runtime import failpoints

        started = time.monotonic()
        try:
            failpoints.commit_beside(tables, self.checkpoint / "commits" / str(batch_id))
            self.on_batch(batch_id, offsets, tables, errors, added, failures)
        except Exception as e:  # noqa: BLE001 - the pipeline fails with it, and is restarted
            error = e if isinstance(e, StreamDBError) else InternalError(f"{type(e).__name__}: {e}")
            log.exception("pipeline %s: committing batch %d failed", self.name, batch_id)
            self._commit_error = self._sink_error = error
            # Spark has recorded the batch as done and gone on: the query stops, and its restart
            # rewinds the checkpoint to the last batch committed. Stopped from a thread of its
            # own: the sink may be waiting for this one.
            query = self._query
            if query is not None:
                threading.Thread(target=query.stop, name=f"stop-{self.name}", daemon=True).start()
            return
        log.info("pipeline %s: batch %d committed beside the next in %.0f ms", self.name, batch_id,
                 (time.monotonic() - started) * 1000)

    def _recompute(self, frame: DataFrame, s: SinkView, fresh: bool) -> pa.Table | None:
        """A recomputed view's changes: its query over the old and over the new contents of each
        partition the batch touched, the old result retracted and the new one added. The batch
        has rows of the view; `fresh`: one of them is a partition seen for the first time."""
        assert s.recompute is not None
        node = s.recompute
        compiled = self.compiled
        assert compiled is not None
        schema = ", ".join(f"{quote(c)}: {_json_type(t)}"  # the rows as they are in JSON
                           for c, t in zip(s.input_columns, s.input_types, strict=True))
        session = frame.sparkSession
        rows = frame.where(f"__view = {s.view_id} AND __err IS NULL")
        tag = f"{s.view_id}_{int(time.monotonic() * 1000)}"
        rows.createOrReplaceTempView(f"__all_{tag}")
        columns = ", ".join(f"{_from_json_value(f'r.{quote(c)}', t)} AS {quote(c)}"
                            for c, t in zip(s.input_columns, s.input_types, strict=True))
        contents = session.sql(
            f"SELECT __side{', ' + columns if columns else ''} FROM (SELECT __side, explode(sequence(1, __w)) AS __copy, "
            f"from_json(__row, 'struct<{_esc(schema)}>', {JSON_OPTIONS}) AS r FROM __all_{tag} "
            f"WHERE __side IN (0, 1))")
        from pyspark.sql import functions as F

        names = {c: c for c in (*s.input_columns, *node.derived)}
        # A partition's old result must be, to the bit, the row its new result was one batch
        # before: it is retracted by value. Floating-point sums (avg, stddev, var of doubles) depend
        # on the order rows are added, so each partition's rows are in one task, in one order.
        spread = [render(p, names) for p in node.partition]
        orderable = [quote(c) for c, t in zip(s.input_columns, s.input_types, strict=True)
                     if not t.startswith("map")]
        parts = []
        for gen, weight in ((0, -1), (1, 1)):
            rows_of = contents.where(f"__side = {gen}").drop("__side")
            rows_of = rows_of.repartition(*[F.expr(e) for e in spread]) if spread else rows_of.repartition(1)
            rows_of.sortWithinPartitions(*[F.expr(c) for c in orderable]).createOrReplaceTempView(f"__p{gen}_{tag}")
            query = node.query.copy()
            for t in query.find_all(exp.Table):
                if t.name == D.PARTITION_TABLE:
                    t.set("this", exp.to_identifier(f"__p{gen}_{tag}"))
            # No error routing here: a Python function's error fails the batch, loudly.
            sql = render(query, names, carry_errors=False)
            if gen == 0 and s.global_ and fresh:
                # The one partition seen for the first time: its old result is nothing, not the
                # query over no rows (a row, for an aggregate). A partitioned query gives no rows
                # for a partition without rows, and other partitions of the batch are not fresh.
                continue
            parts.append(f"SELECT q.*, CAST({weight} AS BIGINT) AS __w FROM ({sql}) q")
        table = session.sql(" UNION ALL ".join(parts)).toArrow()
        for prefix in ("__all", "__p0", "__p1"):
            session.catalog.dropTempView(f"{prefix}_{tag}")
        return table


def _views_with_rows(frame: DataFrame, views: list[SinkView]) -> tuple[dict[int, bool], int]:
    """Which of `views` have rows (other than errors) in the batch, and whether one of them is of a
    partition seen for the first time (side 2); and how many rows they have: one job over the
    cached batch."""
    ids = ", ".join(str(s.view_id) for s in views)
    rows = frame.where(f"__view IN ({ids}) AND __err IS NULL").groupBy("__view") \
        .agg({"__side": "max", "*": "count"}).collect()
    return {int(r[0]): r["max(__side)"] == 2 for r in rows}, sum(int(r["count(1)"]) for r in rows)


@contextlib.contextmanager
def _recompute_conf(frame: DataFrame | None, rows: int) -> Iterator[None]:
    """Few rows to recompute (a batch's touched partitions, old and new): Spark's settings for
    small inputs while the views' queries run (one shuffle partition, no adaptive re-planning, no
    code generation), as the epoch driver's small queries have; then the streaming query's own.
    12 window-function views after a one-row write: 1.2-1.5 s -> 0.9-1.0 s of Spark jobs."""
    from streamdb.runtime.spark.session import SMALL_INPUT_CONF, SMALL_INPUT_ROWS

    if frame is None or rows > SMALL_INPUT_ROWS:
        yield
        return
    conf = frame.sparkSession.conf
    saved = {key: conf.get(key) for key in SMALL_INPUT_CONF}
    for key, value in SMALL_INPUT_CONF.items():
        conf.set(key, value)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                conf.unset(key)
            else:
                conf.set(key, old)


@dataclass(frozen=True)
class _SinkReads:
    """What the sink takes of every batch, fixed by the compiled pipeline: the rows of the views
    maintained from the batch's output and the error rows (`condition`), with their columns
    (`columns`, one name per line, for Sink.java) as Arrow (`schema`); and the views recomputed
    from the batch's rows."""

    plain: list[SinkView]
    recomputed: list[SinkView]
    condition: str
    columns: str
    schema: pa.Schema

    @classmethod
    def of(cls, compiled: CompiledPipeline) -> _SinkReads:
        from pyspark.sql.pandas.types import to_arrow_schema

        plain = [s for s in compiled.sink.values() if s.recompute is None]
        recomputed = [s for s in compiled.sink.values() if s.recompute is not None]
        ids = ", ".join(str(s.view_id) for s in plain) or "NULL"
        columns = ["__view", "__w", "__err", *dict.fromkeys(c for s in plain for c in s.columns)]
        schema = to_arrow_schema(select(compiled.frame, [quote(c) for c in columns]).schema, timezone="UTC")
        return cls(plain, recomputed, f"__view IN ({ids}) OR __err IS NOT NULL", "\n".join(columns), schema)


class BatchStopped(Exception):
    """The foreachBatch callback's error for a batch whose pipeline is stopping (its job was
    cancelled): Spark sees the batch fail, and the log does not (`_QuietStoppedBatches`)."""


class _QuietStoppedBatches(logging.Filter):
    """py4j logs every exception of a Python callback as an ERROR with both stack traces. A batch
    cancelled by its pipeline's stop (each CREATE or DROP restarts its depth's pipeline; a
    shutdown stops them all) is expected: not logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], BatchStopped))


logging.getLogger("py4j.clientserver").addFilter(_QuietStoppedBatches())


class _BatchFunction:
    """The JVM's foreachBatch callback, without PySpark's wrapper: that one builds a Python
    SparkSession for every batch, several calls into the JVM at ~5 ms each under load
    (Sink.java). The sink gets the batch's Java Dataset."""

    def __init__(self, sink: Callable[[Any, int], None]) -> None:
        self.sink = sink

    def call(self, jdf: Any, batch_id: int) -> None:
        self.sink(jdf, batch_id)

    class Java:
        implements = ["org.apache.spark.sql.execution.streaming.sources.PythonForeachBatchFunction"]


def _foreach_batch(session: SparkSession, writer: Any, sink: Callable[[Any, int], None]) -> None:
    """`writer.foreachBatch(...)` with the sink called with the batch's Java Dataset."""
    from pyspark.java_gateway import ensure_callback_server_started

    gateway = session.sparkContext._gateway
    assert gateway is not None
    helper = gateway.jvm.org.apache.spark.sql.execution.streaming.sources.PythonForeachBatchHelper
    helper.callForeachBatch(writer._jwrite, _BatchFunction(sink))
    ensure_callback_server_started(gateway)


_STATE_VERSION_FILE = re.compile(r"\.?(\d+)(?:_[0-9a-fA-F-]+)?\.(?:changelog|zip|delta|snapshot)(?:\.crc)?")
_BATCH_FILE = re.compile(r"\.?(\d+)(?:_[0-9a-fA-F-]+)?(?:\.crc)?")


def _batch_files(directory: Path, pattern: re.Pattern[str] = _BATCH_FILE) -> list[tuple[int, Path]]:
    """(batch or version, file) of a checkpoint directory's files named by one (and their
    Hadoop checksums)."""
    if not directory.is_dir():
        return []
    return [(int(m.group(1)), f) for f in directory.iterdir() if (m := pattern.fullmatch(f.name)) is not None]


def last_spark_commit(checkpoint: Path) -> int:
    """The last batch Spark's commit log records as done (-1: none)."""
    return max((b for b, f in _batch_files(checkpoint / "commits") if not f.name.startswith(".")), default=-1)


def rewind_checkpoint(checkpoint: Path, committed: int) -> int:
    """Make Spark's checkpoint end at batch `committed`, as if it had crashed within the batch
    after it: the commit log past `committed` and the offsets past the batch after it go, and so
    do the state versions written after `committed`'s (batch b writes version b + 1), the
    operator metadata and schema files of later batches with them. Spark then runs `committed +
    1` again from its logged offsets over the state it started from, and plans the batches
    after it afresh (their old state versions, computed from other offsets, must not be read).
    Returns how many batches the commit log had past `committed`. Safe to repeat after a crash
    halfway: the commit log goes first, newest first."""
    later = sorted(((b, f) for b, f in _batch_files(checkpoint / "commits") if b > committed), reverse=True)
    for _, f in later:
        f.unlink(missing_ok=True)
    doomed = [f for b, f in _batch_files(checkpoint / "offsets") if b > committed + 1]
    state = checkpoint / "state"
    if state.is_dir():
        for operator in state.iterdir():
            doomed += [f for b, f in _batch_files(operator / "_metadata" / "v2") if b > committed + 1]
            doomed += [f for b, f in _batch_files(operator / "_stateSchema" / "default") if b > committed + 1]
            for store in operator.iterdir():
                if store.name.isdigit():  # a partition's store (and a join's stores below it)
                    for directory in [store, *(d for d in store.iterdir() if d.is_dir() and d.name != "SSTs")]:
                        doomed += [f for v, f in _batch_files(directory, _STATE_VERSION_FILE) if v > committed + 1]
    for f in doomed:
        f.unlink(missing_ok=True)
    return len({b for b, f in later if not f.name.startswith(".")})


def relocate_checkpoint(checkpoint: Path) -> int:
    """Point the checkpoint's operator metadata at its own state schema files. Spark names them
    by absolute URI (`state/<op>/_metadata/v2/<batch>`: `stateSchemaFilePaths`), so a data
    directory restored or moved elsewhere failed every batch once the old place was gone. Returns
    how many files were rewritten (none unless the directory moved). Only each operator's newest
    file is read when nothing moved; when it did, the newest is rewritten last, so a start
    interrupted halfway finds it still pointing elsewhere and finishes the job."""
    root = "file:" + str(checkpoint.absolute())
    rewritten = 0
    for meta_dir in sorted(checkpoint.glob("state/*/_metadata/v2")):
        files = sorted((f for f in meta_dir.iterdir() if f.name.isdigit() and f.is_file()), key=lambda f: int(f.name))
        if not files or _relocated(files[-1], root) is None:
            continue
        for meta in files:
            text = _relocated(meta, root)
            if text is None:
                continue
            tmp = meta.with_name(f".{meta.name}.relocating")
            tmp.write_text(text)
            tmp.replace(meta)
            meta.with_name(f".{meta.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum of the old text
            rewritten += 1
    return rewritten


def _relocated(meta: Path, root: str) -> str | None:
    """The metadata file's text with its schema paths under `root` (None: nothing to change, or
    a file that is not what Spark writes, left for Spark to report if it matters)."""
    try:
        text = meta.read_text()
    except (OSError, UnicodeDecodeError):
        log.warning("checkpoint metadata %s unreadable: left as it is", meta)
        return None
    lines = text.splitlines()
    changed = False
    for i, line in enumerate(lines):
        if "stateSchemaFilePaths" not in line:
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            log.warning("checkpoint metadata %s is not the JSON expected: left as it is", meta)
            return None
        for store in doc.get("stateStoreInfo", []):
            paths = store.get("stateSchemaFilePaths") or []
            fixed = [root + p[p.rfind("/state/"):] if "/state/" in p else p for p in paths]
            if fixed != paths:
                store["stateSchemaFilePaths"] = fixed
                lines[i] = json.dumps(doc, separators=(",", ":"))
                changed = True
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "") if changed else None


def _from_spark(e: BaseException) -> bool:
    return type(e).__module__.startswith(("pyspark", "py4j"))


def _errors(table: pa.Table) -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {}
    if table.num_rows == 0 or table.column("__err").null_count == table.num_rows:
        return out
    for view, err, w in zip(*(table.column(c).to_pylist() for c in ("__view", "__err", "__w")), strict=True):
        if err is not None:
            by_view = out.setdefault(view, {})
            by_view[err] = by_view.get(err, 0) + w
    return out


def _split(table: pa.Table, views: list[SinkView]) -> dict[int, pa.Table]:
    import pyarrow.compute as pc

    out: dict[int, pa.Table] = {}
    if table.num_rows == 0:
        return out
    if table.column("__err").null_count != table.num_rows:
        table = table.filter(pc.is_null(table.column("__err")))
    ids = table.column("__view")
    for s in views:
        rows = table.filter(pc.equal(ids, s.view_id))
        if rows.num_rows:
            out[s.view_id] = rows.select([*s.columns, "__w"])
    return out


def _unwrap(e: BaseException) -> StreamDBError | None:
    """The StreamDBError raised in the sink, if that is what ended the query."""
    seen = 0
    cur: BaseException | None = e
    while cur is not None and seen < 10:
        if isinstance(cur, StreamDBError):
            return cur
        cur = cur.__cause__ or cur.__context__
        seen += 1
    return None
