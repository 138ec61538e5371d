"""Druid's column types, for schema discovery (`dimensionsSpec.useSchemaDiscovery`, `type: auto` dimensions) and
for reading segments whose schemas differ. Pure: no I/O.

Type-aware discovery (Druid 26+, `AutoTypeColumnIndexer`) gives each value a type and a column the least
restrictive type of its values (Druid's `ColumnType.leastRestrictiveType`):

    value                         type
    null                          none (a column of nulls only is STRING)
    true / false                  LONG 1 / 0 (Druid's strict booleans)
    an integer                    LONG (past the long range: DOUBLE)
    a finite number               DOUBLE (NaN and infinities are refused: the row is processedWithError)
    text, bytes (as base64)       STRING
    [primitives]                  ARRAY<element type>; [] and [null, ...] are an array of no type yet
    an object, [.. object ..]     COMPLEX<json> (arrays of arrays too)

    widening: LONG + DOUBLE -> DOUBLE; STRING + a number -> STRING; an array + a scalar or another array ->
    ARRAY<the elements' widened type>; COMPLEX<json> + anything -> COMPLEX<json>; an array of no type alone ->
    ARRAY<LONG>.

Widening is commutative and associative, so a column's type depends on the set of values seen, never on their
order: every split, replica and retry of a task group types a column alike. The same rule widens a column across
segments (`merge_types`), as Druid's broker does.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable, Mapping
from datetime import date, datetime, time
from decimal import Decimal
from functools import reduce
from typing import Any

STRING, LONG, FLOAT, DOUBLE = "STRING", "LONG", "FLOAT", "DOUBLE"
JSON = "COMPLEX<json>"
SKETCH = "COMPLEX<sketch>"  # a sketch metric's column: DataSketches' serialized bytes (core.aggregators)
TIMESTAMP = "TIMESTAMP"  # __time: not a Druid dimension type, shown as such
UNTYPED_ARRAY = "ARRAY"  # an empty or all-null array: its element type is not known yet
# a segment's discovered column that held nulls only: stored as STRING (Druid's type for it), but it narrows no
# merged schema (one run's field of nulls does not make the datasource's DOUBLE column text)
NULL = "NULL"
LONG_MIN, LONG_MAX = -(2 ** 63), 2 ** 63 - 1


def array_of(element: str) -> str:
    return f"ARRAY<{element}>"


def element_type(column_type: str) -> str | None:
    """The element type of an ARRAY<...> type; None for any other."""
    return column_type[6:-1] if column_type.startswith("ARRAY<") else None


def json_text(value: Any) -> str:
    """Canonical JSON text: keys sorted, no blanks, so equal values have equal text (rollup groups on it)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False, allow_nan=False)


# ------------------------------------------------------------------------------------------ values


def canonical(value: Any) -> Any:
    """A decoded value (JSON, CSV, Avro, Protobuf: any of their Python values) as discovery keeps it: JSON's
    values only, booleans as 0/1 outside nested objects, bytes as base64 text. Raises ValueError for a number
    that is not finite."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value if LONG_MIN <= value <= LONG_MAX else _finite(value)
    if isinstance(value, (list, tuple)):
        items = [_nested(v) for v in value]
        if any(isinstance(v, (list, dict)) for v in items):
            return items  # nested: COMPLEX<json>, booleans kept
        return [canonical(v) for v in items]
    if isinstance(value, dict):
        return _nested(value)
    return _scalar(value)


def _nested(value: Any) -> Any:
    """A value inside a nested object or array, as JSON keeps it (booleans stay booleans)."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return value if LONG_MIN <= value <= LONG_MAX else _finite(value)
    if isinstance(value, (list, tuple)):
        return [_nested(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _nested(v) for k, v in value.items()}
    return _scalar(value)


def _scalar(value: Any) -> Any:
    if isinstance(value, (float, Decimal)):
        return _finite(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")  # as Jackson writes byte[]: Druid's bytes
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    return str(value)  # UUID, enum names and the like


def _finite(value: Any) -> float:
    try:
        out = float(value)
    except OverflowError:
        raise ValueError(f"{str(value)[:40]} is past the double range") from None
    if not math.isfinite(out):
        raise ValueError(f"{out!r} is not a finite number")
    return out


def value_type(value: Any) -> str | None:
    """The type of a `canonical` value; None for null."""
    if value is None:
        return None
    if isinstance(value, str):
        return STRING
    if isinstance(value, int):
        return LONG
    if isinstance(value, float):
        return DOUBLE
    if isinstance(value, dict):
        return JSON
    if any(isinstance(v, (list, dict)) for v in value):
        return JSON
    element = reduce(widen, (value_type(v) for v in value), None)
    return UNTYPED_ARRAY if element is None else array_of(element)


# ------------------------------------------------------------------------------------------ widening


def widen(a: str | None, b: str | None) -> str | None:
    """The least restrictive of two types (Druid's leastRestrictiveType; see the module doc)."""
    if a is None or a == b:
        return b
    if b is None:
        return a
    if NULL in (a, b):
        return b if a == NULL else a
    if JSON in (a, b):
        return JSON
    if UNTYPED_ARRAY in (a, b):
        other = b if a == UNTYPED_ARRAY else a
        return other if element_type(other) else array_of(other)
    ea, eb = element_type(a), element_type(b)
    if ea or eb:
        return array_of(widen(ea or a, eb or b) or LONG)
    if STRING in (a, b) or TIMESTAMP in (a, b):
        return STRING
    return DOUBLE  # two different numbers: LONG and DOUBLE, LONG and FLOAT, FLOAT and DOUBLE


def column_type(types: Iterable[str | None]) -> str:
    """A column's type from the types of its values (or of its segments)."""
    out = reduce(widen, types, None)
    if out is None or out == NULL:
        return STRING  # nothing but nulls: "we didn't see anything, so we can be anything" (Druid)
    return array_of(LONG) if out == UNTYPED_ARRAY else out


def discovered_type(types: Iterable[str | None]) -> str:
    """A discovered column's type in one task group: `column_type`, but NULL for a column of nulls only."""
    types = list(types)
    return NULL if all(t is None or t == NULL for t in types) else column_type(types)


def merge_types(schemas: Iterable[Mapping[str, str]]) -> dict[str, str]:
    """Columns merged over several schemas (segments), each widened; in order of first appearance."""
    seen: dict[str, list[str]] = {}
    for schema in schemas:
        for name, t in schema.items():
            seen.setdefault(name, []).append(t)
    return {name: column_type(types) for name, types in seen.items()}


# ------------------------------------------------------------------------------------------ coercion


def coerce(value: Any, target: str) -> Any:
    """A `canonical` value as its column's type `target` (which its own type widens to): a number as text, a
    scalar as a one-element array, anything as JSON text for COMPLEX<json>."""
    if value is None:
        return None
    if target == JSON:
        return json_text(value)
    element = element_type(target)
    if element is not None:
        return [coerce(v, element) for v in value] if isinstance(value, list) else [coerce(value, element)]
    if target == STRING:
        if isinstance(value, str):
            return value
        return repr(value) if isinstance(value, float) else str(value)
    if target in (DOUBLE, FLOAT):
        return float(value)
    return value
