"""The relations' change logs as one Spark streaming source, read by the tasks where they run.

One source serves a whole pipeline (every view of it): each row is one change of one relation,
in a wide schema: `__rel` (relation id), `__part`, `__off` (the change's offset in its log
partition), `__tag` (a view id for the rows of that view's backfill, else NULL), `__w` (weight),
`__rowtime`, then each relation's columns as `r<id>_<i>` (NULL for the other relations' rows).

Offsets are plain JSON: `{"rels": {rel: [end per partition]}, "views": {view: {rel: [J...]}},
"gens": {view: generation}, "bf": {view: {rel: [backfilled up to, per partition]}}}`; a view's
backfill progress carries over only within its generation (`_same_generation`).
`latestOffset` (on the driver side, in pyspark's source runner) reads the logs' current ends
(bounded by the plan's `hold`, if any: `holding`);
the partitions of a batch are a pure function of its start and end offsets, so a batch replayed
after a crash reads exactly the same changes. A view joins the live stream at offsets J fixed
when its pipeline (re)starts: it takes live changes at or after J, and the first batch whose end
names the view starts its backfill: every change before J, tagged with its id, over as many
batches as the per-batch budget (MAX_ROWS) needs. Reads
happen in `read()`, on the executors, through this process's log reader (storage/readers.py).
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

NAME = "streamdb_log"
# Changes per input partition: a full batch is read by two tasks (one per core of a laptop).
CHUNK = 125_000
# Changes per micro-batch at most: a backlog (or a view's history) goes through in several batches.
# It bounds the memory a batch takes on its way to the serving store (the server turns each
# output row into Python values): 2M rows per batch took the server to 2.4 GiB on Nexmark q0.
# (LogStream.java has the same defaults; the plan's "max_rows" is what both use.)
MAX_ROWS = 250_000
BASE_FIELDS = (("__rel", pa.int32()), ("__part", pa.int32()), ("__off", pa.int64()), ("__tag", pa.int32()),
               ("__w", pa.int64()), ("__rowtime", pa.timestamp("us", tz="UTC")))
SEED_RELATION = -1  # the rows that start global aggregates of a view being backfilled


def column_name(relation_id: int, index: int) -> str:
    return f"r{relation_id}_{index}"


class _Range(InputPartition):
    def __init__(self, relation_id: int, partition: int, start: int, end: int, tag: int | None) -> None:
        self.relation_id = relation_id
        self.partition = partition
        self.start = start
        self.end = end
        self.tag = tag


class LogSource(DataSource):
    """Options: `plan`, JSON with `log` (LogReaderSpec fields), `relations` ({id: {partitions,
    columns: [[log column, wide name]...]}}), `views` (join points), `gens` (generations), `schema` (Arrow schema as
    [[name, type string]...]) and `spark_schema` (the same as a Spark StructType's JSON)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> Any:
        from pyspark.sql.types import StructType

        return StructType.fromJson(json.loads(json.loads(self.options["plan"])["spark_schema"]))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return LogStreamReader(json.loads(self.options["plan"]))


class LogStreamReader(DataSourceStreamReader):
    def __init__(self, plan: dict[str, Any]) -> None:
        self.plan = plan

    def _reader(self) -> Any:
        from streamdb.storage.base import LogReaderSpec
        from streamdb.storage.readers import open_log_reader

        return open_log_reader(LogReaderSpec(**self.plan["log"]))

    def initialOffset(self) -> dict[str, Any]:
        return {"rels": {}, "views": {}, "bf": {}}

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadMaxRows

        return ReadMaxRows(int(self.plan.get("max_rows", MAX_ROWS)))

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:  # type: ignore[override]
        """The next batch's end: live changes first, then backfills, at most `limit` changes."""
        budget = getattr(limit, "max_rows", None)
        left = [budget if budget is not None else 1 << 62]
        views = self.plan["views"]
        floors = _floors(views)

        def take(lo: int, hi: int) -> int:
            n = max(0, min(hi - lo, left[0]))
            left[0] -= n
            return lo + n

        rels: dict[str, list[int]] = {}
        with self._reader().snapshot() as snap:
            ends_of = {rid: [snap.end_offset(int(rid), p) for p in range(spec["partitions"])]
                       for rid, spec in self.plan["relations"].items()}
        starts_of = {rid: _pad(start.get("rels", {}).get(rid) or floors.get(rid) or ends, len(ends))
                     for rid, ends in ends_of.items()}
        hold = self.plan.get("hold") or {}
        if not holding(hold, start, starts_of):
            hold = {}
        for rid, ends in ends_of.items():
            if rid in hold:  # no partition past its hold while one is below its own (holding())
                ends = [min(hi, max(lo, h)) for lo, hi, h in zip(starts_of[rid], ends, _pad(hold[rid], len(ends)),
                                                                  strict=True)]
            rels[rid] = [take(lo, hi) if lo < hi else lo for lo, hi in zip(starts_of[rid], ends, strict=True)]
        bf: dict[str, dict[str, list[int]]] = {}
        gens = self.plan.get("gens", {})
        for vid, joins in views.items():
            done = start.get("bf", {}).get(vid, {}) if _same_generation(start, views, gens, vid) else {}
            bf[vid] = {rid: [take(lo, j) for lo, j in zip(_pad(done.get(rid, []), len(js)), js, strict=True)]
                       for rid, js in joins.items()}
        out = {"rels": rels, "views": views, "gens": gens, "bf": bf}
        tick_ms = int(self.plan.get("tick_ms") or 0)
        if tick_ms:  # temporal filters: a batch at every tick, input or not (LogStream.java)
            out["tick"] = int(time.time() * 1000) // tick_ms
        return out

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        out: list[InputPartition] = []
        floors = _floors(end.get("views", {}))
        for rid, ends in end.get("rels", {}).items():
            starts = start.get("rels", {}).get(rid) or floors.get(rid) or list(ends)
            for p, (lo, hi) in enumerate(zip(_pad(starts, len(ends)), ends, strict=True)):
                _chunks(out, int(rid), p, lo, hi, None)
        for vid, progress in end.get("bf", {}).items():
            fresh = not _same_generation(start, end.get("views", {}), end.get("gens", {}), vid)
            if fresh:
                out.append(_Range(SEED_RELATION, 0, 0, 1, int(vid)))
            before = {} if fresh else start.get("bf", {}).get(vid, {})
            for rid, his in progress.items():
                for p, (lo, hi) in enumerate(zip(_pad(before.get(rid, []), len(his)), his, strict=True)):
                    _chunks(out, int(rid), p, lo, hi, int(vid))
        return out

    def read(self, partition: InputPartition) -> Any:
        assert isinstance(partition, _Range)
        schema = _arrow_schema(self.plan)
        if partition.relation_id == SEED_RELATION:
            yield _batch(schema, {"__rel": pa.array([SEED_RELATION], pa.int32())}, 1, partition.tag, 0)
            return
        rel = self.plan["relations"].get(str(partition.relation_id))
        if rel is None:
            return  # dropped since the batch was planned (a replay): nobody reads it
        from streamdb.runtime.changes import decode_batch

        with self._reader().snapshot() as snap:
            for first, count, payload in snap.read(partition.relation_id, partition.partition, partition.start,
                                                   partition.end):
                table = decode_batch(payload)
                lo = max(partition.start - first, 0)
                hi = min(partition.end - first, count)
                if hi <= lo:
                    continue
                table = table.slice(lo, hi - lo)
                own = {"__rel": pa.array(np.full(table.num_rows, partition.relation_id, dtype=np.int32)),
                       "__part": pa.array(np.full(table.num_rows, partition.partition, dtype=np.int32)),
                       "__off": pa.array(np.arange(first + lo, first + hi, dtype=np.int64)),
                       "__w": table.column("__weight").combine_chunks(),
                       "__rowtime": table.column("rowtime").combine_chunks()}
                for log_column, wide in rel["columns"]:
                    own[wide] = table.column(log_column).combine_chunks()
                yield _batch(schema, own, table.num_rows, partition.tag, first + lo)

    def commit(self, end: dict[str, Any]) -> None:
        pass


def _same_generation(start: dict[str, Any], views: dict[str, Any], gens: dict[str, Any], vid: str) -> bool:
    """Whether `start` holds the backfill progress of this generation of the view: the same join
    points and the same generation (a view rebuilt under its id has new operators, whose state
    starts empty: its whole history is backfilled again, and its seed row sent again). Offsets
    written before generations were recorded compare by join points alone."""
    before = start.get("views", {}).get(vid)
    if before is None or before != views.get(vid):
        return False
    return "gens" not in start or start["gens"].get(vid) == gens.get(vid)


def backfill_done(offsets: dict[str, Any], view_id: int, joins: dict[int, tuple[int, ...]], generation: int) -> bool:
    """Whether the generation of the view that joined at `joins` has its whole backfill as of
    these (end) offsets. A batch Spark replays after a restart has the offsets it was planned
    with: another generation's, when the view was rebuilt in between, whose backfill is not
    this one's."""
    key = str(view_id)
    recorded = offsets.get("views", {}).get(key)
    progress = offsets.get("bf", {}).get(key)
    if recorded is None or progress is None:
        return False
    if recorded != {str(rid): list(js) for rid, js in joins.items()}:
        return False
    if "gens" in offsets and offsets["gens"].get(key) != generation:
        return False
    return all(list(progress.get(rid, [])) == list(js) for rid, js in recorded.items())


def holding(hold: dict[str, list[int]], start: dict[str, Any], starts: dict[str, list[int]]) -> bool:
    """Whether the plan's hold (`{rel: [offset per partition]}`: the inputs as of a push query's
    start) still bounds the next batch: while the first batch has not run or any partition is below
    its hold, no partition goes past its own, so one batch ends exactly there and the view then holds
    the result as of those offsets (docs/views.md, "Push queries"; LogStream.java alike)."""
    if not hold:
        return False
    if not start.get("views"):
        return True
    return any(lo < h for rid, hs in hold.items() if rid in starts for lo, h in zip(starts[rid], hs, strict=False))


def _floors(views: dict[str, Any]) -> dict[str, list[int]]:
    """Per relation, the lowest join point of the views: where its live stream must start."""
    floors: dict[str, list[int]] = {}
    for joins in views.values():
        for rid, js in joins.items():
            floors[rid] = [min(a, b) for a, b in zip(floors[rid], js, strict=True)] if rid in floors else list(js)
    return floors


def _pad(values: list[int], n: int) -> list[int]:
    return list(values[:n]) + [0] * (n - len(values))


def _chunks(out: list[InputPartition], rid: int, part: int, lo: int, hi: int, tag: int | None) -> None:
    while lo < hi:
        out.append(_Range(rid, part, lo, min(hi, lo + CHUNK), tag))
        lo += CHUNK


_schemas: dict[str, pa.Schema] = {}


def _arrow_schema(plan: dict[str, Any]) -> pa.Schema:
    key = plan["spark_schema"]
    schema = _schemas.get(key)
    if schema is None:
        from pyspark.sql.pandas.types import to_arrow_schema
        from pyspark.sql.types import StructType

        schema = to_arrow_schema(StructType.fromJson(json.loads(key)), timezone="UTC")
        _schemas[key] = schema
    return schema


def _batch(schema: pa.Schema, own: dict[str, pa.Array], n: int, tag: int | None, first: int) -> pa.RecordBatch:
    arrays = []
    for f in schema:
        a = own.get(f.name)
        if a is None:
            if f.name == "__tag" and tag is not None:
                a = pa.array(np.full(n, tag, dtype=np.int32))
            elif f.name == "__w":
                a = pa.array(np.zeros(n, dtype=np.int64))
            elif f.name in ("__part",):
                a = pa.array(np.zeros(n, dtype=np.int32))
            elif f.name == "__off":
                a = pa.array(np.arange(first, first + n, dtype=np.int64))
            else:
                a = pa.nulls(n, f.type)
        elif a.type != f.type:
            a = a.cast(f.type)
        arrays.append(a)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
