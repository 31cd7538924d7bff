"""Column definitions from DDL syntax."""

from __future__ import annotations

from sqlglot import exp

from streamdb import types as T
from streamdb.catalog import ColumnDef
from streamdb.errors import DuplicateColumn, FeatureNotSupported, StreamDBError, SyntaxErrorSQL
from streamdb.planner.names import normalize, position_of
from streamdb.sql.ast import StreamColumnRole
from streamdb.sql.parser import WATERMARK_AND_KEY_HINT as _WATERMARK_AND_KEY_HINT

RESERVED = {"rowtime", "op"}


def column_type(kind: exp.DataType | None, where: exp.Expression) -> T.SqlType:
    if kind is None:
        raise FeatureNotSupported("a column needs a type", position=position_of(where))
    spelled = kind.sql(dialect="postgres")
    t = T.type_from_name(spelled)
    if t is None:
        if kind.is_type(exp.DataType.Type.ARRAY) or spelled.endswith("]"):
            raise FeatureNotSupported(f"array columns are not yet supported: {spelled}",
                                      position=position_of(where))
        if kind.is_type(exp.DataType.Type.STRUCT, exp.DataType.Type.MAP):  # RisingWave's STRUCT<...>, MAP(...)
            raise FeatureNotSupported(f"{kind.this.name} columns are not supported: {spelled.lower()}",
                                      position=position_of(where),
                                      hint="Use a jsonb column for nested values.")
        raise StreamDBError(f'type "{spelled.lower()}" does not exist', sqlstate="42704",
                            position=position_of(where))
    return t


def column_defs(defs: list[exp.ColumnDef], *, stream: bool,
                external: bool = False, watermarked_table: bool = False) -> tuple[tuple[ColumnDef, ...], tuple[str, ...]]:
    """ColumnDefs and inline PRIMARY KEY columns."""
    out: list[ColumnDef] = []
    inline_pk: list[str] = []
    seen: set[str] = set()
    for d in defs:
        if not isinstance(d.this, exp.Identifier):  # e.g. a string literal where a column name belongs
            raise SyntaxErrorSQL(f'syntax error at or near "{d.this.sql()}"', position=position_of(d))
        name = normalize(d.this)
        if name in seen:
            raise DuplicateColumn(f'column "{name}" specified more than once', position=position_of(d))
        if stream and name in RESERVED:
            raise StreamDBError(f'column name "{name}" is reserved for the stream pseudo-column',
                                sqlstate="42939", position=position_of(d))
        seen.add(name)
        t = column_type(d.args.get("kind"), d)
        nullable = True
        role = None
        header_key = None
        default_sql = None
        for c in d.args.get("constraints") or []:
            kind = c.args.get("kind") if isinstance(c, exp.ColumnConstraint) else c
            if isinstance(kind, exp.NotNullColumnConstraint):
                nullable = bool(kind.args.get("allow_null"))
            elif isinstance(kind, exp.PrimaryKeyColumnConstraint):
                if stream and watermarked_table:  # RisingWave's CREATE TABLE (..., WATERMARK FOR ...)
                    raise FeatureNotSupported("a table with both a WATERMARK and a PRIMARY KEY is not supported",
                                              position=position_of(d), hint=_WATERMARK_AND_KEY_HINT)
                if stream:
                    raise FeatureNotSupported("streams have no primary key; use KEY for the record key",
                                              position=position_of(d))
                inline_pk.append(name)
                nullable = False
            elif isinstance(kind, exp.DefaultColumnConstraint):
                default_sql = kind.this.sql(dialect="postgres")
            elif isinstance(kind, StreamColumnRole):
                role = str(kind.this).upper()
                if role == "HEADER":
                    hk = kind.args.get("expression")
                    header_key = hk.name if isinstance(hk, exp.Expression) else str(hk)
                if role in ("HEADERS", "HEADER") and not external:
                    raise FeatureNotSupported(f"{role} columns hold Kafka record headers: they belong to "
                                              "EXTERNAL streams", position=position_of(d))
            elif isinstance(kind, (exp.UniqueColumnConstraint, exp.CheckColumnConstraint)):
                raise FeatureNotSupported(f"{kind.key.upper().replace('COLUMNCONSTRAINT', '')} "
                                          "constraints are not supported", position=position_of(d))
            # Other constraints (COLLATE, comments) are accepted and ignored.
        out.append(ColumnDef(name, t, nullable, role, header_key, default_sql))  # type: ignore[arg-type]
    return tuple(out), tuple(inline_pk)
