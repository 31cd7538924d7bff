"""FLUSH: returns once every write acknowledged before it is reflected in every view.

Writes are acknowledged only once durable and ad hoc reads see the latest
durable snapshot; FLUSH waits for the view maintainer to catch up with them, and fails with the
error of a view that is failing.
"""

from __future__ import annotations

from streamdb.planner.plans import FlushPlan
from streamdb.runtime.api import ExecutionResult
from streamdb.runtime.statements.context import ExecContext


async def execute(plan: FlushPlan, ctx: ExecContext) -> ExecutionResult:
    # A view that is failing fails FLUSH with its error, once the others are up to date.
    return ExecutionResult("FLUSH", notices=await ctx.engine.flush(raise_failing=True))
