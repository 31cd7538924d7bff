"""CREATE SOURCE CONNECTOR / CREATE SINK CONNECTOR, and what connector options may contain.

Options are validated by pydantic (unknown keys refused). Kafka client properties (keys with a
dot, optionally prefixed `properties.`) pass through an allowlist: properties that load files,
run commands or fetch URLs are refused unless the server enables them. Secret values (passwords,
DSNs) are kept in the catalog but masked in the statement text that SHOW CREATE shows.
"""

from __future__ import annotations

import re
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlglot import exp

from streamdb import types as T
from streamdb.catalog import ColumnDef, RelationDef
from streamdb.errors import FeatureNotSupported, InsufficientPrivilege, InvalidParameterValue
from streamdb.planner.context import PlanContext
from streamdb.planner.names import normalize
from streamdb.planner.options import property_values, validate_options
from streamdb.planner.plans import CreateObjectPlan
from streamdb.sql import ast as S

MASK = "********"

# librdkafka properties a statement may set. Anything else is refused with the list.
KAFKA_ALLOWED = {
    "client.id", "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
    "session.timeout.ms", "socket.timeout.ms", "request.timeout.ms", "metadata.max.age.ms",
    "fetch.max.bytes", "max.partition.fetch.bytes", "fetch.wait.max.ms", "message.max.bytes",
    "compression.type", "compression.codec", "linger.ms", "batch.size", "batch.num.messages", "acks",
    "retries", "retry.backoff.ms", "queue.buffering.max.ms", "queue.buffering.max.messages",
    "enable.ssl.certificate.verification", "ssl.endpoint.identification.algorithm", "isolation.level",
    "auto.offset.reset", "allow.auto.create.topics", "topic.metadata.refresh.interval.ms",
    "broker.address.family", "api.version.request",
}
# Properties that read files, load code, run commands or fetch URLs: only when the server's
# configuration sets allow_kafka_file_properties.
KAFKA_FILE_PROPERTIES = {
    "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.keystore.location",
    "ssl.crl.location", "ssl.engine.location", "ssl.key.password", "ssl.keystore.password",
    "sasl.kerberos.keytab", "sasl.kerberos.kinit.cmd", "sasl.kerberos.service.name", "sasl.kerberos.principal",
    "sasl.oauthbearer.config", "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.method",
    "sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret", "plugin.library.paths",
    "ssl_engine_id", "ssl.providers", "sasl.jaas.config", "oauth_cb",
}
# The dead-letter stream `<stream>_errors` of an external stream: where each bad record came
# from, why it was refused, and its bytes.
DEAD_LETTER_COLUMNS = (("source", T.TEXT), ("partition", T.INTEGER), ("offset", T.BIGINT), ("reason", T.TEXT),
                       ("raw_key", T.BYTEA), ("raw_value", T.BYTEA), ("raw_text", T.TEXT))
_SECRET = re.compile(r"password|secret|token|credential|dsn|jaas", re.IGNORECASE)


def is_secret(key: str) -> bool:
    return bool(_SECRET.search(key))


class KafkaConnectorOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bootstrap_servers: str = Field(min_length=1)


class PostgresConnectorOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dsn: str = Field(min_length=1)


class FileConnectorOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1)


_OPTION_MODELS: dict[str, type[BaseModel]] = {"kafka": KafkaConnectorOptions, "postgres": PostgresConnectorOptions,
                                               "file": FileConnectorOptions}
_KINDS = {"source": ("kafka", "file"), "sink": ("kafka", "postgres", "file")}


def kafka_properties(values: dict[str, Any]) -> dict[str, str]:
    """Split the Kafka client properties out of `values` (keys with a dot) and check them
    against the allowlist. Properties that touch files or URLs pass here; the runtime refuses
    them unless the server's configuration allows them (`file_properties`)."""
    out: dict[str, str] = {}
    for key in [k for k in values if "." in k]:
        prop = key.removeprefix("properties.")
        if prop == "bootstrap.server" or prop == "bootstrap.servers":
            values.setdefault("bootstrap_servers", values[key])
            del values[key]
            continue
        value = values.pop(key)
        if prop not in KAFKA_ALLOWED and prop not in KAFKA_FILE_PROPERTIES:
            raise InvalidParameterValue(f'Kafka property "{prop}" is not allowed',
                                        hint="allowed properties: " + ", ".join(sorted(KAFKA_ALLOWED)))
        out[prop] = "true" if value is True else "false" if value is False else str(value)
    return out


def file_properties(options: dict[str, str] | tuple[tuple[str, str], ...]) -> list[str]:
    """The options that read files, load code or fetch URLs (refused unless allowed)."""
    return sorted(k for k in dict(options) if k in KAFKA_FILE_PROPERTIES)


def refuse_file_properties(options: dict[str, str] | tuple[tuple[str, str], ...]) -> None:
    found = file_properties(options)
    if found:
        raise InsufficientPrivilege(
            f'Kafka property "{found[0]}" reads files, loads code or fetches URLs and is not allowed',
            hint="An administrator can allow it with the server setting allow_kafka_file_properties.")


def connector_options(kind: str, values: dict[str, Any]) -> dict[str, str]:
    """Validated options of a connector of `kind`, Kafka client properties included."""
    values = dict(values)
    props = kafka_properties(values) if kind == "kafka" else {}
    model = validate_options(_OPTION_MODELS[kind], values, f"{kind} connector")
    return {**{k: str(v) for k, v in model.model_dump().items()}, **props}


def masked_sql(stmt: exp.Expression) -> str:
    """The statement's text with secret option values masked (what SHOW CREATE shows)."""
    from streamdb.sql.parser import generate

    copy = stmt.copy()
    for prop in copy.find_all(exp.Property):
        name = prop.args.get("this")
        key = name.name if isinstance(name, exp.Expression) else str(name)
        if is_secret(key):
            prop.set("value", exp.Literal.string(MASK))
    return generate(copy)


def mask_text(text: str) -> str:
    """A DSN or URL with its password masked."""
    text = re.sub(r"(://[^:/@\s]+:)([^@\s]+)(@)", lambda m: m.group(1) + MASK + m.group(3), text)
    return re.sub(r"(password\s*=\s*)(\S+)", lambda m: m.group(1) + MASK, text, flags=re.IGNORECASE)


def plan_create_connector(stmt: S.CreateConnector, ctx: PlanContext) -> CreateObjectPlan:
    name = normalize(stmt.this)
    direction = str(stmt.args["direction"]).lower()
    kind = str(stmt.args["kind"]).lower()
    if kind not in _KINDS[direction]:
        raise FeatureNotSupported(f"{kind.upper()} {direction} connectors are not supported",
                                  hint=f"{direction} connectors: " + ", ".join(k.upper() for k in _KINDS[direction]))
    values = property_values(stmt.args.get("properties"))
    options = connector_options(kind, values)
    obj = RelationDef(id=0, name=name, kind="connector", columns=(),
                      options=(("type", kind), ("direction", direction), *sorted(options.items())),
                      create_sql=masked_sql(stmt), created_at=time.time())
    return CreateObjectPlan(obj, if_not_exists=bool(stmt.args.get("exists")))


def external_stream(rel: RelationDef, opts: Any, ctx: PlanContext) -> tuple[RelationDef, RelationDef]:
    """An EXTERNAL stream (checked against its connector) and its dead-letter stream."""
    import json
    from dataclasses import replace

    from streamdb.errors import UndefinedObject

    if rel.schemaless:
        raise FeatureNotSupported("an external stream needs declared columns",
                                  hint="CREATE EXTERNAL STREAM name (col type, ...) WITH (...)")
    source_type = "kafka"
    depends: tuple[int, ...] = ()
    if opts.connector:
        conn = ctx.catalog.object("connector", normalize(exp.to_identifier(opts.connector)))
        if conn is None:
            raise UndefinedObject(f'connector "{opts.connector}" does not exist',
                                  hint="CREATE SOURCE CONNECTOR name KAFKA WITH (bootstrap_servers = '...')")
        conn_opts = dict(conn.options)
        if conn_opts.get("direction") != "source":
            raise InvalidParameterValue(f'connector "{conn.name}" is a sink connector, not a source')
        source_type = conn_opts["type"]
        depends = (conn.id,)
    if source_type == "kafka" and not opts.kafka_topic:
        raise InvalidParameterValue("an external Kafka stream needs the option kafka_topic")
    if source_type == "file" and opts.kafka_topic:
        raise InvalidParameterValue("kafka_topic is for Kafka streams; a FILE stream reads its connector's path")
    if opts.value_format == "avro":
        if not opts.avro_schema and not opts.schema_registry_url:
            raise InvalidParameterValue("value_format 'avro' needs the option avro_schema (the schema as JSON) "
                                        "or schema_registry_url")
        if opts.schema_registry_url and not str(opts.schema_registry_url).startswith(("http://", "https://")):
            raise InvalidParameterValue("schema_registry_url must be an http:// or https:// URL")
        try:
            if opts.avro_schema:
                json.loads(opts.avro_schema)
        except json.JSONDecodeError as e:
            raise InvalidParameterValue(f"avro_schema is not valid JSON: {e}") from None
    if opts.value_format in ("text", "bytes") and len([c for c in rel.columns if c.role is None]) != 1:
        raise InvalidParameterValue(f"value_format '{opts.value_format}' fills exactly one value column")
    errors_name = f"{rel.name}_errors"
    if ctx.catalog.get(errors_name) is not None:
        raise InvalidParameterValue(f'the dead-letter stream "{errors_name}" of "{rel.name}" would replace an '
                                    "existing relation of that name")
    errors = RelationDef(id=0, name=errors_name, kind="stream",
                         columns=tuple(ColumnDef(n, t) for n, t in DEAD_LETTER_COLUMNS),
                         create_sql=f"-- dead letters of external stream {rel.name}", created_at=rel.created_at,
                         extra=(("dead_letters_of", rel.name),))
    rel = replace(rel, depends_on=depends,
                  extra=(*rel.extra, ("external", source_type), ("dead_letters", errors_name)))
    return rel, errors
