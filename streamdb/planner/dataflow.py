"""A view's query as a dataflow of incremental operators: the one place a view's strategy is decided.

Every relation is a collection of changes (row, weight). The query, once its relations are
resolved and its columns qualified and typed (planner/query.py), is lowered into relational
nodes whose output changes follow from their input changes:

- linear nodes (Scan, Filter, Map, UnionAll) apply to each change as it is;
- stateful nodes keep state indexed by a key and touch only the keys a change has:
  Join (the delta rule dA x B + A x dB + dA x dB, inner and outer, over both sides indexed by the
  join key), Reduce (GROUP BY with count/sum/avg on weights, min/max/count(DISTINCT) over a
  multiset per group, DISTINCT), TopN (ORDER BY ... LIMIT per partition, DISTINCT ON, ROW_NUMBER()
  filters), Session (session windows per key), Temporal (temporal filters: rows shown while
  now() is within bounds they set, retracted by timers as time passes), and at the top of a view
  Recompute (window functions and aggregates without an incremental form, recomputed per
  touched partition or group).

Subqueries become joins (planner/subqueries.py): IN, EXISTS and their negations with the
subquery's distinct rows (or, inside an expression, as the value of a left join), scalar
aggregates with their one row per key.

Scalar expressions stay sqlglot trees over the nodes' internal column names, typed, so the
runtime renders them in Spark SQL with Postgres semantics. Planning is pure: nothing here
touches Spark or disk. A query that does not lower says why (`Unsupported`), and that reason is
what EXPLAIN and SHOW QUERIES show for a view maintained by recomputation. See docs/views.md.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypeVar

from sqlglot import exp

from streamdb.catalog import CatalogSnapshot
from streamdb.planner.plans import RelationInput
from streamdb.planner.windows import SessionShape, session_shape

ROWTIME = "rowtime"
ROWKEY = "__rowkey"


MAX_VALUES_ROWS = 64  # a join with a longer VALUES list is recomputed (one Map per row)


class Unsupported(Exception):
    """The query has a shape the dataflow does not maintain incrementally (the reason is shown)."""


# ---- nodes ---------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Node:
    columns: tuple[str, ...]  # internal names, unique within the view

    def inputs(self) -> tuple[Node, ...]:
        return ()

    def describe(self) -> str:
        return type(self).__name__


@dataclass(frozen=True, eq=False)
class Scan(Node):
    """A relation's changes (a stream's inserts; a table's or view's inserts and retractions)."""

    relation_id: int = 0
    source_columns: tuple[str, ...] = ()  # the relation's column for each of `columns`
    append_only: bool = False

    def describe(self) -> str:
        return f"Scan relation {self.relation_id}" + (" (append-only)" if self.append_only else "")


@dataclass(frozen=True, eq=False)
class Filter(Node):
    input: Node = field(default=None)  # type: ignore[assignment]
    predicate: exp.Expression = field(default=None)  # type: ignore[assignment]

    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)

    def describe(self) -> str:
        return f"Filter {self.predicate.sql(dialect='postgres')}"


@dataclass(frozen=True, eq=False)
class Map(Node):
    input: Node = field(default=None)  # type: ignore[assignment]
    exprs: tuple[exp.Expression, ...] = ()

    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)

    def describe(self) -> str:
        return "Map " + ", ".join(e.sql(dialect="postgres") for e in self.exprs)


@dataclass(frozen=True, eq=False)
class UnionAll(Node):
    branches: tuple[Node, ...] = ()

    def inputs(self) -> tuple[Node, ...]:
        return self.branches


@dataclass(frozen=True, eq=False)
class Join(Node):
    """Equi-join by key; `columns` are the left's then the right's."""

    left: Node = field(default=None)  # type: ignore[assignment]
    right: Node = field(default=None)  # type: ignore[assignment]
    kind: str = "inner"  # inner, left, right, full
    left_keys: tuple[exp.Expression, ...] = ()
    right_keys: tuple[exp.Expression, ...] = ()
    # Inner joins: comparisons across the two sides the operator tests on each pair it would
    # emit (`fuse_residuals`), so pairs that fail them are never emitted.
    residual: exp.Expression | None = None

    def inputs(self) -> tuple[Node, ...]:
        return (self.left, self.right)

    def describe(self) -> str:
        keys = ", ".join(f"{a.sql(dialect='postgres')} = {b.sql(dialect='postgres')}"
                         for a, b in zip(self.left_keys, self.right_keys, strict=True)) or "true"
        test = "" if self.residual is None else f", pairs kept where {self.residual.sql(dialect='postgres')}"
        return f"Join {self.kind} on {keys}{test} (both sides indexed by key)"


@dataclass(frozen=True, eq=False)
class AggCall:
    fn: str  # count_star, count, count_distinct, sum, avg, min, max, bool_and, bool_or
    arg: exp.Expression | None


INCREMENTAL_AGGREGATES = ("count_star", "count", "count_distinct", "sum", "avg", "min", "max", "bool_and",
                          "bool_or")


@dataclass(frozen=True, eq=False)
class Reduce(Node):
    """GROUP BY: `columns` are the group keys' then the aggregates'."""

    input: Node = field(default=None)  # type: ignore[assignment]
    group: tuple[exp.Expression, ...] = ()
    aggs: tuple[AggCall, ...] = ()
    global_: bool = False  # no GROUP BY: one row even over no input
    # EMIT ON WINDOW CLOSE: the view's own emitted rows (a Scan of its log, side 1), each of which
    # ends its group's state; `expire_keys` are the group keys over that Scan's columns.
    expire: Scan | None = None
    expire_keys: tuple[exp.Expression, ...] = ()

    def inputs(self) -> tuple[Node, ...]:
        return (self.input,) if self.expire is None else (self.input, self.expire)

    def describe(self) -> str:
        keys = ", ".join(g.sql(dialect="postgres") for g in self.group) or "()"
        aggs = ", ".join(f"{a.fn}({a.arg.sql(dialect='postgres') if a.arg is not None else '*'})" for a in self.aggs)
        freed = "; a group's state is dropped once the view emitted it (its window closed)" if self.expire else ""
        return f"Reduce by {keys}" + (f": {aggs}" if aggs else " (distinct)") + freed


@dataclass(frozen=True, eq=False)
class SortKey:
    expr: exp.Expression
    desc: bool
    nulls_first: bool


@dataclass(frozen=True, eq=False)
class TopN(Node):
    """The first `limit` rows (after `offset`) of each partition in `order`; `columns` = input's."""

    input: Node = field(default=None)  # type: ignore[assignment]
    partition: tuple[exp.Expression, ...] = ()
    order: tuple[SortKey, ...] = ()
    limit: int | None = None
    offset: int = 0
    with_ties: bool = False  # RANK() <= limit: every peer of the last row too (offset 0)

    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)

    def describe(self) -> str:
        keys = ", ".join(p.sql(dialect="postgres") for p in self.partition) or "()"
        order = ", ".join(k.expr.sql(dialect="postgres") + (" DESC" if k.desc else "") for k in self.order)
        ties = " with ties" if self.with_ties else ""
        return f"TopN {self.limit}{ties} offset {self.offset} per partition {keys} by {order}"


@dataclass(frozen=True, eq=False)
class Recompute(Node):
    """At a view's top only: `query` (over a relation `__p` with the input's columns) recomputed
    for each partition (by `partition`) that changed: the old result retracted, the new added."""

    input: Node = field(default=None)  # type: ignore[assignment]
    partition: tuple[exp.Expression, ...] = ()
    query: exp.Select = field(default=None)  # type: ignore[assignment]
    why: str = ""
    # Columns a subquery of `query` names, read by its outer query (`windowed_subquery`).
    derived: tuple[str, ...] = ()

    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)

    def describe(self) -> str:
        keys = ", ".join(p.sql(dialect="postgres") for p in self.partition) or "() (the whole input)"
        return f"Recompute per partition {keys} ({self.why}): {self.query.sql(dialect='postgres')}"


@dataclass(frozen=True, eq=False)
class Session(Node):
    """SESSION windows per partition: each input row with the bounds of its session (a key's rows
    whose times, in order, are at most `gap_micros` apart; start = the first time, end = the last
    plus the gap; a NULL time is a session of its own with NULL bounds). `columns` = the input's,
    then window_start and window_end."""

    input: Node = field(default=None)  # type: ignore[assignment]
    partition: tuple[exp.Expression, ...] = ()
    ts: exp.Expression = field(default=None)  # type: ignore[assignment]
    gap_micros: int = 0

    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)

    def describe(self) -> str:
        keys = ", ".join(p.sql(dialect="postgres") for p in self.partition) or "()"
        return (f"Session per partition {keys} by {self.ts.sql(dialect='postgres')}, gap "
                f"{self.gap_micros / 1_000_000:g} s (the touched partitions' sessions)")


@dataclass(frozen=True, eq=False)
class ClockBound:
    """One side of a temporal filter's window: the row shows from (`starts`) or until (not
    `starts`, exclusive) the instant `expr` plus `offset_micros`."""

    expr: exp.Expression
    offset_micros: int
    starts: bool


@dataclass(frozen=True, eq=False)
class Temporal(Node):
    """A temporal filter (`WHERE ts > now() - INTERVAL '1 hour'`): each input row shows while
    now() is at or past every start bound and before every end bound, now() being the time of the
    pipeline's micro-batch; timers retract rows as they leave (and add those whose time comes).
    `columns` = the input's."""

    input: Node = field(default=None)  # type: ignore[assignment]
    bounds: tuple[ClockBound, ...] = ()

    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)

    def describe(self) -> str:
        def at(b: ClockBound) -> str:
            e = b.expr.sql(dialect="postgres")
            return e if b.offset_micros == 0 else f"{e} {'+' if b.offset_micros > 0 else '-'} " \
                f"{abs(b.offset_micros) / 1_000_000:g} s"

        parts = [f"now() >= {at(b)}" for b in self.bounds if b.starts] + \
                [f"now() < {at(b)}" for b in self.bounds if not b.starts]
        return "Temporal filter " + " AND ".join(parts) + " (rows held until their time passes; timers retract them)"


STATEFUL = (Join, Reduce, TopN, Recompute, Session, Temporal)
PARTITION_TABLE = "__p"


@dataclass(frozen=True, eq=False)
class Dataflow:
    root: Node
    names: tuple[str, ...]  # the view's column names, one per root column

    def nodes(self) -> list[Node]:
        """Every node, inputs before the nodes that read them, in a deterministic order."""
        out: list[Node] = []
        seen: set[int] = set()

        def visit(n: Node) -> None:
            if id(n) in seen:
                return
            seen.add(id(n))
            for i in n.inputs():
                visit(i)
            out.append(n)

        visit(self.root)
        return out

    def stateful(self) -> list[Node]:
        return [n for n in self.nodes() if isinstance(n, STATEFUL)]

    def relations(self) -> list[int]:
        return sorted({n.relation_id for n in self.nodes() if isinstance(n, Scan)})

    def depth(self) -> int:
        return level(self.root)

    def has_clock(self) -> bool:
        """Whether it has a temporal filter: its pipeline's batches run on the clock too."""
        return any(isinstance(n, Temporal) for n in self.nodes())

    def explain(self) -> list[str]:
        lines: list[str] = []
        shown: set[int] = set()

        def show(n: Node, indent: int) -> None:
            if isinstance(n, STATEFUL) and id(n) in shown:  # a common subplan (share_common_subplans)
                lines.append("  " * indent + n.describe() + " (the same operator as above: computed once)")
                return
            shown.add(id(n))
            lines.append("  " * indent + n.describe())
            for i in n.inputs():
                show(i, indent + 1)

        show(self.root, 0)
        return lines


def level(n: Node) -> int:
    """The stateful layer a node's output is available after (0: the log itself)."""
    below = max((level(i) for i in n.inputs()), default=0)
    return below + 1 if isinstance(n, STATEFUL) else below


def append_only(n: Node) -> bool:
    """Whether the node's output only ever grows (no retractions)."""
    if isinstance(n, Scan):
        return n.append_only
    if isinstance(n, (Filter, Map, UnionAll)):
        return all(append_only(i) for i in n.inputs())
    if isinstance(n, Join):
        return n.kind == "inner" and append_only(n.left) and append_only(n.right)
    return False


# ---- lowering ------------------------------------------------------------------------------

# (alias, column) -> internal column name; alias None for a column of an unaliased result
Env = dict[tuple[str, str], str]


def _norm(name: str | None) -> str:
    return (name or "").lower()


def _col(name: str, like: exp.Expression | None = None) -> exp.Column:
    c = exp.column(name)
    if like is not None and like.type is not None:
        c.type = like.type
    return c


def _typed_null(like: exp.Expression) -> exp.Expression:
    """NULL of `like`'s type (a group key outside a grouping set), so every branch of the union
    has the same column types."""
    t = like.type
    if t is None or t.this in (exp.DataType.Type.UNKNOWN, exp.DataType.Type.NULL):
        return exp.Null()
    cast = exp.Cast(this=exp.Null(), to=t.copy())
    cast.type = t.copy()
    return cast


def _conjuncts(e: exp.Expression | None) -> list[exp.Expression]:
    if e is None:
        return []
    if isinstance(e, exp.And):
        return _conjuncts(e.this) + _conjuncts(e.expression)
    if isinstance(e, exp.Paren):
        return _conjuncts(e.this)
    return [e]


def _and(parts: list[exp.Expression]) -> exp.Expression | None:
    """The conjunction of `parts`. A part that is itself an OR (its parentheses were looked through
    when the condition was split) is parenthesised again: sqlglot prints the tree as it is, and
    `a AND (b OR c)` printed without them is `(a AND b) OR c`."""
    if not parts:
        return None
    wrapped = [exp.Paren(this=p) if isinstance(p, exp.Connector) else p for p in parts]
    out = wrapped[0]
    for p in wrapped[1:]:
        out = exp.And(this=out, expression=p)
    return out


def _agg_fn(node: exp.Expression) -> tuple[str, exp.Expression | None] | None:
    """(incremental aggregate, argument) of an aggregate call, or None if it has no incremental form."""
    if isinstance(node, exp.Count):
        arg = node.this
        if isinstance(arg, exp.Star) or arg is None:
            return "count_star", None
        if isinstance(arg, exp.Distinct):
            if len(arg.expressions) != 1:
                return None
            return "count_distinct", arg.expressions[0]
        return "count", arg
    if isinstance(node.this, exp.Distinct):
        return None  # sum(DISTINCT x), avg(DISTINCT x)
    for cls, fn in ((exp.Sum, "sum"), (exp.Avg, "avg"), (exp.Min, "min"), (exp.Max, "max"),
                    (exp.LogicalAnd, "bool_and"), (exp.LogicalOr, "bool_or")):
        if type(node) is cls:
            return fn, node.this
    if isinstance(node, exp.Anonymous) and node.name.lower() == "every" and len(node.expressions) == 1:
        return "bool_and", node.expressions[0]
    return None


def _bare_aggregate(node: Any) -> bool:
    if isinstance(node, exp.AggFunc):
        return not isinstance(node.parent, exp.Window)
    return isinstance(node, exp.Anonymous) and node.name.lower() == "every" and not isinstance(node.parent, exp.Window)


def _is_aggregate(node: exp.Expression) -> bool:
    """An aggregate call: `agg(...)`, or `agg(...) FILTER (WHERE ...)` as a whole (not its inner call)."""
    if isinstance(node, exp.Filter):
        return _bare_aggregate(node.this)
    return _bare_aggregate(node) and not isinstance(node.parent, exp.Filter)


MAX_GROUPING_SETS = 64  # a CUBE of more columns is recomputed (one Reduce per set)


def _set_members(item: exp.Expression) -> list[exp.Expression]:
    """The expressions of one element of ROLLUP, CUBE or GROUPING SETS: `(a, b)`, `(a)`, `a`, `()`."""
    if isinstance(item, exp.Tuple):
        return list(item.expressions)
    return [item.this if isinstance(item, exp.Paren) else item]


def grouping_sets(grouped: list[exp.Expression]) -> list[list[exp.Expression]]:
    """GROUP BY's items expanded into the grouping sets PostgreSQL forms: each item's sets (a plain
    expression is one set of one; ROLLUP (a, b) is (a, b), (a), (); CUBE every subset; GROUPING
    SETS its elements, themselves possibly ROLLUP or CUBE), crossed over the items. A set keeps
    each expression once; a set listed twice stays twice (PostgreSQL emits its groups twice)."""

    def sets_of(item: exp.Expression) -> list[list[exp.Expression]]:
        if isinstance(item, exp.Rollup):
            parts = [_set_members(e) for e in item.expressions]
            return [[m for part in parts[:n] for m in part] for n in range(len(parts), -1, -1)]
        if isinstance(item, exp.Cube):
            parts = [_set_members(e) for e in item.expressions]
            if 2 ** len(parts) > MAX_GROUPING_SETS:
                raise Unsupported(f"a CUBE of more than {MAX_GROUPING_SETS.bit_length() - 1} elements")
            return [[m for i, part in enumerate(parts) if mask & (1 << (len(parts) - 1 - i)) for m in part]
                    for mask in range(2 ** len(parts) - 1, -1, -1)]
        if isinstance(item, exp.GroupingSets):
            out: list[list[exp.Expression]] = []
            for e in item.expressions:
                out.extend(sets_of(e) if isinstance(e, (exp.Rollup, exp.Cube, exp.GroupingSets)) else [_set_members(e)])
            return out
        return [[item]]

    crossed: list[list[exp.Expression]] = [[]]
    for item in grouped:
        crossed = [a + b for a in crossed for b in sets_of(item)]
        if len(crossed) > MAX_GROUPING_SETS:
            raise Unsupported(f"more than {MAX_GROUPING_SETS} grouping sets")
    out = []
    for members in crossed:
        seen: dict[str, exp.Expression] = {}
        for m in members:
            seen.setdefault(m.sql(dialect="postgres"), m)
        out.append(list(seen.values()))
    return out


def _shared_by_all_sets(node: exp.Expression) -> list[exp.Expression]:
    """The expressions in every set of a GROUPING SETS (none for ROLLUP and CUBE)."""
    if not isinstance(node, exp.GroupingSets):
        return []
    sets: list[dict[str, exp.Expression]] = []
    for item in node.expressions:
        members: list[Any] = list(item.expressions) if isinstance(item, exp.Tuple) else [
            item.unnest() if isinstance(item, exp.Paren) else item]
        sets.append({m.sql(dialect="postgres"): m for m in members})
    if not sets:
        return []
    return [m for k, m in sets[0].items() if all(k in other for other in sets[1:])]


_GENERATORS = (exp.Explode, exp.Posexplode, exp.Inline, exp.Unnest, exp.GenerateSeries, exp.ExplodingGenerateSeries)
_SET_RETURNING_NAMES = {"generate_series", "unnest", "jsonb_array_elements", "json_array_elements",
                        "jsonb_array_elements_text", "json_array_elements_text", "jsonb_each", "json_each",
                        "jsonb_each_text", "json_each_text", "jsonb_object_keys", "json_object_keys",
                        "regexp_split_to_table", "regexp_matches", "string_to_table"}


def _set_returning(node: Any) -> bool:
    if isinstance(node, _GENERATORS):
        return True
    return isinstance(node, exp.Anonymous) and str(node.this).lower() in _SET_RETURNING_NAMES


def _outside_subqueries(e: Any) -> list[Any]:
    """`e`'s nodes that are not inside a subquery of it."""
    out: list[Any] = []
    stack = [e]
    while stack:
        n = stack.pop()
        out.append(n)
        if n is not e and isinstance(n, (exp.Subquery, exp.Select)):
            continue
        stack.extend(n.iter_expressions())
    return out


def _has_subquery(node: exp.Expression) -> bool:
    return any(isinstance(n, (exp.Subquery, exp.Select, exp.Exists)) for n in node.walk() if n is not node) or \
        isinstance(node, (exp.Subquery, exp.Exists))


class Lowering:
    """Lowers one resolved, qualified and typed query into nodes."""

    def __init__(self, inputs: tuple[RelationInput, ...], catalog: CatalogSnapshot) -> None:
        self.inputs = {i.registered_name: i for i in inputs}
        self.catalog = catalog
        self._names = itertools.count()

    def fresh(self) -> str:
        return f"c{next(self._names)}"

    # -- expressions --

    def rewrite(self, e: Any, env: Env) -> exp.Expression:
        """`e` over the internal names of `env` (a copy)."""
        if _has_subquery(e):
            raise Unsupported("subqueries in expressions")

        def fix(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Column):
                if isinstance(node.this, exp.Star):
                    raise Unsupported("* in an expression")
                key = (_norm(node.table), _norm(node.name))
                name = env.get(key)
                if name is None and not node.table:
                    matches = {v for (a, c), v in env.items() if c == key[1]}
                    name = matches.pop() if len(matches) == 1 else None
                if name is None:
                    raise Unsupported(f"column {node.sql(dialect='postgres')} from outside the query")
                return _col(name, node)
            if isinstance(node, exp.Window):
                raise Unsupported("window functions below the top of the view")
            return node

        return e.copy().transform(fix)

    # -- queries --

    def query(self, q: exp.Expression) -> tuple[Node, list[str]]:
        if isinstance(q, exp.Subquery):
            return self.query(q.this)
        if isinstance(q, exp.Union):
            return self.union(q)
        if isinstance(q, exp.Select):
            return self.select(q, top=False)
        raise Unsupported(f"{type(q).__name__} queries")

    def union(self, q: exp.Union) -> tuple[Node, list[str]]:
        if q.args.get("order") or q.args.get("limit") or q.args.get("offset"):
            raise Unsupported("ORDER BY or LIMIT on a UNION")
        branches: list[Node] = []
        names: list[str] | None = None
        for side in (q.this, q.expression):
            node, side_names = self.query(side)
            names = names or side_names
            if isinstance(node, UnionAll) and not isinstance(side, exp.Subquery):
                branches.extend(node.branches)
            else:
                branches.append(node)
        assert names is not None
        width = len(branches[0].columns)
        if any(len(b.columns) != width for b in branches):
            raise Unsupported("UNION branches of different widths")
        cols = tuple(self.fresh() for _ in range(width))
        # Each branch renamed to the union's columns, so every branch reads alike downstream.
        renamed = tuple(Map(cols, b, tuple(_col(c) for c in b.columns)) for b in branches)
        union: Node = UnionAll(cols, renamed)
        if q.args.get("distinct"):
            union = self.distinct(union)
        return union, names

    def distinct(self, node: Node) -> Node:
        cols = tuple(self.fresh() for _ in node.columns)
        return Reduce(cols, node, tuple(_col(c) for c in node.columns), ())

    def from_item(self, item: exp.Expression) -> tuple[Node, Env]:
        alias = _norm(item.alias_or_name)
        if isinstance(item, exp.Table):
            if item.args.get("joins") or not isinstance(item.this, exp.Identifier):
                raise Unsupported(f"FROM {item.sql(dialect='postgres')}")
            inp = self.inputs.get(item.name)
            if inp is None or inp.relation_id is None:
                raise Unsupported(f"reading {item.name}")
            if inp.mode != "state":
                raise Unsupported("SELECT STREAM in a view")
            rel = self.catalog.by_id(inp.relation_id)
            if rel is None:
                raise Unsupported(f"relation {inp.relation_id} is gone")
            if rel.schemaless:
                raise Unsupported("schemaless streams")
            names = [n for n, _ in inp.columns if n != ROWKEY]
            cols = tuple(self.fresh() for _ in names)
            from streamdb.planner.aggregate import append_only as relation_append_only

            scan = Scan(cols, inp.relation_id, tuple(names), relation_append_only(rel))
            return scan, {(alias, _norm(n)): c for n, c in zip(names, cols, strict=True)}
        if isinstance(item, exp.Subquery):
            shape = session_shape(item.this)
            node, names = self.session(shape) if shape is not None else self.query(item.this)
            col_aliases = [_norm(c.name) for c in item.args["alias"].columns] if item.args.get("alias") and \
                item.args["alias"].columns else []
            shown = col_aliases + [_norm(n) for n in names[len(col_aliases):]]
            return node, {(alias, n): c for n, c in zip(shown, node.columns, strict=True)}
        raise Unsupported(f"FROM {type(item).__name__}")

    def session(self, shape: SessionShape) -> tuple[Node, list[str]]:
        """SESSION(...) as a Session node over its relation (not as its window functions)."""
        scan, env = self.from_item(shape.source)
        ts = self.rewrite(shape.ts, env)
        keys = tuple(self.rewrite(k, env) for k in shape.keys)
        bounds = (self.fresh(), self.fresh())
        node = Session((*scan.columns, *bounds), scan, keys, ts, shape.gap_micros)
        alias = _norm(shape.source.alias_or_name)
        if any((alias, _norm(c)) not in env for c in shape.columns):
            raise Unsupported("a SESSION column the relation does not have")
        shown = [_col(env[(alias, _norm(c))]) for c in shape.columns]
        outs = tuple(self.fresh() for _ in range(len(shown) + 2))
        return Map(outs, node, (*shown, *(_col(b) for b in bounds))), [*shape.columns, "window_start", "window_end"]

    def from_clause(self, s: exp.Select) -> tuple[Node, Env]:
        frm = s.args.get("from_") or s.args.get("from")
        if frm is None:
            raise Unsupported("a query without FROM")
        node, env = self.from_item(frm.this)
        for j in s.args.get("joins") or []:
            node, env = self.join(node, env, j)
        return node, env

    def join(self, left: Node, left_env: Env, j: exp.Join) -> tuple[Node, Env]:
        if j.args.get("using"):
            raise Unsupported("JOIN ... USING without a typed plan")
        kind = (j.side or "").lower() or "inner"
        if (j.kind or "").upper() in ("CROSS",) or kind not in ("inner", "left", "right", "full"):
            if (j.kind or "").upper() == "CROSS":
                kind = "inner"
            else:
                raise Unsupported(f"{j.kind or j.side} joins")
        if (j.kind or "").upper() in ("SEMI", "ANTI", "ASOF"):
            raise Unsupported(f"{j.kind} joins")
        if isinstance(j.this, exp.Values):
            return self.join_values(left, left_env, j, kind, j.this, j.this.args.get("alias"))
        if isinstance(j.this, exp.Subquery) and isinstance(j.this.this, exp.Values):  # (VALUES ...) AS v(x)
            return self.join_values(left, left_env, j, kind, j.this.this, j.this.args.get("alias"))
        right, right_env = self.from_item(j.this)
        env = {**left_env, **right_env}
        left_cols, right_cols = set(left.columns), set(right.columns)
        lkeys: list[exp.Expression] = []
        rkeys: list[exp.Expression] = []
        residual: list[exp.Expression] = []
        for c in _conjuncts(j.args.get("on")):
            rc = self.rewrite(c, env)
            used = {col.name for col in rc.find_all(exp.Column)}
            if isinstance(rc, exp.EQ):
                a, b = rc.this, rc.expression
                ua = {x.name for x in a.find_all(exp.Column)}
                ub = {x.name for x in b.find_all(exp.Column)}
                if ua and ub and ua <= left_cols and ub <= right_cols:
                    lkeys.append(a)
                    rkeys.append(b)
                    continue
                if ua and ub and ua <= right_cols and ub <= left_cols:
                    lkeys.append(b)
                    rkeys.append(a)
                    continue
            if kind == "inner" or not used:
                residual.append(rc)
            elif kind == "left" and used <= right_cols:
                right = Filter(right.columns, right, rc)  # filters the rows that can match
            elif kind == "right" and used <= left_cols:
                left = Filter(left.columns, left, rc)
            else:
                raise Unsupported("an outer join condition over both sides that is not an equality")
        node: Node = Join(left.columns + right.columns, left, right, kind, tuple(lkeys), tuple(rkeys))
        pred = _and(residual)
        if pred is not None:
            node = Filter(node.columns, node, pred)
        return node, env

    def join_values(self, left: Node, left_env: Env, j: exp.Join, kind: str, values: exp.Values,
                    alias: exp.TableAlias | None) -> tuple[Node, Env]:
        """An inner join with a constant VALUES list (HOP windows: each row times its window
        offsets) is linear: one Map per VALUES row, adding that row's constants, in a union."""
        rows = [t.expressions if isinstance(t, exp.Tuple) else [t] for t in values.expressions]
        if kind != "inner":
            raise Unsupported(f"{kind} joins with VALUES")
        if not rows or len(rows) > MAX_VALUES_ROWS:
            raise Unsupported(f"a join with more than {MAX_VALUES_ROWS} VALUES rows")
        if any(v.find(exp.Column, exp.Rand) or _has_subquery(v) for r in rows for v in r):
            raise Unsupported("a join with VALUES that are not constants")
        if alias is None or not alias.columns:
            raise Unsupported("a join with VALUES without a column list")
        names = [_norm(c.name) for c in alias.columns]
        if any(len(r) != len(names) for r in rows):
            raise Unsupported("a join with VALUES rows of different widths")
        outer = tuple(self.fresh() for _ in left.columns)
        added = tuple(self.fresh() for _ in names)
        branches = tuple(Map(outer + added, left, tuple(_col(c) for c in left.columns) + tuple(v.copy() for v in r))
                         for r in rows)
        renamed = dict(zip(left.columns, outer, strict=True))
        env = {key: renamed[c] for key, c in left_env.items()}
        env.update({(_norm(alias.name), n): c for n, c in zip(names, added, strict=True)})
        node: Node = UnionAll(outer + added, branches)
        on = j.args.get("on")
        if on is not None:
            node = Filter(node.columns, node, self.rewrite(on, env))
        return node, env

    def select(self, s: exp.Select, top: bool) -> tuple[Node, list[str]]:
        from streamdb.planner.subqueries import (
            join_subqueries,
            lower_subquery_test,
            nested_subqueries,
            subquery_test,
        )

        if s.args.get("with"):
            raise Unsupported("WITH")
        for arg in ("laterals", "qualify", "windows", "connect", "pivots", "match"):
            if s.args.get(arg):
                raise Unsupported(arg.upper())
        topn = self.row_number_filter(s)
        if topn is not None:
            return topn
        windowed = self.windowed_subquery(s) if top else None
        if windowed is not None:
            return windowed
        node, env = self.from_clause(s)
        where = s.args.get("where")
        if where is not None:
            # conditions without subqueries; subquery tests; conditions reading subqueries as values
            plain: list[exp.Expression] = []
            tests: list[tuple[exp.Expression, bool]] = []
            valued: list[exp.Expression] = []
            clock: list[ClockBound] = []
            for c in _conjuncts(where.this):
                if reads_clock(c, in_subqueries=False):  # a subquery's own WHERE is planned with it
                    bound = clock_bound(c)
                    if bound is None:
                        raise Unsupported(CLOCK_REASON)
                    clock.append(bound)
                elif (found := subquery_test(c)) is not None:
                    tests.append(found)
                else:
                    (valued if nested_subqueries(c) else plain).append(c)
            node, rest = _equalities_to_keys(node, [self.rewrite(c, env) for c in plain])
            pred = _and(rest)
            if pred is not None:
                node = Filter(node.columns, node, pred)
            if clock:  # before the subqueries' joins: their state holds only the rows it shows
                node = Temporal(node.columns, node, tuple(replace(b, expr=self.rewrite(b.expr, env)) for b in clock))
            for test, negated in tests:  # after the plain conditions: fewer rows kept in the join's state
                node = lower_subquery_test(self, node, env, test, negated)
            for c in valued:
                node, with_values, c = join_subqueries(self, node, env, c)
                node = Filter(node.columns, node, self.rewrite(c, with_values))
        items = _expand_stars(s.expressions, env)
        exprs = [e.unalias() if isinstance(e, exp.Alias) else e for e in items]
        names = [e.alias_or_name for e in items]
        if any(nested_subqueries(e) for e in exprs) and not s.args.get("group") and not s.args.get("having") \
                and not any(_bare_aggregate(n) or isinstance(n, exp.Window) for e in exprs
                            for n in _outside_subqueries(e)):
            # each row's value of a subquery, joined in; aggregates over it are not (their
            # subquery would be evaluated per group, after the aggregate)
            for i, e in enumerate(exprs):
                node, env, exprs[i] = join_subqueries(self, node, env, e)
        having = s.args.get("having")
        group = s.args.get("group")
        has_agg = any(_bare_aggregate(n) for e in exprs for n in e.walk()) or (
            having is not None and any(_bare_aggregate(n) for n in having.walk()))
        windows = [n for e in exprs for n in e.find_all(exp.Window)]
        order = s.args.get("order")
        limit = s.args.get("limit")
        offset = s.args.get("offset")
        distinct = s.args.get("distinct")
        if any(_set_returning(n) for e in exprs for n in e.walk()):
            # A row becomes several: no Map can say that, and Spark refuses a generator inside
            # the routing's CASE. The query runs as a batch instead (unnest in views): over its
            # inputs' changes alone when it is linear (planner/incremental.py), which measured
            # faster than a Recompute per row on the pipeline (docs/benchmarks.md).
            raise Unsupported("a set-returning function in the select list")

        post: Env | None = None
        group_exprs: list[exp.Expression] = []
        scalars: Env = {}  # the columns subqueries' values over the groups are read from
        if group is not None or has_agg:
            grouped: list[exp.Expression] = list(group.expressions) if group is not None else []
            sets = [g for g in grouped if isinstance(g, (exp.GroupingSets, exp.Cube, exp.Rollup))]
            group_exprs = [self.rewrite(g, env) for g in (group.expressions if group is not None else [])
                           if g not in sets]
            calls: list[tuple[exp.Expression, AggCall | None]] = []
            for e in [*exprs, *([having.this] if having is not None else []),
                      *([o.this for o in order.expressions] if order is not None else [])]:
                for n in _outside_subqueries(e):  # a subquery's own aggregates are planned with it
                    if _is_aggregate(n) and not isinstance(n, exp.Grouping) and \
                            not any(_is_aggregate(a) for a in _ancestors(n, e)):
                        calls.append((n, self.agg_call(n, env)))
            if sets:
                why = "GROUPING SETS with " + ("window functions" if windows else "aggregates without an incremental form")
                try:
                    expanded = grouping_sets(grouped)
                except Unsupported as e:
                    why = str(e)
                    expanded = []
                if expanded and not windows and all(c is not None for _, c in calls) and limit is None and \
                        offset is None and not (isinstance(distinct, exp.Distinct) and distinct.args.get("on") is not None):
                    node = self.grouping_sets(node, env, expanded, calls, exprs, having)
                    return (self.distinct(node) if distinct is not None else node), names
                if not top or order is not None or limit is not None or distinct is not None:
                    raise Unsupported("GROUPING SETS, CUBE and ROLLUP below the top of the view")
                # Each output row depends on the input rows that agree on the keys every grouping
                # set has: the plain GROUP BY keys and what all of a GROUPING SETS' sets share
                # (ROLLUP and CUBE have the empty set, so none).
                shared = [g for g in grouped if g not in sets] + [k for g in sets for k in _shared_by_all_sets(g)]
                partition = [self.rewrite(k, env) for k in shared]
                return self.recompute(s, node, env, partition, why), names
            if any(c is None for _, c in calls) or windows:
                if not top or order is not None or limit is not None or distinct is not None:
                    raise Unsupported("aggregates without an incremental form (recomputed per group)")
                why = "window functions" if windows else "aggregates without an incremental form"
                return self.recompute(s, node, env, group_exprs, why), names
            node, post = self.reduce(node, group_exprs, calls, group is None)
            having_cond = having.this if having is not None else None
            if any(nested_subqueries(e) for e in [*exprs, *([having_cond] if having_cond is not None else [])]):
                node, scalars, exprs, having_cond = self.subqueries_over_groups(
                    node, env, post, group.expressions if group is not None else [], exprs, having_cond)
            if having_cond is not None:
                node = Filter(node.columns, node, self.rewrite_post(having_cond, env, post, group_exprs, scalars=scalars))
        elif windows:
            if not top or order is not None or limit is not None or distinct is not None:
                raise Unsupported("window functions below the top of the view")
            return self.recompute(s, node, env, [], "window functions"), names

        def project(e: Any) -> exp.Expression:
            return self.rewrite_post(e, env, post, group_exprs, scalars=scalars) if post is not None \
                else self.rewrite(e, env)

        out_exprs = [project(e) for e in exprs]
        if isinstance(distinct, exp.Distinct) and distinct.args.get("on") is not None:
            on = [project(e) for e in distinct.args["on"].expressions]
            keys = self.sort_keys(order, project, names, out_exprs)
            node = self.topn_over(node, out_exprs, on, keys, 1, 0)
            return node, names
        if order is not None and (limit is not None or offset is not None):
            keys = self.sort_keys(order, project, names, out_exprs)
            if distinct is not None:
                raise Unsupported("DISTINCT with ORDER BY ... LIMIT")
            node = self.topn_over(node, out_exprs, [], keys, _count(limit), _count(offset) or 0)
            return node, names
        if limit is not None or offset is not None:
            raise Unsupported("LIMIT without ORDER BY (no defined rows to keep)")
        cols = tuple(self.fresh() for _ in out_exprs)
        node = Map(cols, node, tuple(out_exprs))
        if distinct is not None:
            node = self.distinct(node)
        return node, names

    def subqueries_over_groups(self, node: Node, env: Env, post: Env, group: list[exp.Expression],
                               exprs: list[Any], having: exp.Expression | None
                               ) -> tuple[Node, Env, list[Any], exp.Expression | None]:
        """Subqueries read as values in a grouped query's select list or HAVING (`HAVING sum(v) >
        (SELECT avg(v) FROM t)`, a share of a total): joined to the Reduce's rows, one row per
        group, as `join_subqueries` joins them to input rows. Only the GROUP BY columns are in
        scope for a correlation (by equalities on them); the values are read from `scalars`."""
        from streamdb.planner.subqueries import SCALAR_ALIAS, join_subqueries

        keyed: Env = {}
        for g in group:
            if isinstance(g, exp.Column):
                inner = self.rewrite(g, env)
                column = post.get(("__group", inner.sql(dialect="postgres")))
                if column is not None:
                    keyed.update({k: column for k, v in env.items() if v == inner.name})
        out = list(exprs)
        for i, e in enumerate(out):
            node, keyed, out[i] = join_subqueries(self, node, keyed, e)
        if having is not None:
            node, keyed, having = join_subqueries(self, node, keyed, having)
        return node, {k: v for k, v in keyed.items() if k[0] == SCALAR_ALIAS}, out, having

    def grouping_sets(self, node: Node, env: Env, sets: list[list[exp.Expression]],
                      calls: list[tuple[exp.Expression, AggCall | None]], exprs: list[Any],
                      having: exp.Having | None) -> Node:
        """GROUPING SETS, ROLLUP and CUBE: one Reduce per grouping set over the same input, each
        projected to the select list with the keys outside its set NULL and grouping(...) its
        constant, in a union. A change touches one group in each set, never a whole partition."""
        keys: dict[str, exp.Expression] = {}
        for members in sets:
            for m in members:
                keys.setdefault(self.rewrite(m, env).sql(dialect="postgres"), m)
        cols = tuple(self.fresh() for _ in exprs)
        branches: list[Node] = []
        for members in sets:
            present = {self.rewrite(m, env).sql(dialect="postgres") for m in members}
            group = [self.rewrite(m, env) for m in members]
            reduced, post = self.reduce(node, group, calls, not members)
            absent = {k: _typed_null(e) for k, e in keys.items() if k not in present}

            def grouping(n: exp.Expression, present: set[str] = present) -> exp.Expression:
                if not isinstance(n, exp.Grouping):
                    return n
                bits = 0
                for arg in n.expressions:
                    at = self.rewrite(arg, env).sql(dialect="postgres")
                    if at not in keys:
                        raise Unsupported("grouping() of an expression outside GROUP BY")
                    bits = bits * 2 + (at not in present)
                return exp.Literal.number(bits)

            if having is not None:
                cond = self.rewrite_post(having.this.copy().transform(grouping), env, post, group, absent)
                reduced = Filter(reduced.columns, reduced, cond)
            out = tuple(self.rewrite_post(e.copy().transform(grouping), env, post, group, absent) for e in exprs)
            branches.append(Map(cols, reduced, out))
        return branches[0] if len(branches) == 1 else UnionAll(cols, tuple(branches))

    def agg_call(self, n: exp.Expression, env: Env) -> AggCall | None:
        inner = n
        cond = None
        if isinstance(n, exp.Filter):
            inner = n.this
            cond = self.rewrite(n.expression.this, env)
        found = _agg_fn(inner)
        if found is None:
            return None
        fn, arg = found
        rarg = self.rewrite(arg, env) if arg is not None else None
        if cond is not None:
            # agg(x) FILTER (WHERE c) is agg(CASE WHEN c THEN x END); count(*) counts a constant.
            value = rarg if rarg is not None else exp.Literal.number(1)
            rarg = exp.Case(ifs=[exp.If(this=cond, true=value)])
            if fn == "count_star":
                fn = "count"
        return AggCall(fn, rarg)

    def reduce(self, node: Node, group: list[exp.Expression],
               calls: list[tuple[exp.Expression, AggCall | None]], global_: bool) -> tuple[Node, Env]:
        aggs: list[AggCall] = []
        post: Env = {}
        seen: dict[str, int] = {}
        for n, call in calls:
            assert call is not None
            key = n.sql(dialect="postgres")
            if key not in seen:
                seen[key] = len(aggs)
                aggs.append(call)
        gcols = tuple(self.fresh() for _ in group)
        acols = tuple(self.fresh() for _ in aggs)
        for i, g in enumerate(group):
            post[("__group", g.sql(dialect="postgres"))] = gcols[i]
        for key, j in seen.items():
            post[("__agg", key)] = acols[j]
        return Reduce(gcols + acols, node, tuple(group), tuple(aggs), global_), post

    def rewrite_post(self, e: exp.Expression, env: Env, post: Env, group: list[exp.Expression],
                     absent: dict[str, exp.Expression] | None = None, scalars: Env | None = None) -> exp.Expression:
        """An expression after GROUP BY: aggregates and group keys become the Reduce's columns (and
        the keys of other grouping sets, `absent`, their NULLs; subqueries' values joined to the
        groups, `scalars`, their columns)."""
        if _has_subquery(e):
            raise Unsupported("subqueries in expressions")

        def fix(node: exp.Expression) -> exp.Expression:
            if _is_aggregate(node):
                name = post.get(("__agg", node.sql(dialect="postgres")))
                if name is None:
                    raise Unsupported(f"aggregate {node.sql(dialect='postgres')}")
                return _col(name, node)
            if isinstance(node, (exp.Literal, exp.Null, exp.Boolean)):
                return node
            if scalars and isinstance(node, exp.Column) and (_norm(node.table), _norm(node.name)) in scalars:
                return _col(scalars[(_norm(node.table), _norm(node.name))], node)
            try:
                pre = self.rewrite(node, env).sql(dialect="postgres")
            except Unsupported:
                return node
            name = post.get(("__group", pre))
            if name is not None:
                return _col(name, node)
            if absent is not None and pre in absent:
                return absent[pre].copy()
            if isinstance(node, exp.Column):
                raise Unsupported(f"column {node.sql(dialect='postgres')} outside GROUP BY")
            return node

        return e.copy().transform(fix)

    def sort_keys(self, order: exp.Order | None, project, names: list[str],
                  out_exprs: list[exp.Expression]) -> list[SortKey]:
        keys: list[SortKey] = []
        for o in (order.expressions if order is not None else []):
            target = o.this
            expr = None
            if isinstance(target, exp.Column) and not target.table and target.name in names:
                expr = out_exprs[names.index(target.name)]
            elif isinstance(target, exp.Literal) and not target.is_string:
                expr = out_exprs[int(target.name) - 1]
            if expr is None:
                expr = project(target)
            desc = bool(o.args.get("desc"))
            nulls_first = o.args.get("nulls_first")
            keys.append(SortKey(expr, desc, bool(nulls_first) if nulls_first is not None else desc))
        return keys

    def topn_over(self, node: Node, out_exprs: list[exp.Expression], partition: list[exp.Expression],
                  keys: list[SortKey], limit: int | None, offset: int, with_ties: bool = False) -> Node:
        """TopN over the projected rows: the sort keys and partition are computed beside the output
        columns (hidden), ranked, then dropped."""
        hidden = [*partition, *(k.expr for k in keys)]
        cols = tuple(self.fresh() for _ in (*out_exprs, *hidden))
        mapped = Map(cols, node, (*out_exprs, *hidden))
        n_out = len(out_exprs)
        part = tuple(_col(c, e) for c, e in zip(cols[n_out:n_out + len(partition)], partition, strict=True))
        order = tuple(SortKey(_col(c, k.expr), k.desc, k.nulls_first)
                      for c, k in zip(cols[n_out + len(partition):], keys, strict=True))
        ranked = TopN(cols, mapped, part, order, limit, offset, with_ties)
        final = tuple(self.fresh() for _ in out_exprs)
        return Map(final, ranked, tuple(_col(c, e) for c, e in zip(cols[:n_out], out_exprs, strict=True)))

    def windowed_subquery(self, s: exp.Select) -> tuple[Node, list[str]] | None:
        """`SELECT .. FROM (SELECT .., f(..) OVER (PARTITION BY p ..) .. FROM x WHERE c) q WHERE d`
        at a view's top (a filter on lag(), on a running total or a rank): the outer query reads
        each row of the subquery apart, so the whole of it is recomputed per partition p, as a
        view whose window functions are at its top is. None for any other shape."""
        frm = s.args.get("from_") or s.args.get("from")
        if frm is None or s.args.get("joins") or not isinstance(frm.this, exp.Subquery) or \
                not isinstance(frm.this.this, exp.Select):
            return None
        inner: exp.Select = frm.this.this
        if session_shape(inner) is not None:  # SESSION(...)'s windows: the Session operator
            return None
        refused = ("group", "having", "distinct", "limit", "offset", "with", "qualify", "laterals", "joins")
        if any(s.args.get(a) for a in refused) or any(inner.args.get(a) for a in refused[:-1]):
            return None
        windows = [n for e in inner.expressions for n in e.find_all(exp.Window)]
        specs = {tuple(p.sql(dialect="postgres") for p in w.args.get("partition_by") or []) for w in windows}
        if len(specs) != 1 or not next(iter(specs)):
            return None
        outer_where = s.args.get("where")
        inner_where = inner.args.get("where")
        for e in [*s.expressions, *([outer_where.this] if outer_where is not None else [])]:
            if _has_subquery(e) or reads_clock(e) or any(
                    _bare_aggregate(n) or isinstance(n, exp.Window) or _set_returning(n) for n in e.walk()):
                return None
        if inner_where is not None and (_has_subquery(inner_where.this) or reads_clock(inner_where.this)):
            return None
        if any(_has_subquery(e) or reads_clock(e) or any(_bare_aggregate(n) and not isinstance(n.parent, exp.Window)
                                                         or _set_returning(n) for n in e.walk())
               for e in inner.expressions):
            return None
        node, env = self.from_clause(inner)
        if inner_where is not None:
            node = Filter(node.columns, node, self.rewrite(inner_where.this, env))
        partition = [self.rewrite(p, env) for p in windows[0].args["partition_by"]]

        def over_input(n: exp.Expression) -> exp.Expression:
            return self.rewrite(n, env) if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star) else n

        inner_items = _expand_stars(inner.expressions, env)
        derived = tuple(self.fresh() for _ in inner_items)
        rows = exp.Select(expressions=[
            exp.alias_((e.unalias() if isinstance(e, exp.Alias) else e).copy().transform(over_input), d)
            for e, d in zip(inner_items, derived, strict=True)]).from_(exp.to_table(PARTITION_TABLE))
        alias = _norm(frm.this.alias_or_name)
        outer_env: Env = {(alias, _norm(e.alias_or_name)): d for e, d in zip(inner_items, derived, strict=True)}
        items = _expand_stars(s.expressions, outer_env)
        names = [e.alias_or_name for e in items]
        query = exp.Select(expressions=[
            exp.alias_(self.rewrite(e.unalias() if isinstance(e, exp.Alias) else e, outer_env), n)
            for e, n in zip(items, names, strict=True)]).from_(rows.subquery("__windowed"))
        if outer_where is not None:
            query = query.where(self.rewrite(outer_where.this, outer_env))
        cols = tuple(self.fresh() for _ in items)
        return Recompute(cols, node, tuple(partition), query, "window functions", derived), names

    def row_number_filter(self, s: exp.Select) -> tuple[Node, list[str]] | None:
        """`SELECT .. FROM (SELECT .., ROW_NUMBER() OVER (PARTITION BY p ORDER BY o) AS rn FROM x) q
        WHERE rn <= N` (or rn < N, rn = 1) without rn in the output: a TopN. RANK() in place of
        ROW_NUMBER() (and FETCH ... WITH TIES, rewritten to it): a TopN with ties."""
        frm = s.args.get("from_") or s.args.get("from")
        where = s.args.get("where")
        if frm is None or where is None or s.args.get("joins") or s.args.get("group") or \
                not isinstance(frm.this, exp.Subquery) or not isinstance(frm.this.this, exp.Select):
            return None
        inner: exp.Select = frm.this.this
        rn_name = None
        spec = None
        with_ties = False
        for e in inner.expressions:
            if isinstance(e, exp.Alias) and isinstance(e.this, exp.Window) and \
                    (isinstance(e.this.this, exp.RowNumber) or _is_rank(e.this.this)):
                rn_name, spec, with_ties = _norm(e.alias), e.this, not isinstance(e.this.this, exp.RowNumber)
        if rn_name is None or spec is None or (with_ties and not spec.args.get("order")):
            return None
        limit = None
        rest: list[exp.Expression] = []
        for c in _conjuncts(where.this):
            bound = _rank_bound(c, rn_name)
            if bound is not None and limit is None:
                limit = bound
            else:
                rest.append(c)
        if limit is None:
            return None
        if any(isinstance(n, exp.Column) and _norm(n.name) == rn_name for e in [*s.expressions, *rest]
               for n in e.walk()):
            return None  # the row number itself is shown: recomputed
        others = [e for e in inner.expressions if not (isinstance(e, exp.Alias) and e.this is spec)]
        if any(n for e in others for n in e.find_all(exp.Window)) or inner.args.get("group") or \
                inner.args.get("distinct") or inner.args.get("order") or inner.args.get("limit"):
            return None
        node, env = self.from_clause(inner)
        if inner.args.get("where") is not None:
            node = Filter(node.columns, node, self.rewrite(inner.args["where"].this, env))
        inner_exprs = [e.unalias() if isinstance(e, exp.Alias) else e for e in others]
        inner_names = [_norm(e.alias_or_name) for e in others]
        partition = [self.rewrite(p, env) for p in spec.args.get("partition_by") or []]
        keys = self.sort_keys(spec.args.get("order"), lambda e: self.rewrite(e, env), [], [])
        projected = [self.rewrite(e, env) for e in inner_exprs]
        ranked = self.topn_over(node, projected, partition, keys, limit, 0, with_ties)
        alias = _norm(frm.this.alias_or_name)
        outer_env = {(alias, n): c for n, c in zip(inner_names, ranked.columns, strict=True)}
        node = ranked
        if rest:
            node = Filter(node.columns, node, self.rewrite(_and(rest), outer_env))  # type: ignore[arg-type]
        exprs = [e.unalias() if isinstance(e, exp.Alias) else e for e in s.expressions]
        cols = tuple(self.fresh() for _ in exprs)
        return Map(cols, node, tuple(self.rewrite(e, outer_env) for e in exprs)), \
            [e.alias_or_name for e in s.expressions]

    def recompute(self, s: exp.Select, node: Node, env: Env, group: list[exp.Expression], why: str) -> Node:
        """The SELECT recomputed per partition: by its GROUP BY keys, or its windows' PARTITION BY."""
        partition = group
        if not group:
            specs = {tuple(p.sql(dialect="postgres") for p in w.args.get("partition_by") or [])
                     for w in s.find_all(exp.Window)}
            if len(specs) == 1:
                w = next(iter(s.find_all(exp.Window)))
                partition = [self.rewrite(p, env) for p in w.args.get("partition_by") or []]
        query: Any = s.copy()
        query.set("from_", exp.From(this=exp.to_table(PARTITION_TABLE)))
        query.set("joins", None)
        query.set("where", None)

        def fix(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star):
                return self.rewrite(n, env)
            return n

        query = query.transform(fix)
        return Recompute(tuple(self.fresh() for _ in s.expressions), node, tuple(partition), query, why)


def _expand_stars(items: list[exp.Expression], env: Env) -> list[exp.Expression]:
    """`x.*` (what qualifying leaves of `SELECT *` over a subquery) as x's columns in order; a bare
    `*` likewise when the FROM has one name. ROWTIME is never in `*`."""
    out: list[exp.Expression] = []
    for e in items:
        star = isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))
        if not star:
            out.append(e)
            continue
        aliases = {a for a, _ in env}
        alias = _norm(e.table) if isinstance(e, exp.Column) and e.table else next(iter(aliases)) \
            if len(aliases) == 1 else None
        if alias is None or alias not in aliases:
            raise Unsupported("* over several relations")
        out.extend(exp.column(c, table=a, quoted=True) for a, c in env if a == alias and c != "rowtime")
    return out


def _equalities_to_keys(node: Node, conjuncts: list[exp.Expression]) -> tuple[Node, list[exp.Expression]]:
    """WHERE's equalities between the two sides of an inner join become the join's keys, as if
    written in its ON (`FROM a, b WHERE a.id = b.a_id` is an equi-join indexed by key, not a cross
    product filtered afterwards); nested inner joins take the ones over their own sides first.
    Returns the join and the conjuncts left for a filter above it."""
    if not isinstance(node, Join) or node.kind != "inner":
        return node, conjuncts
    left, conjuncts = _equalities_to_keys(node.left, conjuncts)
    right, conjuncts = _equalities_to_keys(node.right, conjuncts)
    left_cols, right_cols = set(left.columns), set(right.columns)
    lkeys, rkeys, rest = list(node.left_keys), list(node.right_keys), []
    for c in conjuncts:
        if isinstance(c, exp.EQ) and _same_key_type(c.this, c.expression):
            a = {x.name for x in c.this.find_all(exp.Column)}
            b = {x.name for x in c.expression.find_all(exp.Column)}
            if a and b and a <= left_cols and b <= right_cols:
                lkeys.append(c.this)
                rkeys.append(c.expression)
                continue
            if a and b and a <= right_cols and b <= left_cols:
                lkeys.append(c.expression)
                rkeys.append(c.this)
                continue
        rest.append(c)
    if left is node.left and right is node.right and len(lkeys) == len(node.left_keys):
        return node, rest
    return replace(node, left=left, right=right, left_keys=tuple(lkeys), right_keys=tuple(rkeys)), rest


def _same_key_type(a: exp.Expression, b: exp.Expression) -> bool:
    """Whether two sides of an equality compare alike as join keys (keys match by their encoded
    values, so an integer 1 and a numeric 1.0 would not): the same type, or both integers. Other
    equalities of WHERE stay a filter, with SQL's comparison."""
    ta, tb = a.type, b.type
    if ta is None or tb is None or ta.is_type(exp.DataType.Type.UNKNOWN) or tb.is_type(exp.DataType.Type.UNKNOWN):
        return False
    integers = exp.DataType.INTEGER_TYPES
    return ta.this == tb.this or (ta.is_type(*integers) and tb.is_type(*integers))


def _ancestors(n: exp.Expression, stop: exp.Expression) -> list[Any]:
    out: list[Any] = []
    p = n.parent
    while p is not None and p is not stop.parent:
        out.append(p)
        if p is stop:
            break
        p = p.parent
    return out


def _count(node: exp.Expression | None) -> int | None:
    if node is None:
        return None
    value = node.args.get("expression") or node.this
    if isinstance(value, exp.Literal) and not value.is_string:
        return int(value.name)
    raise Unsupported("a LIMIT or OFFSET that is not a constant")


def _is_rank(e: exp.Expression) -> bool:
    """RANK() as a window function (no arguments), as sqlglot parses it or as a rewrite builds it."""
    if isinstance(e, exp.Rank):
        return not e.expressions
    return isinstance(e, exp.Anonymous) and str(e.this).upper() == "RANK" and not e.expressions


def _rank_bound(c: exp.Expression, rn: str) -> int | None:
    """N for `rn <= N`, `rn < N + 1`, `rn = 1` (and mirrored), else None."""
    def is_rn(x: exp.Expression) -> bool:
        return isinstance(x, exp.Column) and _norm(x.name) == rn

    def number(x: exp.Expression) -> int | None:
        return int(x.name) if isinstance(x, exp.Literal) and not x.is_string and x.name.isdigit() else None

    a, b = c.args.get("this"), c.args.get("expression")
    if a is None or b is None:
        return None
    if is_rn(b) and not is_rn(a):
        a, b = b, a
        flip: dict[type, type] = {exp.LT: exp.GT, exp.LTE: exp.GTE, exp.GT: exp.LT, exp.GTE: exp.LTE, exp.EQ: exp.EQ}
        kind: type | None = flip.get(type(c))
    else:
        kind = type(c)
    if not is_rn(a) or (n := number(b)) is None:
        return None
    if kind is exp.LTE:
        return n
    if kind is exp.LT:
        return n - 1
    if kind is exp.EQ and n == 1:
        return 1
    return None


def plan_dataflow(resolved: exp.Expression, inputs: tuple[RelationInput, ...], catalog: CatalogSnapshot,
                  names: tuple[str, ...]) -> Dataflow:
    """The view's dataflow, from its query resolved, qualified and typed (`_typed_copy`); raises
    Unsupported with the reason when a part of it has no incremental form here."""
    low = Lowering(inputs, catalog)
    if isinstance(resolved, exp.Select):
        node, _ = low.select(resolved, top=True)
    else:
        node, _ = low.query(resolved)
    if len(node.columns) != len(names):
        raise Unsupported("a result whose columns could not be matched")
    return Dataflow(share_common_subplans(prune_columns(fuse_residuals(push_filters(node)))), names)


def inline_ctes(query: exp.Expression) -> exp.Expression:
    """`query` (resolved, before it is typed: sqlglot's qualify drops a VALUES CTE's column list)
    with each common table expression of a non-recursive WITH written in place of the references to it, as a subquery under the reference's alias and the CTE's column list
    (a CTE read twice is planned twice; share_common_subplans merges the copies). A CTE that is
    a VALUES list stays one, so a join with it is the linear VALUES join."""
    query = query.copy()
    for with_ in list(query.find_all(exp.With)):
        scope = with_.parent
        if scope is None:
            continue
        if with_.args.get("recursive"):
            raise Unsupported("WITH RECURSIVE")
        ctes = list(with_.expressions)
        with_.pop()
        for i, cte in enumerate(ctes):
            name = _norm(cte.alias)
            columns = list(cte.args["alias"].columns) if cte.args.get("alias") else []
            body = _values_of(cte.this) or cte.this
            for later in [*ctes[i + 1:], scope]:
                for table in list(later.find_all(exp.Table)):
                    if table.args.get("db") or _norm(table.name) != name:
                        continue
                    alias = exp.TableAlias(this=exp.to_identifier(table.alias_or_name),
                                           columns=[c.copy() for c in columns])
                    if isinstance(body, exp.Values):  # as the parser reads `(VALUES ...) AS v(x)`
                        inlined: exp.Expression = body.copy()
                        inlined.set("alias", alias)
                    else:
                        inlined = exp.Subquery(this=body.copy(), alias=alias)
                    table.replace(inlined)
    return query


def _values_of(body: exp.Expression) -> exp.Values | None:
    """`VALUES ...` as a CTE's body, which sqlglot reads as `SELECT * FROM (VALUES ...) AS _values`."""
    if isinstance(body, exp.Values):
        return body
    if not isinstance(body, exp.Select) or len(body.expressions) != 1 or not body.expressions[0].is_star:
        return None
    if any(body.args.get(k) for k in ("where", "group", "having", "order", "limit", "joins", "distinct")):
        return None
    frm = body.args.get("from_") or body.args.get("from")
    inner = frm.this if frm is not None else None
    if isinstance(inner, exp.Subquery):
        inner = inner.this
    if isinstance(inner, exp.Values):
        values = inner.copy()
        values.set("alias", None)
        return values
    return None


# ---- filters below joins -------------------------------------------------------------------


def _columns_of(e: exp.Expression) -> set[str]:
    return {c.name for c in e.find_all(exp.Column)}


def push_filters(root: Node) -> Node:
    """The dataflow with each conjunct of a filter over a join that reads one side only moved
    below the join, onto that side (both sides of an inner join; the preserved side of a left or
    right join, whose rows a filter above would drop anyway): rows that cannot reach the view are
    never stored in the join's state nor joined. Nexmark q3 (`auction JOIN person WHERE
    A.category = 10 AND P.state IN (...)`) kept every auction and person otherwise. PostgreSQL's
    planner does the same (quals pushed down to the scans), so errors a pushed condition raises
    are those PostgreSQL could raise."""
    def step(new: Node) -> Node:
        if isinstance(new, Temporal):
            return _push_temporal(new)
        if isinstance(new, Filter) and isinstance(new.input, Filter) and isinstance(new.input.input, Join):
            # WHERE over a join whose ON kept a condition above it: one filter, pushed as one
            both = _and([*_conjuncts(new.input.predicate), *_conjuncts(new.predicate)])
            assert both is not None
            new = Filter(new.columns, new.input.input, both)
        if isinstance(new, Filter) and isinstance(new.input, Join):
            new = _push_into_join(new.input, new.predicate)
        return new

    return _bottom_up(root, step)


def _bottom_up(root: Node, step: Callable[[Node], Node]) -> Node:
    """The dataflow rebuilt from its leaves up, each node over its rebuilt inputs then passed
    through `step`; a node read twice is rebuilt once."""
    built: dict[int, Node] = {}

    def build(n: Node) -> Node:
        done = built.get(id(n))
        if done is None:
            done = built[id(n)] = step(_with_inputs(n, [build(i) for i in n.inputs()]))
        return done

    return build(root)


_T = TypeVar("_T")


def _by_join_side(join: Join, items: Iterable[_T], expr: Callable[[_T], exp.Expression]
                  ) -> tuple[list[_T], list[_T], list[_T]]:
    """`items` split into those whose expression reads the join's left side only (where a
    condition may move below it: an inner join's either side, an outer join's preserved side),
    its right side only, and the rest."""
    left_cols, right_cols = set(join.left.columns), set(join.right.columns)
    to_left: list[_T] = []
    to_right: list[_T] = []
    rest: list[_T] = []
    for item in items:
        used = _columns_of(expr(item))
        if used and used <= left_cols and join.kind in ("inner", "left"):
            to_left.append(item)
        elif used and used <= right_cols and join.kind in ("inner", "right"):
            to_right.append(item)
        else:
            rest.append(item)
    return to_left, to_right, rest


def _push_into_join(join: Join, predicate: exp.Expression) -> Node:
    to_left, to_right, rest = _by_join_side(join, _conjuncts(predicate), lambda c: c)
    if not to_left and not to_right:
        return Filter(join.columns, join, predicate)
    left, right = join.left, join.right
    if to_left:
        left = _filtered(left, to_left)
    if to_right:
        right = _filtered(right, to_right)
    node: Node = replace(join, left=left, right=right)
    pred = _and(rest)
    return node if pred is None else Filter(node.columns, node, pred)


def _push_temporal(node: Temporal) -> Node:
    """A temporal filter over a join (or over a filter over one) with its bounds that read one
    side only moved onto that side, as `push_filters` moves conditions: the join's state then
    holds that side's rows of the window only, not every row it ever had."""
    below = node.input
    above = below if isinstance(below, Filter) else None
    join = above.input if above is not None else below
    if not isinstance(join, Join):
        return node
    to_left, to_right, rest = _by_join_side(join, node.bounds, lambda b: b.expr)
    if not to_left and not to_right:
        return node
    left = Temporal(join.left.columns, join.left, tuple(to_left)) if to_left else join.left
    right = Temporal(join.right.columns, join.right, tuple(to_right)) if to_right else join.right
    out: Node = replace(join, left=_push_temporal(left) if isinstance(left, Temporal) else left,
                        right=_push_temporal(right) if isinstance(right, Temporal) else right)
    if above is not None:
        out = replace(above, input=out)
    return replace(node, input=out, bounds=tuple(rest)) if rest else out


def _filtered(node: Node, conjuncts: list[exp.Expression]) -> Node:
    pred = _and(conjuncts)
    assert pred is not None
    if isinstance(node, Join):  # on down through nested joins
        return _push_into_join(node, pred)
    return Filter(node.columns, node, pred)


def _with_inputs(n: Node, kids: list[Node]) -> Node:
    """`n` over `kids` (its inputs, rebuilt), or `n` itself when they are the same nodes."""
    if all(a is b for a, b in zip(kids, n.inputs(), strict=True)):
        return n
    if isinstance(n, UnionAll):
        return replace(n, branches=tuple(kids))
    if isinstance(n, Join):
        return replace(n, left=kids[0], right=kids[1])
    if isinstance(n, Reduce):
        return replace(n, input=kids[0], expire=kids[1] if n.expire is not None else None)  # type: ignore[arg-type]
    if isinstance(n, Filter):  # its columns are its input's, which prune_columns may narrow
        return replace(n, columns=kids[0].columns, input=kids[0])
    assert isinstance(n, (Map, TopN, Recompute, Session, Temporal))
    return replace(n, input=kids[0])


# ---- comparisons tested inside a join -------------------------------------------------------


def fuse_residuals(root: Node) -> Node:
    """The dataflow with the comparisons of a filter over an inner join that read both sides
    (what `push_filters` leaves above it) tested by the join operator itself on each pair it
    would emit, when the operator can evaluate them (`residual_class`): pairs that fail are
    never emitted, shuffled and decoded to be dropped a layer above. Nexmark q5's `num >= maxn`
    otherwise emitted and retracted every auction of a window each time the window's maximum
    moved; q4's `B.date_time BETWEEN A.date_time AND A.expires` every pair outside it."""
    def step(new: Node) -> Node:
        if not (isinstance(new, Filter) and isinstance(new.input, Join) and new.input.kind == "inner"):
            return new
        join = new.input
        tested = list(_conjuncts(join.residual))
        rest: list[exp.Expression] = []
        for c in _conjuncts(new.predicate):
            (tested if residual_class(c) is not None else rest).append(c)
        if len(tested) == len(_conjuncts(join.residual)):
            return new
        fused: Node = replace(join, residual=_and(tested))
        pred = _and(rest)
        return fused if pred is None else Filter(fused.columns, fused, pred)

    return _bottom_up(root, step)


_COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)
# sqlglot type -> how the join operator compares its values (the row JSON's encoding decides).
_OPERAND_CLASSES = {
    **{t: "integer" for t in exp.DataType.INTEGER_TYPES},
    exp.DataType.Type.DECIMAL: "numeric",
    exp.DataType.Type.DOUBLE: "double", exp.DataType.Type.FLOAT: "double",
    exp.DataType.Type.TEXT: "text", exp.DataType.Type.VARCHAR: "text",
    exp.DataType.Type.BOOLEAN: "boolean",
    exp.DataType.Type.TIMESTAMP: "timestamp", exp.DataType.Type.TIMESTAMPTZ: "timestamptz",
    exp.DataType.Type.DATE: "date",
}
# Interval units of a fixed length in microseconds (days and months vary with time zones and
# calendars, so they stay a filter).
_FIXED_UNITS = {"MICROSECOND": 1, "MILLISECOND": 1_000, "SECOND": 1_000_000, "MINUTE": 60_000_000,
                "HOUR": 3_600_000_000}
_NUMERIC_CLASSES = ("integer", "numeric", "double")


def residual_class(c: exp.Expression) -> str | None:
    """How the join operator compares the operands of conjunct `c` (the class of values it
    compares: integer, numeric, double, text, boolean, timestamp, timestamptz, date), or None
    when it cannot: `c` must be a comparison or BETWEEN of columns, literals and timestamp
    columns plus or minus a fixed interval, reading at least one column."""
    if isinstance(c, exp.Between) and not c.args.get("symmetric"):
        operands = [c.this, c.args.get("low"), c.args.get("high")]
    elif isinstance(c, _COMPARISONS):
        operands = [c.this, c.expression]
    else:
        return None
    classes = [residual_operand(o) for o in operands]
    if any(k is None for k in classes) or not any(isinstance(o, (exp.Column, exp.Add, exp.Sub)) for o in operands):
        return None
    columns = {k for k, o in zip(classes, operands, strict=True) if not isinstance(o, exp.Literal)}
    literals = {k for k, o in zip(classes, operands, strict=True) if isinstance(o, exp.Literal)}
    kinds = columns | literals
    if kinds <= set(_NUMERIC_CLASSES):
        return next(k for k in ("double", "numeric", "integer") if k in kinds)
    if len(columns) == 1 and (not literals or literals == {"text"} and columns == {"text"}):
        return columns.pop()
    return None


def residual_operand(o: exp.Expression | None) -> str | None:
    """The class of an operand `residual_class` accepts, else None."""
    if isinstance(o, exp.Column):
        t = o.type
        return None if t is None else _OPERAND_CLASSES.get(t.this)
    if isinstance(o, exp.Literal):
        if o.is_string:
            return "text"
        try:
            return "integer" if -2**63 <= int(o.name) < 2**63 else "numeric"
        except ValueError:
            return "numeric"
    if isinstance(o, (exp.Add, exp.Sub)) and isinstance(o.this, exp.Column) and interval_micros(o.expression) is not None:
        k = residual_operand(o.this)
        return k if k in ("timestamp", "timestamptz") else None
    return None


def interval_micros(e: exp.Expression) -> int | None:
    """An `INTERVAL 'n' unit` literal of a fixed length, in microseconds; else None."""
    if not isinstance(e, exp.Interval) or not isinstance(e.this, exp.Literal):
        return None
    unit = e.args.get("unit")
    name = (unit.name if unit is not None else "").upper().rstrip("S")
    if name not in _FIXED_UNITS:
        return None
    try:
        return int(e.this.name) * _FIXED_UNITS[name]
    except ValueError:
        return None


# ---- temporal filters ----------------------------------------------------------------------

CLOCK_REASON = ("the query reads the clock (now()) other than in WHERE conditions comparing a timestamp with "
                "now() plus or minus a fixed interval, so its result changes without new input")
_CLOCK_FUNCTIONS = ("now", "clock_timestamp", "mz_now", "statement_timestamp", "transaction_timestamp")
_CLOCK_UNITS = {**_FIXED_UNITS, "DAY": 86_400_000_000, "WEEK": 7 * 86_400_000_000}
_TIMESTAMP_TYPES = (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ, exp.DataType.Type.TIMESTAMPLTZ)


def _is_clock(e: Any) -> bool:
    """now() and its synonyms (CURRENT_DATE and LOCALTIME are not the instant: never temporal)."""
    if isinstance(e, exp.CurrentTimestamp):
        return True
    return isinstance(e, exp.Anonymous) and str(e.this).lower() in _CLOCK_FUNCTIONS


def reads_clock(e: exp.Expression, *, in_subqueries: bool = True) -> bool:
    nodes = e.walk() if in_subqueries else _outside_subqueries(e)
    return any(_is_clock(n) or isinstance(n, (exp.CurrentDate, exp.CurrentTime)) for n in nodes)


def _clock_offset(expr: exp.Expression) -> int | None:
    """`now()`, `now() + INTERVAL ...` or `now() - INTERVAL ...` (a fixed length): the offset
    from now() in microseconds; else None."""
    e: Any = expr.unnest()
    if _is_clock(e):
        return 0
    if isinstance(e, (exp.Add, exp.Sub)):
        a, b = e.this.unnest(), e.expression.unnest()
        if isinstance(e, exp.Add) and _is_clock(b):
            a, b = b, a
        if not _is_clock(a) or not isinstance(b, exp.Interval) or not isinstance(b.this, exp.Literal):
            return None
        unit = b.args.get("unit")
        name = (unit.name if unit is not None else "").upper().rstrip("S")
        try:
            micros = int(b.this.name) * _CLOCK_UNITS[name]
        except (KeyError, ValueError):
            return None
        return micros if isinstance(e, exp.Add) else -micros
    return None


_FLIPPED: dict[type, type] = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE}


def clock_bound(c: exp.Expression) -> ClockBound | None:
    """A WHERE conjunct `x > now() - INTERVAL '1 hour'` (any of < <= > >=, either way round, x a
    timestamp that does not read the clock) as the bound it puts on now(); else None."""
    if type(c) not in _FLIPPED:
        return None
    op: type = type(c)
    x, other = c.this, c.expression
    offset = _clock_offset(other)
    if offset is None:
        x, other, op = other, x, _FLIPPED[op]
        offset = _clock_offset(other)
    if offset is None or reads_clock(x) or _has_subquery(x) or not x.find(exp.Column):
        return None
    if x.type is None or not x.type.is_type(*_TIMESTAMP_TYPES):
        return None
    # x > now() + o <=> now() < x - o; x >= now() + o <=> now() < x - o + 1 (microseconds);
    # x < now() + o <=> now() >= x - o + 1; x <= now() + o <=> now() >= x - o.
    if op is exp.GT:
        return ClockBound(x, -offset, starts=False)
    if op is exp.GTE:
        return ClockBound(x, -offset + 1, starts=False)
    if op is exp.LT:
        return ClockBound(x, -offset + 1, starts=True)
    return ClockBound(x, -offset, starts=True)


def _node_reads_clock(n: Node) -> bool:
    """Whether any expression a node evaluates reads the clock (what a temporal filter does not
    take stays a recomputation)."""
    def visit(v: Any) -> bool:
        if isinstance(v, exp.Expression):
            return reads_clock(v)
        if isinstance(v, tuple):
            return any(visit(x) for x in v)
        if isinstance(v, (AggCall, SortKey)):
            return visit(v.arg if isinstance(v, AggCall) else v.expr)
        return False

    return any(visit(getattr(n, f.name)) for f in fields(n) if not isinstance(getattr(n, f.name), Node))


# ---- columns kept in state -----------------------------------------------------------------


def prune_columns(root: Node) -> Node:
    """The dataflow with the inputs of the operators that store rows (a join's two sides, a
    top-N's and a session's input) narrowed to the columns something above reads: a row is
    encoded, shuffled and kept in the state store with those only. Nexmark q4 joins auctions
    (10 columns) with bids (7) and reads 4 and 3 of them. Maps, filters and unions keep their
    columns (the routing computes only what a record carries)."""
    needed: dict[int, set[str]] = {id(root): set(root.columns)}
    for n in reversed(Dataflow(root, ()).nodes()):  # readers before their inputs
        want = needed.get(id(n), set())
        for i, cols in zip(n.inputs(), _needed_from_inputs(n, want), strict=True):
            needed.setdefault(id(i), set()).update(cols)
    built: dict[int, Node] = {}

    def narrowed(child: Node, original: Node, keep: set[str]) -> Node:
        cols = tuple(c for c in original.columns if c in keep)
        return child if len(cols) == len(original.columns) else Map(cols, child, tuple(_col(c) for c in cols))

    def build(n: Node) -> Node:
        done = built.get(id(n))
        if done is not None:
            return done
        kids = [build(i) for i in n.inputs()]
        wants = _needed_from_inputs(n, needed.get(id(n), set()))
        new: Node
        if isinstance(n, Join):
            left = narrowed(kids[0], n.left, wants[0])
            right = narrowed(kids[1], n.right, wants[1])
            new = replace(n, columns=left.columns + right.columns, left=left, right=right)
        elif isinstance(n, TopN):
            below = narrowed(kids[0], n.input, wants[0])
            new = replace(n, columns=below.columns, input=below)
        elif isinstance(n, Session):
            below = narrowed(kids[0], n.input, wants[0])
            new = replace(n, columns=below.columns + n.columns[-2:], input=below)
        elif isinstance(n, Temporal):
            below = narrowed(kids[0], n.input, wants[0])
            new = replace(n, columns=below.columns, input=below)
        else:
            new = _with_inputs(n, kids)
        built[id(n)] = new
        return new

    return build(root)


def _needed_from_inputs(n: Node, want: set[str]) -> list[set[str]]:
    """The columns each input of `n` must give it for `want` of its own columns."""
    def cols(es: Any) -> set[str]:
        return set().union(*(_columns_of(e) for e in es if e is not None))

    if isinstance(n, Scan):
        return []
    if isinstance(n, Filter):
        return [want | _columns_of(n.predicate)]
    if isinstance(n, Map):
        return [cols(n.exprs)]
    if isinstance(n, UnionAll):
        return [set(b.columns) for b in n.branches]
    if isinstance(n, Join):
        tested = cols([n.residual])
        return [((want | tested) & set(n.left.columns)) | cols(n.left_keys),
                ((want | tested) & set(n.right.columns)) | cols(n.right_keys)]
    if isinstance(n, Reduce):
        used = [cols(n.group) | cols(a.arg for a in n.aggs)]
        return used + ([cols(n.expire_keys)] if n.expire is not None else [])
    if isinstance(n, TopN):
        return [want | cols(n.partition) | cols(k.expr for k in n.order)]
    if isinstance(n, Session):
        return [(want & set(n.input.columns)) | cols(n.partition) | _columns_of(n.ts)]
    if isinstance(n, Temporal):
        return [want | cols(b.expr for b in n.bounds)]
    return [set(i.columns) for i in n.inputs()]  # a Recompute's query reads its input whole


# ---- common subplans -----------------------------------------------------------------------


def share_common_subplans(root: Node) -> Node:
    """The dataflow with each stateful subplan computed once: a Join, Reduce, TopN or Session
    equal to one already built (the same operator over the same inputs, up to the names of
    columns) becomes a renaming Map over that one, so its state is kept and its input routed
    once however many places read it. Nexmark q5 writes the same count per auction and window
    twice (one for the rows, one for each window's max): without this its busiest operator did
    all its work twice. Flink's planner does the same (`table.optimizer.reuse-sub-plan-enabled`)."""
    built: dict[int, Node] = {}  # id(original node) -> its node in the new plan
    signature: dict[int, str] = {}  # id(new node) -> what it computes, column names aside
    first: dict[str, Node] = {}  # signature -> the stateful node that computes it

    def canon(e: exp.Expression | None, columns: tuple[str, ...]) -> str:
        if e is None:
            return "-"
        position = {c: i for i, c in enumerate(columns)}

        def by_position(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column) and not n.table and n.name in position:
                return exp.column(f"__pos{position[n.name]}")
            return n

        return e.transform(by_position).sql(dialect="postgres")

    def canons(es: tuple[exp.Expression, ...], columns: tuple[str, ...]) -> str:
        return "[" + ", ".join(canon(e, columns) for e in es) + "]"

    def build(n: Node) -> Node:
        done = built.get(id(n))
        if done is not None:
            return done
        kids = [build(i) for i in n.inputs()]
        sigs = ", ".join(signature[id(k)] for k in kids)
        new = _with_inputs(n, kids)
        if isinstance(n, Scan):
            sig = f"Scan({n.relation_id}, {n.source_columns}, {n.append_only})"
        elif isinstance(n, Filter):
            sig = f"Filter({sigs}, {canon(n.predicate, kids[0].columns)})"
        elif isinstance(n, Map):
            sig = f"Map({sigs}, {canons(n.exprs, kids[0].columns)})"
        elif isinstance(n, UnionAll):
            sig = f"UnionAll({sigs})"
        elif isinstance(n, Join):
            sig = (f"Join({sigs}, {n.kind}, {canons(n.left_keys, kids[0].columns)}, "
                   f"{canons(n.right_keys, kids[1].columns)}, "
                   f"{canon(n.residual, kids[0].columns + kids[1].columns)})")
        elif isinstance(n, Reduce):
            aggs = ", ".join(f"{a.fn}({canon(a.arg, kids[0].columns)})" for a in n.aggs)
            expiry = canons(n.expire_keys, kids[1].columns) if n.expire is not None else "-"
            sig = f"Reduce({sigs}, {canons(n.group, kids[0].columns)}, [{aggs}], {n.global_}, {expiry})"
        elif isinstance(n, TopN):
            order = ", ".join(f"{canon(k.expr, kids[0].columns)} {k.desc} {k.nulls_first}" for k in n.order)
            sig = f"TopN({sigs}, {canons(n.partition, kids[0].columns)}, [{order}], {n.limit}, {n.offset}" + \
                (", ties)" if n.with_ties else ")")
        elif isinstance(n, Session):
            sig = (f"Session({sigs}, {canons(n.partition, kids[0].columns)}, {canon(n.ts, kids[0].columns)}, "
                   f"{n.gap_micros})")
        elif isinstance(n, Temporal):
            bounds = ", ".join(f"{canon(b.expr, kids[0].columns)} {b.offset_micros} {b.starts}" for b in n.bounds)
            sig = f"Temporal({sigs}, [{bounds}])"
        else:  # a Recompute (a view's top only): never shared
            sig = f"Recompute@{id(n)}"
        if isinstance(new, STATEFUL):
            same = first.setdefault(sig, new)
            if same is not new:
                new = Map(n.columns, same, tuple(_col(c) for c in same.columns))
        built[id(n)] = new
        signature[id(new)] = sig
        return new

    return build(root)


@dataclass(frozen=True, eq=False)
class ViewStrategy:
    """How a view is maintained: by its dataflow on the streaming pipelines, or, for the shapes
    that have none here, recomputed by the epoch driver (`reason` says why)."""

    dataflow: Dataflow | None
    reason: str | None = None

    @property
    def label(self) -> str:
        return "incremental" if self.dataflow is not None else "recompute"

    def explain(self) -> list[str]:
        if self.dataflow is None:
            return [f"strategy: recompute on Spark each epoch ({self.reason})"]
        return [f"strategy: incremental, a Spark Structured Streaming pipeline with {self.dataflow.depth()} "
                "stateful layer(s); state in Spark's state store",
                *("  " + line for line in self.dataflow.explain())]


def view_strategy(resolved_sql: str, inputs: tuple[RelationInput, ...], catalog: CatalogSnapshot,
                  names: tuple[str, ...], *, eowc: int | None = None) -> ViewStrategy:
    """The one place a view's strategy is decided (pure: no Spark, no disk). `eowc`: the
    watermarked relation of an EMIT ON WINDOW CLOSE view."""
    from streamdb import types as T
    from streamdb.planner.query import _typed_copy
    from streamdb.sql.parser import parse_one

    for i in inputs:
        rel = catalog.by_id(i.relation_id) if i.relation_id is not None else None
        if rel is None:
            return ViewStrategy(None, f"it reads {i.system_key or i.registered_name}")
        if any(c.type is T.INTERVAL for c in rel.columns):
            return ViewStrategy(None, f"{rel.name} has an INTERVAL column, which Spark cannot read")
    try:
        typed = _typed_copy(inline_ctes(parse_one(resolved_sql)), inputs)
    except Unsupported as e:
        return ViewStrategy(None, str(e))
    except Exception as e:  # noqa: BLE001 - a shape sqlglot cannot qualify and type
        return ViewStrategy(None, f"the query could not be typed ({type(e).__name__})")
    try:
        dataflow = plan_dataflow(typed, inputs, catalog, names)
        if any(_node_reads_clock(n) for n in dataflow.nodes()):
            return ViewStrategy(None, CLOCK_REASON)
        if eowc is not None:
            if dataflow.has_clock():
                raise Unsupported("EMIT ON WINDOW CLOSE over a temporal filter")
            dataflow = with_watermark(dataflow, catalog, eowc)
        return ViewStrategy(dataflow)
    except Unsupported as e:
        return ViewStrategy(None, str(e))


WATERMARK = "__wm"  # EMIT ON WINDOW CLOSE: the extra last column carrying the input's event time


def with_window_expiry(dataflow: Dataflow, view_id: int, view_columns: tuple[str, ...]) -> Dataflow:
    """An EMIT ON WINDOW CLOSE dataflow (`with_watermark`) whose top Reduce drops a group's state
    once the view has emitted the group's row: the view's own log feeds the Reduce (side 1), each
    row mapped back to its group key. Only when every group key is an output column reached
    through projections alone (no HAVING: a group filtered out is never emitted, so it would never
    be dropped); otherwise the dataflow is returned as it is and closed windows keep their state."""
    root = dataflow.root
    if not isinstance(root, UnionAll) or len(root.branches) != 2 or not isinstance(root.branches[0], Map):
        return dataflow
    rows = root.branches[0]
    if len(view_columns) != len(rows.exprs) - 1:
        return dataflow
    # column name at the current node -> position among the view's columns
    origin = {e.name: i for i, e in enumerate(rows.exprs[:-1]) if isinstance(e, exp.Column)}
    maps: list[Map] = [rows]
    node = rows.input
    while isinstance(node, Map):
        origin = {e.name: origin[c] for c, e in zip(node.columns, node.exprs, strict=True)
                  if c in origin and isinstance(e, exp.Column)}
        maps.append(node)
        node = node.input
    if not isinstance(node, Reduce) or node.global_ or not node.group or node.expire is not None:
        return dataflow
    positions = [origin.get(c) for c in node.columns[:len(node.group)]]
    if any(pos is None for pos in positions):
        return dataflow
    scan_columns = tuple(f"__x{i}" for i in range(len(view_columns)))
    scan = Scan(scan_columns, view_id, view_columns, True)
    new: Node = replace(node, expire=scan, expire_keys=tuple(_col(scan_columns[pos]) for pos in positions
                                                             if pos is not None))
    for m in reversed(maps):
        new = replace(m, input=new)
    return Dataflow(replace(root, branches=(new, root.branches[1])), dataflow.names)


def with_watermark(dataflow: Dataflow, catalog: CatalogSnapshot, relation_id: int) -> Dataflow:
    """An EMIT ON WINDOW CLOSE view's dataflow: its rows, plus one more row whose last column is
    the largest event time of its watermarked input (a global max over that input, kept in the
    same pipeline, so each batch's watermark reflects exactly the input its rows reflect). The
    server holds the rows of windows still open and emits each once the watermark passes its end
    (runtime/pipelines.py)."""
    from streamdb.planner.aggregate import append_only as relation_append_only

    rel = catalog.by_id(relation_id)
    column = next((c for c in rel.columns if c.name == rel.timestamp_column), None) if rel is not None else None
    if rel is None or column is None:
        raise Unsupported("EMIT ON WINDOW CLOSE without a watermarked input")
    if isinstance(dataflow.root, Recompute):
        raise Unsupported("EMIT ON WINDOW CLOSE over a query recomputed per partition")
    scan = Scan(("__wm_ts",), rel.id, (column.name,), relation_append_only(rel))
    top = Reduce(("__wm_max",), scan, (), (AggCall("max", _col("__wm_ts")),), global_=True)
    width = len(dataflow.root.columns)
    outs = tuple(f"__wm_o{i}" for i in range(width + 1))
    rows = Map(outs, dataflow.root, (*(_col(c) for c in dataflow.root.columns), exp.Null()))
    mark = Map(outs, top, (*(exp.Null() for _ in range(width)), _col("__wm_max")))
    return Dataflow(UnionAll(outs, (rows, mark)), (*dataflow.names, WATERMARK))
