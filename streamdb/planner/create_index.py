"""CREATE INDEX [CONCURRENTLY] [IF NOT EXISTS] [name] ON relation [USING btree | hash]
(column, ...) [INCLUDE (column, ...)]: a declared point-lookup index on a table or a
materialized view, as PostgreSQL, Materialize and RisingWave accept it.

Reads of a stored relation are answered from its cached rows; an equality lookup on any
columns builds a hash index over them on first use (planner/lookup.py). A declared index is
that index named in the catalog: it is built when created, it is kept current after each change
of the relation before a read needs it, and pg_indexes, pg_class and psql's `\\d` show it. See
docs/serving.md, "Declared indexes".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from sqlglot import exp

from streamdb.errors import FeatureNotSupported, SyntaxErrorSQL, UndefinedObject
from streamdb.planner.context import PlanContext
from streamdb.planner.names import normalize, position_of, table_name
from streamdb.planner.plans import Plan

INDEX_KIND: Final = "index"
# Access methods that mean "find rows by equal keys" here; the others promise what a hash
# index over cached rows does not give (ranges over a GIN's elements, a BRIN's block ranges).
_METHODS = ("btree", "hash")


@dataclass(frozen=True)
class CreateIndexPlan(Plan):
    name: str | None  # None: named by the runtime as PostgreSQL names it (<relation>_<columns>_idx)
    relation: str
    columns: tuple[str, ...]
    include: tuple[str, ...] = ()
    method: str = "btree"
    if_not_exists: bool = False
    sql: str = ""

    def explain(self) -> str:
        return f"Create index {self.name or '(unnamed)'} on {self.relation} ({', '.join(self.columns)})"


def plan(node: exp.Create, ctx: PlanContext, sql: str) -> CreateIndexPlan:
    index = node.this
    if not isinstance(index, exp.Index):
        raise SyntaxErrorSQL("syntax error in CREATE INDEX")
    if node.args.get("unique"):
        raise FeatureNotSupported("unique indexes are not supported",
                                  hint="A table's PRIMARY KEY keeps its rows unique: one row per key.")
    params = index.args.get("params")
    if not isinstance(params, exp.IndexParameters):
        raise SyntaxErrorSQL("syntax error in CREATE INDEX: a column list is expected")
    using = params.args.get("using")
    method = normalize(using.name) if using is not None else "btree"
    if method not in _METHODS:
        raise FeatureNotSupported(f'access method "{method}" is not supported',
                                  hint="Indexes here find rows by equal values: use btree (the default) or hash.")
    if params.args.get("where") is not None:
        raise FeatureNotSupported("partial indexes (CREATE INDEX ... WHERE) are not supported")
    for arg in ("with_storage", "tablespace", "partition_by", "on"):
        if params.args.get(arg) not in (None, False, []):
            raise FeatureNotSupported(f"CREATE INDEX with {arg.upper().replace('_', ' ')} is not supported")
    columns: list[str] = []
    for item in params.args.get("columns") or []:
        target = item.this if isinstance(item, exp.Ordered) else item
        if not isinstance(target, exp.Column) or target.table:
            raise FeatureNotSupported("indexes on expressions are not supported",
                                      hint="Index a column, or a materialized view's column that computes it.",
                                      position=position_of(target))
        columns.append(normalize(target.this))
    if not columns:
        raise SyntaxErrorSQL("syntax error in CREATE INDEX: a column list is expected")
    include = tuple(normalize(i) if isinstance(i, exp.Identifier) else normalize(i.this)
                    for i in params.args.get("include") or [])
    table = index.args.get("table")
    if not isinstance(table, exp.Table):
        raise SyntaxErrorSQL("syntax error in CREATE INDEX: ON relation is expected")
    schema, relation = table_name(table)
    if schema not in (None, "public"):
        raise UndefinedObject(f'schema "{schema}" does not exist')
    name = normalize(index.this) if index.this is not None else None
    return CreateIndexPlan(name=name, relation=relation, columns=tuple(columns), include=include, method=method,
                           if_not_exists=bool(node.args.get("exists")), sql=sql)


def default_name(relation: str, columns: tuple[str, ...], taken: set[str]) -> str:
    """PostgreSQL's name for an unnamed index: <relation>_<columns joined by _>_idx, then idx1,
    idx2, ... while the name is taken, cut to 63 bytes."""
    stem = f"{relation}_{'_'.join(columns)}"[:59]
    for n in range(0, 10_000):
        name = f"{stem}_idx{n or ''}"
        if name not in taken:
            return name
    raise FeatureNotSupported("could not choose a name for the index")  # pragma: no cover
