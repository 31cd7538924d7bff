"""Push queries: rows stream to the client until it cancels or disconnects."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from streamdb.planner.plans import SubscribePlan
from streamdb.runtime.api import ExecutionResult
from streamdb.runtime.statements.context import ExecContext


async def execute(plan: SubscribePlan, ctx: ExecContext) -> ExecutionResult:
    views = ctx.engine.views
    sub = views.subscribe(plan)

    async def rows() -> AsyncIterator[list[tuple[Any, ...]]]:
        try:
            async for batch in sub.batches():
                yield batch
        finally:
            views.unsubscribe(sub)

    return ExecutionResult("SUBSCRIBE", columns=plan.columns, stream=rows())
