"""Prometheus metrics of one engine (docs/metrics.md).

Events (a statement ran, a connection opened, a batch was appended, an epoch finished) update
counters and histograms where they happen. State (views' lag, push queries' buffers, sources'
record counts) is read from the engine when Prometheus scrapes, by `EngineCollector`: nothing to
keep in sync, and a dropped view's series simply disappear. A scrape reads in-memory status and
storage offsets only: it never touches Spark.

Each engine owns its registry (not prometheus-client's global one), so several engines in one
process (tests) do not share or clash over metrics.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from sqlglot import exp

from streamdb.sql import ast as S
from streamdb.storage.base import Commit

if TYPE_CHECKING:
    from streamdb.runtime.engine import Engine

# Point lookups take a millisecond, Spark-backed statements seconds: buckets cover both.
STATEMENT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                     300.0)
# An epoch is at least one Spark job (50-90 ms locally) and may take minutes on a big recompute.
EPOCH_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

# Which maintained query an epoch or a Spark failure belongs to (the `query` label).
MATERIALIZED_VIEW = "materialized_view"
PUSH_QUERY = "push_query"

_QUERY_TYPES = (exp.Select, exp.Union, exp.Intersect, exp.Except, exp.Values, exp.Subquery)
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")
_NOT_LABEL_SAFE = re.compile(r"[^a-z0-9_]+")


def statement_kind(ast: Any) -> str:
    """A statement's kind for the `kind` label: few values (one per kind of statement), never
    anything from the statement's text such as names or literals."""
    if isinstance(ast, _QUERY_TYPES):
        return "select"
    if isinstance(ast, S.SelectStream):
        return "select_stream"
    if isinstance(ast, S.EmitChanges):
        return "push_query"
    if isinstance(ast, exp.Create):
        kind = str(ast.args.get("kind") or "").lower()
        props = ast.args.get("properties")
        if kind == "view" and props is not None and any(
                isinstance(p, exp.MaterializedProperty) for p in props.expressions):
            kind = "materialized_view"
        return "create_" + (_NOT_LABEL_SAFE.sub("_", kind) or "other")
    if isinstance(ast, exp.Command):
        return "other"  # an unsupported statement: its text is not a bounded set of values
    if isinstance(ast, exp.Expression):
        name = _CAMEL.sub("_", type(ast).__name__).lower()
        return name.removesuffix("_statement")
    return "other"


def _sqlstate_class(sqlstate: str | None) -> str:
    return (sqlstate or "XX000")[:2]


class Metrics:
    """The engine's registry: event metrics updated by the code, state metrics read at scrape time."""

    def __init__(self, engine: Engine | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # Connections (counted by the wire server through ConnectionObserver).
        self.connections = Gauge("streamdb_connections", "Client connections with an open session.", registry=r)
        self.connections_accepted = Counter(
            "streamdb_connections_accepted", "Client connections that completed startup (authenticated, "
            "session opened).", registry=r)
        self.connections_refused = Counter(
            "streamdb_connections_refused", "Client connections refused before a session opened (too many "
            "clients, failed authentication, TLS required, protocol errors), by SQLSTATE.", ["sqlstate"],
            registry=r)
        # Statements.
        self.statements = Counter(
            "streamdb_statements", "Statements executed, by kind and outcome (sqlstate_class 00 when ok).",
            ["kind", "outcome", "sqlstate_class"], registry=r)
        self.statement_duration = Histogram(
            "streamdb_statement_duration_seconds", "Time to execute a statement (for a push query or a "
            "COPY: until its first result, not its whole life).", ["kind"], buckets=STATEMENT_BUCKETS,
            registry=r)
        # Maintenance of views and push queries.
        self.epoch_duration = Histogram(
            "streamdb_epoch_duration_seconds", "Duration of one maintenance epoch (micro-batch) of a "
            "materialized view or a push query, from its snapshot to its result applied.", ["query"],
            buckets=EPOCH_BUCKETS, registry=r)
        self.spark_failures = Counter(
            "streamdb_spark_job_failures", "Spark jobs of view or push query maintenance that failed.",
            ["query"], registry=r)
        # Appended log records, kept by relation id and named at scrape time (see EngineCollector).
        self._appends_lock = threading.Lock()
        self._appended: dict[int, list[int]] = {}  # relation id -> [records, bytes]
        for query in (MATERIALIZED_VIEW, PUSH_QUERY):  # present from the start, at 0
            self.spark_failures.labels(query)
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        if engine is not None:
            r.register(EngineCollector(engine, self))

    # ---- events ------------------------------------------------------------------------

    def connection_opened(self) -> None:
        self.connections_accepted.inc()
        self.connections.inc()

    def connection_closed(self) -> None:
        self.connections.dec()

    def connection_refused(self, sqlstate: str) -> None:
        self.connections_refused.labels(sqlstate).inc()

    def statement_done(self, kind: str, seconds: float, sqlstate: str | None) -> None:
        """A statement finished: `sqlstate` None when it succeeded, its error's SQLSTATE otherwise."""
        if sqlstate is None:
            self.statements.labels(kind, "ok", "00").inc()
        else:
            self.statements.labels(kind, "error", _sqlstate_class(sqlstate)).inc()
        self.statement_duration.labels(kind).observe(seconds)

    def statement_unparsed(self, sqlstate: str) -> None:
        """A query string that did not parse: no kind, no duration worth measuring."""
        self.statements.labels("unparsed", "error", _sqlstate_class(sqlstate)).inc()

    def committed(self, commit: Commit) -> None:
        """A commit is durable: count the records and bytes it appended to each relation's log."""
        if not commit.appends:
            return
        with self._appends_lock:
            for a in commit.appends:
                totals = self._appended.setdefault(a.relation_id, [0, 0])
                totals[0] += a.count
                totals[1] += len(a.payload)

    def epoch_done(self, query: str, seconds: float) -> None:
        self.epoch_duration.labels(query).observe(seconds)

    def spark_failed(self, query: str, jobs: int = 1) -> None:
        self.spark_failures.labels(query).inc(jobs)

    def appended(self) -> dict[int, tuple[int, int]]:
        """Records and bytes appended so far, by relation id."""
        with self._appends_lock:
            return {k: (v[0], v[1]) for k, v in self._appended.items()}

    def forget_relations(self, relation_ids: list[int]) -> None:
        """Dropped relations: their counts go (relation ids are never reused)."""
        with self._appends_lock:
            for rel_id in relation_ids:
                self._appended.pop(rel_id, None)


class EngineCollector(Collector):
    """State-derived metrics, computed from the engine at each scrape."""

    def __init__(self, engine: Engine, metrics: Metrics) -> None:
        self.engine = engine
        self.metrics = metrics

    def describe(self) -> list[Metric]:
        return []  # the families are only known at collect time; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        yield from self._log_appends()
        yield from self._storage_commits()
        yield from self._views()
        yield from self._push_queries()
        yield from self._sources()
        yield from self._spark()

    def _spark(self) -> Iterator[Metric]:
        """Readiness for probes and benchmarks: views and Spark-backed reads wait until it is 1."""
        spark = self.engine.spark
        if spark is None:
            return  # Spark disabled: no series
        yield GaugeMetricFamily("streamdb_spark_ready", "1 once the Spark runtime has started and is ready, "
                                "0 while it starts, has failed or is stopped.",
                                value=1 if spark.status == "ready" else 0)

    def _log_appends(self) -> Iterator[Metric]:
        catalog = self.engine.catalog.snapshot()
        records = CounterMetricFamily("streamdb_log_appended_records", "Change records appended to a "
                                      "relation's log since the server started.", labels=["relation", "kind"])
        size = CounterMetricFamily("streamdb_log_appended_bytes", "Bytes of encoded change batches appended "
                                   "to a relation's log since the server started (before storage "
                                   "compression).", labels=["relation", "kind"])
        dropped = []
        for rel_id, (count, nbytes) in sorted(self.metrics.appended().items()):
            rel = catalog.by_id(rel_id)
            if rel is None:
                dropped.append(rel_id)  # its series end
                continue
            records.add_metric([rel.name, rel.shown_kind], count)
            size.add_metric([rel.name, rel.shown_kind], nbytes)
        self.metrics.forget_relations(dropped)
        yield records
        yield size

    def _storage_commits(self) -> Iterator[Metric]:
        """Group commit at work: commits / groups is how many commits one durable write carried."""
        storage = self.engine.storage
        commits, groups = getattr(storage, "commits_written", None), getattr(storage, "groups_written", None)
        if not isinstance(commits, int) or not isinstance(groups, int):
            return  # a log backend without group commit
        yield CounterMetricFamily("streamdb_storage_commits", "Commits made durable in the data directory's "
                                  "log since the server started.", value=commits)
        yield CounterMetricFamily("streamdb_storage_commit_groups", "Durable writes (one fsync each) that "
                                  "carried those commits: several sessions' commits share one.", value=groups)
        ingested = getattr(storage, "batches_ingested", None)
        if isinstance(ingested, int):
            yield CounterMetricFamily("streamdb_storage_ingested_batches", "Log batches written as SST files "
                                      "of their own (large ones), not through the WAL and the memtable.",
                                      value=ingested)
        files = getattr(storage, "sst_files", None)
        if files is not None:
            built = CounterMetricFamily("streamdb_storage_sst_files_built", "SST files of large batches, by "
                                        "who built them: the helper process (without the server's GIL) or "
                                        "the server (the helper's first build, or one it failed).",
                                        labels=["by"])
            built.add_metric(["helper"], files.built_by_helper)
            built.add_metric(["server"], files.built_here)
            yield built

    def _views(self) -> Iterator[Metric]:
        engine = self.engine
        catalog = engine.catalog.snapshot()
        views = sorted((r for r in catalog.relations.values() if r.kind == "materialized_view"),
                       key=lambda r: r.name)
        lag = GaugeMetricFamily("streamdb_view_lag_records", "Input change records written but not yet "
                                "reflected in the view (SHOW QUERIES' lag).", labels=["view"])
        staleness = GaugeMetricFamily(
            "streamdb_view_staleness_seconds", "Freshness: 0 while the view reflects every write; otherwise "
            "seconds since the snapshot its last epoch read (or since it was created, before any epoch).",
            labels=["view"])
        last_epoch = GaugeMetricFamily("streamdb_view_last_epoch_timestamp_seconds", "Unix time the view's "
                                       "last epoch finished (absent before one since the server started).",
                                       labels=["view"])
        epochs = CounterMetricFamily("streamdb_view_epochs", "Maintenance epochs the view has run "
                                     "(kept across restarts).", labels=["view"])
        failed = GaugeMetricFamily("streamdb_view_failed", "1 while the view's maintenance is failing "
                                   "(SHOW QUERIES shows the error), else 0.", labels=["view"])
        now = time.time()
        status = dict(engine.views.status)  # a copy: the maintainer's thread may add views meanwhile
        with engine.storage.snapshot() as snap:
            for view in views:
                st = status.get(view.id)
                processed = st.processed if st is not None else {}
                behind = 0
                for rel_id in view.depends_on:
                    rel = catalog.by_id(rel_id)
                    if rel is None:
                        continue
                    ends = engine.reader.end_offsets(rel, snap)
                    behind += sum(ends) - sum(processed.get(rel_id, (0,) * len(ends)))
                lag.add_metric([view.name], behind)
                if behind <= 0:
                    stale = 0.0
                elif st is not None and st.last_epoch_at is not None:
                    stale = now - (st.last_epoch_at - (st.last_epoch_ms or 0.0) / 1000)
                else:
                    stale = now - view.created_at
                staleness.add_metric([view.name], max(0.0, stale))
                if st is not None and st.last_epoch_at is not None:
                    last_epoch.add_metric([view.name], st.last_epoch_at)
                epochs.add_metric([view.name], st.epochs if st is not None else 0)
                failed.add_metric([view.name], 1 if st is not None and st.error else 0)
        yield from (lag, staleness, last_epoch, epochs, failed)
        state = GaugeMetricFamily("streamdb_pipeline_state_rows", "Entries a view pipeline keeps in "
                                  "Spark's state stores (all its layers), as of its last committed batch.",
                                  labels=["pipeline"])
        for name, rows in sorted(engine.views.pipelines.state_rows().items()):
            state.add_metric([name], rows)
        yield state

    def _push_queries(self) -> Iterator[Metric]:
        subs = list(self.engine.views.subscriptions.values())
        count = GaugeMetricFamily("streamdb_push_queries", "Running push queries (EMIT CHANGES, SUBSCRIBE).")
        count.add_metric([], len(subs))
        buffered = GaugeMetricFamily("streamdb_push_query_buffered_changes", "Changes of a push query waiting "
                                     "for its client to read them (it fails past subscriber_buffer_changes).",
                                     labels=["push_query"])
        for sub in sorted(subs, key=lambda s: s.id):
            buffered.add_metric([str(sub.id)], sub.unread)
        yield count
        yield buffered

    def _sources(self) -> Iterator[Metric]:
        engine = self.engine
        catalog = engine.catalog.snapshot()
        records = CounterMetricFamily("streamdb_source_records", "Records a source (Kafka, file) added to its "
                                      "stream (kept across restarts).", labels=["source"])
        bad = CounterMetricFamily("streamdb_source_bad_records", "Records a source could not decode and kept "
                                  "in its dead-letter stream (kept across restarts).", labels=["source"])
        failed = GaugeMetricFamily("streamdb_source_failed", "1 while the source cannot start or is retrying "
                                   "after an error (SHOW SOURCES shows why), else 0.", labels=["source"])
        for rel in sorted(catalog.relations.values(), key=lambda r: r.name):
            if not dict(rel.extra).get("external"):
                continue
            st = engine.sources.status(rel.id)
            records.add_metric([rel.name], st.records if st is not None else 0)
            bad.add_metric([rel.name], st.bad_records if st is not None else 0)
            broken = rel.id in engine.sources.failed or (st is not None and st.state == "retrying")
            failed.add_metric([rel.name], 1 if broken else 0)
        yield from (records, bad, failed)


def exposition(engine: Engine) -> tuple[bytes, str]:
    """The body and content type of a /metrics response."""
    return generate_latest(engine.metrics.registry), CONTENT_TYPE_LATEST
