"""CREATE FUNCTION / AGGREGATE ... LANGUAGE python | sql, DROP FUNCTION, and the calls of such
functions in queries.

A call `f(x)` of a Python function is rewritten into `sdb_udf_<id>(CAST(x AS <declared type>))`
(see streamdb/udf.py): DuckDB and Spark both run it under that name, and the arguments have the
types the Python code was promised. A SQL function's call is replaced by its body. Either way the
query's plan records which functions it calls (a view depends on them: DROP FUNCTION refuses
while one does).
"""

from __future__ import annotations

import time
from typing import Final

import sqlglot
from sqlglot import exp

from streamdb import types as T
from streamdb import udf
from streamdb.catalog import ColumnDef, RelationDef
from streamdb.errors import (
    DuplicateFunction,
    FeatureNotSupported,
    InsufficientPrivilege,
    InvalidFunctionDefinition,
    StreamDBError,
    UndefinedColumn,
    UndefinedFunction,
)
from streamdb.planner.columns import column_type
from streamdb.planner.context import PlanContext
from streamdb.planner.names import normalize, position_of
from streamdb.planner.plans import CreateObjectPlan, DropObjectPlan

KIND: Final = "function"
SQL_NAME = "sql_name"
MAX_INLINING_DEPTH = 32  # SQL functions calling SQL functions


def plan_create(stmt: exp.Create, ctx: PlanContext, sql: str) -> CreateObjectPlan:
    target = stmt.this
    if not isinstance(target, exp.UserDefinedFunction):
        raise FeatureNotSupported("CREATE FUNCTION needs a name and an argument list: f(a integer, ...)")
    props = {type(p): p for p in (stmt.args.get("properties") or exp.Properties(expressions=[])).expressions}
    language = props.get(exp.LanguageProperty)
    lang = language.this.name.lower() if language is not None else ""
    if lang == "sql":
        return _plan_create_sql(stmt, target, props, sql)
    if lang not in ("python", "plpython3u"):
        raise FeatureNotSupported(
            f"functions in language {lang} are not supported" if lang != "" else
            "CREATE FUNCTION needs LANGUAGE python or LANGUAGE sql",
            hint="CREATE FUNCTION f(a integer) RETURNS integer LANGUAGE python AS $$ def f(a): return a + 1 $$")
    role = ctx.catalog.role(ctx.session.user)
    if role is None or not role.superuser:
        # As Postgres's untrusted languages: the code runs with the server's and the executors' rights.
        raise InsufficientPrivilege("permission denied for language python",
                                    hint="Only superusers may create Python functions: their code runs "
                                         "inside the server and on the Spark executors.")
    name, declared = _name_and_result(stmt, target, props)
    ret_type = udf.supported_type(declared, "result")
    args = [ColumnDef(a.name, udf.supported_type(a.type, f"argument {i + 1}"))
            for i, a in enumerate(_arguments(target, stmt))]
    body = stmt.args.get("expression")
    if not isinstance(body, (exp.Heredoc, exp.Literal)):
        raise FeatureNotSupported("the function's body is Python code: AS $$ def f(...): ... $$")
    source = body.this if isinstance(body, exp.Heredoc) else body.name
    strict = exp.StrictProperty in props
    aggregate = str(stmt.args.get("kind")).upper() == "AGGREGATE"
    if aggregate and not args:
        raise FeatureNotSupported("an aggregate takes at least one argument")
    checked = udf.FunctionDef(0, name, tuple(a.name for a in args), tuple(a.type for a in args), ret_type,
                              str(source), strict, aggregate)
    udf.callable_for(checked).compile()  # raises 42P13 now, not at the first call
    obj = RelationDef(id=0, name=name, kind=KIND, columns=tuple(args), create_sql=sql.strip(), created_at=time.time(),
                      extra=(("returns", ret_type.spelled()), ("language", "python"), ("body", str(source)),
                             ("strict", strict), ("aggregate", aggregate)))
    return CreateObjectPlan(obj, if_not_exists=False, or_replace=bool(stmt.args.get("replace")))


def _name_and_result(stmt: exp.Create, target: exp.UserDefinedFunction,
                     props: dict[type, exp.Expression]) -> tuple[str, T.SqlType]:
    """The function's name (not a built-in's) and its declared result type (one value)."""
    name = normalize(target.this.this if isinstance(target.this, exp.Table) else target.this)
    _refuse_builtin_name(name)
    returns = props.get(exp.ReturnsProperty)
    if returns is None or not isinstance(returns.this, exp.DataType) or returns.args.get("is_table"):
        raise FeatureNotSupported("a function here returns one value: RETURNS <type>")
    return name, column_type(returns.this, stmt)


def _arguments(target: exp.UserDefinedFunction, stmt: exp.Create) -> list[ColumnDef]:
    args: list[ColumnDef] = []
    for i, a in enumerate(target.expressions):
        if isinstance(a, exp.ColumnDef) and isinstance(a.args.get("kind"), exp.DataType):
            arg_name, kind = normalize(a.this), a.args["kind"]
        elif isinstance(a, exp.DataType):
            arg_name, kind = f"${i + 1}", a
        else:  # `f(int)`: sqlglot reads a lone type name as the argument's name
            kind = exp.DataType.build(a.sql(dialect="postgres"), dialect="postgres")
            arg_name = f"${i + 1}"
        args.append(ColumnDef(arg_name, column_type(kind, stmt)))
    return args


def _plan_create_sql(stmt: exp.Create, target: exp.UserDefinedFunction, props: dict[type, exp.Expression],
                     sql: str) -> CreateObjectPlan:
    """LANGUAGE sql: one expression over the arguments (`AS $$ SELECT expr $$`), inlined into every
    query that calls it, so it runs wherever the query does and needs no privilege (trusted)."""
    from streamdb.sql.parser import parse_one

    if str(stmt.args.get("kind")).upper() == "AGGREGATE":
        raise FeatureNotSupported("aggregates are written in Python: CREATE AGGREGATE ... LANGUAGE python")
    name, ret_type = _name_and_result(stmt, target, props)
    args = _arguments(target, stmt)
    body = stmt.args.get("expression")
    source = body.this if isinstance(body, exp.Heredoc) else body.name if isinstance(body, exp.Literal) else ""
    query = parse_one(str(source)) if str(source).strip() else None
    if not isinstance(query, exp.Select) or len(query.expressions) != 1 or any(
            query.args.get(k) for k in ("from_", "from", "where", "group", "having", "order", "limit", "joins")):
        raise InvalidFunctionDefinition(
            f"the body of SQL function {name} must be one expression: AS $$ SELECT <expression> $$",
            hint="Queries over relations in a function body are not supported.")
    names = {a.name for a in args}
    for col in query.find_all(exp.Column):
        if col.table or normalize(col.this) not in names:
            raise UndefinedColumn(f'column "{col.sql(dialect="postgres")}" does not exist',
                                  hint=f"The body of {name} may use its arguments: {', '.join(sorted(names)) or 'none'}.")
    for param in query.find_all(exp.Parameter):
        n = int(param.this.this) if isinstance(param.this, exp.Literal) else 0
        if not 1 <= n <= len(args):
            raise UndefinedColumn(f"there is no parameter ${n}")
    obj = RelationDef(id=0, name=name, kind=KIND, columns=tuple(args), create_sql=sql.strip(), created_at=time.time(),
                      extra=(("returns", ret_type.spelled()), ("language", "sql"),
                             ("body", query.expressions[0].unalias().sql(dialect="streamdb"))))
    return CreateObjectPlan(obj, if_not_exists=False, or_replace=bool(stmt.args.get("replace")))


def _inlined(obj: RelationDef, call: exp.Anonymous) -> exp.Expression:
    """A SQL function's call: its body with each argument in place, cast to the declared types."""
    from streamdb.sql.parser import parse_one

    extra = dict(obj.extra)
    body = parse_one(f"SELECT {extra['body']}").expressions[0]
    values = {c.name: exp.Paren(this=exp.Cast(this=a.copy(), to=exp.DataType.build(c.type.spelled(), dialect="postgres")))
              for c, a in zip(obj.columns, call.expressions, strict=True)}
    by_position = list(values.values())

    def put(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and not node.table and normalize(node.this) in values:
            return values[normalize(node.this)].copy()
        if isinstance(node, exp.Parameter) and isinstance(node.this, exp.Literal):
            return by_position[int(node.this.this) - 1].copy()
        return node

    inlined = exp.Cast(this=exp.Paren(this=body.transform(put)),
                       to=exp.DataType.build(str(extra["returns"]), dialect="postgres"))
    inlined.meta[SQL_NAME] = obj.name
    return inlined


def _refuse_builtin_name(name: str) -> None:
    try:
        call = sqlglot.parse_one(f"{name}(1)", dialect="postgres")
    except sqlglot.errors.ParseError:
        call = None
    if not isinstance(call, exp.Anonymous) or name in ("now", "random", "clock_timestamp", "tumble", "hop",
                                                        "session", "every", "generate_series", "unnest"):
        raise DuplicateFunction(f'function "{name}" is a built-in function', hint="Give the function another name.")
    if name.startswith("sdb_"):  # the prefix of the server's own functions (udf.PREFIX, duckdb_functions.py)
        raise DuplicateFunction(f'function names starting with "sdb_" are reserved: "{name}"',
                                hint="Give the function another name.")


def plan_drop(stmt: exp.Drop) -> DropObjectPlan:
    names = tuple(normalize(t.this) for t in stmt.args.get("tables") or [] if isinstance(t, exp.Table))
    return DropObjectPlan(kind=KIND, names=names, if_exists=bool(stmt.args.get("exists")),
                          cascade=bool(stmt.args.get("cascade")),
                          aggregate=str(stmt.args.get("kind")).upper() == "AGGREGATE")


def resolve_calls(query: exp.Expression, ctx: PlanContext) -> tuple[int, ...]:
    """Rewrite the calls of catalog functions in `query` (in place); the functions' ids."""
    if not any(o.kind == KIND for o in ctx.catalog.objects.values()):  # every query is planned through here
        return ()
    used: dict[int, None] = {}
    for _ in range(MAX_INLINING_DEPTH):
        if not _resolve_once(query, ctx, used):
            return tuple(used)
    raise StreamDBError("stack depth limit exceeded", sqlstate="54001",
                        hint="A SQL function calls itself, directly or through others.")


def _resolve_once(query: exp.Expression, ctx: PlanContext, used: dict[int, None]) -> bool:
    """One pass over the calls; whether a SQL function was inlined (its body may call others)."""
    inlined = False
    for call in list(query.find_all(exp.Anonymous)):
        this = call.this
        name = normalize(this) if isinstance(this, exp.Identifier) else str(this).lower()
        obj = ctx.catalog.object(KIND, name)
        if obj is None:
            continue
        if dict(obj.extra).get("language") == "sql":
            if len(call.expressions) != len(obj.columns):
                raise UndefinedFunction(f"function {name} takes {len(obj.columns)} argument(s), not "
                                        f"{len(call.expressions)}", position=position_of(call))
            if isinstance(call.parent, (exp.Window, exp.Filter)):
                raise FeatureNotSupported(f"{name} is not an aggregate or window function", position=position_of(call))
            call.replace(_inlined(obj, call))
            used[obj.id] = None
            inlined = True
            continue
        f = udf.FunctionDef.from_object(obj)
        if len(call.expressions) != len(f.arg_types):
            raise UndefinedFunction(
                f"function {name} takes {len(f.arg_types)} argument(s), not {len(call.expressions)}",
                position=position_of(call), hint=f"It is declared as {f.signature()}.")
        if isinstance(call.parent, (exp.Window, exp.Filter)) or any(isinstance(a, exp.Distinct) for a in call.expressions):
            raise FeatureNotSupported(f"the Python aggregate {name} takes no OVER, FILTER or DISTINCT" if f.aggregate
                                      else f"{name} is not an aggregate or window function", position=position_of(call))
        args: list[exp.Expression] = [exp.Cast(this=a.copy(), to=exp.DataType.build(t.spelled(), dialect="postgres"))
                                      for a, t in zip(call.expressions, f.arg_types, strict=True)]
        if f.aggregate:
            # The group's rows as one list of structs, folded by the Python code (udf.PythonAggregate):
            # both engines have array_agg, neither runs a Python aggregate as one.
            fields = [exp.PropertyEQ(this=exp.to_identifier(udf.rows_field(i)), expression=a)
                      for i, a in enumerate(args)]
            args = [exp.ArrayAgg(this=exp.Struct(expressions=fields))]
        resolved = exp.Anonymous(this=f.registered_name, expressions=args)
        resolved.meta[SQL_NAME] = name  # the output column's name, as PostgreSQL gives it
        call.replace(resolved)
        udf.define(f)
        used[f.id] = None
    return inlined
