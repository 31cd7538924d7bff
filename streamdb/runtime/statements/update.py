"""UPDATE and DELETE on tables."""

from __future__ import annotations

from streamdb.errors import UndefinedTable
from streamdb.planner.plans import UpdatePlan
from streamdb.runtime import query, writer
from streamdb.runtime.api import ExecutionResult
from streamdb.runtime.statements.context import ExecContext


async def execute(plan: UpdatePlan, ctx: ExecContext) -> ExecutionResult:
    engine = ctx.engine
    rel = engine.catalog.snapshot().by_id(plan.relation_id)
    if rel is None:
        raise UndefinedTable(f'relation "{plan.relation_name}" does not exist')
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
