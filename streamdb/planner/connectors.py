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
from streamdb.planner.options import StreamOptions, property_values, validate_options
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


class MqttConnectorOptions(BaseModel):
    """An MQTT broker, and defaults for the streams that read from it (each may set its own)."""

    model_config = ConfigDict(extra="forbid")

    broker: str = Field(min_length=1)  # host[:port], tcp://host:port, mqtt://..., mqtts://... (TLS)
    topic: str | None = None  # a topic filter: a/b, a/+/c, a/#
    qos: int | str | None = None  # 0 (at most once) or 1 (at least once, the default)
    format: str | None = None  # the value format of its streams: json, csv, text, bytes
    username: str | None = None
    password: str | None = None
    client_id: str | None = None  # the MQTT session's id; default: one per stream, kept across restarts


_OPTION_MODELS: dict[str, type[BaseModel]] = {"kafka": KafkaConnectorOptions, "postgres": PostgresConnectorOptions,
                                               "file": FileConnectorOptions, "mqtt": MqttConnectorOptions}
_KINDS = {"source": ("kafka", "file", "mqtt", "postgres"), "sink": ("kafka", "postgres", "file")}
MQTT_PORTS = {"tcp": 1883, "mqtt": 1883, "ssl": 8883, "mqtts": 8883, "tls": 8883}


def mqtt_broker(text: str) -> tuple[str, int, bool]:
    """`host[:port]` or `scheme://host[:port]` -> (host, port, tls)."""
    from urllib.parse import urlsplit

    raw = text.strip()
    url = urlsplit(raw if "://" in raw else f"tcp://{raw}")
    scheme = url.scheme.lower()
    if scheme not in MQTT_PORTS:
        raise InvalidParameterValue(f'MQTT broker "{text}" has an unknown scheme "{scheme}"',
                                    hint="tcp://host:1883, mqtt://host:1883, mqtts://host:8883 or host:port")
    try:
        port = url.port or MQTT_PORTS[scheme]
    except ValueError:
        raise InvalidParameterValue(f'MQTT broker "{text}" has an invalid port') from None
    if not url.hostname or url.path not in ("", "/") or url.username or url.query:
        raise InvalidParameterValue(f'MQTT broker "{text}" is not host[:port] or scheme://host[:port]',
                                    hint="credentials go in the options username and password")
    return url.hostname, port, scheme in ("ssl", "mqtts", "tls")


def mqtt_qos(value: int | str | None) -> int:
    """0 or 1, also by RisingWave's names; QoS 2 is refused, with the reason."""
    names = {"0": 0, "at_most_once": 0, "1": 1, "at_least_once": 1, "2": 2, "exactly_once": 2}
    qos = 1 if value is None else names.get(str(value).strip().lower())
    if qos is None:
        raise InvalidParameterValue(f'invalid MQTT qos "{value}"', hint="qos is 0 (at most once) or 1 (at least once)")
    if qos == 2:
        raise FeatureNotSupported(
            "MQTT qos 2 (exactly once) is not supported",
            hint="Use qos 1: StreamDB acknowledges a message only after it is stored, so none is lost; a crash "
                 "between the two can repeat the last batch. The MQTT client keeps QoS 2 state only in memory, so "
                 "QoS 2 could lose a message in that window instead.")
    return qos


def mqtt_topic_filter(topic: str) -> str:
    """A valid MQTT topic filter: '+' is a whole level, '#' only the last one."""
    levels = topic.split("/")
    if not topic or "\x00" in topic or len(topic.encode()) > 65535:
        raise InvalidParameterValue(f'invalid MQTT topic filter "{topic}"')
    for i, level in enumerate(levels):
        if ("+" in level and level != "+") or ("#" in level and (level != "#" or i != len(levels) - 1)):
            raise InvalidParameterValue(f'invalid MQTT topic filter "{topic}"',
                                        hint="'+' stands for one whole level (a/+/c), '#' for the rest (a/#)")
    return topic


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
    if isinstance(model, MqttConnectorOptions):
        mqtt_broker(model.broker)
        model.qos = mqtt_qos(model.qos)
        if model.topic is not None:
            mqtt_topic_filter(model.topic)
        if model.format is not None:
            model.format = StreamOptions.model_validate({"format": model.format}).value_format
    return {**{k: str(v) for k, v in model.model_dump(exclude_none=True).items()}, **props}


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
    conn_opts: dict[str, str] = {}
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
    elif opts.mqtt_broker:
        source_type = "mqtt"
        mqtt_broker(opts.mqtt_broker)
    if source_type == "kafka" and not opts.kafka_topic:
        raise InvalidParameterValue("an external Kafka stream needs the option kafka_topic")
    if source_type != "kafka" and opts.kafka_topic:
        raise InvalidParameterValue(f"kafka_topic is for Kafka streams, not {source_type.upper()} ones")
    if source_type == "mqtt":
        rel = _mqtt_stream(rel, opts, conn_opts)
    elif opts.mqtt_topic or opts.qos is not None:
        raise InvalidParameterValue("mqtt_topic and qos are for MQTT streams")
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
    if rel.value_format in ("text", "bytes") and len([c for c in rel.columns if c.role is None]) != 1:
        raise InvalidParameterValue(f"value_format '{rel.value_format}' fills exactly one value column")
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


def postgres_cdc_table(rel: RelationDef, opts: Any, ctx: PlanContext) -> RelationDef:
    """A table whose rows follow a PostgreSQL table through logical replication (a POSTGRES source
    connector): keyed like its upstream table, written only by its source."""
    from dataclasses import replace

    from streamdb.errors import UndefinedObject

    if not opts.connector:
        raise InvalidParameterValue("postgres_table and publication need connector = '<a POSTGRES source connector>'")
    conn = ctx.catalog.object("connector", normalize(exp.to_identifier(opts.connector)))
    if conn is None:
        raise UndefinedObject(f'connector "{opts.connector}" does not exist',
                              hint="CREATE SOURCE CONNECTOR name POSTGRES WITH (dsn = 'postgresql://...')")
    conn_opts = dict(conn.options)
    if conn_opts.get("direction") != "source" or conn_opts.get("type") != "postgres":
        raise InvalidParameterValue(f'connector "{conn.name}" is not a POSTGRES source connector',
                                    hint="a table follows a PostgreSQL table through a POSTGRES source connector; "
                                         "Kafka, MQTT and files feed EXTERNAL streams")
    if not rel.primary_key:
        raise InvalidParameterValue(f'table "{rel.name}" follows a PostgreSQL table and needs its primary key',
                                    hint="declare the upstream table's primary key: PRIMARY KEY (...)")
    if opts.append_only:
        raise InvalidParameterValue("a table following a PostgreSQL table takes its updates and deletes too: "
                                    "append_only does not apply")
    upstream = opts.postgres_table or rel.name
    parts = upstream.split(".")
    if len(parts) > 2 or not all(parts):
        raise InvalidParameterValue(f'postgres_table "{upstream}" is not table or schema.table')
    schema, table = (parts if len(parts) == 2 else ["public", parts[0]])
    options = {"postgres_table": f"{schema}.{table}", "connector": conn.name}
    if opts.publication:
        options["publication"] = opts.publication
    return replace(rel, depends_on=(conn.id,), options=tuple(sorted(options.items())),
                   extra=(*rel.extra, ("external", "postgres")))


def _mqtt_stream(rel: RelationDef, opts: StreamOptions, conn_opts: dict[str, str]) -> RelationDef:
    """An MQTT stream's topic filter and QoS (its own, else its connector's), checked and kept in
    its options; its value format, unless it names one, is the connector's."""
    from dataclasses import replace

    topic = opts.mqtt_topic or conn_opts.get("topic")
    if not topic:
        raise InvalidParameterValue("an external MQTT stream needs a topic filter: the option mqtt_topic "
                                    "(or topic on its connector)")
    mqtt_topic_filter(topic)
    qos = mqtt_qos(opts.qos if opts.qos is not None else conn_opts.get("qos"))
    if opts.value_format == "avro":
        raise FeatureNotSupported("Avro is not supported for MQTT streams (json, csv, text or bytes are)")
    value_format = rel.value_format
    if "value_format" not in opts.model_fields_set and conn_opts.get("format"):
        value_format = conn_opts["format"]
    options = dict(rel.options)
    options.update({"mqtt_topic": topic, "qos": str(qos), "value_format": value_format})
    return replace(rel, value_format=value_format, options=tuple(options.items()))
