"""Schema discovery on Arrow (`useSchemaDiscovery`, `type: auto`): the discovered values' column, their types, and
tables brought to a wider schema. Types and widening are `core.column_types`.

A Spark source has a fixed schema, and discovered columns are known only once the data is read. So the row
parser puts each row's discovered values in one column, `AUTO_JSON`: canonical JSON text of {name: value}, whose
values keep their JSON types (1, 1.0, "1", [1], {"a": 1} differ). The job then
  1. collects the (column, type) pairs of its rows (`type_batches`, a small Python pass per Spark partition) and
     widens them into one type per column (`column_types`): the same result whatever the split or order;
  2. replaces the JSON column by typed columns (`expand_batches`): LONG int64, DOUBLE float64, STRING string,
     ARRAY<T> list<T>, COMPLEX<json> the value's canonical JSON text (a string column, queryable with JSON
     functions), each value coerced to its column's type;
  3. rolls up on those typed columns, so 1 and 1.0 in a DOUBLE column are one group.

Segments of different runs may type a column differently (a column long in old segments, double in new ones,
or absent). A segment's types travel in its record (`StagedSegment.types`); readers widen them all
(`core.column_types.merge_types`) and bring each segment's table to the merged schema (`conform`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core.column_types import (
    DOUBLE,
    FLOAT,
    JSON,
    LONG,
    NULL,
    SKETCH,
    STRING,
    TIMESTAMP,
    array_of,
    canonical,
    coerce,
    discovered_type,
    element_type,
    json_text,
    value_type,
)

AUTO_JSON = "__auto"  # the row's discovered values: canonical JSON text of {name: value}


def type_aware(dimensions_spec: Any) -> bool:
    """Whether a spec discovers typed columns: `useSchemaDiscovery`, or a `type: auto` dimension."""
    return bool(dimensions_spec.use_schema_discovery or any(d.type == "auto" for d in dimensions_spec.dimensions))


# ------------------------------------------------------------------------------------------ types <-> Arrow


def arrow_type(t: str) -> pa.DataType:
    element = element_type(t)
    if element is not None:
        return pa.list_(arrow_type(element))
    return {LONG: pa.int64(), DOUBLE: pa.float64(), FLOAT: pa.float32(), SKETCH: pa.binary(),
            TIMESTAMP: pa.timestamp("ms", tz="UTC")}.get(t, pa.string())


def type_of_arrow(t: pa.DataType) -> str:
    """The column type of an Arrow type (a string column is STRING: COMPLEX<json> is known from the record)."""
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return array_of(type_of_arrow(t.value_type))
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return LONG
    if pa.types.is_float32(t):
        return FLOAT
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return DOUBLE
    if pa.types.is_timestamp(t):
        return TIMESTAMP
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return SKETCH
    return STRING


def arrow_schema(types: Mapping[str, str]) -> pa.Schema:
    return pa.schema([(name, arrow_type(t)) for name, t in types.items()])


def schema_types(schema: pa.Schema, known: Mapping[str, str] | None = None) -> dict[str, str]:
    """A file's column types: from Arrow, but those that Arrow cannot tell (COMPLEX<json> and NULL are strings)
    taken from `known`."""
    known = {n: t for n, t in (known or {}).items() if t in (JSON, NULL)}
    return {f.name: known.get(f.name) or type_of_arrow(f.type) for f in schema}


def needs_conversion(own: Mapping[str, str], target: Mapping[str, str]) -> bool:
    """Whether a file of types `own` must be converted (`conform`) to be read as `target` (a column it lacks
    needs none: it reads as null)."""
    return any(t != target[n] and not (t == NULL and target[n] == STRING) for n, t in own.items())


# ------------------------------------------------------------------------------------------ the discovered column


def encode(row_values: Iterable[Mapping[str, Any]]) -> pa.Array:
    """The AUTO_JSON column of rows of canonical values (a null too: the field is there, as a column of nulls
    is in Druid)."""
    return pa.array([json_text(r) for r in row_values], pa.string())


def value_types(texts: pa.Array | pa.ChunkedArray) -> dict[str, set[str]]:
    """Per discovered column, the types its values have in `texts` (AUTO_JSON values); each text parsed once."""
    out: dict[str, set[str]] = {}
    for text in pc.unique(texts).to_pylist():
        if text is None:
            continue
        for name, value in json.loads(text).items():
            t = value_type(value)
            if t is not None:
                out.setdefault(name, set()).add(t)
            else:
                out.setdefault(name, set())
    return out


def column_types(pairs: Iterable[tuple[str, str | None]], listed: Iterable[str] = ()) -> dict[str, str]:
    """(column, value type) pairs -> each column's type; `listed` (`type: auto` dimensions) are there even
    when no value was seen (NULL: stored as STRING, as Druid types a column of nulls)."""
    seen: dict[str, list[str | None]] = {name: [] for name in listed}
    for name, t in pairs:
        seen.setdefault(name, []).append(t)
    return {name: discovered_type(types) for name, types in seen.items()}


def type_batches(batches: Iterator[pa.RecordBatch], column: str = AUTO_JSON) -> Iterator[pa.RecordBatch]:
    """For Spark's mapInArrow: the distinct (name, type) pairs of a partition's AUTO_JSON values, as one batch
    (a column of nulls only gives a null type)."""
    seen: dict[str, set[str]] = {}
    for batch in batches:
        for name, types in value_types(batch.column(batch.schema.get_field_index(column))).items():
            seen.setdefault(name, set()).update(types)
    pairs = [(name, t) for name, types in sorted(seen.items()) for t in (sorted(types) or [None])]
    yield pa.RecordBatch.from_arrays([pa.array([p[0] for p in pairs], pa.string()),
                                      pa.array([p[1] for p in pairs], pa.string())], names=["name", "type"])


def expand(table: pa.Table | pa.RecordBatch, types: Mapping[str, str], column: str = AUTO_JSON) -> pa.Table:
    """`table` with its AUTO_JSON column replaced by one typed column per discovered column (in `types`' order)."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    rows = [json.loads(t) if t is not None else {} for t in table.column(column).to_pylist()]
    out = table.drop_columns([column])
    for name, t in types.items():
        out = out.append_column(pa.field(name, arrow_type(t)),
                                pa.array([coerce(r.get(name), t) for r in rows], arrow_type(t)))
    return out


def expand_batches(batches: Iterator[pa.RecordBatch], types: Mapping[str, str],
                   column: str = AUTO_JSON) -> Iterator[pa.RecordBatch]:
    """For Spark's mapInArrow: `expand` each batch."""
    for batch in batches:
        yield from expand(batch, types, column).to_batches()


# ------------------------------------------------------------------------------------------ segments of other schemas


def conform(table: pa.Table, own: Mapping[str, str], target: Mapping[str, str]) -> pa.Table:
    """A segment's table (its columns typed `own`) with exactly the columns of `target`, in that order: a column
    it lacks is null, a narrower one widened (LONG to DOUBLE, a number to STRING, a scalar to a one-element
    array, anything to COMPLEX<json> text) as `core.column_types.coerce` does for rows of one job."""
    columns = []
    for name, t in target.items():
        want = arrow_type(t)
        if name not in table.column_names:
            columns.append(pa.nulls(table.num_rows, want))
            continue
        have = own.get(name) or type_of_arrow(table.schema.field(name).type)
        values = table.column(name)
        if have == t:
            columns.append(values)  # as it is (timestamps keep their unit: Spark's differs)
        elif castable(have, t):
            columns.append(pc.cast(values, want))
        else:
            columns.append(pa.array([coerce(_as_canonical(v, have), t) for v in values.to_pylist()], want))
    return pa.Table.from_arrays(columns, names=list(target))


def conform_batches(batches: Iterator[pa.RecordBatch], own: Mapping[str, str],
                    target: Mapping[str, str]) -> Iterator[pa.RecordBatch]:
    """For Spark's mapInArrow: `conform` each batch (timestamps as Spark hands them: the caller's schema)."""
    for batch in batches:
        table = conform(pa.Table.from_batches([batch]), own, target)
        yield from table.to_batches()


def castable(have: str, want: str) -> bool:
    """Arrow's cast gives what `coerce` would: numbers widen, a long to text, arrays element-wise (a double's
    text is Python's repr, `1.0`, where Arrow writes `1`)."""
    if have == NULL:
        return element_type(want) is None  # nulls cast to any scalar type
    if want == JSON or have == JSON:
        return False
    he, we = element_type(have), element_type(want)
    if he is not None and we is not None:
        return castable(he, we)
    if (he is None) != (we is None):
        return False
    if want == STRING:
        return have in (STRING, LONG)
    return want in (DOUBLE, FLOAT, LONG) and have in (LONG, FLOAT, DOUBLE)


def _as_canonical(value: Any, have: str) -> Any:
    """A value read from a segment column of type `have`, as `coerce` takes it (JSON text parsed back)."""
    if have == JSON:
        return None if value is None else json.loads(value)
    return canonical(value)
