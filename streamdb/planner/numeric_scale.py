"""The scale every value of a numeric result column has, where PostgreSQL's rules fix it.

A view stores an unconstrained `numeric` column normalized (trailing zeros dropped: equal values
must give equal row keys whichever engine computed them), so `0.908 * price` read back as
`1761.52` where PostgreSQL, and the same query ad hoc, print `1761.520`. When the query fixes the
scale of every value of a column (literals, columns of numeric(p, s) or integers, and +, -, *,
round(x, n), casts to numeric(p, s), sum, min, max over those), the view's column is declared
numeric(38, s) and its values are stored and printed with exactly s decimals, as PostgreSQL
prints them. avg() of such a column has 16 decimals, as the same query ad hoc. Anything else
(division, a scale that differs between rows) keeps the unconstrained column.
"""

from __future__ import annotations

from sqlglot import exp

from streamdb import types as T
from streamdb.planner.plans import RelationInput
from streamdb.types import SqlType

_INTEGERS = (exp.DataType.Type.TINYINT, exp.DataType.Type.SMALLINT, exp.DataType.Type.INT,
             exp.DataType.Type.BIGINT)
MAX_SCALE = 38
AVG_SCALE = 16  # typing._AVG_SCALE, ExactAvg.SCALE
STORED_SCALE = 10  # decimals of an unconstrained numeric as stored (types.py)


def fixed_scale(e: exp.Expression) -> int | None:
    """The scale every value of `e` (typed by query._typed_copy) has, or None when it varies or is
    not known."""
    if isinstance(e, (exp.Alias, exp.Paren, exp.Neg, exp.Abs)):
        return fixed_scale(e.this)
    if isinstance(e, exp.Literal):
        text = e.name
        if not e.is_number or "e" in text.lower():
            return None
        return len(text.split(".", 1)[1]) if "." in text else 0
    if isinstance(e, exp.Column):
        return _type_scale(e.type)
    if isinstance(e, exp.Cast):
        to = e.to
        if to.is_type(*_INTEGERS):
            return 0
        if to.is_type(exp.DataType.Type.DECIMAL):
            params = to.expressions
            if len(params) == 2:
                return _int(params[1])
            if len(params) == 1:
                return 0
            return fixed_scale(e.this) if e.this.type is not None and (
                e.this.type.is_type(*_INTEGERS) or e.this.type.is_type(exp.DataType.Type.DECIMAL)) else None
        return None
    if isinstance(e, (exp.Add, exp.Sub)):
        a, b = fixed_scale(e.this), fixed_scale(e.expression)
        return None if a is None or b is None else max(a, b)
    if isinstance(e, exp.Mul):
        a, b = fixed_scale(e.this), fixed_scale(e.expression)
        return None if a is None or b is None else a + b
    if isinstance(e, exp.Round):  # round(numeric [, n]): scale n (0), whatever its argument's
        decimals = e.args.get("decimals")
        if decimals is None:
            return 0
        n = _int(decimals)
        return n if n is not None and n >= 0 else None
    if isinstance(e, (exp.Sum, exp.Min, exp.Max)) and not e.args.get("distinct"):
        return fixed_scale(e.this)
    if isinstance(e, exp.Filter):  # agg(x) FILTER (WHERE ...): the aggregate's
        return fixed_scale(e.this)
    if isinstance(e, exp.Window) and isinstance(e.this, (exp.Sum, exp.Min, exp.Max, exp.FirstValue,
                                                         exp.LastValue, exp.NthValue)):
        return fixed_scale(e.this if not isinstance(e.this, (exp.FirstValue, exp.LastValue, exp.NthValue))
                           else e.this.this)
    if isinstance(e, exp.Window) and isinstance(e.this, (exp.Lag, exp.Lead)):
        # lag(x [, n [, default]]): x's values, or the default's
        default = e.this.args.get("default")
        scales = {fixed_scale(e.this.this)} | ({fixed_scale(default)} if default is not None else set())
        return scales.pop() if len(scales) == 1 else None
    if isinstance(e, (exp.Greatest, exp.Least)):  # one of its arguments' values
        scales = {fixed_scale(p) for p in [e.this, *e.expressions] if not isinstance(p, exp.Null)}
        return scales.pop() if len(scales) == 1 else None
    if isinstance(e, exp.Avg) and not isinstance(e.this, exp.Distinct):
        # avg() of integers and numerics: 16 decimals, as ad hoc (typing.exact_numeric_avg).
        t = e.this.type
        if t is None or not (t.is_type(*_INTEGERS) or t.is_type(exp.DataType.Type.DECIMAL)):
            return None
        # numeric(p, s) has s decimals; integers, numeric(p) and numeric (10 stored) at most 10.
        argument = _type_scale(t) if len(t.expressions) == 2 else 0
        return AVG_SCALE if argument is not None and argument <= AVG_SCALE else None
    if isinstance(e, (exp.Coalesce, exp.Case)):
        parts = ([e.this, *e.expressions] if isinstance(e, exp.Coalesce)
                 else [i.args.get("true") for i in e.args.get("ifs") or []] + [e.args.get("default")])
        scales = {fixed_scale(p) for p in parts if p is not None and not isinstance(p, exp.Null)}
        return scales.pop() if len(scales) == 1 else None
    return None


def _type_scale(t: exp.DataType | None) -> int | None:
    if t is None:
        return None
    if t.is_type(*_INTEGERS):
        return 0
    if t.is_type(exp.DataType.Type.DECIMAL) and len(t.expressions) == 2:
        return _int(t.expressions[1])
    return None


def _int(node: exp.Expression) -> int | None:
    inner = node.this if isinstance(node, exp.DataTypeParam) else node
    if isinstance(inner, exp.Neg):
        n = _int(inner.this)
        return None if n is None else -n
    try:
        return int(inner.name)
    except (ValueError, AttributeError):
        return None


def with_fixed_scales(types: list[SqlType], resolved_sql: str, inputs: tuple[RelationInput, ...]) -> list[SqlType]:
    """`types` (a query's result columns) with each unconstrained numeric whose scale the query's
    expression fixes made numeric(38, s)."""
    if not any(t is T.NUMERIC or t is _NUMERIC_ARRAY for t in types):
        return types
    from streamdb.planner.query import _typed_copy
    from streamdb.sql.parser import parse_one

    try:
        select = _typed_copy(parse_one(resolved_sql), inputs, modifiers=True, expand_stars=True)
    except Exception:  # noqa: BLE001 - a shape sqlglot cannot type: the columns stay as they are
        return types
    if not isinstance(select, exp.Select) or len(select.expressions) != len(types):
        return types
    out: list[SqlType] = []
    for t, e in zip(types, select.expressions, strict=True):
        if t is _NUMERIC_ARRAY:  # array_agg(x): the elements are x's values
            scale = _element_scale(e)
            out.append(T.array_of(T.numeric(MAX_SCALE, scale)) if scale is not None and 0 <= scale <= MAX_SCALE
                       else t)
            continue
        scale = fixed_scale(e) if t is T.NUMERIC else None
        out.append(T.numeric(MAX_SCALE, scale) if scale is not None and 0 <= scale <= MAX_SCALE else t)
    return out


_NUMERIC_ARRAY = T.array_of(T.NUMERIC)


def _element_scale(e: exp.Expression) -> int | None:
    """The scale of every element of an `array_agg(x [ORDER BY ...])` (DISTINCT, FILTER), or None."""
    if isinstance(e, (exp.Alias, exp.Paren, exp.Filter)):
        return _element_scale(e.this)
    if not isinstance(e, exp.ArrayAgg):
        return None
    arg = e.this
    if isinstance(arg, exp.Order):
        arg = arg.this
    if isinstance(arg, exp.Distinct):
        arg = arg.expressions[0] if len(arg.expressions) == 1 else None
    return fixed_scale(arg) if arg is not None else None


def unconstrained_numeric_casts(query: exp.Expression) -> exp.Expression:
    """`query` (changed in place) with each cast to unconstrained numeric made a cast to
    decimal(38, 10), how such values are stored (types.py). The engines read a bare DECIMAL as
    DuckDB's decimal(18, 3) and Spark's decimal(10, 0): `'1.23456'::numeric` gave 1.235, and
    `round(x::numeric, 2)` in a view gave 17849.00 for 17849.4512. The result column is still
    unconstrained numeric, which prints without trailing zeros."""
    for cast in list(query.find_all(exp.Cast)):
        to = cast.to
        if to.is_type(exp.DataType.Type.DECIMAL) and not to.expressions:
            cast.set("to", exp.DataType.build(f"DECIMAL({MAX_SCALE}, {STORED_SCALE})"))
    return query
