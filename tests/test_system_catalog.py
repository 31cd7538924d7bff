"""System catalogs and Postgres function emulation, driven by the queries real tools send.

tests/fixtures/psql_queries.sql and sqlalchemy_queries.sql were captured from psql 15 (-E)
and SQLAlchemy 2 (postgres dialect, psycopg) against a real PostgreSQL 15 (see
tests/fixtures/capture_queries.py). Each query runs here through a miniature of the ad hoc
query pipeline: parse (postgres) -> rename system tables to their registered names ->
rewrite_for_duckdb -> transpile to DuckDB -> execute over the Arrow system tables.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
import sqlglot
from sqlglot import exp

from streamdb import types as T
from streamdb.catalog import CatalogSnapshot, ColumnDef, RelationDef
from streamdb.errors import UndefinedTable
from streamdb.planner import pg_functions
from streamdb.planner.context import PlanContext, SessionInfo
from streamdb.runtime import system_catalog as sc
from streamdb.runtime.duckdb_functions import install_duckdb_functions

FIXTURES = Path(__file__).parent / "fixtures"


def sample_catalog() -> CatalogSnapshot:
    events = RelationDef(
        id=0, name="events", kind="stream",
        columns=(ColumnDef("id", T.BIGINT), ColumnDef("user_id", T.INTEGER, role="KEY"),
                 ColumnDef("kind", T.TEXT), ColumnDef("payload", T.JSONB),
                 ColumnDef("ts", T.TIMESTAMPTZ)),
        create_sql="CREATE STREAM events (id bigint, user_id int KEY, kind text, payload jsonb, "
                   "ts timestamptz) WITH (kafka_topic='events')")
    users = RelationDef(
        id=1, name="users", kind="table",
        columns=(ColumnDef("id", T.INTEGER, nullable=False), ColumnDef("name", T.VARCHAR, False),
                 ColumnDef("email", T.TEXT, default_sql="'none'"),
                 ColumnDef("created_at", T.TIMESTAMP)),
        primary_key=("id",),
        create_sql="CREATE TABLE users (id int PRIMARY KEY, name varchar NOT NULL, email text, "
                   "created_at timestamp)")
    v_users = RelationDef(
        id=2, name="v_users", kind="view",
        columns=(ColumnDef("id", T.INTEGER), ColumnDef("name", T.VARCHAR)),
        create_sql="CREATE VIEW v_users AS SELECT id, name FROM users", depends_on=(1,))
    mv_counts = RelationDef(
        id=3, name="mv_counts", kind="materialized_view",
        columns=(ColumnDef("kind", T.TEXT), ColumnDef("n", T.BIGINT)),
        create_sql="CREATE MATERIALIZED VIEW mv_counts AS SELECT kind, count(*) AS n FROM events "
                   "GROUP BY kind", depends_on=(0,))
    rels = {r.name: r for r in (events, users, v_users, mv_counts)}
    return CatalogSnapshot(version=1, relations=rels)


SESSION = SessionInfo(user="streamdb", database="streamdb", application_name="psql",
                      backend_pid=4242)


@pytest.fixture(scope="module")
def ctx() -> PlanContext:
    return PlanContext(catalog=sample_catalog(), session=SESSION)


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    c = duckdb.connect(":memory:")
    install_duckdb_functions(c)
    install_duckdb_functions(c)  # idempotent
    return c


# --- the miniature pipeline -----------------------------------------------------------------

def _rename_system_tables(ast: exp.Expression) -> set[str]:
    """As planner/query.py does: `pg_catalog.pg_class c` -> `sys_pg_catalog__pg_class AS "c"`."""
    ctes = {cte.alias_or_name for cte in ast.find_all(exp.CTE)}
    keys: set[str] = set()
    for table in list(ast.find_all(exp.Table)):
        if not isinstance(table.this, exp.Identifier):
            continue
        schema = table.db or None
        if schema is None and table.name in ctes:
            continue
        key = sc.resolve_system_table(schema, table.name)
        if key is None:
            raise UndefinedTable(f'relation "{table.sql()}" does not exist')
        keys.add(key)
        alias_node = table.args.get("alias")
        alias = alias_node.this.name if alias_node and alias_node.this else table.name
        new = exp.Table(this=exp.to_identifier(sc.registered_name(key)))
        if alias_node is not None and alias_node.args.get("columns"):
            new.set("alias", alias_node)
        else:
            new.set("alias", exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
        for k in ("joins", "laterals", "pivots"):
            if table.args.get(k):
                new.set(k, table.args[k])
        table.replace(new)
    return keys


def to_duckdb(sql: str, ctx: PlanContext) -> tuple[str, set[str]]:
    ast = sqlglot.parse_one(sql, read="postgres")
    keys = _rename_system_tables(ast)
    return pg_functions.rewrite_for_duckdb(ast, ctx).sql(dialect="duckdb"), keys


def run(sql: str, ctx: PlanContext, con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    duck_sql, keys = to_duckdb(sql, ctx)
    names = []
    for key in keys:
        name = sc.registered_name(key)
        con.register(name, sc.build_system_table(key, ctx.catalog, ctx.session))
        names.append(name)
    try:
        table = con.sql(duck_sql).to_arrow_table()
    except duckdb.Error as e:
        raise AssertionError(f"{e}\n--- DuckDB SQL:\n{duck_sql}") from None
    finally:
        for name in names:
            con.unregister(name)
    return [dict(zip(table.column_names, row, strict=True))
            for row in zip(*(c.to_pylist() for c in table.columns), strict=True)]


def load_queries(name: str) -> list[tuple[str, str]]:
    text = (FIXTURES / name).read_text()
    parts = re.split(r"^-- query: (.*)$", text, flags=re.M)
    return [(label.strip(), body.strip()) for label, body in zip(parts[1::2], parts[2::2],
                                                                 strict=True)]


def with_oids(sql: str, catalog: CatalogSnapshot) -> str:
    def sub(m: re.Match[str]) -> str:
        rel = catalog.get(m.group(1))
        return str(rel.oid) if rel is not None else "0"
    return re.sub(r"\{oid:(\w+)\}", sub, sql)


def _is_select(sql: str) -> bool:
    return sql.lstrip().lower().startswith("select")


PSQL = load_queries("psql_queries.sql")
SQLALCHEMY = [q for q in load_queries("sqlalchemy_queries.sql") if _is_select(q[1])]


# --- every captured query runs ---------------------------------------------------------------

@pytest.mark.parametrize(("label", "sql"), PSQL + SQLALCHEMY, ids=[q[0] for q in PSQL + SQLALCHEMY])
def test_captured_query_runs(label: str, sql: str, ctx: PlanContext,
                             con: duckdb.DuckDBPyConnection) -> None:
    run(with_oids(sql, ctx.catalog), ctx, con)


def _psql(label: str) -> str:
    return next(sql for lbl, sql in PSQL if lbl == label)


def _sa(prefix: str, contains: str = "") -> list[str]:
    return [sql for lbl, sql in SQLALCHEMY if lbl.startswith(prefix) or (
        contains and contains in sql)]


# --- psql -------------------------------------------------------------------------------------

def test_psql_list_relations(ctx: PlanContext, con: duckdb.DuckDBPyConnection) -> None:
    rows = run(_psql(r"psql \d #1"), ctx, con)
    assert [(r["Schema"], r["Name"], r["Type"], r["Owner"]) for r in rows] == [
        ("public", "events", "table", "streamdb"),
        ("public", "mv_counts", "materialized view", "streamdb"),
        ("public", "users", "table", "streamdb"),
        ("public", "v_users", "view", "streamdb"),
    ]


def test_psql_dt_dv_dm_di(ctx: PlanContext, con: duckdb.DuckDBPyConnection) -> None:
    assert [r["Name"] for r in run(_psql(r"psql \dt #1"), ctx, con)] == ["events", "users"]
    assert [r["Name"] for r in run(_psql(r"psql \dv #1"), ctx, con)] == ["v_users"]
    assert [r["Name"] for r in run(_psql(r"psql \dm #1"), ctx, con)] == ["mv_counts"]
    rows = run(_psql(r"psql \di #1"), ctx, con)
    assert [(r["Name"], r["Table"]) for r in rows] == [("users_pkey", "users")]
    plus = run(_psql(r"psql \dt+ #1"), ctx, con)
    assert [(r["Name"], r["Size"], r["Description"]) for r in plus] == [
        ("events", "0 bytes", None), ("users", "0 bytes", None)]


def test_psql_describe_table(ctx: PlanContext, con: duckdb.DuckDBPyConnection) -> None:
    users = ctx.catalog.get("users")
    assert users is not None
    found = run(_psql(r"psql \d users #1"), ctx, con)
    assert [(r["oid"], r["nspname"], r["relname"]) for r in found] == [
        (users.oid, "public", "users")]
    info = run(with_oids(_psql(r"psql \d users #2"), ctx.catalog), ctx, con)
    assert info[0]["relkind"] == "r" and info[0]["relhasindex"] is True
    cols = run(with_oids(_psql(r"psql \d users #3"), ctx.catalog), ctx, con)
    assert [(r["attname"], r["format_type"], r["attnotnull"]) for r in cols] == [
        ("id", "integer", True), ("name", "character varying", True),
        ("email", "text", False), ("created_at", "timestamp without time zone", False)]
    assert cols[2]["pg_get_expr"] == "'none'"
    idx = run(with_oids(_psql(r"psql \d users #4"), ctx.catalog), ctx, con)
    assert len(idx) == 1
    assert idx[0]["relname"] == "users_pkey" and idx[0]["indisprimary"] is True
    assert idx[0]["pg_get_indexdef"] == "CREATE UNIQUE INDEX users_pkey ON public.users USING btree (id)"
    assert idx[0]["pg_get_constraintdef"] == "PRIMARY KEY (id)" and idx[0]["contype"] == "p"


def test_psql_describe_stream(ctx: PlanContext, con: duckdb.DuckDBPyConnection) -> None:
    cols = run(with_oids(_psql(r"psql \d events #3"), ctx.catalog), ctx, con)
    assert [(r["attname"], r["format_type"]) for r in cols] == [
        ("id", "bigint"), ("user_id", "integer"), ("kind", "text"), ("payload", "jsonb"),
        ("ts", "timestamp with time zone")]
    assert run(with_oids(_psql(r"psql \d events #2"), ctx.catalog), ctx, con)[0]["relkind"] == "r"


def test_psql_describe_view_definition(ctx: PlanContext, con: duckdb.DuckDBPyConnection) -> None:
    sql = next(s for lbl, s in PSQL if lbl.startswith(r"psql \d+ v_users") and "viewdef" in s)
    rows = run(with_oids(sql, ctx.catalog), ctx, con)
    assert rows[0]["pg_get_viewdef"] == " SELECT id, name FROM users;"


def test_psql_describe_missing_relation(ctx: PlanContext, con: duckdb.DuckDBPyConnection) -> None:
    assert run(_psql(r"psql \d nosuch #1"), ctx, con) == []


def test_psql_databases_schemas_roles(ctx: PlanContext, con: duckdb.DuckDBPyConnection) -> None:
    dbs = run(_psql(r"psql \l #1"), ctx, con)
    assert [(r["Name"], r["Owner"], r["Encoding"]) for r in dbs] == [
        ("streamdb", "streamdb", "UTF8"), ("template1", "streamdb", "UTF8")]
    assert run(_psql(r"psql \dn #1"), ctx, con) == [{"Name": "public", "Owner": "streamdb"}]
    roles = run(_psql(r"psql \du #1"), ctx, con)
    assert len(roles) == 1 and roles[0]["rolname"] == "streamdb" and roles[0]["rolsuper"] is True
    assert roles[0]["memberof"] == []


# --- SQLAlchemy -------------------------------------------------------------------------------

def test_sqlalchemy_connect_queries(ctx: PlanContext, con: duckdb.DuckDBPyConnection) -> None:
    v = run("select pg_catalog.version()", ctx, con)[0]
    assert next(iter(v.values())).startswith("PostgreSQL 15")
    assert list(run("select version()", ctx, con)[0].values())[0].startswith("PostgreSQL 15")
    assert list(run("select current_schema()", ctx, con)[0].values()) == ["public"]


def test_sqlalchemy_inspector(ctx: PlanContext, con: duckdb.DuckDBPyConnection) -> None:
    lists = [s for s in SQLALCHEMY if s[0].startswith("sqlalchemy #") and
             s[1].startswith("SELECT pg_catalog.pg_class.relname \n")]
    results = [[r["relname"] for r in run(sql, ctx, con)] for _, sql in lists]
    assert sorted(results[0]) == ["events", "users"]  # get_table_names
    assert results[1] == ["v_users"]  # get_view_names
    assert results[2] == ["mv_counts"]  # get_materialized_view_names
    cols_sql = next(sql for _, sql in SQLALCHEMY if "AS format_type" in sql and "'users'" in sql)
    cols = run(cols_sql, ctx, con)
    assert [(r["name"], r["format_type"], r["not_null"], r["default"]) for r in cols] == [
        ("id", "integer", True, None), ("name", "character varying", True, None),
        ("email", "text", False, "'none'"),
        ("created_at", "timestamp without time zone", False, None)]
    pk_sql = next(sql for _, sql in SQLALCHEMY if "contype = 'p'" in sql)
    pk = run(with_oids(pk_sql, ctx.catalog), ctx, con)
    assert [(r["conname"], r["cols"]) for r in pk] == [("users_pkey", ["id"])]
    schemas = next(sql for _, sql in SQLALCHEMY if "nspname NOT LIKE" in sql)
    assert [r["nspname"] for r in run(schemas, ctx, con)] == ["information_schema", "public"]


# --- functions, casts, operators ----------------------------------------------------------------

def _one(sql: str, ctx: PlanContext, con: duckdb.DuckDBPyConnection) -> list[Any]:
    duck_sql, keys = to_duckdb(sql, ctx)
    assert not keys
    rows = con.sql(duck_sql).fetchall()
    assert len(rows) == 1
    return list(rows[0])


def test_session_functions(ctx: PlanContext, con: duckdb.DuckDBPyConnection) -> None:
    assert _one("select current_database(), current_user, session_user, user, "
                "current_schemas(true), current_schemas(false), pg_backend_pid()", ctx, con) == [
        "streamdb", "streamdb", "streamdb", "streamdb", ["pg_catalog", "public"], ["public"], 4242]
    row = _one("select pg_postmaster_start_time() is not null, txid_current() > 0, "
               "inet_server_addr(), pg_catalog.pg_encoding_to_char(6), "
               "has_table_privilege('users', 'SELECT'), has_schema_privilege('public', 'USAGE'), "
               "has_database_privilege('streamdb', 'CONNECT'), obj_description(1, 'pg_class'), "
               "col_description(1, 1), shobj_description(1, 'pg_database'), "
               "current_setting('server_version_num'), pg_catalog.pg_get_userbyid(10)", ctx, con)
    assert row == [True, True, "127.0.0.1", "UTF8", True, True, True, None, None, None,
                   "150000", "streamdb"]


def test_format_type(ctx: PlanContext, con: duckdb.DuckDBPyConnection) -> None:
    assert _one("select format_type(23, -1), format_type(25, NULL), "
                "pg_catalog.format_type(1043, 54), format_type(1184, -1), format_type(1007, -1),"
                " format_type(NULL, -1), format_type(16, NULL)", ctx, con) == [
        "integer", "text", "character varying(50)", "timestamp with time zone", "integer[]",
        None, "boolean"]


def test_regclass(ctx: PlanContext, con: duckdb.DuckDBPyConnection) -> None:
    users = ctx.catalog.get("users")
    assert users is not None
    assert _one("select 'users'::regclass, 'public.users'::regclass::oid, "
                "'\"users\"'::pg_catalog.regclass, 'pg_catalog.pg_class'::regclass::oid, "
                "CAST('pg_catalog.pg_constraint' AS REGCLASS)", ctx, con) == [
        users.oid, users.oid, users.oid, 1259, 2606]
    assert _one(f"select {users.oid}::regclass, {users.oid}::regclass::text, "
                "'int4'::regtype::oid, 23::regtype::text, 'pg_catalog'::regnamespace::oid",
                ctx, con) == ["users", "users", 23, "integer", 11]
    rows = run("select c.oid::regclass as r from pg_class c where c.relname in ('users', 'pg_type') "
               "order by 1", ctx, con)
    assert sorted(r["r"] for r in rows) == ["pg_type", "users"]
    with pytest.raises(UndefinedTable, match='relation "nosuch" does not exist') as ei:
        to_duckdb("select 'nosuch'::regclass", ctx)
    assert ei.value.sqlstate == "42P01"
    # A text expression cast through regclass to oid (SQLAlchemy's identity-column probe).
    assert _one("select CAST(CAST(lower('USERS') AS REGCLASS) AS OID)", ctx, con) == [users.oid]


def test_regex_operators_and_collate(ctx: PlanContext, con: duckdb.DuckDBPyConnection) -> None:
    assert _one("select 'abc' ~ '^a', 'abc' !~ '^a', 'ABC' ~* '^a', 'ABC' !~* '^a', "
                "'users' OPERATOR(pg_catalog.~) '^(users)$' COLLATE pg_catalog.default",
                ctx, con) == [True, False, True, False, True]


def test_qualified_builtins(ctx: PlanContext, con: duckdb.DuckDBPyConnection) -> None:
    assert _one("select pg_catalog.lower('AB'), pg_catalog.upper('ab'), "
                "pg_catalog.array_to_string(ARRAY['a', 'b'], ','), 'x'::pg_catalog.text, "
                "pg_catalog.length('abc')", ctx, con) == ["ab", "AB", "a,b", "x", 3]
    rows = run("select pg_catalog.array_agg(relname order by relname) as names from pg_catalog.pg_class "
               "where relnamespace = 2200 and relkind = 'r'", ctx, con)
    assert rows[0]["names"] == ["events", "users"]


def test_version_is_not_duckdbs(ctx: PlanContext, con: duckdb.DuckDBPyConnection) -> None:
    duck_sql, _ = to_duckdb("select version()", ctx)
    assert "PostgreSQL 15" in duck_sql


# --- system tables ----------------------------------------------------------------------------

def test_resolve_system_table() -> None:
    assert sc.resolve_system_table(None, "pg_class") == "pg_catalog.pg_class"
    assert sc.resolve_system_table("pg_catalog", "PG_CLASS") == "pg_catalog.pg_class"
    assert sc.resolve_system_table("information_schema", "tables") == "information_schema.tables"
    assert sc.resolve_system_table(None, "tables") is None
    assert sc.resolve_system_table("public", "pg_class") is None
    assert sc.registered_name("pg_catalog.pg_class") == "sys_pg_catalog__pg_class"


@pytest.mark.parametrize("key", sorted(sc.SYSTEM_TABLES))
def test_every_system_table_builds(key: str, ctx: PlanContext) -> None:
    t = sc.build_system_table(key, ctx.catalog, ctx.session)
    assert t.schema == pa.schema([pa.field(n, ty.arrow()) for n, ty in sc.SYSTEM_TABLES[key]])


def test_pg_type_and_namespace(ctx: PlanContext, con: duckdb.DuckDBPyConnection) -> None:
    rows = run("select typname, typlen, typarray, typelem, typcategory from pg_type "
               "where typname in ('int4', '_int4', 'varchar', 'timestamptz', 'text', 'bool') "
               "order by typname", ctx, con)
    assert [(r["typname"], r["typlen"], r["typarray"], r["typelem"]) for r in rows] == [
        ("_int4", -1, 0, 23), ("bool", 1, 1000, 0), ("int4", 4, 1007, 0), ("text", -1, 1009, 0),
        ("timestamptz", 8, 1185, 0), ("varchar", -1, 1015, 0)]
    ns = run("select nspname from pg_namespace order by oid", ctx, con)
    assert [r["nspname"] for r in ns] == ["pg_catalog", "public", "information_schema"]


def test_information_schema(ctx: PlanContext, con: duckdb.DuckDBPyConnection) -> None:
    rows = run("select table_name, table_type from information_schema.tables "
               "where table_schema = 'public' order by table_name", ctx, con)
    assert [(r["table_name"], r["table_type"]) for r in rows] == [
        ("events", "BASE TABLE"), ("users", "BASE TABLE"), ("v_users", "VIEW")]
    cols = run("select column_name, data_type, is_nullable, ordinal_position, udt_name "
               "from information_schema.columns where table_name = 'users' "
               "order by ordinal_position", ctx, con)
    assert [(c["column_name"], c["data_type"], c["is_nullable"], c["udt_name"]) for c in cols] == [
        ("id", "integer", "NO", "int4"), ("name", "character varying", "NO", "varchar"),
        ("email", "text", "YES", "text"),
        ("created_at", "timestamp without time zone", "YES", "timestamp")]
    kcu = run("select tc.constraint_name, tc.constraint_type, k.column_name "
              "from information_schema.table_constraints tc "
              "join information_schema.key_column_usage k using (constraint_name)", ctx, con)
    assert kcu == [{"constraint_name": "users_pkey", "constraint_type": "PRIMARY KEY",
                    "column_name": "id"}]
    assert [r["schema_name"] for r in run(
        "select schema_name from information_schema.schemata order by 1", ctx, con)] == [
        "information_schema", "pg_catalog", "public"]
    views = run("select table_name, view_definition from information_schema.views", ctx, con)
    assert views == [{"table_name": "v_users", "view_definition": " SELECT id, name FROM users;"}]


def test_misc_system_views(ctx: PlanContext, con: duckdb.DuckDBPyConnection) -> None:
    assert run("select datname, usename, pid, state from pg_stat_activity", ctx, con) == [
        {"datname": "streamdb", "usename": "streamdb", "pid": 4242, "state": "active"}]
    settings = {r["name"]: r["setting"] for r in run("select name, setting from pg_settings", ctx, con)}
    assert settings["server_version_num"] == "150000"
    assert settings["standard_conforming_strings"] == "on"
    assert [r["tablename"] for r in run(
        "select tablename from pg_tables where schemaname = 'public' order by 1", ctx, con)] == [
        "events", "users"]
    assert [r["viewname"] for r in run(
        "select viewname from pg_views where schemaname = 'public'", ctx, con)] == ["v_users"]
    assert [r["matviewname"] for r in run("select matviewname from pg_matviews", ctx, con)] == [
        "mv_counts"]
    assert run("select usename, usesuper from pg_user", ctx, con) == [
        {"usename": "streamdb", "usesuper": True}]
    for empty in ("pg_inherits", "pg_extension", "pg_enum", "pg_range", "pg_sequence",
                  "pg_trigger", "pg_policy", "pg_rewrite", "pg_statistic_ext", "pg_publication",
                  "pg_publication_rel", "pg_foreign_table", "pg_partitioned_table",
                  "pg_description"):
        assert run(f"select * from pg_catalog.{empty}", ctx, con) == [], empty


def test_describe_system_table_itself(ctx: PlanContext, con: duckdb.DuckDBPyConnection) -> None:
    rows = run("select a.attname, format_type(a.atttypid, a.atttypmod) as t from pg_attribute a "
               "where a.attrelid = 'pg_catalog.pg_namespace'::regclass and a.attnum > 0 "
               "order by a.attnum", ctx, con)
    assert [(r["attname"], r["t"]) for r in rows] == [
        ("oid", "oid"), ("nspname", "name"), ("nspowner", "oid"), ("nspacl", "text[]")]
