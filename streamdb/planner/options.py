"""WITH (...) options, validated by pydantic at the edge: unknown keys are rejected."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from sqlglot import exp

from streamdb.errors import FeatureNotSupported, InvalidParameterValue, StreamDBError


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    value_format: str = Field("json", alias="format")
    timestamp: str | None = None
    partitions: int = Field(1, ge=1, le=1024)
    watermark: str | None = None  # used by views (issue 3); recorded now
    key_format: str | None = None
    timestamp_format: str | None = None
    # External streams: records of a Kafka topic (through a source connector, or the server's
    # --kafka-bootstrap), or files of a FILE source connector.
    kafka_topic: str | None = None
    connector: str | None = None
    bootstrap_servers: str | None = None  # a Kafka stream without a connector (RisingWave's CREATE SOURCE)
    scan_startup: str = "earliest"  # where a new external stream starts reading: earliest | latest
    max_record_bytes: int = Field(1 << 20, ge=1)
    csv_delimiter: str = Field(",", min_length=1, max_length=1)
    avro_schema: str | None = None  # value_format avro: the writer's schema, as JSON
    schema_registry_url: str | None = None  # value_format avro: writer schemas by id from a registry
    pattern: str | None = None  # FILE connector: file names to read (glob), e.g. '*.jsonl'
    # MQTT streams: the topic filter and QoS (else the connector's), or a broker without a
    # connector (RisingWave's CREATE SOURCE ... WITH (connector = 'mqtt', url = '...')).
    mqtt_topic: str | None = None
    qos: int | str | None = None
    mqtt_broker: str | None = None

    @field_validator("value_format")
    @classmethod
    def _fmt(cls, v: str) -> str:
        v = v.lower()
        if v not in ("json", "csv", "text", "bytes", "avro"):
            raise ValueError(f"format '{v}' is not supported (supported: json, csv, text, bytes, avro)")
        return v

    @field_validator("key_format")
    @classmethod
    def _key_fmt(cls, v: str | None) -> str | None:
        if v is not None and v.lower() not in ("text", "json", "bytes"):
            raise ValueError(f"key format '{v}' is not supported (supported: text, json, bytes)")
        return v.lower() if v is not None else None

    @field_validator("scan_startup")
    @classmethod
    def _startup(cls, v: str) -> str:
        if v.lower() not in ("earliest", "latest"):
            raise ValueError("scan_startup is 'earliest' or 'latest'")
        return v.lower()


class TableOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    partitions: int = Field(1, ge=1, le=1024)
    append_only: bool = False  # RisingWave's APPEND ONLY: inserts only, no UPDATE or DELETE
    # A table following a PostgreSQL table (change data capture through logical replication):
    # a POSTGRES source connector, the upstream table (default: public.<name>), and a
    # publication of it (default: one StreamDB creates).
    connector: str | None = None
    postgres_table: str | None = None
    publication: str | None = None
    value_format: str = Field("json", alias="format")


def property_values(props: list[exp.Expression] | None) -> dict[str, Any]:
    """exp.Property list -> {lower-case name: python value}."""
    out: dict[str, Any] = {}
    for p in props or []:
        name_node = p.args.get("this")
        name = (name_node.name if isinstance(name_node, exp.Expression) else str(name_node)).lower()
        value = p.args.get("value")
        if isinstance(value, exp.Literal):
            v: Any = value.this if value.is_string else _number(value.this)
        elif isinstance(value, exp.Boolean):
            v = bool(value.this)
        elif isinstance(value, exp.Null) or value is None:
            v = None
        elif isinstance(value, (exp.Identifier, exp.Var, exp.Column)):
            v = value.name
        else:
            v = value.sql()
        if name in out:
            raise InvalidParameterValue(f'option "{name}" specified more than once')
        out[name] = v
    return out


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


def validate_options(model: type[BaseModel], values: dict[str, Any], what: str) -> Any:
    try:
        return model.model_validate(values)
    except ValidationError as e:
        msgs = []
        for err in e.errors():
            loc = ".".join(str(x) for x in err["loc"])
            if err["type"] == "extra_forbidden":
                known = sorted(
                    (f.alias or n) for n, f in model.model_fields.items()
                )
                raise InvalidParameterValue(
                    f'unrecognized {what} option "{loc}"',
                    hint="valid options are: " + ", ".join(known),
                ) from None
            msgs.append(f'invalid value for {what} option "{loc}": {err["msg"]}')
        raise InvalidParameterValue("; ".join(msgs)) from None


def reject_connector_options(opts: StreamOptions, external: bool) -> None:
    """An internal stream (stored by StreamDB, written by INSERT) takes no connector options."""
    if not external and (opts.kafka_topic or opts.connector or opts.mqtt_topic or opts.mqtt_broker):
        raise FeatureNotSupported(
            "a stream with a connector or kafka_topic reads from outside: declare it EXTERNAL",
            hint="CREATE EXTERNAL STREAM name (...) WITH (connector = '...', kafka_topic = '...')")
    if not external and opts.value_format != "json":
        raise FeatureNotSupported("an internal stream stores JSON (format = 'json'); other formats are for "
                                  "EXTERNAL streams")


__all__ = ["StreamOptions", "TableOptions", "property_values", "validate_options",
           "reject_connector_options", "StreamDBError"]
