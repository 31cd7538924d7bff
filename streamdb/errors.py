"""One error root for the whole server.

Every error a client can see is a StreamDBError carrying a Postgres SQLSTATE.
The wire layer turns it into an ErrorResponse; nothing else formats errors.
"""

from __future__ import annotations

import re


class StreamDBError(Exception):
    """Root of every error a client may see. Subclasses fix the SQLSTATE."""

    sqlstate = "XX000"
    severity = "ERROR"

    def __init__(
        self,
        message: str,
        *,
        sqlstate: str | None = None,
        detail: str | None = None,
        hint: str | None = None,
        position: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if sqlstate is not None:
            self.sqlstate = sqlstate
        self.detail = detail
        self.hint = hint
        # 1-based character position in the statement text, as Postgres reports it.
        self.position = position

    def __str__(self) -> str:
        return self.message

    def with_position(self, position: int | None) -> StreamDBError:
        if self.position is None:
            self.position = position
        return self


class SyntaxErrorSQL(StreamDBError):
    sqlstate = "42601"


class UndefinedTable(StreamDBError):
    sqlstate = "42P01"


class UndefinedColumn(StreamDBError):
    sqlstate = "42703"


class UndefinedFunction(StreamDBError):
    sqlstate = "42883"


class DuplicateFunction(StreamDBError):
    sqlstate = "42723"


class InvalidFunctionDefinition(StreamDBError):
    sqlstate = "42P13"


class ExternalRoutineException(StreamDBError):
    """A user-defined function's own code raised (external_routine_exception)."""

    sqlstate = "38000"


class UndefinedObject(StreamDBError):
    sqlstate = "42704"


class DuplicateTable(StreamDBError):
    sqlstate = "42P07"


class DuplicateObject(StreamDBError):
    sqlstate = "42710"


class DuplicateColumn(StreamDBError):
    sqlstate = "42701"


class AmbiguousColumn(StreamDBError):
    sqlstate = "42702"


class DatatypeMismatch(StreamDBError):
    sqlstate = "42804"


class CannotCoerce(StreamDBError):
    sqlstate = "42846"


class InvalidTextRepresentation(StreamDBError):
    sqlstate = "22P02"


class InvalidDatetimeFormat(StreamDBError):
    sqlstate = "22007"


class DatetimeFieldOverflow(StreamDBError):
    sqlstate = "22008"


class NumericValueOutOfRange(StreamDBError):
    sqlstate = "22003"


class DivisionByZero(StreamDBError):
    sqlstate = "22012"


class StringDataRightTruncation(StreamDBError):
    sqlstate = "22001"


class CharacterNotInRepertoire(StreamDBError):
    sqlstate = "22021"


class DataException(StreamDBError):
    sqlstate = "22000"


class NotNullViolation(StreamDBError):
    sqlstate = "23502"


class InvalidParameterValue(StreamDBError):
    sqlstate = "22023"


class InvalidRegularExpression(StreamDBError):
    sqlstate = "2201B"


class FeatureNotSupported(StreamDBError):
    sqlstate = "0A000"


class WrongObjectType(StreamDBError):
    sqlstate = "42809"


class InsufficientPrivilege(StreamDBError):
    sqlstate = "42501"


class DependentObjectsStillExist(StreamDBError):
    sqlstate = "2BP01"


class ObjectInUse(StreamDBError):
    sqlstate = "55006"


class InvalidColumnReference(StreamDBError):
    sqlstate = "42P10"


class GroupingError(StreamDBError):
    sqlstate = "42803"


class InvalidSqlStatementName(StreamDBError):
    """Unknown prepared statement."""

    sqlstate = "26000"


class InvalidCursorName(StreamDBError):
    """Unknown portal or cursor."""

    sqlstate = "34000"


class InFailedTransaction(StreamDBError):
    sqlstate = "25P02"


class ActiveSqlTransaction(StreamDBError):
    sqlstate = "25001"


class NoActiveSqlTransaction(StreamDBError):
    sqlstate = "25P01"


class IdleInTransactionSessionTimeout(StreamDBError):
    """A session stayed idle inside a transaction block longer than its timeout (FATAL)."""

    sqlstate = "25P03"


class QueryCanceled(StreamDBError):
    sqlstate = "57014"


class ProtocolViolation(StreamDBError):
    sqlstate = "08P01"


class InvalidAuthorization(StreamDBError):
    sqlstate = "28000"


class InvalidPassword(StreamDBError):
    """Password authentication failed (the same message whether or not the role exists)."""

    sqlstate = "28P01"


class InvalidCatalogName(StreamDBError):
    """Unknown database."""

    sqlstate = "3D000"


class TooManyConnections(StreamDBError):
    sqlstate = "53300"


class DiskFull(StreamDBError):
    sqlstate = "53100"


class ProgramLimitExceeded(StreamDBError):
    """A configured size limit was exceeded (e.g. max_result_rows)."""

    sqlstate = "54000"


class StatementTooComplex(StreamDBError):
    """54001: a statement nested deeper than the planner can follow (Postgres: its stack)."""

    sqlstate = "54001"

    def __init__(self) -> None:
        super().__init__("stack depth limit exceeded",
                         hint="The statement nests too deeply (parentheses, CASE, subqueries or a long chain "
                              "of operators); write it with fewer levels.")


class ObjectNotInPrerequisiteState(StreamDBError):
    sqlstate = "55000"


class ConfigurationError(StreamDBError):
    sqlstate = "F0000"


class InternalError(StreamDBError):
    sqlstate = "XX000"


class Notice:
    """A NoticeResponse to send before the command completes (not an error)."""

    def __init__(self, message: str, *, severity: str = "NOTICE", sqlstate: str = "00000",
                 detail: str | None = None, hint: str | None = None) -> None:
        self.message = message
        self.severity = severity
        self.sqlstate = sqlstate
        self.detail = detail
        self.hint = hint

    def __repr__(self) -> str:
        return f"Notice({self.severity}: {self.message})"


# An error as SQL raises it (planner/query.raise_call: the embedded engine's error(), Spark's
# raise_error()): 'SQLSTATE:message', read back from the engine's error text.
_CODED = re.compile(r"([0-9A-Z]{5}):(.+)$", re.S)


def coded(sqlstate: str, message: str) -> str:
    return f"{sqlstate}:{message}"


def from_coded(text: str) -> StreamDBError | None:
    """The error a 'SQLSTATE:message' text (coded) stands for; None for any other text."""
    m = _CODED.match(text)
    return StreamDBError(m.group(2), sqlstate=m.group(1)) if m is not None else None

