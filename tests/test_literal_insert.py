"""The literal-INSERT scanner builds exactly the tree the general parser builds, positions included,
and leaves every other text to the parser."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from streamdb.errors import SyntaxErrorSQL
from streamdb.sql import literal_insert
from streamdb.sql.parser import _LITERAL_INSERTS, _parse_statements, parse_statements


def _shape(node: exp.Expression) -> list[tuple[str, object, dict[str, object]]]:
    return [(type(n).__name__, repr(n.args.get("this")) if not isinstance(n.args.get("this"), exp.Expression)
             else "", dict(n.meta)) for n in node.walk()]


def _assert_same_as_parser(text: str) -> None:
    fast = _LITERAL_INSERTS.read(text)
    general = _parse_statements(text)
    assert len(general) == 1
    if re.search("\r(?!\n)", text):
        # sqlglot counts a lone carriage return as a line break in some places and not in others
        # (its string bodies): such texts are left to it, positions and all.
        assert fast is None, text
        return
    assert fast is not None, text
    tree, start, end = fast
    assert tree == general[0].ast
    assert _shape(tree) == _shape(general[0].ast)  # positions too: errors point at the same place
    assert (text[start:end], start) == (general[0].sql, general[0].offset)


NUMBERS = st.one_of(
    st.integers(-10**30, 10**30).map(str),
    st.decimals(allow_nan=False, allow_infinity=False, places=4).map(str),
    st.sampled_from(["1.", "5.e3", "1E+2", "1.5e-3", "007", "00.10", "-0"]),
)
STRINGS = st.text(alphabet=st.characters(blacklist_characters="\\\x00", blacklist_categories=("Cs",)),
                  max_size=12).map(lambda s: "'" + s.replace("'", "''") + "'")
WORDS = st.sampled_from(["NULL", "null", "Null", "TRUE", "true", "FALSE", "false"])
VALUES = st.one_of(NUMBERS, STRINGS, WORDS)
SPACE = st.sampled_from(["", " ", "  ", "\n", "\t", " \n "])


@st.composite
def literal_inserts(draw: st.DrawFn) -> str:
    width = draw(st.integers(1, 5))
    rows = draw(st.lists(st.lists(VALUES, min_size=width, max_size=width), min_size=1, max_size=6))
    columns = draw(st.one_of(st.none(), st.just([f"c{i}" for i in range(width)])))
    target = draw(st.sampled_from(["s", "public.s", '"My Stream"', 'public."s"', "S_2"]))
    sep = draw(SPACE)
    head = draw(SPACE) + draw(st.sampled_from(["INSERT INTO", "insert into", "Insert\nInto"])) + " " + target
    if columns is not None:
        head += draw(SPACE) + "(" + ", ".join(columns) + ")"
    body = ("," + sep).join("(" + ("," + draw(SPACE)).join(r) + draw(SPACE) + ")" for r in rows)
    return head + " VALUES" + draw(SPACE) + body + draw(st.sampled_from(["", ";", " ; ", "\n"]))


@settings(max_examples=300, deadline=None)
@given(literal_inserts())
def test_the_scanner_builds_the_parsers_tree(text: str) -> None:
    _assert_same_as_parser(text)


@pytest.mark.parametrize("text", [
    "INSERT INTO s VALUES (1, -2, 1.5, 1e5, 'a''b', NULL, true, FALSE, '', -0.5, 5.)",
    'INSERT INTO "My".t (a, "B") VALUES (1,2),(3,4)',
    "insert into public.s(a) values(1)",
    "INSERT INTO s VALUES\n (1,\n  'a\nb', \n 22);",
    "INSERT INTO s VALUES ('naïve ☃', '$1', '--', '/* x */', ';')",
])
def test_known_forms(text: str) -> None:
    _assert_same_as_parser(text)


@pytest.mark.parametrize("text", [
    "INSERT INTO s VALUES (1 + 2)",
    "INSERT INTO s VALUES (now())",
    "INSERT INTO s VALUES ('1'::int)",
    "INSERT INTO s VALUES (E'a\\nb')",
    "INSERT INTO s VALUES ('a\\b')",  # backslashes: left to the parser's reading
    "INSERT INTO s VALUES ($1, $2)",
    "INSERT INTO s VALUES (1) -- a comment",
    "INSERT INTO s VALUES (1 /* c */)",
    "INSERT INTO s VALUES (1); INSERT INTO s VALUES (2)",
    "INSERT INTO s VALUES (1) RETURNING *",
    "INSERT INTO s VALUES (DEFAULT)",
    "INSERT INTO s VALUES (- 1)",
    "INSERT INTO s VALUES (.5)",  # the parser reads it another way (no position)
    "INSERT INTO s VALUES (1e)",
    "INSERT INTO s VALUES ('a' 'b')",
    "INSERT INTO s VALUES (1), ",
    "INSERT INTO s VALUES ()",
    "INSERT INTO s SELECT 1",
    "INSERT INTO xVALUES(1)",
    "INSERT INTO s VALUES (1",
    "INSERT INTO s VALUES ('open",
    "INSERT INTO s VALUES (\u0661)",  # another script's digit
    "INSERT INTO s VALUES\u00a0(1)",  # a no-break space
    "\u2003INSERT INTO s VALUES (1)",
    "INSERT INTO s VALUES (1)\f",
])
def test_other_texts_take_the_parser(text: str) -> None:
    assert _LITERAL_INSERTS.read(text) is None


@pytest.mark.parametrize("text", [
    "INSERT INTO select VALUES (1)", "INSERT INTO s(null) VALUES (1)", "INSERT INTO s(from) VALUES (1)",
    "INSERT INTO a.b.c VALUES (1)", "INSERT INTO s(a, a) VALUES (1, 2)", "INSERT INTO values VALUES (1)",
])
def test_odd_heads_read_as_the_parser_reads_them(text: str) -> None:
    try:
        general = _parse_statements(text)
    except SyntaxErrorSQL:
        assert _LITERAL_INSERTS.read(text) is None  # and parse_statements raises the parser's error
        return
    if _LITERAL_INSERTS.read(text) is not None:
        _assert_same_as_parser(text)
    assert [p.ast for p in parse_statements(text)] == [p.ast for p in general]


def test_heads_are_remembered_boundedly() -> None:
    for i in range(literal_insert.HEADS_KEPT + 10):
        assert _LITERAL_INSERTS.read(f"INSERT INTO t{i} VALUES (1)") is not None
    assert len(_LITERAL_INSERTS._heads) <= literal_insert.HEADS_KEPT


def test_a_negative_numeric_literal_keeps_all_its_digits() -> None:
    """`-d` of a Decimal rounds to the context's 28 digits: a stored numeric holds 38."""
    from decimal import Decimal

    from streamdb.planner.coerce import literal_value

    wide = "1234567890123456789012345678.1234567891"
    (stmt,) = parse_statements(f"INSERT INTO t VALUES (-{wide}), (-(1.50))")
    rows = stmt.ast.expression.expressions
    assert [literal_value(r.expressions[0]) for r in rows] == [Decimal(f"-{wide}"), Decimal("-1.50")]
    assert str(literal_value(rows[1].expressions[0])) == "-1.50"  # its scale too
