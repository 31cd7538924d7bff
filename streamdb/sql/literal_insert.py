"""`INSERT INTO t [(cols)] VALUES (literals), ...` read without the general parser.

Writers send multi-row INSERTs of plain constants, and sqlglot's recursive-descent parser costs
~40 us a value (a 65-row, 4-column statement: 10-16 ms, more under load), all of it on the event
loop and holding the GIL that the pipelines' sinks need. This scanner reads only that form:

- a head `INSERT INTO name [(col, ...)] VALUES`, parsed by sqlglot once per distinct head text;
- rows of numbers (digits first, an optional leading minus), standard strings without backslashes, NULL,
  TRUE and FALSE, separated by commas, with an optional final semicolon.

It builds the tree the parser builds for the same text (the same nodes, with the same positions
in `meta`), so planning and every error afterwards are the same; tests/test_literal_insert.py
compares the two. Anything else (comments, casts, expressions, DEFAULT, escape strings,
parameters, several statements, RETURNING) returns None and takes the parser.
"""

from __future__ import annotations

import bisect
import re
import threading
from collections.abc import Callable

from sqlglot import exp

# Only the whitespace and digits SQL knows (ASCII): a no-break space or another script's digits
# is for the parser to refuse.
_WS = "[ \t\n\r]"
_IDENT = r'(?:[A-Za-z_][A-Za-z0-9_]*|"[^"]+")'
_HEAD = re.compile(
    rf"{_WS}*INSERT{_WS}+INTO{_WS}+{_IDENT}(?:{_WS}*\.{_WS}*{_IDENT}){{0,2}}"
    rf"(?:{_WS}*\({_WS}*{_IDENT}(?:{_WS}*,{_WS}*{_IDENT})*{_WS}*\))?{_WS}*\bVALUES{_WS}*(?=\()",
    re.IGNORECASE | re.ASCII)
_OPEN = re.compile(rf"{_WS}*\(")
# One value and what follows it: a comma (more values) or the row's closing parenthesis.
_VALUE = re.compile(
    rf"""{_WS}*(?:(?P<minus>-)?(?P<number>[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)"""
    r"""|(?P<string>'[^'\\]*(?:''[^'\\]*)*')"""
    rf"""|(?P<word>null|true|false)(?![A-Za-z0-9_$])){_WS}*(?P<sep>[,)])""",
    re.IGNORECASE | re.ASCII)
_NEXT_ROW = re.compile(rf"{_WS}*,")
_END = re.compile(rf"{_WS}*;?{_WS}*\Z")

HEADS_KEPT = 256  # distinct heads remembered (per server: target tables and column lists)


class LiteralInsertReader:
    """Scans literal INSERTs; `parse_head` is the general parser, for a head text plus `(NULL)`."""

    def __init__(self, parse_head: Callable[[str], exp.Expression | None]) -> None:
        self._parse_head = parse_head
        self._heads: dict[str, exp.Expression | None] = {}
        self._lock = threading.Lock()  # sessions parse long texts on worker threads

    def read(self, text: str) -> tuple[exp.Insert, int, int] | None:
        """(tree, start, end) of the statement in `text` (end exclusive, no semicolon), or None
        when `text` is not one literal INSERT."""
        head = _HEAD.match(text)
        if head is None:
            return None
        target = self._target(head.group(0))
        if target is None or _LONE_CR.search(text):
            return None  # sqlglot counts some lone carriage returns as line breaks: its positions
        newlines = _newline_offsets(text) if "\n" in text else None
        rows: list[exp.Expression] = []
        pos = head.end()
        while True:
            opened = _OPEN.match(text, pos)
            if opened is None:
                return None
            pos = opened.end()
            values: list[exp.Expression] = []
            while True:
                m = _VALUE.match(text, pos)
                if m is None:
                    return None
                values.append(_value_node(m, newlines))
                pos = m.end()
                if m.group("sep") == ")":
                    break
            rows.append(exp.Tuple(expressions=values))
            more = _NEXT_ROW.match(text, pos)
            if more is None:
                break
            pos = more.end()
        if _END.match(text, pos) is None:
            return None
        tree = exp.Insert(this=target.copy(), expression=exp.Values(expressions=rows))
        start = len(text) - len(text.lstrip(" \t\n\r"))
        return tree, start, pos

    def _target(self, head: str) -> exp.Expression | None:
        """The INSERT's target (a Table, or a Schema with its columns) as the parser reads the
        head, or None when the parser reads it otherwise."""
        try:
            return self._heads[head]
        except KeyError:
            pass
        target = None
        tree = self._parse_head(head + "(NULL)")
        if isinstance(tree, exp.Insert) and isinstance(tree.this, (exp.Table, exp.Schema)):
            values = tree.expression
            others = [k for k, v in tree.args.items() if v and k not in ("this", "expression")]
            if (not others and isinstance(values, exp.Values) and len(values.expressions) == 1
                    and isinstance(values.expressions[0], exp.Tuple)
                    and [type(e) for e in values.expressions[0].expressions] == [exp.Null]):
                target = tree.this
        with self._lock:
            self._heads[head] = target
            while len(self._heads) > HEADS_KEPT:
                self._heads.pop(next(iter(self._heads)))
        return target


def _value_node(m: re.Match[str], newlines: list[int] | None) -> exp.Expression:
    number = m.group("number")
    if number is not None:
        start, end = m.start("number"), m.end("number") - 1
        literal = exp.Literal(this=number, is_string=False)
        literal.meta.update(_position(start, end, newlines))
        return exp.Neg(this=literal) if m.group("minus") else literal
    string = m.group("string")
    if string is not None:
        start, end = m.start("string"), m.end("string") - 1
        literal = exp.Literal(this=string[1:-1].replace("''", "'"), is_string=True)
        literal.meta.update(_position(start, end, newlines))
        return literal
    word = m.group("word").lower()
    if word == "null":
        return exp.Null()
    return exp.Boolean(this=word == "true")


def _position(start: int, end: int, newlines: list[int] | None) -> dict[str, int]:
    """The parser's token position: line and column of the token's last character."""
    if newlines is None:
        return {"line": 1, "col": end + 1, "start": start, "end": end}
    before = bisect.bisect_left(newlines, end)
    line_start = newlines[before - 1] if before else -1
    return {"line": before + 1, "col": end - line_start, "start": start, "end": end}


_LONE_CR = re.compile("\r(?!\n)")


def _newline_offsets(text: str) -> list[int]:
    return [m.start() for m in re.finditer("\n", text)]
