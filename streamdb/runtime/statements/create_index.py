"""CREATE INDEX: a declared point-lookup index on a table or materialized view (planner/create_index.py).

The index is a catalog object depending on its relation (dropped with it, kept by a rename). It
is built before the statement returns, off the event loop, and kept current after each change by
`runtime/indexes.py`. DROP INDEX is objects.drop, as for the other catalog objects.
"""

from __future__ import annotations

import asyncio
import time

from streamdb.catalog import CatalogSnapshot, RelationDef
from streamdb.errors import (
    FeatureNotSupported,
    InsufficientPrivilege,
    Notice,
    UndefinedColumn,
    UndefinedTable,
    WrongObjectType,
)
from streamdb.planner.create_index import INDEX_KIND, CreateIndexPlan, default_name
from streamdb.runtime.api import ExecutionResult
from streamdb.runtime.indexes import build_index, index_columns
from streamdb.runtime.statements.context import ExecContext
from streamdb.runtime.system_catalog import has_pkey, pkey_name

TAG = "CREATE INDEX"


def _names_taken(catalog: CatalogSnapshot) -> set[str]:
    """Index names share the relations' namespace (pg_class), primary keys' indexes included."""
    return {*catalog.relations, *(o.name for o in catalog.objects_of(INDEX_KIND)),
            *(pkey_name(r) for r in catalog.relations.values() if has_pkey(r))}


async def execute(plan: CreateIndexPlan, ctx: ExecContext) -> ExecutionResult:
    engine = ctx.engine
    async with engine.ddl_lock:
        catalog = engine.catalog.snapshot()
        rel = catalog.get(plan.relation)
        if rel is None:
            raise UndefinedTable(f'relation "{plan.relation}" does not exist')
        if rel.kind == "view":
            raise WrongObjectType(f'cannot create index on relation "{rel.name}"',
                                  detail="This operation is not supported for views.",
                                  hint="Create a materialized view and index it.")
        if rel.kind not in ("table", "materialized_view") or rel.schemaless:
            raise FeatureNotSupported(f'cannot create index on stream "{rel.name}"',
                                      detail="A stream is read as its whole log of events; an index would "
                                             "not outlive one read.",
                                      hint="Create a materialized view over the stream and index the view.")
        if not catalog.is_owner(ctx.session.user, rel):
            raise InsufficientPrivilege(f"must be owner of {rel.shown_kind.replace('_', ' ')} {rel.name}")
        by_name = {c.name: c for c in rel.columns}
        for column in (*plan.columns, *plan.include):
            if column not in by_name:
                raise UndefinedColumn(f'column "{column}" does not exist')
        taken = _names_taken(catalog)
        name = plan.name or default_name(rel.name, plan.columns, taken)
        if name in taken:
            if plan.if_not_exists:
                return ExecutionResult(TAG, notices=[Notice(f'relation "{name}" already exists, skipping',
                                                            sqlstate="42P07")])
            from streamdb.errors import DuplicateTable

            raise DuplicateTable(f'relation "{name}" already exists')
        index = RelationDef(
            id=0, name=name, kind=INDEX_KIND, columns=tuple(by_name[c] for c in plan.columns),
            schema=rel.schema, options=(("method", plan.method),), create_sql=plan.sql,
            created_at=time.time(), depends_on=(rel.id,), extra=(("include", plan.include),),
            owner=rel.owner)
        commit, _, snapshot = engine.catalog.plan_change(add=[index])
        await engine.storage.commit_async(commit)
        engine.catalog.applied(snapshot)
    # As PostgreSQL's CREATE INDEX, the statement returns once the index holds the rows.
    await asyncio.to_thread(build_index, engine, rel, index_columns(rel, plan.columns))
    return ExecutionResult(TAG)
