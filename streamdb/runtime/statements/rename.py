"""ALTER { TABLE | STREAM | VIEW | MATERIALIZED VIEW } name RENAME TO new_name: one catalog commit.

The relation keeps its id, so its log, stored rows, view state, pipeline operators, sources and
grants are untouched. Relations that depend on it name it in their SQL (views are planned from
their text), so while any exist the rename is refused with their names, where PostgreSQL, which
holds dependencies by OID, would follow it.
"""

from __future__ import annotations

from dataclasses import replace

from streamdb.catalog import RelationDef
from streamdb.errors import (
    DuplicateTable,
    InsufficientPrivilege,
    Notice,
    UndefinedTable,
    WrongObjectType,
)
from streamdb.planner.plans import RenamePlan
from streamdb.runtime.api import ExecutionResult
from streamdb.runtime.statements.context import ExecContext, refuse_if_read_by_others

_WORD = {"stream": "STREAM", "table": "TABLE", "view": "VIEW", "materialized_view": "MATERIALIZED VIEW"}


async def execute(plan: RenamePlan, ctx: ExecContext) -> ExecutionResult:
    engine = ctx.engine
    tag = f"ALTER {_WORD[plan.kind]}"
    words = plan.kind.replace("_", " ")
    async with engine.ddl_lock:
        catalog = engine.catalog.snapshot()
        rel = catalog.get(plan.name)
        if rel is None:
            if plan.if_exists:
                return ExecutionResult(tag, notices=[Notice(f'relation "{plan.name}" does not exist, skipping')])
            raise UndefinedTable(f'relation "{plan.name}" does not exist')
        if rel.shown_kind != plan.kind:
            raise WrongObjectType(f'"{plan.name}" is not a {words}',
                                  hint=f"Use ALTER {_WORD[rel.shown_kind]} to rename a {rel.shown_kind.replace('_', ' ')}.")
        if not catalog.is_owner(ctx.session.user, rel):
            raise InsufficientPrivilege(f"must be owner of {words} {plan.name}")
        if plan.new_name == plan.name:
            return ExecutionResult(tag)
        if catalog.holding_name(plan.new_name) is not None:
            raise DuplicateTable(f'relation "{plan.new_name}" already exists')
        refuse_if_read_by_others(catalog, rel, f'rename {words} "{plan.name}"',
                                 "They name it in their SQL: drop them first and create them again after the rename.")
        renamed = replace(rel, name=plan.new_name, create_sql=renamed_create_sql(rel, plan.new_name))
        # An external stream's dead letters keep their stream's name; they say whose they are.
        update: list[RelationDef] = []
        errors = dict(rel.extra).get("dead_letters")
        if errors and (companion := catalog.get(str(errors))) is not None:
            extra = tuple((k, plan.new_name if k == "dead_letters_of" else v) for k, v in companion.extra)
            update.append(replace(companion, extra=extra))
        commit, _, snapshot = engine.catalog.plan_change(rename=[(rel, renamed)], update=update)
        await engine.storage.commit_async(commit)
        engine.catalog.applied(snapshot)
    return ExecutionResult(tag)


def renamed_create_sql(rel: RelationDef, new_name: str) -> str:
    """The relation's CREATE statement naming it `new_name` (what SHOW CREATE shows). Only the
    name's token is replaced, so the rest stays as written: a view is planned again from this
    text, and regenerating it could change how it reads (and its pipeline fingerprint)."""
    from sqlglot.tokens import TokenType

    from streamdb.sql.parser import _tokenize

    quoted = new_name != new_name.lower() or not new_name.isidentifier()
    shown = '"' + new_name.replace('"', '""') + '"' if quoted else new_name
    try:
        tokens = _tokenize(rel.create_sql)
    except Exception:  # noqa: BLE001 - a text that is not a statement (a comment): kept as it is
        return rel.create_sql
    for tok in tokens[1:]:
        if (tok.token_type == TokenType.IDENTIFIER and tok.text == rel.name) or (
                tok.token_type == TokenType.VAR and tok.text.lower() == rel.name):
            return rel.create_sql[:tok.start] + shown + rel.create_sql[tok.end + 1:]
    return rel.create_sql
