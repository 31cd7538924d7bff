"""FLUSH [name]: returns once every write acknowledged before it is reflected in every view (or in
the named one and the views it reads).

Writes are acknowledged only once durable and ad hoc reads see the latest durable snapshot;
FLUSH waits for the views to catch up with them, and fails with the error of a view that is
failing (its SQLSTATE), once the others are up to date.
"""

from __future__ import annotations

from streamdb.errors import UndefinedTable
from streamdb.planner.plans import FlushPlan
from streamdb.runtime.api import ExecutionResult
from streamdb.runtime.statements.context import ExecContext


async def execute(plan: FlushPlan, ctx: ExecContext) -> ExecutionResult:
    only = None
    if plan.name:
        rel = ctx.engine.catalog.snapshot().get(plan.name)
        if rel is None:
            raise UndefinedTable(f'relation "{plan.name}" does not exist')
        only = {rel.id}
    return ExecutionResult("FLUSH", notices=await ctx.engine.flush(only=only, raise_failing=True))
