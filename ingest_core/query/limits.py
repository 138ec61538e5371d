"""What one query may take of a server (`SqlLimits`), sizes as DuckDB writes them, and how a running query is
stopped from outside (`QueryCancel`). Pure: no DuckDB here."""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from typing import Any

from ingest_core.core.errors import IngestError

DEFAULT_MAX_ROWS = 100_000
DEFAULT_TIMEOUT_S = 300.0
# why a query was stopped (`QueryCancel.reason`)
TIME_LIMIT, CLIENT_GONE, CANCELLED = "time limit", "its client went away", "cancelled by its sqlQueryId"
WORKER_OVERHEAD = 256 * 2**20  # bytes a query's worker holds besides DuckDB's and the result's (`SqlLimits`)
UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20,
         "GIB": 2**30, "TIB": 2**40}  # DuckDB's: KB, MB, GB in powers of 1000; KiB, MiB, GiB in powers of 1024


def size_bytes(text: str) -> int | None:
    """A size as DuckDB reads one ('1GB', '500 MiB', '64MB'), in bytes; None if it is not one."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if not match or match.group(2).upper() not in UNITS:
        return None
    return int(float(match.group(1)) * UNITS[match.group(2).upper()])


def bytes_text(n: int) -> str:
    return f"{n / 10**9:g} GB" if n >= 10**9 else f"{n / 10**6:.4g} MB"


@dataclass(frozen=True)
class SqlLimits:
    """What one query may take of a server (DuckDB's settings of the same names); the REST API's come from the
    environment (`from_env`), `ingest query` runs with DuckDB's defaults (the machine is the user's own)."""

    threads: int = 2
    memory_limit: str = "1GB"
    temp_directory: str = ""  # where a query spills past memory_limit; "" a folder under the system's temp folder
    max_temp_directory_size: str = "4GB"
    max_timeout_s: float = DEFAULT_TIMEOUT_S  # a request's own time limit (Druid's context.timeout) is capped here
    max_rows: int = DEFAULT_MAX_ROWS  # rows a response holds at most (the rest are cut, and the response says so)
    max_concurrent: int = 4  # queries a server runs at once; one more is refused (Druid's 429), not queued
    max_result_bytes: str = "64MB"  # what a response body may hold; a larger result is an error

    ENV = {"threads": "INGEST_SQL_THREADS", "memory_limit": "INGEST_SQL_MEMORY_LIMIT",
           "temp_directory": "INGEST_SQL_TEMP_DIRECTORY", "max_temp_directory_size": "INGEST_SQL_MAX_TEMP_SIZE",
           "max_timeout_s": "INGEST_SQL_MAX_TIMEOUT_S", "max_rows": "INGEST_SQL_MAX_ROWS",
           "max_concurrent": "INGEST_SQL_MAX_CONCURRENT", "max_result_bytes": "INGEST_SQL_MAX_RESULT_BYTES"}

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "SqlLimits":
        """The limits the environment sets (`ENV`), the defaults for the rest. A value that is not of its type
        is an `IngestError` (the server's configuration, not the query, is wrong)."""
        env = dict(os.environ if env is None else env)
        values: dict[str, Any] = {}
        for name, var in cls.ENV.items():
            if env.get(var):
                kind = type(getattr(cls, name))
                try:
                    values[name] = kind(env[var])
                except ValueError:
                    raise IngestError(f"{var}={env[var]!r} is not {'a whole number' if kind is int else 'a number'}"
                                      if kind is not str else f"{var}={env[var]!r}") from None
        for name in ("memory_limit", "max_result_bytes"):
            if name in values and size_bytes(values[name]) is None:
                raise IngestError(f"{cls.ENV[name]}={values[name]!r} is not a size: a number and a unit, such "
                                  "as 500MB or 2GB")
        return cls(**values)

    def spill_root(self) -> str:
        return self.temp_directory or os.path.join(tempfile.gettempdir(), f"ingest-sql-spill-{os.getuid()}")

    def max_result_bytes_int(self) -> int:
        return size_bytes(self.max_result_bytes) or 0

    def worker_memory_bytes(self) -> int:
        """What a query's worker process (`service.sql_worker`) may hold beyond its start: DuckDB's memory_limit,
        the result four times over (Arrow's, Python's rows, the body, and its bytes) and WORKER_OVERHEAD (Python's
        objects, threads' stacks, Arrow's reads of the segments)."""
        return (size_bytes(self.memory_limit) or 0) + 4 * self.max_result_bytes_int() + WORKER_OVERHEAD

    def duckdb_config(self) -> dict[str, Any]:
        return {"threads": self.threads, "memory_limit": self.memory_limit, "temp_directory": self.spill_root(),
                "max_temp_directory_size": self.max_temp_directory_size}


class QueryCancel:
    """Stops a query from another thread (the REST API's, when the client goes away): `cancel()` before or
    while `run_sql` runs it."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def cancel(self, reason: str = CLIENT_GONE) -> None:
        if self.reason is None:
            self.reason = reason
