"""Literals out of query text: `... WHERE id = 42` -> (`... WHERE id = $1`, [42]).

Clients that send literal SQL over the simple protocol (psql, BI tools, most ORMs in
their default mode) repeat one statement shape with new constants. The session
parses and plans a shape once and answers later texts of that shape from its plan
with the constants as parameters, where that is known to mean the same thing
(runtime/session.py decides: today, point lookups).

A scanner, not a parser: text it is not sure about (comments, dollar quotes,
escape strings, existing parameters, several statements) gets no template.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(
    r"""(?P<ident>"(?:[^"]|"")*")"""  # a quoted identifier: kept as it is
    r"""|(?P<string>(?<![\w$])'(?:[^']|'')*')"""  # a standard string (not E'..', B'..', U&'..')
    r"""|(?P<number>(?<![\w$.])\d+(?![\w.]))"""  # an integer, not part of a name or a decimal
)
_UNSURE = re.compile(r"--|/\*|\$|;\s*\S|\\")
MAX_DIGITS = 18  # beyond, the value may not fit a bigint: left to the full path


@dataclass(frozen=True, slots=True)
class Template:
    sql: str  # the text with $1..$n where the literals were
    kinds: tuple[str, ...]  # per literal: 'number' or 'string'
    values: tuple[int | str, ...]


def templatize(sql: str) -> Template | None:
    """The text with its integer and string literals replaced by parameters, or None when the
    text has none or holds something the scanner does not read with certainty."""
    if _UNSURE.search(sql):
        return None
    kinds: list[str] = []
    values: list[int | str] = []

    def replace(m: re.Match[str]) -> str:
        if m.lastgroup == "ident":
            return m.group(0)
        text = m.group(0)
        if m.lastgroup == "number":
            if len(text) > MAX_DIGITS:
                raise _Unsure
            values.append(int(text))
        else:
            values.append(text[1:-1].replace("''", "'"))
        kinds.append(m.lastgroup or "")
        return f"${len(values)}"

    try:
        out = _TOKEN.sub(replace, sql)
    except _Unsure:
        return None
    if not values or out.count("'") or out.count('"') % 2:
        return None  # an unterminated quote: let the parser say what is wrong
    return Template(out, tuple(kinds), tuple(values))


class _Unsure(Exception):
    pass
