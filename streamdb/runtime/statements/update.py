"""UPDATE and DELETE on tables."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from streamdb.catalog import RelationDef
from streamdb.errors import UndefinedTable
from streamdb.planner.plans import UpdatePlan
from streamdb.runtime import changes as C
from streamdb.runtime import query, writer
from streamdb.runtime.api import ExecutionResult
from streamdb.runtime.reader import state_store
from streamdb.runtime.statements.context import ExecContext

if TYPE_CHECKING:
    from streamdb.runtime.engine import Engine


async def execute(plan: UpdatePlan, ctx: ExecContext) -> ExecutionResult:
    engine = ctx.engine
    rel = engine.catalog.snapshot().by_id(plan.relation_id)
    if rel is None:
        raise UndefinedTable(f'relation "{plan.relation_name}" does not exist')
    if plan.query is None:  # the planner found the row's key: no query to run
        return await _by_key(engine, rel, plan)
    # The match runs on a snapshot; the writer re-reads each row under the table's lock,
    # so a row deleted meanwhile is skipped rather than resurrected.
    rows = await query.run(engine, plan.query, ctx.info)
    if plan.is_delete:
        n = await writer.apply_table_changes(engine, rel, deletes=[r[0] for r in rows])
        return ExecutionResult(f"DELETE {n}")
    coerced = []
    for r in rows:
        full, _ = writer.build_rows(rel, tuple(rel.column_names()), [tuple(r[1:])], False)
        coerced.append((r[0], full[0]))
    n = await writer.apply_table_changes(engine, rel, updates=coerced)
    return ExecutionResult(f"UPDATE {n}")


async def _by_key(engine: Engine, rel: RelationDef, plan: UpdatePlan) -> ExecutionResult:
    """WHERE names one row by its primary key: read and write that row, whatever the table's size."""
    assert plan.key is not None
    key = C.key_of(plan.key)
    if plan.is_delete:
        n = await writer.apply_table_changes(engine, rel, deletes=[key])
        return ExecutionResult(f"DELETE {n}")
    old = await asyncio.to_thread(_stored_row, engine, rel, key)
    if old is None:
        return ExecutionResult("UPDATE 0")
    names = rel.column_names()
    row = list(old)
    for name, value in plan.assignments or ():
        row[names.index(name)] = value
    full, _ = writer.build_rows(rel, tuple(names), [tuple(row)], False)
    n = await writer.apply_table_changes(engine, rel, updates=[(key, full[0])])
    return ExecutionResult(f"UPDATE {n}")


def _stored_row(engine: Engine, rel: RelationDef, key: bytes) -> tuple[Any, ...] | None:
    with engine.storage.snapshot() as snap:
        raw = snap.get(state_store(rel.id), key)
    return C.decode_state_row(raw)[0] if raw is not None else None
