"""ASOF joins as a join and a top-1 per left row, so that every engine gives the same answer.

`L ASOF [LEFT] JOIN R ON L.k = R.k [AND ...] AND L.a <= R.b` pairs each row of L with the one row
of R of the same keys whose `b` is closest to `a` on the side the inequality allows (here the
smallest `b >= a`); ties in `b` go to R's smallest primary key (as RisingWave picks them). The
rewrite is

    SELECT <outer, over __asof> FROM (
      SELECT <L's and R's columns> FROM (
        SELECT <L's and R's columns>, ROW_NUMBER() OVER (PARTITION BY <L's row>
                                                         ORDER BY R.b ASC, <R's key>) AS __asof_rn
        FROM L [LEFT] JOIN R ON <the same condition>) __asof_ranked
      WHERE __asof_rn = 1) __asof

which a view maintains with operators it has (a join by the delta rule on the keys, then a top-1
per left row), and which the embedded engine and Spark run as written: the same ties everywhere.
L's row is its primary key; without one, all its columns, ranked with RANK() so that equal rows of
L each keep their match. Shapes other than one table ASOF-joined to one table on at least one
equality and exactly one inequality are left as they are (the embedded engine runs them; views
refuse them).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from streamdb.planner.lookup import conjuncts
from streamdb.planner.names import normalize

RANK_COLUMN = "__asof_rn"
# L.a <op> R.b -> whether the best R.b is the smallest allowed (it lies above L.a). Strictness needs
# nothing here: the inequality stays in the join's condition.
_FROM_ABOVE: dict[type, bool] = {exp.LTE: True, exp.LT: True, exp.GTE: False, exp.GT: False}
_MIRRORED: dict[type, type] = {exp.LTE: exp.GTE, exp.LT: exp.GT, exp.GTE: exp.LTE, exp.GT: exp.LT}


def is_asof(join: exp.Join) -> bool:
    return str(join.args.get("method") or "").upper() == "ASOF"


def rewrite_asof_joins(query: exp.Expression, columns_of: dict[str, list[str]],
                       key_of: Callable[[str], tuple[str, ...]]) -> None:
    """Rewrite, in place, every SELECT of `query` whose FROM is `table ASOF [LEFT] JOIN table ON
    ...` in the supported shape. `columns_of`: a table alias -> its columns; `key_of`: a table
    alias -> its primary key (empty if none)."""
    for select in list(query.find_all(exp.Select)):
        _rewrite(select, columns_of, key_of)


def _table_alias(node: exp.Expression) -> str | None:
    if not isinstance(node, exp.Table) or node.args.get("joins") or node.args.get("laterals"):
        return None
    alias = node.args.get("alias")
    if alias is None or alias.args.get("columns"):
        return None
    return normalize(alias.this)


def _side(col: exp.Expression, left: str, right: str, columns_of: dict[str, list[str]]) -> str | None:
    """Which table a column belongs to (left or right alias), or None if not a plain column of one."""
    if not isinstance(col, exp.Column) or not isinstance(col.this, exp.Identifier):
        return None
    name = normalize(col.this)
    if col.table:
        table = normalize(col.args["table"]) if isinstance(col.args.get("table"), exp.Identifier) else col.table
        return table if table in (left, right) and name in columns_of.get(table, []) else None
    owners = [a for a in (left, right) if name in columns_of.get(a, [])]
    return owners[0] if len(owners) == 1 else None


def _rewrite(select: exp.Select, columns_of: dict[str, list[str]], key_of: Callable[[str], tuple[str, ...]]) -> None:
    joins = select.args.get("joins") or []
    frm = select.args.get("from_") or select.args.get("from")
    if len(joins) != 1 or frm is None or not is_asof(joins[0]):
        return
    join = joins[0]
    left, right = _table_alias(frm.this), _table_alias(join.this)
    on = join.args.get("on")
    if left is None or right is None or left == right or on is None or join.args.get("using"):
        return
    side = str(join.args.get("side") or "").upper()
    if side not in ("", "LEFT"):
        return
    equalities = 0
    inequality: tuple[type, exp.Column] | None = None
    for c in conjuncts(on):
        a, b = c.args.get("this"), c.args.get("expression")
        if not isinstance(a, exp.Column) or not isinstance(b, exp.Column):
            return
        sa, sb = _side(a, left, right, columns_of), _side(b, left, right, columns_of)
        if sa is None or sb is None or sa == sb:
            return
        if isinstance(c, exp.EQ):
            equalities += 1
            continue
        kind: type = type(c)
        if kind not in _FROM_ABOVE or inequality is not None:
            return
        if sa == right:  # R.b <op> L.a: read it as L.a <mirrored op> R.b
            kind, b = _MIRRORED[kind], a
        inequality = (kind, b)
    if not equalities or inequality is None:
        return
    kind, right_bound = inequality
    ascending = _FROM_ABOVE[kind]

    def ref(alias: str, name: str) -> exp.Column:
        return exp.column(name, table=alias, quoted=True)

    # The columns of both sides under names of their own, which cannot clash.
    names = {(left, c): f"__l_{c}" for c in columns_of[left]} | {(right, c): f"__r_{c}" for c in columns_of[right]}
    carried = [exp.alias_(ref(a, c), n, quoted=True) for (a, c), n in names.items()]
    left_key = key_of(left)
    partition = [ref(left, c) for c in (left_key or columns_of[left])]
    right_key = key_of(right) or tuple(columns_of[right])
    order = [exp.Ordered(this=ref(right, normalize(right_bound.this)), desc=not ascending, nulls_first=False)]
    order += [exp.Ordered(this=ref(right, c), desc=False, nulls_first=False) for c in right_key]
    number: exp.Expression = exp.RowNumber() if left_key else exp.Anonymous(this="RANK")
    window = exp.Window(this=number, partition_by=partition, order=exp.Order(expressions=order))
    plain = join.copy()
    plain.set("method", None)
    # ASOF LEFT JOIN with a key on the left: the best pairs of the inner join, then the left rows
    # joined to them by that key, so unmatched rows are padded by an equi-join (which views keep
    # incrementally; an outer join on an inequality they recompute).
    pad = side == "LEFT" and bool(left_key)
    # Without a key (a stream), the left rows no row of R can pair with: NOT EXISTS over the same
    # condition, padded with NULLs, after the best pairs of the inner join (a view keeps both:
    # the anti-join by the key's max or min, planner/subqueries.py).
    unmatched = side == "LEFT" and not left_key
    if pad or unmatched:
        plain.set("side", None)
    ranked = exp.select(*carried, exp.alias_(window, RANK_COLUMN, quoted=True)).from_(frm.this.copy())
    ranked.set("joins", [plain])
    best: exp.Query = exp.select(*[exp.column(n, quoted=True) for n in names.values()]).from_(
        exp.Subquery(this=ranked, alias=exp.TableAlias(this=exp.to_identifier("__asof_ranked", quoted=True))))
    best = best.where(exp.EQ(this=exp.column(RANK_COLUMN, quoted=True), expression=exp.Literal.number(1)))
    if pad:
        pairs = "__asof_best"
        on = exp.and_(*[exp.EQ(this=ref(left, c), expression=exp.column(names[(left, c)], table=pairs, quoted=True))
                        for c in left_key])
        padded = exp.select(*[exp.alias_(ref(left, c) if a == left else exp.column(n, table=pairs, quoted=True), n,
                                         quoted=True) for (a, c), n in names.items()]).from_(frm.this.copy())
        best = padded.join(exp.Subquery(this=best, alias=exp.TableAlias(this=exp.to_identifier(pairs, quoted=True))),
                           on=on, join_type="LEFT")

    if unmatched:
        lonely = exp.select(*[exp.alias_(ref(left, c) if a == left else exp.Null(), n, quoted=True)
                              for (a, c), n in names.items()]).from_(frm.this.copy())
        lonely = lonely.where(exp.Not(this=exp.Exists(
            this=exp.select(exp.Literal.number(1)).from_(join.this.copy()).where(on.copy()))))
        best = exp.union(best, lonely, distinct=False)

    # The outer query reads the pairs through __asof: each column of L or R by its new name; a bare
    # column of the output keeps its own name.
    for e in list(select.expressions):
        if isinstance(e, exp.Column) and isinstance(e.this, exp.Identifier):
            e.replace(exp.alias_(e.copy(), normalize(e.this), quoted=True))
    outer_scope = [select.args.get(k) for k in ("expressions", "where", "group", "having", "qualify", "order")]
    for part in outer_scope:
        for node in (part if isinstance(part, list) else [part]):
            if node is None:
                continue
            for col in list(node.find_all(exp.Column)):
                if any(isinstance(p, exp.Select) and p is not select for p in _ancestors(col, node)):
                    continue  # a subquery's own columns
                owner = _side(col, left, right, columns_of)
                if owner is not None:
                    col.replace(exp.column(names[(owner, normalize(col.this))], table="__asof", quoted=True))
    select.set("joins", None)
    select.set("from_", exp.From(this=exp.Subquery(
        this=best, alias=exp.TableAlias(this=exp.to_identifier("__asof", quoted=True)))))


def _ancestors(node: exp.Expr, stop: exp.Expr) -> list[exp.Expr]:
    out: list[exp.Expr] = []
    p = node.parent
    while p is not None and p is not stop:
        out.append(p)
        p = p.parent
    return out
