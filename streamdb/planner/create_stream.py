"""CREATE STREAM."""

from __future__ import annotations

import time

from streamdb import types as T
from streamdb.catalog import RelationDef
from streamdb.errors import DatatypeMismatch, FeatureNotSupported, UndefinedColumn
from streamdb.planner.columns import column_defs
from streamdb.planner.context import PlanContext
from streamdb.planner.names import normalize, table_name
from streamdb.planner.options import (
    StreamOptions,
    property_values,
    reject_connector_options,
    validate_options,
)
from streamdb.planner.plans import CreateRelationPlan
from streamdb.sql.ast import CreateStream


def plan(stmt: CreateStream, ctx: PlanContext, sql: str) -> CreateRelationPlan:
    schema, name = table_name(stmt.this)
    if schema not in (None, "public"):
        raise FeatureNotSupported(f'schema "{schema}" is not supported; relations live in "public"')
    if stmt.args.get("expression") is not None:
        if stmt.args.get("columns") or stmt.args.get("properties") or stmt.args.get("external"):
            raise FeatureNotSupported("CREATE STREAM ... AS SELECT takes no column list, options or EXTERNAL")
        from streamdb.planner import create_view

        return create_view.plan(stmt, ctx, sql, derived="stream")  # type: ignore[return-value]
    if stmt.args.get("watermark") is not None:
        raise FeatureNotSupported("watermarks are not yet supported")
    opts: StreamOptions = validate_options(StreamOptions, property_values(stmt.args.get("properties")), "stream")
    reject_connector_options(opts, bool(stmt.args.get("external")))
    defs = stmt.args.get("columns")
    columns, _ = column_defs(defs or [], stream=True)
    schemaless = defs is None or len(defs) == 0
    ts_col = normalize(opts.timestamp) if opts.timestamp else None
    if ts_col is not None and not schemaless:
        col = next((c for c in columns if c.name == ts_col), None)
        if col is None:
            raise UndefinedColumn(f'timestamp column "{ts_col}" does not exist in stream "{name}"')
        if col.type not in (T.TIMESTAMP, T.TIMESTAMPTZ, T.BIGINT):
            raise DatatypeMismatch(
                f'timestamp column "{ts_col}" must be timestamp, timestamptz or bigint (epoch ms), '
                f"not {col.type.name}")
    rel = RelationDef(
        id=0, name=name, kind="stream", columns=columns, schemaless=schemaless,
        timestamp_column=ts_col, partitions=opts.partitions, value_format=opts.value_format,
        options=tuple((k, str(v)) for k, v in opts.model_dump(exclude_defaults=True).items()),
        create_sql=sql.strip(), created_at=time.time(),
    )
    return CreateRelationPlan(rel, if_not_exists=bool(stmt.args.get("exists")),
                              or_replace=bool(stmt.args.get("replace")))
