"""CREATE / ALTER / DROP ROLE | USER, GRANT and REVOKE: checked against the catalog snapshot."""

from __future__ import annotations

from sqlglot import exp

from streamdb.catalog import PRIVILEGES, PUBLIC_GRANTEE
from streamdb.errors import InsufficientPrivilege, StreamDBError, UndefinedObject
from streamdb.planner.context import PlanContext
from streamdb.planner.names import lookup_relation, normalize, position_of
from streamdb.planner.plans import DropRolePlan, GrantPlan, RolePlan
from streamdb.planner.privileges import denied
from streamdb.sql import ast as S


def is_superuser(ctx: PlanContext) -> bool:
    role = ctx.catalog.role(ctx.session.user)
    return role is not None and role.superuser


def _role_name(node: exp.Expression) -> str:
    return normalize(node if isinstance(node, exp.Identifier) else exp.to_identifier(node.name))


def _options(stmt: exp.Expression) -> dict[str, object]:
    out: dict[str, object] = {}
    for option in stmt.args.get("options") or []:
        word = str(option.this)
        key = {"LOGIN": "login", "NOLOGIN": "login", "SUPERUSER": "superuser", "NOSUPERUSER": "superuser",
               "PASSWORD": "password"}[word]
        if key in out:
            raise StreamDBError("conflicting or redundant options", sqlstate="42601", position=position_of(option))
        if key == "password":
            value = option.args.get("expression")
            out[key] = None if value is None or isinstance(value, exp.Null) else value.name
        else:
            out[key] = not word.startswith("NO")
    return out


def plan_role(stmt: S.CreateRole | S.AlterRole, ctx: PlanContext) -> RolePlan:
    name = _role_name(stmt.this)
    kind = str(stmt.args["kind"])
    opts = _options(stmt)
    action = "create" if isinstance(stmt, S.CreateRole) else "alter"
    own_password_only = action == "alter" and name == ctx.session.user and set(opts) == {"password"}
    if not is_superuser(ctx) and not own_password_only:
        # Postgres lets a role change its own password, and nothing else about itself.
        raise InsufficientPrivilege(f"permission denied to {action} role",
                                    detail="Only superusers may create, alter or drop roles.")
    login = opts.get("login")
    if action == "create" and login is None:
        login = kind == "USER"  # CREATE USER is CREATE ROLE ... LOGIN
    return RolePlan(action, name, kind, login=login, superuser=opts.get("superuser"),  # type: ignore[arg-type]
                    set_password="password" in opts, password=opts.get("password"))  # type: ignore[arg-type]


def plan_drop_role(stmt: S.DropRole, ctx: PlanContext) -> DropRolePlan:
    if not is_superuser(ctx):
        raise InsufficientPrivilege("permission denied to drop role",
                                    detail="Only superusers may create, alter or drop roles.")
    return DropRolePlan(str(stmt.args["kind"]), tuple(_role_name(n) for n in stmt.expressions),
                        bool(stmt.args.get("exists")))


def plan_grant(stmt: S.GrantPrivileges | S.RevokePrivileges, ctx: PlanContext) -> GrantPlan:
    words = [p.name.upper() for p in stmt.args["privileges"]]
    privileges = PRIVILEGES if "ALL" in words else tuple(dict.fromkeys(words))
    names = []
    for table in stmt.args["tables"]:
        rel = lookup_relation(ctx, table)
        if not ctx.catalog.is_owner(ctx.session.user, rel):
            raise denied(rel, table)  # only owners (and superusers) grant, as without GRANT OPTION
        names.append(rel.name)
    roles = []
    for node in stmt.args["roles"]:
        role = _role_name(node)
        if role != PUBLIC_GRANTEE and ctx.catalog.role(role) is None:
            raise UndefinedObject(f'role "{role}" does not exist', position=position_of(node))
        roles.append(role)
    return GrantPlan(privileges, tuple(dict.fromkeys(names)), tuple(dict.fromkeys(roles)),
                     revoke=isinstance(stmt, S.RevokePrivileges))
