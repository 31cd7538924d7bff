"""Role and privilege statements in the StreamDB dialect: every form round-trips (parse -> generate
-> parse gives an equal tree and the expected text), the trees have the shapes the planner reads,
malformed statements are syntax errors, and PASSWORD literals are masked by redact_sql."""

from __future__ import annotations

import pytest
from sqlglot import exp

from streamdb.auth import make_verifier, md5_hash, parse_verifier, redact_sql, scram_keys
from streamdb.errors import SyntaxErrorSQL
from streamdb.sql import ast
from streamdb.sql.parser import parse_one, parse_statements
from tests.dialect_util import assert_round_trip

# (input, generated SQL, node type). One row per statement form.
ROUND_TRIPS: list[tuple[str, str, type[exp.Expr]]] = [
    ("CREATE ROLE analyst", "CREATE ROLE analyst", ast.CreateRole),
    ("create user bob", "CREATE USER bob", ast.CreateRole),
    ("CREATE ROLE r WITH LOGIN", "CREATE ROLE r WITH LOGIN", ast.CreateRole),
    ("CREATE ROLE r NOLOGIN", "CREATE ROLE r WITH NOLOGIN", ast.CreateRole),
    ("CREATE ROLE admin WITH SUPERUSER LOGIN", "CREATE ROLE admin WITH SUPERUSER LOGIN", ast.CreateRole),
    ("CREATE USER u NOSUPERUSER", "CREATE USER u WITH NOSUPERUSER", ast.CreateRole),
    ("CREATE USER bob WITH PASSWORD 'it''s secret'", "CREATE USER bob WITH PASSWORD 'it''s secret'", ast.CreateRole),
    ("CREATE USER bob PASSWORD NULL", "CREATE USER bob WITH PASSWORD NULL", ast.CreateRole),
    ('CREATE ROLE "Mixed Case" LOGIN', 'CREATE ROLE "Mixed Case" WITH LOGIN', ast.CreateRole),
    ("ALTER ROLE bob WITH NOLOGIN", "ALTER ROLE bob WITH NOLOGIN", ast.AlterRole),
    ("alter user bob password 'new'", "ALTER USER bob WITH PASSWORD 'new'", ast.AlterRole),
    ("ALTER USER bob PASSWORD E'a\\\\b'", "ALTER USER bob WITH PASSWORD 'a\\b'", ast.AlterRole),
    ("ALTER USER bob PASSWORD NULL SUPERUSER", "ALTER USER bob WITH PASSWORD NULL SUPERUSER", ast.AlterRole),
    ("DROP ROLE bob", "DROP ROLE bob", ast.DropRole),
    ("drop user if exists a, b", "DROP USER IF EXISTS a, b", ast.DropRole),
    ("GRANT SELECT ON t TO bob", "GRANT SELECT ON TABLE t TO bob", ast.GrantPrivileges),
    ("grant select, insert on table t, public.u to bob, alice",
     "GRANT SELECT, INSERT ON TABLE t, public.u TO bob, alice", ast.GrantPrivileges),
    ("GRANT ALL PRIVILEGES ON t TO PUBLIC", "GRANT ALL ON TABLE t TO PUBLIC", ast.GrantPrivileges),
    ("GRANT ALL ON t TO bob", "GRANT ALL ON TABLE t TO bob", ast.GrantPrivileges),
    ("GRANT UPDATE, DELETE ON t TO bob", "GRANT UPDATE, DELETE ON TABLE t TO bob", ast.GrantPrivileges),
    ("REVOKE SELECT ON t FROM bob", "REVOKE SELECT ON TABLE t FROM bob", ast.RevokePrivileges),
    ("revoke all privileges on table t, u from bob, public",
     "REVOKE ALL ON TABLE t, u FROM bob, public", ast.RevokePrivileges),
]


@pytest.mark.parametrize(("sql", "expected", "node_type"), ROUND_TRIPS, ids=[r[0][:70] for r in ROUND_TRIPS])
def test_round_trip(sql: str, expected: str, node_type: type[exp.Expr]) -> None:
    assert_round_trip(sql, expected, node_type)


def test_create_role_shape() -> None:
    tree = parse_one("CREATE USER Bob WITH LOGIN PASSWORD 'pw'")
    assert isinstance(tree, ast.CreateRole)
    assert tree.args["kind"] == "USER"
    assert isinstance(tree.this, exp.Identifier) and tree.this.name == "Bob" and not tree.this.quoted
    options = [(o.this, o.args.get("expression")) for o in tree.args["options"]]
    assert options == [("LOGIN", None), ("PASSWORD", exp.Literal.string("pw"))]


def test_grant_shape() -> None:
    tree = parse_one("GRANT SELECT, ALL PRIVILEGES ON TABLE a, b TO x, PUBLIC")
    assert isinstance(tree, ast.GrantPrivileges)
    assert [p.name for p in tree.args["privileges"]] == ["SELECT", "ALL"]
    assert [t.name for t in tree.args["tables"]] == ["a", "b"]
    assert [r.name for r in tree.args["roles"]] == ["x", "PUBLIC"]


def test_other_alter_statements_still_parse() -> None:
    assert isinstance(parse_one("ALTER TABLE t ADD COLUMN x INT"), exp.Alter)


@pytest.mark.parametrize("text", [
    "CREATE ROLE",
    "CREATE ROLE r CREATEDB",
    "CREATE ROLE r PASSWORD",
    "ALTER ROLE r",
    "GRANT ON t TO bob",
    "GRANT TRUNCATE ON t TO bob",
    "GRANT SELECT t TO bob",
    "GRANT SELECT ON t bob",
    "REVOKE SELECT ON t TO bob",
    "DROP ROLE",
])
def test_malformed_statements_are_syntax_errors(text: str) -> None:
    with pytest.raises(SyntaxErrorSQL) as caught:
        parse_statements(text)
    assert caught.value.sqlstate == "42601"
    assert caught.value.position is not None


@pytest.mark.parametrize(("text", "expected"), [
    ("CREATE USER bob WITH PASSWORD 'hunter2'", "CREATE USER bob WITH PASSWORD '********'"),
    ("alter role x password 'it''s' login", "alter role x password '********' login"),
    ("ALTER USER x WITH PASSWORD E'a\\'b'", "ALTER USER x WITH PASSWORD '********'"),
    ("CREATE USER x PASSWORD NULL", "CREATE USER x PASSWORD NULL"),
    ("SELECT 'password' AS p", "SELECT 'password' AS p"),
    ("CREATE USER x PASSWORD 'unterminated", "CREATE USER x PASSWORD '********'"),
    ("CREATE USER x PASSWORD $q$dollar$q$ LOGIN", "CREATE USER x PASSWORD '********' LOGIN"),
    ("CREATE USER a PASSWORD 'one'; CREATE USER b PASSWORD 'two'",
     "CREATE USER a PASSWORD '********'; CREATE USER b PASSWORD '********'"),
])
def test_redact_sql(text: str, expected: str) -> None:
    assert redact_sql(text) == expected


def test_scram_verifier_matches_rfc_7677_test_vector() -> None:
    # RFC 7677 section 3: password "pencil", salt W22ZaJ0SNY7soEsUEjb6gQ==, 4096 iterations.
    import base64

    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    verifier = make_verifier("pencil", salt=salt)
    iterations, parsed_salt, stored_key, server_key = parse_verifier(verifier)
    assert (iterations, parsed_salt) == (4096, salt)
    assert (stored_key, server_key) == scram_keys("pencil", salt, 4096)
    # The server signature of the RFC's exchange, computed from the ServerKey of the verifier.
    import hashlib
    import hmac

    auth_message = (b"n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    signature = hmac.new(server_key, auth_message, hashlib.sha256).digest()
    assert base64.b64encode(signature).decode() == "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert verifier.startswith("SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$")


def test_verifiers_use_fresh_salts_and_reject_garbage() -> None:
    assert make_verifier("x") != make_verifier("x")
    with pytest.raises(ValueError):
        parse_verifier("md5abc")
    # PostgreSQL: md5 of password then user name.
    assert md5_hash("secret", "bob") == "md5" + __import__("hashlib").md5(b"secretbob").hexdigest()
