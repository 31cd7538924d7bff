"""One client's session: parses, plans and runs statements through the coordinator."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from streamdb import planner
from streamdb import types as T
from streamdb.auth import redact_sql
from streamdb.errors import (
    FeatureNotSupported,
    InFailedTransaction,
    InternalError,
    Notice,
    QueryCanceled,
    StatementTooComplex,
    StreamDBError,
    UndefinedObject,
)
from streamdb.metrics import statement_kind
from streamdb.planner import insert as insert_planner
from streamdb.planner import query as query_planner
from streamdb.planner import update as update_planner
from streamdb.planner.coerce import NotALiteral, TypedValue, coerce
from streamdb.planner.context import SERVER_VERSION, PlanContext, SessionInfo
from streamdb.planner.lookup import lookup_shaped
from streamdb.planner.names import normalize as normalize_identifier
from streamdb.planner.plans import CopyToPlan, DeclareCursorPlan, FetchPlan, Plan, QueryPlan, SubscribePlan
from streamdb.runtime import coordinator, limits
from streamdb.runtime.api import OFF_LOOP_CHARS, CopyInRequest, ExecutionResult, PreparedStatement, Statement
from streamdb.runtime.query import NeedsLiterals
from streamdb.runtime.statements import copy as copy_runtime
from streamdb.runtime.statements import select as select_runtime
from streamdb.runtime.statements.context import ExecContext
from streamdb.sql import ast as S
from streamdb.sql.literals import Template, templatize
from streamdb.sql.parser import parse_statements

if TYPE_CHECKING:
    from streamdb.runtime.engine import Engine

log = logging.getLogger("streamdb.session")

# Settings clients read and set. Reported ones are sent as ParameterStatus when they change.
DEFAULT_SETTINGS: dict[str, str] = {
    "server_version": SERVER_VERSION.split(" ")[0],
    "server_version_num": "150000",
    "server_encoding": "UTF8",
    "client_encoding": "UTF8",
    "datestyle": "ISO, MDY",
    "timezone": "UTC",
    "intervalstyle": "postgres",
    "integer_datetimes": "on",
    "standard_conforming_strings": "on",
    "application_name": "",
    "is_superuser": "on",
    "search_path": '"$user", public',
    "extra_float_digits": "1",
    "transaction_isolation": "serializable",
    "default_transaction_isolation": "serializable",
    "transaction_read_only": "off",
    "default_transaction_read_only": "off",
    "statement_timeout": "0",
    "lock_timeout": "0",
    "idle_in_transaction_session_timeout": "0",
    "client_min_messages": "notice",
    "bytea_output": "hex",
    "max_identifier_length": "63",
    "lc_messages": "C",
    "lc_collate": "C",
    "lc_ctype": "C",
    "lc_monetary": "C",
    "lc_numeric": "C",
    "lc_time": "C",
    "max_index_keys": "32",
    "jit": "off",
    "row_security": "on",
    "synchronous_commit": "on",
    "cluster_name": "streamdb",
    "geqo": "on",
    "work_mem": "4MB",
    "enable_seqscan": "on",
    # FLUSH after every write, so the next read of a view sees it (RisingWave's RW_IMPLICIT_FLUSH).
    "implicit_flush": "off",
    "rw_implicit_flush": "off",
    # Accepted for RisingWave compatibility; StreamDB sizes its Spark work itself.
    "streaming_parallelism": "default",
    "streaming_join_encoding": "default",
    "streaming_asof_join_use_cache": "true",
    "rw_streaming_enable_delta_join": "off",
    "rw_batch_enable_sort_agg": "on",
    "query_mode": "auto",
}
PARAM_TYPES_KEPT = 256
TEMPLATE_MAX_CHARS = 2000  # longer texts are rarely repeated lookups; scanning them costs
_INT_RANGES = {T.SMALLINT: 2**15, T.INTEGER: 2**31, T.BIGINT: 2**63}

REPORTED = {"server_version": "server_version", "server_encoding": "server_encoding",
            "client_encoding": "client_encoding", "datestyle": "DateStyle", "timezone": "TimeZone",
            "intervalstyle": "IntervalStyle", "integer_datetimes": "integer_datetimes",
            "standard_conforming_strings": "standard_conforming_strings",
            "application_name": "application_name", "is_superuser": "is_superuser",
            "session_authorization": "session_authorization"}
READ_ONLY = {"server_version", "server_version_num", "server_encoding", "integer_datetimes",
             "is_superuser", "max_identifier_length", "lc_collate", "lc_ctype", "max_index_keys",
             "session_authorization"}
ALIASES = {"time zone": "timezone", "time_zone": "timezone", "names": "client_encoding",
           "transaction isolation level": "transaction_isolation", "session authorization": "session_authorization"}


class EngineSession:
    def __init__(self, engine: Engine, user: str, database: str, options: dict[str, str], pid: int) -> None:
        self.engine = engine
        self.user = user
        self.database = database
        self.pid = pid
        self.txn_status = "I"
        self.savepoints: list[str] = []
        self.cursors: dict[str, Any] = {}  # name -> statements.cursor.Cursor
        # Parameter types of recently prepared statements, by their AST (oldest first).
        self._param_types: dict[int, tuple[Any, tuple[T.SqlType, ...]]] = {}
        self._prepared: dict[tuple[str, int, tuple[T.SqlType | None, ...], int], PreparedStatement] = {}
        # Plans of parameterised queries, by statement: (statement, catalog version, types, plan,
        # whether the embedded engine can take the values as parameters).
        self._plans: dict[int, tuple[Any, tuple[int, int], tuple[T.SqlType, ...], QueryPlan, bool]] = {}
        self._write_templates: dict[int, tuple[Any, tuple[int, int], tuple[T.SqlType, ...],
                                               update_planner.ByKeyTemplate | None]] = {}
        # Queries sent again as the same text (a pool's `SELECT 1`, a dashboard's refresh): the
        # statement parsed once, and plans of queries without parameters by statement, valid
        # while the catalog and the settings are (planning is pure over them: PlanContext).
        self._parsed: dict[str, Statement] = {}
        self._query_plans: dict[int, tuple[Any, tuple[int, int], QueryPlan]] = {}
        role = engine.catalog.snapshot().role(user)
        self._defaults = {**DEFAULT_SETTINGS, "session_authorization": user,
                          "is_superuser": "on" if role is not None and role.superuser else "off",
                          # Sessions start with the server's limits (docs/limits.md).
                          "statement_timeout": limits.format_duration_ms(engine.settings.statement_timeout_ms),
                          "idle_in_transaction_session_timeout": limits.format_duration_ms(
                              engine.settings.idle_in_transaction_session_timeout_ms)}
        self.settings = dict(self._defaults)
        if options.get("application_name"):
            self.settings["application_name"] = options["application_name"]
        for k, v in options.items():
            k = k.lower()
            if k in self.settings and k not in READ_ONLY:
                self.settings[k] = limits.normalize_setting(k, v, engine.settings.max_result_rows)
        self._running: asyncio.Task[Any] | None = None
        self._cancelled = False
        self._timed_out = False
        self._settings_hash: int | None = None
        # Shapes of literal SQL: text with $n -> (catalog version and settings, the statement
        # with $n when it may run with the literals as parameters, literal kinds, parameter types).
        self._templates: dict[str, tuple[Any, ...]] = {}

    # ---- settings ------------------------------------------------------------------------

    @property
    def transaction_status(self) -> str:
        return self.txn_status

    def startup_parameters(self) -> dict[str, str]:
        return {REPORTED[k]: self.settings[k] for k in REPORTED if k in self.settings}

    def info(self) -> SessionInfo:
        return SessionInfo(self.user, self.database, self.settings.get("application_name", ""),
                           dict(self.settings), self.pid)

    def get_setting(self, name: str) -> str | None:
        name = ALIASES.get(name, name)
        if name == "all":
            return None
        return self.settings.get(name)

    def set_setting(self, name: str, value: str | None) -> dict[str, str]:
        name = ALIASES.get(name, name)
        if name not in self.settings and "." not in name:
            raise UndefinedObject(f'unrecognized configuration parameter "{name}"')
        if name in READ_ONLY:
            raise StreamDBError(f'parameter "{name}" cannot be changed', sqlstate="55P02")
        if value is None or value.upper() == "DEFAULT":
            value = self._defaults.get(name, "")
        if name == "timezone" and value.upper() not in ("UTC", "GMT", "Z", "ETC/UTC", "+00", "00:00", "0", "LOCAL"):
            raise FeatureNotSupported(f'time zone "{value}" is not supported; the server works in UTC')
        if name == "timezone":
            value = "UTC"
        if name == "client_encoding" and value.upper().replace("-", "") not in ("UTF8", "UNICODE"):
            raise FeatureNotSupported(f'client encoding "{value}" is not supported; use UTF8')
        value = limits.normalize_setting(name, value, self.engine.settings.max_result_rows)
        self.settings[name] = value
        self._settings_hash = None
        return {REPORTED[name]: value} if name in REPORTED else {}

    def implicit_flush(self) -> bool:
        return any(self.settings.get(k, "off").lower() in ("on", "true", "1")
                   for k in ("implicit_flush", "rw_implicit_flush"))

    def reset_all(self) -> None:
        app = self.settings.get("application_name", "")
        self.settings = dict(self._defaults)
        self.settings["application_name"] = app
        self._settings_hash = None

    # ---- statements ------------------------------------------------------------------------

    def _ctx(self) -> PlanContext:
        return PlanContext(self.engine.catalog.snapshot(), self.info())

    def parse(self, sql: str) -> list[Statement]:
        known = self._parsed.get(sql)
        if known is not None:
            return [known]
        template = templatize(sql) if len(sql) <= TEMPLATE_MAX_CHARS else None
        if template is not None:
            hit = self._template_statement(sql, template)
            if hit is not None:
                return [hit]
        try:
            try:
                parsed = parse_statements(sql)
            except RecursionError:
                raise StatementTooComplex() from None
        except StreamDBError as e:
            self.engine.metrics.statement_unparsed(e.sqlstate)
            raise
        statements = [Statement(p.sql, p.ast, p.offset, notices=p.notices) for p in parsed]
        if template is not None and len(statements) == 1:
            self._learn_template(template, statements[0])
            # Not a text with parameters: one text prepared with other parameter types must
            # get a statement of its own (its types are kept by statement, `_param_types`).
            if isinstance(statements[0].ast, planner.QUERY_TYPES) and "$" not in sql:
                _keep(self._parsed, sql, statements[0])
        return statements

    # Literal SQL (the simple protocol) of a shape seen before runs its cached plan with the
    # literals as parameters, where that means exactly what the literal text means: point
    # lookups, whose every parameter is a key compared for equality with a column of its kind.

    def _template_statement(self, sql: str, template: Template) -> Statement | None:
        known = self._templates.get(template.sql)
        if known is None or known[0] != self._template_version():
            return None
        statement, kinds, types = known[1], known[2], known[3]
        if statement is None or kinds != template.kinds:
            return None
        if not all(_fits(v, t) for v, t in zip(template.values, types, strict=True)):
            return None  # out of the column type's range: the full path compares as Postgres does
        return Statement(sql, statement.ast, 0, template.values, notices=statement.notices)

    def _learn_template(self, template: Template, literal: Statement) -> None:
        """Remember whether this shape may skip parsing from now on (a point lookup)."""
        version = self._template_version()
        known = self._templates.get(template.sql)
        if known is not None and known[0] == version:
            return
        entry: tuple[Any, ...] = (version, None, (), ())
        if lookup_shaped(literal.ast):
            try:
                prepared = self.prepare(template.sql, [None] * len(template.values))
                assert prepared.statement is not None
                plan = query_planner.plan_query(prepared.statement.ast, self._ctx(),
                                                declared_params=list(prepared.param_types))
            except StreamDBError:
                plan = None
            types = prepared.param_types if plan is not None else ()
            lookup = plan.lookup if plan is not None else None
            if lookup is not None and sorted(lookup.key_params) == list(range(1, len(template.values) + 1)) and \
                    all(T.is_integer(t) if k == "number" else t in (T.TEXT, T.VARCHAR)
                        for k, t in zip(template.kinds, types, strict=True)):
                entry = (version, prepared.statement, template.kinds, types)
        _keep(self._templates, template.sql, entry)

    def _template_version(self) -> tuple[int, int]:
        return (self.engine.catalog.snapshot().version, self._settings_key())

    def prepare(self, sql: str, param_types: list[T.SqlType | None]) -> PreparedStatement:
        # Drivers send the same statement text again and again as unnamed statements (Parse,
        # Bind, Execute each time): the same text at the same catalog version gets the same
        # statement, so its types and its plan are reused.
        key = (sql, self.engine.catalog.snapshot().version, tuple(param_types), self._settings_key())
        known = self._prepared.get(key)
        if known is not None:
            return known
        prepared = self._prepare(sql, param_types)
        if prepared.statement is not None and not isinstance(prepared.statement.ast, S.FetchCursor):
            _keep(self._prepared, key, prepared)
        return prepared

    def _prepare(self, sql: str, param_types: list[T.SqlType | None]) -> PreparedStatement:
        statements = self.parse(sql)
        if not statements:
            return PreparedStatement(None, tuple(t or T.TEXT for t in param_types), None)
        if len(statements) > 1:
            from streamdb.errors import SyntaxErrorSQL

            raise SyntaxErrorSQL("cannot insert multiple commands into a prepared statement")
        st = statements[0]
        if isinstance(st.ast, S.FetchCursor):
            # What a FETCH returns is the cursor's shape, known to this session only.
            cursor = self.cursors.get(normalize_identifier(st.ast.this))
            return PreparedStatement(st, (), cursor.columns if cursor is not None else None)
        try:
            types, columns = planner.describe(st.ast, self._ctx(), param_types)
        except RecursionError:
            raise StatementTooComplex() from None
        # Execute binds values with these types; keep them so it need not describe again.
        _keep(self._param_types, id(st.ast), (st.ast, types))
        if st.params is not None:
            # Literal text answered from a template (a lookup's $n stand for its literals): the
            # client's statement takes no parameters; Execute supplies the literals.
            return PreparedStatement(st, (), columns)
        return PreparedStatement(st, types, columns)

    async def execute(self, statement: Statement, params: list[Any] | None = None) -> ExecutionResult:
        started = time.perf_counter()
        sqlstate: str | None = None
        try:
            result = await self._execute(statement, params)
            if statement.notices:  # Postgres sends them first: they come from reading the text
                result.notices[:0] = [Notice(n, sqlstate="42622") for n in statement.notices]
            return result
        except StreamDBError as e:
            sqlstate = e.sqlstate
            raise
        except asyncio.CancelledError:
            sqlstate = QueryCanceled.sqlstate
            raise
        finally:
            self.engine.metrics.statement_done(statement_kind(statement.ast), time.perf_counter() - started,
                                               sqlstate)

    async def _execute(self, statement: Statement, params: list[Any] | None) -> ExecutionResult:
        node = statement.ast
        if self.txn_status == "E" and not isinstance(node, S.TransactionControl):
            raise InFailedTransaction(
                "current transaction is aborted, commands ignored until end of transaction block")
        self._cancelled = False
        self._timed_out = False
        if not params and statement.params is not None:
            params = list(statement.params)
        try:
            plan: Plan | None = None
            if params:
                known = self._param_types.get(id(node))
                if known is not None and known[0] is node:
                    types = known[1]
                else:
                    types, _ = planner.describe(node, self._ctx(), [None] * len(params))
                plan = self._prepared_query_plan(node, params, types) or self._prepared_write_plan(node, params, types)
                if plan is None and isinstance(node, exp.Insert):
                    try:  # a prepared INSERT's values go straight into its rows
                        plan = insert_planner.plan(node, self._ctx(), bound=(params, types))
                    except NotALiteral:
                        plan = None
                if plan is None:
                    node = query_planner.bind_parameters(node, params, types)
            if plan is None and not params:
                plan = self._query_plan_again(node)
                if plan is None:
                    plan = await self._plan(node, statement.sql)
                    self._keep_query_plan(node, plan)
            if plan is None:
                plan = await self._plan(node, statement.sql)
            if isinstance(plan, QueryPlan) and plan.lookup is not None:
                # A lookup whose index is current costs less than scheduling a task for it.
                answered = select_runtime.answer_from_current_index(plan, ExecContext(self.engine, self))
                if answered is not None:
                    return answered
            planned: Plan = plan

            async def run_plan() -> ExecutionResult:
                ctx = ExecContext(self.engine, self)
                try:
                    return await coordinator.execute(planned, ctx)
                except NeedsLiterals:
                    # A parameterised query too big for the embedded engine: Spark gets the values
                    # as literals, planned afresh.
                    bound = query_planner.bind_parameters(node, params or [], types)
                    return await coordinator.execute(planner.plan(bound, self._ctx(), statement.sql), ctx)

            return await self._run_cancellable(run_plan(), timed=not _runs_until_cancelled(plan))
        except StreamDBError as e:
            # The parser tokenizes the whole query string, so node positions count from its start;
            # the wire layer adds the statement's offset, so hand back a statement-relative one.
            if e.position is not None and statement.offset and not getattr(e, "_relative", False):
                e.position = max(1, e.position - statement.offset)
                e._relative = True  # type: ignore[attr-defined]
            self._fail()
            raise
        except asyncio.CancelledError:
            raise
        except RecursionError:  # planning a deeply nested statement (Postgres: 54001)
            self._fail()
            raise StatementTooComplex() from None
        except Exception as e:  # noqa: BLE001 - any bug becomes XX000, the connection stays up
            log.exception("internal error running %r", redact_sql(statement.sql))  # no passwords in logs
            self._fail()
            raise InternalError(f"internal error: {type(e).__name__}: {e}") from e

    async def _plan(self, node: Any, sql: str) -> Plan:
        ctx = self._ctx()
        if len(sql) < OFF_LOOP_CHARS:
            return planner.plan(node, ctx, sql)
        return await asyncio.to_thread(planner.plan, node, ctx, sql)  # pure: no Spark, no disk

    def _prepared_query_plan(self, node: Any, params: list[Any],
                             types: tuple[T.SqlType, ...]) -> QueryPlan | None:
        """A query executed again with new parameter values reuses its plan (planning costs
        milliseconds: typing, rewriting, Spark SQL); the values go to the embedded engine as
        parameters. None for statements other than queries."""
        if not isinstance(node, planner.QUERY_TYPES):
            return None
        # Planning reads the catalog and the session's settings (current_setting, current_user).
        version = (self.engine.catalog.snapshot().version, self._settings_key())
        key = id(node)
        cached = self._plans.get(key)
        if cached is None or cached[0] is not node or cached[1] != version or cached[2] != types:
            plan = query_planner.plan_query(node, self._ctx(), declared_params=list(types))
            # Only where the embedded engine's SQL takes exactly these placeholders (the rewrites
            # for catalog functions may fold some away) and reads no system tables.
            usable = query_planner.takes_parameters(plan, len(params)) \
                and all(i.relation_id is not None for i in plan.inputs)
            cached = (node, version, types, plan, usable)
            _keep(self._plans, key, cached)
        plan = cached[3]
        if not cached[4]:
            return None
        values = tuple(coerce(v.value if isinstance(v, TypedValue) else v, t, f"${i + 1}")
                       for i, (v, t) in enumerate(zip(params, types, strict=False)))
        return replace(plan, params=values)

    def _query_plan_again(self, node: Any) -> QueryPlan | None:
        """The plan this statement (with its values bound) got last time, if the catalog and the
        settings are still the ones it was planned under."""
        cached = self._query_plans.get(id(node))
        if cached is None or cached[0] is not node or cached[1] != self._query_plan_version():
            return None
        return cached[2]

    def _keep_query_plan(self, node: Any, plan: Plan) -> None:
        # Not a query that reads system tables: their rows are taken when it is planned.
        if isinstance(node, planner.QUERY_TYPES) and isinstance(plan, QueryPlan) and not plan.params \
                and all(i.relation_id is not None for i in plan.inputs):
            _keep(self._query_plans, id(node), (node, self._query_plan_version(), plan))

    def _query_plan_version(self) -> tuple[int, int, str | None]:
        # current_setting() is read when a query is planned, the engine marker included (the
        # other caches leave the marker out: it changes with every other statement).
        return (*self._template_version(), self.settings.get("streamdb.last_query_engine"))

    def _prepared_write_plan(self, node: Any, params: list[Any], types: tuple[T.SqlType, ...]) -> Plan | None:
        """An UPDATE or DELETE by primary key executed again binds its new values into the plan
        it made the first time (update_planner.ByKeyTemplate) rather than into the statement,
        which would then be planned again. None for other statements."""
        if not isinstance(node, (exp.Update, exp.Delete)):
            return None
        version = (self.engine.catalog.snapshot().version, self._settings_key())
        key = id(node)
        cached = self._write_templates.get(key)
        if cached is None or cached[0] is not node or cached[1] != version or cached[2] != types:
            cached = (node, version, types, update_planner.by_key_template(node, self._ctx(), types))
            _keep(self._write_templates, key, cached)
        template = cached[3]
        return template.bind(params) if template is not None else None

    def _settings_key(self) -> int:
        """Changes when a setting planning can read changes (not the engine-used marker)."""
        if self._settings_hash is None:
            self._settings_hash = hash(tuple(sorted(
                (k, v) for k, v in self.settings.items() if k != "streamdb.last_query_engine")))
        return self._settings_hash

    def _arm_statement_timer(self) -> asyncio.TimerHandle | None:
        """Cancel the running statement once statement_timeout passes (None: no timeout)."""
        timeout_ms = limits.parse_duration_ms("statement_timeout", self.settings.get("statement_timeout", "0"))
        if not timeout_ms:
            return None
        return asyncio.get_running_loop().call_later(timeout_ms / 1000, self._statement_timed_out)

    def _statement_timed_out(self) -> None:
        task = self._running
        if task is not None and not task.done():
            self._timed_out = True
            task.cancel()

    @property
    def idle_in_transaction_timeout(self) -> float | None:
        """Seconds this session may wait for a command inside a transaction block; None: no limit."""
        timeout_ms = limits.parse_duration_ms(
            "idle_in_transaction_session_timeout", self.settings.get("idle_in_transaction_session_timeout", "0"))
        return timeout_ms / 1000 if timeout_ms else None

    def _fail(self) -> None:
        if self.txn_status == "T":
            self.txn_status = "E"

    async def _run_cancellable(self, work: Coroutine[Any, Any, ExecutionResult], *, timed: bool) -> ExecutionResult:
        """Run a statement's work as the task that cancel() and statement_timeout stop."""
        task = asyncio.ensure_future(work)
        self._running = task
        timer = self._arm_statement_timer() if timed else None
        try:
            return await task
        except asyncio.CancelledError:
            reason = self._cancellation()
            if reason is not None:
                raise reason from None
            raise
        finally:
            self._running = None
            if timer is not None:
                timer.cancel()

    def _cancellation(self) -> QueryCanceled | None:
        """Why the running statement was cancelled, if by the timeout or the client."""
        if self._timed_out:
            return QueryCanceled("canceling statement due to statement timeout")
        if self._cancelled:
            return QueryCanceled("canceling statement due to user request")
        return None

    async def finish_copy_in(self, request: CopyInRequest, data: bytes) -> ExecutionResult:
        self._cancelled = self._timed_out = False
        try:
            result = await self._run_cancellable(
                copy_runtime.finish_copy_in(request, data, ExecContext(self.engine, self)), timed=True)
            if self.implicit_flush():
                result.notices.extend(await self.engine.flush())
            return result
        except StreamDBError:
            self._fail()
            raise
        except Exception as e:  # noqa: BLE001
            log.exception("internal error in COPY")
            self._fail()
            raise InternalError(f"internal error: {type(e).__name__}: {e}") from e

    def fail_copy_in(self, request: CopyInRequest, message: str) -> None:
        self._fail()

    def cancel(self) -> None:
        task = self._running
        if task is not None and not task.done():
            self._cancelled = True
            task.get_loop().call_soon_threadsafe(task.cancel)

    def close_cursor(self, name: str) -> None:
        cursor = self.cursors.pop(name, None)
        if cursor is not None and cursor.subscription is not None:
            self.engine.views.unsubscribe(cursor.subscription)

    def close_cursors(self) -> None:
        for name in list(self.cursors):
            self.close_cursor(name)

    def close(self) -> None:
        self.close_cursors()
        self.cancel()
        self.engine.sessions.pop(self.pid, None)


def _runs_until_cancelled(plan: Plan) -> bool:
    """Push queries and waits for their rows are long-lived by design: statement_timeout
    does not apply to them (as in Materialize)."""
    if isinstance(plan, DeclareCursorPlan):
        return isinstance(plan.inner, SubscribePlan)
    if isinstance(plan, CopyToPlan):
        return plan.subscribe is not None
    return isinstance(plan, (SubscribePlan, FetchPlan))


def _fits(value: Any, sql_type: T.SqlType) -> bool:
    limit = _INT_RANGES.get(sql_type)
    return limit is None or not isinstance(value, int) or -limit <= value < limit


def _keep(cache: dict[Any, Any], key: Any, value: Any) -> None:
    """Add to a bounded cache that forgets its oldest entries first."""
    cache[key] = value
    while len(cache) > PARAM_TYPES_KEPT:
        cache.pop(next(iter(cache)))
