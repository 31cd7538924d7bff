"""Text -> statements. The only place SQL text becomes syntax trees.

parse_statements() splits a simple-query string into its statements and parses each with the
StreamDB dialect; every syntax error becomes SyntaxErrorSQL with a Postgres-style message and
the 1-based position of the offending token in the whole text, as Postgres reports it.
"""

from __future__ import annotations

import bisect
import logging
import re
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.errors import ErrorLevel, ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from streamdb.errors import FeatureNotSupported, SyntaxErrorSQL
from streamdb.sql import ast
from streamdb.sql.dialect import BlamedParseError, StreamDB
from streamdb.sql.literal_insert import LiteralInsertReader

_DIALECT = StreamDB()

# What a statement may parse into. sqlglot also accepts a bare expression (`1 + 2`, `FOO BAR`
# as an aliased column) or other dialects' statements (USE db); Postgres rejects those at their
# first token, and so do we.
STATEMENT_TYPES: tuple[type[exp.Expr], ...] = (
    exp.Query,
    exp.Values,
    exp.Create,
    exp.Drop,
    exp.Insert,
    exp.Update,
    exp.Delete,
    exp.Merge,
    exp.Alter,
    exp.TruncateTable,
    exp.Comment,
    exp.Grant,
    exp.Revoke,
    ast.CreateStream,
    ast.ShowObjects,
    ast.ShowCreate,
    ast.ShowVariable,
    ast.SetVariable,
    ast.DescribeRelation,
    ast.ExplainStatement,
    ast.Flush,
    ast.SelectStream,
    ast.EmitChanges,
    ast.TransactionControl,
    ast.Discard,
    ast.Deallocate,
    ast.CopyStatement,
    ast.Subscribe,
    ast.DeclareCursor,
    ast.FetchCursor,
    ast.CloseCursor,
    ast.CreateConnector,
    ast.CreateSource,
    ast.CreateSink,
    ast.CreateRole,
    ast.AlterRole,
    ast.RenameRelation,
    ast.DropRole,
    ast.GrantPrivileges,
    ast.RevokePrivileges,
)


class _DropUnsupportedSyntaxWarnings(logging.Filter):
    """sqlglot logs 'contains unsupported syntax' before falling back to exp.Command; the
    dialect turns those fallbacks into syntax errors, so the warning is only noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "unsupported syntax" not in record.getMessage()


logging.getLogger("sqlglot").addFilter(_DropUnsupportedSyntaxWarnings())


@dataclass(frozen=True)
class ParsedStatement:
    ast: exp.Expression
    sql: str  # the statement's own text, from its first token to its last (no semicolon)
    offset: int  # 0-based index of sql in the full text
    # Postgres's NOTICEs from reading it: identifiers truncated to NAMEDATALEN - 1 bytes.
    notices: tuple[str, ...] = ()


def parse_statements(text: str) -> list[ParsedStatement]:
    """Splits `text` on top-level semicolons and parses each statement. Empty statements
    (";;", only comments) are dropped. Raises SyntaxErrorSQL."""
    literal_insert = _LITERAL_INSERTS.read(text)
    if literal_insert is not None and not _long_target_name(text):
        tree, start, end = literal_insert
        return [ParsedStatement(ast=tree, sql=text[start:end], offset=start)]
    return _parse_statements(text)


def _parse_statements(text: str) -> list[ParsedStatement]:
    tokens = _tokenize(text)
    statements = []
    chunk: list[Token] = []
    for token in [*tokens, None]:
        if token is not None and token.token_type != TokenType.SEMICOLON:
            chunk.append(token)
            continue
        if chunk:
            statements.append(_parse_one(text, chunk, terminator=token))
        chunk = []
    return statements


def _parse_head(text: str) -> exp.Expression | None:
    try:
        statements = _parse_statements(text)
    except SyntaxErrorSQL:
        return None
    return statements[0].ast if len(statements) == 1 else None


# Multi-row INSERTs of constants skip the general parser (sql/literal_insert.py).
_LITERAL_INSERTS = LiteralInsertReader(_parse_head)


def parse_one(text: str) -> exp.Expression:
    """Exactly one statement (for callers that hold a single statement's text)."""
    statements = parse_statements(text)
    if len(statements) != 1:
        raise SyntaxErrorSQL(f"expected one statement, got {len(statements)}")
    return statements[0].ast


def generate(ast: exp.Expr) -> str:
    """The StreamDB dialect's SQL for a syntax tree."""
    return _DIALECT.generate(ast)


def _separated_parameters(text: str) -> list[int]:
    """Offsets just after each `$n` parameter that is directly followed by something other than
    a space or digit. sqlglot reads `$1,$2` as a dollar-quoted string tagged `1,` (Postgres tags
    cannot start with a digit); a space after the parameter keeps them apart."""
    out: list[int] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "'":
            escaped = i > 0 and text[i - 1] in "eE" and (i < 2 or not (text[i - 2].isalnum() or text[i - 2] == "_"))
            i += 1
            while i < n:
                if escaped and text[i] == "\\":
                    i += 2
                    continue
                if text[i] == "'":
                    if i + 1 < n and text[i + 1] == "'":
                        i += 2
                        continue
                    break
                i += 1
            i += 1
        elif c == '"':
            end = text.find('"', i + 1)
            i = n if end < 0 else end + 1
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif c == "$":
            m = _DOLLAR.match(text, i)
            if m and m.group(1):
                i = m.end()
                if i < n and not text[i].isspace():
                    out.append(i)
            elif m:
                end = text.find(m.group(0), m.end())
                i = n if end < 0 else end + len(m.group(0))
            else:
                i += 1
        else:
            i += 1
    return out


# `$n` (group 1) or a dollar-quote opening tag `$tag$`.
_DOLLAR = re.compile(r"\$(?:(\d+)|([A-Za-z_\x80-\uffff][A-Za-z0-9_\x80-\uffff]*)?\$)")


def _tokenize(text: str) -> list[Token]:
    inserts = _separated_parameters(text) if "$" in text else []
    if inserts:
        spaced = " ".join(text[a:b] for a, b in zip([0, *inserts], [*inserts, len(text)], strict=True))
        try:
            tokens = _tokenize_text(spaced)
        except SyntaxErrorSQL:
            return _tokenize_text(text)  # the error, with positions in the text as given
        spaces = [p + k for k, p in enumerate(inserts)]  # where the added spaces are in `spaced`
        for token in tokens:  # offsets back into the text as given
            token.start -= bisect.bisect_left(spaces, token.start)
            token.end -= bisect.bisect_left(spaces, token.end)
        return tokens
    return _tokenize_text(text)


def _tokenize_text(text: str) -> list[Token]:
    tokenizer = _DIALECT.tokenizer()
    try:
        return tokenizer.tokenize(text)
    except TokenError as error:
        start = _failed_token_start(text, error, tokenizer.tokens)
        rest = text[start:]
        if rest.startswith("/*"):
            message = "unterminated /* comment"
        elif rest[:1] == '"':
            message = "unterminated quoted identifier"
        elif rest[:1] == "$":
            message = "unterminated dollar-quoted string"
        elif rest[:1] == "'" or rest[:2].lower() in ("e'", "b'", "x'", "u&"):
            message = "unterminated quoted string"
        else:
            message = "syntax error"
        raise SyntaxErrorSQL(f'{message} at or near "{rest}"', position=start + 1) from None


def _failed_token_start(text: str, error: TokenError, tokens: list[Token]) -> int:
    """0-based start of the token the tokenizer could not finish."""
    # An unterminated quote reports "Missing ' from <line>:<offset>".
    found = _MISSING_DELIMITER.search(str(error.__cause__ or error))
    if found:
        return min(int(found.group(1)), max(len(text) - 1, 0))
    # Otherwise (e.g. an unterminated comment) it failed at the first thing after the last token.
    after = tokens[-1].end + 1 if tokens else 0
    return after + len(text[after:]) - len(text[after:].lstrip())


_MISSING_DELIMITER = re.compile(r"Missing .+ from \d+:(\d+)")


MAX_IDENTIFIER_BYTES = 63  # Postgres's NAMEDATALEN - 1
_INSERT_TARGET = re.compile(r"\s*insert\s+into\s+(.*?)\bvalues\b", re.IGNORECASE | re.DOTALL)
_NAME_PART = re.compile(r'"(?:[^"]|"")*"|[^\s,().]+')


def _long_target_name(text: str) -> bool:
    """Whether an INSERT's table or column names need truncating (and a NOTICE): the literal
    INSERT scanner leaves that to the parser."""
    target = _INSERT_TARGET.match(text)
    return target is not None and any(
        len(part.strip('"').encode("utf-8")) > MAX_IDENTIFIER_BYTES for part in _NAME_PART.findall(target.group(1)))


def _truncate_identifiers(chunk: list[Token]) -> tuple[str, ...]:
    """Identifiers longer than 63 bytes cut to 63 (at a character boundary), as Postgres's
    scanner does; one NOTICE each, in Postgres's words."""
    notices = []
    for token in chunk:
        if token.token_type not in (TokenType.VAR, TokenType.IDENTIFIER):
            continue
        encoded = token.text.encode("utf-8")
        if len(encoded) <= MAX_IDENTIFIER_BYTES:
            continue
        cut = encoded[:MAX_IDENTIFIER_BYTES].decode("utf-8", errors="ignore")
        notices.append(f'identifier "{token.text}" will be truncated to "{cut}"')
        token.text = cut
    return tuple(notices)


# RisingWave's forms StreamDB does not have: a statement that fails to parse and holds one of
# these word sequences is refused by name (0A000) rather than as a syntax error.
_RISINGWAVE_ONLY: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("WITH", "TTL"), "WATERMARK ... WITH TTL", "Closed windows of EMIT ON WINDOW CLOSE views are freed by the "
     "watermark; other state is kept."),
    (("VERSION", "COLUMN"), "WITH VERSION COLUMN", "A table keeps the last write per primary key."),
    (("AS", "CHANGELOG", "FROM"), "AS CHANGELOG FROM", "SELECT STREAM or SUBSCRIBE reads a relation's changes."),
    (("CREATE", "TABLE", "ON", "CONFLICT"), "CREATE TABLE ... ON CONFLICT",
     "A table keeps the last write per primary key (ON CONFLICT OVERWRITE)."),
    (("DISTRIBUTED", "BY"), "CREATE INDEX ... DISTRIBUTED BY",
     "An index here is one hash index in the server that answers reads: leave DISTRIBUTED BY out."),
)


WATERMARK_AND_KEY_HINT = ("A table with a WATERMARK is append-only here (a stream): drop the PRIMARY KEY, "
                           "or the WATERMARK for a table whose rows change.")


def _risingwave_only(chunk: list[Token]) -> FeatureNotSupported | None:
    words = [" ".join(t.text.upper().split()) for t in chunk]  # PRIMARY KEY is one token
    if words[:2] == ["CREATE", "TABLE"] and "WATERMARK" in words and (at := _find(words, ("PRIMARY KEY",))) >= 0:
        return FeatureNotSupported("a table with both a WATERMARK and a PRIMARY KEY is not supported",
                                   hint=WATERMARK_AND_KEY_HINT, position=chunk[at].start + 1)
    for sequence, what, hint in _RISINGWAVE_ONLY:
        if sequence[:2] == ("CREATE", "TABLE"):  # the statement's kind, then the words anywhere
            at = _find(words, sequence[2:]) if words[:2] == ["CREATE", "TABLE"] else -1
        else:
            at = _find(words, sequence)
        if at >= 0:
            return FeatureNotSupported(f"{what} is not supported", hint=hint, position=chunk[at].start + 1)
    return None


def _find(words: list[str], sequence: tuple[str, ...]) -> int:
    """Where `sequence` starts in `words`, or -1."""
    n = len(sequence)
    return next((i for i in range(len(words) - n + 1) if tuple(words[i:i + n]) == sequence), -1)


def _parse_one(text: str, chunk: list[Token], terminator: Token | None) -> ParsedStatement:
    notices = _truncate_identifiers(chunk)
    parser = StreamDB.Parser(error_level=ErrorLevel.IMMEDIATE, dialect=_DIALECT)
    parser.strict_statements = True
    try:
        trees = parser.parse(chunk, text)
    except BlamedParseError as error:
        raise _risingwave_only(chunk) or _syntax_error(text, error.token, terminator) from None
    except ParseError:
        # Raised without going through raise_error: blame where the parser stopped.
        raise _risingwave_only(chunk) or _syntax_error(text, parser._curr or None, terminator) from None
    tree = trees[0] if len(trees) == 1 else None
    if not isinstance(tree, exp.Expression) or not isinstance(tree, STATEMENT_TYPES):
        raise _syntax_error(text, chunk[0], terminator)
    if tree.find(exp.Command) is not None:  # the dialect refuses these; belt and braces
        raise _syntax_error(text, chunk[0], terminator)
    start, end = chunk[0].start, chunk[-1].end + 1
    return ParsedStatement(ast=tree, sql=text[start:end], offset=start, notices=notices)


def _syntax_error(text: str, token: Token | None, terminator: Token | None) -> SyntaxErrorSQL:
    # Postgres parses the whole string at once, so running out of tokens inside a statement
    # that a semicolon ends is an error "at or near ;", and only the last one hits end of input.
    token = token or terminator
    if token is None:
        return SyntaxErrorSQL("syntax error at end of input", position=len(text) + 1)
    near = text[token.start : token.end + 1]
    return SyntaxErrorSQL(f'syntax error at or near "{near}"', position=token.start + 1)
