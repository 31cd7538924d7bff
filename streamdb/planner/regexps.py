"""Postgres's regular-expression functions that DuckDB and Spark lack or spell differently
(pure: AST in, AST changed in place).

`regexp_match(s, pattern [, flags])` is Postgres's text[] of the first match's capture groups
(the whole match when the pattern has none), NULL when nothing matches. Both engines have a
"does it match" and a "group i of the first match", so the call becomes

    CASE WHEN s ~ pattern THEN ARRAY[regexp_extract(s, pattern, 1), ..., (.., n)] END

which needs the number of groups when planning: the pattern must be a constant. A group that
takes no part in the match is '' in both engines (Postgres: NULL).

`substring(s FROM pattern)` (and `substring(s, pattern)`) with a constant text pattern is
Postgres's regular-expression substring, written the same way; DuckDB read the pattern as a
start position.

`regexp_matches` is a set-returning function in Postgres; DuckDB's function of that name is
a boolean, which would be a wrong answer, so it is refused with a pointer to the others.
"""

from __future__ import annotations

import re

from sqlglot import exp

from streamdb.errors import FeatureNotSupported, InvalidParameterValue, InvalidRegularExpression
from streamdb.planner.functions import SQL_NAME


def rewrite_regexp_functions(query: exp.Expression) -> None:
    for node in list(query.find_all(exp.Substring)):
        start = node.args.get("start")
        if isinstance(start, exp.Literal) and start.is_string and node.args.get("length") is None:
            node.replace(_regex_substring(node.this, start.this))
    for call in list(query.find_all(exp.Anonymous)):
        name = str(call.this).lower()
        if name == "regexp_match":
            call.replace(_regexp_match(call))
        elif name == "regexp_matches":
            raise FeatureNotSupported(
                "regexp_matches is not supported",
                hint="Use regexp_match(string, pattern) for the first match's groups, or string ~ pattern to test.")


def _regexp_match(call: exp.Anonymous) -> exp.Expression:
    args = call.expressions
    if len(args) not in (2, 3):
        raise FeatureNotSupported(f"regexp_match takes 2 or 3 arguments, not {len(args)}")
    subject, pattern = args[0], args[1]
    if not (isinstance(pattern, exp.Literal) and pattern.is_string):
        raise FeatureNotSupported("regexp_match needs a constant pattern",
                                  hint="The pattern's groups decide the result's length when the query is planned.")
    text = pattern.this
    if len(args) == 3:
        flags = args[2]
        if not (isinstance(flags, exp.Literal) and flags.is_string):
            raise FeatureNotSupported("regexp_match needs constant flags")
        text = _with_flags(text, flags.this)
    groups = _groups(text)
    regex = exp.Literal.string(text)
    parts: list[exp.Expression] = [
        exp.RegexpExtract(this=subject.copy(), expression=regex.copy(), group=exp.Literal.number(i))
        for i in (range(1, groups + 1) if groups else (0,))]
    matches = exp.RegexpLike(this=subject.copy(), expression=regex.copy())
    rewritten = exp.Paren(this=exp.Case(ifs=[exp.If(this=matches, true=exp.Array(expressions=parts))]))
    rewritten.meta[SQL_NAME] = "regexp_match"  # the output column's name, as for the call
    return rewritten


def _regex_substring(subject: exp.Expression, pattern: str) -> exp.Expression:
    """substring(s FROM pattern): the first group's text (the whole match without groups),
    NULL without a match."""
    group = 1 if _groups(pattern) else 0
    regex = exp.Literal.string(pattern)
    extracted = exp.RegexpExtract(this=subject.copy(), expression=regex.copy(), group=exp.Literal.number(group))
    rewritten = exp.Paren(this=exp.Case(ifs=[exp.If(this=exp.RegexpLike(this=subject.copy(), expression=regex),
                                                    true=extracted)]))
    rewritten.meta[SQL_NAME] = "substring"
    return rewritten


def _groups(pattern: str) -> int:
    try:
        return re.compile(pattern).groups
    except re.error as e:
        raise InvalidRegularExpression(f"invalid regular expression: {e}") from None


def _with_flags(pattern: str, flags: str) -> str:
    for flag in flags:
        if flag == "g":
            raise InvalidParameterValue('regexp_match() does not support the "global" option')
        if flag not in "ic":
            raise FeatureNotSupported(f'regexp_match flag "{flag}" is not supported')
    # Postgres: the last of i (insensitive) and c (sensitive) wins; c is the default.
    return f"(?i){pattern}" if flags.rfind("i") > flags.rfind("c") else pattern
