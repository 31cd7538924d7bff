"""Syntax nodes for StreamDB's statements that Postgres does not have.

The dialect (streamdb/sql/dialect.py) parses into these nodes and generates SQL
back from them; the planner consumes them. Standard Postgres statements keep
sqlglot's own nodes (exp.Create, exp.Insert, exp.Select, exp.Copy, exp.Set, ...).

Conventions every node follows:
- relation names are exp.Table nodes (db = schema when qualified);
- WITH (...) options are a list of exp.Property(this=exp.Var(name, lower-cased),
  value=exp.Literal | exp.Boolean | exp.Null) under the arg "properties";
- boolean flags (exists, replace, cascade, ...) are Python bools or absent.
"""

from __future__ import annotations

from sqlglot import exp


class CreateStream(exp.Expression):
    """CREATE [OR REPLACE] [EXTERNAL] STREAM [IF NOT EXISTS] name [(col type [KEY|HEADERS|HEADER('k')], ...)]
    [WITH (prop = value, ...)] [AS query]"""

    arg_types = {
        "this": True,  # exp.Table
        "columns": False,  # list[exp.ColumnDef]; absent => schemaless JSON stream
        "watermark": False,  # exp.Watermark-like: StreamWatermark (issue 3)
        "properties": False,  # list[exp.Property]
        "replace": False,
        "external": False,
        "exists": False,  # IF NOT EXISTS
        "expression": False,  # AS SELECT ... (derived stream, issue 3)
        "table": False,  # written as RisingWave's CREATE TABLE (... WATERMARK FOR ...) APPEND ONLY
    }


# exp.Expression first, like sqlglot's own constraint kinds: ColumnConstraintKind is only a
# trait and lacks Expression's value equality and hashing.
class StreamColumnRole(exp.Expression, exp.ColumnConstraintKind):
    """KEY, HEADERS or HEADER('k') after a stream column's type. `this` is the role
    ('KEY' | 'HEADERS' | 'HEADER'); `expression` the header key literal for HEADER."""

    arg_types = {"this": True, "expression": False}


class StreamWatermark(exp.Expression):
    """WATERMARK FOR col AS col - INTERVAL '5' SECOND inside a column list (issue 3)."""

    arg_types = {"this": True, "expression": True}


class ShowObjects(exp.Expression):
    """SHOW STREAMS | TABLES | ALL | MATERIALIZED VIEWS | VIEWS | QUERIES | SOURCES | SINKS | CONNECTORS.
    `this` is the upper-case kind string, e.g. 'STREAMS' or 'MATERIALIZED VIEWS'."""

    arg_types = {"this": True}


class ShowCreate(exp.Expression):
    """SHOW CREATE STREAM | TABLE | VIEW | MATERIALIZED VIEW | SOURCE | SINK name.
    `kind` is the upper-case kind string."""

    arg_types = {"this": True, "kind": True}


class ShowVariable(exp.Expression):
    """SHOW name (a session setting, e.g. SHOW search_path, SHOW TIME ZONE -> 'timezone')."""

    arg_types = {"this": True}  # str, lower-cased setting name


class SetVariable(exp.Expression):
    """SET [SESSION | LOCAL] name { = | TO } value[, ...] | SET TIME ZONE value; RESET name | RESET ALL.
    `this` is the lower-cased setting name ('all' for RESET ALL), `expression` the value as a
    string (absent or None for RESET / DEFAULT), `local` True for SET LOCAL."""

    arg_types = {"this": True, "expression": False, "local": False, "reset": False}


class DescribeRelation(exp.Expression):
    """DESCRIBE [EXTENDED] name  (also DESC name)."""

    arg_types = {"this": True, "extended": False}


class ExplainStatement(exp.Expression):
    """EXPLAIN [ANALYZE] [VERBOSE] statement. `this` is the parsed inner statement."""

    arg_types = {"this": True, "analyze": False, "verbose": False}


class Flush(exp.Expression):
    """FLUSH [name]: returns once every acknowledged write is reflected everywhere."""

    arg_types = {"this": False}


class SelectStream(exp.Expression):
    """SELECT STREAM ...: the query's input relations are read as their change logs.
    `this` is the exp.Select parsed as if STREAM were absent."""

    arg_types = {"this": True}


class EmitChanges(exp.Expression):
    """<query> EMIT CHANGES [WITH (snapshot = true|false)]: a push query (issues 3, 14).
    `this` is the query; `properties` the WITH options."""

    arg_types = {"this": True, "properties": False}


class TransactionControl(exp.Expression):
    """BEGIN / START TRANSACTION / COMMIT / END / ROLLBACK / ABORT, normalized, and savepoints.
    `this` is 'BEGIN' | 'COMMIT' | 'ROLLBACK' | 'SAVEPOINT' | 'RELEASE' | 'ROLLBACK TO';
    `expression` is the savepoint's name (an exp.Identifier) for the last three."""

    arg_types = {"this": True, "expression": False}


class Discard(exp.Expression):
    """DISCARD ALL | PLANS | SEQUENCES | TEMP; DEALLOCATE [PREPARE] name | ALL is Deallocate."""

    arg_types = {"this": True}


class Deallocate(exp.Expression):
    arg_types = {"this": False, "all": False}


class CopyStatement(exp.Expression):
    """COPY name [(cols)] FROM STDIN | COPY name|(query) TO STDOUT [WITH] (options) | legacy options.
    `this` is exp.Table or a query; `columns` a list of exp.Identifier; `direction` 'FROM'|'TO';
    `properties` the options as exp.Property list (format, delimiter, header, null, quote, escape)."""

    arg_types = {
        "this": True,
        "columns": False,
        "direction": True,
        "properties": False,
        # Absent for STDIN/STDOUT; an exp.Literal string for a server-side file path (or, with
        # program=True, for COPY ... PROGRAM 'command'). Parsed so the planner can reject them.
        "target": False,
        "program": False,
    }


class Subscribe(exp.Expression):
    """SUBSCRIBE [TO] name | (query) [WITH (snapshot = true|false)] (as in Materialize).
    `this` is an exp.Table or a query; `properties` the WITH options."""

    arg_types = {"this": True, "properties": False}


class DeclareCursor(exp.Expression):
    """DECLARE name CURSOR [WITHOUT HOLD] FOR statement (a query, SUBSCRIBE or an EMIT CHANGES query)."""

    arg_types = {"this": True, "expression": True}


class FetchCursor(exp.Expression):
    """FETCH [FORWARD] [n | ALL] [FROM | IN] name [WITH (timeout = '1s')].
    `count` is a number literal or 'ALL' (absent: 1)."""

    arg_types = {"this": True, "count": False, "properties": False}


class CloseCursor(exp.Expression):
    """CLOSE name | CLOSE ALL."""

    arg_types = {"this": True}


class EmitOnWindowClose(exp.Expression):
    """<query> EMIT ON WINDOW CLOSE, in CREATE MATERIALIZED VIEW: only windows the watermark has
    closed, each emitted once and final. `this` is the query."""

    arg_types = {"this": True}


# ---- connectors, sources and sinks ---------------------------------------------------------
# Connector names are not relations (no schema): an exp.Identifier, except inside exp.Drop's
# `tables`, which holds exp.Table nodes for every kind. Word-valued args (direction, kind, format,
# encode) are plain strings.


class CreateConnector(exp.Expression):
    """CREATE {SOURCE | SINK} CONNECTOR [IF NOT EXISTS] name kind WITH (prop = value, ...).
    `kind` is upper-case: 'KAFKA' | 'FILE' for sources, 'KAFKA' | 'POSTGRES' | 'FILE' for sinks."""

    arg_types = {
        "this": True,  # exp.Identifier
        "direction": True,  # 'source' | 'sink'
        "kind": True,
        "properties": True,  # list[exp.Property]
        "exists": False,  # IF NOT EXISTS
    }


class SourceInclude(exp.Expression):
    """INCLUDE KEY | TIMESTAMP | PARTITION | OFFSET | PAYLOAD | HEADER ['name' [type]] [AS alias],
    RisingWave's extra columns from the message's metadata. `this` is the upper-case word,
    `expression` the header name literal, `kind` its exp.DataType, `alias` an exp.Identifier."""

    arg_types = {"this": True, "expression": False, "kind": False, "alias": False}


class CreateSource(exp.Expression):
    """RisingWave's CREATE SOURCE [IF NOT EXISTS] name [(col type [KEY|...], ..., [PRIMARY KEY (cols)],
    [WATERMARK FOR ...])] [INCLUDE ...]... WITH (prop = value, ...)
    [FORMAT f ENCODE e [(prop = value, ...)]]. Property names keep their dots
    (properties.bootstrap.server). `format` / `encode` are upper-case ('PLAIN', 'JSON')."""

    arg_types = {
        "this": True,  # exp.Table
        "columns": False,  # list[exp.ColumnDef], as CreateStream's
        "primary_key": False,  # exp.PrimaryKey (table-level PRIMARY KEY (a, b))
        "watermark": False,  # StreamWatermark
        "includes": False,  # list[SourceInclude]
        "properties": True,  # list[exp.Property]
        "format": False,  # 'PLAIN' | 'UPSERT' | 'DEBEZIUM' | ...
        "encode": False,  # 'JSON' | 'CSV' | 'AVRO' | 'BYTES' | ...; present iff format is
        "encode_properties": False,  # list[exp.Property] of ENCODE e (...)
        "exists": False,  # IF NOT EXISTS
    }


class CreateSink(exp.Expression):
    """CREATE SINK [IF NOT EXISTS] name {FROM relation | AS query} [INTO connector]
    [WITH (prop = value, ...)] [FORMAT f ENCODE e [(prop = value, ...)]]. Exactly one of `source`
    and `expression`; at least one of `connector` and `properties` (RisingWave's form names its
    connector in the options: WITH (connector = 'kafka', ...))."""

    arg_types = {
        "this": True,  # exp.Table
        "source": False,  # exp.Table: FROM relation
        "expression": False,  # AS query
        "connector": False,  # exp.Identifier: INTO connector
        "properties": False,  # list[exp.Property]
        "format": False,
        "encode": False,
        "encode_properties": False,
        "exists": False,  # IF NOT EXISTS
    }


class RenameRelation(exp.Expression):
    """ALTER { TABLE | STREAM | VIEW | MATERIALIZED VIEW } [IF EXISTS] name RENAME TO new_name.
    `kind` is the keyword(s) as written (upper case); `this` and `to` are exp.Table nodes."""

    arg_types = {"this": True, "kind": True, "to": True, "exists": False}


class DropConnector(exp.Drop):
    """DROP [SOURCE | SINK] CONNECTOR [IF EXISTS] name, ... [CASCADE | RESTRICT]: an exp.Drop with
    kind 'CONNECTOR' whose `direction` ('source' | 'sink', absent for DROP CONNECTOR) keeps the
    qualifier. The names are exp.Table nodes in `tables`, as for every DROP."""

    arg_types = {**exp.Drop.arg_types, "direction": False}


# ---- roles and privileges ------------------------------------------------------------------


class RoleOption(exp.Expression):
    """One option of CREATE/ALTER ROLE: `this` is the upper-case word (LOGIN, NOLOGIN, SUPERUSER,
    NOSUPERUSER, PASSWORD); `expression` the password literal or exp.Null for PASSWORD."""

    arg_types = {"this": True, "expression": False}


class CreateRole(exp.Expression):
    """CREATE ROLE | USER name [[WITH] option ...]. `kind` is 'ROLE' or 'USER' (USER implies LOGIN)."""

    arg_types = {"this": True, "kind": True, "options": False}


class AlterRole(exp.Expression):
    """ALTER ROLE | USER name [WITH] option ..."""

    arg_types = {"this": True, "kind": True, "options": False}


class DropRole(exp.Expression):
    """DROP ROLE | USER [IF EXISTS] name [, ...]"""

    arg_types = {"kind": True, "expressions": True, "exists": False}


class GrantPrivileges(exp.Expression):
    """GRANT privilege [, ...] ON [TABLE] name [, ...] TO role [, ...]. `privileges` are upper-case
    words (SELECT, INSERT, UPDATE, DELETE, ALL); `roles` identifiers (PUBLIC for everyone)."""

    arg_types = {"privileges": True, "tables": True, "roles": True}


class RevokePrivileges(exp.Expression):
    """REVOKE privilege [, ...] ON [TABLE] name [, ...] FROM role [, ...]"""

    arg_types = {"privileges": True, "tables": True, "roles": True}
