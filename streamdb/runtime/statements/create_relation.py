"""CREATE STREAM / CREATE TABLE."""

from __future__ import annotations

from streamdb.errors import DuplicateTable, Notice
from streamdb.planner.plans import CreateRelationPlan, CreateViewPlan
from streamdb.runtime.api import ExecutionResult
from streamdb.runtime.statements.context import ExecContext


async def execute(plan: CreateRelationPlan | CreateViewPlan, ctx: ExecContext) -> ExecutionResult:
    """CREATE STREAM / TABLE / MATERIALIZED VIEW: one atomic catalog commit."""
    engine = ctx.engine
    rel = plan.relation
    tag = f"CREATE {rel.kind.upper().replace('_', ' ')}"
    or_replace = getattr(plan, "or_replace", False)
    async with engine.ddl_lock:
        existing = engine.catalog.snapshot().get(rel.name)
        remove = []
        if existing is not None:
            if plan.if_not_exists:
                return ExecutionResult(tag, notices=[Notice(
                    f'relation "{rel.name}" already exists, skipping', sqlstate="42P07")])
            if or_replace and existing.kind == rel.kind:
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
        commit, _added, snapshot = engine.catalog.plan_change(add=[rel], remove=remove)
        await engine.storage.commit_async(commit)
        engine.catalog.applied(snapshot)
        for old in remove:
            engine.reader.forget(old.id)
    if rel.kind == "materialized_view":
        engine.notify_write(0)  # compute the view's first result now
    return ExecutionResult(tag)
