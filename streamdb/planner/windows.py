"""Window table functions: TUMBLE(rel, ts, size), HOP(rel, ts, slide, size) and
SESSION(rel, ts, gap [, key ...]).

Each becomes a subquery over the relation that adds `window_start` and `window_end`,
written with functions sqlglot transpiles to both the embedded engine and Spark, so a
windowed view runs on Spark like any other query.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

from sqlglot import exp

from streamdb import types as T
from streamdb import values
from streamdb.errors import FeatureNotSupported, InvalidParameterValue, UndefinedColumn, UndefinedTable
from streamdb.planner.context import PlanContext
from streamdb.planner.names import normalize, position_of

WINDOW_FUNCTIONS = ("TUMBLE", "HOP", "SESSION")
# SESSION's helper columns, never in its result.
_TS, _PREV, _SID = "__w_ts", "__w_prev", "__w_sid"


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


def _window_subquery(call: exp.Anonymous, alias: exp.TableAlias | None, ctx: PlanContext,
                     ctes: set[str], src: str = "w_src") -> exp.Expression:
    """`src` names the relation inside; distinct per window function of a query, since columns
    of `*` are found by alias."""
    name = str(call.this).upper()
    args = call.expressions
    if name == "SESSION":
        return _session_subquery(call, alias, ctx, ctes, src)
    want = 3 if name == "TUMBLE" else 4
    if len(args) != want:
        raise FeatureNotSupported(f"{name} takes {want} arguments: relation, time column, "
                                  + ("size" if name == "TUMBLE" else "slide, size"), position=position_of(call))
    rel_node, ts_node = args[0], args[1]
    rel_name = _name_arg(rel_node, "relation", name)
    ts_name = _name_arg(ts_node, "time column", name)
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
    source = exp.Table(this=exp.to_identifier(rel_name), alias=exp.TableAlias(this=exp.to_identifier(src)))
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
        select = (exp.select(exp.Column(this=exp.Star(), table=exp.to_identifier(src)),
                             exp.alias_(start, "window_start"), exp.alias_(end, "window_end"))
                  .from_(source).join(hops, join_type="CROSS"))
    return exp.Subquery(this=select, alias=alias or exp.TableAlias(this=exp.to_identifier(rel_name)))


def _interval(seconds: float) -> exp.Interval:
    """An interval literal both engines read: whole seconds, else microseconds."""
    micros = round(seconds * 1_000_000)
    if micros % 1_000_000 == 0:
        return exp.Interval(this=exp.Literal.string(str(micros // 1_000_000)), unit=exp.Var(this="SECOND"))
    return exp.Interval(this=exp.Literal.string(str(micros)), unit=exp.Var(this="MICROSECOND"))


def _over(func: exp.Expression, partition: list[exp.Expression], order: exp.Expression | None = None,
          running: bool = False) -> exp.Window:
    window = exp.Window(this=func, partition_by=[p.copy() for p in partition], over="OVER")
    if order is not None:
        window.set("order", exp.Order(expressions=[exp.Ordered(this=order.copy(), nulls_first=False)]))
    if running:
        window.set("spec", exp.WindowSpec(kind="ROWS", start="UNBOUNDED", start_side="PRECEDING", end="CURRENT ROW"))
    return window


def _name_arg(node: exp.Expression, what: str, function: str) -> str:
    """A window function's relation or column argument: a plain name (not `*`, not an expression).
    The relation may be schema-qualified, and TUMBLE/HOP's time column table-qualified, as before."""
    if isinstance(node, exp.Identifier):
        return normalize(node)
    qualified_ok = what == "relation" or function != "SESSION"
    if isinstance(node, exp.Column) and isinstance(node.this, exp.Identifier) \
            and (qualified_ok or not node.args.get("table")):
        return normalize(node.this)
    raise FeatureNotSupported(f"the {what} of {function} must be a name", position=position_of(node))


def _session_subquery(call: exp.Anonymous, alias: exp.TableAlias | None, ctx: PlanContext,
                      ctes: set[str], src: str = "w_src") -> exp.Expression:
    """SESSION(rel, ts, gap [, key ...]): rows of one key whose event times (in order) are at most
    `gap` apart form a session; window_start = its first ts, window_end = its last ts + gap.

    Three nested selects of window functions, partitioned by the keys:
      lag(ts) over (order by ts)                                  -> __w_prev
      running sum(new session? 1 : 0) over (order by ts)          -> __w_sid (session number)
      min(ts), max(ts) + gap over (partition by keys, __w_sid)    -> window_start, window_end
    Only the last select's list reaches the query: the relation's columns (as `*` shows them)
    and the two window columns. Null times each make a session of their own, with null bounds.
    """
    args = call.expressions
    if len(args) < 3:
        raise FeatureNotSupported("SESSION takes at least 3 arguments: relation, time column, gap "
                                  "[, partition key columns]", position=position_of(call))
    rel_node, ts_node, gap_node, key_nodes = args[0], args[1], args[2], args[3:]
    rel_name = _name_arg(rel_node, "relation", "SESSION")
    rel = ctx.catalog.get(rel_name)
    if rel is None:
        if rel_name in ctes:
            raise FeatureNotSupported(f'SESSION needs a stream, table or materialized view, not the WITH query '
                                      f'"{rel_name}"', position=position_of(rel_node))
        raise UndefinedTable(f'relation "{rel_name}" does not exist', position=position_of(rel_node))
    ts_name = _name_arg(ts_node, "time column", "SESSION")
    ts_col = rel.column(ts_name)
    if ts_col is None and ts_name != "rowtime":
        raise UndefinedColumn(f'column "{ts_name}" does not exist in "{rel_name}"', position=position_of(ts_node))
    if ts_col is not None and ts_col.type not in (T.TIMESTAMP, T.TIMESTAMPTZ):
        raise FeatureNotSupported(f'window time column "{ts_name}" must be a timestamp, not {ts_col.type.name}',
                                  position=position_of(ts_node))
    gap = _interval(interval_seconds(gap_node, "gap"))
    keys: list[str] = []
    for node in key_nodes:
        key = _name_arg(node, "partition key", "SESSION")
        if rel.column(key) is None:
            raise UndefinedColumn(f'column "{key}" does not exist in "{rel_name}"', position=position_of(node))
        keys.append(key)
    columns = rel.column_names()  # what `*` shows: no ROWTIME, no __rowkey

    def col(c: str, table: str | None = None) -> exp.Column:
        return exp.column(c, table=table, quoted=True)

    def subquery(select: exp.Select, name: str) -> exp.Subquery:
        return exp.Subquery(this=select, alias=exp.TableAlias(this=exp.to_identifier(name)))

    ts, prev = col(_TS), col(_PREV)
    partition: list[exp.Expression] = [col(k) for k in keys]
    source = exp.Table(this=exp.to_identifier(rel_name), alias=exp.TableAlias(this=exp.to_identifier(src)))
    # 1: each row with the time of the row before it in its key.
    first = exp.select(*(col(c, src) for c in columns), exp.alias_(col(ts_name, src), _TS, quoted=True),
                       exp.alias_(_over(exp.Lag(this=col(ts_name, src)),
                                        [col(k, src) for k in keys], col(ts_name, src)), _PREV, quoted=True)
                       ).from_(source)
    # 2: a new session starts at a key's first row and after every gap wider than `gap`.
    starts = exp.Case(ifs=[exp.If(this=exp.or_(exp.Is(this=ts.copy(), expression=exp.Null()),
                                               exp.Is(this=prev.copy(), expression=exp.Null()),
                                               exp.GT(this=ts.copy(), expression=exp.Add(this=prev.copy(),
                                                                                          expression=gap.copy()))),
                                  true=exp.Literal.number(1))],
                      default=exp.Literal.number(0))
    second = exp.select(*(col(c) for c in columns), ts.copy(),
                        exp.alias_(_over(exp.Sum(this=starts), partition, ts, running=True), _SID, quoted=True)
                        ).from_(subquery(first, "w_lag"))
    # 3: the session's bounds on each of its rows.
    bounds = [*partition, col(_SID)]
    start = _over(exp.Min(this=ts.copy()), bounds)
    end = exp.Add(this=_over(exp.Max(this=ts.copy()), bounds), expression=gap)
    third = exp.select(*(col(c) for c in columns), exp.alias_(start, "window_start"),
                       exp.alias_(end, "window_end")).from_(subquery(second, "w_session"))
    return exp.Subquery(this=third, alias=alias or exp.TableAlias(this=exp.to_identifier(rel_name)))


@dataclass(frozen=True)
class SessionShape:
    """What a SESSION(...) subquery (`_session_subquery`) computes, read back from its resolved form
    so that the dataflow can keep sessions per key instead of running its window functions."""

    source: exp.Table  # the relation read, with its alias
    columns: tuple[str, ...]  # the result's columns before window_start and window_end
    ts: exp.Column  # the time column, over `source`
    keys: tuple[exp.Column, ...]  # the partition key columns, over `source`
    gap_micros: int


def session_shape(q: exp.Expression) -> SessionShape | None:
    """The SESSION(...) that `q` (a resolved, qualified SELECT) is the expansion of, or None. Only
    the expansion's exact shape matches: its helper columns, window functions and nesting."""
    outer = _aliases(q)
    if outer is None or list(outer)[-2:] != ["window_start", "window_end"]:
        return None
    start, end = outer["window_start"], outer["window_end"]
    if not (isinstance(start, exp.Window) and isinstance(start.this, exp.Min) and _is(start.this.this, _TS)
            and isinstance(end, exp.Add) and isinstance(end.this, exp.Window) and isinstance(end.this.this, exp.Max)
            and _is(end.this.this.this, _TS) and isinstance(end.expression, exp.Interval)):
        return None
    columns = list(outer)[:-2]
    if not all(isinstance(outer[c], exp.Column) and _is(outer[c], c) for c in columns):
        return None
    middle = _aliases(_from_subquery(q))
    if middle is None or _SID not in middle:
        return None
    inner_select = _from_subquery(_from_subquery(q))
    inner = _aliases(inner_select)
    if inner is None or _PREV not in inner or _TS not in inner:
        return None
    lag, ts = inner[_PREV], inner[_TS]
    if not (isinstance(lag, exp.Window) and isinstance(lag.this, exp.Lag) and isinstance(ts, exp.Column)):
        return None
    assert isinstance(inner_select, exp.Select)  # _aliases took it: a SELECT without joins
    frm = inner_select.args.get("from_") or inner_select.args.get("from")
    source = frm.this if frm is not None else None
    if not isinstance(source, exp.Table):
        return None
    keys = lag.args.get("partition_by") or []
    if not all(isinstance(k, exp.Column) for k in keys):
        return None
    micros = round(interval_seconds(end.expression, "gap") * 1_000_000)
    return SessionShape(source, tuple(columns), ts, tuple(keys), micros)


def _is(node: exp.Expression, name: str) -> bool:
    return isinstance(node, exp.Column) and normalize(node.name) == normalize(name)


def _aliases(q: exp.Expression | None) -> dict[str, exp.Expression] | None:
    """A plain SELECT's list by output name (None if it is not a SELECT of named expressions with
    nothing but a FROM)."""
    if not isinstance(q, exp.Select) or any(q.args.get(a) for a in ("where", "group", "having", "joins", "order",
                                                                     "limit", "offset", "distinct", "qualify")):
        return None
    out: dict[str, exp.Expression] = {}
    for e in q.expressions:
        if isinstance(e, exp.Alias):
            out[normalize(e.alias)] = e.this
        elif isinstance(e, exp.Column):
            out[normalize(e.name)] = e
        else:
            return None
    return out


def _from_subquery(q: exp.Expression | None) -> exp.Expression | None:
    frm = q.args.get("from_") or q.args.get("from") if isinstance(q, exp.Select) else None
    return frm.this.this if frm is not None and isinstance(frm.this, exp.Subquery) else None


def expand_window_functions(ast: exp.Expression, ctx: PlanContext) -> None:
    ctes = {normalize(cte.args["alias"].this) for cte in ast.find_all(exp.CTE) if cte.args.get("alias")}
    n = 0
    for table in list(ast.find_all(exp.Table)):
        call = table.this
        if isinstance(call, exp.Anonymous) and str(call.this).upper() in WINDOW_FUNCTIONS:
            n += 1
            table.replace(_window_subquery(call, table.args.get("alias"), ctx, ctes, "w_src" if n == 1 else f"w_src{n}"))
