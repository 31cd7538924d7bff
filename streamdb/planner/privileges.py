"""Privilege checks, made where the planner resolves relations.

A plan is only ever made for the session's role at one catalog version, and GRANT, REVOKE and
role changes bump that version, so a cached plan never outlives the privileges it was checked
against.
"""

from __future__ import annotations

from sqlglot import exp

from streamdb.catalog import RelationDef
from streamdb.errors import InsufficientPrivilege
from streamdb.planner.context import PlanContext
from streamdb.planner.names import position_of

_OBJECT_WORD = {"view": "view", "materialized_view": "materialized view", "connector": "connector",
                "sink": "sink"}


def denied(rel: RelationDef, node: exp.Expression | None = None) -> InsufficientPrivilege:
    """Postgres's wording: `permission denied for table t` (streams are tables to Postgres tools)."""
    return InsufficientPrivilege(f"permission denied for {_OBJECT_WORD.get(rel.shown_kind, 'table')} {rel.name}",
                                 position=position_of(node))


def require(ctx: PlanContext, rel: RelationDef, privilege: str, node: exp.Expression | None = None) -> None:
    """Raise 42501 unless the session's role holds `privilege` (SELECT, INSERT, UPDATE, DELETE) on rel."""
    if not ctx.catalog.has_privilege(ctx.session.user, rel, privilege):
        raise denied(rel, node)
