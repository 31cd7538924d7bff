"""Session statements: SET/RESET, BEGIN/COMMIT/ROLLBACK, DISCARD, DEALLOCATE."""

from __future__ import annotations

from streamdb.planner.names import normalize
from streamdb.planner.plans import NoOpPlan, SetVariablePlan, TransactionPlan
from streamdb.sql.ast import Deallocate, Discard, SetVariable, TransactionControl


def plan_set(stmt: SetVariable) -> SetVariablePlan:
    value = stmt.args.get("expression")
    return SetVariablePlan(str(stmt.this).lower(), None if value is None else str(value),
                           local=bool(stmt.args.get("local")))


def plan_transaction(stmt: TransactionControl) -> TransactionPlan:
    name = stmt.args.get("expression")
    return TransactionPlan(str(stmt.this).upper(),  # type: ignore[arg-type]
                           normalize(name) if name is not None else None)


def plan_discard(stmt: Discard) -> NoOpPlan:
    return NoOpPlan(f"DISCARD {str(stmt.this).upper()}")


def plan_deallocate(stmt: Deallocate) -> NoOpPlan:
    name = "ALL" if stmt.args.get("all") else (str(stmt.this) if stmt.this is not None else "ALL")
    return NoOpPlan("DEALLOCATE" + (" ALL" if name == "ALL" else ""), deallocate=name)
