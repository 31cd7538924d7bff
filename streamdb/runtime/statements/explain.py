"""EXPLAIN <statement>: the plan as text, one row per line."""

from __future__ import annotations

from streamdb.planner import EXPLAIN_COLUMNS
from streamdb.planner.plans import ExplainPlan
from streamdb.runtime.api import ExecutionResult
from streamdb.runtime.statements.context import ExecContext


async def execute(plan: ExplainPlan, ctx: ExecContext) -> ExecutionResult:
    rows = [(line,) for line in plan.inner.explain().splitlines()]
    return ExecutionResult("EXPLAIN", columns=EXPLAIN_COLUMNS, rows=rows)
