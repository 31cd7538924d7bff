"""SET / RESET / SHOW of settings and BEGIN / COMMIT / ROLLBACK."""

from __future__ import annotations

from streamdb import types as T
from streamdb.errors import Notice, StreamDBError, UndefinedObject
from streamdb.planner.plans import NoOpPlan, SetVariablePlan, ShowVariablePlan, TransactionPlan
from streamdb.runtime.api import Column, ExecutionResult
from streamdb.runtime.statements.context import ExecContext


async def execute_set(plan: SetVariablePlan, ctx: ExecContext) -> ExecutionResult:
    s = ctx.session
    if plan.name == "all" and plan.value is None:
        s.reset_all()
        return ExecutionResult("RESET")
    status = s.set_setting(plan.name, plan.value)
    return ExecutionResult("SET" if plan.value is not None else "RESET", parameter_status=status)


async def execute_show(plan: ShowVariablePlan, ctx: ExecContext) -> ExecutionResult:
    value = ctx.session.get_setting(plan.name)
    if value is None:
        raise UndefinedObject(f'unrecognized configuration parameter "{plan.name}"')
    return ExecutionResult("SHOW", columns=(Column(plan.name, T.TEXT),), rows=[(value,)])


async def execute_transaction(plan: TransactionPlan, ctx: ExecContext) -> ExecutionResult:
    """Transaction blocks group statements for clients; each write is durable when it completes.

    Savepoints are tracked so clients that nest transactions work; ROLLBACK TO clears an
    error state but, like ROLLBACK, does not undo writes already acknowledged.
    """
    s = ctx.session
    if plan.action in ("SAVEPOINT", "RELEASE", "ROLLBACK TO"):
        return _savepoint(plan, ctx)
    if plan.action == "BEGIN":
        notices = []
        if s.txn_status != "I":
            notices.append(Notice("there is already a transaction in progress", severity="WARNING",
                                  sqlstate="25001"))
        else:
            s.txn_status = "T"
        return ExecutionResult("BEGIN", notices=notices)
    was = s.txn_status
    s.txn_status = "I"
    s.savepoints.clear()
    s.close_cursors()  # cursors live until the end of their transaction
    notices = []
    if was == "I":
        notices.append(Notice("there is no transaction in progress", severity="WARNING", sqlstate="25P01"))
    if plan.action == "COMMIT" and was == "E":
        return ExecutionResult("ROLLBACK", notices=notices)
    return ExecutionResult(plan.action, notices=notices)


async def execute_noop(plan: NoOpPlan, ctx: ExecContext) -> ExecutionResult:
    if plan.command_tag == "DISCARD ALL":
        ctx.session.reset_all()
    return ExecutionResult(plan.command_tag)


def _savepoint(plan: TransactionPlan, ctx: ExecContext) -> ExecutionResult:
    s = ctx.session
    name = plan.savepoint or ""
    if s.txn_status == "I":
        raise StreamDBError(f"{plan.action.split()[0]} can only be used in transaction blocks", sqlstate="25P01")
    if plan.action == "SAVEPOINT":
        s.savepoints.append(name)
        return ExecutionResult("SAVEPOINT")
    if name not in s.savepoints:
        raise StreamDBError(f'savepoint "{name}" does not exist', sqlstate="3B001")
    i = len(s.savepoints) - 1 - s.savepoints[::-1].index(name)
    if plan.action == "RELEASE":
        del s.savepoints[i:]
        return ExecutionResult("RELEASE")
    del s.savepoints[i + 1:]
    s.txn_status = "T"
    return ExecutionResult("ROLLBACK")
