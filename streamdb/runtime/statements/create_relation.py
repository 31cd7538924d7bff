"""CREATE STREAM / TABLE / MATERIALIZED VIEW, and CREATE OR REPLACE MATERIALIZED VIEW's swap."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from streamdb.catalog import CatalogSnapshot, RelationDef
from streamdb.errors import (
    DuplicateTable,
    FeatureNotSupported,
    InsufficientPrivilege,
    InvalidParameterValue,
    Notice,
    ObjectInUse,
    StreamDBError,
    UndefinedTable,
)
from streamdb.planner.plans import CreateRelationPlan, CreateViewPlan
from streamdb.runtime.api import ExecutionResult
from streamdb.runtime.catalog_store import pending_drop_key
from streamdb.runtime.statements.context import ExecContext, refuse_if_read_by_others
from streamdb.storage.base import Commit


async def execute(plan: CreateRelationPlan | CreateViewPlan, ctx: ExecContext) -> ExecutionResult:
    """CREATE STREAM / TABLE / MATERIALIZED VIEW: one atomic catalog commit."""
    engine = ctx.engine
    rel = replace(plan.relation, owner=ctx.session.user)  # the creating role owns it
    tag = f"CREATE {rel.shown_kind.upper().replace('_', ' ')}"
    or_replace = getattr(plan, "or_replace", False)
    extra = dict(rel.extra)
    if extra.get("external") == "kafka" and not rel.depends_on and not dict(rel.options).get("bootstrap_servers") \
            and not engine.settings.kafka_bootstrap:
        raise InvalidParameterValue(
            f'external stream "{rel.name}" names no Kafka cluster',
            hint="Give it a connector (CREATE SOURCE CONNECTOR c KAFKA WITH (bootstrap_servers = '...'); "
                 "WITH (connector = 'c', ...)), the option bootstrap_servers, or start the server with "
                 "--kafka-bootstrap.")
    if or_replace and rel.kind == "materialized_view":
        current = engine.catalog.snapshot().get(rel.name)
        if current is not None and current.kind == "materialized_view" and not plan.if_not_exists:
            return await _replace_view(ctx, rel, tag)
    async with engine.ddl_lock:
        existing = engine.catalog.snapshot().holding_name(rel.name)
        remove = []
        if existing is not None:
            if plan.if_not_exists:
                return ExecutionResult(tag, notices=[Notice(
                    f'relation "{rel.name}" already exists, skipping', sqlstate="42P07")])
            if or_replace and existing.kind == rel.kind and existing.shown_kind == rel.shown_kind:
                if not engine.catalog.snapshot().is_owner(ctx.session.user, existing):
                    raise InsufficientPrivilege(f"must be owner of {existing.shown_kind.replace('_', ' ')} "
                                                f"{existing.name}")
                dependents = engine.catalog.snapshot().dependents(existing.id)
                if dependents:
                    from streamdb.errors import DependentObjectsStillExist

                    raise DependentObjectsStillExist(
                        f'cannot replace {rel.kind} "{rel.name}" because other objects depend on it',
                        detail="\n".join(f'{d.kind.replace("_", " ")} {d.name} depends on {rel.kind} {rel.name}'
                                         for d in dependents))
                remove = [existing]
            else:
                raise DuplicateTable(f'relation "{rel.name}" already exists')
        companions = [replace(c, owner=ctx.session.user) for c in getattr(plan, "companions", ())]
        for c in companions:
            if engine.catalog.snapshot().get(c.name) is not None:
                raise DuplicateTable(f'relation "{c.name}" already exists',
                                     detail=f'"{rel.name}" keeps its bad records in a stream of that name.')
        commit, _added, snapshot = engine.catalog.plan_change(add=[rel, *companions], remove=remove)
        await engine.storage.commit_async(commit)
        engine.catalog.applied(snapshot)
        for old in remove:
            engine.reader.forget(old.id)
            engine.watermarks.forget(old.id)
    if companions or remove or extra.get("external"):
        engine.sync_connectors()
    if rel.kind == "materialized_view":
        return await _hydrate(ctx, rel.name, tag)
    return ExecutionResult(tag)


def _check_replaceable(ctx: ExecContext, existing: RelationDef, new: RelationDef) -> None:
    """The caller may replace `existing` by `new`, and nothing reads `existing` that the swap would
    leave reading a dropped view."""
    catalog = ctx.engine.catalog.snapshot()
    if not catalog.is_owner(ctx.session.user, existing):
        raise InsufficientPrivilege(f"must be owner of materialized view {existing.name}")
    if existing.id in new.depends_on:
        raise FeatureNotSupported(f'materialized view "{new.name}" cannot be replaced by a query that reads it')
    refuse_if_read_by_others(catalog, existing, f'replace materialized view "{existing.name}"',
                             "They read the view's changes as they were maintained; drop them, replace the view, "
                             "and create them again.")


async def _replace_view(ctx: ExecContext, rel: RelationDef, tag: str) -> ExecutionResult:
    """CREATE OR REPLACE MATERIALIZED VIEW without a moment of downtime: the new definition is
    created under a name of its own and computed while the old view goes on serving reads; then,
    in one catalog commit, the old view is dropped and the new one takes its name (and its owner
    and grants). A new definition that fails leaves the old view as it was."""
    engine = ctx.engine
    adding: asyncio.Future[None] | None = None
    try:
        async with engine.ddl_lock:
            existing = engine.catalog.snapshot().get(rel.name)
            if existing is None or existing.kind != "materialized_view":
                raise DuplicateTable(f'relation "{rel.name}" already exists') if existing is not None else \
                    UndefinedTable(f'materialized view "{rel.name}" was dropped while it was being replaced')
            _check_replaceable(ctx, existing, rel)
            staging = replace(rel, name=_staging_name(engine.catalog.snapshot(), rel.name), owner=existing.owner,
                              grants=existing.grants)
            commit, added, snapshot = engine.catalog.plan_change(add=[staging])
            staging = added[0]
            # Shielded: a statement timeout landing in this commit left the staging view in the
            # catalog with nothing to remove it (seen under load; after a restart the view read
            # rows of another layout).
            adding = asyncio.ensure_future(commit_and_apply(engine, commit, snapshot))
            await asyncio.shield(adding)
        # Fails, and removes the staging view, if the new definition cannot be computed.
        await _hydrate(ctx, staging.name, tag, shown_name=rel.name)
    except BaseException:
        # A timeout or a cancelled statement too: the old view stays, the new one must not linger.
        if adding is not None:
            await asyncio.shield(remove_once_added(adding, engine, staging.id))
        raise
    async with engine.ddl_lock:
        catalog = engine.catalog.snapshot()
        current, staged = catalog.get(rel.name), catalog.by_id(staging.id)
        try:
            if staged is None:
                raise UndefinedTable(f'the new definition of "{rel.name}" was dropped before it replaced the view')
            if current is None or current.id != existing.id:
                raise ObjectInUse(f'materialized view "{rel.name}" changed while it was being replaced')
            _check_replaceable(ctx, current, rel)
        except Exception:
            if staged is not None:
                commit, _, snapshot = engine.catalog.plan_change(remove=[staged])
                await engine.storage.commit_async(commit)
                engine.catalog.applied(snapshot)
                engine.reader.forget(staged.id)
            raise
        swapped = replace(staged, name=rel.name)
        # The view's indexes follow it where the new definition still has their columns.
        by_name = {c.name: c for c in swapped.columns}
        indexes = [replace(i, depends_on=(swapped.id,), columns=tuple(by_name[c.name] for c in i.columns))
                   for i in catalog.indexes_of(current.id)
                   if {c.name for c in i.columns} | set(dict(i.extra).get("include", ())) <= set(by_name)]
        commit, _, snapshot = engine.catalog.plan_change(remove=[current], rename=[(staged, swapped)],
                                                         update=indexes)
        # The old view's rows stay a moment: a read planned just before the swap still reads them
        # (dropped at once, it would read an empty view). A restart drops what is still pending.
        commit.drop_relations.remove(current.id)
        commit.puts.append((META, pending_drop_key(current.id), b""))
        engine.catalog.keep_replaced(current)
        await engine.storage.commit_async(commit)
        engine.catalog.applied(snapshot)
    asyncio.get_running_loop().call_later(REPLACED_VIEW_GRACE_SECONDS, lambda: background(
        drop_pending(engine, [current.id])))
    return ExecutionResult(tag)


_TASKS: set[asyncio.Task[None]] = set()  # the loop keeps only weak references to tasks


def background(coro: Any) -> None:
    task = asyncio.ensure_future(coro)
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)


REPLACED_VIEW_GRACE_SECONDS = 5.0
META = "meta"


async def drop_pending(engine: Any, rel_ids: list[int]) -> None:
    """Drop the stored data of relations no longer in the catalog (a replaced view's, after its
    grace period, or at start for those a restart interrupted)."""
    commit = Commit(drop_relations=list(rel_ids), deletes=[(META, pending_drop_key(i)) for i in rel_ids])
    await engine.storage.commit_async(commit)
    for rel_id in rel_ids:
        engine.reader.forget(rel_id)
        engine.catalog.forget_replaced(rel_id)


async def commit_and_apply(engine: Any, commit: Any, snapshot: Any) -> None:
    await engine.storage.commit_async(commit)
    engine.catalog.applied(snapshot)


async def remove_once_added(adding: asyncio.Future[None], engine: Any, rel_id: int) -> None:
    """Remove a staging view once the commit that adds it is done (if it was done at all)."""
    try:
        await adding
    except Exception:  # noqa: BLE001 - the add failed: there is nothing to remove
        return
    await remove_if_present(engine, rel_id)


async def remove_if_present(engine: Any, rel_id: int) -> None:
    async with engine.ddl_lock:
        rel = engine.catalog.snapshot().by_id(rel_id)
        if rel is not None:
            commit, _, snapshot = engine.catalog.plan_change(remove=[rel])
            await engine.storage.commit_async(commit)
            engine.catalog.applied(snapshot)
            engine.reader.forget(rel_id)


def _staging_name(catalog: CatalogSnapshot, name: str) -> str:
    """A free name for a view's new definition while it is computed: `<name>__replacing[_n]`."""
    base = f"{name[:48]}__replacing"
    candidate, n = base, 1
    while catalog.get(candidate) is not None:
        n += 1
        candidate = f"{base}_{n}"
    return candidate


async def _hydrate(ctx: ExecContext, name: str, tag: str, shown_name: str | None = None) -> ExecutionResult:
    """Like RisingWave and Materialize, CREATE MATERIALIZED VIEW returns once the view holds its
    query's result, so the next SELECT sees it; a query Spark cannot run fails the CREATE."""
    engine = ctx.engine
    view = engine.catalog.snapshot().get(name)
    notices = await engine.flush(only={view.id} if view is not None else None)
    status = engine.views.status.get(view.id) if view is not None else None
    if view is not None and status is not None and status.error is not None:
        async with engine.ddl_lock:
            current = engine.catalog.snapshot().get(name)
            if current is not None and current.id == view.id:
                commit, _, snapshot = engine.catalog.plan_change(remove=[current])
                await engine.storage.commit_async(commit)
                engine.catalog.applied(snapshot)
                engine.reader.forget(current.id)
        error = StreamDBError(f'materialized view "{shown_name or name}" could not be computed: {status.error}',
                              sqlstate=status.error_sqlstate or "XX000")
        # The views that shared its pipeline failed with it: they go on without it before the
        # CREATE answers, so the next statement does not see them failing for this one's sake.
        others = engine.views.pipelines.release_failed(view.id)
        if others:
            await engine.flush(only=others)
        raise error
    return ExecutionResult(tag, notices=[n for n in notices if f'"{name}"' not in n.message])
