"""ALTER { TABLE | STREAM | VIEW | MATERIALIZED VIEW } [IF EXISTS] name RENAME TO new_name."""

from __future__ import annotations

from streamdb.planner.context import PlanContext
from streamdb.planner.names import table_name
from streamdb.planner.plans import RenamePlan
from streamdb.sql import ast as S

KINDS = {"STREAM": "stream", "TABLE": "table", "VIEW": "view", "MATERIALIZED VIEW": "materialized_view"}


def plan(stmt: S.RenameRelation, ctx: PlanContext) -> RenamePlan:
    """Checked against the catalog when it runs (under the DDL lock): the names here are the
    statement's, normalized."""
    from streamdb.errors import FeatureNotSupported

    _, name = table_name(stmt.this)
    schema, new_name = table_name(stmt.args["to"])
    if schema not in (None, "public"):
        raise FeatureNotSupported(f'schema "{schema}" is not supported; relations live in "public"')
    return RenamePlan(kind=KINDS[str(stmt.args["kind"])], name=name, new_name=new_name,
                      if_exists=bool(stmt.args.get("exists")))
