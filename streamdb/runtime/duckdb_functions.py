"""Macros that emulate Postgres system functions on a DuckDB connection.

`streamdb.planner.pg_functions.rewrite_for_duckdb` renames the Postgres functions it cannot
inline to these `sdb_*` macros (a prefix of our own, so DuckDB's built-in pg_catalog
functions such as its `format_type` or `version` are never picked by mistake). Everything
that depends on the catalog or the session is inlined by the rewrite instead, so the macros
here are static and one install per connection serves every session.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from streamdb import types as T

_INSTALLED_MARK = "sdb_functions_installed"
_START_TIME = datetime.now(UTC)


def _q(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _format_type_sql() -> str:
    whens: list[str] = []
    for t in T.ALL_TYPES:
        if t.oid == T.VARCHAR.oid:
            whens.append(f"WHEN o = {t.oid} THEN CASE WHEN m >= 4 THEN 'character varying(' || "
                         f"CAST(m - 4 AS VARCHAR) || ')' ELSE 'character varying' END")
        elif t.oid == T.NUMERIC.oid:
            whens.append(f"WHEN o = {t.oid} THEN CASE WHEN m >= 4 THEN 'numeric(' || "
                         f"CAST((m - 4) // 65536 AS VARCHAR) || ',' || "
                         f"CAST((m - 4) % 65536 AS VARCHAR) || ')' ELSE 'numeric' END")
        else:
            whens.append(f"WHEN o = {t.oid} THEN {_q(t.name)}")
        if t.array_oid:
            whens.append(f"WHEN o = {t.array_oid} THEN {_q(t.name + '[]')}")
    return ("CASE WHEN o IS NULL THEN NULL " + " ".join(whens) + " ELSE '???' END")


def macro_definitions() -> list[str]:
    """CREATE MACRO statements, in install order."""
    start = _START_TIME.strftime("%Y-%m-%d %H:%M:%S.%f+00")
    return [
        f"CREATE OR REPLACE MACRO sdb_format_type(o, m) AS ({_format_type_sql()})",
        # planner/query.raise_call: PostgreSQL's error, 'SQLSTATE:message' (embedded.translate_error).
        "CREATE OR REPLACE MACRO sdb_raise(m) AS error(m)",
        # planner/query._duckdb_integer_text: text to an integer as PostgreSQL reads it.
        "CREATE OR REPLACE MACRO sdb_integer_text(s, t) AS (CASE WHEN s IS NULL THEN s "
        "WHEN NOT regexp_full_match(s, '\\s*[+-]?[0-9]+\\s*') "
        "THEN error('22P02:invalid input syntax for type ' || t || ': \"' || s || '\"') "
        "WHEN TRY_CAST(trim(s) AS HUGEINT) IS NULL OR TRY_CAST(trim(s) AS HUGEINT) NOT BETWEEN "
        "(CASE t WHEN 'smallint' THEN -32768 WHEN 'integer' THEN -2147483648 ELSE -9223372036854775808 END) "
        "AND (CASE t WHEN 'smallint' THEN 32767 WHEN 'integer' THEN 2147483647 ELSE 9223372036854775807 END) "
        "THEN error('22003:value \"' || s || '\" is out of range for type ' || t) ELSE s END)",
        # planner/query._duckdb_float_text: a double's (digits 15) or a real's (6) text as
        # PostgreSQL writes it, from the engine's shortest digits (it writes 7.0, nan, -0.0).
        "CREATE OR REPLACE MACRO sdb_float_parts(s) AS struct_pack("
        "s := s, sign := regexp_extract(s, '^(-?)', 1), "
        "digits := trim(regexp_extract(s, '^-?([0-9]+)', 1) || regexp_extract(s, '^-?[0-9]+[.]([0-9]+)', 1), '0'), "
        "e := length(regexp_extract(s, '^-?([0-9]+)', 1)) - 1 "
        "- (length(regexp_extract(s, '^-?([0-9]+)', 1) || regexp_extract(s, '^-?[0-9]+[.]([0-9]+)', 1)) "
        "- length(ltrim(regexp_extract(s, '^-?([0-9]+)', 1) || regexp_extract(s, '^-?[0-9]+[.]([0-9]+)', 1), '0'))) "
        "+ CAST(coalesce(nullif(regexp_extract(s, '[eE]([+-]?[0-9]+)$', 1), ''), '0') AS INTEGER))",
        "CREATE OR REPLACE MACRO sdb_float_format(v, p) AS (CASE "
        "WHEN lower(v.s) = 'nan' THEN 'NaN' WHEN lower(v.s) IN ('inf', 'infinity') THEN 'Infinity' "
        "WHEN lower(v.s) IN ('-inf', '-infinity') THEN '-Infinity' WHEN v.digits = '' THEN v.sign || '0' "
        "WHEN v.e < -4 OR v.e >= p THEN v.sign || left(v.digits, 1) "
        "|| CASE WHEN length(v.digits) > 1 THEN '.' || substr(v.digits, 2) ELSE '' END || 'e' "
        "|| CASE WHEN v.e < 0 THEN '-' ELSE '+' END || CASE WHEN abs(v.e) < 10 THEN '0' ELSE '' END "
        "|| CAST(abs(v.e) AS VARCHAR) "
        "WHEN v.e < 0 THEN v.sign || '0.' || repeat('0', -v.e - 1) || v.digits "
        "WHEN length(v.digits) <= v.e + 1 THEN v.sign || v.digits || repeat('0', v.e + 1 - length(v.digits)) "
        "ELSE v.sign || left(v.digits, v.e + 1) || '.' || substr(v.digits, v.e + 2) END)",
        "CREATE OR REPLACE MACRO sdb_float_text(x, p) AS (CASE WHEN x IS NULL THEN NULL "
        "ELSE sdb_float_format(sdb_float_parts(CAST(x AS VARCHAR)), p) END)",
        # planner/query.SECONDS_FUNCTION: seconds with their fraction (EXTRACT(SECOND) drops it).
        "CREATE OR REPLACE MACRO sdb_seconds(t) AS (EXTRACT(MICROSECONDS FROM t) / 1000000.0)",
        "CREATE OR REPLACE MACRO sdb_pg_encoding_to_char(e) AS (CASE WHEN e IS NULL THEN NULL "
        "WHEN e = 6 THEN 'UTF8' WHEN e = 0 THEN 'SQL_ASCII' ELSE '' END)",
        "CREATE OR REPLACE MACRO sdb_pg_size_pretty(b) AS (CASE WHEN b IS NULL THEN NULL "
        "WHEN abs(b) < 10240 THEN CAST(b AS VARCHAR) || ' bytes' "
        "WHEN abs(b) < 10485760 THEN CAST(round(b / 1024.0) AS BIGINT) || ' kB' "
        "WHEN abs(b) < 10737418240 THEN CAST(round(b / 1048576.0) AS BIGINT) || ' MB' "
        "WHEN abs(b) < 10995116277760 THEN CAST(round(b / 1073741824.0) AS BIGINT) || ' GB' "
        "ELSE CAST(round(b / 1099511627776.0) AS BIGINT) || ' TB' END)",
        "CREATE OR REPLACE MACRO sdb_array_upper(a, d) AS (CASE WHEN d = 1 AND len(a) > 0 "
        "THEN CAST(len(a) AS INTEGER) END)",
        "CREATE OR REPLACE MACRO sdb_array_lower(a, d) AS (CASE WHEN d = 1 AND len(a) > 0 "
        "THEN 1 END)",
        "CREATE OR REPLACE MACRO sdb_array_length(a, d) AS (CASE WHEN d = 1 AND len(a) > 0 "
        "THEN CAST(len(a) AS INTEGER) END)",
        "CREATE OR REPLACE MACRO sdb_array_to_string(a, d) AS "
        "(array_to_string(list_filter(a, lambda x: x IS NOT NULL), d))",
        f"CREATE OR REPLACE MACRO sdb_pg_postmaster_start_time() AS "
        f"(CAST({_q(start)} AS TIMESTAMPTZ))",
        "CREATE OR REPLACE MACRO sdb_txid_current() AS "
        "(CAST(epoch_us(get_current_timestamp()) AS BIGINT))",
        "CREATE OR REPLACE MACRO sdb_regtype_name(o) AS (sdb_format_type(o, NULL))",
        # information_schema._pg_expandarray(a) as a list; the rewrite unnests it (pgjdbc's
        # getPrimaryKeys and getIndexInfo select `(_pg_expandarray(indkey)).n`).
        "CREATE OR REPLACE MACRO sdb_pg_expandarray(a) AS "
        "(list_transform(range(1, len(a) + 1), lambda i: {'x': a[i], 'n': i}))",
    ]


def install_duckdb_functions(con: Any) -> None:
    """Install the sdb_* macros on a DuckDB connection (idempotent per connection)."""
    try:
        if con.execute("SELECT count(*) FROM duckdb_functions() WHERE function_name = ?",
                       [_INSTALLED_MARK]).fetchall()[0][0]:
            return
    except Exception:  # noqa: BLE001 - a failed probe just means: install
        pass
    for stmt in macro_definitions():
        con.execute(stmt)
    con.execute(f"CREATE OR REPLACE MACRO {_INSTALLED_MARK}() AS (true)")


__all__ = ["install_duckdb_functions", "macro_definitions"]
