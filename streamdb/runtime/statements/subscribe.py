"""Push queries: rows stream to the client until it cancels or disconnects."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from streamdb.planner.plans import CopyToPlan, SubscribePlan
from streamdb.runtime.api import ExecutionResult
from streamdb.runtime.statements.context import ExecContext


async def execute(plan: SubscribePlan, ctx: ExecContext) -> ExecutionResult:
    if ctx.info.application_name == "psql":
        # psql prints a query's rows once it completes, which a push query never does, but it
        # prints COPY data as it comes: typed in psql, `SELECT ... EMIT CHANGES` and SUBSCRIBE are
        # answered as `COPY (...) TO STDOUT` would be (Materialize's advice for SUBSCRIBE in psql).
        from streamdb.runtime.statements import copy

        return await copy.execute_to(CopyToPlan(plan.query, "text", "\t", "\\N", False, subscribe=plan), ctx)
    views = ctx.engine.views
    sub = await views.subscribe(plan, ctx.session.user)

    async def rows() -> AsyncIterator[list[tuple[Any, ...]]]:
        try:
            async for batch in sub.batches():
                yield batch
        finally:
            views.unsubscribe(sub)

    return ExecutionResult("SUBSCRIBE", columns=plan.columns, stream=rows())
