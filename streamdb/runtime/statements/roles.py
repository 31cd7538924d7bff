"""CREATE / ALTER / DROP ROLE and GRANT / REVOKE: one atomic catalog commit each."""

from __future__ import annotations

import time
from dataclasses import replace

from streamdb.auth import make_verifier, md5_hash
from streamdb.catalog import BOOTSTRAP_ROLE, FIRST_ROLE_OID, PUBLIC_GRANTEE, RoleDef
from streamdb.errors import (
    DependentObjectsStillExist,
    DuplicateObject,
    FeatureNotSupported,
    Notice,
    StreamDBError,
    UndefinedObject,
    UndefinedTable,
)
from streamdb.planner.plans import DropRolePlan, GrantPlan, RolePlan
from streamdb.runtime.api import ExecutionResult
from streamdb.runtime.statements.context import ExecContext


def _reserved(name: str) -> None:
    if name == PUBLIC_GRANTEE or name == "none" or name.startswith("pg_"):
        raise StreamDBError(f'role name "{name}" is reserved', sqlstate="42939",
                            detail='Role names starting with "pg_" and "public" are reserved.')


def _with_password(role: RoleDef, plan: RolePlan, ctx: ExecContext) -> tuple[RoleDef, list[Notice]]:
    if not plan.set_password:
        return role, []
    if not plan.password:  # NULL, or '' which Postgres also treats as no password
        notices = [Notice("empty string is not a valid password, clearing password")] if plan.password == "" else []
        return replace(role, scram_verifier=None, md5_hash=None), notices
    md5 = md5_hash(plan.password, role.name) if ctx.engine.settings.password_encryption_md5 else None
    return replace(role, scram_verifier=make_verifier(plan.password), md5_hash=md5), []


async def execute_role(plan: RolePlan, ctx: ExecContext) -> ExecutionResult:
    engine = ctx.engine
    verb = "CREATE" if plan.action == "create" else "ALTER"
    async with engine.ddl_lock:
        catalog = engine.catalog.snapshot()
        existing = catalog.role(plan.name)
        if plan.action == "create":
            _reserved(plan.name)
            if existing is not None:
                raise DuplicateObject(f'role "{plan.name}" already exists')
            oid = max((r.oid for r in catalog.roles()), default=FIRST_ROLE_OID - 1)
            role = RoleDef(plan.name, max(oid, FIRST_ROLE_OID - 1) + 1, can_login=bool(plan.login),
                           superuser=bool(plan.superuser), created_at=time.time())
        else:
            if existing is None:
                raise UndefinedObject(f'role "{plan.name}" does not exist')
            if plan.name == BOOTSTRAP_ROLE and (plan.superuser is False or plan.login is False):
                raise FeatureNotSupported(f'the bootstrap role "{BOOTSTRAP_ROLE}" must stay a superuser that can '
                                          f'log in')
            role = replace(existing,
                           can_login=existing.can_login if plan.login is None else plan.login,
                           superuser=existing.superuser if plan.superuser is None else plan.superuser)
        role, notices = _with_password(role, plan, ctx)
        commit, _, snapshot = engine.catalog.plan_change(put_roles=[role])
        await engine.storage.commit_async(commit)
        engine.catalog.applied(snapshot)
    return ExecutionResult(f"{verb} ROLE", notices=notices)


async def execute_drop(plan: DropRolePlan, ctx: ExecContext) -> ExecutionResult:
    engine = ctx.engine
    notices: list[Notice] = []
    async with engine.ddl_lock:
        catalog = engine.catalog.snapshot()
        remove = []
        for name in plan.names:
            role = catalog.role(name)
            if role is None:
                if plan.if_exists:
                    notices.append(Notice(f'role "{name}" does not exist, skipping'))
                    continue
                raise UndefinedObject(f'role "{name}" does not exist')
            if name == BOOTSTRAP_ROLE:
                raise DependentObjectsStillExist(
                    f'cannot drop role {name} because it is required by the database system')
            if name == ctx.session.user:
                raise StreamDBError("current user cannot be dropped", sqlstate="55006")
            owned = [f"owner of {r.shown_kind.replace('_', ' ')} {r.name}" for r in catalog.owned_by(name)]
            granted = [f"privileges for {r.shown_kind.replace('_', ' ')} {r.name}"
                       for r in catalog.relations.values() if any(g[0] == name for g in r.grants)]
            if owned or granted:
                raise DependentObjectsStillExist(
                    f'role "{name}" cannot be dropped because some objects depend on it',
                    detail="\n".join(sorted(owned) + sorted(granted)),
                    hint="Drop the objects it owns and REVOKE its privileges first.")
            remove.append(role)
        if remove:
            commit, _, snapshot = engine.catalog.plan_change(remove_roles=remove)
            await engine.storage.commit_async(commit)
            engine.catalog.applied(snapshot)
    return ExecutionResult("DROP ROLE", notices=notices)


async def execute_grant(plan: GrantPlan, ctx: ExecContext) -> ExecutionResult:
    engine = ctx.engine
    async with engine.ddl_lock:
        catalog = engine.catalog.snapshot()
        updated = []
        for name in plan.relations:
            rel = catalog.get(name)
            if rel is None:  # dropped since planning
                raise UndefinedTable(f'relation "{name}" does not exist')
            grants = set(rel.grants)
            for role in plan.roles:
                for privilege in plan.privileges:
                    (grants.discard if plan.revoke else grants.add)((role, privilege))
            if grants != set(rel.grants):
                updated.append(replace(rel, grants=tuple(sorted(grants))))
        if updated:
            # The catalog version moves on, so no session reuses a plan checked before the change.
            commit, _, snapshot = engine.catalog.plan_change(update=updated)
            await engine.storage.commit_async(commit)
            engine.catalog.applied(snapshot)
    return ExecutionResult("REVOKE" if plan.revoke else "GRANT")
