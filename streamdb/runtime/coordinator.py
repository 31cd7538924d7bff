"""The coordinator: sequences plans by handing each to the runtime module for its kind."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from streamdb.errors import FeatureNotSupported
from streamdb.planner import plans as P
from streamdb.planner.create_index import CreateIndexPlan
from streamdb.planner.create_plain_view import CreatePlainViewPlan
from streamdb.runtime.api import ExecutionResult
from streamdb.runtime.statements import (
    copy,
    create_index,
    create_plain_view,
    create_relation,
    cursor,
    drop,
    explain,
    flush,
    insert,
    objects,
    rename,
    roles,
    select,
    session_stmt,
    show,
    subscribe,
    update,
)
from streamdb.runtime.statements.context import ExecContext

Handler = Callable[[Any, ExecContext], Awaitable[ExecutionResult]]

HANDLERS: dict[type, Handler] = {
    P.QueryPlan: select.execute,
    P.CreateRelationPlan: create_relation.execute,
    P.CreateViewPlan: create_relation.execute,
    P.DropPlan: drop.execute,
    P.RenamePlan: rename.execute,
    P.CreateObjectPlan: objects.create,
    P.DropObjectPlan: objects.drop,
    P.InsertPlan: insert.execute,
    P.UpdatePlan: update.execute,
    P.CopyFromPlan: copy.execute_from,
    P.CopyToPlan: copy.execute_to,
    P.ShowObjectsPlan: show.execute_objects,
    P.ShowCreatePlan: show.execute_create,
    P.DescribeRelationPlan: show.execute_describe,
    P.ShowVariablePlan: session_stmt.execute_show,
    P.SetVariablePlan: session_stmt.execute_set,
    P.TransactionPlan: session_stmt.execute_transaction,
    P.NoOpPlan: session_stmt.execute_noop,
    P.ExplainPlan: explain.execute,
    P.FlushPlan: flush.execute,
    P.SubscribePlan: subscribe.execute,
    P.DeclareCursorPlan: cursor.declare,
    P.FetchPlan: cursor.fetch,
    P.CloseCursorPlan: cursor.close,
    P.RolePlan: roles.execute_role,
    P.DropRolePlan: roles.execute_drop,
    P.GrantPlan: roles.execute_grant,
    CreatePlainViewPlan: create_plain_view.execute,
    CreateIndexPlan: create_index.execute,
}


WRITES = (P.InsertPlan, P.UpdatePlan)


async def execute(plan: P.Plan, ctx: ExecContext) -> ExecutionResult:
    handler = HANDLERS.get(type(plan))
    if handler is None:
        raise FeatureNotSupported(f"{type(plan).__name__} cannot be executed yet")
    result = await handler(plan, ctx)
    if isinstance(plan, WRITES) and ctx.session.implicit_flush():
        result.notices.extend(await ctx.engine.flush())
    return result
