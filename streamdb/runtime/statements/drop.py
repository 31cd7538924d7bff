"""DROP STREAM | TABLE [IF EXISTS] [CASCADE]."""

from __future__ import annotations

from streamdb.catalog import RelationDef
from streamdb.errors import (
    DependentObjectsStillExist,
    InsufficientPrivilege,
    Notice,
    UndefinedTable,
    WrongObjectType,
)
from streamdb.planner.plans import DropPlan
from streamdb.runtime.api import ExecutionResult
from streamdb.runtime.statements.context import ExecContext

_WORD = {"stream": "STREAM", "table": "TABLE", "view": "VIEW", "materialized_view": "MATERIALIZED VIEW"}


async def execute(plan: DropPlan, ctx: ExecContext) -> ExecutionResult:
    engine = ctx.engine
    notices = []
    async with engine.ddl_lock:
        catalog = engine.catalog.snapshot()
        to_drop: dict[int, RelationDef] = {}
        for name in plan.names:
            rel = catalog.get(name)
            if rel is None:
                if plan.if_exists:
                    notices.append(Notice(f'{plan.kind.replace("_", " ")} "{name}" does not exist, skipping'))
                    continue
                raise UndefinedTable(f'{plan.kind.replace("_", " ")} "{name}" does not exist')
            if rel.shown_kind != plan.kind:
                raise WrongObjectType(f'"{name}" is not a {plan.kind.replace("_", " ")}',
                                      hint=f"Use DROP {_WORD[rel.shown_kind]} to remove a "
                                           f"{rel.shown_kind.replace('_', ' ')}.")
            if not catalog.is_owner(ctx.session.user, rel):
                raise InsufficientPrivilege(f"must be owner of {_WORD[rel.shown_kind].lower()} {name}")
            owner = dict(rel.extra).get("dead_letters_of")
            if owner and catalog.get(str(owner)) is not None and str(owner) not in plan.names:
                raise DependentObjectsStillExist(
                    f'stream {name} holds the bad records of external stream {owner}',
                    hint=f"It is dropped with {owner}: DROP STREAM {owner}.")
            pending = [rel]
            while pending:
                r = pending.pop()
                if r.id in to_drop:
                    continue
                errors = dict(r.extra).get("dead_letters")
                if errors and (companion := catalog.get(str(errors))) is not None:
                    to_drop[companion.id] = companion
                deps = [d for d in catalog.dependents(r.id) if d.id not in to_drop]
                if deps and not plan.cascade:
                    raise DependentObjectsStillExist(
                        f'cannot drop {r.kind.replace("_", " ")} {r.name} because other objects depend on it',
                        detail="\n".join(f"{d.kind.replace('_', ' ')} {d.name} depends on "
                                         f"{r.kind.replace('_', ' ')} {r.name}" for d in deps),
                        hint="Use DROP ... CASCADE to drop the dependent objects too.")
                to_drop[r.id] = r
                pending.extend(deps)
        if to_drop:
            commit, _, snapshot = engine.catalog.plan_change(remove=list(to_drop.values()))
            await engine.storage.commit_async(commit)
            engine.catalog.applied(snapshot)
            for rel_id in to_drop:
                engine.reader.forget(rel_id)
                engine.watermarks.forget(rel_id)
                engine.forget_writes(rel_id)
    engine.sync_connectors()
    return ExecutionResult(f"DROP {_WORD[plan.kind]}", notices=notices)
