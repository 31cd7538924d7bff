"""StreamDB's SQL dialect: Postgres plus streaming statements.

The dialect follows sqlglot's own layout: `StreamDB` subclasses the Postgres dialect and its
nested Tokenizer, Parser and Generator, merging new entries into sqlglot's tables. Statements
Postgres has keep sqlglot's nodes; the streaming and session statements parse into the nodes
of streamdb/sql/ast.py (see that module for what each arg holds).

Representation notes for the planner:
- DROP ... is sqlglot's exp.Drop: the names are in `tables` (a list of exp.Table), `kind` is the
  upper-case kind ('STREAM', 'TABLE', 'VIEW', 'SOURCE', 'SINK'), and - as sqlglot does it -
  DROP MATERIALIZED VIEW is kind='VIEW' with materialized=True. DROP [SOURCE | SINK] CONNECTOR is
  ast.DropConnector, an exp.Drop subclass with kind='CONNECTOR' and direction 'source' | 'sink'.
- CREATE MATERIALIZED VIEW is sqlglot's exp.Create kind='VIEW' with an exp.MaterializedProperty.
- OPERATOR(pg_catalog.~) and friends parse into the node the bare operator gives (exp.RegexpLike
  for ~), so the planner sees one shape for psql's catalog queries.

Importing this module registers the dialect, so `sqlglot.parse(sql, read="streamdb")` works.
"""

from __future__ import annotations

import re
import typing as t
from collections.abc import Callable

from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import ParseError
from sqlglot.generators.postgres import PostgresGenerator
from sqlglot.helper import seq_get
from sqlglot.parser import SENTINEL_NONE
from sqlglot.parsers.postgres import PostgresParser
from sqlglot.tokens import Token, TokenType

from streamdb.errors import FeatureNotSupported
from streamdb.sql import ast

# Object kinds, longest first so MATERIALIZED VIEWS wins over VIEWS.
SHOW_OBJECT_KINDS = (
    ("MATERIALIZED", "VIEWS"),
    ("STREAMS",),
    ("TABLES",),
    ("ALL",),
    ("VIEWS",),
    ("QUERIES",),
    ("SOURCES",),
    ("SINKS",),
    ("CONNECTORS",),
    ("FUNCTIONS",),
)
SHOW_CREATE_KINDS = (
    ("MATERIALIZED", "VIEW"),
    ("STREAM",),
    ("TABLE",),
    ("VIEW",),
    ("SOURCE", "CONNECTOR"),
    ("SINK", "CONNECTOR"),
    ("CONNECTOR",),
    ("SOURCE",),
    ("SINK",),
)
# DROP kinds sqlglot does not know; the others go through sqlglot's own DROP parser.
STREAMING_DROP_KINDS = ("STREAM", "SOURCE", "SINK", "INDEX")  # INDEX: sqlglot's takes one name
# CREATE {SOURCE | SINK} CONNECTOR name <kind>: the connector kinds each direction has.
CONNECTOR_KINDS = {"source": ("KAFKA", "FILE", "MQTT", "POSTGRES"), "sink": ("KAFKA", "POSTGRES", "FILE")}
# After SOURCE / SINK, CONNECTOR is our keyword when a name (or IF) follows it; followed by one
# of these (or by punctuation, or nothing) it is the name of a source or sink called connector.
AFTER_SOURCE_OR_SINK_NAME = {"FROM", "AS", "INTO", "WITH", "INCLUDE", "FORMAT", "CASCADE", "RESTRICT"}
# RisingWave's FORMAT <format> ENCODE <encoding> [(options)] of CREATE SOURCE / CREATE SINK.
SOURCE_FORMATS = ("PLAIN", "UPSERT", "DEBEZIUM", "DEBEZIUM_MONGO", "MAXWELL", "CANAL")
SOURCE_ENCODINGS = ("JSON", "AVRO", "PROTOBUF", "CSV", "BYTES", "PARQUET", "TEXT")
# RisingWave's INCLUDE <what> [AS name] of CREATE SOURCE.
SOURCE_INCLUDES = ("KEY", "TIMESTAMP", "PARTITION", "OFFSET", "HEADER", "PAYLOAD")
# Multi-word setting names Postgres spells with spaces (SHOW/SET/RESET TIME ZONE, ...).
SPACED_SETTING_NAMES = (
    (("TIME", "ZONE"), "timezone"),
    (("TRANSACTION", "ISOLATION", "LEVEL"), "transaction_isolation"),
    (("SESSION", "AUTHORIZATION"), "session_authorization"),
)
ISOLATION_LEVELS = (
    ("SERIALIZABLE",),
    ("REPEATABLE", "READ"),
    ("READ", "COMMITTED"),
    ("READ", "UNCOMMITTED"),
)
DISCARD_KINDS = {"ALL": "ALL", "PLANS": "PLANS", "SEQUENCES": "SEQUENCES", "TEMP": "TEMP", "TEMPORARY": "TEMP"}
# COPY options that take a boolean; a bare `HEADER` means true.
BOOLEAN_COPY_OPTIONS = {"header", "freeze", "oids"}
TRUE_WORDS = {"true", "on", "1", "yes"}
FALSE_WORDS = {"false", "off", "0", "no"}

# OPERATOR(schema.op) -> what the bare operator parses into.
OPERATOR_NODES: dict[str, Callable[[exp.Expr, exp.Expr], exp.Expr]] = {
    "~": lambda a, b: exp.RegexpLike(this=a, expression=b),
    "~*": lambda a, b: exp.RegexpILike(this=a, expression=b),
    "!~": lambda a, b: exp.Not(this=exp.RegexpLike(this=a, expression=b)),
    "!~*": lambda a, b: exp.Not(this=exp.RegexpILike(this=a, expression=b)),
    "~~": lambda a, b: exp.Like(this=a, expression=b),
    "~~*": lambda a, b: exp.ILike(this=a, expression=b),
    "!~~": lambda a, b: exp.Not(this=exp.Like(this=a, expression=b)),
    "!~~*": lambda a, b: exp.Not(this=exp.ILike(this=a, expression=b)),
    "=": lambda a, b: exp.EQ(this=a, expression=b),
    "<>": lambda a, b: exp.NEQ(this=a, expression=b),
    "!=": lambda a, b: exp.NEQ(this=a, expression=b),
    "<": lambda a, b: exp.LT(this=a, expression=b),
    "<=": lambda a, b: exp.LTE(this=a, expression=b),
    ">": lambda a, b: exp.GT(this=a, expression=b),
    ">=": lambda a, b: exp.GTE(this=a, expression=b),
}

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*\Z")


DATE_PART = "date_part"  # meta of an exp.Extract written as date_part(...)


# Calls PostgreSQL's grammar turns into something else, named after that (a type, btrim, ...).
_GRAMMAR_NAMED = frozenset({"CAST", "TRY_CAST", "TRIM", "CONVERT"})


def _marked_date_part(node: exp.Expr | None) -> exp.Expr | None:
    if node is not None:
        node.meta[DATE_PART] = True
    return node


class BlamedParseError(ParseError):
    """A ParseError that remembers the offending token (None = end of input), so
    parse_statements can report a Postgres-style position. Still a ParseError, so sqlglot's
    speculative parsing (_try_parse) keeps catching it."""

    def __init__(self, message: str, errors: list[dict[str, t.Any]] | None, token: Token | None):
        super().__init__(message, errors)
        self.token = token


class _SelectStreamMark(exp.Hint):
    """Stands in the select's `hint` slot between SELECT STREAM being read and the statement
    being finished, when the marked select is wrapped in ast.SelectStream. Never escapes the
    parser; the generator uses it to print SELECT STREAM."""

    arg_types: t.ClassVar[dict[str, bool]] = {}


def _is_word(token: Token) -> bool:
    return token.token_type == TokenType.IDENTIFIER or bool(_WORD.match(token.text))


def _word_text(token: Token) -> str:
    """A name as Postgres folds it: unquoted words lower-case, quoted ones verbatim."""
    return token.text if token.token_type == TokenType.IDENTIFIER else token.text.lower()


# Statements whose first word is an ordinary word to the tokenizer; Parser.WORD_STATEMENT_PARSERS
# parses each of them.
WORD_STATEMENTS = frozenset(
    {"ABORT", "START", "RESET", "DISCARD", "DEALLOCATE", "FLUSH", "EXPLAIN", "SAVEPOINT", "SUBSCRIBE", "DECLARE", "CLOSE", "RELEASE"}
)


class StreamDB(Postgres):
    # to_char's patterns sqlglot's Postgres lacks: HH is the hour of the half day (01-12) as HH12,
    # and AM/PM the meridiem (without them 'HH:MI' printed the pattern's letters or a 0-23 hour).
    # Dy and Mon are the day's and month's abbreviated names ('Dy' printed '5y'); FMDay, FMMonth
    # their names. Day and Month are the names too, without PostgreSQL's padding to 9 characters.
    TIME_MAPPING = {**Postgres.TIME_MAPPING, "HH": "%I", "hh": "%I", "FMHH": "%-I", "AM": "%p", "PM": "%p",
                    "Dy": "%a", "Mon": "%b", "FMDay": "%A", "FMMonth": "%B", "Day": "%A", "Month": "%B"}

    class Tokenizer(Postgres.Tokenizer):
        # The statements we parse from their first word (RESET, EXPLAIN, DECLARE, SAVEPOINT,
        # RELEASE, ...) must reach the parser as ordinary words: as commands the tokenizer would
        # swallow the rest of the statement into one string (sqlglot 30.31 made SAVEPOINT and
        # RELEASE commands). SHOW and FETCH are kept as tokens, just not as commands.
        KEYWORDS = {
            **{k: v for k, v in Postgres.Tokenizer.KEYWORDS.items() if k not in WORD_STATEMENTS},
            "BYTES": TokenType.VARBINARY,  # ksqlDB's name for bytea
        }
        COMMANDS = Postgres.Tokenizer.COMMANDS - {TokenType.SHOW, TokenType.FETCH}

    # Postgres.Parser / Postgres.Generator are aliases of these classes; naming the classes
    # themselves keeps mypy able to check the subclasses.
    class Parser(PostgresParser):
        STATEMENT_PARSERS = {
            **PostgresParser.STATEMENT_PARSERS,
            TokenType.BEGIN: lambda self: self._parse_begin(),
            TokenType.COMMIT: lambda self: self._parse_transaction_end("COMMIT"),
            TokenType.END: lambda self: self._parse_transaction_end("COMMIT"),
            TokenType.ROLLBACK: lambda self: self._parse_transaction_end("ROLLBACK"),
            TokenType.COPY: lambda self: self._parse_copy_statement(),
            TokenType.CREATE: lambda self: self._parse_create_statement(),
            TokenType.DESC: lambda self: self._parse_describe_relation(),
            TokenType.DESCRIBE: lambda self: self._parse_describe_relation(),
            TokenType.DROP: lambda self: self._parse_drop_statement(),
            TokenType.SET: lambda self: self._parse_set_statement(),
            TokenType.SHOW: lambda self: self._parse_show(),
            TokenType.FETCH: lambda self: self._parse_fetch(),
            TokenType.ALTER: lambda self: self._parse_alter_statement(),
            TokenType.GRANT: lambda self: self._parse_grant_privileges(ast.GrantPrivileges, "TO"),
            TokenType.REVOKE: lambda self: self._parse_grant_privileges(ast.RevokePrivileges, "FROM"),
        }

        # RisingWave's `CREATE TABLE t (...) APPEND ONLY`: a table that only ever grows.
        PROPERTY_PARSERS = {
            **PostgresParser.PROPERTY_PARSERS,
            "APPEND": lambda self: self._parse_append_only(),
        }

        # regexp_extract(s, pattern, group), as DuckDB and Spark have it (Postgres has none): its
        # third argument is the group, not a position, so plans printed in this dialect and read
        # back keep it (planner/regexps.py writes regexp_match with it).
        FUNCTIONS = {
            **PostgresParser.FUNCTIONS,
            "REGEXP_EXTRACT": lambda args: exp.RegexpExtract(
                this=seq_get(args, 0), expression=seq_get(args, 1), group=seq_get(args, 2)),
        }

        # date_part(field, x) is parsed as EXTRACT(field FROM x), but PostgreSQL's is a double
        # where extract() is a numeric: the node remembers which it was (planner/query.py).
        FUNCTION_PARSERS = {
            **PostgresParser.FUNCTION_PARSERS,
            "DATE_PART": lambda self: _marked_date_part(self._parse_date_part()),
        }

        # PostgreSQL has no lambdas: `coalesce(doc -> 'a', ...)` is json's -> operator, which
        # sqlglot read as a lambda `doc -> 'a'` in a call's arguments ("invalid lambda expression").
        # `name => value` (named arguments) stays.
        LAMBDAS = {k: v for k, v in PostgresParser.LAMBDAS.items() if k != TokenType.ARROW}

        # SESSION is a keyword to sqlglot (ALTER SESSION); followed by `(` it is the session
        # window table function, SESSION(rel, ts, gap [, key ...]), like TUMBLE and HOP.
        FUNC_TOKENS = {*PostgresParser.FUNC_TOKENS, TokenType.SESSION}

        def _parse_append_only(self) -> exp.Expr:
            if not self._match_text_seq("ONLY"):
                self.raise_error("Expected ONLY after APPEND")
            return self.expression(exp.Property(this=exp.Var(this="append_only"), value=exp.Boolean(this=True)))

        # Statements whose first word is an ordinary word to the tokenizer.
        WORD_STATEMENT_PARSERS: t.ClassVar[dict[str, Callable[[StreamDB.Parser], exp.Expr]]] = {
            "ABORT": lambda self: self._parse_transaction_end("ROLLBACK"),
            "START": lambda self: self._parse_start_transaction(),
            "RESET": lambda self: self._parse_reset(),
            "DISCARD": lambda self: self._parse_discard(),
            "DEALLOCATE": lambda self: self._parse_deallocate(),
            "FLUSH": lambda self: self._parse_flush(),
            "EXPLAIN": lambda self: self._parse_explain(),
            "SAVEPOINT": lambda self: self._parse_savepoint("SAVEPOINT"),
            "SUBSCRIBE": lambda self: self._parse_subscribe(),
            "DECLARE": lambda self: self._parse_declare_cursor(),
            "CLOSE": lambda self: self._parse_close(),
            "RELEASE": lambda self: self._parse_savepoint("RELEASE"),
        }

        # Tokens after `SELECT stream` that make `stream` an ordinary column (an operator or
        # clause follows), even though they may also start an expression.
        NOT_AFTER_SELECT_STREAM = {
            TokenType.LIMIT,
            TokenType.OFFSET,
            TokenType.WINDOW,
            TokenType.IS,
            TokenType.IN,
            TokenType.COLLATE,
            TokenType.ESCAPE,
            TokenType.ISNULL,
            TokenType.FILTER,
            TokenType.OVER,
        }
        SELECT_ITEM_START = {
            *PostgresParser.ID_VAR_TOKENS,
            TokenType.IDENTIFIER,
            TokenType.STRING,
            TokenType.NUMBER,
            TokenType.L_PAREN,
            TokenType.PARAMETER,
            TokenType.PLACEHOLDER,
            TokenType.NULL,
            TokenType.TRUE,
            TokenType.FALSE,
            TokenType.CASE,
            TokenType.NOT,
            TokenType.DISTINCT,
            TokenType.INTERVAL,
            TokenType.EXISTS,
            TokenType.ARRAY,
        } - NOT_AFTER_SELECT_STREAM
        # What may follow `SELECT STREAM *`; anything else makes it `stream * ...`.
        AFTER_SELECT_STREAM_STAR = {TokenType.FROM, TokenType.COMMA, TokenType.R_PAREN}

        # Tokens that can begin a statement besides STATEMENT_PARSERS and commands.
        QUERY_START_TOKENS = {
            TokenType.SELECT,
            TokenType.WITH,
            TokenType.VALUES,
            TokenType.TABLE,
            TokenType.L_PAREN,
        }

        # Set by streamdb.sql.parser: a statement must start with a statement keyword, as in
        # Postgres. Off by default so sqlglot helpers can still parse expression fragments.
        strict_statements = False

        def reset(self) -> None:
            super().reset()
            # Nesting of _parse_statement: EMIT CHANGES and SELECT STREAM are settled at depth 0.
            self._statement_depth = 0
            # Inside CREATE SINK ... AS <query>, whose WITH (...) follows the query.
            self._in_sink_query = False

        # ---- errors -------------------------------------------------------------------

        def raise_error(self, message: str, token: Token = SENTINEL_NONE) -> None:
            blame = token or self._curr or None
            try:
                super().raise_error(message, token)
            except ParseError as error:
                raise BlamedParseError(str(error), error.errors, blame) from None

        def _parse_as_command(self, start: Token) -> exp.Command:
            # sqlglot gives up here and would swallow the rest as an opaque exp.Command.
            self.raise_error("Unsupported syntax")
            raise AssertionError("unreachable")

        def _parse_command(self) -> exp.Command:
            # A statement sqlglot only knows as a keyword (LOCK, PREPARE, DO, ...).
            self.raise_error("Unsupported statement", self._prev)
            raise AssertionError("unreachable")

        def _warn_unsupported(self) -> None:
            return None

        # ---- statement entry ---------------------------------------------------------------

        def _parse_statement(self) -> exp.Expr | None:
            if not self._curr:
                return None
            outermost = self._statement_depth == 0
            self._statement_depth += 1
            try:
                first = self._curr
                parser = self.WORD_STATEMENT_PARSERS.get(first.text.upper())
                if outermost and self.strict_statements and not parser and not self._starts_statement():
                    self.raise_error("Expected a statement", first)
                if parser and first.token_type in (TokenType.VAR, TokenType.COMMAND):
                    self._advance()
                    stmt: exp.Expr | None = parser(self)
                else:
                    stmt = super()._parse_statement()
            finally:
                self._statement_depth -= 1
            if not outermost or stmt is None:
                return stmt
            if isinstance(stmt, exp.Query):
                stmt = self._parse_emit_changes(stmt)
            return self._wrap_select_streams(stmt)

        def _starts_statement(self) -> bool:
            return self._curr.token_type in self.QUERY_START_TOKENS or self._curr.token_type in (
                self.STATEMENT_PARSERS.keys() | self.dialect.tokenizer_class.COMMANDS
            )

        def _parse_emit_changes(self, query: exp.Expr) -> exp.Expr:
            if self._match_text_seq("EMIT", "CHANGES"):
                properties = None
                if self._match_pair(TokenType.WITH, TokenType.L_PAREN, advance=False):
                    self._advance()
                    properties = self._parse_wrapped_csv(self._parse_stream_property)
                return self.expression(ast.EmitChanges(this=query, properties=properties))
            return query

        def _at_emit_changes(self) -> bool:
            # EMIT CHANGES, and EMIT ON WINDOW CLOSE
            return (
                self._curr.token_type == TokenType.VAR
                and self._curr.text.upper() == "EMIT"
                and self._next is not None
                and self._next.text.upper() in ("CHANGES", "ON")
            )

        def _parse_function_call(
            self,
            functions: dict[str, t.Callable] | None = None,
            anonymous: bool = False,
            optional_parens: bool = True,
            any_token: bool = False,
        ) -> exp.Expr | None:
            # PostgreSQL names an unaliased call's column after the function as written
            # (lpad, strpos, date_trunc, make_timestamp); sqlglot's node for it is named after
            # its own canonical function (pad, str_position, timestamp_trunc, ...), so the call
            # keeps its name. CAST and TRIM are grammar, named otherwise (a type, btrim).
            name = None
            if self._curr and self._next and self._next.token_type == TokenType.L_PAREN:
                written = self._curr.text
                if written.upper() not in _GRAMMAR_NAMED and self._curr.token_type != TokenType.IDENTIFIER:
                    name = written.lower()
            call = super()._parse_function_call(functions, anonymous, optional_parens, any_token)
            if name is not None and call is not None and not isinstance(call, exp.Anonymous):
                call.meta.setdefault("sql_name", name)  # planner/functions.SQL_NAME
            return call

        # EMIT would otherwise be taken as an implicit alias in `SELECT a FROM t EMIT CHANGES`.
        def _parse_table_alias(
            self, alias_tokens: t.Collection[TokenType] | None = None
        ) -> exp.TableAlias | None:
            if self._at_emit_changes():
                return None
            return super()._parse_table_alias(alias_tokens)

        def _parse_alias(self, this: exp.Expr | None, explicit: bool = False) -> exp.Expr | None:
            if self._at_emit_changes():
                return this
            return super()._parse_alias(this, explicit)

        def _parse_table_hints(self) -> list[exp.Expr] | None:
            # `FROM t WITH (...)` would be T-SQL table hints; after a sink's query it is the sink's
            # own options (CREATE SINK s AS SELECT * FROM t WITH (connector = 'kafka')).
            if self._in_sink_query and self._match_pair(TokenType.WITH, TokenType.L_PAREN, advance=False):
                return None
            return super()._parse_table_hints()

        # ---- SELECT STREAM -----------------------------------------------------------------

        def _parse_hint(self) -> exp.Hint | None:
            if self._prev.token_type == TokenType.SELECT and self._at_select_stream():
                self._advance()
                mark = _SelectStreamMark()
                mark.meta["start"] = self._prev.start  # STREAM: where a misplaced one is reported
                return mark
            return super()._parse_hint()

        def _at_select_stream(self) -> bool:
            """STREAM right after SELECT is our keyword only when a select item follows it;
            otherwise it is a column named stream (SELECT stream FROM t, SELECT stream + 1)."""
            curr, after = self._curr, self._next
            if curr.token_type != TokenType.VAR or curr.text.upper() != "STREAM" or not after:
                return False
            if after.token_type == TokenType.STAR:
                index = self._index + 2
                following = self._tokens[index] if index < self._tokens_size else None
                return following is None or following.token_type in self.AFTER_SELECT_STREAM_STAR
            if after.text.upper() == "EMIT":
                return False
            return after.token_type in self.SELECT_ITEM_START

        def _wrap_select_streams(self, stmt: exp.Expr) -> exp.Expr:
            for select in list(stmt.find_all(exp.Select)):
                mark = select.args.get("hint")
                if not isinstance(mark, _SelectStreamMark):
                    continue
                select.set("hint", None)
                wrapper = ast.SelectStream()
                wrapper.meta.update(mark.meta)
                if select is stmt:
                    stmt = wrapper
                else:
                    select.replace(wrapper)
                wrapper.set("this", select)
            return stmt

        # ---- OPERATOR(pg_catalog.~) ---------------------------------------------------------

        def _parse_operator(self, this: exp.Expr | None) -> exp.Expr | None:
            parsed = super()._parse_operator(this)
            if not isinstance(parsed, exp.Operator):
                return parsed
            schema, _, op = str(parsed.args["operator"]).rpartition(".")
            build = OPERATOR_NODES.get(op)
            if build is None or schema.lower() not in ("", "pg_catalog"):
                return parsed
            return build(parsed.this, parsed.expression)

        # ---- names and values --------------------------------------------------------------

        def _parse_word(self) -> Token | None:
            if self._curr and _is_word(self._curr):
                self._advance()
                return self._prev
            return None

        def _parse_dotted_name(self) -> str | None:
            """`a.b.c` as one lower-cased name (setting names, stream property names)."""
            first = self._parse_word()
            if first is None:
                return None
            parts = [_word_text(first)]
            while self._match(TokenType.DOT):
                part = self._parse_word()
                if part is None:
                    self.raise_error("Expected a name after '.'")
                    return None
                parts.append(_word_text(part))
            return ".".join(parts).lower()

        def _parse_setting_name(self) -> str:
            for words, name in SPACED_SETTING_NAMES:
                if self._match_text_seq(*words):
                    return name
            dotted = self._parse_dotted_name()
            if dotted is None:
                self.raise_error("Expected a setting name")
                raise AssertionError("unreachable")
            return dotted

        def _parse_signed_number(self) -> str | None:
            index = self._index
            sign = "-" if self._match(TokenType.DASH) else ""
            if not sign:
                self._match(TokenType.PLUS)
            if self._match(TokenType.NUMBER):
                return sign + self._prev.text
            self._retreat(index)
            return None

        def _parse_setting_value(self) -> str:
            """One SET value as Postgres' flattened text: strings verbatim, words folded."""
            number = self._parse_signed_number()
            if number is not None:
                return number
            if self._match_set((TokenType.STRING, TokenType.BYTE_STRING, TokenType.HEREDOC_STRING)):
                return self._prev.text
            word = self._parse_word()
            if word is None:
                self.raise_error("Expected a setting value")
                raise AssertionError("unreachable")
            return _word_text(word)

        def _match_word_seqs(self, options: tuple[tuple[str, ...], ...]) -> str | None:
            for words in options:
                if self._match_text_seq(*words):
                    return " ".join(words)
            return None

        # ---- SHOW / SET / RESET --------------------------------------------------------------

        def _parse_show(self) -> exp.Expr:
            if self._match(TokenType.CREATE):
                kind = self._match_word_seqs(SHOW_CREATE_KINDS)
                if kind is None:
                    self.raise_error("Expected an object kind")
                name = self._parse_table_parts(schema=True)
                return self.expression(ast.ShowCreate(this=name, kind=kind))
            index = self._index
            kind = self._match_word_seqs(SHOW_OBJECT_KINDS)
            if kind is not None and not self._curr:
                return self.expression(ast.ShowObjects(this=kind))
            self._retreat(index)
            return self.expression(ast.ShowVariable(this=self._parse_setting_name()))

        def _parse_set_statement(self) -> exp.Expr:
            local = self._match_text_seq("LOCAL")
            if not local and self._match_text_seq("SESSION"):
                if self._match_text_seq("CHARACTERISTICS", "AS", "TRANSACTION"):
                    return self._parse_transaction_setting("default_", local=False)
            if self._match_text_seq("TRANSACTION"):
                return self._parse_transaction_setting("", local=local)
            if self._match_text_seq("TIME", "ZONE"):
                return self._set_variable("timezone", self._parse_time_zone_value(), local)
            if self._match_text_seq("NAMES"):
                return self._set_variable("client_encoding", self._parse_value_or_default(), local)
            if self._match(TokenType.SCHEMA):
                return self._set_variable("search_path", self._parse_value_or_default(), local)

            name = self._parse_setting_name()
            if not (self._match(TokenType.EQ) or self._match_text_seq("TO")):
                self.raise_error("Expected = or TO")
            if self._match(TokenType.DEFAULT):
                return self._set_variable(name, None, local)
            values = self._parse_csv(self._parse_setting_value)
            return self._set_variable(name, ", ".join(str(v) for v in values), local)

        def _set_variable(self, name: str, value: str | None, local: bool) -> ast.SetVariable:
            return self.expression(
                ast.SetVariable(this=name, expression=value, local=True if local else None)
            )

        def _parse_value_or_default(self) -> str | None:
            if self._match(TokenType.DEFAULT):
                return None
            return self._parse_setting_value()

        def _parse_time_zone_value(self) -> str | None:
            if self._match(TokenType.DEFAULT) or self._match_text_seq("LOCAL"):
                return None
            if self._match(TokenType.INTERVAL):
                # SET TIME ZONE INTERVAL '-08:00' HOUR TO MINUTE: the offset text is the value.
                if not self._match(TokenType.STRING):
                    self.raise_error("Expected a string after INTERVAL")
                value = self._prev.text
                self._match_text_seq("HOUR", "TO", "MINUTE")
                return value
            return self._parse_setting_value()

        def _parse_transaction_modes(self) -> list[tuple[str, str]]:
            """ISOLATION LEVEL ..., READ ONLY | READ WRITE, [NOT] DEFERRABLE, comma or space
            separated. Returns (setting suffix, value) pairs, e.g. ('isolation', 'serializable')."""
            modes: list[tuple[str, str]] = []
            while True:
                if self._match_text_seq("ISOLATION", "LEVEL"):
                    level = self._match_word_seqs(ISOLATION_LEVELS)
                    if level is None:
                        self.raise_error("Expected an isolation level")
                        raise AssertionError("unreachable")
                    modes.append(("isolation", level.lower()))
                elif self._match_text_seq("READ", "ONLY"):
                    modes.append(("read_only", "on"))
                elif self._match_text_seq("READ", "WRITE"):
                    modes.append(("read_only", "off"))
                elif self._match_text_seq("NOT", "DEFERRABLE"):
                    modes.append(("deferrable", "off"))
                elif self._match_text_seq("DEFERRABLE"):
                    modes.append(("deferrable", "on"))
                elif modes and self._match(TokenType.COMMA):
                    continue
                else:
                    return modes

        def _parse_transaction_setting(self, prefix: str, local: bool) -> exp.Expr:
            # SET [SESSION CHARACTERISTICS AS] TRANSACTION <mode>: one setting per statement
            # because SetVariable holds one (default_)transaction_* name.
            start = self._curr
            modes = self._parse_transaction_modes()
            if not modes:
                self.raise_error("Expected a transaction mode")
            if len(modes) > 1:
                raise FeatureNotSupported(
                    "setting several transaction modes at once is not supported", position=start.start + 1
                )
            suffix, value = modes[0]
            return self._set_variable(f"{prefix}transaction_{suffix}", value, local)

        def _parse_reset(self) -> exp.Expr:
            name = "all" if self._match(TokenType.ALL) else self._parse_setting_name()
            return self.expression(ast.SetVariable(this=name, reset=True))

        # ---- transactions ----------------------------------------------------------------

        def _parse_begin(self) -> exp.Expr:
            self._match_texts(("WORK", "TRANSACTION"))
            self._parse_transaction_modes()  # accepted; the engine has one isolation level
            return self.expression(ast.TransactionControl(this="BEGIN"))

        def _parse_start_transaction(self) -> exp.Expr:
            if not self._match_text_seq("TRANSACTION"):
                self.raise_error("Expected TRANSACTION")
            return self._parse_begin()

        def _parse_transaction_end(self, kind: str) -> exp.Expr:
            self._match_texts(("WORK", "TRANSACTION"))
            if kind == "ROLLBACK" and self._curr and self._curr.text.upper() == "TO":
                self._advance()
                return self._parse_savepoint("ROLLBACK TO")
            return self.expression(ast.TransactionControl(this=kind))

        def _parse_savepoint(self, kind: str) -> exp.Expr:
            # psycopg's nested transactions and SQLAlchemy send these.
            if kind != "SAVEPOINT":
                self._match_text_seq("SAVEPOINT")
            name = self._parse_id_var(any_token=True)
            if name is None:
                self.raise_error("Expected a savepoint name")
            return self.expression(ast.TransactionControl(this=kind, expression=name))

        # ---- small session statements ------------------------------------------------------

        def _parse_discard(self) -> exp.Expr:
            if not self._match_texts(tuple(DISCARD_KINDS)):
                self.raise_error("Expected ALL, PLANS, SEQUENCES or TEMP")
            return self.expression(ast.Discard(this=DISCARD_KINDS[self._prev.text.upper()]))

        def _parse_deallocate(self) -> exp.Expr:
            self._match_text_seq("PREPARE")
            if self._match(TokenType.ALL):
                return self.expression(ast.Deallocate(all=True))
            name = self._parse_id_var(any_token=False)
            if name is None:
                self.raise_error("Expected a prepared statement name")
            return self.expression(ast.Deallocate(this=name))

        # ---- SUBSCRIBE and cursors (Materialize's forms) ----------------------------------------

        def _parse_subscribe(self) -> exp.Expr:
            self._match_text_seq("TO")
            target: exp.Expr | None
            if self._match(TokenType.L_PAREN):
                target = self._parse_ddl_query()
                self._match_r_paren()
            else:
                target = self._parse_table_parts(schema=True)
            if target is None:
                self.raise_error("Expected a relation or (query) after SUBSCRIBE")
            properties = None
            if self._match(TokenType.WITH):
                properties = self._parse_wrapped_csv(self._parse_stream_property)
            return self.expression(ast.Subscribe(this=target, properties=properties))

        def _parse_declare_cursor(self) -> exp.Expr:
            name = self._parse_id_var(any_token=True)
            if name is None:
                self.raise_error("Expected a cursor name")
            self._match_text_seq("NO", "SCROLL")
            if not self._match_text_seq("CURSOR"):
                self.raise_error("Expected CURSOR")
            self._match_text_seq("WITHOUT", "HOLD")
            if not self._match(TokenType.FOR):
                self.raise_error("Expected FOR")
            statement = self._parse_statement()
            if statement is None:
                self.raise_error("Expected a query after FOR")
            if isinstance(statement, exp.Query):
                statement = self._parse_emit_changes(statement)
            return self.expression(ast.DeclareCursor(this=name, expression=statement))

        def _parse_fetch(self) -> exp.Expr:
            self._match_text_seq("FORWARD")
            count: exp.Expr | None = None
            if self._match(TokenType.ALL):
                count = exp.Literal.string("ALL")
            elif self._match(TokenType.NUMBER):
                count = exp.Literal.number(self._prev.text)
            self._match_set((TokenType.FROM, TokenType.IN))
            name = self._parse_id_var(any_token=True)
            if name is None:
                self.raise_error("Expected a cursor name")
            properties = None
            if self._match(TokenType.WITH):
                properties = self._parse_wrapped_csv(self._parse_stream_property)
            return self.expression(ast.FetchCursor(this=name, count=count, properties=properties))

        def _parse_close(self) -> exp.Expr:
            if self._match(TokenType.ALL):
                return self.expression(ast.CloseCursor(this=exp.Literal.string("ALL")))
            name = self._parse_id_var(any_token=True)
            if name is None:
                self.raise_error("Expected a cursor name")
            return self.expression(ast.CloseCursor(this=name))

        def _parse_flush(self) -> exp.Expr:
            name = self._parse_table_parts(schema=True) if self._curr else None
            return self.expression(ast.Flush(this=name))

        def _parse_describe_relation(self) -> exp.Expr:
            extended = self._match_text_seq("EXTENDED")
            name = self._parse_table_parts(schema=True)
            return self.expression(ast.DescribeRelation(this=name, extended=extended or None))

        def _parse_explain(self) -> exp.Expr:
            analyze = verbose = False
            if self._match(TokenType.L_PAREN):
                # EXPLAIN (ANALYZE [bool], VERBOSE [bool]): the options this engine has.
                while True:
                    option = self._curr
                    if not self._match_texts(("ANALYZE", "ANALYSE", "VERBOSE")):
                        self.raise_error(f'unrecognized EXPLAIN option "{option.text.lower()}"')
                    enabled = True
                    if self._curr and self._curr.text.lower() in TRUE_WORDS | FALSE_WORDS:
                        enabled = self._curr.text.lower() in TRUE_WORDS
                        self._advance()
                    if option.text.upper() == "VERBOSE":
                        verbose = enabled
                    else:
                        analyze = enabled
                    if not self._match(TokenType.COMMA):
                        break
                self._match_r_paren()
            else:
                analyze = self._match_texts(("ANALYZE", "ANALYSE"))
                verbose = self._match_text_seq("VERBOSE")
            inner = self._parse_statement()
            if inner is None:
                self.raise_error("Expected a statement to explain")
                raise AssertionError("unreachable")
            if isinstance(inner, exp.Query):
                inner = self._parse_emit_changes(inner)
            return self.expression(
                ast.ExplainStatement(this=inner, analyze=analyze or None, verbose=verbose or None)
            )

        # ---- CREATE STREAM -------------------------------------------------------------------

        def _parse_create_statement(self) -> exp.Expr:
            index = self._index
            if self._match_texts(("ROLE", "USER")):
                return self._parse_role_statement(ast.CreateRole, self._prev.text.upper())
            replace = self._match_pair(TokenType.OR, TokenType.REPLACE)
            external = self._match_text_seq("EXTERNAL")
            if self._match_text_seq("STREAM"):
                return self._parse_create_stream(replace, external)
            if (replace or external) and self._curr.text.upper() in ("SOURCE", "SINK"):
                self.raise_error("Sources and sinks have no OR REPLACE or EXTERNAL")
            if self._match_texts(("SOURCE", "SINK")):
                direction = self._prev.text.lower()
                if self._at_connector_keyword():
                    self._advance()
                    return self._parse_create_connector(direction)
                return self._parse_create_source() if direction == "source" else self._parse_create_sink()
            if not external and self._match(TokenType.TABLE):
                table = self._try_watermarked_table(replace)
                if table is not None:
                    return table
            if not external and self._curr and self._curr.text.upper() == "AGGREGATE":
                # CREATE AGGREGATE f(args) RETURNS t LANGUAGE python AS $$...$$ (RisingWave's form):
                # read as CREATE FUNCTION, then marked as an aggregate.
                self._curr.token_type = TokenType.FUNCTION
                self._retreat(index)
                created = self._parse_create()
                if isinstance(created, exp.Create):
                    created.set("kind", "AGGREGATE")
                return created
            self._retreat(index)
            return self._parse_create()

        def _try_watermarked_table(self, replace: bool) -> exp.Expr | None:
            """RisingWave's `CREATE TABLE t (..., WATERMARK FOR ts AS ...) [APPEND ONLY]`: an
            append-only relation with event time, which is what a stream is here."""
            start, errors = self._index, list(self.errors)
            try:
                stream = self._parse_create_stream(replace, False)
            except ParseError:
                stream = None
            if stream is None or stream.args.get("watermark") is None or stream.args.get("expression"):
                self._retreat(start)
                self.errors = errors
                return None
            self._match_text_seq("APPEND", "ONLY")
            stream.set("table", True)
            return stream

        def _parse_ddl_select(self) -> exp.Expr | None:
            # CREATE MATERIALIZED VIEW | TABLE ... AS <query> [EMIT CHANGES] (ksqlDB's persistent
            # query; the planner takes it as the same query without)
            query = self._parse_ddl_query()
            if query is not None and not isinstance(query, ast.EmitOnWindowClose):
                query = self._parse_emit_changes(query)
            return query

        def _parse_ddl_query(self) -> exp.Expr | None:
            # ... AS <query> EMIT ON WINDOW CLOSE
            query = super()._parse_ddl_select()
            if query is not None and self._match_text_seq("EMIT", "ON", "WINDOW", "CLOSE"):
                return self.expression(ast.EmitOnWindowClose(this=query))
            return query

        def _parse_create_stream(self, replace: bool, external: bool) -> exp.Expr:
            exists = self._parse_exists(not_=True)
            name = self._parse_table_parts(schema=True)
            columns, watermark, _ = self._parse_stream_elements(source=False)
            properties = None
            if self._match(TokenType.WITH):
                properties = self._parse_wrapped_csv(self._parse_stream_property)
            query = None
            if self._match(TokenType.ALIAS):
                query = self._parse_ddl_select()
                if query is None:
                    self.raise_error("Expected a query after AS")
                    raise AssertionError("unreachable")
                query = self._parse_emit_changes(query)
            return self.expression(
                ast.CreateStream(
                    this=name,
                    columns=columns or None,
                    watermark=watermark,
                    properties=properties,
                    replace=replace or None,
                    external=external or None,
                    exists=exists or None,
                    expression=query,
                )
            )

        def _parse_stream_elements(
            self, source: bool
        ) -> tuple[list[exp.Expr] | None, exp.Expr | None, exp.Expr | None]:
            """The optional `(col type ..., WATERMARK FOR ...)` list of a stream or source:
            (columns or None, watermark, primary key). A source's list (RisingWave's grammar) may
            also hold a table-level PRIMARY KEY (cols) and end with a trailing comma."""
            columns: list[exp.Expr] = []
            watermark: exp.Expr | None = None
            primary_key: exp.Expr | None = None
            if not self._match(TokenType.L_PAREN):
                return None, None, None
            while True:
                element_start = self._curr
                if self._match_text_seq("WATERMARK", "FOR"):
                    if watermark is not None:
                        self.raise_error("Only one WATERMARK per stream", element_start)
                    watermark = self._parse_watermark()
                elif source and self._match(TokenType.PRIMARY_KEY):
                    if primary_key is not None or not self._match(TokenType.L_PAREN, advance=False):
                        self.raise_error("Expected one PRIMARY KEY (columns)", element_start)
                    primary_key = self._parse_primary_key()
                else:
                    columns.append(self._parse_stream_column())
                if not self._match(TokenType.COMMA):
                    break
                if source and self._match(TokenType.R_PAREN, advance=False):
                    break  # RisingWave accepts `(a INT, b INT,)`
            self._match_r_paren()
            return columns or None, watermark, primary_key

        def _parse_watermark(self) -> exp.Expr:
            column = self._parse_id_var(any_token=False)
            if column is None:
                self.raise_error("Expected a column name")
            if not self._match(TokenType.ALIAS):
                self.raise_error("Expected AS")
            return self.expression(
                ast.StreamWatermark(this=column, expression=self._parse_assignment())
            )

        def _parse_stream_column(self) -> exp.Expr:
            name = self._parse_id_var(any_token=False)
            if name is None:
                self.raise_error("Expected a column name")
            kind = self._parse_types(check_func=False, schema=True, allow_identifiers=False)
            if kind is None:
                self.raise_error("Expected a column type")
            constraints: list[exp.Expr] = []
            while True:
                role = self._parse_stream_column_role()
                constraint = role or self._parse_column_constraint()
                if constraint is None:
                    break
                constraints.append(constraint)
            return self.expression(
                exp.ColumnDef(this=name, kind=kind, constraints=constraints or None)
            )

        def _parse_stream_column_role(self) -> exp.Expr | None:
            if self._match_texts(("KEY", "HEADERS")):
                role = ast.StreamColumnRole(this=self._prev.text.upper())
            elif self._match_text_seq("HEADER"):
                self._match_l_paren()
                if not self._match(TokenType.STRING):
                    self.raise_error("Expected a header key string")
                key = exp.Literal.string(self._prev.text)
                self._match_r_paren()
                role = ast.StreamColumnRole(this="HEADER", expression=key)
            else:
                return None
            return self.expression(exp.ColumnConstraint(kind=self.expression(role)))

        def _parse_stream_property(self) -> exp.Expr:
            name = self._parse_dotted_name()
            if name is None:
                self.raise_error("Expected a property name")
                raise AssertionError("unreachable")
            if not self._match(TokenType.EQ):
                self.raise_error("Expected =")
            value = self._parse_property_value()
            return self.expression(exp.Property(this=exp.var(name), value=value))

        def _parse_property_value(self) -> exp.Expr:
            number = self._parse_signed_number()
            if number is not None:
                return exp.Literal(this=number, is_string=False)  # -1 stays one literal
            if self._match(TokenType.TRUE):
                return exp.true()
            if self._match(TokenType.FALSE):
                return exp.false()
            if self._match(TokenType.NULL):
                return exp.null()
            # 'x', E'x', $$x$$, "x" (ksqlDB users write FORMAT = "JSON") and bare words (json) are
            # strings.
            strings = (TokenType.STRING, TokenType.BYTE_STRING, TokenType.HEREDOC_STRING)
            if self._match_set(strings) or self._parse_word():
                return exp.Literal.string(self._prev.text)
            self.raise_error("Expected a property value")
            raise AssertionError("unreachable")

        # ---- connectors, sources and sinks ------------------------------------------------------

        def _at_connector_keyword(self) -> bool:
            """After SOURCE / SINK: is the current word the CONNECTOR keyword (a name or IF follows
            it) rather than the name of a source or sink called connector?"""
            curr, after = self._curr, self._next
            if not curr or not after or curr.token_type == TokenType.IDENTIFIER:
                return False
            if curr.text.upper() != "CONNECTOR":
                return False
            return after.token_type == TokenType.IDENTIFIER or (
                _is_word(after) and after.text.upper() not in AFTER_SOURCE_OR_SINK_NAME
            )

        def _parse_connector_name(self) -> exp.Identifier:
            name = self._parse_id_var(any_token=False)
            if not isinstance(name, exp.Identifier):
                self.raise_error("Expected a connector name")
                raise AssertionError("unreachable")
            return name

        def _parse_with_properties(self, required: bool) -> list[exp.Expr] | None:
            if self._match(TokenType.WITH):
                return self._parse_wrapped_csv(self._parse_stream_property)
            if required:
                self.raise_error("Expected WITH")
            return None

        def _parse_create_connector(self, direction: str) -> exp.Expr:
            exists = self._parse_exists(not_=True)
            name = self._parse_connector_name()
            if not self._match_texts(CONNECTOR_KINDS[direction]):
                self.raise_error(f"Expected a {direction} connector kind")
            kind = self._prev.text.upper()
            return self.expression(
                ast.CreateConnector(
                    this=name,
                    direction=direction,
                    kind=kind,
                    properties=self._parse_with_properties(required=True),
                    exists=exists or None,
                )
            )

        def _parse_create_source(self) -> exp.Expr:
            exists = self._parse_exists(not_=True)
            name = self._parse_table_parts(schema=True)
            columns, watermark, primary_key = self._parse_stream_elements(source=True)
            includes = []
            while self._match_text_seq("INCLUDE"):
                includes.append(self._parse_source_include())
            properties = self._parse_with_properties(required=True)
            format_, encode, encode_properties = self._parse_format_encode()
            return self.expression(
                ast.CreateSource(
                    this=name,
                    columns=columns,
                    primary_key=primary_key,
                    watermark=watermark,
                    includes=includes or None,
                    properties=properties,
                    format=format_,
                    encode=encode,
                    encode_properties=encode_properties,
                    exists=exists or None,
                )
            )

        def _parse_source_include(self) -> exp.Expr:
            if not self._match_texts(SOURCE_INCLUDES):
                self.raise_error("Expected what to INCLUDE")
            what = self._prev.text.upper()
            header: exp.Expr | None = None
            kind: exp.Expr | None = None
            if what == "HEADER" and self._match(TokenType.STRING):
                # INCLUDE HEADER 'trace_id' [VARCHAR]: one header, as bytea unless a type follows.
                header = exp.Literal.string(self._prev.text)
                if not self._match(TokenType.ALIAS, advance=False):
                    kind = self._parse_types(check_func=False, schema=True, allow_identifiers=False)
            alias = None
            if self._match(TokenType.ALIAS):
                alias = self._parse_id_var(any_token=False)
                if alias is None:
                    self.raise_error("Expected a column name")
            return self.expression(
                ast.SourceInclude(this=what, expression=header, kind=kind, alias=alias)
            )

        def _parse_format_encode(self) -> tuple[str | None, str | None, list[exp.Expr] | None]:
            """[FORMAT f ENCODE e [(prop = value, ...)]] -> (format, encode, encode properties)."""
            if not self._match_text_seq("FORMAT"):
                return None, None, None
            if not self._match_texts(SOURCE_FORMATS):
                self.raise_error("Expected a format")
            format_ = self._prev.text.upper()
            if not self._match_text_seq("ENCODE"):
                self.raise_error("Expected ENCODE")
            if not self._match_texts(SOURCE_ENCODINGS):
                self.raise_error("Expected an encoding")
            encode = self._prev.text.upper()
            properties = None
            if self._match(TokenType.L_PAREN, advance=False):
                properties = self._parse_wrapped_csv(self._parse_stream_property)
            return format_, encode, properties

        def _parse_create_sink(self) -> exp.Expr:
            exists = self._parse_exists(not_=True)
            name = self._parse_table_parts(schema=True)
            source: exp.Expr | None = None
            query: exp.Expr | None = None
            if self._match(TokenType.FROM):
                source = self._parse_table_parts(schema=True)
            elif self._match(TokenType.ALIAS):
                self._in_sink_query = True
                try:
                    query = self._parse_ddl_query()
                finally:
                    self._in_sink_query = False
                if query is None:
                    self.raise_error("Expected a query after AS")
            else:
                self.raise_error("Expected FROM or AS")
            connector = self._parse_connector_name() if self._match(TokenType.INTO) else None
            properties = self._parse_with_properties(required=connector is None)
            format_, encode, encode_properties = self._parse_format_encode()
            return self.expression(
                ast.CreateSink(
                    this=name,
                    source=source,
                    expression=query,
                    connector=connector,
                    properties=properties,
                    format=format_,
                    encode=encode,
                    encode_properties=encode_properties,
                    exists=exists or None,
                )
            )

        # ---- DROP ----------------------------------------------------------------------------

        def _parse_drop_statement(self) -> exp.Expr:
            if self._match_texts(("ROLE", "USER")):
                kind = self._prev.text.upper()
                exists = self._parse_exists()
                names = self._parse_csv(self._parse_role_name)
                return self.expression(ast.DropRole(kind=kind, expressions=names, exists=exists or None))
            if self._match_text_seq("CONNECTOR"):
                return self._parse_drop_connector(None)
            if self._match_texts(("FUNCTION", "AGGREGATE")):
                return self._parse_drop_function(self._prev.text.upper())
            if not self._match_texts(STREAMING_DROP_KINDS):
                return self._parse_drop()
            kind = self._prev.text.upper()
            if kind in ("SOURCE", "SINK") and self._at_connector_keyword():
                self._advance()
                return self._parse_drop_connector(kind.lower())
            if kind == "INDEX":
                self._match_text_seq("CONCURRENTLY")
            exists = self._parse_exists()
            tables = self._parse_csv(lambda: self._parse_table_parts(schema=True))
            cascade = self._match_text_seq("CASCADE")
            restrict = not cascade and self._match_text_seq("RESTRICT")
            return self.expression(
                exp.Drop(
                    kind=kind,
                    tables=tables,
                    exists=exists or None,
                    cascade=cascade or None,
                    restrict=restrict or None,
                )
            )

        def _parse_drop_function(self, kind: str) -> exp.Expr:
            """DROP { FUNCTION | AGGREGATE } [IF EXISTS] name [(argument types)], ... [CASCADE |
            RESTRICT]. Functions are not overloaded, so an argument list is read and not kept."""
            exists = self._parse_exists()

            def one() -> exp.Expr | None:
                name = self._parse_table_parts(schema=True)
                if self._match(TokenType.L_PAREN):
                    depth = 1
                    while depth and self._curr:
                        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(self._curr.token_type, 0)
                        self._advance()
                    if depth:
                        self.raise_error("Expected )")
                return name

            names = self._parse_csv(one)
            cascade = self._match_text_seq("CASCADE")
            restrict = not cascade and self._match_text_seq("RESTRICT")
            return self.expression(exp.Drop(kind=kind, tables=names, exists=exists or None,
                                            cascade=cascade or None, restrict=restrict or None))

        def _parse_drop_connector(self, direction: str | None) -> exp.Expr:
            exists = self._parse_exists()
            names = self._parse_csv(lambda: exp.Table(this=self._parse_connector_name()))
            cascade = self._match_text_seq("CASCADE")
            restrict = not cascade and self._match_text_seq("RESTRICT")
            return self.expression(
                ast.DropConnector(
                    kind="CONNECTOR",
                    direction=direction,
                    tables=names,
                    exists=exists or None,
                    cascade=cascade or None,
                    restrict=restrict or None,
                )
            )

        # ---- roles and privileges -------------------------------------------------------------

        ROLE_FLAGS = ("LOGIN", "NOLOGIN", "SUPERUSER", "NOSUPERUSER")
        PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "ALL")

        def _parse_role_name(self) -> exp.Identifier:
            ident = self._parse_id_var(any_token=False)
            if not isinstance(ident, exp.Identifier):
                self.raise_error("Expected a role name")
            return t.cast(exp.Identifier, ident)

        def _parse_role_statement(self, node: type[exp.Expr], kind: str) -> exp.Expr:
            name = self._parse_role_name()
            self._match(TokenType.WITH)
            options: list[exp.Expr] = []
            while self._curr and self._curr.token_type != TokenType.SEMICOLON:
                if self._match_texts(self.ROLE_FLAGS):
                    options.append(self.expression(ast.RoleOption(this=self._prev.text.upper())))
                elif self._match_text_seq("PASSWORD"):
                    # E'...' (psycopg's quoting of a password with a backslash) is a string too.
                    if self._match(TokenType.NULL):
                        value: exp.Expr | None = exp.Null()
                    elif self._match(TokenType.BYTE_STRING):
                        value = exp.Literal.string(self._prev.text)
                    else:
                        value = self._parse_string()
                    if value is None:
                        self.raise_error("Expected a password string or NULL")
                    options.append(self.expression(ast.RoleOption(this="PASSWORD", expression=value)))
                else:
                    self.raise_error("Unsupported role option (LOGIN, NOLOGIN, SUPERUSER, NOSUPERUSER, PASSWORD)")
            if node is ast.AlterRole and not options:
                self.raise_error("Expected a role option")
            return self.expression(node(this=name, kind=kind, options=options or None))

        def _parse_alter_statement(self) -> exp.Expr:
            if self._match_texts(("ROLE", "USER")):
                return self._parse_role_statement(ast.AlterRole, self._prev.text.upper())
            rename = self._parse_rename_relation()
            return rename if rename is not None else self._parse_alter()

        def _parse_rename_relation(self) -> exp.Expr | None:
            """ALTER <kind> [IF EXISTS] name RENAME TO new_name; None (nothing consumed) for any
            other ALTER, which sqlglot's own parser takes."""
            start = self._index
            if self._match_text_seq("MATERIALIZED", "VIEW"):
                kind = "MATERIALIZED VIEW"
            elif self._match_texts(("TABLE", "STREAM", "VIEW")):
                kind = self._prev.text.upper()
            else:
                return None
            exists = self._parse_exists()
            name = self._parse_table_parts(schema=True)
            if name is None or not self._match_text_seq("RENAME", "TO"):
                self._retreat(start)
                return None
            to = self._parse_table_parts(schema=True)
            if to is None:
                self.raise_error("Expected the new name")
            return self.expression(ast.RenameRelation(this=name, kind=kind, to=to, exists=exists or None))

        def _parse_grant_privileges(self, node: type[exp.Expr], preposition: str) -> exp.Expr:
            privileges: list[str] = []
            while True:
                if not self._match_texts(self.PRIVILEGES):
                    self.raise_error("Expected a privilege (SELECT, INSERT, UPDATE, DELETE or ALL)")
                privileges.append(self._prev.text.upper())
                if privileges[-1] == "ALL":
                    self._match_text_seq("PRIVILEGES")
                if not self._match(TokenType.COMMA):
                    break
            if not self._match(TokenType.ON):
                self.raise_error("Expected ON")
            self._match(TokenType.TABLE)
            tables = self._parse_csv(lambda: self._parse_table_parts(schema=True))
            if not self._match_text_seq(preposition):
                self.raise_error(f"Expected {preposition}")
            roles = self._parse_csv(self._parse_role_name)
            return self.expression(node(privileges=[exp.Var(this=p) for p in privileges], tables=tables,
                                        roles=roles))

        # ---- COPY ----------------------------------------------------------------------------

        def _parse_copy_statement(self) -> exp.Expr:
            this: exp.Expr | None
            columns = None
            if self._match(TokenType.L_PAREN):
                this = self._parse_statement()
                if this is None:
                    self.raise_error("Expected a query")
                    raise AssertionError("unreachable")
                if isinstance(this, exp.Query):
                    this = self._parse_emit_changes(this)
                self._match_r_paren()
                is_query = True
            else:
                this = self._parse_table_parts(schema=True)
                if self._match(TokenType.L_PAREN, advance=False):
                    columns = self._parse_wrapped_csv(lambda: self._parse_id_var(any_token=False))
                is_query = False

            if self._match(TokenType.FROM) and not is_query:
                direction = "FROM"
            elif self._match_text_seq("TO"):
                direction = "TO"
            else:
                self.raise_error("Expected FROM or TO", self._prev if is_query else self._curr)
                raise AssertionError("unreachable")

            target = None
            program = False
            if not self._match_texts(("STDIN", "STDOUT")):
                program = self._match_text_seq("PROGRAM")
                if not self._match(TokenType.STRING):
                    self.raise_error("Expected STDIN, STDOUT or a file name")
                target = exp.Literal.string(self._prev.text)

            with_ = self._match(TokenType.WITH)
            if self._match(TokenType.L_PAREN):
                options = self._parse_copy_options()
            else:
                options = self._parse_legacy_copy_options()
                if with_ and not options:
                    self.raise_error("Expected COPY options")
            return self.expression(
                ast.CopyStatement(
                    this=this,
                    columns=columns,
                    direction=direction,
                    properties=options or None,
                    target=target,
                    program=program or None,
                )
            )

        def _copy_option(self, name: str, value: exp.Expr | None) -> exp.Expr:
            """Normalizes one option: FORMAT lower-case text, booleans as exp.Boolean."""
            if name == "format" and isinstance(value, exp.Literal):
                value = exp.Literal.string(value.name.lower())
            elif name in BOOLEAN_COPY_OPTIONS:
                word = "true" if value is None else value.name.lower()
                if word in TRUE_WORDS:
                    value = exp.true()
                elif word in FALSE_WORDS:
                    value = exp.false()
            return self.expression(exp.Property(this=exp.var(name), value=value or exp.true()))

        def _parse_copy_options(self) -> list[exp.Expr]:
            """`(name [value], ...)` after the opening parenthesis: Postgres' generic options."""
            options = []
            while True:
                word = self._parse_word()
                if word is None:
                    self.raise_error("Expected a COPY option")
                    raise AssertionError("unreachable")
                value: exp.Expr | None = None
                if not self._match_set((TokenType.COMMA, TokenType.R_PAREN), advance=False):
                    value = self._parse_copy_option_value()
                options.append(self._copy_option(word.text.lower(), value))
                if not self._match(TokenType.COMMA):
                    break
            self._match_r_paren()
            return options

        def _parse_copy_option_value(self) -> exp.Expr:
            number = self._parse_signed_number()
            if number is not None:
                return exp.Literal(this=number, is_string=False)
            if self._match_set((TokenType.STRING, TokenType.BYTE_STRING)):
                return exp.Literal.string(self._prev.text)
            if self._match(TokenType.TRUE):
                return exp.true()
            if self._match(TokenType.FALSE):
                return exp.false()
            if self._match(TokenType.STAR):
                return exp.Star()
            if self._match(TokenType.L_PAREN, advance=False):
                # FORCE_QUOTE (a, b) and friends: a column list.
                return exp.Tuple(
                    expressions=self._parse_wrapped_csv(lambda: self._parse_id_var(any_token=False))
                )
            word = self._parse_word()
            if word is None:
                self.raise_error("Expected an option value")
                raise AssertionError("unreachable")
            return exp.Literal.string(_word_text(word))

        def _parse_legacy_copy_options(self) -> list[exp.Expr]:
            """The pre-9.0 spellings: BINARY, CSV, HEADER, DELIMITER [AS] 'x', NULL [AS] 'x',
            QUOTE [AS] 'x', ESCAPE [AS] 'x', FORCE QUOTE cols|*, FORCE NOT NULL cols, FREEZE."""
            options = []
            while self._curr:
                if self._match(TokenType.BINARY):
                    options.append(self._copy_option("format", exp.Literal.string("binary")))
                elif self._match_text_seq("CSV"):
                    options.append(self._copy_option("format", exp.Literal.string("csv")))
                elif self._match_texts(("HEADER", "FREEZE")):
                    options.append(self._copy_option(self._prev.text.lower(), None))
                elif self._match_texts(("DELIMITER", "NULL", "QUOTE", "ESCAPE", "ENCODING")):
                    name = self._prev.text.lower()
                    self._match(TokenType.ALIAS)
                    if not self._match_set((TokenType.STRING, TokenType.BYTE_STRING)):
                        self.raise_error("Expected a string")
                    options.append(self._copy_option(name, exp.Literal.string(self._prev.text)))
                elif self._match_text_seq("FORCE"):
                    if self._match_text_seq("NOT", "NULL"):
                        name = "force_not_null"
                    elif self._match_text_seq("NULL"):
                        name = "force_null"
                    elif self._match_text_seq("QUOTE"):
                        name = "force_quote"
                    else:
                        self.raise_error("Expected QUOTE, NOT NULL or NULL")
                    if self._match(TokenType.STAR):
                        value: exp.Expr = exp.Star()
                    else:
                        value = exp.Tuple(
                            expressions=self._parse_csv(lambda: self._parse_id_var(any_token=False))
                        )
                    options.append(self._copy_option(name, value))
                else:
                    break
            return options

    class Generator(PostgresGenerator):
        TRANSFORMS = {
            **PostgresGenerator.TRANSFORMS,
            # Postgres's generator casts ROUND's argument to bare DECIMAL (Postgres has no
            # round(double, int)); read back by Spark that is decimal(10, 0), which rounds away
            # the digits. Our SQL is read back by our own parser, so keep the call as written.
            exp.Round: lambda self, e: self.func("ROUND", e.this, e.args.get("decimals")),
            _SelectStreamMark: lambda self, e: " STREAM",
            ast.CreateStream: lambda self, e: self.createstream_sql(e),
            ast.StreamColumnRole: lambda self, e: self.streamcolumnrole_sql(e),
            ast.StreamWatermark: lambda self, e: self.streamwatermark_sql(e),
            ast.ShowObjects: lambda self, e: f"SHOW {e.this}",
            ast.ShowCreate: lambda self, e: f"SHOW CREATE {e.args['kind']} {self.sql(e, 'this')}",
            ast.ShowVariable: lambda self, e: f"SHOW {e.this}",
            ast.SetVariable: lambda self, e: self.setvariable_sql(e),
            ast.DescribeRelation: lambda self, e: self.describerelation_sql(e),
            ast.ExplainStatement: lambda self, e: self.explainstatement_sql(e),
            ast.Flush: lambda self, e: self.flush_sql(e),
            ast.SelectStream: lambda self, e: self.selectstream_sql(e),
            ast.EmitChanges: lambda self, e: f"{self.sql(e, 'this')} EMIT CHANGES" + (
                f" WITH ({self.stream_properties_sql(e.args['properties'])})" if e.args.get("properties") else ""),
            ast.TransactionControl: lambda self, e: str(e.this) + (
                f" {self.sql(e, 'expression')}" if e.args.get("expression") else ""),
            ast.Discard: lambda self, e: f"DISCARD {e.this}",
            ast.Deallocate: lambda self, e: self.deallocate_sql(e),
            ast.CopyStatement: lambda self, e: self.copystatement_sql(e),
            ast.Subscribe: lambda self, e: self.subscribe_sql(e),
            ast.EmitOnWindowClose: lambda self, e: f"{self.sql(e, 'this')} EMIT ON WINDOW CLOSE",
            ast.DeclareCursor: lambda self, e: f"DECLARE {self.sql(e, 'this')} CURSOR FOR {self.sql(e, 'expression')}",
            ast.FetchCursor: lambda self, e: self.fetchcursor_sql(e),
            ast.CloseCursor: lambda self, e: f"CLOSE {e.this.name if isinstance(e.this, exp.Literal) else self.sql(e, 'this')}",
            ast.CreateConnector: lambda self, e: self.createconnector_sql(e),
            ast.CreateSource: lambda self, e: self.createsource_sql(e),
            ast.SourceInclude: lambda self, e: self.sourceinclude_sql(e),
            ast.CreateSink: lambda self, e: self.createsink_sql(e),
            ast.DropConnector: lambda self, e: self.dropconnector_sql(e),
            ast.RoleOption: lambda self, e: e.this + (f" {self.sql(e, 'expression')}" if e.args.get("expression") else ""),
            ast.CreateRole: lambda self, e: self.role_sql("CREATE", e),
            ast.AlterRole: lambda self, e: self.role_sql("ALTER", e),
            ast.RenameRelation: lambda self, e: f"ALTER {e.args['kind']} {'IF EXISTS ' if e.args.get('exists') else ''}"
                                                f"{self.sql(e, 'this')} RENAME TO {self.sql(e, 'to')}",
            ast.DropRole: lambda self, e: f"DROP {e.args['kind']} {'IF EXISTS ' if e.args.get('exists') else ''}"
                                          f"{self.expressions(e, flat=True)}",
            ast.GrantPrivileges: lambda self, e: self.privileges_sql("GRANT", "TO", e),
            ast.RevokePrivileges: lambda self, e: self.privileges_sql("REVOKE", "FROM", e),
        }

        def role_sql(self, verb: str, expression: exp.Expr) -> str:
            options = " ".join(self.sql(o) for o in expression.args.get("options") or [])
            return f"{verb} {expression.args['kind']} {self.sql(expression, 'this')}" + (
                f" WITH {options}" if options else "")

        def privileges_sql(self, verb: str, preposition: str, expression: exp.Expr) -> str:
            privileges = ", ".join(p.name for p in expression.args["privileges"])
            tables = ", ".join(self.sql(t) for t in expression.args["tables"])
            roles = ", ".join(self.sql(r) for r in expression.args["roles"])
            return f"{verb} {privileges} ON TABLE {tables} {preposition} {roles}"

        def subscribe_sql(self, expression: ast.Subscribe) -> str:
            target = expression.this
            text = self.sql(target) if isinstance(target, exp.Table) else f"({self.sql(target)})"
            if expression.args.get("properties"):
                text += f" WITH ({self.stream_properties_sql(expression.args['properties'])})"
            return f"SUBSCRIBE TO {text}"

        def fetchcursor_sql(self, expression: ast.FetchCursor) -> str:
            count = expression.args.get("count")
            parts = ["FETCH"]
            if count is not None:
                parts.append(count.name)
            parts.append(self.sql(expression, "this"))
            if expression.args.get("properties"):
                parts.append(f"WITH ({self.stream_properties_sql(expression.args['properties'])})")
            return " ".join(parts)

        def createstream_sql(self, expression: ast.CreateStream) -> str:
            parts = ["CREATE"]
            if expression.args.get("replace"):
                parts.append("OR REPLACE")
            if expression.args.get("external"):
                parts.append("EXTERNAL")
            parts.append("TABLE" if expression.args.get("table") else "STREAM")
            if expression.args.get("exists"):
                parts.append("IF NOT EXISTS")
            name = self.sql(expression, "this")
            elements = [self.sql(c) for c in expression.args.get("columns") or []]
            if expression.args.get("watermark"):
                elements.append(self.sql(expression, "watermark"))
            parts.append(f"{name} ({', '.join(elements)})" if elements else name)
            if expression.args.get("properties"):
                parts.append(f"WITH ({self.stream_properties_sql(expression.args['properties'])})")
            if expression.args.get("expression"):
                parts.append(f"AS {self.sql(expression, 'expression')}")
            if expression.args.get("table"):
                parts.append("APPEND ONLY")
            return " ".join(parts)

        def stream_properties_sql(self, properties: list[exp.Expr]) -> str:
            return ", ".join(f"{self.property_name_sql(p.name)} = {self.sql(p, 'value')}" for p in properties)

        def property_name_sql(self, name: str) -> str:
            """A (dotted) option name as the parser reads it back: words bare, others quoted."""
            return ".".join(
                part if _WORD.match(part) else '"' + part.replace('"', '""') + '"' for part in name.split(".")
            )

        def with_properties_sql(self, expression: exp.Expr, key: str = "properties", keyword: str = "WITH ") -> str:
            properties = expression.args.get(key)
            return f" {keyword}({self.stream_properties_sql(properties)})" if properties else ""

        def format_encode_sql(self, expression: exp.Expr) -> str:
            if not expression.args.get("format"):
                return ""
            text = f" FORMAT {expression.args['format']} ENCODE {expression.args['encode']}"
            return text + self.with_properties_sql(expression, "encode_properties", keyword="")

        def createconnector_sql(self, expression: ast.CreateConnector) -> str:
            exists = " IF NOT EXISTS" if expression.args.get("exists") else ""
            direction = str(expression.args["direction"]).upper()
            name = self.sql(expression, "this")
            kind = expression.args["kind"]
            return f"CREATE {direction} CONNECTOR{exists} {name} {kind}{self.with_properties_sql(expression)}"

        def createsource_sql(self, expression: ast.CreateSource) -> str:
            exists = " IF NOT EXISTS" if expression.args.get("exists") else ""
            text = f"CREATE SOURCE{exists} {self.sql(expression, 'this')}"
            elements = [self.sql(c) for c in expression.args.get("columns") or []]
            for key in ("primary_key", "watermark"):
                if expression.args.get(key):
                    elements.append(self.sql(expression, key))
            if elements:
                text += f" ({', '.join(elements)})"
            for include in expression.args.get("includes") or []:
                text += f" {self.sql(include)}"
            return text + self.with_properties_sql(expression) + self.format_encode_sql(expression)

        def sourceinclude_sql(self, expression: ast.SourceInclude) -> str:
            text = f"INCLUDE {expression.this}"
            for key in ("expression", "kind"):
                if expression.args.get(key):
                    text += f" {self.sql(expression, key)}"
            if expression.args.get("alias"):
                text += f" AS {self.sql(expression, 'alias')}"
            return text

        def createsink_sql(self, expression: ast.CreateSink) -> str:
            exists = " IF NOT EXISTS" if expression.args.get("exists") else ""
            text = f"CREATE SINK{exists} {self.sql(expression, 'this')}"
            if expression.args.get("source"):
                text += f" FROM {self.sql(expression, 'source')}"
            else:
                text += f" AS {self.sql(expression, 'expression')}"
            if expression.args.get("connector"):
                text += f" INTO {self.sql(expression, 'connector')}"
            return text + self.with_properties_sql(expression) + self.format_encode_sql(expression)

        def dropconnector_sql(self, expression: ast.DropConnector) -> str:
            direction = expression.args.get("direction")
            parts = ["DROP", f"{str(direction).upper()} CONNECTOR" if direction else "CONNECTOR"]
            if expression.args.get("exists"):
                parts.append("IF EXISTS")
            parts.append(self.expressions(expression, key="tables", flat=True))
            if expression.args.get("cascade"):
                parts.append("CASCADE")
            elif expression.args.get("restrict"):
                parts.append("RESTRICT")
            return " ".join(parts)

        def streamcolumnrole_sql(self, expression: ast.StreamColumnRole) -> str:
            if expression.this == "HEADER":
                return f"HEADER({self.sql(expression, 'expression')})"
            return str(expression.this)

        def streamwatermark_sql(self, expression: ast.StreamWatermark) -> str:
            return f"WATERMARK FOR {self.sql(expression, 'this')} AS {self.sql(expression, 'expression')}"

        def setvariable_sql(self, expression: ast.SetVariable) -> str:
            name = str(expression.this)
            if expression.args.get("reset"):
                return f"RESET {name.upper() if name == 'all' else name}"
            local = "LOCAL " if expression.args.get("local") else ""
            value = expression.args.get("expression")
            value_sql = "DEFAULT" if value is None else self.sql(exp.Literal.string(str(value)))
            return f"SET {local}{name} TO {value_sql}"

        def describerelation_sql(self, expression: ast.DescribeRelation) -> str:
            extended = " EXTENDED" if expression.args.get("extended") else ""
            return f"DESCRIBE{extended} {self.sql(expression, 'this')}"

        def explainstatement_sql(self, expression: ast.ExplainStatement) -> str:
            analyze = " ANALYZE" if expression.args.get("analyze") else ""
            verbose = " VERBOSE" if expression.args.get("verbose") else ""
            return f"EXPLAIN{analyze}{verbose} {self.sql(expression, 'this')}"

        def flush_sql(self, expression: ast.Flush) -> str:
            name = self.sql(expression, "this")
            return f"FLUSH {name}" if name else "FLUSH"

        def selectstream_sql(self, expression: ast.SelectStream) -> str:
            select = expression.this
            if not isinstance(select, exp.Select):
                raise ValueError("SELECT STREAM wraps a SELECT")
            select = select.copy()
            select.set("hint", _SelectStreamMark())
            return self.sql(select)

        def deallocate_sql(self, expression: ast.Deallocate) -> str:
            if expression.args.get("all"):
                return "DEALLOCATE ALL"
            return f"DEALLOCATE {self.sql(expression, 'this')}"

        def copystatement_sql(self, expression: ast.CopyStatement) -> str:
            this = expression.this
            source = self.sql(this) if isinstance(this, exp.Table) else f"({self.sql(this)})"
            columns = expression.args.get("columns")
            if columns:
                source += f" ({', '.join(self.sql(c) for c in columns)})"
            direction = str(expression.args["direction"]).upper()
            target = expression.args.get("target")
            if target is None:
                target_sql = "STDIN" if direction == "FROM" else "STDOUT"
            else:
                program = "PROGRAM " if expression.args.get("program") else ""
                target_sql = f"{program}{self.sql(target)}"
            sql = f"COPY {source} {direction} {target_sql}"
            options = expression.args.get("properties")
            if options:
                sql += f" WITH ({', '.join(self.copy_option_sql(o) for o in options)})"
            return sql

        def copy_option_sql(self, option: exp.Expr) -> str:
            name = option.name.upper()
            value = option.args.get("value")
            if name == "FORMAT" and isinstance(value, exp.Literal):
                return f"{name} {value.name}"
            if isinstance(value, exp.Tuple):
                return f"{name} ({self.expressions(value, flat=True)})"
            return f"{name} {self.sql(value)}"
