"""The round-trip check every dialect statement form gets (tests/test_dialect*.py)."""

from __future__ import annotations

from sqlglot import exp

from streamdb.sql.parser import generate, parse_one


def assert_round_trip(sql: str, expected: str, node_type: type[exp.Expr]) -> None:
    """`sql` parses to `node_type`, prints as `expected`, and that text parses back to the same tree."""
    tree = parse_one(sql)
    assert type(tree) is node_type
    generated = generate(tree)
    assert generated == expected
    again = parse_one(generated)
    assert again == tree
    assert generate(again) == generated
