"""COPY name FROM STDIN and COPY (query) | name TO STDOUT."""

from __future__ import annotations

from sqlglot import exp

from streamdb.errors import FeatureNotSupported, InvalidParameterValue, StreamDBError, UndefinedColumn
from streamdb.planner import query as query_planner
from streamdb.planner.context import PlanContext
from streamdb.planner.insert import refuse_write_to_view
from streamdb.planner.names import lookup_relation, normalize
from streamdb.planner.options import property_values
from streamdb.planner.plans import CopyFromPlan, CopyToPlan
from streamdb.planner.privileges import require
from streamdb.sql import ast as S
from streamdb.sql.ast import CopyStatement

_KNOWN = {"format", "delimiter", "null", "header", "quote", "escape", "encoding", "freeze"}


def _options(stmt: CopyStatement) -> dict:
    opts = property_values(stmt.args.get("properties"))
    for k in opts:
        if k not in _KNOWN:
            raise InvalidParameterValue(f'option "{k}" not recognized', sqlstate="42601")
    fmt = str(opts.get("format", "text")).lower()
    if fmt == "binary":
        raise FeatureNotSupported("COPY BINARY is not yet supported")
    if fmt not in ("text", "csv"):
        raise InvalidParameterValue(f'COPY format "{fmt}" not recognized')
    header = opts.get("header", False)
    if isinstance(header, str):
        header = header.lower() in ("true", "on", "1", "yes", "match")
    return {
        "format": fmt,
        "delimiter": str(opts.get("delimiter", "," if fmt == "csv" else "\t")),
        "null": str(opts.get("null", "" if fmt == "csv" else "\\N")),
        "header": bool(header),
        "quote": str(opts.get("quote", '"')),
        "escape": str(opts.get("escape", opts.get("quote", '"'))),
    }


def _refuse_server_side(stmt: CopyStatement, direction: str) -> None:
    """COPY with a file name or PROGRAM: Postgres runs these in the server for superusers only;
    StreamDB has no server-side file COPY at all, so it says so before any data is exchanged
    (otherwise psql would send the rest of its script as COPY data)."""
    if stmt.args.get("target") is None:
        return
    if stmt.args.get("program"):
        what = f"COPY {direction} PROGRAM"
    else:
        what = f"COPY {direction} a file"
    stdio = "STDIN" if direction == "FROM" else "STDOUT"
    raise FeatureNotSupported(
        f"{what} is not supported",
        hint=f"Use COPY ... {direction} {stdio}; psql's \\copy command reads and writes files on the client.",
    )


def plan(stmt: CopyStatement, ctx: PlanContext) -> CopyFromPlan | CopyToPlan:
    direction = str(stmt.args.get("direction", "")).upper()
    _refuse_server_side(stmt, direction)
    target = stmt.this
    opts = _options(stmt)
    if len(opts["delimiter"]) != 1:
        raise FeatureNotSupported("COPY delimiter must be a single one-byte character")
    if direction == "FROM":
        if not isinstance(target, exp.Table):
            raise StreamDBError("COPY FROM needs a relation name", sqlstate="42601")
        rel = lookup_relation(ctx, target)
        require(ctx, rel, "INSERT", target)
        if rel.kind not in ("stream", "table"):
            raise StreamDBError(f'cannot copy to {rel.kind.replace("_", " ")} "{rel.name}"', sqlstate="42809")
        refuse_write_to_view(rel, "copy to")
        if rel.schemaless and not stmt.args.get("columns"):
            raise FeatureNotSupported(f'COPY into schemaless stream "{rel.name}" needs a column list')
        names = [normalize(c) for c in stmt.args.get("columns") or []] or rel.column_names()
        if not rel.schemaless:
            for n in names:
                if rel.column(n) is None and not (n == "rowtime" and rel.kind == "stream"):
                    raise UndefinedColumn(f'column "{n}" of relation "{rel.name}" does not exist')
        return CopyFromPlan(rel.name, rel.id, tuple(names), opts["format"], opts["delimiter"], opts["null"],
                            opts["header"], opts["quote"], opts["escape"])
    if direction == "TO":
        if isinstance(target, (S.EmitChanges, S.Subscribe)):
            from streamdb.planner import subscribe

            sub = subscribe.plan_emit_changes(target, ctx) if isinstance(target, S.EmitChanges) \
                else subscribe.plan_subscribe(target, ctx)
            return CopyToPlan(sub.query, opts["format"], opts["delimiter"], opts["null"], opts["header"],
                              subscribe=sub)
        if isinstance(target, exp.Table):
            rel = lookup_relation(ctx, target)
            cols = [normalize(c) for c in stmt.args.get("columns") or []]
            select = exp.select(*(cols or ["*"])).from_(target.copy())
        else:
            select = target.this if isinstance(target, exp.Subquery) else target
        q = query_planner.plan_query(select, ctx)
        return CopyToPlan(q, opts["format"], opts["delimiter"], opts["null"], opts["header"])
    raise FeatureNotSupported("COPY to or from a file is not supported; use STDIN or STDOUT")
