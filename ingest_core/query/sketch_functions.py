"""Druid SQL's DataSketches functions as DuckDB Python UDFs (`druid_sql.register`), over Apache DataSketches'
standard serialized bytes (the `datasketches` package: the same bytes as the Java library Druid uses).

DuckDB takes no aggregate UDFs from Python, so an aggregate such as `DS_THETA(x)` runs as DuckDB's `list(x)` (the
group's values, FILTER applied) handed to a scalar function here that builds or merges the sketch: a value that is
bytes is a sketch and is merged, any other value is hashed into the sketch, nulls are skipped (as Druid does).
Each function takes Arrow arrays (one call per DuckDB vector) and returns one value per row.

Hashing follows Druid's aggregators: theta hashes a string's UTF-8 bytes, a long as a long, a double as a double;
HLL with Druid's default `stringEncoding: utf16le` hashes Java's char[]: the package hashes UTF-8 only, so an
ASCII string is given as the str whose UTF-8 bytes are its UTF-16LE bytes (a non-ASCII one hashes as UTF-8 and
then differs from Druid's hash). Quantile queries use the inclusive search criteria, the Java library's default.
"""

from __future__ import annotations

import inspect
import math
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Callable

import datasketches as dsk
import numpy as np
import pyarrow as pa

from ingest_core.core.aggregators import sketches as sketch_types

# Druid's defaults, as its aggregators have them (`core.aggregators`)
THETA_SIZE = sketch_types.THETA_DEFAULT_SIZE  # nominal entries (lgK 14)
HLL_LG_K = sketch_types.HLL_DEFAULT_LG_K
HLL_TYPE = sketch_types.HLL_DEFAULT_TYPE
QUANTILES_K = sketch_types.QUANTILES_DEFAULT_K


# ------------------------------------------------------------------------------------------ values as Druid hashes them


def _items(value: Any) -> list[Any]:
    """One raw value as the items a sketch is updated with (a list, Druid's multi-value row, gives each)."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [item for v in value for item in _items(v)]
    if isinstance(value, bool):
        return [int(value)]
    if isinstance(value, (int, float, str)):
        return [value]
    if isinstance(value, Decimal):
        return [int(value) if value == value.to_integral_value() else float(value)]
    if isinstance(value, datetime):
        return [int(value.timestamp() * 1000)]  # __time as Druid's long millis
    if isinstance(value, date):
        return [value.isoformat()]
    return [str(value)]


def _utf16le(item: Any) -> Any:
    if isinstance(item, str) and item.isascii():
        return "".join(ch + "\x00" for ch in item)
    return item


# ------------------------------------------------------------------------------------------ sketches of a group


def theta_of(values: list[Any] | None, size: int) -> Any:
    """A compact theta sketch of a group's values (raw values hashed, sketch bytes merged)."""
    lg_k = int(math.log2(size))
    raw = dsk.update_theta_sketch(lg_k)
    parts = []
    for value in values or ():
        if isinstance(value, bytes):
            parts.append(dsk.compact_theta_sketch.deserialize(value))
        else:
            for item in _items(value):
                raw.update(item)
    if not parts and not raw.is_estimation_mode():
        return raw.compact()
    union = dsk.theta_union(lg_k)  # trims an update sketch to its nominal size, as Druid's union stores it
    if not raw.is_empty():
        union.update(raw)
    for part in parts:
        union.update(part)
    return union.get_result()


def hll_of(values: list[Any] | None, lg_k: int, tgt: str) -> Any:
    sketch = dsk.hll_sketch(lg_k, getattr(dsk.tgt_hll_type, tgt))
    parts = []
    for value in values or ():
        if isinstance(value, bytes):
            parts.append(dsk.hll_sketch.deserialize(value))
        else:
            for item in _items(value):
                sketch.update(_utf16le(item))
    if not parts:
        return sketch
    union = dsk.hll_union(lg_k)
    union.update(sketch)
    for part in parts:
        union.update(part)
    return union.get_result(getattr(dsk.tgt_hll_type, tgt))


def quantiles_of(values: list[Any] | None, k: int) -> Any:
    sketch = dsk.quantiles_doubles_sketch(k)
    numbers = []
    for value in values or ():
        if isinstance(value, bytes):
            sketch.merge(dsk.quantiles_doubles_sketch.deserialize(value))
        else:
            numbers.extend(float(v) for v in _items(value))
    if numbers:
        sketch.update(np.array(numbers, dtype=np.float64))
    return sketch


def _theta(data: bytes) -> Any:
    return dsk.compact_theta_sketch.deserialize(data)


def _hll(data: bytes) -> Any:
    return dsk.hll_sketch.deserialize(data)


def _quantiles(data: bytes) -> Any:
    return dsk.quantiles_doubles_sketch.deserialize(data)


def _round(estimate: float) -> int:
    return int(math.floor(estimate + 0.5))  # Java's Math.round, as Druid's finalized distinct counts


# ------------------------------------------------------------------------------------------ UDFs over Arrow arrays


def _rows(*columns: Any) -> zip:
    return zip(*(c.to_pylist() for c in columns))


def udf_of(out_type: pa.DataType, row: Callable[..., Any]) -> Callable[..., pa.Array]:
    """A vectorized UDF: `row` applied to each row's values. A null first argument gives null, except for an
    aggregate's finishing function (`aggregate_row`: a group of no rows is its empty sketch)."""
    takes_null = row in _AGGREGATE_ROWS

    def udf(*columns: Any) -> pa.Array:
        return pa.array([row(*args) if takes_null or args[0] is not None else None for args in _rows(*columns)],
                        out_type)
    udf.__name__ = row.__name__
    udf.__signature__ = inspect.signature(row)  # DuckDB counts the parameters (any type) on the signature
    return udf


_AGGREGATE_ROWS: set[Callable[..., Any]] = set()


def aggregate_row(fn: Callable[..., Any]) -> Callable[..., Any]:
    _AGGREGATE_ROWS.add(fn)
    return fn


@aggregate_row
def ds_theta(values, size):
    return theta_of(values, size).serialize()


@aggregate_row
def ds_theta_count(values, size):
    return _round(theta_of(values, size).get_estimate())


def theta_estimate(data):
    return _theta(data).get_estimate()


def theta_estimate_bounds(data, num_std_dev):
    sketch = _theta(data)
    return {"estimate": sketch.get_estimate(), "highBound": sketch.get_upper_bound(num_std_dev),
            "lowBound": sketch.get_lower_bound(num_std_dev), "numStdDev": num_std_dev}


@aggregate_row
def theta_set_op(sketches, op, size):
    """THETA_SKETCH_UNION / _INTERSECT / _NOT over the row's sketches (a null sketch: an empty one)."""
    parts = [_theta(s) if s is not None else dsk.update_theta_sketch().compact() for s in sketches]
    lg_k = int(math.log2(size))
    if op == "union":
        union = dsk.theta_union(lg_k)
        for part in parts:
            union.update(part)
        return union.get_result().serialize()
    if op == "intersect":
        intersection = dsk.theta_intersection()
        for part in parts:
            intersection.update(part)
        return intersection.get_result().serialize()
    result, a_not_b = parts[0], dsk.theta_a_not_b()
    for part in parts[1:]:
        result = a_not_b.compute(result, part)
    return result.serialize()


@aggregate_row
def ds_hll(values, lg_k, tgt):
    return hll_of(values, lg_k, tgt).serialize_compact()


@aggregate_row
def ds_hll_count(values, lg_k, tgt):
    return _round(hll_of(values, lg_k, tgt).get_estimate())


def hll_estimate(data):
    return _hll(data).get_estimate()


def hll_estimate_bounds(data, num_std_dev):
    sketch = _hll(data)
    return [sketch.get_estimate(), sketch.get_lower_bound(num_std_dev), sketch.get_upper_bound(num_std_dev)]


@aggregate_row
def hll_set_union(sketches, lg_k, tgt):
    union = dsk.hll_union(lg_k)
    for data in sketches:
        if data is not None:
            union.update(_hll(data))
    return union.get_result(getattr(dsk.tgt_hll_type, tgt)).serialize_compact()


@aggregate_row
def ds_quantiles(values, k):
    return quantiles_of(values, k).serialize()


@aggregate_row
def quantile_ds(values, fraction, k):
    return quantiles_of(values, k).get_quantile(fraction, True)


def ds_get_quantile(data, fraction):
    return _quantiles(data).get_quantile(fraction, True)


def ds_get_quantiles(data, fractions):
    sketch = _quantiles(data)
    return [sketch.get_quantile(f, True) for f in fractions]


def ds_rank(data, value):
    return _quantiles(data).get_rank(value, True)


def ds_cdf(data, split_points):
    sketch = _quantiles(data)
    return list(sketch.get_cdf(split_points, True)) if not sketch.is_empty() else [math.nan] * (len(split_points) + 1)


def ds_histogram(data, split_points):
    sketch = _quantiles(data)
    if sketch.is_empty():
        return [math.nan] * (len(split_points) + 1)
    return [p * sketch.n for p in sketch.get_pmf(split_points, True)]


def ds_quantile_summary(data):
    return _quantiles(data).to_string()


BOUNDS = pa.struct([("estimate", pa.float64()), ("highBound", pa.float64()), ("lowBound", pa.float64()),
                    ("numStdDev", pa.int32())])
DOUBLES = pa.list_(pa.float64())

# name -> (row function, Arrow type of its result, DuckDB type of its result)
FUNCTIONS: dict[str, tuple[Callable[..., Any], pa.DataType, str]] = {
    "druid_ds_theta": (ds_theta, pa.binary(), "BLOB"),
    "druid_ds_theta_count": (ds_theta_count, pa.int64(), "BIGINT"),
    "druid_theta_estimate": (theta_estimate, pa.float64(), "DOUBLE"),
    "druid_theta_estimate_bounds": (theta_estimate_bounds, BOUNDS,
                                    'STRUCT(estimate DOUBLE, "highBound" DOUBLE, "lowBound" DOUBLE, '
                                    '"numStdDev" INTEGER)'),
    "druid_theta_set_op": (theta_set_op, pa.binary(), "BLOB"),
    "druid_ds_hll": (ds_hll, pa.binary(), "BLOB"),
    "druid_ds_hll_count": (ds_hll_count, pa.int64(), "BIGINT"),
    "druid_hll_estimate": (hll_estimate, pa.float64(), "DOUBLE"),
    "druid_hll_estimate_bounds": (hll_estimate_bounds, DOUBLES, "DOUBLE[]"),
    "druid_hll_union": (hll_set_union, pa.binary(), "BLOB"),
    "druid_ds_quantiles": (ds_quantiles, pa.binary(), "BLOB"),
    "druid_quantile_ds": (quantile_ds, pa.float64(), "DOUBLE"),
    "druid_ds_get_quantile": (ds_get_quantile, pa.float64(), "DOUBLE"),
    "druid_ds_get_quantiles": (ds_get_quantiles, DOUBLES, "DOUBLE[]"),
    "druid_ds_rank": (ds_rank, pa.float64(), "DOUBLE"),
    "druid_ds_cdf": (ds_cdf, DOUBLES, "DOUBLE[]"),
    "druid_ds_histogram": (ds_histogram, DOUBLES, "DOUBLE[]"),
    "druid_ds_quantile_summary": (ds_quantile_summary, pa.string(), "VARCHAR"),
}


def register(con: Any, names: set[str], functions: dict[str, tuple[Callable[..., Any], pa.DataType, str]] | None = None
             ) -> None:
    """The functions of `names` (of `functions`, by default `FUNCTIONS`) on a DuckDB connection."""
    for name in sorted(names):
        row, arrow_type, duck_type = (functions or FUNCTIONS)[name]
        con.create_function(name, udf_of(arrow_type, row), None, duck_type, type="arrow", null_handling="special")
