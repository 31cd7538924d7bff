"""CREATE STREAM / CREATE TABLE."""

from __future__ import annotations

from dataclasses import replace

from streamdb.errors import (
    DuplicateTable,
    InsufficientPrivilege,
    InvalidParameterValue,
    Notice,
    StreamDBError,
)
from streamdb.planner.plans import CreateRelationPlan, CreateViewPlan
from streamdb.runtime.api import ExecutionResult
from streamdb.runtime.statements.context import ExecContext


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
    async with engine.ddl_lock:
        existing = engine.catalog.snapshot().get(rel.name)
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


async def _hydrate(ctx: ExecContext, name: str, tag: str) -> ExecutionResult:
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
        error = StreamDBError(f'materialized view "{name}" could not be computed: {status.error}',
                              sqlstate=status.error_sqlstate or "XX000")
        # The views that shared its pipeline failed with it: they go on without it before the
        # CREATE answers, so the next statement does not see them failing for this one's sake.
        others = engine.views.pipelines.release_failed(view.id)
        if others:
            await engine.flush(only=others)
        raise error
    return ExecutionResult(tag, notices=[n for n in notices if f'"{name}"' not in n.message])
