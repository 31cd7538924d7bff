"""Subqueries in WHERE as joins: IN, = ANY, EXISTS and their negations, decorrelated.

A conjunct of WHERE that tests a subquery (`x IN (SELECT y ...)`, `EXISTS (SELECT ... WHERE
inner.k = outer.k ...)`, and NOT of either) keeps or drops each row of the query by whether a
matching row exists. Lowered as a join with the subquery's rows made distinct, it is maintained
by the join's delta rule like any other join: a change on either side touches only its key.

- IN / EXISTS: an inner join with `SELECT DISTINCT <the compared columns> FROM ...`. Distinct,
  so each row meets at most one match and keeps its multiplicity (a semi-join).
- NOT EXISTS: a left join with the same distinct rows and a marker column, kept where the marker
  is NULL (no match; an anti-join). A NULL in a correlated column never matches, as in SQL.
- NOT IN: SQL's three-valued answer: true when the subquery is empty; otherwise unknown (the row
  is dropped) when x is NULL or the subquery holds a NULL; otherwise whether x is absent. So two
  more left joins, on a constant key, say whether the subquery has rows and whether it has a NULL
  (each a DISTINCT of one constant, whose row changes only when the answer does).

Only conjuncts of WHERE (not under OR, not in the select list), correlated by equalities: other
shapes raise Unsupported and the view is recomputed, with that reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlglot import exp

from streamdb.planner.dataflow import (
    Env,
    Filter,
    Join,
    Map,
    Node,
    Unsupported,
    _and,
    _col,
    _conjuncts,
    _norm,
    _same_key_type,
)

if TYPE_CHECKING:
    from streamdb.planner.dataflow import Lowering

# Subquery clauses under which "some row exists" is not what the rows of its FROM and WHERE say.
_REFUSED_IN_EXISTS = ("group", "having", "limit", "offset", "order", "distinct", "with", "qualify", "windows",
                      "laterals", "connect", "pivots", "match")


def subquery_test(c: exp.Expression) -> tuple[exp.Expression, bool] | None:
    """(the IN, = ANY or EXISTS test, negated) if the conjunct `c` is one over a subquery."""
    negated = False
    while isinstance(c, exp.Paren):
        c = c.this
    if isinstance(c, exp.Not):
        negated, c = True, c.this
        while isinstance(c, exp.Paren):
            c = c.this
    if isinstance(c, exp.Exists):
        return c, negated
    if isinstance(c, exp.In) and c.args.get("query") is not None:
        return c, negated
    if isinstance(c, exp.EQ) and isinstance(c.expression, exp.Any) and \
            isinstance(c.expression.this, (exp.Subquery, exp.Select)):
        return c, negated
    return None


def lower_subquery_test(low: Lowering, node: Node, env: Env, test: exp.Expression, negated: bool) -> Node:
    """`node` (the query's rows, `env` its names) kept where `test` holds (or, `negated`, where
    it is false): the semi-join or anti-join that says it. `node`'s columns come first in the
    result and keep their names."""
    if isinstance(test, exp.Exists):
        return _exists(low, node, env, test.this, negated)
    if isinstance(test, exp.In):
        lhs, query = test.this, test.args["query"]
    else:  # x = ANY (subquery)
        lhs, query = test.this, test.expression.this
    return _in(low, node, env, lhs, query, negated)


def _select_of(query: exp.Expression) -> exp.Expression:
    return query.this if isinstance(query, exp.Subquery) else query


def _constant_key() -> exp.Expression:
    key = exp.Literal.number(1)
    key.type = exp.DataType.build("int")
    return key


def _marked_distinct(low: Lowering, node: Node) -> tuple[Node, str]:
    """`node`'s distinct rows with a marker column (TRUE) last, which a left join leaves NULL
    where a row found none of them."""
    marker = low.fresh()
    true = exp.true()
    true.type = exp.DataType.build("boolean")
    cols = tuple(low.fresh() for _ in node.columns)
    marked = Map((*cols, marker), node, (*(_col(c) for c in node.columns), true))
    distinct = low.distinct(marked)
    return distinct, distinct.columns[-1]


def _unmatched(marker: str) -> exp.Expression:
    return exp.Is(this=_col(marker), expression=exp.Null())


def _key_pairs(low: Lowering, env: Env, outer: list[exp.Expression], inner_types: list[Any]) -> list[exp.Expression]:
    """The outer side's keys over `env`; refused where a pair would not compare as join keys do."""
    keys = [low.rewrite(o, env) for o in outer]
    for k, t in zip(keys, inner_types, strict=True):
        probe = exp.Column()
        probe.type = t
        if not _same_key_type(k, probe):
            raise Unsupported("a subquery compared with a column of another type")
    return keys


def _in(low: Lowering, node: Node, env: Env, lhs: exp.Expression, query: exp.Expression, negated: bool) -> Node:
    select = _select_of(query)
    outer = list(lhs.expressions) if isinstance(lhs, exp.Tuple) else [lhs]
    sub, _ = low.query(select)  # a correlated IN refers to columns outside it: Unsupported there
    if len(sub.columns) != len(outer):
        raise Unsupported("IN with a subquery of another width")
    selects = select.selects if isinstance(select, exp.Query) else []
    inner_types = [s.type for s in selects]
    if len(inner_types) != len(outer):
        raise Unsupported("IN over a subquery whose columns are not typed")
    keys = _key_pairs(low, env, outer, inner_types)
    if not negated:
        distinct = low.distinct(sub)
        return Join(node.columns + distinct.columns, node, distinct, "inner", tuple(keys),
                    tuple(_col(c, k) for c, k in zip(distinct.columns, keys, strict=True)))
    if len(outer) != 1:
        raise Unsupported("NOT IN with several columns")
    # NOT IN: kept where the subquery is empty, or where x is not NULL, no row of the subquery is
    # NULL and none equals x.
    (value,) = sub.columns
    some, has_rows = _marked_distinct(low, Map((low.fresh(),), sub, (_constant_key(),)))
    nulls_in = Filter(sub.columns, sub, exp.Is(this=_col(value), expression=exp.Null()))
    nulls, has_null = _marked_distinct(low, Map((low.fresh(),), nulls_in, (_constant_key(),)))
    values, matched = _marked_distinct(low, sub)
    joined: Node = node
    for right, left_keys, right_keys in (
            (some, (_constant_key(),), (_col(some.columns[0]),)),
            (nulls, (_constant_key(),), (_col(nulls.columns[0]),)),
            (values, tuple(keys), (_col(values.columns[0], keys[0]),))):
        joined = Join(joined.columns + right.columns, joined, right, "left", left_keys, right_keys)
    empty = _unmatched(has_rows)
    absent = _and([exp.Not(this=exp.Is(this=keys[0].copy(), expression=exp.Null())),
                   _unmatched(has_null), _unmatched(matched)])
    assert absent is not None
    return Filter(joined.columns, joined, exp.Or(this=empty, expression=exp.Paren(this=absent)))


def _exists(low: Lowering, node: Node, env: Env, query: exp.Expression, negated: bool) -> Node:
    select = _select_of(query)
    if not isinstance(select, exp.Select):
        raise Unsupported("EXISTS over a set operation")
    if any(select.args.get(a) for a in _REFUSED_IN_EXISTS):
        raise Unsupported("EXISTS over a subquery with GROUP BY, DISTINCT, ORDER BY or LIMIT")
    if any(isinstance(n, (exp.AggFunc, exp.Window)) for e in select.expressions for n in e.walk()):
        raise Unsupported("EXISTS over an aggregate")
    frm = select.args.get("from_") or select.args.get("from")
    if frm is None:
        raise Unsupported("EXISTS over a subquery without FROM")
    inner_aliases = {_norm(frm.this.alias_or_name), *(_norm(j.this.alias_or_name) for j in select.args.get("joins") or [])}

    def inner_only(e: exp.Expression) -> bool:
        cols = list(e.find_all(exp.Column))
        return bool(cols) and all(not c.table or _norm(c.table) in inner_aliases for c in cols)

    def outer_only(e: exp.Expression) -> bool:
        cols = list(e.find_all(exp.Column))
        return bool(cols) and all(c.table and _norm(c.table) not in inner_aliases for c in cols)

    outer: list[exp.Expression] = []
    inner: list[exp.Expression] = []
    rest: list[exp.Expression] = []
    where = select.args.get("where")
    for c in _conjuncts(where.this if where is not None else None):
        if not any(col.table and _norm(col.table) not in inner_aliases for col in c.find_all(exp.Column)):
            rest.append(c)  # the subquery's own condition
            continue
        if isinstance(c, exp.EQ):
            for a, b in ((c.this, c.expression), (c.expression, c.this)):
                if inner_only(a) and outer_only(b):
                    inner.append(a)
                    outer.append(b)
                    break
            else:
                raise Unsupported("a correlated subquery condition over both sides of an equality")
            continue
        raise Unsupported("a correlated subquery condition other than an equality")
    # Which inner rows exist, per correlated key: SELECT DISTINCT <inner keys> FROM ... WHERE rest.
    keyed: Any = select.copy()
    keyed.set("expressions", [exp.alias_(e.copy(), f"__k{i}", quoted=True) for i, e in enumerate(inner)]
              or [exp.alias_(_constant_key(), "__k", quoted=True)])
    rest_where = _and([r.copy() for r in rest])
    keyed.set("where", exp.Where(this=rest_where) if rest_where is not None else None)
    sub, _ = low.select(keyed, top=False)  # any other outer reference is Unsupported there
    if outer:
        keys = _key_pairs(low, env, outer, [e.type for e in inner])
        right_keys = [_col(c, k) for c, k in zip(sub.columns, keys, strict=True)]
    else:  # uncorrelated: every row, or none, by whether the subquery has rows
        keys, right_keys = [_constant_key()], [_col(sub.columns[0])]
    if not negated:
        distinct = low.distinct(sub)
        right_keys = [_col(c, k) for c, k in zip(distinct.columns, right_keys, strict=True)]
        return Join(node.columns + distinct.columns, node, distinct, "inner", tuple(keys), tuple(right_keys))
    values, matched = _marked_distinct(low, sub)
    right_keys = [_col(c, k) for c, k in zip(values.columns[:-1], right_keys, strict=True)]
    joined = Join(node.columns + values.columns, node, values, "left", tuple(keys), tuple(right_keys))
    return Filter(joined.columns, joined, _unmatched(matched))
