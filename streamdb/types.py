"""Logical SQL types: one table mapping each type to its Postgres name, OID and Arrow type.

Values inside the server are plain Python objects:
bool, int, float, decimal.Decimal, str, bytes, datetime.date, datetime.time,
datetime.datetime (timezone-aware UTC for timestamptz, naive for timestamp),
datetime.timedelta (interval), str holding JSON text (jsonb/json), uuid.UUID.
The wire layer owns the text and binary encodings of these values.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pyarrow as pa

from streamdb.errors import InvalidParameterValue


@dataclass(frozen=True, slots=True)
class SqlType:
    """A logical SQL type. `name` is the canonical Postgres spelling."""

    name: str
    oid: int
    typlen: int  # as in pg_type.typlen: fixed size in bytes, -1 for varlena
    array_oid: int
    category: str  # pg_type.typcategory: B boolean, N numeric, S string, D datetime, T timespan, U user, ...
    # pg_attribute.atttypmod: varchar(n) is n + 4, numeric(p, s) is (p << 16 | s) + 4, -1 for
    # none. Not part of equality, so varchar(20) is still VARCHAR wherever code asks
    # `t in (T.TEXT, T.VARCHAR)` or `t == T.NUMERIC` (but not `t is T.NUMERIC`).
    typmod: int = field(default=-1, compare=False)

    def arrow(self) -> pa.DataType:
        precision_scale = self.precision_scale
        if precision_scale is not None:
            # numeric(p, s) is stored at its own scale, so values keep exactly s decimals.
            precision, scale = precision_scale
            return pa.decimal128(min(precision, 38), min(scale, 38))
        return _ARROW[self.name]

    @property
    def precision_scale(self) -> tuple[int, int] | None:
        """(p, s) of numeric(p, s); None for unconstrained numeric and other types."""
        if self.oid != NUMERIC_OID or self.typmod < 4:
            return None
        return (self.typmod - 4) >> 16, (self.typmod - 4) & 0xFFFF

    @property
    def max_length(self) -> int | None:
        """n of varchar(n); None when unbounded."""
        return self.typmod - 4 if self.oid == VARCHAR_OID and self.typmod >= 4 else None

    def spelled(self) -> str:
        """The name with its modifier, as format_type() prints it: character varying(20)."""
        n = self.max_length
        if n is not None:
            return f"{self.name}({n})"
        precision_scale = self.precision_scale
        if precision_scale is not None:
            return f"{self.name}({precision_scale[0]},{precision_scale[1]})"
        return self.name

    def __str__(self) -> str:
        return self.name


VARCHAR_OID = 1043
NUMERIC_OID = 1700
# Postgres's limit on numeric(p, s) precision. Stored values hold at most 38 digits (decimal128).
NUMERIC_MAX_PRECISION = 1000


BOOLEAN = SqlType("boolean", 16, 1, 1000, "B")
BYTEA = SqlType("bytea", 17, -1, 1001, "U")
BIGINT = SqlType("bigint", 20, 8, 1016, "N")
SMALLINT = SqlType("smallint", 21, 2, 1005, "N")
INTEGER = SqlType("integer", 23, 4, 1007, "N")
TEXT = SqlType("text", 25, -1, 1009, "S")
OID = SqlType("oid", 26, 4, 1028, "N")
JSON = SqlType("json", 114, -1, 199, "U")
REAL = SqlType("real", 700, 4, 1021, "N")
DOUBLE = SqlType("double precision", 701, 8, 1022, "N")
VARCHAR = SqlType("character varying", VARCHAR_OID, -1, 1015, "S")
DATE = SqlType("date", 1082, 4, 1182, "D")
TIME = SqlType("time without time zone", 1083, 8, 1183, "D")
TIMESTAMP = SqlType("timestamp without time zone", 1114, 8, 1115, "D")
TIMESTAMPTZ = SqlType("timestamp with time zone", 1184, 8, 1185, "D")
INTERVAL = SqlType("interval", 1186, 16, 1187, "T")
NUMERIC = SqlType("numeric", NUMERIC_OID, -1, 1231, "N")
UUID = SqlType("uuid", 2950, 16, 2951, "U")
JSONB = SqlType("jsonb", 3802, -1, 3807, "U")
NAME = SqlType("name", 19, 64, 1003, "S")
CHAR = SqlType("\"char\"", 18, 1, 1002, "S")
# A value whose type could not be inferred; sent to clients as text.
UNKNOWN = SqlType("unknown", 705, -2, 0, "X")

ALL_TYPES: tuple[SqlType, ...] = (
    BOOLEAN, BYTEA, BIGINT, SMALLINT, INTEGER, TEXT, OID, JSON, REAL, DOUBLE, VARCHAR,
    DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL, NUMERIC, UUID, JSONB, NAME, CHAR,
)

BY_OID: dict[int, SqlType] = {t.oid: t for t in ALL_TYPES}


@dataclass(frozen=True)
class ArraySqlType(SqlType):
    """A one-dimensional array of `element` (pg_type category 'A'), e.g. text[] with OID 1009."""

    element: SqlType | None = None

    def arrow(self) -> pa.DataType:
        assert self.element is not None
        return pa.list_(self.element.arrow())

    def spelled(self) -> str:
        """numeric(30,20)[] for an array of numeric(30, 20): the element keeps its modifier, which
        sets how its values are stored (so the catalog writes it too)."""
        assert self.element is not None
        return f"{self.element.spelled()}[]"


ARRAY_TYPES: dict[str, ArraySqlType] = {
    t.name: ArraySqlType(f"{t.name}[]", t.array_oid, -1, 0, "A", element=t) for t in ALL_TYPES
}


def array_of(element: SqlType) -> ArraySqlType:
    """The array type of `element`, which keeps its modifier (numeric(30, 20)[]: its values are
    stored at scale 20, as a numeric(30, 20) column's are)."""
    if element.typmod < 0 and element.name in ARRAY_TYPES:
        return ARRAY_TYPES[element.name]
    return ArraySqlType(f"{element.name}[]", element.array_oid, -1, 0, "A", element=element)

_ARROW: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "bytea": pa.binary(),
    "bigint": pa.int64(),
    "smallint": pa.int16(),
    "integer": pa.int32(),
    "text": pa.string(),
    "oid": pa.int64(),
    "json": pa.string(),
    "real": pa.float32(),
    "double precision": pa.float64(),
    "character varying": pa.string(),
    "date": pa.date32(),
    "time without time zone": pa.time64("us"),
    "timestamp without time zone": pa.timestamp("us"),
    "timestamp with time zone": pa.timestamp("us", tz="UTC"),
    "interval": pa.month_day_nano_interval(),
    "numeric": pa.decimal128(38, 10),
    "uuid": pa.string(),
    "jsonb": pa.string(),
    "name": pa.string(),
    "\"char\"": pa.string(),
    "unknown": pa.string(),
}

# Spellings accepted in DDL and casts, mapped to the canonical type.
_ALIASES: dict[str, SqlType] = {
    "bool": BOOLEAN, "boolean": BOOLEAN,
    "bytea": BYTEA, "bytes": BYTEA, "binary": BYTEA, "varbinary": BYTEA, "blob": BYTEA,
    "int8": BIGINT, "bigint": BIGINT, "long": BIGINT, "bigserial": BIGINT, "serial8": BIGINT,
    "int2": SMALLINT, "smallint": SMALLINT, "tinyint": SMALLINT, "smallserial": SMALLINT,
    "int": INTEGER, "int4": INTEGER, "integer": INTEGER, "serial": INTEGER, "serial4": INTEGER,
    "text": TEXT, "string": TEXT, "varchar": VARCHAR, "character varying": VARCHAR,
    "char": TEXT, "character": TEXT, "bpchar": TEXT, "nchar": TEXT, "nvarchar": VARCHAR,
    "oid": OID, "json": JSON, "jsonb": JSONB,
    "real": REAL, "float4": REAL, "float": DOUBLE, "float8": DOUBLE, "double": DOUBLE,
    "double precision": DOUBLE,
    "date": DATE,
    "time": TIME, "time without time zone": TIME,
    "timestamp": TIMESTAMP, "timestamp without time zone": TIMESTAMP, "datetime": TIMESTAMP,
    "timestamptz": TIMESTAMPTZ, "timestamp with time zone": TIMESTAMPTZ,
    "interval": INTERVAL,
    "numeric": NUMERIC, "decimal": NUMERIC,
    "uuid": UUID, "name": NAME,
}


def varchar(length: int | None) -> SqlType:
    """character varying(length); plain VARCHAR when length is None."""
    return VARCHAR if length is None else replace(VARCHAR, typmod=length + 4)


def numeric(precision: int | None, scale: int = 0) -> SqlType:
    """numeric(precision, scale); plain NUMERIC when precision is None."""
    return NUMERIC if precision is None else replace(NUMERIC, typmod=((precision << 16) | scale) + 4)


def type_from_name(name: str) -> SqlType | None:
    """Canonical type for a spelling such as 'int4', 'VARCHAR(20)' or 'timestamp with time zone'.
    varchar(n) and numeric(p, s) keep their modifiers (as the typmod); others are ignored."""
    base = name.strip().lower()
    if base.endswith("[]"):  # a view's array column, e.g. of array_agg (one dimension)
        element = type_from_name(base[:-2])
        return None if element is None or isinstance(element, ArraySqlType) else array_of(element)
    modifier = ""
    if "(" in base:
        modifier = base[base.index("(") + 1:].split(")")[0].strip()
        base = base[: base.index("(")].strip()
    base = " ".join(base.split())
    t = _ALIASES.get(base)
    if t is VARCHAR and modifier.isdigit() and int(modifier) > 0:
        return varchar(int(modifier))
    if t is NUMERIC and modifier:
        return _numeric_from_modifier(modifier)
    return t


def _numeric_from_modifier(modifier: str) -> SqlType:
    """numeric(p) or numeric(p, s), with Postgres's limits (1 <= p <= 1000, 0 <= s <= p)."""
    parts = [p.strip() for p in modifier.split(",")]
    if len(parts) > 2 or not all(p.lstrip("-").isdigit() for p in parts):
        raise InvalidParameterValue("invalid NUMERIC type modifier")
    precision = int(parts[0])
    scale = int(parts[1]) if len(parts) == 2 else 0
    if not 1 <= precision <= NUMERIC_MAX_PRECISION:
        raise InvalidParameterValue(
            f"NUMERIC precision {precision} must be between 1 and {NUMERIC_MAX_PRECISION}")
    if not 0 <= scale <= precision:
        raise InvalidParameterValue(f"NUMERIC scale {scale} must be between 0 and precision {precision}")
    return numeric(precision, scale)


def is_numeric(t: SqlType) -> bool:
    return t.category == "N" and t is not OID


def is_integer(t: SqlType) -> bool:
    return t in (SMALLINT, INTEGER, BIGINT)


def is_textual(t: SqlType) -> bool:
    return t in (TEXT, VARCHAR, NAME, CHAR, UNKNOWN)


def from_arrow(dt: pa.DataType) -> SqlType:
    """Best SQL type for an Arrow type (used for results computed by DuckDB or Spark)."""
    if pa.types.is_list(dt) or pa.types.is_large_list(dt) or pa.types.is_fixed_size_list(dt):
        element = from_arrow(dt.value_type)
        return array_of(element) if not isinstance(element, ArraySqlType) else TEXT
    if pa.types.is_boolean(dt):
        return BOOLEAN
    if pa.types.is_int8(dt) or pa.types.is_int16(dt) or pa.types.is_uint8(dt):
        return SMALLINT
    if pa.types.is_int32(dt) or pa.types.is_uint16(dt):
        return INTEGER
    if pa.types.is_integer(dt):
        return BIGINT
    if pa.types.is_float16(dt) or pa.types.is_float32(dt):
        return REAL
    if pa.types.is_floating(dt):
        return DOUBLE
    if pa.types.is_decimal(dt):
        return NUMERIC
    if pa.types.is_string(dt) or pa.types.is_large_string(dt) or pa.types.is_string_view(dt):
        return TEXT
    if pa.types.is_binary(dt) or pa.types.is_large_binary(dt) or pa.types.is_fixed_size_binary(dt):
        return BYTEA
    if pa.types.is_date(dt):
        return DATE
    if pa.types.is_time(dt):
        return TIME
    if pa.types.is_timestamp(dt):
        return TIMESTAMPTZ if dt.tz else TIMESTAMP
    if pa.types.is_interval(dt) or pa.types.is_duration(dt):
        return INTERVAL
    return TEXT
