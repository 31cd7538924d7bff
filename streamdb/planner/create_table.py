"""CREATE TABLE: a keyed changelog relation (or a multiset without a primary key)."""

from __future__ import annotations

import time

from sqlglot import exp

from streamdb.catalog import RelationDef
from streamdb.errors import FeatureNotSupported, UndefinedColumn
from streamdb.planner.columns import column_defs
from streamdb.planner.context import PlanContext
from streamdb.planner.names import normalize, position_of, table_name
from streamdb.planner.options import TableOptions, property_values, validate_options
from streamdb.planner.plans import CreateRelationPlan


def plan(stmt: exp.Create, ctx: PlanContext, sql: str) -> CreateRelationPlan:
    if stmt.args.get("expression") is not None:
        from streamdb.planner import create_view

        return create_view.plan(stmt, ctx, sql, derived="table")  # type: ignore[return-value]
    target = stmt.this
    if not isinstance(target, exp.Schema):
        raise FeatureNotSupported("CREATE TABLE needs a column list", position=position_of(stmt))
    table = target.this
    schema, name = table_name(table)
    if schema not in (None, "public"):
        raise FeatureNotSupported(f'schema "{schema}" is not supported; relations live in "public"')
    defs = [e for e in target.expressions if isinstance(e, exp.ColumnDef)]
    columns, inline_pk = column_defs(defs, stream=False)
    pk = list(inline_pk)
    for e in target.expressions:
        if isinstance(e, exp.PrimaryKey):
            if pk:
                raise FeatureNotSupported(f'multiple primary keys for table "{name}" are not allowed',
                                          sqlstate="42P16")
            pk = [normalize(c.this if isinstance(c, exp.Ordered) else c) for c in e.expressions]
        elif isinstance(e, (exp.Constraint,)):
            inner = e.expressions[0] if e.expressions else None
            if isinstance(inner, exp.PrimaryKey):
                pk = [normalize(c.this if isinstance(c, exp.Ordered) else c) for c in inner.expressions]
            else:
                raise FeatureNotSupported("only PRIMARY KEY table constraints are supported",
                                          position=position_of(e))
        elif not isinstance(e, exp.ColumnDef):
            raise FeatureNotSupported(f"unsupported table element: {e.sql(dialect='postgres')}",
                                      position=position_of(e))
    names = {c.name for c in columns}
    for k in pk:
        if k not in names:
            raise UndefinedColumn(f'column "{k}" named in key does not exist')
    if pk:
        columns = tuple(c if c.name not in pk else _not_null(c) for c in columns)
    props = stmt.args.get("properties")
    values = {}
    if props is not None:
        for p in props.expressions:
            # UnloggedProperty is an exp.Property subclass, so test it first. Every table is
            # logged: more durable than asked for is harmless. TEMP is refused by the dispatcher.
            if isinstance(p, exp.UnloggedProperty):
                continue
            if isinstance(p, exp.Property):
                values.update(property_values([p]))
    opts: TableOptions = validate_options(TableOptions, values, "table")
    rel = RelationDef(
        id=0, name=name, kind="table", columns=columns, primary_key=tuple(pk),
        partitions=opts.partitions, create_sql=sql.strip(), created_at=time.time(),
        extra=(("append_only", True),) if opts.append_only else (),
    )
    if opts.connector is not None or opts.postgres_table is not None or opts.publication is not None:
        from streamdb.planner.connectors import postgres_cdc_table

        rel = postgres_cdc_table(rel, opts, ctx)
    return CreateRelationPlan(rel, if_not_exists=bool(stmt.args.get("exists")),
                              or_replace=bool(stmt.args.get("replace")))


def _not_null(c):
    from dataclasses import replace

    return replace(c, nullable=False)
