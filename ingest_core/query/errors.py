"""The errors of a query, each with its stable code (docs/errors.md): callers match on the class or the code."""

from __future__ import annotations

from ingest_core.core.errors import IngestError
from ingest_core.query.limits import TIME_LIMIT, bytes_text


class DruidSqlError(IngestError):
    """Druid SQL this server cannot run: a Druid function it does not have, or an argument Druid takes only as a
    literal (a period, a time zone, a pattern) given otherwise or malformed."""

    code = "INGEST_SQL_UNSUPPORTED"


class SqlError(IngestError):
    """A query that cannot run: not one read-only statement, a table that is no datasource, DuckDB's own
    error (syntax, binding, types), or past its time limit."""

    code = "INGEST_SQL_INVALID"


class SqlTimeLimitError(SqlError):
    """The query ran past its time limit (Druid's "Query timeout")."""

    code = "INGEST_SQL_TIMEOUT"


class SqlCancelledError(SqlError):
    """The query was stopped from outside: its client went away (Druid's "Query cancelled")."""

    code = "INGEST_SQL_CANCELLED"


class SqlResultTooLargeError(SqlError):
    """The result is larger than a response may hold (`SqlLimits.max_result_bytes`)."""

    code = "INGEST_SQL_RESULT_TOO_LARGE"

    @classmethod
    def of(cls, size: int | None, limit: int) -> "SqlResultTooLargeError":
        return cls(f"the result is larger than {bytes_text(limit)}, what a response may hold"
                   + (f" ({bytes_text(size)})" if size else "")
                   + " (INGEST_SQL_MAX_RESULT_BYTES): ask for fewer rows (LIMIT) or columns")


class DatasourceNotReadable(SqlError):
    """A datasource the query names that the caller may not read (the REST API's DAG permissions)."""

    code = "INGEST_SQL_DATASOURCE_NOT_READABLE"

    def __init__(self, names: list[str]):
        self.names = names
        super().__init__(f"you may not read datasource{'s' if len(names) > 1 else ''} "
                         f"{', '.join(repr(n) for n in names)}: ask for read access to the DAG(s) of that name")


def stopped_error(reason: str, timeout_s: float | None) -> SqlError:
    """The error of a query stopped for `reason` (`QueryCancel.reason`)."""
    if reason == TIME_LIMIT:
        return SqlTimeLimitError(f"the query ran past its time limit of {timeout_s:g} s and was stopped")
    return SqlCancelledError(f"the query was cancelled: {reason}")
