"""INSERT: rows are durable when the statement completes; Spark is never waited for."""

from __future__ import annotations

from streamdb.errors import UndefinedTable
from streamdb.planner.plans import InsertPlan
from streamdb.runtime import query, writer
from streamdb.runtime.api import ExecutionResult
from streamdb.runtime.statements.context import ExecContext


async def execute(plan: InsertPlan, ctx: ExecContext) -> ExecutionResult:
    rel = ctx.engine.catalog.snapshot().by_id(plan.relation_id)
    if rel is None:
        raise UndefinedTable(f'relation "{plan.relation_name}" does not exist')
    if plan.rows is not None:
        rows = list(plan.rows)
    else:
        assert plan.query is not None
        rows = await query.run(ctx.engine, plan.query, ctx.info)
    stored = await writer.insert_rows(ctx.engine, rel, plan.target_columns, rows, plan.rowtime_given)
    return ExecutionResult(f"INSERT 0 {stored.rows}", notices=writer.late_notices(rel, stored))
