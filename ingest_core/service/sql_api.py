"""Druid's SQL API (`POST /druid/v2/sql`, docs/api-reference/sql-api.md) over `query.engine`: the request's fields
read and checked (`SqlRequest`; its `output` is the result format `query.results.write_result` writes), and an
error as Druid's error JSON (`SqlApiError`). No I/O: the REST route (`provider.plugins.ui`) runs the query.

Request fields: `query`; `resultFormat` object | array | objectLines | arrayLines | csv; `header`, `typesHeader`,
`sqlTypesHeader`; `parameters` ([{"type": "VARCHAR", "value": "x"}], bound to the query's `?` in order);
`context`: `sqlQueryId` (echoed in the X-Druid-SQL-Query-Id header, so checked first: `query_id_of`), `sqlTimeZone`,
`timeout` (milliseconds, capped at the server's limit). Other context keys are accepted and ignored, as Druid
ignores keys it does not use. A parameter is refused outside its type's range (a BIGINT is a Java long, a TIMESTAMP
one Python can hold). An error message shows at most 100 characters of a value it quotes (`core.errors.shown`).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ingest_core.core.errors import shown
from ingest_core.query.results import FORMATS, ResultFormat

_FORMAT_NAMES = {name.upper(): name for name in FORMATS}
INTEGERS = ("BIGINT", "INTEGER", "SMALLINT", "TINYINT")
DECIMALS = ("DOUBLE", "FLOAT", "REAL", "DECIMAL")
PARAMETER_TYPES = ("VARCHAR", "CHAR", *INTEGERS, *DECIMALS, "BOOLEAN", "TIMESTAMP", "DATE", "ARRAY")
EXAMPLE = '{"query": "SELECT ...", "resultFormat": "object", "parameters": [{"type": "VARCHAR", "value": "x"}]}'
RANGES = {"BIGINT": 64, "INTEGER": 32, "SMALLINT": 16, "TINYINT": 8}  # Java's long, int, short and byte: their bits
ERROR_CLASS = "org.apache.druid.error.DruidException"  # what Druid names its errors
MAX_QUERY_ID = 255  # characters of a sqlQueryId: it is a response header


@dataclass
class SqlApiError(Exception):
    """An error as Druid's SQL API writes it (`DruidException`: error, errorCode, persona, category,
    errorMessage, context), with the HTTP status of its category."""

    status: int
    code: str  # Druid's errorCode: invalidInput, forbidden, ...
    category: str  # Druid's category: INVALID_INPUT, FORBIDDEN, TIMEOUT, CANCELED, ...
    message: str
    context: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return self.message

    def to_json(self) -> dict:
        """Druid's error JSON with both its fields: the newer (errorCode, persona, category) and the older that
        pydruid and Superset read (error, errorMessage, errorClass, host)."""
        return {"error": "druidException", "errorCode": self.code, "persona": "USER", "category": self.category,
                "errorMessage": self.message, "errorClass": ERROR_CLASS, "host": None, "context": self.context}


def invalid(message: str) -> SqlApiError:
    return SqlApiError(400, "invalidInput", "INVALID_INPUT", message)


@dataclass(frozen=True)
class SqlRequest:
    query: str
    result_format: str = "object"
    header: bool = False
    types_header: bool = False
    sql_types_header: bool = False
    parameters: tuple = ()
    time_zone: str = "UTC"
    query_id: str = ""
    timeout_s: float = 300.0

    @property
    def output(self) -> ResultFormat:
        """How its result is written (`query.results.write_result`)."""
        return ResultFormat(self.result_format, self.header, self.types_header, self.sql_types_header, self.time_zone)

    @classmethod
    def from_body(cls, body: Any, max_timeout_s: float) -> "SqlRequest":
        """A JSON request body (already decoded) as Druid's SQL API reads it; `max_timeout_s` caps the time limit
        (and is the time limit of a request that sets none)."""
        if not isinstance(body, dict) or not isinstance(body.get("query"), str):
            raise invalid(f"the body is not a JSON object with a \"query\" string: expected {EXAMPLE}")
        given = body.get("resultFormat", "object")
        # Druid upper-cases the value before it reads it (ResultFormat.fromString): "objectlines", "CSV" are its
        result_format = _FORMAT_NAMES.get(given.upper()) if isinstance(given, str) else None
        if result_format is None:
            raise invalid(f"resultFormat: {shown(given)} is not one of {', '.join(FORMATS)} (in any case)")
        flags = {}
        for name in ("header", "typesHeader", "sqlTypesHeader"):
            value = body.get(name, False)
            if not isinstance(value, bool):
                raise invalid(f"{name}: expected true or false, not {shown(value)}")
            flags[name] = value
        context = {} if body.get("context") is None else body["context"]
        if not isinstance(context, dict):
            raise invalid(f"context: expected a JSON object, not {shown(context)}")
        zone = context.get("sqlTimeZone", "UTC")
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):  # OSError: a folder ("Etc"), a long name
            raise invalid(f"context.sqlTimeZone: {shown(zone)} is not a time zone name (an IANA name such as 'UTC' or "
                          "'America/Los_Angeles')") from None
        query_id = query_id_of(context.get("sqlQueryId"))
        return cls(body["query"], result_format, flags["header"], flags["typesHeader"], flags["sqlTypesHeader"],
                   _parameters(body.get("parameters"), zone), zone, query_id,
                   _timeout(context.get("timeout"), max_timeout_s))


def query_id_of(value: Any) -> str:
    """A request's sqlQueryId, in Druid's shape (its `IdUtils.validateId`: not empty, not starting with '.', no
    '/', no white space but the space) and fit for a header: printable ASCII, at most `MAX_QUERY_ID` characters,
    no space at either end. None or "" is a generated one, as Druid's."""
    if value is None or value == "":
        return str(uuid.uuid4())
    where = "context.sqlQueryId: "
    rule = (f"a query id is 1 to {MAX_QUERY_ID} printable ASCII characters (letters, digits, spaces within, "
            "-_.:@ and the like), not starting with '.', without '/'")
    if not isinstance(value, str):
        raise invalid(f"{where}expected a string, not {shown(value)}")
    if len(value) > MAX_QUERY_ID:
        raise invalid(f"{where}{shown(value)} is {len(value)} characters: {rule}")
    if value.startswith("."):
        raise invalid(f"{where}{shown(value)} starts with '.': {rule}")
    for i, c in enumerate(value):
        if not " " <= c <= "~" or c == "/" or (c == " " and i in (0, len(value) - 1)):
            raise invalid(f"{where}{shown(value)} holds {c!r} at position {i}: {rule}")
    return value


def _timeout(value: Any, max_timeout_s: float) -> float:
    if value is None:
        return max_timeout_s
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise invalid(f"context.timeout: expected milliseconds (a number above 0), not {shown(value)}")
    return min(value / 1000, max_timeout_s)


def _parameters(raw: Any, zone: str) -> tuple:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise invalid(f"parameters: expected a list of {{\"type\": ..., \"value\": ...}}, not {shown(raw)}")
    return tuple(_parameter(p, f"parameters[{i}]", zone) for i, p in enumerate(raw))


def _parameter(p: Any, where: str, zone: str) -> Any:
    if not isinstance(p, dict) or "type" not in p:
        raise invalid(f"{where}: expected {{\"type\": \"VARCHAR\", \"value\": ...}}, not {shown(p)}")
    kind, value = str(p["type"]).upper(), p.get("value")
    if kind not in PARAMETER_TYPES:
        raise invalid(f"{where}.type: {shown(p['type'])} is not one of {', '.join(PARAMETER_TYPES)}")
    if value is None:
        return None
    try:
        if kind in ("VARCHAR", "CHAR"):
            return value if isinstance(value, str) else json.dumps(value)
        if kind in INTEGERS:
            return _integer(value, kind, where)
        if kind in DECIMALS:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind == "BOOLEAN":
            if isinstance(value, str) and value.lower() in ("true", "false"):
                return value.lower() == "true"
            if not isinstance(value, bool):
                raise ValueError
            return value
        if kind == "TIMESTAMP":
            return _timestamp(value, zone, where)
        if kind == "DATE":
            return date.fromisoformat(value)
        if not isinstance(value, list):  # ARRAY
            raise ValueError
        return value
    except (ValueError, TypeError, OverflowError):
        raise invalid(f"{where}.value: {shown(value)} is not a {kind}") from None


def _integer(value: Any, kind: str, where: str) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError
    number, bits = int(value), RANGES[kind]
    if not -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
        raise invalid(f"{where}.value: {shown(value)} is not a {kind} (from {-(2 ** (bits - 1))} to "
                      f"{2 ** (bits - 1) - 1})")
    return number


def _timestamp(value: Any, zone: str, where: str) -> datetime:
    """Milliseconds since the epoch, or text as Druid's TIMESTAMP literals ('2000-01-01 00:00:00', in the
    query's time zone unless it names its own); within Python's years (1 to 9999)."""
    try:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=value)
        parsed = datetime.fromisoformat(value)
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=ZoneInfo(zone))
    except (ValueError, TypeError, OverflowError):
        raise invalid(f"{where}.value: {shown(value)} is not a TIMESTAMP (milliseconds since 1970 or text such as "
                      "'2000-01-01 00:00:00', from year 1 to 9999)") from None
