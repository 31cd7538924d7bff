"""UPDATE and DELETE on tables."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from streamdb.catalog import RelationDef
from streamdb.errors import UndefinedTable
from streamdb.planner import row_expr
from streamdb.planner.plans import QueryPlan, UpdatePlan
from streamdb.runtime import changes as C
from streamdb.runtime import embedded, query, writer
from streamdb.runtime.api import ExecutionResult
from streamdb.runtime.reader import keyed_rows_table, state_store
from streamdb.runtime.statements.context import ExecContext

if TYPE_CHECKING:
    from streamdb.runtime.engine import Engine


async def execute(plan: UpdatePlan, ctx: ExecContext) -> ExecutionResult:
    engine = ctx.engine
    rel = engine.catalog.snapshot().by_id(plan.relation_id)
    if rel is None:
        raise UndefinedTable(f'relation "{plan.relation_name}" does not exist')
    if plan.key is not None:  # the planner found the row's key: no query over the table
        return await _by_key(engine, rel, plan)
    assert plan.query is not None
    # The match and the new values are computed under the table's write lock, so they see every
    # write acknowledged before and none can come between: `SET n = n + 1` from two sessions
    # adds 2 (PostgreSQL re-reads a row another transaction changed meanwhile; we serialize).
    async with engine.table_lock(rel.id):
        rows = await query.run(engine, plan.query, ctx.info)
        if plan.is_delete:
            n = await writer.apply_table_changes(engine, rel, deletes=[r[0] for r in rows], lock_held=True)
            return ExecutionResult(f"DELETE {n}")
        coerced = []
        for r in rows:
            full, _ = writer.build_rows(rel, tuple(rel.column_names()), [tuple(r[1:])], False)
            coerced.append((r[0], full[0]))
        n = await writer.apply_table_changes(engine, rel, updates=coerced, lock_held=True)
    return ExecutionResult(f"UPDATE {n}")


async def _by_key(engine: Engine, rel: RelationDef, plan: UpdatePlan) -> ExecutionResult:
    """WHERE names one row by its primary key: read and write that row, whatever the table's size."""
    assert plan.key is not None
    key = C.key_of(plan.key)
    if plan.is_delete:
        n = await writer.apply_table_changes(engine, rel, deletes=[key])
        return ExecutionResult(f"DELETE {n}")
    names = rel.column_names()
    params = plan.query.params if plan.query is not None else ()
    if plan.row_values is not None and row_expr.params_needed(plan.row_values) <= len(params):
        # SET with arithmetic over the row's own values: computed from the row as it is under
        # the table's lock, as a constant SET is applied (no query: ~1.7 ms less a statement).
        values = plan.row_values

        def compute(old: tuple[Any, ...]) -> tuple[Any, ...]:
            row = list(old)
            for i, value in [(i, row_expr.evaluate(e, old, params)) for i, e in values]:  # all from the old row
                row[i] = value
            full, _ = writer.build_rows(rel, tuple(names), [tuple(row)], False)
            return full[0]

        n = await writer.apply_table_changes(engine, rel, assignments=[(key, compute)])
        return ExecutionResult(f"UPDATE {n}")
    if plan.query is not None:  # SET with expressions over the row: the query over that row alone
        row_query = plan.query
        async with engine.table_lock(rel.id):
            rows = await asyncio.to_thread(_query_on_row, engine, rel, row_query, key)
            if not rows:
                return ExecutionResult("UPDATE 0")
            full, _ = writer.build_rows(rel, tuple(names), [tuple(rows[0][1:])], False)
            n = await writer.apply_table_changes(engine, rel, updates=[(key, full[0])], lock_held=True)
        return ExecutionResult(f"UPDATE {n}")
    positions = [(names.index(name), value) for name, value in plan.assignments or ()]

    def assign(old: tuple[Any, ...]) -> tuple[Any, ...]:
        # Applied to the row as it is under the table's lock: a concurrent UPDATE of another
        # column of this row is kept, not overwritten with what this statement read before.
        row = list(old)
        for i, value in positions:
            row[i] = value
        full, _ = writer.build_rows(rel, tuple(names), [tuple(row)], False)
        return full[0]

    n = await writer.apply_table_changes(engine, rel, assignments=[(key, assign)])
    return ExecutionResult(f"UPDATE {n}")


def _query_on_row(engine: Engine, rel: RelationDef, plan: QueryPlan, key: bytes) -> list[tuple[Any, ...]]:
    """The UPDATE's query (the row's key and new values) run over the row stored under `key`:
    the same engine and semantics as over the whole table, at the cost of one row."""
    with engine.storage.snapshot() as snap:
        raw = snap.get(state_store(rel.id), key)
    if raw is None:
        return []
    table = keyed_rows_table(rel, [C.decode_state_row(raw)[0]], [key])
    inp = plan.inputs[0]
    result = embedded.run(plan.duckdb_sql, {inp.registered_name: query.with_planned_columns(table, inp.columns)},
                          [query.duck_value(v) for v in plan.params])
    return query.arrow_to_rows(result, plan.columns)
