"""Subqueries as joins: IN, = ANY, EXISTS and their negations, and scalar aggregates.

A conjunct of WHERE that tests a subquery (`x IN (SELECT y ...)`, `EXISTS (SELECT ... WHERE
inner.k = outer.k ...)`, and NOT of either) keeps or drops each row of the query by whether a
matching row exists. Lowered as a join with the subquery's rows made distinct, it is maintained
by the join's delta rule like any other join: a change on either side touches only its key.

- IN / EXISTS: an inner join with `SELECT DISTINCT <the compared columns> FROM ...`. Distinct,
  so each row meets at most one match and keeps its multiplicity (a semi-join). EXISTS with one
  correlated comparison joins the key's max (or min) of the compared column instead.
- NOT EXISTS: a left join with the same distinct rows and a marker column, kept where the marker
  is NULL (no match; an anti-join). A NULL in a correlated column never matches, as in SQL.
- NOT IN: SQL's three-valued answer: true when the subquery is empty; otherwise unknown (the row
  is dropped) when x is NULL or the subquery holds a NULL; otherwise whether x is absent. So two
  more left joins, on a constant key (or the correlated keys), say whether the subquery has rows
  and whether it has a NULL (each a DISTINCT whose row changes only when the answer does).
- Inside an expression (under OR, in the select list) a test is a value: the left join's marker
  for EXISTS, NOT IN's three joins for IN.
- A scalar subquery that is an aggregate: a left join with its one row (uncorrelated, on a
  constant key) or with the aggregate grouped by the correlated keys (NULL where no group, 0 for
  count).

Correlations are equalities (and, for EXISTS, one comparison): other shapes raise Unsupported and
the view is recomputed, with that reason. See docs/views.md, "Subqueries as joins".
"""

from __future__ import annotations

from dataclasses import dataclass
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
    _outside_subqueries,
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
    if not negated and isinstance(select, exp.Select) and _plain(select) and len(select.expressions) == len(outer):
        corr = _correlation(select, "IN")
        if corr.outer or corr.comparisons:
            # Correlated: x IN (SELECT y FROM f WHERE c) is EXISTS (SELECT y FROM f WHERE c AND y = x).
            equal = [exp.EQ(this=(e.unalias() if isinstance(e, exp.Alias) else e).copy(), expression=o.copy())
                     for e, o in zip(select.expressions, outer, strict=True)]
            where = select.args.get("where")
            exists: Any = select.copy()
            exists.set("where", exp.Where(this=_and([*(c.copy() for c in _conjuncts(where.this if where else None)),
                                                     *equal])))
            return _exists(low, node, env, exists, False)
    if negated and len(outer) == 1 and isinstance(select, exp.Select) and _plain(select) \
            and len(select.expressions) == 1:
        corr = _correlation(select, "NOT IN")
        if corr.outer or corr.comparisons:
            joined, value = _correlated_in_value(low, node, env, select, corr, outer[0])
            return Filter(joined.columns, joined, exp.Not(this=value))  # kept where x IN (q) is false
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
    joined, value = _in_value(low, node, sub, keys[0])
    return Filter(joined.columns, joined, exp.Not(this=value))  # kept where x IN (q) is false


def _in_value(low: Lowering, node: Node, sub: Node, x: exp.Expression,
              outer_keys: tuple[exp.Expression, ...] = ()) -> tuple[Node, exp.Expression]:
    """`node` left-joined so that the returned expression is SQL's three-valued `x IN sub`: true
    where some row equals x; false where `sub` has no rows, or where x is not NULL, no row of
    `sub` is NULL and none equals x; NULL otherwise. `sub`'s last column is the compared value;
    correlated, its columns before it are the inner keys `outer_keys` (over `node`) select the
    rows by, else the rows are all of `sub`'s, under a constant key. Whether there are rows and
    whether one is NULL are joined by those keys (their rows change only when the answer does),
    the match by the keys and x."""
    if not outer_keys:
        sub = Map((low.fresh(), low.fresh()), sub, (_constant_key(), _col(sub.columns[-1])))
        outer_keys = (_constant_key(),)
    *keys, value = sub.columns

    def by_key(rows: Node) -> Node:
        return Map(tuple(low.fresh() for _ in keys), rows, tuple(_col(k) for k in keys))

    some, has_rows = _marked_distinct(low, by_key(sub))
    nulls, has_null = _marked_distinct(
        low, by_key(Filter(sub.columns, sub, exp.Is(this=_col(value), expression=exp.Null()))))
    values, matched = _marked_distinct(low, sub)
    joined: Node = node
    width = len(keys)
    for right, left_keys in ((some, outer_keys), (nulls, outer_keys), (values, (*outer_keys, x))):
        right_keys = tuple(_col(c, k) for c, k in zip(right.columns[:len(left_keys)], left_keys, strict=True))
        joined = Join(joined.columns + right.columns, joined, right, "left", tuple(left_keys), right_keys)
    assert len(values.columns) == width + 2
    unknown = exp.Or(this=exp.Is(this=x.copy(), expression=exp.Null()),
                     expression=exp.Not(this=_unmatched(has_null)))
    test = exp.Case(ifs=[exp.If(this=exp.Not(this=_unmatched(matched)), true=exp.true()),
                         exp.If(this=_unmatched(has_rows), true=exp.false()),
                         exp.If(this=unknown, true=_typed_null_boolean())],
                    default=exp.false())
    test.type = exp.DataType.build("boolean")
    return joined, test


def _correlated_in_value(low: Lowering, node: Node, env: Env, select: exp.Select, corr: Correlation,
                         x: exp.Expression) -> tuple[Node, exp.Expression]:
    """`x IN (SELECT y FROM f WHERE inner.k = outer.k AND c)` as a value: `_in_value` over
    `SELECT inner.k, y FROM f WHERE c`, by the correlated keys."""
    corr = corr.equalities_only()
    item = select.expressions[0]
    y = item.unalias() if isinstance(item, exp.Alias) else item
    sub, _ = low.select(_keyed(select, corr, y.copy()), top=False)
    keys = _key_pairs(low, env, corr.outer, [k.type for k in corr.inner])
    (compared,) = _key_pairs(low, env, [x], [y.type])
    return _in_value(low, node, sub, compared, tuple(keys))


def _typed_null_boolean() -> exp.Expression:
    null = exp.Cast(this=exp.Null(), to=exp.DataType.build("boolean"))
    null.type = exp.DataType.build("boolean")
    return null


# A comparison `inner OP outer` holds for some inner row iff it holds for the inner rows' max (for
# > and >=) or min (for < and <=); flipped, the operator when the outer side is written first.
_EXTREMUM: dict[type, str] = {exp.GT: "max", exp.GTE: "max", exp.LT: "min", exp.LTE: "min"}
_FLIPPED: dict[type, type] = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE}


@dataclass(frozen=True)
class Correlation:
    """A subquery's WHERE: its correlated equalities (outer sides, inner sides), its correlated
    comparisons (inner side, operator as `inner OP outer`, outer side) and the rest, its own
    condition."""

    outer: list[exp.Expression]
    inner: list[exp.Expression]
    comparisons: list[tuple[exp.Expression, type, exp.Expression]]
    rest: list[exp.Expression]

    def equalities_only(self) -> Correlation:
        if self.comparisons:
            raise Unsupported("a correlated subquery condition other than an equality")
        return self


def _correlation(select: exp.Select, what: str) -> Correlation:
    """The subquery's WHERE split by what it compares with the outer query; correlated conditions
    other than equalities and plain comparisons refused."""
    frm = select.args.get("from_") or select.args.get("from")
    if frm is None:
        raise Unsupported(f"{what} over a subquery without FROM")
    inner_aliases = {_norm(frm.this.alias_or_name), *(_norm(j.this.alias_or_name) for j in select.args.get("joins") or [])}

    def inner_only(e: exp.Expression) -> bool:
        cols = list(e.find_all(exp.Column))
        return bool(cols) and all(not c.table or _norm(c.table) in inner_aliases for c in cols)

    def outer_only(e: exp.Expression) -> bool:
        cols = list(e.find_all(exp.Column))
        return bool(cols) and all(c.table and _norm(c.table) not in inner_aliases for c in cols)

    found = Correlation([], [], [], [])
    where = select.args.get("where")
    for c in _conjuncts(where.this if where is not None else None):
        if not any(col.table and _norm(col.table) not in inner_aliases for col in c.find_all(exp.Column)):
            found.rest.append(c)  # the subquery's own condition
            continue
        if not isinstance(c, (exp.EQ, *_EXTREMUM)):
            raise Unsupported("a correlated subquery condition other than an equality or a comparison")
        for a, b, op in ((c.this, c.expression, type(c)), (c.expression, c.this, _FLIPPED.get(type(c), exp.EQ))):
            if inner_only(a) and outer_only(b):
                if op is exp.EQ:
                    found.inner.append(a)
                    found.outer.append(b)
                else:
                    found.comparisons.append((a, op, b))
                break
        else:
            raise Unsupported("a correlated subquery condition over both sides of a comparison")
    return found


def _with_where(select: exp.Select, rest: list[exp.Expression]) -> Any:
    out: Any = select.copy()
    rest_where = _and([r.copy() for r in rest])
    out.set("where", exp.Where(this=rest_where) if rest_where is not None else None)
    return out


def _plain(select: exp.Expression) -> bool:
    """A SELECT ... FROM ... WHERE whose rows are its FROM's rows that pass WHERE."""
    return isinstance(select, exp.Select) and bool(select.args.get("from_") or select.args.get("from")) and \
        not any(select.args.get(a) for a in _REFUSED_IN_EXISTS) and \
        not any(isinstance(n, (exp.AggFunc, exp.Window)) for e in select.expressions for n in e.walk())


def _exists_parts(query: exp.Expression) -> tuple[exp.Select, Correlation]:
    select = _select_of(query)
    if not isinstance(select, exp.Select):
        raise Unsupported("EXISTS over a set operation")
    if any(select.args.get(a) for a in _REFUSED_IN_EXISTS):
        raise Unsupported("EXISTS over a subquery with GROUP BY, DISTINCT, ORDER BY or LIMIT")
    if any(isinstance(n, (exp.AggFunc, exp.Window)) for e in select.expressions for n in e.walk()):
        raise Unsupported("EXISTS over an aggregate")
    return select, _correlation(select, "EXISTS")


def _keyed(select: exp.Select, corr: Correlation, value: Any = None, group: bool = False) -> Any:
    """`SELECT <inner keys> [, value] FROM ... WHERE <the subquery's own condition> [GROUP BY
    <inner keys>]`: the subquery's rows by the keys its correlation compares."""
    keyed = _with_where(select, corr.rest)
    keyed.set("expressions", [*(exp.alias_(k.copy(), f"__k{i}", quoted=True) for i, k in enumerate(corr.inner)),
                              *([exp.alias_(value, "__v", quoted=True)] if value is not None else [])])
    if group and corr.inner:
        keyed.set("group", exp.Group(expressions=[k.copy() for k in corr.inner]))
    return keyed


def _exists_rows(low: Lowering, env: Env, select: exp.Select,
                 corr: Correlation) -> tuple[Node, list[exp.Expression], list[exp.Expression]]:
    """Which inner rows exist per correlated key, `SELECT <inner keys> FROM ... WHERE rest` (a
    constant without keys: every row, or none, by whether the subquery has rows), with the outer
    keys and the inner ones to join it by."""
    sub, _ = low.select(_keyed(select, corr, None if corr.inner else _constant_key()), top=False)
    if not corr.outer:
        return sub, [_constant_key()], [_col(sub.columns[0])]
    keys = _key_pairs(low, env, corr.outer, [e.type for e in corr.inner])
    return sub, keys, [_col(c, k) for c, k in zip(sub.columns, keys, strict=True)]


def _exists(low: Lowering, node: Node, env: Env, query: exp.Expression, negated: bool) -> Node:
    if negated:
        joined, _, fails = _exists_left(low, node, env, query)
        return Filter(joined.columns, joined, fails)
    select, corr = _exists_parts(query)
    if corr.comparisons:
        joined, test = _compared_join(low, node, env, select, corr, "inner")
        return Filter(joined.columns, joined, test)
    sub, keys, right_keys = _exists_rows(low, env, select, corr)
    distinct = low.distinct(sub)
    right_keys = [_col(c, k) for c, k in zip(distinct.columns, right_keys, strict=True)]
    return Join(node.columns + distinct.columns, node, distinct, "inner", tuple(keys), tuple(right_keys))


def _exists_left(low: Lowering, node: Node, env: Env,
                 query: exp.Expression) -> tuple[Node, exp.Expression, exp.Expression]:
    """`node` left-joined with what answers the EXISTS, and two conditions over the result: where
    it holds and where it does not (neither is ever NULL)."""
    select, corr = _exists_parts(query)
    if corr.comparisons:
        joined, test = _compared_join(low, node, env, select, corr, "left")
        passed: exp.Expression = exp.Coalesce(this=test, expressions=[exp.false()])
        passed.type = exp.DataType.build("boolean")
        return joined, passed, exp.Not(this=passed)
    sub, keys, right_keys = _exists_rows(low, env, select, corr)
    values, matched = _marked_distinct(low, sub)
    right_keys = [_col(c, k) for c, k in zip(values.columns[:-1], right_keys, strict=True)]
    joined = Join(node.columns + values.columns, node, values, "left", tuple(keys), tuple(right_keys))
    holds = exp.Not(this=_unmatched(matched))
    holds.type = exp.DataType.build("boolean")
    return joined, holds, _unmatched(matched)


def _compared_join(low: Lowering, node: Node, env: Env, select: exp.Select, corr: Correlation,
                   kind: str) -> tuple[Node, exp.Expression]:
    """EXISTS with one correlated comparison (`inner.t > outer.t`) besides its equalities: some
    inner row of the key passes it iff the key's max (or min) of `inner.t` does. So `node` is
    joined (`kind`) with one row per key, `SELECT <inner keys>, max(inner.t) ... GROUP BY <inner
    keys>` (each row meets at most one: its multiplicity is kept), and the comparison, returned
    with it, is a condition on the pair (NULL where no row passed it for a left join's padding)."""
    if len(corr.comparisons) != 1:
        raise Unsupported("a correlated subquery with several comparisons")
    (compared, op, outer_value), = corr.comparisons
    extremum = exp.Max(this=compared.copy()) if _EXTREMUM[op] == "max" else exp.Min(this=compared.copy())
    extremum.type = compared.type
    sub, _ = low.select(_keyed(select, corr, extremum, group=True), top=False)
    right_keys: list[exp.Expression]
    if corr.outer:
        keys = _key_pairs(low, env, corr.outer, [k.type for k in corr.inner])
        right_keys = [_col(c, k) for c, k in zip(sub.columns[:-1], keys, strict=True)]
    else:  # one row, even over no inner rows (a global aggregate)
        keys, right_keys = [_constant_key()], [_constant_key()]
    test = op(this=_col(sub.columns[-1], compared), expression=low.rewrite(outer_value, env))
    return Join(node.columns + sub.columns, node, sub, kind, tuple(keys), tuple(right_keys)), test


# ---- scalar subqueries ----------------------------------------------------------------------

SCALAR_ALIAS = "__scalar"  # the env alias naming the joined columns a subquery's value is read from


def nested_subqueries(e: Any) -> list[exp.Expression]:
    """The subqueries `e` reads as values: scalar subqueries, and IN, = ANY and EXISTS tests
    (anywhere in it: under OR, NOT, CASE), not those inside another subquery."""
    found: list[exp.Expression] = []
    for n in _outside_subqueries(e):
        if isinstance(n, exp.Exists) or (isinstance(n, exp.In) and n.args.get("query") is not None):
            found.append(n)
        elif isinstance(n, exp.EQ) and isinstance(n.expression, exp.Any) and \
                isinstance(n.expression.this, (exp.Subquery, exp.Select)):
            found.append(n)
        elif isinstance(n, exp.Subquery) and not isinstance(n.parent, (exp.In, exp.Exists, exp.Any)):
            found.append(n)
    return found


def join_subqueries(low: Lowering, node: Node, env: Env, e: Any) -> tuple[Node, Env, exp.Expression]:
    """`e` with each subquery it reads as a value (`nested_subqueries`) replaced by an expression
    over columns of `node` left-joined with what answers it: (the joined node, `env` with those
    columns, `e` rewritten). `node`'s own columns keep their place and names."""
    if not nested_subqueries(e):
        return node, env, e
    env = dict(env)
    e = e.copy()
    for n in nested_subqueries(e):
        if isinstance(n, exp.Subquery):
            node, value, type_, count = _scalar(low, node, env, n)
            internal: exp.Expression = _col(value)
            internal.type = type_
            if count:  # count over no rows is 0, where the left join pads NULL
                internal = exp.Coalesce(this=internal, expressions=[exp.Literal.number(0)])
                internal.type = type_
        elif isinstance(n, exp.Exists):
            node, internal, _ = _exists_left(low, node, env, n.this)
        else:
            lhs, query = (n.this, n.args["query"]) if isinstance(n, exp.In) else (n.this, n.expression.this)
            node, internal = _in_nested(low, node, env, lhs, query)
        ref = _named_in_env(internal, env)
        if n is e:
            e = ref
        else:
            n.replace(ref)
    return node, env, e


def _named_in_env(internal: exp.Expression, env: Env) -> exp.Expression:
    """An expression over internal column names, written over names `env` maps to them (under
    SCALAR_ALIAS), so it is rewritten with the expression it sits in."""
    def name(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column):
            env[(SCALAR_ALIAS, n.name)] = n.name
            ref = exp.column(n.name, table=SCALAR_ALIAS)
            ref.type = n.type
            return ref
        return n

    out = internal.copy().transform(name)
    out.type = internal.type
    return out


def _in_nested(low: Lowering, node: Node, env: Env, lhs: exp.Expression,
               query: exp.Expression) -> tuple[Node, exp.Expression]:
    """`lhs IN (query)` as a value (under OR, NOT, in the select list): uncorrelated, one column."""
    if isinstance(lhs, exp.Tuple):
        raise Unsupported("IN with several columns inside an expression")
    select = _select_of(query)
    if isinstance(select, exp.Select) and _plain(select) and len(select.expressions) == 1:
        corr = _correlation(select, "IN")
        if corr.outer or corr.comparisons:
            return _correlated_in_value(low, node, env, select, corr, lhs)
    sub, _ = low.query(select)  # correlated otherwise: Unsupported there
    selects = select.selects if isinstance(select, exp.Query) else []
    if len(sub.columns) != 1 or len(selects) != 1:
        raise Unsupported("IN with a subquery of another width")
    (key,) = _key_pairs(low, env, [lhs], [selects[0].type])
    return _in_value(low, node, sub, key)


def _scalar(low: Lowering, node: Node, env: Env, sq: exp.Subquery) -> tuple[Node, str, Any, bool]:
    """`node` left-joined with the scalar subquery's value: (the node, the value's column, its type,
    whether a row that met no key reads 0 there: a count, not NULL).

    Only subqueries that give one row by their form: an aggregate without GROUP BY, uncorrelated
    (one row always: a global Reduce), or correlated by equalities (one row per key: grouped by
    the inner keys; a row that meets none gets the aggregate over no rows, NULL, or 0 for count)."""
    from streamdb.planner.dataflow import _bare_aggregate

    select = sq.this
    if not isinstance(select, exp.Select) or len(select.expressions) != 1:
        raise Unsupported("a scalar subquery that is not one SELECT of one column")
    if any(select.args.get(a) for a in _REFUSED_IN_EXISTS):
        raise Unsupported("a scalar subquery with GROUP BY, DISTINCT, ORDER BY or LIMIT")
    item = select.expressions[0]
    value = item.unalias() if isinstance(item, exp.Alias) else item
    if not any(_bare_aggregate(n) for n in value.walk()):
        raise Unsupported("a scalar subquery that is not an aggregate (it could return several rows)")
    corr = _correlation(select, "a scalar subquery").equalities_only()
    if not corr.outer:
        sub, _ = low.select(_with_where(select, corr.rest), top=False)  # one row, even over no rows
        keyed_cols = (low.fresh(), low.fresh())
        keyed = Map(keyed_cols, sub, (_constant_key(), _col(sub.columns[0])))
        joined = Join(node.columns + keyed.columns, node, keyed, "left", (_constant_key(),), (_col(keyed_cols[0]),))
        return joined, keyed_cols[1], value.type, False
    count = isinstance(value, exp.Count)
    if not (isinstance(value, exp.AggFunc) and _bare_aggregate(value)):
        # over no rows it is the expression over NULL aggregates, which a padded NULL is not
        raise Unsupported("a correlated scalar subquery other than one aggregate call")
    sub, _ = low.select(_keyed(select, corr, value.copy(), group=True), top=False)
    keys = _key_pairs(low, env, corr.outer, [k.type for k in corr.inner])
    right_keys = tuple(_col(c, k) for c, k in zip(sub.columns[:-1], keys, strict=True))
    joined = Join(node.columns + sub.columns, node, sub, "left", tuple(keys), right_keys)
    return joined, sub.columns[-1], value.type, count
