"""CREATE [OR REPLACE] VIEW: a catalog entry only (no Spark job, nothing to maintain)."""

from __future__ import annotations

from dataclasses import replace

from streamdb.catalog import CatalogSnapshot, RelationDef
from streamdb.errors import (
    DependentObjectsStillExist,
    DuplicateTable,
    InsufficientPrivilege,
    Notice,
    UndefinedTable,
)
from streamdb.planner.create_plain_view import CreatePlainViewPlan, replacement
from streamdb.runtime.api import ExecutionResult
from streamdb.runtime.statements.context import ExecContext


def _materialized_dependents(catalog: CatalogSnapshot, view: RelationDef) -> list[RelationDef]:
    """Materialized views reading `view`, directly or through other plain views."""
    found: list[RelationDef] = []
    pending, seen = [view], {view.id}
    while pending:
        for d in catalog.dependents(pending.pop().id):
            if d.id in seen:
                continue
            seen.add(d.id)
            if d.kind == "view":
                pending.append(d)
            else:
                found.append(d)
    return found


async def execute(plan: CreatePlainViewPlan, ctx: ExecContext) -> ExecutionResult:
    engine = ctx.engine
    rel = replace(plan.relation, owner=ctx.session.user)  # the creating role owns it
    async with engine.ddl_lock:
        catalog = engine.catalog.snapshot()
        if any(catalog.by_id(d) is None and catalog.object_by_id(d) is None for d in rel.depends_on):
            raise UndefinedTable(f'a relation view "{rel.name}" reads was dropped meanwhile')
        existing = catalog.holding_name(rel.name)
        if existing is None:
            commit, _, snapshot = engine.catalog.plan_change(add=[rel])
        elif plan.if_not_exists:
            return ExecutionResult("CREATE VIEW", notices=[Notice(
                f'relation "{rel.name}" already exists, skipping', sqlstate="42P07")])
        elif not plan.or_replace or existing.kind == "index":
            raise DuplicateTable(f'relation "{rel.name}" already exists')
        else:
            new = replacement(existing, rel)
            if not catalog.is_owner(ctx.session.user, existing):
                raise InsufficientPrivilege(f"must be owner of view {existing.name}")
            # A materialized view's stored result was computed with the old query: it would
            # silently disagree with the new one.
            maintained = _materialized_dependents(catalog, existing)
            if maintained:
                raise DependentObjectsStillExist(
                    f'cannot replace view {rel.name} because materialized views read it',
                    detail="\n".join(f"{d.shown_kind.replace('_', ' ')} {d.name} reads view {rel.name}"
                                     for d in maintained),
                    hint="Drop them first (or DROP VIEW ... CASCADE), then create them again.")
            commit, _, snapshot = engine.catalog.plan_change(update=[new])
        await engine.storage.commit_async(commit)
        engine.catalog.applied(snapshot)
    return ExecutionResult("CREATE VIEW")
