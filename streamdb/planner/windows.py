"""Window table functions: TUMBLE(rel, ts, size) and HOP(rel, ts, slide, size).

Each becomes a subquery over the relation that adds `window_start` and `window_end`,
written with functions sqlglot transpiles to both the embedded engine and Spark, so a
windowed view runs on Spark like any other query.
"""

from __future__ import annotations

import datetime as dt
import math

from sqlglot import exp

from streamdb import types as T
from streamdb import values
from streamdb.errors import FeatureNotSupported, InvalidParameterValue, UndefinedColumn
from streamdb.planner.context import PlanContext
from streamdb.planner.names import normalize, position_of

WINDOW_FUNCTIONS = ("TUMBLE", "HOP")


def interval_seconds(node: exp.Expression, what: str) -> float:
    if isinstance(node, exp.Interval):
        text = f"{node.this.name} {node.args['unit'].name if node.args.get('unit') else ''}".strip()
    elif isinstance(node, exp.Literal) and node.is_string:
        text = node.this
    else:
        raise FeatureNotSupported(f"the {what} of a window must be an interval literal",
                                  position=position_of(node))
    delta = values.parse_text(text, T.INTERVAL)
    seconds = delta.total_seconds() if isinstance(delta, dt.timedelta) else float(delta)
    if seconds <= 0:
        raise InvalidParameterValue(f"the {what} of a window must be positive")
    return seconds


def _bucket(ts: exp.Expression, size: float, shift: exp.Expression | None, cast_to: str) -> exp.Expression:
    """Start of the size-second bucket holding ts, minus `shift` buckets."""
    n = exp.Literal.number(repr(size) if not size.is_integer() else int(size))
    index: exp.Expression = exp.Floor(this=exp.Div(this=exp.TimeToUnix(this=ts.copy()), expression=n))
    if shift is not None:
        index = exp.Sub(this=index, expression=exp.Paren(this=shift))
    start = exp.UnixToTime(this=exp.Mul(this=exp.Paren(this=index), expression=n.copy()))
    return exp.Cast(this=start, to=exp.DataType.build(cast_to, dialect="postgres"))


def _window_subquery(call: exp.Anonymous, alias: exp.TableAlias | None, ctx: PlanContext) -> exp.Expression:
    name = str(call.this).upper()
    args = call.expressions
    want = 3 if name == "TUMBLE" else 4
    if len(args) != want:
        raise FeatureNotSupported(f"{name} takes {want} arguments: relation, time column, "
                                  + ("size" if name == "TUMBLE" else "slide, size"), position=position_of(call))
    rel_node, ts_node = args[0], args[1]
    rel_name = normalize(rel_node.this if isinstance(rel_node, exp.Column) else rel_node)
    ts_name = normalize(ts_node.this if isinstance(ts_node, exp.Column) else ts_node)
    rel = ctx.catalog.get(rel_name)
    ts_type = T.TIMESTAMPTZ
    if rel is not None:
        col = rel.column(ts_name)
        if col is None and ts_name != "rowtime":
            raise UndefinedColumn(f'column "{ts_name}" does not exist in "{rel_name}"', position=position_of(ts_node))
        if col is not None:
            if col.type not in (T.TIMESTAMP, T.TIMESTAMPTZ):
                raise FeatureNotSupported(f'window time column "{ts_name}" must be a timestamp, not {col.type.name}')
            ts_type = col.type
    cast_to = "timestamptz" if ts_type is T.TIMESTAMPTZ else "timestamp"
    ts = exp.column(ts_name, quoted=True)
    source = exp.Table(this=exp.to_identifier(rel_name), alias=exp.TableAlias(this=exp.to_identifier("w_src")))
    if name == "TUMBLE":
        size = interval_seconds(args[2], "size")
        start = _bucket(ts, size, None, cast_to)
        end = _bucket(ts, size, exp.Literal.number(-1), cast_to)
        select = exp.select(exp.Star(), exp.alias_(start, "window_start"), exp.alias_(end, "window_end")).from_(source)
    else:
        slide, size = interval_seconds(args[2], "slide"), interval_seconds(args[3], "size")
        if not math.isclose(size / slide, round(size / slide)):
            raise FeatureNotSupported("HOP needs a size that is a whole multiple of the slide")
        count = int(round(size / slide))
        hops = exp.Values(expressions=[exp.Tuple(expressions=[exp.Literal.number(i)]) for i in range(count)],
                          alias=exp.TableAlias(this=exp.to_identifier("w_hop"),
                                               columns=[exp.to_identifier("w_j")]))
        j = exp.column("w_j", table="w_hop")
        start = _bucket(ts, slide, j, cast_to)
        end_index = exp.Sub(this=j.copy(), expression=exp.Literal.number(count))
        end = _bucket(ts, slide, end_index, cast_to)
        select = (exp.select(exp.Column(this=exp.Star(), table=exp.to_identifier("w_src")),
                             exp.alias_(start, "window_start"), exp.alias_(end, "window_end"))
                  .from_(source).join(hops, join_type="CROSS"))
    return exp.Subquery(this=select, alias=alias or exp.TableAlias(this=exp.to_identifier(rel_name)))


def expand_window_functions(ast: exp.Expression, ctx: PlanContext) -> None:
    for table in list(ast.find_all(exp.Table)):
        call = table.this
        if isinstance(call, exp.Anonymous) and str(call.this).upper() in WINDOW_FUNCTIONS:
            table.replace(_window_subquery(call, table.args.get("alias"), ctx))
