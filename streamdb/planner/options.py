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
    # Connector-backed (EXTERNAL) streams arrive with issue 4; rejected for now.
    kafka_topic: str | None = None
    connector: str | None = None

    @field_validator("value_format")
    @classmethod
    def _fmt(cls, v: str) -> str:
        v = v.lower()
        if v not in ("json",):
            raise ValueError(f"format '{v}' is not supported for streams yet (supported: json)")
        return v


class TableOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    partitions: int = Field(1, ge=1, le=1024)
    append_only: bool = False  # RisingWave's APPEND ONLY: inserts only, no UPDATE or DELETE
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
    if external or opts.kafka_topic or opts.connector:
        raise FeatureNotSupported(
            "external streams (connector, kafka_topic) are not yet supported",
            hint="create an internal stream without EXTERNAL, kafka_topic and connector",
        )


__all__ = ["StreamOptions", "TableOptions", "property_values", "validate_options",
           "reject_connector_options", "StreamDBError"]
