"""Python user-defined functions: their catalog form, their compiled callables, and the registry
the embedded engine and Spark register them from.

A function is a catalog object of kind "function" (`CREATE FUNCTION f(a int) RETURNS int
LANGUAGE python AS $$ def f(a): ... $$`, RisingWave's convention: the body defines a Python
function of the SQL function's name). The planner rewrites each call `f(x)` into a call of
`sdb_udf_<id>(CAST(x AS int))`, a name of our own per object (a replaced function gets a new id,
so cached plans and registrations never mix two bodies), and defines it here. The engines
register what is defined: DuckDB per connection (embedded.py), Spark per session
(runtime/spark/udfs.py), where the callable is pickled by value and runs on the executors.

Nothing here imports an engine: the planner may use this module and stay pure.
"""

from __future__ import annotations

import builtins
import inspect
import re
import textwrap
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamdb import types as T
from streamdb.errors import ExternalRoutineException, FeatureNotSupported, InvalidFunctionDefinition

if TYPE_CHECKING:
    from streamdb.catalog import RelationDef

PREFIX = "sdb_udf_"
_CALLED = re.compile(PREFIX + r"(\d+)", re.IGNORECASE)  # generators may upper-case it
# A UDF's failure crosses DuckDB and Spark (a Python worker, the JVM) as text: this marks the
# message that follows as the user's Python exception, so each side can turn it into 38000.
ERROR_MARK = "streamdb-udf-error:"

# Types a Python function takes and returns, with the Python values they arrive as.
SUPPORTED_TYPES = (T.BOOLEAN, T.SMALLINT, T.INTEGER, T.BIGINT, T.REAL, T.DOUBLE, T.TEXT, T.VARCHAR,
                   T.DATE, T.TIMESTAMP, T.TIMESTAMPTZ, T.BYTEA)


class UdfFailure(Exception):
    """What a UDF raises inside an engine: its message carries ERROR_MARK and the Python error."""


def supported_type(t: T.SqlType, what: str) -> T.SqlType:
    if isinstance(t, T.ArraySqlType) or t not in SUPPORTED_TYPES:
        raise FeatureNotSupported(
            f"a Python function's {what} cannot be of type {t.spelled()}",
            hint="Supported: " + ", ".join(s.name for s in SUPPORTED_TYPES) + ".")
    return T.VARCHAR if t == T.VARCHAR else t  # varchar(n) is text to the function


@dataclass(frozen=True)
class FunctionDef:
    id: int
    name: str
    arg_names: tuple[str, ...]
    arg_types: tuple[T.SqlType, ...]
    returns: T.SqlType
    body: str
    strict: bool = False  # RETURNS NULL ON NULL INPUT: not called when an argument is NULL
    aggregate: bool = False  # CREATE AGGREGATE: create_state / accumulate / finish over a group's rows

    @property
    def registered_name(self) -> str:
        return f"{PREFIX}{self.id}"

    def signature(self) -> str:
        return f"{self.name}({', '.join(t.spelled() for t in self.arg_types)})"

    @staticmethod
    def from_object(obj: RelationDef) -> FunctionDef:
        extra = dict(obj.extra)
        returns = T.type_from_name(str(extra["returns"]))
        assert returns is not None
        return FunctionDef(obj.id, obj.name, tuple(c.name for c in obj.columns), tuple(c.type for c in obj.columns),
                           returns, str(extra["body"]), bool(extra.get("strict", False)),
                           bool(extra.get("aggregate", False)))


class PythonFunction:
    """A UDF's callable. Picklable (Spark ships it to its Python workers): it carries the source
    and compiles it on first use in each process."""

    def __init__(self, name: str, source: str, arity: int, strict: bool) -> None:
        self.name = name
        self.source = source
        self.arity = arity
        self.strict = strict
        self._fn: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "arity": self.arity, "strict": self.strict}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._fn = None

    def _run_body(self, what: str) -> dict[str, Any]:
        """The names the body defines; InvalidFunctionDefinition when it does not run."""
        namespace: dict[str, Any] = {"__builtins__": builtins, "__name__": f"streamdb_udf_{self.name}"}
        try:
            code = compile(_dedented(self.source), f"<{what} {self.name}>", "exec")
        except SyntaxError as e:
            raise InvalidFunctionDefinition(f"syntax error in the body of {what} {self.name}: {e.msg} "
                                            f"(line {e.lineno})") from None
        try:
            exec(code, namespace)  # noqa: S102 - the function's own code; only superusers create one
        except Exception as e:  # noqa: BLE001 - the body's top level failed: the definition is invalid
            raise InvalidFunctionDefinition(f"the body of {what} {self.name} failed: {type(e).__name__}: {e}") \
                from None
        return namespace

    def compile(self) -> Any:
        """The user's function; InvalidFunctionDefinition when the body does not define it."""
        if self._fn is not None:
            return self._fn
        fn = self._run_body("function").get(self.name)
        if not callable(fn):
            raise InvalidFunctionDefinition(
                f"the body of function {self.name} does not define a Python function named {self.name}",
                hint=f"Write the body as: def {self.name}(...): ...")
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            params = None
        if params is not None:
            positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            required = [p for p in positional if p.default is p.empty]
            varargs = any(p.kind == p.VAR_POSITIONAL for p in params)
            if len(required) > self.arity or (len(positional) < self.arity and not varargs):
                raise InvalidFunctionDefinition(
                    f"Python function {self.name} takes {len(positional)} argument(s), the SQL function "
                    f"declares {self.arity}")
        self._fn = fn
        return fn

    def __call__(self, *args: Any) -> Any:
        if self.strict and any(a is None for a in args):
            return None
        fn = self.compile()
        try:
            return fn(*args)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - the user's error (exit() too), reported as 38000
            raise UdfFailure(f"{ERROR_MARK} {self.name}: {type(e).__name__}: {e}") from None

    def with_error(self, *args: Any) -> tuple[Any, str | None]:
        """(value, None), or (None, the error's message): for Spark plans that carry a row's error
        as data instead of failing the whole query."""
        try:
            return self(*args), None
        except UdfFailure as e:
            return None, str(e).removeprefix(ERROR_MARK).strip()


def _dedented(source: str) -> str:
    """`$$ def f(a): ... $$` on one line, or an indented block: as Python wants it."""
    return textwrap.dedent(source.strip("\n")).strip() + "\n"


class PythonAggregate(PythonFunction):
    """An aggregate's callable: called once per group with the group's rows (a list of their
    arguments, as dicts or tuples), it folds them with the body's `create_state()` and
    `accumulate(state, *args)` and returns `finish(state)` (the state itself without `finish`).
    A `retract(state, *args)` is accepted and not needed: a view recomputes a changed group."""

    def compile(self) -> Any:
        if self._fn is not None:
            return self._fn
        namespace = self._run_body("aggregate")
        missing = [n for n in ("create_state", "accumulate") if not callable(namespace.get(n))]
        if missing:
            raise InvalidFunctionDefinition(
                f"the body of aggregate {self.name} does not define {' and '.join(missing)}",
                hint="Define create_state(), accumulate(state, ...) returning the new state, and finish(state).")
        create, accumulate = namespace["create_state"], namespace["accumulate"]
        finish = namespace.get("finish")
        arity = self.arity

        def fold(rows: Any) -> Any:
            state = create()
            for row in rows or ():
                args = tuple(row.values()) if isinstance(row, dict) else tuple(row)
                state = accumulate(state, *args[:arity])
            return finish(state) if callable(finish) else state

        self._fn = fold
        return fold


def callable_for(f: FunctionDef) -> PythonFunction:
    if f.aggregate:
        return PythonAggregate(f.name, f.body, len(f.arg_types), strict=False)
    return PythonFunction(f.name, f.body, len(f.arg_types), f.strict)


def call_arity(f: FunctionDef) -> int:
    """Arguments of the engines' function: an aggregate's is one list of the group's rows."""
    return 1 if f.aggregate else len(f.arg_types)


def rows_field(i: int) -> str:
    """The name of an aggregate's i-th argument in the struct each of its rows is."""
    return f"a{i}"


def positional(fn: Any, arity: int) -> Any:
    """`fn(*args)` as a function of exactly `arity` named parameters: DuckDB reads a Python
    function's signature to count its arguments."""
    params = ", ".join(f"a{i}" for i in range(arity))
    namespace: dict[str, Any] = {"fn": fn}
    exec(f"def call({params}):\n    return fn({params})\n", namespace)  # noqa: S102 - our own text
    return namespace["call"]


def error_message(text: str) -> str | None:
    """The user's error in an engine's message (after ERROR_MARK, to the end of its line)."""
    at = text.find(ERROR_MARK)
    if at < 0:
        return None
    return text[at + len(ERROR_MARK):].split("\n", 1)[0].strip()


def failure(text: str) -> ExternalRoutineException | None:
    message = error_message(text)
    return None if message is None else ExternalRoutineException(message)


# ---- the registry: what this process's plans call --------------------------------------------

_lock = threading.Lock()
_defined: dict[str, FunctionDef] = {}
_generation = 0


def define(f: FunctionDef) -> None:
    """Make `f` known to the engines of this process (idempotent; cheap)."""
    global _generation
    if _defined.get(f.registered_name) == f:
        return
    with _lock:
        _defined[f.registered_name] = f
        _generation += 1


def generation() -> int:
    return _generation


def defined() -> list[FunctionDef]:
    with _lock:
        return list(_defined.values())


def used_in(sql: str) -> list[FunctionDef]:
    """The defined functions whose names appear in an engine's SQL text."""
    if PREFIX not in sql.lower():
        return []
    names = {f"{PREFIX}{n}" for n in _CALLED.findall(sql)}
    return [f for f in defined() if f.registered_name in names]
