"""Identifier normalization and relation lookup, the Postgres way."""

from __future__ import annotations

from sqlglot import exp

from streamdb.catalog import PUBLIC_SCHEMA, RelationDef
from streamdb.errors import UndefinedTable
from streamdb.planner.context import PlanContext

# PostgreSQL 15's keywords that quote_ident() quotes: every category but the unreserved one
# (reserved, type or function names, column names: src/include/parser/kwlist.h).
QUOTED_KEYWORDS = frozenset("""
all analyse analyze and any array as asc asymmetric both case cast check collate column constraint
create current_catalog current_date current_role current_time current_timestamp current_user default
deferrable desc distinct do else end except false fetch for foreign from grant group having in
initially intersect into lateral leading limit localtime localtimestamp not null offset on only or
order placing primary references returning select session_user some symmetric table then to
trailing true union unique user using variadic when where window with
authorization binary collation concurrently cross current_schema freeze full ilike inner is isnull
join left like natural notnull outer overlaps right similar tablesample verbose
between bigint bit boolean char character coalesce dec decimal exists extract float greatest grouping
inout int integer interval least national nchar none normalize nullif numeric out overlay position
precision real row setof smallint substring time timestamp treat trim values varchar xmlattributes
xmlconcat xmlelement xmlexists xmlforest xmlnamespaces xmlparse xmlpi xmlroot xmlserialize xmltable
""".split())


def normalize(ident: exp.Identifier | str | None) -> str:
    """Unquoted identifiers fold to lower case; quoted ones keep their case."""
    if ident is None:
        return ""
    if isinstance(ident, str):
        return ident.lower()
    return ident.this if ident.quoted else ident.this.lower()


def position_of(node: exp.Expression | None) -> int | None:
    """1-based character position of a node in the statement, when the parser recorded it."""
    while node is not None:
        meta = getattr(node, "_meta", None) or {}
        if "start" in meta:
            return int(meta["start"]) + 1
        ident = node.args.get("this") if isinstance(node, (exp.Table, exp.Column)) else None
        if isinstance(ident, exp.Identifier):
            meta = getattr(ident, "_meta", None) or {}
            if "start" in meta:
                return int(meta["start"]) + 1
        return None
    return None


def table_name(table: exp.Table) -> tuple[str | None, str]:
    schema = normalize(table.args.get("db")) if table.args.get("db") else None
    return schema, normalize(table.args.get("this"))


def lookup_relation(ctx: PlanContext, table: exp.Table | str) -> RelationDef:
    if isinstance(table, str):
        schema, name = None, table
        node = None
    else:
        schema, name = table_name(table)
        node = table
    if schema not in (None, PUBLIC_SCHEMA):
        raise UndefinedTable(f'relation "{schema}.{name}" does not exist', position=position_of(node))
    rel = ctx.catalog.get(name)
    if rel is None:
        raise UndefinedTable(f'relation "{name}" does not exist', position=position_of(node))
    return rel
