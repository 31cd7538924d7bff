"""Result types of a query, found by running it over empty inputs in the embedded engine.

In memory only: no Spark, no disk, so Parse/Describe answer at once; and the types
are exactly those the embedded engine will produce.
"""

from __future__ import annotations

import pyarrow as pa
from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from streamdb import types as T
from streamdb.planner.context import PlanContext
from streamdb.planner.plans import RelationInput
from streamdb.runtime import embedded
from streamdb.runtime.api import Column


def empty_table(columns: tuple[tuple[str, T.SqlType], ...]) -> pa.Table:
    schema = pa.schema([pa.field(n, t.arrow()) for n, t in columns])
    return schema.empty_table()


def describe_query(duck_sql: str, inputs: tuple[RelationInput, ...], ctx: PlanContext) -> list[Column]:
    tables = {i.registered_name: empty_table(i.columns) for i in inputs}
    result = embedded.run(f"SELECT * FROM ({duck_sql}) AS q LIMIT 0", tables)
    return [Column(f.name, T.from_arrow(f.type)) for f in result.schema]


# Types the embedded engine reports as plain strings but Postgres keeps on a result column
# when it is a column reference or a cast: varchar(n) (typmod too), json, jsonb.
_KEPT_TYPES = (T.VARCHAR, T.JSON, T.JSONB)


def keep_declared_types(query: exp.Expression, inputs: tuple[RelationInput, ...],
                        columns: list[Column]) -> list[Column]:
    """Result columns with the type Postgres gives them where the engine's answer (a string) is
    coarser: an output that is a stored column (through subqueries too) or a cast to varchar(n),
    json or jsonb keeps that type, and `->` keeps json/jsonb. Anything computed stays text, as
    in Postgres (upper(), ||, max() of a varchar are text)."""
    if not isinstance(query, exp.Select) or len(query.expressions) != len(columns):
        return columns
    if not any(t in _KEPT_TYPES for i in inputs for _, t in i.columns) and query.find(exp.Cast) is None:
        return columns
    schema: dict[str, object] = {i.registered_name: {n: t.spelled() for n, t in i.columns} for i in inputs}
    try:
        typed = annotate_types(qualify(query.copy(), schema=schema, dialect="postgres",
                                       validate_qualify_columns=False, quote_identifiers=False,
                                       expand_stars=False), schema=schema, dialect="postgres")
    except Exception:  # noqa: BLE001 - a shape sqlglot cannot qualify keeps the engine's types
        return columns
    if not isinstance(typed, exp.Select) or len(typed.selects) != len(columns):
        return columns
    out = []
    for node, col in zip(typed.selects, columns, strict=True):
        kept = _kept_type(node.unalias()) if col.type is T.TEXT else None
        out.append(Column(col.name, kept, col.table_oid, col.column_number, kept.typmod) if kept else col)
    return out


def _kept_type(node: exp.Expr) -> T.SqlType | None:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.JSONExtract):
        inner = _kept_type(node.this)
        return inner if inner in (T.JSON, T.JSONB) else None
    if not isinstance(node, (exp.Column, exp.Cast)) or node.type is None:
        return None
    t = T.type_from_name(node.type.sql(dialect="postgres"))
    return t if t in _KEPT_TYPES else None
