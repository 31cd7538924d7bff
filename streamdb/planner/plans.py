"""Plans: what a statement will do, as frozen plain data.

The planner builds them without touching Spark or disk; the coordinator in
streamdb/runtime hands each one to the runtime module for its kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from streamdb.catalog import RelationDef
from streamdb.runtime.api import Column
from streamdb.types import SqlType

if TYPE_CHECKING:
    from streamdb.planner.row_expr import RowExpr


@dataclass(frozen=True)
class Plan:
    """Base of every plan."""

    def explain(self) -> str:
        return type(self).__name__


# ---- relations read by queries -------------------------------------------------------


@dataclass(frozen=True)
class RelationInput:
    """One relation a query reads, registered under `registered_name` for the engine."""

    registered_name: str
    # A user relation (by id) or a system table (by key such as 'pg_catalog.pg_class').
    relation_id: int | None
    system_key: str | None
    # 'state': current contents (streams: every event; tables: current rows).
    # 'changes': the change log with op and rowtime columns (SELECT STREAM).
    mode: Literal["state", "changes"] = "state"
    columns: tuple[tuple[str, SqlType], ...] = ()


@dataclass(frozen=True)
class PointLookup:
    """A query that is a lookup by key (planner/lookup.py): answered from a hash index."""

    relation_id: int
    # Per output: a column of the relation, or (an int) that integer constant, as in the
    # existence check `SELECT 1 FROM t WHERE key = $1`.
    outputs: tuple[str | int, ...]
    key_columns: tuple[str, ...]
    # Per key column: the parameter it takes ($n), or 0 and the literal in key_literals.
    key_params: tuple[int, ...]
    key_literals: tuple[int | str | None, ...]


@dataclass(frozen=True)
class QueryPlan(Plan):
    """An ad hoc query over a consistent snapshot."""

    duckdb_sql: str
    inputs: tuple[RelationInput, ...]
    columns: tuple[Column, ...]
    # Write the Spark SQL and the resolved SQL (the properties below). An ad hoc query runs on the
    # embedded engine unless it reads more than the read threshold, and only views derive plans
    # from the resolved SQL; writing them (qualify, type, generate) was about half of planning a
    # small query, so they are written on first use, not at every planning.
    spark_source: Callable[[], str] = field(compare=False, repr=False)
    resolved_source: Callable[[], str] = field(compare=False, repr=False)
    param_types: tuple[SqlType, ...] = ()
    # Values for the $n placeholders of a prepared query executed again (embedded engine only).
    params: tuple[Any, ...] = ()
    # Set when the query is a lookup by key: the runtime answers it from an index.
    lookup: PointLookup | None = None
    # Set when the query is `SELECT count(*) FROM rel` (planner/lookup.py): the relation's id,
    # whose row count the reader keeps from its log, so that counting builds no rows.
    count_of: int | None = None
    # Plain views the query read, inlined (views over views included): things built on the
    # query depend on them as well as on `inputs` (planner/create_plain_view.py).
    views: tuple[int, ...] = ()
    # Python functions the query calls (planner/functions.py): views calling them depend on them.
    functions: tuple[int, ...] = ()

    @cached_property
    def spark_sql(self) -> str:
        return self.spark_source()

    @cached_property
    def resolved_sql(self) -> str:
        """The query with relations resolved to their registered names (Postgres SQL), for
        runtimes that derive further plans from it (the incremental form of a view)."""
        return self.resolved_source()

    def explain(self) -> str:
        lines = ["Query (snapshot read)"]
        for i in self.inputs:
            src = f"relation {i.relation_id}" if i.relation_id is not None else i.system_key
            lines.append(f"  input {i.registered_name}: {src} ({i.mode})")
        if self.lookup is not None:
            keys = ", ".join(self.lookup.key_columns)
            lines.append(f"  engine: index lookup on ({keys}) over the cached rows")
        else:
            lines.append("  engine: embedded (DuckDB), Spark above the read threshold (inputs under 1/4 its heap, "
                         "no view read)")
        lines.append(f"  embedded SQL: {self.duckdb_sql}")
        lines.append(f"  Spark SQL: {self.spark_sql}")
        return "\n".join(lines)


# ---- DDL ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CreateRelationPlan(Plan):
    """CREATE STREAM / CREATE TABLE. `relation.id` is assigned by the catalog."""

    relation: RelationDef
    if_not_exists: bool = False
    or_replace: bool = False
    # Created in the same commit: an external stream's dead-letter stream.
    companions: tuple[RelationDef, ...] = ()

    def explain(self) -> str:
        cols = ", ".join(f"{c.name} {c.type.name}" for c in self.relation.columns) or "schemaless JSON"
        return f"Create {self.relation.kind} {self.relation.name} ({cols})"


@dataclass(frozen=True)
class CreateObjectPlan(Plan):
    """CREATE ... CONNECTOR / CREATE SINK: a catalog object that is not a relation."""

    obj: RelationDef
    if_not_exists: bool = False
    or_replace: bool = False  # CREATE OR REPLACE FUNCTION

    def explain(self) -> str:
        opts = ", ".join(f"{k}" for k, _ in self.obj.options)
        return f"Create {self.obj.kind} {self.obj.name} (options: {opts})"


@dataclass(frozen=True)
class DropObjectPlan(Plan):
    kind: str  # 'connector' | 'sink'
    names: tuple[str, ...]
    if_exists: bool = False
    cascade: bool = False
    direction: str | None = None  # DROP SOURCE CONNECTOR / DROP SINK CONNECTOR
    aggregate: bool = False  # DROP AGGREGATE (of a function object)

    def explain(self) -> str:
        return f"Drop {self.kind} {', '.join(self.names)}"


@dataclass(frozen=True)
class CreateViewPlan(Plan):
    """CREATE MATERIALIZED VIEW: the view's relation (columns, dependencies) and its query."""

    relation: RelationDef
    query: QueryPlan
    if_not_exists: bool = False
    # CREATE OR REPLACE: the old view serves reads until the new one holds its result, then the
    # two are swapped in one catalog commit.
    or_replace: bool = False
    # When the view is an aggregate maintained from partials: how, and the Spark SQL of its delta.
    aggregate_strategy: str | None = None
    aggregate_sql: str | None = None
    # planner/dataflow.py's ViewStrategy: how the view will be maintained.
    strategy: Any = None

    def explain(self) -> str:
        from streamdb.planner.incremental import linear_delta_sql

        if self.strategy is not None and self.strategy.dataflow is not None:
            how = ["  maintenance: a Spark Structured Streaming query over its inputs' change logs "
                   "(shared by the views of its depth); each operator keeps its state in Spark's state store",
                   *("  " + line for line in self.strategy.explain())]
            spark_sql = f"  Spark SQL of the query: {self.query.spark_sql}"
        else:
            delta = linear_delta_sql(self.query.resolved_sql, self.query.inputs)
            if delta:
                strategy = "incremental (linear): the query runs on the inputs' changes only"
            elif self.aggregate_strategy:
                strategy, delta = self.aggregate_strategy, self.aggregate_sql
            else:
                strategy = ("recompute: the query runs over the inputs' snapshot and the difference from the "
                            "stored result is applied")
            why = f" ({self.strategy.reason})" if self.strategy is not None and self.strategy.reason else ""
            how = [f"  maintenance: epochs driven by writes to its inputs, run on Spark{why}",
                   "  strategy: " + strategy]
            spark_sql = f"  Spark SQL: {delta or self.query.spark_sql}"
        return "\n".join([f"Materialized view {self.relation.name}", *how,
                          "  changes are logged with weights, so views and subscribers downstream consume deltas",
                          "  reads: served from the stored result, never a Spark job",
                          *(f"  input {i.registered_name}: relation {i.relation_id}" for i in self.query.inputs),
                          spark_sql])


@dataclass(frozen=True)
class SubscribePlan(Plan):
    """A push query: every change of `query`'s result, as (op, rowtime, *columns) rows."""

    query: QueryPlan
    delta_sql: str | None  # Spark SQL over the inputs' changes, when the query is linear
    columns: tuple[Column, ...]
    snapshot: bool = False  # first send the current result as inserts (SUBSCRIBE), or only changes
    # A query that is not linear: the materialized view that keeps its result while it runs
    # (its relation's name and id are given when it starts); None: recomputed and diffed.
    view: CreateViewPlan | None = None

    def explain(self) -> str:
        if self.view is not None:
            return ("Push query (incremental), maintained as a materialized view of its own while it runs; "
                    "its changes are read from that view's log\n"
                    + "\n".join("  " + line for line in self.view.explain().splitlines()[1:]))
        mode = "incremental (linear)" if self.delta_sql else "recompute and diff"
        return (f"Push query ({mode}), maintained on Spark by the epoch driver\n"
                f"  Spark SQL: {self.delta_sql or self.query.spark_sql}")


@dataclass(frozen=True)
class DeclareCursorPlan(Plan):
    name: str
    inner: Plan  # a QueryPlan or a SubscribePlan

    def explain(self) -> str:
        return f"Declare cursor {self.name} for:\n" + self.inner.explain()


@dataclass(frozen=True)
class FetchPlan(Plan):
    name: str
    count: int | None  # None: ALL
    timeout: float | None  # seconds to wait for rows of a subscription; None: until at least one


@dataclass(frozen=True)
class CloseCursorPlan(Plan):
    name: str | None  # None: CLOSE ALL


@dataclass(frozen=True)
class DropPlan(Plan):
    kind: str  # 'stream' | 'table' | 'view' | 'materialized_view' | 'any'
    names: tuple[str, ...]
    if_exists: bool = False
    cascade: bool = False

    def explain(self) -> str:
        return f"Drop {self.kind} {', '.join(self.names)}" + (" cascade" if self.cascade else "")


@dataclass(frozen=True)
class RenamePlan(Plan):
    """ALTER ... RENAME TO: the relation keeps its id, data, state, grants and owner."""

    kind: str  # 'stream' | 'table' | 'view' | 'materialized_view'
    name: str
    new_name: str
    if_exists: bool = False

    def explain(self) -> str:
        return f"Rename {self.kind} {self.name} to {self.new_name}"


# ---- writes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class InsertPlan(Plan):
    """INSERT: rows of python values (already coerced) or a query whose rows are inserted.

    `columns` lists, for every column of the target in order, the position in the
    provided row that feeds it (None = default/NULL). `rowtime_index` is the position
    of an explicit ROWTIME value, if any.
    """

    relation_name: str
    relation_id: int
    target_columns: tuple[str, ...]  # names as given (or all columns)
    rows: tuple[tuple[Any, ...], ...] | None = None
    # Rows whose values are expressions that need evaluation (non-literals): one SELECT.
    query: QueryPlan | None = None
    rowtime_given: bool = False
    returning: QueryPlan | None = None

    def explain(self) -> str:
        n = f"{len(self.rows)} rows" if self.rows is not None else "query"
        return f"Insert into {self.relation_name} ({n})"


@dataclass(frozen=True)
class UpdatePlan(Plan):
    """UPDATE / DELETE on a table: `query` returns the row key and the new values of each matched row."""

    relation_name: str
    relation_id: int
    query: QueryPlan | None  # None when the row is found by its key (below)
    is_delete: bool
    # WHERE is exactly the primary key equal to constants: its values (column types), and for an
    # UPDATE whose every assignment is a constant, those (column, literal value): the row is read
    # and written by key, not found by a query over the whole table. With `key` and a `query`
    # (SET with expressions over the row), the query runs over that one row.
    key: tuple[Any, ...] | None = None
    assignments: tuple[tuple[str, Any], ...] | None = None
    # With `key` and a `query`: the SET's new values as arithmetic over the row's own columns,
    # literals and parameters (planner/row_expr.py), computed without the query; None when an
    # assignment is anything else. (column index, value) pairs.
    row_values: tuple[tuple[int, RowExpr], ...] | None = None

    def explain(self) -> str:
        by_key = f"\n  by primary key {self.key!r}" if self.key is not None else ""
        if self.row_values is not None:  # the query is kept for its parameters, not run
            return f"Update {self.relation_name}{by_key}\n  new values computed from the row (no query)"
        matches = f"\n  matches: {self.query.duckdb_sql}" if self.query is not None else ""
        return f"{'Delete from' if self.is_delete else 'Update'} {self.relation_name}{by_key}{matches}"


@dataclass(frozen=True)
class CopyFromPlan(Plan):
    relation_name: str
    relation_id: int
    target_columns: tuple[str, ...]
    format: str  # 'text' | 'csv'
    delimiter: str
    null: str
    header: bool
    quote: str
    escape: str


@dataclass(frozen=True)
class CopyToPlan(Plan):
    query: QueryPlan
    format: str
    delimiter: str
    null: str
    header: bool
    # COPY (<query> EMIT CHANGES | SUBSCRIBE ...) TO STDOUT: lines stream until cancelled.
    subscribe: SubscribePlan | None = None


# ---- introspection and session ----------------------------------------------------------


@dataclass(frozen=True)
class ShowObjectsPlan(Plan):
    kind: str  # 'STREAMS' | 'TABLES' | 'ALL' | ...


@dataclass(frozen=True)
class ShowCreatePlan(Plan):
    name: str
    kind: str
    create_sql: str | None = None  # connectors and sinks: their (masked) statement


@dataclass(frozen=True)
class DescribeRelationPlan(Plan):
    name: str
    extended: bool = False


@dataclass(frozen=True)
class ExplainPlan(Plan):
    inner: Plan


@dataclass(frozen=True)
class FlushPlan(Plan):
    name: str | None = None


@dataclass(frozen=True)
class ShowVariablePlan(Plan):
    name: str


@dataclass(frozen=True)
class SetVariablePlan(Plan):
    name: str
    value: str | None  # None => reset to default
    local: bool = False


@dataclass(frozen=True)
class TransactionPlan(Plan):
    action: Literal["BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "ROLLBACK TO"]
    savepoint: str | None = None


@dataclass(frozen=True)
class NoOpPlan(Plan):
    """Statements accepted for compatibility that change nothing (DISCARD, DEALLOCATE...)."""

    command_tag: str
    deallocate: str | None = None


# ---- roles and privileges ------------------------------------------------------------------


@dataclass(frozen=True)
class RolePlan(Plan):
    """CREATE or ALTER ROLE | USER. None for an attribute the statement does not set. The
    password is never shown (repr, EXPLAIN): the runtime turns it into a verifier."""

    action: Literal["create", "alter"]
    name: str
    kind: str  # 'ROLE' | 'USER'
    login: bool | None = None
    superuser: bool | None = None
    set_password: bool = False
    password: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class DropRolePlan(Plan):
    kind: str  # 'ROLE' | 'USER'
    names: tuple[str, ...]
    if_exists: bool = False


@dataclass(frozen=True)
class GrantPlan(Plan):
    """GRANT (revoke=False) or REVOKE privileges on relations to or from roles (or PUBLIC)."""

    privileges: tuple[str, ...]  # among catalog.PRIVILEGES
    relations: tuple[str, ...]
    roles: tuple[str, ...]
    revoke: bool = False
