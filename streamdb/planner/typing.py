"""Result types of a query, found by running it over empty inputs in the embedded engine.

In memory only: no Spark, no disk, so Parse/Describe answer at once; and the types
are exactly those the embedded engine will produce.
"""

from __future__ import annotations

import pyarrow as pa

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
