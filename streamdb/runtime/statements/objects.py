"""CREATE / DROP of connectors and sinks: catalog objects that are not relations."""

from __future__ import annotations

from dataclasses import replace

from streamdb.catalog import CatalogSnapshot, RelationDef
from streamdb.errors import (
    DependentObjectsStillExist,
    DuplicateFunction,
    DuplicateObject,
    InsufficientPrivilege,
    Notice,
    UndefinedObject,
    WrongObjectType,
)
from streamdb.planner.connectors import refuse_file_properties
from streamdb.planner.plans import CreateObjectPlan, DropObjectPlan
from streamdb.runtime.api import ExecutionResult
from streamdb.runtime.statements.context import ExecContext


def _tag(kind: str, direction: str | None, aggregate: bool = False) -> str:
    if kind == "function" and aggregate:
        return "AGGREGATE"
    if kind == "connector":
        return f"{direction.upper()} CONNECTOR" if direction else "CONNECTOR"
    return kind.upper()


async def create(plan: CreateObjectPlan, ctx: ExecContext) -> ExecutionResult:
    engine = ctx.engine
    obj = replace(plan.obj, owner=ctx.session.user)  # the creating role owns it
    direction = dict(obj.options).get("direction")
    tag = f"CREATE {_tag(obj.kind, direction, bool(dict(obj.extra).get('aggregate')))}"
    if obj.kind == "connector" and not engine.settings.allow_kafka_file_properties:
        refuse_file_properties(obj.options)
    from streamdb.runtime.connectors.sinks import check_object

    check_object(engine, obj, engine.catalog.snapshot())  # FILE paths under the file root
    if obj.kind == "connector" and dict(obj.options).get("type") == "file":
        from streamdb.runtime.connectors.file_source import confined

        confined(engine.file_root(), dict(obj.options)["path"])  # nothing outside the file root
    async with engine.ddl_lock:
        catalog = engine.catalog.snapshot()
        existing = catalog.object(obj.kind, obj.name)
        replaced: list[RelationDef] = []
        if existing is not None and plan.or_replace:
            if not catalog.is_owner(ctx.session.user, existing):
                raise InsufficientPrivilege(f"must be owner of {obj.kind} {obj.name}")
            if dependents := catalog.dependents(existing.id):
                # A view's running plan calls the old body; swapping it underneath would change
                # rows already computed without recomputing them.
                raise DependentObjectsStillExist(
                    f"cannot replace {obj.kind} {obj.name} because other objects depend on it",
                    detail="\n".join(f"{d.shown_kind.replace('_', ' ')} {d.name} depends on {obj.kind} {obj.name}"
                                     for d in dependents),
                    hint="Drop those objects (or the function with DROP FUNCTION ... CASCADE), then create "
                         "them again over the new definition.")
            replaced.append(existing)
        elif existing is not None:
            if plan.if_not_exists:
                return ExecutionResult(tag, notices=[Notice(f'{obj.kind} "{obj.name}" already exists, skipping',
                                                            sqlstate="42710")])
            if obj.kind == "function":
                raise DuplicateFunction(f"function {obj.name} already exists",
                                        hint="Use CREATE OR REPLACE FUNCTION to change its definition; "
                                             "functions are not overloaded.")
            raise DuplicateObject(f'{obj.kind} "{obj.name}" already exists')
        commit, _, snapshot = engine.catalog.plan_change(add=[obj], remove=replaced)
        await engine.storage.commit_async(commit)
        engine.catalog.applied(snapshot)
    engine.sync_connectors()
    return ExecutionResult(tag)


async def drop(plan: DropObjectPlan, ctx: ExecContext) -> ExecutionResult:
    engine = ctx.engine
    notices = []
    async with engine.ddl_lock:
        catalog = engine.catalog.snapshot()
        remove = []
        for name in plan.names:
            obj = catalog.object(plan.kind, name)
            if obj is None:
                if plan.if_exists:
                    notices.append(Notice(f'{plan.kind} "{name}" does not exist, skipping'))
                    continue
                raise UndefinedObject(f'{plan.kind} "{name}" does not exist')
            if not catalog.is_owner(ctx.session.user, obj):
                raise InsufficientPrivilege(f"must be owner of {plan.kind} {name}")
            direction = dict(obj.options).get("direction")
            if plan.direction and direction != plan.direction:
                raise WrongObjectType(f'"{name}" is a {direction} connector, not a {plan.direction} connector')
            dependents = catalog.dependents(obj.id)
            if dependents and not plan.cascade:
                raise DependentObjectsStillExist(
                    f'cannot drop {plan.kind} {name} because other objects depend on it',
                    detail="\n".join(f"{d.shown_kind.replace('_', ' ')} {d.name} depends on {plan.kind} {name}"
                                     for d in dependents),
                    hint="Use DROP ... CASCADE to drop the dependent objects too.")
            remove.append(obj)
            remove.extend(_with_dependents(catalog, dependents))
        if remove:
            unique = list({r.id: r for r in remove}.values())
            commit, _, snapshot = engine.catalog.plan_change(remove=unique)
            await engine.storage.commit_async(commit)
            engine.catalog.applied(snapshot)
            for r in unique:
                engine.reader.forget(r.id)
                engine.watermarks.forget(r.id)
    engine.sync_connectors()
    return ExecutionResult(f"DROP {_tag(plan.kind, plan.direction, plan.aggregate)}", notices=notices)


def _with_dependents(catalog: CatalogSnapshot, rels: list[RelationDef]) -> list[RelationDef]:
    """Relations and sinks depending on these, transitively, with external streams' dead letters."""
    out: list[RelationDef] = []
    pending = list(rels)
    while pending:
        r = pending.pop()
        if any(o.id == r.id for o in out):
            continue
        out.append(r)
        pending.extend(catalog.dependents(r.id))
        errors = dict(r.extra).get("dead_letters")
        if errors and (companion := catalog.get(str(errors))) is not None:
            pending.append(companion)
    return out
