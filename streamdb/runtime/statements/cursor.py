"""DECLARE ... CURSOR FOR, FETCH and CLOSE: Materialize's way to read a SUBSCRIBE in batches."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streamdb.errors import InvalidCursorName, NoActiveSqlTransaction
from streamdb.planner.plans import CloseCursorPlan, DeclareCursorPlan, FetchPlan, QueryPlan, SubscribePlan
from streamdb.runtime import query
from streamdb.runtime.api import Column, ExecutionResult
from streamdb.runtime.statements.context import ExecContext
from streamdb.runtime.subscriptions import Subscription


@dataclass
class Cursor:
    name: str
    columns: tuple[Column, ...]
    subscription: Subscription | None = None
    rows: list[tuple[Any, ...]] = field(default_factory=list)  # a plain query's result, consumed in order


async def declare(plan: DeclareCursorPlan, ctx: ExecContext) -> ExecutionResult:
    session = ctx.session
    if session.txn_status == "I":
        raise NoActiveSqlTransaction("DECLARE CURSOR can only be used in transaction blocks")
    if plan.name in session.cursors:
        raise InvalidCursorName(f'cursor "{plan.name}" already exists', sqlstate="42P03")
    inner = plan.inner
    if isinstance(inner, SubscribePlan):
        cursor = Cursor(plan.name, inner.columns, subscription=await ctx.engine.views.subscribe(inner, ctx.session.user))
    else:
        assert isinstance(inner, QueryPlan)
        cursor = Cursor(plan.name, inner.columns, rows=await query.run(ctx.engine, inner, ctx.info))
    session.cursors[plan.name] = cursor
    return ExecutionResult("DECLARE CURSOR")


async def fetch(plan: FetchPlan, ctx: ExecContext) -> ExecutionResult:
    cursor = ctx.session.cursors.get(plan.name)
    if cursor is None:
        raise InvalidCursorName(f'cursor "{plan.name}" does not exist')
    if cursor.subscription is not None:
        rows = await cursor.subscription.take(plan.count, plan.timeout)
    else:
        n = len(cursor.rows) if plan.count is None else plan.count
        rows, cursor.rows = cursor.rows[:n], cursor.rows[n:]
    return ExecutionResult(f"FETCH {len(rows)}", columns=cursor.columns, rows=rows)


async def close(plan: CloseCursorPlan, ctx: ExecContext) -> ExecutionResult:
    session = ctx.session
    if plan.name is None:
        session.close_cursors()
    elif plan.name not in session.cursors:
        raise InvalidCursorName(f'cursor "{plan.name}" does not exist')
    else:
        session.close_cursor(plan.name)
    return ExecutionResult("CLOSE CURSOR")
