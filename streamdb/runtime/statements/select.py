"""Ad hoc SELECT (and SELECT STREAM) over a consistent snapshot."""

from __future__ import annotations

from typing import Any

from streamdb.planner.plans import QueryPlan
from streamdb.runtime import query
from streamdb.runtime.api import ExecutionResult
from streamdb.runtime.statements.context import ExecContext


async def execute(plan: QueryPlan, ctx: ExecContext) -> ExecutionResult:
    engine_used, rows = await query.run_reporting_engine(ctx.engine, plan, ctx.info, limit_result=True)
    return _result(plan, ctx, engine_used, rows)


def answer_from_current_index(plan: QueryPlan, ctx: ExecContext) -> ExecutionResult | None:
    """A point lookup whose index is current, answered synchronously; None otherwise."""
    rows = query.lookup_rows(ctx.engine, plan, build=False)
    return None if rows is None else _result(plan, ctx, "index", rows)


def _result(plan: QueryPlan, ctx: ExecContext, engine_used: str, rows: list[tuple[Any, ...]]) -> ExecutionResult:
    # Visible as SHOW streamdb.last_query_engine: which engine answered (index, count, embedded or spark).
    ctx.session.settings["streamdb.last_query_engine"] = engine_used
    return ExecutionResult(f"SELECT {len(rows)}", columns=plan.columns, rows=rows)
