"""The expression language's non-scalar values on the executors, and their conversions.

Columns stay pyarrow arrays between functions: an ARRAY<LONG|DOUBLE|STRING> is a list array, a COMPLEX<json>
value (a nested input field, parse_json's result) a `JSON` extension array (JSON text underneath; its Python
values are the parsed documents). Array, apply and JSON functions work row by row on Python values: `Arr`
for an array (its element type kept, so an empty or all-null array still has one), `Json` for a JSON value,
int/float/str/None for scalars, as Druid's ExprEval does; `to_values` and `from_values` convert a column.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Iterable

import pyarrow as pa

from ingest_core.core.expression.errors import ExpressionError
from ingest_core.executor import casts


class JsonType(pa.ExtensionType):
    """COMPLEX<json>: JSON text in storage; `.as_py()` gives the parsed value."""

    def __init__(self) -> None:
        super().__init__(pa.string(), "ingest_core.json")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> "JsonType":
        return cls()

    def __arrow_ext_scalar_class__(self) -> type:
        return JsonScalar

    def __hash__(self) -> int:  # types are set members (a chunk's pieces' types)
        return hash(self.extension_name)


class JsonScalar(pa.ExtensionScalar):
    def as_py(self, *args: Any, **kwargs: Any) -> Any:
        text = self.value.as_py() if self.value is not None else None
        return None if text is None else json.loads(text)


JSON = JsonType()
try:
    pa.register_extension_type(JSON)
except pa.ArrowKeyError:  # registered already (a module reloaded)
    pass


@dataclass(frozen=True)
class Json:
    """A COMPLEX<json> value: a parsed JSON document (object, list or scalar)."""

    value: Any


@dataclass(frozen=True)
class Arr:
    """An array value: its element type (LONG, DOUBLE, STRING, JSON or ARRAY<...>) and its items."""

    element: str
    items: tuple[Any, ...]

    def __len__(self) -> int:
        return len(self.items)


# ------------------------------------------------------------------------------------------ types


def arrow_type(element: str) -> pa.DataType:
    if element.startswith("ARRAY<"):
        return pa.list_(arrow_type(element[6:-1]))
    return {"LONG": pa.int64(), "DOUBLE": pa.float64(), "STRING": pa.string(), "JSON": JSON}[element]


def element_of(t: pa.DataType) -> str:
    """The expression type of an arrow type (null, and anything unknown, reads as STRING)."""
    if isinstance(t, JsonType):
        return "JSON"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"ARRAY<{element_of(t.value_type)}>"
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return "LONG"
    if pa.types.is_floating(t):
        return "DOUBLE"
    return "STRING"


def type_of(v: Any) -> str | None:
    """The expression type of a Python value; None for null."""
    if v is None:
        return None
    if isinstance(v, Arr):
        return f"ARRAY<{v.element}>"
    if isinstance(v, Json):
        return "JSON"
    if isinstance(v, bool):
        return "LONG"
    if isinstance(v, int):  # a JSON number past the long range reads as a DOUBLE (never a wrapped long)
        return "LONG" if -(2 ** 63) <= v < 2 ** 63 else "DOUBLE"
    if isinstance(v, float):
        return "DOUBLE"
    return "STRING"


UNTYPED_EMPTY = "ARRAY<?>"  # the type of an empty list read from input: its element type is unknown


def common_type(types: Iterable[str | None]) -> str | None:
    """The least restrictive of `types`: LONG < DOUBLE < STRING; JSON over scalars; arrays by element."""
    found = {t for t in types if t is not None}
    if not found:
        return None
    if len(found) == 1:
        only = found.pop()
        return "ARRAY<STRING>" if only == UNTYPED_EMPTY else only
    arrays = {t for t in found if t.startswith("ARRAY<")}
    if arrays and arrays == found:  # an empty list read from input ("?") takes the others' element type
        inner = common_type(t[6:-1] for t in arrays if t != UNTYPED_EMPTY) or "STRING"
        return f"ARRAY<{inner}>"
    if "JSON" in found or arrays:
        return "JSON"
    if "STRING" in found:
        return "STRING"
    return "DOUBLE"


# ------------------------------------------------------------------------------------------ casts (per value)


def java_double(d: float) -> str:
    """Java's Double.toString: 1.0, 0.001, 1.0E7, 1.5E-5, NaN, Infinity."""
    if math.isnan(d):
        return "NaN"
    if math.isinf(d):
        return "Infinity" if d > 0 else "-Infinity"
    if d == 0:
        return "-0.0" if math.copysign(1, d) < 0 else "0.0"
    if 1e-3 <= abs(d) < 1e7:
        text = repr(d)
        return text if "." in text or "e" in text else text + ".0"
    sign, digits, exponent = Decimal(repr(d)).as_tuple()
    mantissa = "".join(map(str, digits)).rstrip("0") or "0"
    power = exponent + len(digits) - 1  # type: ignore[operator]
    return f"{'-' if sign else ''}{mantissa[0]}.{mantissa[1:] or '0'}E{power}"


def to_string(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return java_double(v)
    if isinstance(v, Json) or isinstance(v, (dict, list)):  # a JSON value, or an element of an ARRAY<JSON>
        return to_json_text(v)
    if isinstance(v, Arr):
        return "[" + ", ".join("null" if x is None else str(to_string(x)) for x in v.items) + "]"
    return str(v)


def _unwrapped(v: Any) -> Any:
    """A value a number can be read from: a JSON value's own; null for an array or an object."""
    if isinstance(v, Json):
        v = v.value
    return None if isinstance(v, (Arr, list, dict)) else v


def to_long(v: Any) -> int | None:
    """Druid's cast to LONG of one value (`executor.casts.to_long`), a JSON value's own."""
    return casts.to_long(_unwrapped(v))


def to_double(v: Any) -> float | None:
    return casts.to_double(_unwrapped(v))


_SAME = {"LONG": int, "DOUBLE": float, "STRING": str}


def cast(v: Any, to: str) -> Any:
    """One value as expression type `to` (LONG, DOUBLE, STRING, JSON, ARRAY<...>), as ExprEval.castTo:
    a scalar cast to an array is a one-element array; an array cast to a scalar keeps its only element."""
    if v is None or type(v) is _SAME.get(to):  # already of the type (the usual case), nothing to read
        return v
    if to.startswith("ARRAY<"):
        element = to[6:-1]
        if isinstance(v, Json) and isinstance(v.value, list):
            v = Arr("JSON", tuple(v.value))
        items = v.items if isinstance(v, Arr) else (v,)
        return Arr(element, tuple(cast_element(x, element) for x in items))
    if to == "JSON":
        return v if isinstance(v, Json) else Json(to_json_value(v))
    if isinstance(v, Arr):
        if len(v.items) != 1:
            raise ExpressionError(f"cannot cast an array of {len(v.items)} elements to {to}")
        return cast(v.items[0], to)
    if to == "LONG":
        return to_long(v)
    if to == "DOUBLE":
        return to_double(v)
    return to_string(v)


def cast_element(v: Any, element: str) -> Any:
    """One array element as `element`: as `cast`, but a JSON element is its plain document (an ARRAY<JSON>
    holds documents, not `Json` values)."""
    return to_json_value(v) if element == "JSON" else cast(v, element)


def truthy(v: Any) -> bool:
    """Druid's asBoolean: a number is true when positive, text when it is 'true' (any case); null is false."""
    if v is None:
        return False
    if isinstance(v, (int, float)):
        return v > 0
    if isinstance(v, str):
        return v.lower() == "true"
    return False


def as_array(v: Any) -> Arr | None:
    """A value where an array is expected: a scalar is a one-element array, null stays null."""
    if v is None or isinstance(v, Arr):
        return v
    if isinstance(v, Json):
        return Arr("JSON", tuple(v.value)) if isinstance(v.value, list) else Arr("JSON", (v.value,))
    return Arr(type_of(v) or "STRING", (v,))


# ------------------------------------------------------------------------------------------ JSON


def to_json_value(v: Any) -> Any:
    """A value as a plain JSON document (arrays as lists)."""
    if isinstance(v, Json):
        return v.value
    if isinstance(v, Arr):
        return [to_json_value(x) for x in v.items]
    return v


def to_json_text(v: Any) -> str:
    return json.dumps(to_json_value(v), separators=(",", ":"), ensure_ascii=False)


def from_json(doc: Any) -> Any:
    """A value read from a JSON document, as Druid's best effort: an object (or a list holding objects or lists)
    is JSON; a list of scalars an array (LONG, DOUBLE, else STRING); booleans are 1 or 0."""
    if isinstance(doc, bool):
        return int(doc)
    if isinstance(doc, dict):
        return Json(doc)
    if isinstance(doc, list):
        if any(isinstance(x, (dict, list)) for x in doc):
            return Json(doc)
        items = [int(x) if isinstance(x, bool) else x for x in doc]
        if not items:
            return Arr("?", ())
        element = common_type(type_of(x) for x in items) or "STRING"
        return Arr(element, tuple(cast(x, element) for x in items))
    return doc


# ------------------------------------------------------------------------------------------ columns


def to_values(v: Any, n: int) -> list[Any]:
    """A compiled expression's result (an array or a Python constant) as `n` Python values."""
    if isinstance(v, pa.ChunkedArray):
        v = v.combine_chunks()
    if isinstance(v, pa.Array):
        if isinstance(v.type, JsonType):  # parsed from the storage's text: no pyarrow scalar per value
            return [None if x is None else Json(json.loads(x)) for x in v.storage.to_pylist()]
        return _python(v.to_pylist(), v.type)
    if isinstance(v, list):  # a constant array
        return [Arr(common_type(type_of(x) for x in v) or "STRING", tuple(v))] * n
    return [int(v) if isinstance(v, bool) else v] * n


def _python(values: list[Any], t: pa.DataType) -> list[Any]:
    if isinstance(t, JsonType) or pa.types.is_struct(t):  # a record a decoder typed (Avro): a JSON object
        return [None if x is None else Json(x) for x in values]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        element = element_of(t.value_type)
        return [None if x is None else Arr(element, tuple(_python(x, t.value_type) if element != "JSON" else x))
                for x in values]
    if pa.types.is_boolean(t):
        return [None if x is None else int(x) for x in values]
    return values


def from_values(values: list[Any], n: int) -> pa.Array:
    """Python values (one per row) as one array: their common type, each value cast to it."""
    kind = common_type(type_of(v) for v in values)
    if kind is None:
        return pa.nulls(n)
    return build(values, kind)


def build(values: list[Any], kind: str) -> pa.Array:
    """`values` as an array of expression type `kind`."""
    if kind == "JSON":
        storage = pa.array([None if v is None else to_json_text(cast(v, "JSON")) for v in values], pa.string())
        return pa.ExtensionArray.from_storage(JSON, storage)
    if kind.startswith("ARRAY<") and "JSON" in kind:  # pyarrow builds no list of an extension type from lists
        arrays = [cast(v, kind) for v in values]
        offsets, flat = [0], []
        for a in arrays:
            flat.extend(a.items if a is not None else ())
            offsets.append(len(flat))
        mask = pa.array([a is None for a in arrays])
        return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), build(flat, kind[6:-1]), mask=mask)
    return pa.array([_plain(cast(v, kind)) for v in values], arrow_type(kind))


def _plain(v: Any) -> Any:
    """A cast value as pyarrow takes it: arrays as lists, JSON values as their JSON text."""
    if isinstance(v, Arr):
        return [to_json_text(x) if v.element == "JSON" and x is not None else _plain(x) for x in v.items]
    if isinstance(v, Json):
        return to_json_text(v.value)
    return v


def concat_arrays(pieces: list[pa.Array]) -> pa.Array:
    """Arrays evaluated on slices of a chunk as one array. Of one type, that type; of several (a LONG array for
    some rows, a DOUBLE array for others), JSON values, so that each row keeps its own values (2 stays 2)."""
    values: list[Any] = []
    for p in pieces:
        values.extend(to_values(p, len(p)))
    kinds = {element_of(p.type) for p in pieces if not pa.types.is_null(p.type)}
    return from_values(values, len(values)) if len(kinds) <= 1 else build(values, "JSON")


def expression_input(values: list[Any]) -> pa.Array:
    """An input field's decoded values as an expression reads them (Druid's ExpressionTransform): a list is an
    array (its elements' common type), an object a JSON value, a scalar itself."""
    return from_values([from_json(v) for v in values], len(values))


def scalar_view(v: Any) -> Any:
    """A JSON or array column where a scalar operator or function reads it. JSON: its scalars as themselves
    (numbers as numbers when the column holds only numbers), objects and lists as JSON text. An array: Druid's
    text of it, `[a, b]`. Any other value unchanged."""
    t = getattr(v, "type", None)
    if t is not None and (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return pa.array([to_string(x) for x in to_values(v, len(v))], pa.string())
    if not isinstance(t, JsonType):
        return v
    values = v.to_pylist()
    kinds = {type(x) for x in values if x is not None}
    if kinds and kinds <= {int, float}:
        return pa.array(values, pa.int64() if kinds == {int} else pa.float64())
    return pa.array([x if x is None or isinstance(x, str) else to_json_text(x) for x in values], pa.string())
