"""Ad hoc SELECT (and SELECT STREAM) over a consistent snapshot."""

from __future__ import annotations

from streamdb.planner.plans import QueryPlan
from streamdb.runtime import query
from streamdb.runtime.api import ExecutionResult
from streamdb.runtime.statements.context import ExecContext


async def execute(plan: QueryPlan, ctx: ExecContext) -> ExecutionResult:
    engine_used, rows = await query.run_reporting_engine(ctx.engine, plan, ctx.info)
    # Visible as SHOW streamdb.last_query_engine: which engine answered (index, embedded or spark).
    ctx.session.settings["streamdb.last_query_engine"] = engine_used
    return ExecutionResult(f"SELECT {len(rows)}", columns=plan.columns, rows=rows)
