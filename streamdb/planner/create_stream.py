"""CREATE STREAM."""

from __future__ import annotations

import time
from typing import Any

from sqlglot import exp

from streamdb import types as T
from streamdb.catalog import RelationDef
from streamdb.errors import DatatypeMismatch, FeatureNotSupported, InvalidParameterValue, UndefinedColumn
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
from streamdb.planner.windows import interval_seconds
from streamdb.sql import ast as S
from streamdb.sql.ast import CreateStream


def _watermark_delay(expr: exp.Expression, column: str) -> float:
    """`col` or `col - INTERVAL '5' SECOND` -> the delay in seconds."""
    if isinstance(expr, exp.Column) and normalize(expr.this) == column:
        return 0.0
    if isinstance(expr, exp.Sub) and isinstance(expr.this, exp.Column) and normalize(expr.this.this) == column:
        return interval_seconds(expr.expression, "watermark delay")
    raise FeatureNotSupported("a watermark must be `col` or `col - INTERVAL '...'`")


def plan(stmt: CreateStream, ctx: PlanContext, sql: str) -> CreateRelationPlan:
    schema, name = table_name(stmt.this)
    if schema not in (None, "public"):
        raise FeatureNotSupported(f'schema "{schema}" is not supported; relations live in "public"')
    if stmt.args.get("expression") is not None:
        if stmt.args.get("columns") or stmt.args.get("properties") or stmt.args.get("external"):
            raise FeatureNotSupported("CREATE STREAM ... AS SELECT takes no column list, options or EXTERNAL")
        from streamdb.planner import create_view

        return create_view.plan(stmt, ctx, sql, derived="stream")  # type: ignore[return-value]
    opts: StreamOptions = validate_options(StreamOptions, property_values(stmt.args.get("properties")), "stream")
    reject_connector_options(opts, bool(stmt.args.get("external")))
    defs = stmt.args.get("columns")
    columns, _ = column_defs(defs or [], stream=True, external=bool(stmt.args.get("external")),
                             watermarked_table=bool(stmt.args.get("table")))
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
    delay: float | None = None
    watermark = stmt.args.get("watermark")
    if watermark is not None:
        wm_col = normalize(watermark.this)
        if ts_col is not None and ts_col != wm_col:
            raise FeatureNotSupported(f'the watermark is on "{wm_col}" but the timestamp option names "{ts_col}"')
        col = next((c for c in columns if c.name == wm_col), None)
        if col is None or col.type not in (T.TIMESTAMP, T.TIMESTAMPTZ):
            raise DatatypeMismatch(f'watermark column "{wm_col}" must be a timestamp column of the stream')
        ts_col = wm_col
        delay = _watermark_delay(watermark.args["expression"], wm_col)
    elif opts.watermark is not None:
        delay = interval_seconds(exp.Literal.string(opts.watermark), "watermark")
    if delay is not None and schemaless:
        raise FeatureNotSupported("watermarks need a stream with declared columns")
    rel = RelationDef(
        id=0, name=name, kind="stream", columns=columns, schemaless=schemaless,
        timestamp_column=ts_col, partitions=opts.partitions, value_format=opts.value_format,
        options=tuple((k, str(v)) for k, v in opts.model_dump(exclude_defaults=True).items()),
        create_sql=sql.strip(), created_at=time.time(),
        extra=((("watermark_delay_seconds", delay),) if delay is not None else ())
        + ((("shown_as", "table"),) if stmt.args.get("table") else ()),
    )
    companions: tuple[RelationDef, ...] = ()
    if stmt.args.get("external"):
        from streamdb.planner.connectors import external_stream

        rel, errors = external_stream(rel, opts, ctx)
        companions = (errors,)
    return CreateRelationPlan(rel, if_not_exists=bool(stmt.args.get("exists")),
                              or_replace=bool(stmt.args.get("replace")), companions=companions)


_SOURCE_OPTIONS = {"topic": "kafka_topic", "properties.bootstrap.server": "bootstrap_servers",
                   "properties.bootstrap.servers": "bootstrap_servers", "scan.startup.mode": "scan_startup"}
# RisingWave's MQTT source options. Credentials need a connector (whose SHOW CREATE masks them).
_MQTT_SOURCE_OPTIONS = {"url": "mqtt_broker", "topic": "mqtt_topic", "qos": "qos"}


def plan_create_source(stmt: S.CreateSource, ctx: PlanContext, sql: str) -> CreateRelationPlan:
    """RisingWave's CREATE SOURCE name (...) WITH (connector = 'kafka', topic = '...',
    properties.bootstrap.server = '...') FORMAT PLAIN ENCODE JSON: an external stream."""
    values = property_values(stmt.args.get("properties"))
    connector = str(values.pop("connector", "kafka")).lower()
    if connector not in ("kafka", "mqtt"):
        raise FeatureNotSupported(f"CREATE SOURCE with connector '{connector}' is not supported",
                                  hint="connector = 'kafka' or 'mqtt'; files: CREATE SOURCE CONNECTOR ... FILE")
    known = _SOURCE_OPTIONS if connector == "kafka" else _MQTT_SOURCE_OPTIONS
    fmt = str(stmt.args.get("format") or "PLAIN").upper()
    if fmt != "PLAIN":
        raise FeatureNotSupported(f"FORMAT {fmt} is not supported (FORMAT PLAIN is)")
    encode = str(stmt.args.get("encode") or "JSON").lower()
    options: dict[str, Any] = {"format": encode}
    for key, value in values.items():
        target = known.get(key)
        if target is None:
            hint = "valid options are: connector, " + ", ".join(known)
            if connector == "mqtt" and key in ("username", "password", "client_id"):
                hint = ("credentials go in a connector: CREATE SOURCE CONNECTOR name MQTT WITH (broker = '...', "
                        "username = '...', password = '...'), then CREATE EXTERNAL STREAM ... WITH "
                        "(connector = 'name', ...)")
            raise InvalidParameterValue(f'unrecognized {connector} source option "{key}"', hint=hint)
        options[target] = value
    for key, value in property_values(stmt.args.get("encode_properties")).items():
        if key == "delimiter":
            options["csv_delimiter"] = value
        elif key == "schema" and encode == "avro":
            options["avro_schema"] = value
        elif key == "without_header":
            if str(value).lower() not in ("true", "1"):
                raise FeatureNotSupported("CSV sources with a header line are not supported (without_header = 'true')")
        else:
            raise InvalidParameterValue(f'unrecognized ENCODE {encode.upper()} option "{key}"')
    if "scan_startup" in options:
        options["scan_startup"] = str(options["scan_startup"]).lower()
    columns = list(stmt.args.get("columns") or [])
    for inc in stmt.args.get("includes") or []:
        what = str(inc.this).upper()
        alias = inc.args.get("alias")
        if what != "KEY":
            raise FeatureNotSupported(f"INCLUDE {what} is not supported (INCLUDE KEY is)")
        col = exp.ColumnDef(this=alias or exp.to_identifier("_rw_key"), kind=exp.DataType.build("bytea"),
                            constraints=[exp.ColumnConstraint(kind=S.StreamColumnRole(this="KEY"))])
        columns.append(col)
        options["key_format"] = "bytes"
    props = [exp.Property(this=exp.Var(this=k), value=exp.Literal.string(str(v))) for k, v in options.items()]
    node = S.CreateStream(this=stmt.this.copy(), columns=columns, properties=props, external=True,
                          watermark=stmt.args.get("watermark"), exists=stmt.args.get("exists"))
    return plan(node, ctx, sql)
