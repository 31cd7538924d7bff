"""A push query's own materialized view: created when a push query that is not linear starts,
dropped when it ends (docs/views.md, "Push queries over aggregates and joins").

The view is an ordinary materialized view to the pipelines (its state in Spark's state store, its
changes in its log), kept out of the catalog's relations (`CatalogSnapshot.transient`): no
listing, name or DROP of a user's meets it. The push query reads the view's log like a push
query over any view: an epoch costs its changes, not its inputs.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING

from sqlglot import exp

from streamdb.errors import StreamDBError, UndefinedTable
from streamdb.planner import subscribe as subscribe_planner
from streamdb.planner.context import PlanContext, SessionInfo
from streamdb.planner.plans import CreateViewPlan
from streamdb.runtime.statements.create_relation import (
    background,
    commit_and_apply,
    remove_if_present,
    remove_once_added,
)
from streamdb.runtime.subscriptions import Subscription
from streamdb.runtime.views import result_rows

if TYPE_CHECKING:
    from streamdb.runtime.engine import Engine

_SYSTEM_SESSION = SessionInfo("streamdb", "streamdb")
log = logging.getLogger(__name__)


async def start(engine: Engine, sub: Subscription, view: CreateViewPlan, user: str) -> None:
    """Create the push query's view, wait until it holds the result as of now, and point the
    subscription at its log: with a snapshot, from the log's start (the result, then its
    changes); without, from where it held the result as of the push query's start (its pipeline
    runs no batch past its inputs' offsets then), so writes made while the view started come as
    changes too, as in Materialize's SUBSCRIBE.

    The statement waits for the view's first result (a pipeline start and its backfill: seconds),
    as CREATE MATERIALIZED VIEW does."""
    rel = replace(view.relation, name=f"subscribe_{sub.id}", owner=user, created_at=time.time())
    adding: asyncio.Future[None] | None = None
    try:
        async with engine.ddl_lock:
            catalog = engine.catalog.snapshot()
            if any(catalog.by_id(d) is None and catalog.object_by_id(d) is None for d in rel.depends_on):
                raise UndefinedTable("a relation the push query reads was dropped",
                                     hint="Run the push query again.")
            commit, added, snapshot = engine.catalog.plan_change(add=[rel])
            rel = added[0]
            if sub.baseline is not None:  # without a snapshot: its first batch ends where it began
                engine.views.pipelines.hold(rel.id, engine.views.input_offsets(rel, catalog, sub.baseline))
            # Shielded, as a staging view's (create_relation._replace_view): a cancel landing in the
            # commit must not leave the view without its removal below.
            adding = asyncio.ensure_future(commit_and_apply(engine, commit, snapshot))
            await asyncio.shield(adding)
        sub.view_id = rel.id
        await engine.flush(only={rel.id})
        status = engine.views.status.get(rel.id)
        if status is not None and status.error is not None:
            others = engine.views.pipelines.release_failed(rel.id)
            if others:
                engine.views.notify()
            raise StreamDBError(f"push query failed: {status.error}", sqlstate=status.error_sqlstate or "XX000")
        await asyncio.to_thread(_attach, engine, sub, rel.name)
    except BaseException:
        engine.views.pipelines.held_result(rel.id)
        if adding is not None:
            await asyncio.shield(remove_once_added(adding, engine, rel.id))
        raise


def _attach(engine: Engine, sub: Subscription, name: str) -> None:
    """Point the subscription at its view's log (in a worker thread: reads the storage)."""
    catalog = engine.catalog.snapshot()
    view = catalog.transient.get(name)
    if view is None:
        raise UndefinedTable("a relation the push query reads was dropped", hint="Run the push query again.")
    # Planned as a read of the view by the system (the push query's own privileges were checked
    # when it was planned): a linear query over the view's log.
    ctx = PlanContext(catalog.with_visible(view), _SYSTEM_SESSION)
    changes = subscribe_planner.plan(exp.select("*").from_(exp.to_table(name)), ctx, snapshot=sub.plan.snapshot)
    assert changes.delta_sql is not None, "a read of a whole view is linear"
    plan = replace(changes, columns=sub.plan.columns)
    if plan.snapshot:
        sub.processed = {}  # the whole log: the view's rows, then every change
    elif (held := engine.views.pipelines.held_result(view.id)) is not None:
        # Its pipeline's first batches ended where the push query began: from there on, the
        # view's log holds exactly the changes since.
        sub.release_baseline()
        sub.processed, sub.started = {view.id: held}, True
        log.info("push query %s: its view held the result as of its start", sub.id)
    else:
        log.info("push query %s: its result as of its start is computed from its inputs", sub.id)
        # From the log's end, once the changes between the push query's start and this result
        # are sent: the result now less the result then (that one computed once, from the inputs).
        with engine.storage.snapshot() as snap:
            end = engine.reader.end_offsets(view, snap)
            rows = engine.reader.read_state(view, snap).select([c.name for c in view.columns])
        now = result_rows(rows, plan.query.columns)
        baseline = engine.views.baseline_result(sub, sub.plan.query, catalog)
        then = baseline[0] if baseline is not None else Counter()
        sub.deliver([(row, now[row] - then[row]) for row in now | then if now[row] != then[row]],
                    dt.datetime.now(dt.UTC))
        sub.processed, sub.started = {view.id: end}, True
    sub.plan = plan
    sub.waiting = False


def stop(engine: Engine, sub: Subscription) -> None:
    """The push query ended: its view goes (in the background; the next start drops what a crash
    leaves, `drop_leftovers`)."""
    if sub.view_id is not None:
        background(remove_if_present(engine, sub.view_id))


def drop_leftovers(engine: Engine) -> None:
    """At start, before the pipelines: the views of push queries that ran before a restart."""
    leftovers = list(engine.catalog.snapshot().transient.values())
    if leftovers:
        commit, _, snapshot = engine.catalog.plan_change(remove=leftovers)
        engine.storage.commit(commit)
        engine.catalog.applied(snapshot)
