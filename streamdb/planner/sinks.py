"""CREATE SINK: deliver a relation's changes to a Kafka topic, a Postgres table or files.

    CREATE SINK [IF NOT EXISTS] name FROM relation INTO connector WITH (option = value, ...)
    CREATE SINK name FROM relation WITH (connector = 'kafka', topic = '...',
        properties.bootstrap.server = '...') [FORMAT PLAIN | UPSERT ENCODE JSON]   -- RisingWave's form

The sink is a catalog object (kind 'sink') whose options say everything the runtime needs
(streamdb/runtime/connectors/sinks.py): the relation, the connector, its type, the validated
options and the key by which changes are consolidated and upserted. The key is resolved here,
once: the `key` option, else a table's primary key, else a view's GROUP BY (or DISTINCT)
columns, else the key of the one relation a plain projection reads.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlglot import exp

from streamdb.catalog import CatalogSnapshot, RelationDef
from streamdb.errors import (
    FeatureNotSupported,
    InvalidParameterValue,
    StreamDBError,
    UndefinedColumn,
    UndefinedObject,
    WrongObjectType,
)
from streamdb.planner.aggregate import append_only
from streamdb.planner.connectors import kafka_properties, masked_sql
from streamdb.planner.context import PlanContext
from streamdb.planner.names import lookup_relation, normalize, table_name
from streamdb.planner.options import property_values, validate_options
from streamdb.planner.plans import CreateObjectPlan
from streamdb.planner.privileges import require
from streamdb.sql import ast as S

FILE_FORMATS = ("json", "csv", "parquet")


def _lower_choice(value: str, allowed: tuple[str, ...], what: str) -> str:
    v = value.lower()
    if v not in allowed:
        raise ValueError(f"{what} '{value}' is not supported (supported: {', '.join(allowed)})")
    return v


class KafkaSinkOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topic: str = Field(min_length=1)
    format: str = "json"
    key: str | None = None  # comma-separated columns: the message key (and what upserts consolidate by)
    exactly_once: bool = False  # Kafka transactions; consumers read with isolation.level=read_committed

    @field_validator("format")
    @classmethod
    def _format(cls, v: str) -> str:
        return _lower_choice(v, ("json",), "format")


class RisingWaveKafkaSinkOptions(KafkaSinkOptions):
    """RisingWave's form names no connector object: the bootstrap servers come with the sink."""

    bootstrap_servers: str = Field(min_length=1)


class PostgresSinkOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    table: str = Field(min_length=1)  # the target table ([schema.]name) in the connector's database
    key: str | None = None
    create_table: bool = False


class FileSinkOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: str = "json"
    path: str | None = None  # a subdirectory of the connector's path
    key: str | None = None  # what a batch's changes are consolidated by

    @field_validator("format")
    @classmethod
    def _format(cls, v: str) -> str:
        return _lower_choice(v, FILE_FORMATS, "format")


_MODELS: dict[str, type[BaseModel]] = {"kafka": KafkaSinkOptions, "postgres": PostgresSinkOptions,
                                       "file": FileSinkOptions}


def plan_create_sink(stmt: S.CreateSink, ctx: PlanContext) -> CreateObjectPlan:
    name = table_name(stmt.this)[1]
    if stmt.args.get("expression") is not None:
        raise FeatureNotSupported("CREATE SINK ... AS query is not supported",
                                  hint="CREATE MATERIALIZED VIEW v AS <query>, then CREATE SINK name FROM v INTO ...")
    source = stmt.args.get("source")
    assert isinstance(source, exp.Table)
    rel = lookup_relation(ctx, source)
    require(ctx, rel, "SELECT", source)
    values = property_values(stmt.args.get("properties"))
    connector = stmt.args.get("connector")
    kafka_props: dict[str, str] = {}
    depends: tuple[int, ...] = (rel.id,)
    if connector is not None:
        conn_name = normalize(connector)
        conn = ctx.catalog.object("connector", conn_name)
        if conn is None:
            raise UndefinedObject(f'connector "{conn_name}" does not exist',
                                  hint="CREATE SINK CONNECTOR name KAFKA | POSTGRES | FILE WITH (...)")
        conn_opts = dict(conn.options)
        if conn_opts.get("direction") != "sink":
            raise WrongObjectType(f'connector "{conn_name}" is a {conn_opts.get("direction")} connector, '
                                  "not a sink connector",
                                  hint=f"CREATE SINK CONNECTOR name {str(conn_opts.get('type', '')).upper()} "
                                       "WITH (...)")
        sink_type = conn_opts["type"]
        depends = (rel.id, conn.id)
        if stmt.args.get("format") is not None:
            raise FeatureNotSupported("FORMAT ... ENCODE is for sinks that name their connector in the options",
                                      hint="With INTO a connector, say WITH (format = 'json').")
        model = _MODELS[sink_type]
    else:
        conn_name = ""
        sink_type, model = _risingwave_form(stmt, values)
        kafka_props = kafka_properties(values)
    opts = validate_options(model, values, f"{sink_type} sink")
    key = _key(rel, ctx.catalog, opts.key, sink_type, name)
    options: dict[str, str] = {k: _text(v) for k, v in opts.model_dump().items() if v is not None and k != "key"}
    if key:
        options["key"] = ",".join(key)
    obj = RelationDef(
        id=0, name=name, kind="sink", columns=(),
        options=(("from", rel.name), ("from_id", str(rel.id)), *((("connector", conn_name),) if conn_name else ()),
                 ("type", sink_type),
                 *sorted(options.items()), *sorted(kafka_props.items())),
        depends_on=depends, create_sql=masked_sql(stmt), created_at=time.time())
    return CreateObjectPlan(obj, if_not_exists=bool(stmt.args.get("exists")))


def _text(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def _risingwave_form(stmt: S.CreateSink, values: dict[str, Any]) -> tuple[str, type[BaseModel]]:
    """WITH (connector = 'kafka', topic = ..., properties.bootstrap.server = ..., primary_key = ...)
    [FORMAT PLAIN | UPSERT ENCODE JSON]: only Kafka (other sinks need a connector object)."""
    kind = str(values.pop("connector", "") or "").lower()
    if kind != "kafka":
        raise FeatureNotSupported(
            f"a sink without INTO a connector must say connector = 'kafka' (got '{kind or 'nothing'}')",
            hint="CREATE SINK CONNECTOR c POSTGRES | FILE WITH (...); CREATE SINK s FROM rel INTO c WITH (...)")
    if "primary_key" in values:
        values["key"] = values.pop("primary_key")
    fmt, encode = stmt.args.get("format"), stmt.args.get("encode")
    if fmt is not None:
        if str(encode).upper() != "JSON":
            raise FeatureNotSupported(f"ENCODE {encode} is not supported for sinks (supported: JSON)")
        if str(fmt).upper() not in ("PLAIN", "UPSERT"):
            raise FeatureNotSupported(f"FORMAT {fmt} is not supported for sinks (supported: PLAIN, UPSERT)")
        if str(fmt).upper() == "UPSERT" and not values.get("key"):
            raise InvalidParameterValue("FORMAT UPSERT needs primary_key = 'column, ...'")
        if stmt.args.get("encode_properties"):
            raise FeatureNotSupported("ENCODE JSON takes no options here")
    return "kafka", RisingWaveKafkaSinkOptions


def _key(rel: RelationDef, catalog: CatalogSnapshot, given: str | None, sink_type: str,
         sink_name: str) -> tuple[str, ...]:
    """The columns identifying a row of `rel` for this sink (empty: changes are appended as they are)."""
    if given:
        key = []
        for part in given.split(","):
            column = part.strip()
            found = rel.column(column) or rel.column(column.lower())
            if found is None:
                raise UndefinedColumn(f'key column "{column}" does not exist in "{rel.name}"',
                                      hint="columns: " + ", ".join(rel.column_names()))
            key.append(found.name)
        return tuple(key)
    if append_only(rel):
        return ()
    derived = relation_key(rel, catalog)
    if derived:
        return derived
    if sink_type == "postgres":
        raise InvalidParameterValue(
            f'sink "{sink_name}" upserts into Postgres by key, and the key of "{rel.name}" cannot be derived',
            hint="Name the columns that identify a row: WITH (..., key = 'col1, col2').")
    return ()


def relation_key(rel: RelationDef, catalog: CatalogSnapshot, depth: int = 0) -> tuple[str, ...]:
    """Columns whose values identify one row of `rel`, when that follows from its definition."""
    if rel.primary_key:
        return rel.primary_key
    if rel.kind != "materialized_view" or depth > 16:
        return ()
    from streamdb.planner.create_view import view_query

    try:
        query = view_query(rel)
    except StreamDBError:
        return ()
    if not isinstance(query, exp.Select) or any(query.args.get(a) for a in ("laterals", "pivots", "with")):
        return ()
    items = list(query.expressions)
    names = rel.column_names()
    if any(isinstance(i.unalias(), exp.Star) for i in items):
        if len(items) != 1 or query.args.get("group") or query.args.get("distinct") or query.args.get("joins"):
            return ()
        inner = _single_input(query, catalog)
        return relation_key(inner, catalog, depth + 1) if inner is not None else ()
    if len(items) != len(names):
        return ()
    distinct = query.args.get("distinct")
    if distinct is not None:
        return () if distinct.args.get("on") is not None else tuple(names)
    group = query.args.get("group")
    if group is not None:
        if any(group.args.get(a) for a in ("grouping_sets", "cube", "rollup", "totals")):
            return ()
        shapes = [_shape(i.unalias()) for i in items]
        key: list[str] = []
        for g in group.expressions:
            aliases = [i.alias for i in items]
            if isinstance(g, exp.Literal) and g.is_int:
                index = int(g.this) - 1
            elif _shape(g) in shapes:
                index = shapes.index(_shape(g))
            elif isinstance(g, exp.Column) and not g.args.get("table") and g.name in aliases:
                index = aliases.index(g.name)  # GROUP BY an output name
            else:
                index = -1
            if not 0 <= index < len(names):
                return ()  # a group key that is not output: output rows need not be distinct
            key.append(names[index])
        return tuple(dict.fromkeys(key))
    if query.args.get("joins") or any(i.unalias().find(exp.AggFunc) for i in items):
        return ()
    # A projection of one relation keeps its key when every key column is output as it is.
    inner = _single_input(query, catalog)
    inner_key = relation_key(inner, catalog, depth + 1) if inner is not None else ()
    if not inner_key:
        return ()
    out = []
    for column in inner_key:
        found = [names[i] for i, item in enumerate(items)
                 if isinstance(item.unalias(), exp.Column) and item.unalias().name == column]
        if not found:
            return ()
        out.append(found[0])
    return tuple(out)


def _single_input(query: exp.Select, catalog: CatalogSnapshot) -> RelationDef | None:
    frm = query.args.get("from") or query.args.get("from_")
    source = frm.this if frm is not None else None
    if not isinstance(source, exp.Table) or not isinstance(source.this, exp.Identifier):
        return None
    return catalog.get(table_name(source)[1])


def _shape(node: exp.Expression) -> str:
    """An expression's text without table qualifiers, to match GROUP BY keys with select items."""
    def strip(n: exp.Expression) -> exp.Expression:
        return exp.column(n.this.copy()) if isinstance(n, exp.Column) and n.args.get("table") else n
    return node.copy().transform(strip).sql(dialect="postgres").lower()
