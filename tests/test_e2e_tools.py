"""The tools people adopt a database through, against a real server: psql 15 (describe commands,
TAB completion, \\copy), SQLAlchemy 2 (inspector, reflection, Core and ORM), pandas, and the
pg_catalog / information_schema rows behind them.

The server holds the schema that tests/fixtures/capture_queries.py captured real PostgreSQL 15
with: a stream `events`, a keyed table `users`, a view `v_users` and a materialized view
`mv_counts`.
"""

from __future__ import annotations

import csv
import io
import os
import re
import socket
import struct
import subprocess
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import psycopg
import pytest
import sqlalchemy as sa
from conftest import ServerProcess, free_port, running_server
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from tests.fixtures.psql_tty import complete

FIXTURES = Path(__file__).parent / "fixtures"

SCHEMA = [
    "CREATE STREAM events (id BIGINT, user_id INT KEY, kind TEXT, payload JSONB, ts TIMESTAMPTZ)",
    "CREATE TABLE users (id INT PRIMARY KEY, name VARCHAR NOT NULL, email TEXT, created_at TIMESTAMP)",
    "CREATE MATERIALIZED VIEW mv_counts AS SELECT kind, count(*) AS n FROM events GROUP BY kind",
    "CREATE VIEW v_users AS SELECT id, name FROM users",
    "INSERT INTO users VALUES (1, 'ann', 'ann@example.com', '2025-01-02 03:04:05'), "
    "(2, 'bob', NULL, '2025-02-03 04:05:06')",
    "INSERT INTO events (id, user_id, kind, payload, ts) VALUES "
    "(1, 1, 'click', '{\"page\": \"/\"}', '2025-01-01 00:00:00+00'), "
    "(2, 2, 'click', '{\"page\": \"/a\"}', '2025-01-01 00:00:01+00'), "
    "(3, 1, 'view', '{}', '2025-01-01 00:00:02+00')",
    "FLUSH",
]


@pytest.fixture(scope="module")
def tools_server() -> Iterator[ServerProcess]:
    """A server of this module's own, so relation names are exactly those of the captures."""
    with running_server("tools") as srv:
        with srv.connect() as c:
            for sql in SCHEMA:
                c.execute(sql)
        yield srv


@pytest.fixture()
def db(tools_server: ServerProcess) -> Iterator[psycopg.Connection]:
    with tools_server.connect() as c:
        yield c


def _psql_argv(host: str, port: int) -> list[str]:
    return ["psql", "-X", "-h", host, "-p", str(port), "-U", "streamdb", "streamdb"]


def psql(srv: ServerProcess, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([*_psql_argv(srv.host, srv.port), *args], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PGSSLMODE": "disable", "LC_ALL": "C"})  # English
    if ok:
        assert out.returncode == 0, out.stderr
        assert "ERROR" not in out.stderr, out.stderr
    return out


def psql_csv(srv: ServerProcess, command: str) -> list[list[str]]:
    """Rows (without the header) of a backslash command printed with --csv."""
    return list(csv.reader(io.StringIO(psql(srv, "--csv", "-c", command).stdout)))[1:]


# --- psql: describe commands -----------------------------------------------------------------------

def test_psql_lists_relations_with_postgres_kinds(tools_server):
    assert psql_csv(tools_server, r"\d") == [
        ["public", "events", "table", "streamdb"],
        ["public", "mv_counts", "materialized view", "streamdb"],
        ["public", "users", "table", "streamdb"],
        ["public", "v_users", "view", "streamdb"]]
    assert [r[1] for r in psql_csv(tools_server, r"\dt")] == ["events", "users"]
    assert psql_csv(tools_server, r"\dv") == [["public", "v_users", "view", "streamdb"]]
    assert psql_csv(tools_server, r"\dm") == [["public", "mv_counts", "materialized view", "streamdb"]]
    assert psql_csv(tools_server, r"\di") == [["public", "users_pkey", "index", "streamdb", "users"]]
    system_views = {r[1] for r in psql_csv(tools_server, r"\dvS pg_*")}
    assert {"pg_roles", "pg_settings", "pg_views", "pg_matviews", "pg_tables"} <= system_views


def test_psql_describes_stream_table_view_and_materialized_view(tools_server):
    events = psql(tools_server, "-c", r"\d events").stdout
    assert 'Table "public.events"' in events
    for column, type_ in [("id", "bigint"), ("user_id", "integer"), ("kind", "text"),
                          ("payload", "jsonb"), ("ts", "timestamp with time zone")]:
        assert re.search(rf"^ {column} +\| {re.escape(type_)} +\|", events, re.M), events
    users = psql(tools_server, "-c", r"\d users").stdout
    assert 'Table "public.users"' in users
    assert re.search(r"^ id +\| integer +\| +\| not null \|", users, re.M), users
    assert re.search(r"^ name +\| character varying +\| +\| not null \|", users, re.M), users
    assert re.search(r"^ created_at +\| timestamp without time zone +\| +\| +\|", users, re.M), users
    assert 'Indexes:\n    "users_pkey" PRIMARY KEY, btree (id)' in users
    mv = psql(tools_server, "-c", r"\d+ mv_counts").stdout
    assert 'Materialized view "public.mv_counts"' in mv
    assert re.search(r"^ n +\| bigint +\|", mv, re.M), mv
    assert "View definition:\n SELECT kind, count(*) AS n FROM events GROUP BY kind;" in mv
    view = psql(tools_server, "-c", r"\d+ v_users").stdout
    assert 'View "public.v_users"' in view
    assert re.search(r"^ id +\| integer +\|", view, re.M), view
    assert "View definition:\n SELECT id, name FROM users;" in view
    missing = psql(tools_server, "-c", r"\d nosuch", ok=False)
    assert 'Did not find any relation named "nosuch".' in missing.stderr
    assert psql(tools_server, "--csv", "-c", "SELECT id, name FROM users ORDER BY id").stdout.splitlines() == [
        "id,name", "1,ann", "2,bob"]


def test_psql_databases_schemas_roles_functions(tools_server):
    databases = psql_csv(tools_server, r"\l")
    assert ["streamdb", "streamdb", "UTF8"] == databases[0][:3]
    assert {r[0] for r in databases} == {"streamdb", "template1"}
    assert psql_csv(tools_server, r"\dn") == [["public", "streamdb"]]
    roles = psql_csv(tools_server, r"\du")
    assert roles[0][0] == "streamdb" and "Superuser" in roles[0][1]
    # \df lists user functions (there are none, as on a fresh PostgreSQL); \dfS the system ones.
    assert psql_csv(tools_server, r"\df") == []
    assert psql_csv(tools_server, r"\dfS version") == [["pg_catalog", "version", "text", "", "func"]]
    assert psql_csv(tools_server, r"\dfS current_database") == [
        ["pg_catalog", "current_database", "name", "", "func"]]


def test_psql_other_describe_commands_run(tools_server):
    assert psql_csv(tools_server, r"\db") == [["pg_default", "streamdb", ""], ["pg_global", "streamdb", ""]]
    # Objects StreamDB does not have: each command answers with an empty list, not an error.
    for command in (r"\dd", r"\dc", r"\dl", r"\dF", r"\drds", r"\dRs", r"\dAf", r"\dAo", r"\dAp",
                    r"\ddp", r"\dT", r"\dD", r"\dx", r"\dy", r"\dE", r"\ds", r"\dL"):
        assert len(psql_csv(tools_server, command)) == 0, command
    assert [r[1] for r in psql_csv(tools_server, r"\dp")] == ["events", "mv_counts", "users", "v_users"]


def test_like_escapes_with_backslash_as_in_postgres(db):
    # psql's completion queries rely on it: `relname LIKE 'v\_%'` must not match "vx".
    assert db.execute(r"SELECT 'v_users' LIKE 'v\_%', 'vxusers' LIKE 'v\_%', 'a%b' LIKE 'a\%b', "
                      r"'V_U' ILIKE 'v\_u', 'a_b' NOT LIKE E'a\\_b', 'a|b' LIKE 'a||b' ESCAPE '|'"
                      ).fetchone() == (True, False, True, True, False, True)


# --- psql: TAB completion ----------------------------------------------------------------------------

class WireTap:
    """A TCP relay between psql and the server that records the queries psql sends (simple
    protocol 'Q' messages) and every ErrorResponse the server returns. psql hides the errors
    of its completion queries (it just completes nothing), so this is how a test sees them."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = free_port()
        self.queries: list[str] = []
        self.errors: list[str] = []
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        buf = b""
        startup = from_client  # the client's first message has no type byte
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                buf += data
                while True:
                    head = 4 if startup else 5
                    if len(buf) < head:
                        break
                    length = struct.unpack("!I", buf[head - 4:head])[0]
                    if len(buf) < head - 4 + length:
                        break
                    kind, body = buf[:1], buf[head:head - 4 + length]
                    buf = buf[head - 4 + length:]
                    if startup:
                        startup = False
                    elif from_client and kind == b"Q":
                        self.queries.append(body.rstrip(b"\0").decode())
                    elif not from_client and kind == b"E":
                        fields = dict((f[:1], f[1:].decode()) for f in body.split(b"\0") if f)
                        self.errors.append(f"{fields.get(b'C')}: {fields.get(b'M')}")
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


@pytest.fixture()
def tap(tools_server: ServerProcess) -> Iterator[WireTap]:
    t = WireTap((tools_server.host, tools_server.port))
    try:
        yield t
    finally:
        t.close()


def _words(screen: str) -> set[str]:
    return set(re.findall(r"[\w.]+", screen))


def test_psql_tab_completion_interactive(tap):
    argv = _psql_argv("127.0.0.1", tap.port)
    shown = complete(argv, [
        "SELECT * FROM mv_c\t",                      # unique prefix: completed in place
        "SELECT * FROM \t\t",                        # every relation and schema
        "INSERT INTO \t\t",                          # tables and views, not materialized views
        "SELECT * FROM users WHERE \t\t",            # column completion
        "\\d users\t\t",                             # the table and its index
        "\\dm \t\t",
        "\\c \t\t",                                  # databases
        "SET statement_t\t",                         # settings from pg_settings
        "SELECT * FROM pg_catalog.pg_matv\t",
    ])
    assert "SELECT * FROM mv_counts " in shown[0]
    assert {"events", "mv_counts", "users", "v_users", "public.", "information_schema."} <= _words(shown[1])
    assert {"events", "users", "v_users"} <= _words(shown[2]) and "mv_counts" not in shown[2]
    assert {"id", "name", "email", "created_at"} <= _words(shown[3])
    assert {"users", "users_pkey"} <= _words(shown[4])
    assert "mv_counts" in _words(shown[5]) and not {"events", "users", "v_users"} & _words(shown[5])
    assert {"streamdb", "template1"} <= _words(shown[6])
    assert "statement_timeout" in shown[7]
    assert "pg_catalog.pg_matviews" in shown[8]
    assert any("pg_catalog.pg_class" in q for q in tap.queries), tap.queries
    assert any("pg_catalog.pg_attribute" in q for q in tap.queries), tap.queries
    assert tap.errors == []


# More places where psql 15 completes from the catalogs (relations, columns, roles, schemas,
# databases, settings, functions, types, access methods, languages).
MORE_COMPLETIONS = [
    "ALTER TABLE users ALTER COLUMN \t\t", "ALTER VIEW \t\t", "ALTER MATERIALIZED VIEW \t\t",
    "COMMENT ON TABLE \t\t", "COPY \t\t", "CREATE INDEX ON \t\t", "DROP INDEX \t\t",
    "DROP SCHEMA \t\t", "DROP ROLE \t\t", "DROP FUNCTION \t\t", "DROP TYPE \t\t",
    "DROP SEQUENCE \t\t", "EXPLAIN SELECT * FROM \t\t", "GRANT SELECT ON users TO \t\t",
    "REFRESH MATERIALIZED VIEW \t\t", "SELECT * FROM users ORDER BY \t\t", "SELECT * FROM public.\t\t",
    "TRUNCATE \t\t", "\\dT \t\t", "\\sf \t\t", "\\z \t\t", "\\dconfig \t\t", "SET search_path TO \t\t",
    "RESET \t\t", "ALTER ROLE \t\t", "\\dA \t\t", "\\dL \t\t", "\\db \t\t", "ALTER DATABASE \t\t",
    "ALTER TABLE users RENAME COLUMN \t\t",
]


def test_psql_tab_completion_sends_no_failing_query(tap):
    shown = complete(_psql_argv("127.0.0.1", tap.port), MORE_COMPLETIONS)
    by_input = dict(zip(MORE_COMPLETIONS, shown, strict=True))
    assert tap.errors == []
    assert len(tap.queries) >= len(MORE_COMPLETIONS)
    assert {"id", "name", "email", "created_at"} <= _words(by_input["ALTER TABLE users ALTER COLUMN \t\t"])
    assert "v_users" in by_input["ALTER VIEW \t\t"] and "mv_counts" not in by_input["ALTER VIEW \t\t"]
    assert "users_pkey" in by_input["DROP INDEX \t\t"]
    assert {"public.events", "public.users", "public.v_users", "public.mv_counts"} <= _words(
        by_input["SELECT * FROM public.\t\t"])
    assert {"pg_catalog", "public"} <= _words(by_input["SET search_path TO \t\t"])
    assert "version" in _words(by_input["DROP FUNCTION \t\t"])
    assert {"btree", "heap"} <= _words(by_input["\\dA \t\t"])


def _captured(path: Path) -> list[tuple[str, str]]:
    text = path.read_text()
    return re.findall(r"-- query: (.*?)\n(.*?)\n\n(?=-- query:|\Z)", text, re.S)


# What each query psql 15 sent for a completion (captured from PostgreSQL by
# tests/fixtures/capture_queries.py) must return here: the candidates' first column.
_TAB_EXPECTED: dict[str, set[str]] = {
    "SELECT * FROM <TAB><TAB>": {"events", "mv_counts", "users", "v_users"},
    "SELECT * FROM us<TAB>": {"users"},
    "SELECT * FROM pg_catalog.pg_cl<TAB>": {"pg_class"},
    "SELECT * FROM information_schema.<TAB><TAB>": {"tables", "columns", "views", "schemata"},
    "TABLE <TAB><TAB>": {"events", "mv_counts", "users", "v_users"},
    "\\d <TAB><TAB>": {"events", "mv_counts", "users", "users_pkey", "v_users"},
    "\\d v_<TAB>": {"v_users"},
    "\\dt <TAB><TAB>": {"events", "users"},
    "\\dv <TAB><TAB>": {"v_users"},
    "\\dm <TAB><TAB>": {"mv_counts"},
    "\\di <TAB><TAB>": {"users_pkey"},
    "\\df vers<TAB>": {"version"},
    "\\dn <TAB><TAB>": {"information_schema", "pg_catalog", "public"},
    "\\du <TAB><TAB>": {"streamdb"},
    "\\c <TAB><TAB>": {"streamdb", "template1"},
    "\\copy <TAB><TAB>": {"events", "users"},
    "INSERT INTO <TAB><TAB>": {"events", "users", "v_users"},
    "INSERT INTO users (<TAB><TAB>": {"id", "name", "email", "created_at"},
    "SELECT * FROM users WHERE <TAB><TAB>": {"id", "name", "email", "created_at"},
    "SELECT * FROM users u JOIN <TAB><TAB>": {"events", "mv_counts", "users", "v_users"},
    "UPDATE users SET <TAB><TAB>": {"id", "name", "email", "created_at"},
    "DELETE FROM <TAB><TAB>": {"events", "users", "v_users"},
    "DROP TABLE <TAB><TAB>": {"events", "users"},
    "DROP VIEW <TAB><TAB>": {"v_users"},
    "DROP MATERIALIZED VIEW <TAB><TAB>": {"mv_counts"},
    "ALTER TABLE <TAB><TAB>": {"events", "users"},
    "GRANT SELECT ON <TAB><TAB>": {"events", "mv_counts", "users", "v_users"},
    "SET <TAB><TAB>": {"datestyle", "search_path", "statement_timeout", "application_name"},
    "SHOW <TAB><TAB>": {"server_version", "search_path", "timezone"},
}
TAB_QUERIES = _captured(FIXTURES / "psql_tab_complete_queries.sql")


@pytest.mark.parametrize(("label", "sql"), TAB_QUERIES, ids=[label for label, _ in TAB_QUERIES])
def test_psql_tab_complete_query(db, label, sql):
    typed, number = re.fullmatch(r"tab (.*) #(\d+)", label).groups()
    rows = db.execute(sql).fetchall()
    if number != "1":  # a follow-up query (psql completed a common prefix first); it just has to run
        return
    candidates = {r[0] for r in rows if r[0] is not None}
    schemas = {r[1] for r in rows if len(r) > 1 and r[1] is not None}
    expected = _TAB_EXPECTED[typed]
    if typed.startswith(("SET", "SHOW", "SELECT * FROM information_schema")):
        assert expected <= candidates, candidates
    else:
        assert candidates == expected
    if "UNION ALL" in sql and "LIKE '%'" in sql:  # the schema part of the candidate list
        assert schemas == {"information_schema", "public"}


def test_tab_complete_fixture_covers_the_inputs():
    assert {re.fullmatch(r"tab (.*) #\d+", label).group(1) for label, _ in TAB_QUERIES} == set(_TAB_EXPECTED)


# --- psql: \copy in and out ---------------------------------------------------------------------------

def test_psql_copy_in_and_out(tools_server, db, tmp_path):
    try:
        _copy_in_and_out(tools_server, db, tmp_path)
    finally:  # the other tests list the public relations exactly
        for kind, name in (("MATERIALIZED VIEW", "copy_totals"), ("STREAM", "copy_readings"),
                           ("TABLE", "copy_people")):
            db.execute(f"DROP {kind} IF EXISTS {name}")


def _copy_in_and_out(tools_server, db, tmp_path):
    db.execute("CREATE TABLE copy_people (id INT PRIMARY KEY, name TEXT, score DOUBLE PRECISION)")
    db.execute("CREATE STREAM copy_readings (sensor TEXT, value INT)")
    db.execute("CREATE MATERIALIZED VIEW copy_totals AS "
               "SELECT sensor, sum(value) AS total FROM copy_readings GROUP BY sensor")
    people = tmp_path / "people.csv"
    people.write_text('id,name,score\n1,ann,1.5\n2,"b, ob",\n3,"say ""hi""",3\n')
    readings = tmp_path / "readings.tsv"
    readings.write_text("a\t1\nb\t2\na\t3\n")
    out = psql(tools_server,
               "-c", rf"\copy copy_people FROM '{people}' WITH (FORMAT csv, HEADER true)",
               "-c", rf"\copy copy_readings (sensor, value) FROM '{readings}'",
               "-c", "FLUSH")
    assert out.stdout.splitlines()[:2] == ["COPY 3", "COPY 3"]
    assert db.execute("SELECT id, name, score FROM copy_people ORDER BY id").fetchall() == [
        (1, "ann", 1.5), (2, "b, ob", None), (3, 'say "hi"', 3.0)]
    query_out, view_out, table_out, plain_view_out = (
        tmp_path / n for n in ("q.csv", "view.tsv", "table.csv", "v_users.csv"))
    psql(tools_server,
         "-c", rf"\copy (SELECT id, name FROM copy_people WHERE score IS NOT NULL ORDER BY id) "
               rf"TO '{query_out}' WITH (FORMAT csv, HEADER)",
         "-c", rf"\copy copy_totals TO '{view_out}'",
         "-c", rf"\copy v_users TO '{plain_view_out}' CSV HEADER",
         "-c", rf"\copy copy_people TO '{table_out}' CSV")
    assert query_out.read_text() == 'id,name\n1,ann\n3,"say ""hi"""\n'
    assert sorted(view_out.read_text().splitlines()) == ["a\t4", "b\t2"]
    assert sorted(table_out.read_text().splitlines()) == ['1,ann,1.5', '2,"b, ob",', '3,"say ""hi""",3']
    assert plain_view_out.read_text().splitlines() == ["id,name", "1,ann", "2,bob"]


# --- SQLAlchemy 2 ----------------------------------------------------------------------------------

@pytest.fixture()
def engine(tools_server: ServerProcess) -> Iterator[sa.Engine]:
    eng = sa.create_engine(f"postgresql+psycopg://streamdb@{tools_server.host}:{tools_server.port}/streamdb")
    try:
        yield eng
    finally:
        eng.dispose()


def test_sqlalchemy_inspector(engine):
    insp = sa.inspect(engine)
    assert set(insp.get_table_names()) >= {"events", "users"}
    assert not {"mv_counts", "v_users"} & set(insp.get_table_names())
    assert insp.get_view_names() == ["v_users"]
    assert insp.get_materialized_view_names() == ["mv_counts"]
    assert "public" in insp.get_schema_names()
    cols = {c["name"]: (c["type"], c["nullable"]) for c in insp.get_columns("users")}
    assert list(cols) == ["id", "name", "email", "created_at"]
    assert isinstance(cols["id"][0], sa.INTEGER) and cols["id"][1] is False
    assert isinstance(cols["name"][0], sa.VARCHAR) and cols["name"][1] is False
    assert isinstance(cols["email"][0], sa.TEXT) and cols["email"][1] is True
    assert isinstance(cols["created_at"][0], sa.TIMESTAMP) and cols["created_at"][0].timezone is False
    events = {c["name"]: c["type"] for c in insp.get_columns("events")}
    assert isinstance(events["id"], sa.BIGINT) and isinstance(events["ts"], sa.TIMESTAMP)
    assert events["ts"].timezone is True
    assert type(events["payload"]).__name__ == "JSONB"
    mv = {c["name"]: c["type"] for c in insp.get_columns("mv_counts")}
    assert isinstance(mv["kind"], sa.TEXT) and isinstance(mv["n"], sa.BIGINT)
    assert insp.get_pk_constraint("users") == {
        "constrained_columns": ["id"], "name": "users_pkey", "comment": None,
        "dialect_options": {"postgresql_include": []}}
    assert insp.get_pk_constraint("events")["constrained_columns"] == []
    # As on PostgreSQL, get_indexes leaves out the primary key's index.
    assert insp.get_indexes("users") == []
    assert insp.get_foreign_keys("users") == [] and insp.get_unique_constraints("users") == []
    assert insp.has_table("users") and insp.has_table("events") and insp.has_table("mv_counts")
    assert not insp.has_table("nosuch")
    assert insp.get_view_definition("mv_counts").strip() == \
        "SELECT kind, count(*) AS n FROM events GROUP BY kind;"
    assert insp.get_view_definition("v_users").strip() == "SELECT id, name FROM users;"
    assert [c["name"] for c in insp.get_columns("v_users")] == ["id", "name"]


def test_sqlalchemy_reflection_core_and_orm(engine):
    meta = sa.MetaData()
    users = sa.Table("users", meta, autoload_with=engine)
    assert [c.name for c in users.primary_key] == ["id"]
    assert isinstance(users.c.name.type, sa.VARCHAR) and users.c.name.nullable is False
    v_users = sa.Table("v_users", meta, autoload_with=engine)
    assert [c.name for c in v_users.columns] == ["id", "name"]
    mv = sa.Table("mv_counts", meta, autoload_with=engine)
    with engine.connect() as c:
        assert c.execute(sa.text("SELECT name FROM users WHERE id = :id"), {"id": 1}).all() == [("ann",)]
        assert c.execute(sa.select(users.c.name).where(users.c.id == 2)).all() == [("bob",)]
        assert c.execute(sa.select(v_users).order_by(v_users.c.id)).all() == [(1, "ann"), (2, "bob")]
        assert c.execute(sa.select(mv.c.kind, mv.c.n).where(mv.c.n > 0).order_by(mv.c.kind)).all() == [
            ("click", 2), ("view", 1)]
        joined = sa.select(users.c.name, sa.func.count()).select_from(
            users.join(sa.Table("events", meta, autoload_with=engine),
                       sa.literal_column("events.user_id") == users.c.id)).group_by(users.c.name)
        assert sorted(c.execute(joined).all()) == [("ann", 2), ("bob", 1)]

    class Base(DeclarativeBase):
        pass

    class KindCount(Base):  # a materialized view has no primary key: the ORM is told one
        __tablename__ = "mv_counts"
        kind: Mapped[str] = mapped_column(primary_key=True)
        n: Mapped[int]

    with Session(engine) as session:
        got = session.scalars(sa.select(KindCount).where(KindCount.n >= 1).order_by(KindCount.kind)).all()
        assert [(k.kind, k.n) for k in got] == [("click", 2), ("view", 1)]
        assert session.get(KindCount, "view").n == 1


# --- pandas ------------------------------------------------------------------------------------------

def test_pandas_read_sql_over_views(engine, tools_server):
    via_engine = pd.read_sql("SELECT kind, n FROM mv_counts ORDER BY kind", engine)
    assert via_engine.to_dict("records") == [{"kind": "click", "n": 2}, {"kind": "view", "n": 1}]
    assert str(via_engine["n"].dtype) == "int64" and via_engine["kind"].dtype == object
    table = pd.read_sql_table("v_users", engine)
    assert sorted(table["name"]) == ["ann", "bob"] and str(table["id"].dtype) == "int64"
    users = pd.read_sql("SELECT id, name, email, created_at FROM users ORDER BY id", engine)
    assert str(users["created_at"].dtype) == "datetime64[ns]"
    assert users["email"].isna().tolist() == [False, True]
    with psycopg.connect(tools_server.dsn) as raw, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # pandas: "only supports SQLAlchemy connectable"
        via_dbapi = pd.read_sql("SELECT kind, n FROM mv_counts ORDER BY kind", raw)
        plain_view = pd.read_sql("SELECT * FROM v_users WHERE id > %(min)s ORDER BY id", raw,
                                 params={"min": 0})
    assert via_dbapi.to_dict("records") == [{"kind": "click", "n": 2}, {"kind": "view", "n": 1}]
    assert str(via_dbapi["n"].dtype) == "int64"
    assert plain_view.to_dict("records") == [{"id": 1, "name": "ann"}, {"id": 2, "name": "bob"}]
    assert str(plain_view["id"].dtype) == "int64" and plain_view["name"].dtype == object
    events = pd.read_sql("SELECT id, ts FROM events ORDER BY id", engine)
    assert str(events["ts"].dtype) in ("datetime64[ns, UTC]", "datetime64[us, UTC]")


def test_pandas_to_sql_round_trip(engine, db):
    frame = pd.DataFrame({"a": [1, 2], "b": ["x", None], "c": [1.5, float("nan")],
                          "d": pd.to_datetime(["2025-01-01 10:00", "2025-01-02 11:30"], utc=True)})
    try:
        frame.to_sql("pandas_out", engine, index=False)  # has_table, CREATE TABLE, executemany INSERT
        back = pd.read_sql("SELECT * FROM pandas_out ORDER BY a", engine)
        assert back["a"].tolist() == [1, 2] and back["b"].tolist() == ["x", None]
        assert back["c"].iloc[0] == 1.5 and pd.isna(back["c"].iloc[1])
        assert back["d"].tolist() == frame["d"].tolist()
        cols = {c["name"]: c["type"] for c in sa.inspect(engine).get_columns("pandas_out")}
        assert isinstance(cols["a"], sa.BIGINT) and isinstance(cols["b"], sa.TEXT)
        assert isinstance(cols["c"], sa.DOUBLE_PRECISION) and cols["d"].timezone is True
    finally:
        db.execute("DROP TABLE IF EXISTS pandas_out")


# --- the catalogs behind them -------------------------------------------------------------------------

def test_information_schema(db):
    tables = db.execute("SELECT table_name, table_type FROM information_schema.tables "
                        "WHERE table_schema = 'public' ORDER BY table_name").fetchall()
    # Materialized views are not in information_schema.tables on PostgreSQL either.
    assert [t for t in tables if t[0] in ("events", "users", "mv_counts", "v_users")] == [
        ("events", "BASE TABLE"), ("users", "BASE TABLE"), ("v_users", "VIEW")]
    assert ("pg_class", "BASE TABLE") in db.execute(
        "SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = 'pg_catalog'").fetchall()
    assert ("tables", "VIEW") in db.execute(
        "SELECT table_name, table_type FROM information_schema.tables "
        "WHERE table_schema = 'information_schema'").fetchall()
    cols = db.execute("SELECT column_name, ordinal_position, data_type, is_nullable, udt_name "
                      "FROM information_schema.columns WHERE table_name = 'users' "
                      "ORDER BY ordinal_position").fetchall()
    assert cols == [("id", 1, "integer", "NO", "int4"), ("name", 2, "character varying", "NO", "varchar"),
                    ("email", 3, "text", "YES", "text"),
                    ("created_at", 4, "timestamp without time zone", "YES", "timestamp")]
    assert db.execute("SELECT table_name, view_definition FROM information_schema.views "
                      "WHERE table_schema = 'public'").fetchall() == [("v_users", " SELECT id, name FROM users;")]
    assert {r[0] for r in db.execute("SELECT schema_name FROM information_schema.schemata")} == {
        "public", "pg_catalog", "information_schema"}


def test_pg_catalog(db):
    kinds = dict(db.execute("SELECT relname, relkind FROM pg_catalog.pg_class c JOIN pg_namespace n "
                            "ON n.oid = c.relnamespace WHERE n.nspname = 'public'").fetchall())
    assert {k: kinds[k] for k in ("events", "users", "users_pkey", "mv_counts", "v_users")} == {
        "events": "r", "users": "r", "users_pkey": "i", "mv_counts": "m", "v_users": "v"}
    assert db.execute("SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull "
                      "FROM pg_attribute a WHERE a.attrelid = 'users'::regclass AND a.attnum > 0 "
                      "ORDER BY a.attnum").fetchall() == [
        ("id", "integer", True), ("name", "character varying", True), ("email", "text", False),
        ("created_at", "timestamp without time zone", False)]
    assert db.execute("SELECT t.typname FROM pg_type t JOIN pg_attribute a ON a.atttypid = t.oid "
                      "WHERE a.attrelid = 'events'::regclass AND a.attname = 'payload'").fetchone() == ("jsonb",)
    assert db.execute("SELECT indisprimary, indisunique, indkey, indnatts FROM pg_index "
                      "WHERE indrelid = 'users'::regclass").fetchall() == [(True, True, [1], 1)]
    assert db.execute("SELECT matviewname, definition FROM pg_matviews "
                      "WHERE matviewname IN ('mv_counts', 'v_users')").fetchall() == [
        ("mv_counts", " SELECT kind, count(*) AS n FROM events GROUP BY kind;")]
    assert db.execute("SELECT viewname, definition FROM pg_views WHERE schemaname = 'public'").fetchall() == [
        ("v_users", " SELECT id, name FROM users;")]
    assert db.execute("SELECT setting FROM pg_settings WHERE name = 'server_encoding'").fetchone() == ("UTF8",)
    assert db.execute("SELECT datname, pg_encoding_to_char(encoding) FROM pg_database "
                      "WHERE datname = current_database()").fetchone() == ("streamdb", "UTF8")
    assert db.execute("SELECT rolname, rolsuper, rolcanlogin FROM pg_roles").fetchall() == [
        ("streamdb", True, True)]
    assert db.execute("SELECT proname, format_type(prorettype, NULL) FROM pg_proc "
                      "WHERE proname = 'version'").fetchone() == ("version", "text")
    assert db.execute("SELECT nspname FROM pg_namespace ORDER BY oid").fetchall() == [
        ("pg_catalog",), ("public",), ("information_schema",)]
