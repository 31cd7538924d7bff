"""Point lookups: `SELECT cols FROM rel WHERE key = value [AND key2 = value2]`.

The most common read of a serving store, and the one where the embedded engine's
per-query setup (register the table, plan, run, convert) costs a thousand times the
lookup itself. The planner recognises the shape; the runtime answers it from a hash
index over the relation's cached rows, with no engine at all (docs/serving.md).

Only exact shapes qualify: one table or materialized view, plain columns (or integer
constants, as in the existence check `SELECT 1 ... WHERE key = $1`) out, and a
conjunction of `column = $n | literal` over integer or text columns, where equality
means the same in Python as in Postgres. Anything else takes the general path.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlglot import exp

from streamdb import types as T
from streamdb.planner.context import PlanContext
from streamdb.planner.names import normalize
from streamdb.planner.plans import PointLookup, RelationInput

_TEXT_TYPES = (T.TEXT, T.VARCHAR)


# The parts of a SELECT that make it more than a lookup (or a whole count).
_NOT_A_LOOKUP = ("joins", "group", "having", "order", "limit", "offset", "distinct", "with",
                 "windows", "laterals", "qualify", "into", "locks", "sample", "kind")


def lookup_shaped(query: object) -> bool:
    """Whether a statement has a lookup's outline (one table, a WHERE, nothing else): the cheap
    test that spares planning statements that cannot be lookups."""
    if not isinstance(query, exp.Select) or query.args.get("where") is None:
        return False
    for arg in _NOT_A_LOOKUP:
        if query.args.get(arg):
            return False
    frm = query.args.get("from_") or query.args.get("from")
    return frm is not None and isinstance(frm.this, exp.Table)


def point_lookup(query: exp.Expression, inputs: tuple[RelationInput, ...],
                 param_types: tuple[T.SqlType, ...], ctx: PlanContext) -> PointLookup | None:
    """The lookup a resolved query amounts to, or None when it is anything more."""
    if not lookup_shaped(query):
        return None
    # Streams are read as their whole log, rebuilt per read: an index would not outlive it.
    read = _stored_relation(query, inputs, ctx, ("table", "materialized_view"))
    if read is None:
        return None
    rel_id, inp, table = read
    qualifiers = {inp.registered_name}
    alias = table.args.get("alias")
    if alias is not None and alias.this is not None:
        qualifiers.add(normalize(alias.this))
    types = dict(inp.columns)

    def column(node: exp.Expr) -> str | None:
        if not isinstance(node, exp.Column) or not isinstance(node.this, exp.Identifier):
            return None
        if node.table and normalize(node.args["table"]) not in qualifiers:
            return None
        name = normalize(node.this)
        return name if name in types else None

    outputs: list[str | int] = []
    for e in query.expressions:
        node = e.this if isinstance(e, exp.Alias) else e
        constant = _integer_constant(node)
        if constant is not None:
            outputs.append(constant)
            continue
        name = column(node)
        if name is None:
            return None
        outputs.append(name)

    keys: dict[str, tuple[int, int | str | None]] = {}
    for term in conjuncts(query.args["where"].this):
        if not isinstance(term, exp.EQ):
            return None
        name, value_side = column(term.left), term.right
        if name is None:
            name, value_side = column(term.right), term.left
        if name is None:
            return None
        value = _key_value(value_side, types[name], param_types)
        if value is None or name in keys:
            return None
        keys[name] = value
    names = key_order(keys, tuple(types))
    return PointLookup(relation_id=rel_id, outputs=tuple(outputs),
                       key_columns=tuple(names), key_params=tuple(keys[n][0] for n in names),
                       key_literals=tuple(keys[n][1] for n in names))


def key_order(columns: Iterable[str], relation_columns: tuple[str, ...]) -> tuple[str, ...]:
    """Key columns in the relation's column order, each once, whatever the WHERE's order: lookups
    on the same columns share one index, a declared one (CREATE INDEX, runtime/indexes.py) among them."""
    order = {name: i for i, name in enumerate(relation_columns)}
    return tuple(sorted(set(columns), key=lambda c: order.get(c, len(order))))


def counted_relation(query: exp.Expression, inputs: tuple[RelationInput, ...], ctx: PlanContext) -> int | None:
    """`SELECT count(*) FROM rel` over a whole table, stream or materialized view (nothing else:
    no WHERE, grouping, FILTER, window or DISTINCT): the relation's id, else None. The reader
    keeps such counts from the log's weights (what SHOW QUERIES shows), so that a count builds
    none of the rows: a view's 9.2M rows took GiBs of the server to be counted."""
    if not isinstance(query, exp.Select) or len(query.expressions) != 1:
        return None
    for arg in ("where", *_NOT_A_LOOKUP):
        if query.args.get(arg):
            return None
    node = query.expressions[0]
    node = node.this if isinstance(node, exp.Alias) else node
    if not isinstance(node, exp.Count) or not isinstance(node.this, exp.Star):
        return None
    read = _stored_relation(query, inputs, ctx, ("table", "stream", "materialized_view"))
    return read[0] if read is not None else None


def _stored_relation(query: exp.Expression, inputs: tuple[RelationInput, ...], ctx: PlanContext,
                     kinds: tuple[str, ...]) -> tuple[int, RelationInput, exp.Table] | None:
    """The one stored relation of one of `kinds` (not schemaless) that `query` reads, named in
    its FROM: its id, input and table node; None for anything else (a subquery, a system table)."""
    frm = query.args.get("from_") or query.args.get("from")
    if len(inputs) != 1 or frm is None or not isinstance(frm.this, exp.Table):
        return None
    inp = inputs[0]
    rel_id = inp.relation_id
    if rel_id is None or inp.mode != "state" or normalize(frm.this.this) != inp.registered_name:
        return None
    rel = ctx.catalog.by_id(rel_id)
    if rel is None or rel.kind not in kinds or rel.schemaless:
        return None
    return rel_id, inp, frm.this


def _integer_constant(node: exp.Expr) -> int | None:
    """An output that is an integer literal of Postgres's integer type (`SELECT 1 FROM ...`)."""
    if isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
        value = int(node.this)
        return value if value <= 2**31 - 1 else None
    return None


def conjuncts(condition: exp.Expr) -> list[exp.Expr]:
    """The terms of a condition's top-level ANDs (parentheses looked through)."""
    terms: list[exp.Expr] = []
    pending = [condition]
    while pending:
        node = pending.pop()
        if isinstance(node, exp.Paren):
            pending.append(node.this)
        elif isinstance(node, exp.And):
            pending.extend((node.left, node.right))
        else:
            terms.append(node)
    return terms


def _key_value(node: exp.Expr, column_type: T.SqlType,
               param_types: tuple[T.SqlType, ...]) -> tuple[int, int | str | None] | None:
    """(n, None) for parameter $n, (0, value) for a literal of the column's kind; None otherwise."""
    integral = T.is_integer(column_type)
    if not integral and column_type not in _TEXT_TYPES:
        return None
    if isinstance(node, exp.Parameter) and isinstance(node.this, exp.Literal):
        n = int(node.this.this)
        if not 1 <= n <= len(param_types):
            return None
        declared = param_types[n - 1]
        same_kind = T.is_integer(declared) if integral else declared in _TEXT_TYPES
        return (n, None) if same_kind else None
    neg = isinstance(node, exp.Neg)
    lit = node.this if neg else node
    if not isinstance(lit, exp.Literal):
        return None
    if integral and not lit.is_string and lit.this.isdigit():
        return (0, -int(lit.this) if neg else int(lit.this))
    if not integral and lit.is_string and not neg:
        return (0, lit.this)
    return None
