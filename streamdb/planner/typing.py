"""Result types of a query, found by running it over empty inputs in the embedded engine.

In memory only: no Spark, no disk, so Parse/Describe answer at once; and the types
are exactly those the embedded engine will produce.
"""

from __future__ import annotations

from decimal import Decimal
from functools import lru_cache

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from streamdb import types as T
from streamdb.errors import CannotCoerce, DatatypeMismatch, StreamDBError, UndefinedFunction
from streamdb.planner.context import PlanContext
from streamdb.planner.plans import RelationInput
from streamdb.runtime import embedded
from streamdb.runtime.api import Column


def empty_table(columns: tuple[tuple[str, T.SqlType], ...]) -> pa.Table:
    schema = pa.schema([pa.field(n, t.arrow()) for n, t in columns])
    return schema.empty_table()


def describe_query(duck_sql: str, inputs: tuple[RelationInput, ...], ctx: PlanContext) -> list[Column]:
    return list(_described(duck_sql, tuple((i.registered_name, i.columns) for i in inputs)))


# The engine's answer depends only on the SQL text and the inputs' names and column types, and
# it cost about half of planning a small ad hoc query (registering empty inputs, binding, running):
# a text read again (a dashboard's refresh, a poll, psql's up-arrow) is described once.
@lru_cache(maxsize=1024)
def _described(duck_sql: str, inputs: tuple[tuple[str, tuple[tuple[str, T.SqlType], ...]], ...],
               ) -> tuple[Column, ...]:
    tables = {name: empty_table(columns) for name, columns in inputs}
    result = embedded.run(f"SELECT * FROM ({duck_sql}) AS q LIMIT 0", tables)
    return tuple(Column(f.name, T.from_arrow(f.type)) for f in result.schema)


# Types the embedded engine reports as plain strings but Postgres keeps on a result column
# when it is a column reference or a cast: varchar(n) (typmod too), json, jsonb.
_KEPT_TYPES = (T.VARCHAR, T.JSON, T.JSONB)


def _has_kept_type(t: T.SqlType) -> bool:
    """A type whose result columns keep more than the engine reports: the above, numeric(p, s)."""
    return t in _KEPT_TYPES or t.precision_scale is not None


def _annotated(query: exp.Expression, inputs: tuple[RelationInput, ...]) -> exp.Expression | None:
    """A copy of the query with sqlglot's Postgres types on every node; None for a shape sqlglot
    cannot qualify (the caller then keeps what the engine says)."""
    schema: dict[str, object] = {i.registered_name: {n: t.spelled() for n, t in i.columns} for i in inputs}
    try:
        return annotate_types(qualify(query.copy(), schema=schema, dialect="postgres",
                                      validate_qualify_columns=False, quote_identifiers=False,
                                      expand_stars=False), schema=schema, dialect="postgres")
    except Exception:  # noqa: BLE001 - any failure here only means "no better types known"
        return None


def keep_declared_types(query: exp.Expression, inputs: tuple[RelationInput, ...],
                        columns: list[Column]) -> list[Column]:
    """Result columns with the type Postgres gives them where the engine's answer is coarser: an
    output that is a stored column (through subqueries too) or a cast to varchar(n), numeric(p, s),
    json or jsonb keeps that type (and typmod), and `->` keeps json/jsonb. Anything computed stays
    as the engine says, as in Postgres (upper(), || are text; sum() of a numeric(10,2) is numeric)."""
    if not isinstance(query, exp.Select) or len(query.expressions) != len(columns):
        return columns
    if not any(_has_kept_type(t) for i in inputs for _, t in i.columns) and query.find(exp.Cast) is None:
        return columns
    typed = _annotated(query, inputs)
    if not isinstance(typed, exp.Select) or len(typed.selects) != len(columns):
        return columns
    out = []
    for node, col in zip(typed.selects, columns, strict=True):
        kept = _kept_type(node.unalias()) if col.type is T.TEXT or col.type == T.NUMERIC else None
        if kept is not None and (kept == T.NUMERIC) != (col.type == T.NUMERIC):
            kept = None
        out.append(Column(col.name, kept, col.table_oid, col.column_number, kept.typmod) if kept else col)
    return out


def _kept_type(node: exp.Expr) -> T.SqlType | None:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.JSONExtract):
        inner = _kept_type(node.this)
        return inner if inner in (T.JSON, T.JSONB) else None
    if isinstance(node, exp.Coalesce) and isinstance(node.this, exp.JSONExtract):
        return _kept_type(node.this)  # #> '{a,1}': a key's or a position's step (query._json_path_operators)
    if not isinstance(node, (exp.Column, exp.Cast)) or node.type is None:
        return None
    try:
        t = T.type_from_name(node.type.sql(dialect="postgres"))
    except StreamDBError:  # a modifier Postgres would refuse: the engine's type stands
        return None
    return t if t is not None and _has_kept_type(t) else None


# Decimals Postgres gives avg() of integers and numerics between 1 and 9999 (NUMERIC_MIN_SIG_DIGITS):
# avg(int) of 1 and 2 is 1.5000000000000000. The embedded engine's avg() is a double.
_AVG_SCALE = 16
_INTEGER_TYPE_NAMES = ("SMALLINT", "INT", "BIGINT", "TINYINT")
_AVG_TEMPLATE = (
    "CAST((2 * (CAST(sum(__x) * {unit} AS HUGEINT) * {shift}) + sign(CAST(sum(__x) * {unit} AS HUGEINT)) "
    "* count(__x)) // NULLIF(2 * count(__x), 0) AS DECIMAL(38, 0)) * CAST('{ulp}' AS DECIMAL(38, {scale}))")


def exact_numeric_avg(query: exp.Expression, inputs: tuple[RelationInput, ...]) -> exp.Expression:
    """A copy of `query` for the embedded engine in which avg() of integers and numerics (up to
    16 decimals) is an exact numeric with 16 decimals, rounded half away from zero as Postgres
    does: the sum in integer units over the count, in 128-bit integers. Window and FILTER
    averages, and DISTINCT ones, keep the engine's double."""
    copy = query.copy()
    avgs = [a for a in copy.find_all(exp.Avg)
            if not isinstance(a.parent, (exp.Window, exp.Filter)) and not isinstance(a.this, exp.Distinct)]
    if not avgs:
        return copy
    for i, a in enumerate(avgs):
        a.meta["avg_id"] = i
    typed = _annotated(copy, inputs)
    if typed is None:  # a shape sqlglot cannot qualify keeps the engine's avg
        return copy
    scales: dict[int, int] = {}
    for a in typed.find_all(exp.Avg):
        scale = _exact_scale(a.this.type if a.this is not None else None)
        if "avg_id" in a.meta and scale is not None:
            scales[a.meta["avg_id"]] = scale
    for i, a in enumerate(avgs):
        scale = scales.get(i)
        if scale is None:
            continue
        exact = duckdb_template(_AVG_TEMPLATE.format(
            unit=10**scale, shift=10 ** (_AVG_SCALE - scale), ulp=f"{Decimal(1).scaleb(-_AVG_SCALE):f}",
            scale=_AVG_SCALE), a.this)
        a.replace(exp.Paren(this=exact))
    return copy


def duckdb_template(sql: str, argument: exp.Expr) -> exp.Expr:
    """An expression of the embedded engine's SQL with a copy of `argument` wherever `__x` stands."""
    tree = sqlglot.parse_one(sql, read="duckdb")
    for placeholder in list(tree.find_all(exp.Column)):
        if placeholder.name == "__x":
            placeholder.replace(argument.copy())
    return tree


def spark_exact_avgs(typed: exp.Expression) -> exp.Expression:
    """`typed` (a typed copy, changed in place) with avg() of integers and numerics computed as
    exact_numeric_avg computes it for the embedded engine: sdb_exact_avg (ExactAvg.java) divides
    the exact decimal sum by the count and rounds half away from zero to 16 decimals. Spark's own
    avg is a double for integers and has 4 decimals more than a decimal argument. The same
    averages are left to the engine as there."""
    for a in list(typed.find_all(exp.Avg)):
        if isinstance(a.parent, (exp.Window, exp.Filter)) or isinstance(a.this, exp.Distinct):
            continue
        scale = _exact_scale(a.this.type if a.this is not None else None)
        if scale is None:
            continue
        exact_sum = exp.Sum(this=exp.Cast(this=a.this.copy(), to=exp.DataType.build(f"DECIMAL(38, {scale})")))
        a.replace(exp.Anonymous(this="sdb_exact_avg", expressions=[exact_sum, exp.Count(this=a.this.copy())]))
    return typed


def _exact_scale(t: exp.DataType | None) -> int | None:
    """Decimals of an exact argument type (0 for integers); None for other types."""
    if t is None:
        return None
    if t.this.name in _INTEGER_TYPE_NAMES:
        return 0
    if t.this != exp.DataType.Type.DECIMAL:
        return None
    params = t.expressions
    if len(params) == 2:
        scale = int(params[1].name)
    elif len(params) == 1:
        scale = 0
    else:
        scale = _UNCONSTRAINED_STORED_SCALE
    return scale if scale <= _AVG_SCALE else None


# Unconstrained numeric is stored with 10 decimals (streamdb/types.py).
_UNCONSTRAINED_STORED_SCALE = 10


# Condition shapes that are boolean whatever their operands: no type check needed.
_BOOLEAN_SHAPES = (exp.Predicate, exp.Connector, exp.Not, exp.Boolean, exp.Exists, exp.Null)
_PG_TYPE_NAMES = {"INT": "integer", "BIGINT": "bigint", "SMALLINT": "smallint", "TEXT": "text",
                  "VARCHAR": "character varying", "DOUBLE": "double precision", "FLOAT": "real",
                  "DECIMAL": "numeric", "TIMESTAMPTZ": "timestamp with time zone",
                  "TIMESTAMP": "timestamp without time zone", "TIME": "time without time zone",
                  "TIMETZ": "time with time zone"}
_NOT_BOOLEAN = (exp.DataType.INTEGER_TYPES | exp.DataType.REAL_TYPES | exp.DataType.TEXT_TYPES
                | exp.DataType.TEMPORAL_TYPES | {exp.DataType.Type.INTERVAL, exp.DataType.Type.JSON,
                                                 exp.DataType.Type.JSONB, exp.DataType.Type.UUID})


def _conditions(query: exp.Expression) -> list[tuple[str, exp.Expr]]:
    """(clause, condition) of every WHERE, HAVING and JOIN ... ON, and of the operands of their
    AND, OR and NOT, as PostgreSQL names them in its error."""
    out: list[tuple[str, exp.Expr]] = []
    for where in query.find_all(exp.Where):
        out.append(("WHERE", where.this))
    for having in query.find_all(exp.Having):
        out.append(("HAVING", having.this))
    for join in query.find_all(exp.Join):
        if (on := join.args.get("on")) is not None:
            out.append(("JOIN/ON", on))
    for case in query.find_all(exp.Case):
        if case.args.get("this") is None:  # CASE WHEN cond (not CASE x WHEN value)
            out.extend(("CASE/WHEN", when.this) for when in case.args.get("ifs") or [])
    pending = [(clause, cond.unnest()) for clause, cond in out]
    done: list[tuple[str, exp.Expr]] = []
    while pending:
        clause, cond = pending.pop()
        done.append((clause, cond))
        if isinstance(cond, exp.Connector):
            op = "AND" if isinstance(cond, exp.And) else "OR"
            pending.extend((op, side.unnest()) for side in (cond.left, cond.right))
        elif isinstance(cond, exp.Not):
            pending.append(("NOT", cond.this.unnest()))
    return done


_NUMBERS = exp.DataType.INTEGER_TYPES | exp.DataType.REAL_TYPES
_DOUBLES = {exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT}
_DATES_AND_TIMES = exp.DataType.TEMPORAL_TYPES | {exp.DataType.Type.INTERVAL}


def _pg_type_name(t: exp.DataType) -> str:
    spelled = t.sql(dialect="postgres")
    return _PG_TYPE_NAMES.get(spelled.upper().split("(")[0], spelled.lower())


def certain_type(node: exp.Expr, *, functions: bool = False) -> exp.DataType | None:
    """sqlglot's type of `node` where it is certain: a column, a cast, a number literal, and
    arithmetic of numbers; with `functions`, function calls too (their category is right, if not
    always their type: avg() is a double to sqlglot, numeric to PostgreSQL). None elsewhere:
    sqlglot types `date - date` as a date, where PostgreSQL has an integer."""
    node = node.unnest()
    if isinstance(node, exp.Literal) and node.is_number and not node.name.isdigit():
        return exp.DataType.build("DECIMAL")  # 2.5 and 1e3 are numeric to PostgreSQL (double to sqlglot)
    if isinstance(node, (exp.Column, exp.Cast)) or (isinstance(node, exp.Literal) and node.is_number):
        return node.type
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.Neg)):
        parts = [node.this] if isinstance(node, exp.Neg) else [node.this, node.expression]
        types = [certain_type(p, functions=functions) for p in parts]
        if not all(t is not None and t.this in _NUMBERS for t in types):
            return None
        # PostgreSQL: a double if either operand is one, else numeric if either is, else an integer.
        if not any(t is not None and t.this in _DOUBLES for t in types) \
                and any(t is not None and t.this is exp.DataType.Type.DECIMAL for t in types):
            return exp.DataType.build("DECIMAL")
        return node.type
    if functions and isinstance(node, exp.Func):
        return node.type
    return None


def refuse_casts_postgresql_lacks(query: exp.Expression, inputs: tuple[RelationInput, ...]) -> None:
    """PostgreSQL's 42846 for a cast it has none for (`1::date`, `now()::bigint`,
    `bytea::smallint`, `smallint::boolean`; see `_lacks_cast`): the embedded engine would not look
    at it where no row reaches it, and Spark refuses it with another SQLSTATE."""
    casts = [c for c in query.find_all(exp.Cast)
             if c.to.this in _DATES_AND_TIMES or c.to.this in _NUMBERS or c.to.this is _BOOL]
    if not casts:
        return
    typed = _annotated(query, inputs)
    if typed is None:
        return
    for cast in typed.find_all(exp.Cast):
        source, target = certain_type(cast.this, functions=True), cast.to
        if source is None:
            continue
        if _lacks_cast(source.this, target.this):
            raise CannotCoerce(f"cannot cast type {_pg_type_name(source)} to {_pg_type_name(target)}")


_BYTES = {exp.DataType.Type.VARBINARY, exp.DataType.Type.BINARY}
_INT = exp.DataType.Type.INT
_BOOL = exp.DataType.Type.BOOLEAN


def _lacks_cast(source: object, target: object) -> bool:
    """Pairs PostgreSQL has no cast for (among those the engines would make anyway)."""
    return ((source in _NUMBERS and target in _DATES_AND_TIMES) or (source in _DATES_AND_TIMES and target in _NUMBERS)
            or (source in _BYTES and (target in _NUMBERS or target in _DATES_AND_TIMES or target is _BOOL))
            or (source is _BOOL and target in _NUMBERS and target is not _INT)
            or (target is _BOOL and source in _NUMBERS and source is not _INT))


_T = exp.DataType.Type
# Type categories whose values PostgreSQL compares with one another (implicit casts inside one).
_COMPARABLE = [
    ("number", _NUMBERS),
    ("string", exp.DataType.TEXT_TYPES),
    ("boolean", {_T.BOOLEAN}),
    ("date", {_T.DATE, _T.TIMESTAMP, _T.TIMESTAMPTZ, _T.DATETIME}),
    ("time", {_T.TIME, _T.TIMETZ}),
    ("interval", {_T.INTERVAL}),
    ("uuid", {_T.UUID}),
]
_COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)


def _category(node: exp.Expression) -> str | None:
    """The comparison category of an operand whose type is certain: a column or a cast (sqlglot's
    types of other expressions are guesses). None otherwise: a string literal or NULL is
    PostgreSQL's `unknown`, which takes the other side's type."""
    if not isinstance(node, (exp.Column, exp.Cast)) or node.type is None:
        return None
    if node.type.this is _T.JSON:
        return "json"
    if node.type.this is _T.ARRAY:
        return "array"
    if node.type.this in (_T.VARBINARY, _T.BINARY):
        return "bytea"
    for name, types in _COMPARABLE:
        if node.type.this in types:
            return name
    return None


def refuse_comparisons_postgresql_lacks(query: exp.Expression, inputs: tuple[RelationInput, ...]) -> None:
    """PostgreSQL's 42883 for comparing values it has no operator for (`boolean = numeric`,
    `time = character varying`, any comparison of json): the embedded engine would cast one side,
    and Spark refuse the plan with another SQLSTATE."""
    if not any(True for _ in query.find_all(*_COMPARISONS)):
        return
    typed = _annotated(query, inputs)
    if typed is None:
        return
    for node in typed.find_all(*_COMPARISONS):
        left, right = node.this.unnest(), node.expression.unnest()
        a, b = _category(left), _category(right)
        if a is None or b is None or (a == b and a != "json"):
            continue
        op = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}[type(node)]
        assert left.type is not None and right.type is not None
        raise UndefinedFunction(
            f"operator does not exist: {_pg_type_name(left.type)} {op} {_pg_type_name(right.type)}",
            hint="No operator matches the given name and argument types. You might need to add explicit type casts.")


def refuse_non_boolean_conditions(query: exp.Expression, inputs: tuple[RelationInput, ...]) -> None:
    """PostgreSQL's 42804 for `WHERE smallint_column` and the like: DuckDB would take the number
    as a truth value and Spark refuse the view's plan, so one answer for both, up front."""
    if all(isinstance(cond, _BOOLEAN_SHAPES) for _, cond in _conditions(query)):
        return  # comparisons, IS, IN, ... and AND/OR/NOT of them (their operands are listed too)
    typed = _annotated(query, inputs)
    if typed is None:
        return
    for clause, cond in _conditions(typed):
        if isinstance(cond, _BOOLEAN_SHAPES) or cond.type is None or cond.type.this not in _NOT_BOOLEAN:
            continue
        spelled = cond.type.sql(dialect="postgres")
        name = _PG_TYPE_NAMES.get(spelled.upper(), spelled.lower())
        raise DatatypeMismatch(f"argument of {clause} must be type boolean, not type {name}")
