"""VARCHAR(n), JSONB and JSON keep their PostgreSQL types on the way to clients: in the catalog
(psql \\d, information_schema, pg_attribute, SQLAlchemy reflection), in result columns (type OID
and typmod in RowDescription) and in values (psycopg decodes jsonb to dicts in text and binary
format; asyncpg gets jsonb's text form)."""

from __future__ import annotations

import asyncio
import subprocess
import threading

import asyncpg
import psycopg
import pytest
import sqlalchemy as sa
from psycopg.types.json import Jsonb

from tests.test_e2e_push import push_queries, wait_subscribed

VARCHAR_OID, TEXT_OID, JSON_OID, JSONB_OID = 1043, 25, 114, 3802


def described(cur: psycopg.Cursor) -> list[tuple[str, int, int | None]]:
    """(name, type OID, varchar length from the typmod) of each result column."""
    return [(d.name, d.type_code, d.display_size) for d in cur.description]


def psql(server, command: str) -> str:
    out = subprocess.run(["psql", "-X", "-h", server.host, "-p", str(server.port), "-U", "streamdb",
                          "streamdb", "-c", command], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def describe_rows(server, relation: str) -> dict[str, str]:
    """Column -> Type from psql's \\d."""
    rows = {}
    for line in psql(server, rf"\d {relation}").splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 2 and parts[0] and parts[0] != "Column":
            rows[parts[0]] = parts[1]
    return rows


@pytest.fixture()
def people(conn, unique) -> str:
    t = f"people_{unique}"
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, name VARCHAR(5), note CHARACTER VARYING, "
                 "code varchar, doc JSONB, raw JSON)")
    conn.execute(f"""INSERT INTO {t} VALUES (1, 'ann', 'hi', 'A1', '{{"b": [1,2], "a": 1}}', '{{"b":1,"a":2}}'),
                     (2, 'bob', NULL, NULL, '[1, "x", null]', '[]')""")
    return t


def test_varchar_length_kept_in_catalog(server, conn, people):
    assert describe_rows(server, people) == {
        "id": "integer", "name": "character varying(5)", "note": "character varying",
        "code": "character varying", "doc": "jsonb", "raw": "json"}
    assert conn.execute(
        "SELECT column_name, data_type, character_maximum_length, character_octet_length, udt_name "
        "FROM information_schema.columns WHERE table_name = %s ORDER BY ordinal_position",
        (people,)).fetchall() == [
        ("id", "integer", None, None, "int4"),
        ("name", "character varying", 5, 20, "varchar"),
        ("note", "character varying", None, 1073741824, "varchar"),
        ("code", "character varying", None, 1073741824, "varchar"),
        ("doc", "jsonb", None, None, "jsonb"),
        ("raw", "json", None, None, "json")]
    assert conn.execute(
        "SELECT attname, atttypid, atttypmod, format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = %s::regclass AND attnum > 0 ORDER BY attnum", (people,)).fetchall() == [
        ("id", 23, -1, "integer"), ("name", VARCHAR_OID, 9, "character varying(5)"),
        ("note", VARCHAR_OID, -1, "character varying"), ("code", VARCHAR_OID, -1, "character varying"),
        ("doc", JSONB_OID, -1, "jsonb"), ("raw", JSON_OID, -1, "json")]


def test_sqlalchemy_reflects_varchar_length_and_json_types(server, people):
    engine = sa.create_engine(f"postgresql+psycopg://streamdb@{server.host}:{server.port}/streamdb")
    try:
        cols = {c["name"]: c["type"] for c in sa.inspect(engine).get_columns(people)}
    finally:
        engine.dispose()
    assert isinstance(cols["name"], sa.VARCHAR) and cols["name"].length == 5
    assert isinstance(cols["note"], sa.VARCHAR) and cols["note"].length is None
    assert type(cols["doc"]).__name__ == "JSONB" and type(cols["raw"]).__name__ == "JSON"


def test_varchar_too_long_is_refused_like_postgres(conn, people):
    with pytest.raises(psycopg.errors.StringDataRightTruncation,
                       match=r"value too long for type character varying\(5\)"):
        conn.execute(f"INSERT INTO {people} (id, name) VALUES (3, 'abcdef')")
    with pytest.raises(psycopg.errors.StringDataRightTruncation):
        conn.execute(f"INSERT INTO {people} (id, name) VALUES (%s, %s)", (3, "abcdefgh"))
    with pytest.raises(psycopg.errors.StringDataRightTruncation):
        conn.execute(f"UPDATE {people} SET name = 'toolong' WHERE id = 1")
    # Trailing spaces past the limit are cut, as in PostgreSQL; unbounded varchar takes anything.
    conn.execute(f"INSERT INTO {people} (id, name, note) VALUES (3, 'abcde   ', %s)", ("x" * 500,))
    assert conn.execute(f"SELECT name, length(note) FROM {people} WHERE id = 3").fetchone() == ("abcde", 500)
    # A parameter compared with a varchar(5) column may be longer: it is plain varchar.
    assert conn.execute(f"SELECT id FROM {people} WHERE name = %s", ("abcdefgh",)).fetchall() == []
    assert conn.execute(f"SELECT id FROM {people} WHERE name = %s", ("ann",)).fetchall() == [(1,)]
    assert conn.execute(f"SELECT name FROM {people} WHERE id = 1").fetchone() == ("ann",)


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_psycopg_result_types_and_values(conn, people, binary):
    cur = conn.cursor(binary=binary)
    cur.execute(f"SELECT id, name, note, doc, raw, doc -> 'b' AS b, doc ->> 'a' AS a, t.name AS alias_name "
                f"FROM {people} t ORDER BY id")
    assert described(cur) == [("id", 23, None), ("name", VARCHAR_OID, 5), ("note", VARCHAR_OID, None),
                              ("doc", JSONB_OID, None), ("raw", JSON_OID, None), ("b", JSONB_OID, None),
                              ("a", TEXT_OID, None), ("alias_name", VARCHAR_OID, 5)]
    assert cur.fetchall() == [
        (1, "ann", "hi", {"a": 1, "b": [1, 2]}, {"a": 2, "b": 1}, [1, 2], "1", "ann"),
        (2, "bob", None, [1, "x", None], [], None, None, "bob")]
    # Computed text stays text, as in PostgreSQL.
    cur.execute(f"SELECT upper(name), name || '!', coalesce(note, 'none') FROM {people} WHERE id = 1")
    assert [d[1] for d in described(cur)] == [TEXT_OID] * 3
    assert cur.fetchone() == ("ANN", "ann!", "hi")
    # Through a subquery the column keeps its type.
    cur.execute(f"SELECT s.name, s.doc FROM (SELECT name, doc FROM {people}) s ORDER BY s.name")
    assert described(cur) == [("name", VARCHAR_OID, 5), ("doc", JSONB_OID, None)]
    assert cur.fetchall() == [("ann", {"a": 1, "b": [1, 2]}), ("bob", [1, "x", None])]


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_casts_to_varchar_and_jsonb(conn, binary):
    cur = conn.cursor(binary=binary)
    cur.execute("""SELECT 'abc'::varchar(3), 'abc'::varchar, '{"b": [1,2], "a": {"y":1, "x":2}}'::jsonb,
                          '{"b":1}'::json, '{"k": 1}'::jsonb -> 'k' AS k, 'x'::text""")
    assert described(cur) == [("varchar", VARCHAR_OID, 3), ("varchar", VARCHAR_OID, None),
                              ("jsonb", JSONB_OID, None), ("json", JSON_OID, None), ("k", JSONB_OID, None),
                              ("text", TEXT_OID, None)]
    assert cur.fetchone() == ("abc", "abc", {"a": {"x": 2, "y": 1}, "b": [1, 2]}, {"b": 1}, 1, "x")


def test_jsonb_text_form_is_postgres_output_format(conn, people):
    """jsonb's text is PostgreSQL's: keys sorted shortest first, ', ' and ': ' separators."""
    cur = conn.cursor()
    cur.execute(f"SELECT doc::text, raw::text FROM {people} WHERE id = 1")
    assert cur.fetchone() == ('{"a": 1, "b": [1, 2]}', '{"b":1,"a":2}')
    # psycopg parameters typed jsonb arrive as objects and read back as objects.
    conn.execute(f"INSERT INTO {people} (id, doc) VALUES (%s, %s)", (9, Jsonb({"zz": {"k": [True, None]}, "a": 1.5})))
    assert conn.execute(f"SELECT doc, doc::text FROM {people} WHERE id = 9").fetchone() == (
        {"a": 1.5, "zz": {"k": [True, None]}}, '{"a": 1.5, "zz": {"k": [true, null]}}')


def test_asyncpg_binary_types_and_values(server, people):
    async def main() -> tuple[list, list]:
        c = await asyncpg.connect(host=server.host, port=server.port, user="streamdb", database="streamdb")
        try:
            stmt = await c.prepare(f"SELECT name, note, doc, raw, doc -> 'b' AS b, 'ab'::varchar(4) AS v "
                                   f"FROM {people} ORDER BY id")
            types = [(a.name, a.type.name) for a in stmt.get_attributes()]
            rows = [tuple(r) for r in await stmt.fetch()]
            await c.execute(f"INSERT INTO {people} (id, name, doc) VALUES ($1, $2, $3)", 5, "eve",
                            '{"q": [1, 2]}')
            rows.append(tuple(await c.fetchrow(f"SELECT name, doc FROM {people} WHERE id = 5")))
            with pytest.raises(asyncpg.exceptions.StringDataRightTruncationError):
                await c.execute(f"INSERT INTO {people} (id, name) VALUES ($1, $2)", 6, "eleven chars")
            return types, rows
        finally:
            await c.close()

    types, rows = asyncio.run(main())
    assert types == [("name", "varchar"), ("note", "varchar"), ("doc", "jsonb"), ("raw", "json"),
                     ("b", "jsonb"), ("v", "varchar")]
    # asyncpg hands json and jsonb back as their text, as it does with PostgreSQL.
    assert rows == [("ann", "hi", '{"a": 1, "b": [1, 2]}', '{"b":1,"a":2}', "[1, 2]", "ab"),
                    ("bob", None, '[1, "x", null]', "[]", None, "ab"),
                    ("eve", '{"q": [1, 2]}')]


def test_stream_and_materialized_view_keep_types(server, conn, unique):
    s, mv = f"evs_{unique}", f"evs_mv_{unique}"
    conn.execute(f"CREATE STREAM {s} (k VARCHAR(4) KEY, tag CHARACTER VARYING(3), payload JSONB, raw JSON)")
    conn.execute(f"""INSERT INTO {s} VALUES ('a', 'x', '{{"n":1,"arr":[1,2]}}', '{{"n": 1}}'),
                     ('b', 'y', '{{"n":2}}', '[]')""")
    with pytest.raises(psycopg.errors.StringDataRightTruncation, match=r"character varying\(3\)"):
        conn.execute(f"INSERT INTO {s} VALUES ('c', 'long', '{{}}', '{{}}')")
    with pytest.raises(psycopg.errors.StringDataRightTruncation, match=r"character varying\(4\)"):
        conn.execute(f"INSERT INTO {s} VALUES ('abcde', 'z', '{{}}', '{{}}')")
    assert describe_rows(server, s) == {"k": "character varying(4)", "tag": "character varying(3)",
                                        "payload": "jsonb", "raw": "json"}
    conn.execute(f"CREATE MATERIALIZED VIEW {mv} AS SELECT k, tag, payload, raw, payload -> 'arr' AS arr, "
                 f"payload ->> 'n' AS n FROM {s}")
    conn.execute("FLUSH")
    assert describe_rows(server, mv) == {"k": "character varying(4)", "tag": "character varying(3)",
                                         "payload": "jsonb", "raw": "json", "arr": "jsonb", "n": "text"}
    for binary in (False, True):
        cur = conn.cursor(binary=binary)
        cur.execute(f"SELECT * FROM {mv} ORDER BY k")
        assert described(cur) == [("k", VARCHAR_OID, 4), ("tag", VARCHAR_OID, 3), ("payload", JSONB_OID, None),
                                  ("raw", JSON_OID, None), ("arr", JSONB_OID, None), ("n", TEXT_OID, None)]
        assert cur.fetchall() == [("a", "x", {"arr": [1, 2], "n": 1}, {"n": 1}, [1, 2], "1"),
                                  ("b", "y", {"n": 2}, [], None, "2")]
    conn.execute(f"INSERT INTO {s} VALUES ('d', 'z', '{{\"n\": 3}}', '{{}}')")
    conn.execute("FLUSH")
    assert conn.execute(f"SELECT payload, tag FROM {mv} WHERE k = 'd'").fetchall() == [({"n": 3}, "z")]


def test_push_query_sends_jsonb_and_varchar(server, conn, unique):
    s = f"evp_{unique}"
    conn.execute(f"CREATE STREAM {s} (tag VARCHAR(3), payload JSONB)")
    rows: list = []
    types: list = []
    started = threading.Event()
    before = len(push_queries(conn))

    def consume() -> None:
        with server.connect() as c, c.cursor() as cur:
            stream = cur.stream(f"SELECT tag, payload, payload -> 'v' AS v FROM {s} EMIT CHANGES")
            started.set()
            try:
                for row in stream:
                    types[:] = described(cur)
                    rows.append(row)
                    if len(rows) >= 2:
                        break
            finally:
                stream.close()

    t = threading.Thread(target=consume)
    t.start()
    started.wait(10)
    wait_subscribed(conn, before)
    conn.execute(f"""INSERT INTO {s} VALUES ('a', '{{"v": [1,2], "w": 0}}'), ('b', '{{"v": {{"z":1,"a":2}}}}')""")
    t.join(60)
    assert not t.is_alive()
    assert [ty[1:] for ty in types[-3:]] == [(VARCHAR_OID, 3), (JSONB_OID, None), (JSONB_OID, None)]
    assert sorted((r[0], r[-3], r[-2], r[-1]) for r in rows) == [
        ("insert", "a", {"v": [1, 2], "w": 0}, [1, 2]), ("insert", "b", {"v": {"a": 2, "z": 1}}, {"a": 2, "z": 1})]


def test_copy_into_varchar_stream_checks_length(conn, unique):
    s = f"evc_{unique}"
    conn.execute(f"CREATE STREAM {s} (tag VARCHAR(3), n INT)")
    with conn.cursor() as cur, cur.copy(f"COPY {s} (tag, n) FROM STDIN") as copy:
        copy.write("abc\t1\nxy\t2\n")
    with pytest.raises(psycopg.errors.StringDataRightTruncation, match=r"character varying\(3\)"):
        with conn.cursor() as cur, cur.copy(f"COPY {s} (tag, n) FROM STDIN") as copy:
            copy.write("abcd\t3\n")
    cur = conn.execute(f"SELECT tag, n FROM {s} ORDER BY n")
    assert described(cur)[0] == ("tag", VARCHAR_OID, 3)
    assert cur.fetchall() == [("abc", 1), ("xy", 2)]


def test_to_char_hours_as_postgres_prints_them_ad_hoc_and_in_views(conn, unique):
    """HH is the hour of the half day (PostgreSQL: 12 at 00:07), HH24 of the day, AM/PM the
    meridiem: the same text ad hoc and from a view (RisingWave's Nexmark q10 and q16 use 'HH:MI')."""
    t = f"tc_{unique}"
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, ts TIMESTAMP)")
    conn.execute(f"INSERT INTO {t} VALUES (1, '2015-07-15 00:07:00'), (2, '2015-07-15 13:45:09'), (3, NULL)")
    query = (f"SELECT id, to_char(ts, 'YYYY-MM-DD HH:MI') AS a, to_char(ts, 'HH24:MI:SS') AS b, "
             f"to_char(ts, 'HH12 AM') AS c FROM {t}")
    expected = [(1, "2015-07-15 12:07", "00:07:00", "12 AM"), (2, "2015-07-15 01:45", "13:45:09", "01 PM"),
                (3, None, None, None)]
    assert sorted(conn.execute(query).fetchall(), key=lambda r: r[0]) == expected
    conn.execute(f"CREATE MATERIALIZED VIEW {t}_v AS {query}")
    conn.execute("FLUSH")
    assert sorted(conn.execute(f"SELECT * FROM {t}_v").fetchall(), key=lambda r: r[0]) == expected
    conn.execute(f"DROP TABLE {t} CASCADE")


def test_json_operators_ad_hoc_on_both_engines_and_in_views(conn, unique):
    """->, ->>, #> and #>> give PostgreSQL's answers on the embedded engine, on Spark and in a view
    (Spark's GET_JSON_OBJECT gave a string without its quotes for ->, so a view of one failed,
    and a JSON null as the text null for ->>); `coalesce(doc -> 'a', ...)` is json's operator,
    not a lambda. A path element that is an integer is an array's position or an object's key."""
    t = f"jo_{unique}"
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, doc JSONB)")
    conn.execute(f"""INSERT INTO {t} VALUES (1, '{{"a": [10, {{"b": "x"}}, "end"], "s": "top"}}'),
        (2, '{{"a": {{"1": "k"}}}}'), (3, '{{"a": [7, null, "s"], "z": [true]}}')""")
    query = (f"SELECT id, doc -> 's' AS s, doc ->> 's' AS st, doc #> '{{a,1,b}}' AS b, doc #>> '{{a,1,b}}' AS bt, "
             f"doc #>> '{{a,1}}' AS a1, doc -> 'a' -> 2 AS a2, doc -> 'a' ->> 0 AS a0t, doc #>> '{{a,-1}}' AS last, "
             f"coalesce(doc -> 'z', doc -> 'a' -> 0) AS c FROM {t}")
    expected = [
        (1, "top", "top", "x", "x", None, "end", "10", "end", 10),
        (2, None, None, None, None, "k", None, None, None, None),
        (3, None, None, None, None, None, "s", "7", "s", [True]),
    ]
    # a1 of row 1 is an object, whose text is left out (jsonb's spacing: docs/known-issues.md)

    def rows(sql: str) -> list[tuple]:
        got = sorted(conn.execute(sql).fetchall(), key=lambda r: r[0])
        return [r[:5] + ((None if r[0] == 1 else r[5]),) + r[6:] for r in got]

    assert rows(query) == expected
    conn.execute("SET streamdb.spark_read_threshold_rows = 0")
    try:
        assert rows(query) == expected
    finally:
        conn.execute("RESET streamdb.spark_read_threshold_rows")
    conn.execute(f"CREATE MATERIALIZED VIEW {t}_v AS {query}")
    conn.execute("FLUSH")
    assert rows(f"SELECT * FROM {t}_v") == expected
    # maintained through a change: the view against the same query recomputed
    conn.execute(f"""UPDATE {t} SET doc = '{{"a": [1, "two"], "s": null}}' WHERE id = 2""")
    conn.execute("FLUSH")
    assert rows(f"SELECT * FROM {t}_v") == rows(query)
    assert rows(query)[1] == (2, None, None, None, None, "two", None, "1", "two", 1)
    conn.execute(f"DROP TABLE {t} CASCADE")
