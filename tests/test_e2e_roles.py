"""Roles, privileges and ownership end to end: a real `streamdb serve` through psycopg and psql.

Trust authentication is the default, so connecting as a role with LOGIN needs no password here;
the SCRAM exchange itself is tested with the wire layer. Role names carry the `unique` suffix
because the shared server lives for the whole test session.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from tests.conftest import ServerProcess


@contextmanager
def login(server: ServerProcess, user: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(server.dsn, user=user, autocommit=True) as c:
        yield c


def sqlstate_of(conn: psycopg.Connection, sql: str) -> tuple[str | None, str]:
    try:
        conn.execute(sql)
    except psycopg.Error as e:
        return e.sqlstate, str(e.diag.message_primary)
    return None, ""


def simple_query(conn: psycopg.Connection, sql: str) -> tuple[str | None, list[tuple[bytes | None, ...]]]:
    """Run `sql` with the simple query protocol (literal SQL, the session's point-lookup fast path)."""
    result = conn.pgconn.exec_(sql.encode())
    state = result.error_field(psycopg.pq.DiagnosticField.SQLSTATE)
    if state is not None:
        return state.decode(), []
    return None, [tuple(result.get_value(r, c) for c in range(result.nfields)) for r in range(result.ntuples)]


def test_create_user_log_in_and_see_it(conn: psycopg.Connection, server: ServerProcess, unique: str) -> None:
    bob = f"bob_{unique}"
    conn.execute(f"CREATE USER {bob}")
    with login(server, bob) as b:
        assert b.execute("SELECT current_user, session_user").fetchone() == (bob, bob)
        assert b.execute("SHOW is_superuser").fetchone() == ("off",)
    assert conn.execute("SELECT rolname, rolsuper, rolcanlogin FROM pg_roles WHERE rolname = %s",
                        (bob,)).fetchall() == [(bob, False, True)]
    assert conn.execute("SELECT usename, usesuper FROM pg_user WHERE usename = %s", (bob,)).fetchall() == [(bob, False)]
    assert sqlstate_of(conn, f"CREATE ROLE {bob}") == ("42710", f'role "{bob}" already exists')
    assert sqlstate_of(conn, f"ALTER ROLE nobody_{unique} LOGIN") == ("42704", f'role "nobody_{unique}" does not exist')
    # The bootstrap superuser always exists and stays a superuser.
    assert conn.execute("SELECT rolname, rolsuper, oid FROM pg_roles WHERE rolname = 'streamdb'").fetchall() == [
        ("streamdb", True, 10)]
    assert sqlstate_of(conn, "ALTER ROLE streamdb NOSUPERUSER")[0] == "0A000"
    assert sqlstate_of(conn, "CREATE ROLE pg_mine")[0] == "42939"
    assert conn.execute("SELECT 1").fetchone() == (1,)  # the connection stays usable


def test_roles_that_cannot_log_in_are_refused(conn: psycopg.Connection, server: ServerProcess, unique: str) -> None:
    group, ghost = f"group_{unique}", f"ghost_{unique}"
    conn.execute(f"CREATE ROLE {group}")  # CREATE ROLE means NOLOGIN
    with pytest.raises(psycopg.OperationalError, match=f'role "{group}" is not permitted to log in'):
        psycopg.connect(server.dsn, user=group, connect_timeout=10)
    with pytest.raises(psycopg.OperationalError, match=f'role "{ghost}" does not exist'):
        psycopg.connect(server.dsn, user=ghost, connect_timeout=10)
    conn.execute(f"ALTER ROLE {group} WITH LOGIN")
    with login(server, group) as g:
        assert g.execute("SELECT current_user").fetchone() == (group,)
    conn.execute(f"ALTER ROLE {group} NOLOGIN")
    with pytest.raises(psycopg.OperationalError, match="not permitted to log in"):
        psycopg.connect(server.dsn, user=group, connect_timeout=10)


def test_select_and_insert_need_grants(conn: psycopg.Connection, server: ServerProcess, unique: str) -> None:
    t, reader = f"accounts_{unique}", f"reader_{unique}"
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, balance INT)")
    conn.execute(f"INSERT INTO {t} VALUES (1, 10), (2, 20)")
    conn.execute(f"CREATE USER {reader}")
    with login(server, reader) as r:
        denied = ("42501", f"permission denied for table {t}")
        assert sqlstate_of(r, f"SELECT * FROM {t}") == denied
        assert sqlstate_of(r, f"SELECT count(*) FROM (SELECT id FROM {t}) s") == denied
        assert sqlstate_of(r, f"INSERT INTO {t} VALUES (3, 30)") == denied
        assert sqlstate_of(r, f"UPDATE {t} SET balance = 0 WHERE id = 1") == denied
        assert sqlstate_of(r, f"DELETE FROM {t} WHERE id = 1") == denied
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            with r.cursor().copy(f"COPY {t} TO STDOUT") as copy:
                list(copy)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            with r.cursor().copy(f"COPY {t} FROM STDIN") as copy:
                copy.write_row((4, 40))
        assert simple_query(r, f"SELECT balance FROM {t} WHERE id = 1") == ("42501", [])

        conn.execute(f"GRANT SELECT ON {t} TO {reader}")
        assert r.execute(f"SELECT id, balance FROM {t} ORDER BY id").fetchall() == [(1, 10), (2, 20)]
        assert sqlstate_of(r, f"INSERT INTO {t} VALUES (3, 30)") == denied
        # A statement prepared (server side) and a literal point lookup run often enough to be
        # cached while the grant holds...
        lookup = f"SELECT balance FROM {t} WHERE id = %s"
        for _ in range(3):
            assert r.execute(lookup, (1,), prepare=True).fetchone() == (10,)
            assert simple_query(r, f"SELECT balance FROM {t} WHERE id = 2") == (None, [(b"20",)])

        conn.execute(f"GRANT INSERT, UPDATE ON TABLE {t} TO {reader}")
        r.execute(f"INSERT INTO {t} VALUES (3, 30)")
        r.execute(f"UPDATE {t} SET balance = 31 WHERE id = 3")
        with r.cursor().copy(f"COPY {t} (id, balance) FROM STDIN") as copy:
            copy.write_row((4, 40))
        assert sqlstate_of(r, f"DELETE FROM {t} WHERE id = 3") == denied
        assert conn.execute(f"SELECT id, balance FROM {t} ORDER BY id").fetchall() == [
            (1, 10), (2, 20), (3, 31), (4, 40)]
        assert conn.execute(f"SELECT has_table_privilege('{reader}', '{t}', 'SELECT'), "
                            f"has_table_privilege('{reader}', '{t}', 'DELETE')").fetchone() == (True, False)
        acl = conn.execute("SELECT relacl::text FROM pg_class WHERE relname = %s", (t,)).fetchone()
        assert acl is not None and f"{reader}=arw/streamdb" in acl[0]

        # ...fail again once the privilege is revoked: a REVOKE moves the catalog version on.
        conn.execute(f"REVOKE SELECT ON {t} FROM {reader}")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match=f"permission denied for table {t}"):
            r.execute(lookup, (1,), prepare=True)
        assert simple_query(r, f"SELECT balance FROM {t} WHERE id = 2") == ("42501", [])
        r.execute(f"INSERT INTO {t} VALUES (5, 50)")  # INSERT is still granted
        conn.execute(f"REVOKE ALL PRIVILEGES ON {t} FROM {reader}")
        assert sqlstate_of(r, f"INSERT INTO {t} VALUES (6, 60)") == denied
        assert r.execute("SELECT 1").fetchone() == (1,)

        conn.execute(f"GRANT SELECT ON {t} TO PUBLIC")  # every role
        assert r.execute(f"SELECT count(*) FROM {t}").fetchone() == (5,)
        conn.execute(f"REVOKE SELECT ON {t} FROM PUBLIC")
        assert sqlstate_of(r, f"SELECT count(*) FROM {t}") == denied


def test_reading_through_views_push_queries_and_subscribe_needs_select(
        conn: psycopg.Connection, server: ServerProcess, unique: str) -> None:
    s, carol = f"clicks_{unique}", f"carol_{unique}"
    conn.execute(f"CREATE STREAM {s} (page TEXT, n INT)")
    conn.execute(f"CREATE USER {carol}")
    with login(server, carol) as c:
        denied = ("42501", f"permission denied for table {s}")
        assert sqlstate_of(c, f"CREATE MATERIALIZED VIEW mv_{unique} AS SELECT page, count(*) FROM {s} GROUP BY page") \
            == denied
        assert sqlstate_of(c, f"SELECT page FROM {s} EMIT CHANGES") == denied
        assert sqlstate_of(c, f"SUBSCRIBE TO {s}") == denied
        assert sqlstate_of(c, f"SELECT STREAM * FROM {s}") == denied
        assert sqlstate_of(c, f"INSERT INTO {s} SELECT page, n FROM {s}") == denied
        assert c.execute("SELECT count(*) FROM pg_class WHERE relname = %s", (s,)).fetchone() == (1,)


def test_owners_and_superusers(conn: psycopg.Connection, server: ServerProcess, unique: str) -> None:
    owner, other, admin = f"owner_{unique}", f"other_{unique}", f"admin_{unique}"
    t = f"owned_{unique}"
    conn.execute(f"CREATE USER {owner}; CREATE USER {other}; CREATE USER {admin} SUPERUSER")
    with login(server, owner) as o, login(server, other) as x, login(server, admin) as a:
        o.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v TEXT)")
        o.execute(f"INSERT INTO {t} VALUES (1, 'a')")
        o.execute(f"DELETE FROM {t} WHERE id = 1")
        o.execute(f"INSERT INTO {t} VALUES (2, 'b')")
        assert o.execute(f"SELECT * FROM {t}").fetchall() == [(2, "b")]
        assert conn.execute("SELECT pg_get_userbyid(relowner) FROM pg_class WHERE relname = %s",
                            (t,)).fetchone() == (owner,)
        assert conn.execute("SELECT tableowner FROM pg_tables WHERE tablename = %s", (t,)).fetchone() == (owner,)
        assert sqlstate_of(x, f"SELECT * FROM {t}")[0] == "42501"
        assert sqlstate_of(x, f"DROP TABLE {t}") == ("42501", f"must be owner of table {t}")
        assert sqlstate_of(x, f"GRANT SELECT ON {t} TO {other}") == ("42501", f"permission denied for table {t}")
        assert sqlstate_of(o, f"GRANT SELECT ON {t} TO nobody_{unique}") == (
            "42704", f'role "nobody_{unique}" does not exist')
        o.execute(f"GRANT SELECT ON {t} TO {other}")
        assert x.execute(f"SELECT v FROM {t}").fetchall() == [("b",)]
        # Superusers have every privilege on everything; ALTER ... SUPERUSER takes effect at once.
        assert a.execute(f"SELECT v FROM {t}").fetchall() == [("b",)]
        assert sqlstate_of(x, f"INSERT INTO {t} VALUES (3, 'c')")[0] == "42501"
        conn.execute(f"ALTER ROLE {other} SUPERUSER")
        x.execute(f"INSERT INTO {t} VALUES (3, 'c')")
        conn.execute(f"ALTER ROLE {other} NOSUPERUSER")
        assert sqlstate_of(x, f"INSERT INTO {t} VALUES (4, 'd')")[0] == "42501"
        o.execute(f"REVOKE SELECT ON {t} FROM {other}")
        a.execute(f"DROP TABLE {t}")


def test_only_superusers_manage_roles(conn: psycopg.Connection, server: ServerProcess, unique: str) -> None:
    dave, erin = f"dave_{unique}", f"erin_{unique}"
    conn.execute(f"CREATE USER {dave}; CREATE USER {erin}")
    with login(server, dave) as d:
        assert sqlstate_of(d, f"CREATE ROLE x_{unique}")[0] == "42501"
        assert sqlstate_of(d, f"ALTER ROLE {erin} PASSWORD 'x'")[0] == "42501"
        assert sqlstate_of(d, f"ALTER ROLE {dave} SUPERUSER")[0] == "42501"
        assert sqlstate_of(d, f"DROP ROLE {erin}")[0] == "42501"
        d.execute(f"ALTER ROLE {dave} PASSWORD 'my own choice'")  # a role may change its own password
        assert d.execute("SELECT 1").fetchone() == (1,)


def test_drop_role_rules(conn: psycopg.Connection, server: ServerProcess, unique: str) -> None:
    frank, grace = f"frank_{unique}", f"grace_{unique}"
    t, g = f"franks_{unique}", f"shared_{unique}"
    conn.execute(f"CREATE USER {frank}; CREATE USER {grace}")
    with login(server, frank) as f:
        f.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY)")
        assert sqlstate_of(f, f"DROP ROLE {frank}")[0] == "42501"
    with pytest.raises(psycopg.errors.DependentObjectsStillExist) as caught:
        conn.execute(f"DROP ROLE {frank}")
    assert caught.value.diag.message_primary == f'role "{frank}" cannot be dropped because some objects depend on it'
    assert caught.value.diag.message_detail == f"owner of table {t}"
    assert caught.value.diag.message_hint is not None and "REVOKE" in caught.value.diag.message_hint
    conn.execute(f"CREATE TABLE {g} (id INT PRIMARY KEY)")
    conn.execute(f"GRANT SELECT ON {g} TO {grace}")
    with pytest.raises(psycopg.errors.DependentObjectsStillExist, match="some objects depend on it"):
        conn.execute(f"DROP USER {grace}")
    conn.execute(f"DROP TABLE {t}")
    conn.execute(f"REVOKE ALL ON {g} FROM {grace}")
    conn.execute(f"DROP ROLE {frank}, {grace}")
    assert conn.execute("SELECT count(*) FROM pg_roles WHERE rolname IN (%s, %s)", (frank, grace)).fetchone() == (0,)
    assert sqlstate_of(conn, f"DROP ROLE {frank}") == ("42704", f'role "{frank}" does not exist')
    conn.execute(f"DROP ROLE IF EXISTS {frank}")  # a notice, no error
    assert sqlstate_of(conn, "DROP ROLE streamdb")[0] == "2BP01"
    admin = f"admin_{unique}"
    conn.execute(f"CREATE USER {admin} SUPERUSER")
    with login(server, admin) as a:
        assert sqlstate_of(a, f"DROP ROLE {admin}") == ("55006", "current user cannot be dropped")
    conn.execute(f"DROP ROLE {admin}")
    conn.execute(f"DROP TABLE {g}")


def test_passwords_are_never_shown(conn: psycopg.Connection, server: ServerProcess, unique: str) -> None:
    secret = f"Zebra-Quokka-{unique}"
    heidi = f"heidi_{unique}"
    conn.execute(f"CREATE USER {heidi} WITH PASSWORD '{secret}'")
    conn.execute(f"ALTER USER {heidi} PASSWORD '{secret}-2'")
    # A failing statement with a password in it (the role exists): nothing of it in the log either.
    assert sqlstate_of(conn, f"CREATE USER {heidi} PASSWORD '{secret}-3'")[0] == "42710"
    shown = []
    for table in ("pg_roles", "pg_authid", "pg_user", "pg_stat_activity"):
        shown += [str(row) for row in conn.execute(f"SELECT * FROM {table}").fetchall()]
    assert any(heidi in row for row in shown)
    assert not [row for row in shown if secret in row or "SCRAM-SHA-256" in row]
    assert conn.execute("SELECT rolpassword FROM pg_roles WHERE rolname = %s", (heidi,)).fetchone() == ("********",)
    assert conn.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s", (heidi,)).fetchone() == (None,)
    log = server.log_path.read_bytes()
    assert heidi.encode() not in log or secret.encode() not in log
    assert secret.encode() not in log
    # On disk only the verifier is kept, never the password.
    stored = b"".join(p.read_bytes() for p in Path(server.data_dir).rglob("*") if p.is_file() and
                      p.stat().st_size < 50_000_000)
    assert secret.encode() not in stored


def test_psql_du_lists_roles(conn: psycopg.Connection, server: ServerProcess, unique: str) -> None:
    ivan = f"ivan_{unique}"
    conn.execute(f"CREATE ROLE {ivan} WITH SUPERUSER NOLOGIN")
    out = subprocess.run(["psql", "-X", "-h", server.host, "-p", str(server.port), "-U", "streamdb", "streamdb",
                          "-c", r"\du"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = {line.split("|")[0].strip(): line for line in out.stdout.splitlines() if "|" in line}
    assert "Superuser" in lines["streamdb"]
    assert "Superuser" in lines[ivan] and "Cannot login" in lines[ivan]


def test_roles_and_privileges_survive_a_restart(fresh_server: ServerProcess) -> None:
    with fresh_server.connect() as c:
        c.execute("CREATE USER judy PASSWORD 'pw'; CREATE TABLE notes (id INT PRIMARY KEY, body TEXT)")
        c.execute("INSERT INTO notes VALUES (1, 'hi'); GRANT SELECT ON notes TO judy")
    with login(fresh_server, "judy") as j:
        j.execute("CREATE TABLE judys (id INT PRIMARY KEY)")
    assert fresh_server.stop() == 0
    fresh_server.restart()
    with login(fresh_server, "judy") as j:
        assert j.execute("SELECT body FROM notes").fetchall() == [("hi",)]
        assert sqlstate_of(j, "INSERT INTO notes VALUES (2, 'x')")[0] == "42501"
        j.execute("DROP TABLE judys")  # still its owner
    with fresh_server.connect() as c:
        assert c.execute("SELECT relname, pg_get_userbyid(relowner) FROM pg_class WHERE relname = 'notes'"
                         ).fetchall() == [("notes", "streamdb")]


def test_login_info_holds_verifiers_not_passwords(tmp_path: Path) -> None:
    """The API the wire layer authenticates with: a SCRAM verifier of the password, and the md5
    hash only when password_encryption_md5 is on."""
    from streamdb.auth import md5_hash, parse_verifier, scram_keys
    from streamdb.config import Settings
    from streamdb.errors import InvalidAuthorization
    from streamdb.runtime.engine import Engine

    async def run(md5: bool, data: Path) -> None:
        engine = Engine(Settings(data_dir=data, spark_enabled=False, password_encryption_md5=md5))
        try:
            session = engine.new_session("streamdb", "streamdb", {})
            for sql in ("CREATE USER kim PASSWORD 'k1m'", "CREATE ROLE team"):
                for statement in session.parse(sql):
                    await session.execute(statement)
            info = engine.login_info("kim")
            assert info is not None and info.can_login and not info.superuser and info.user == "kim"
            assert info.scram_verifier is not None and "k1m" not in info.scram_verifier
            iterations, salt, stored_key, server_key = parse_verifier(info.scram_verifier)
            assert iterations == 4096 and scram_keys("k1m", salt, iterations) == (stored_key, server_key)
            assert info.md5_hash == (md5_hash("k1m", "kim") if md5 else None)
            team = engine.login_info("team")
            assert team is not None and not team.can_login and team.scram_verifier is None
            assert engine.login_info("nobody") is None
            bootstrap = engine.login_info("streamdb")
            assert bootstrap is not None and bootstrap.superuser and bootstrap.can_login
            with pytest.raises(InvalidAuthorization, match='role "team" is not permitted to log in'):
                engine.new_session("team", "streamdb", {})
            with pytest.raises(InvalidAuthorization, match='role "nobody" does not exist'):
                engine.new_session("nobody", "streamdb", {})
            for statement in session.parse("ALTER USER kim PASSWORD NULL"):
                await session.execute(statement)
            cleared = engine.login_info("kim")
            assert cleared is not None and cleared.scram_verifier is None and cleared.md5_hash is None
        finally:
            engine.close()

    asyncio.run(run(False, tmp_path / "plain"))
    asyncio.run(run(True, tmp_path / "md5"))
