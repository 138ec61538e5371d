"""Sketch metrics in Apache DataSketches' standard serialized bytes, built and merged with the `datasketches`
package (DataSketches' own C++ library, whose bytes are the Java library's that Druid writes):

    thetaSketch             a compact ordered theta sketch of nominal size `size` (Druid: SketchHolder)
    HLL (all four types)    an HLL sketch of lgK, serialized compact as tgtHllType (Druid: toCompactByteArray)
    quantilesDoublesSketch  a classic quantiles doubles sketch of k (compact)
    KllDoubles/FloatsSketch a KLL sketch of k

A split builds one sketch per rollup group (`build`); Spark merges the partial sketches of a group
(`executor.combine`, in a mapInArrow); compaction merges them again the same way. Nulls are skipped, as Druid does.

Strings are hashed as Druid hashes them: theta sketches hash their UTF-8 bytes; HLL sketches with Druid's default
`stringEncoding: utf16le` hash Java's char[] (the UTF-16LE bytes). The `datasketches` package hashes a str's UTF-8
bytes only, so an ASCII value is given as the str whose UTF-8 bytes are its UTF-16LE bytes ("ab" as "a\\0b\\0");
a value with non-ASCII characters has no such str and is hashed as UTF-8: its hash then differs from the one
Druid's utf16le gives (a union with Druid-built sketches counts it twice; counts within this store are exact).
"""

from __future__ import annotations

import base64
import json
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core.aggregators import DOUBLE, LIST, LONG, TEXT, SketchParams
from ingest_core.core.aggregators.sketches import HashedSketch
from ingest_core.executor.combine import combine_lists

try:  # the executors' environment has it (a dependency); imported lazily elsewhere for a clear error
    import datasketches as ds
except ImportError:  # pragma: no cover - reported when a sketch is first built
    ds = None


# ------------------------------------------------------------------------------------------ serialized forms


def empty(params: SketchParams) -> bytes:
    """The serialized sketch of no values."""
    return params.finish(params.new())


def deserialize(params: SketchParams, data: bytes) -> Any:
    """A sketch from its serialized bytes; ValueError (or RuntimeError from the library) when they are not one."""
    return params.deserialize(data)


def merge(params: SketchParams, parts: list[bytes], *, rebuild: bool = False) -> bytes:
    """The union (merge) of serialized sketches, serialized. One sketch is kept as it is, unless `rebuild`: a
    sketch sent as input becomes one of the metric's own size and type."""
    parts = [p for p in parts if p is not None]
    if len(parts) == 1 and not rebuild:
        return parts[0]
    if not parts:
        return empty(params)
    return params.union(parts)


# ------------------------------------------------------------------------------------------ building


def hash_input(params: SketchParams, values: pa.Array) -> pa.Array:
    """String values as the `datasketches` package must be given them to hash as Druid does (see the module
    doc): for HLL's utf16le, ASCII text with a NUL after each character."""
    if not params.utf16le or params.from_sketches or not pa.types.is_string(values.type):
        return values
    return pc.if_else(pc.string_is_ascii(values), _nul_after_each_byte(values), values)


def _nul_after_each_byte(values: pa.Array) -> pa.Array:
    """Each string with a NUL byte after each of its bytes: an ASCII string's UTF-16LE bytes (vectorized:
    one copy of the character data, no per-value work)."""
    if values.null_count:
        values = pc.fill_null(values, "")  # the caller keeps the nulls (if_else on the original)
    if not pa.types.is_string(values.type):
        values = values.cast(pa.string())
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[values.offset:values.offset + len(values) + 1]
    chars = np.frombuffer(values.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
    doubled = np.zeros(2 * len(chars), dtype=np.uint8)
    doubled[0::2] = chars
    return pa.StringArray.from_buffers(len(values), pa.py_buffer(((offsets - offsets[0]) * 2).astype(np.int32)),
                                       pa.py_buffer(doubled))


def build(params: SketchParams, values: pa.Array, offsets: np.ndarray, kinds: Any = None) -> pa.Array:
    """One serialized sketch per group: group g holds values[offsets[g]:offsets[g+1]] (nulls skipped). `kinds`:
    how each text value arrived (`core.aggregators`), for the sketches that hash a long as a long, a double as a
    double and each element of a list, as Druid does."""
    if ds is None:
        raise RuntimeError("the `datasketches` package is not installed where the job runs: pip install "
                           "datasketches (it is a dependency of this project)")
    valid = values.is_valid()
    if values.null_count:
        kept = np.concatenate(([0], np.cumsum(np.asarray(valid.to_numpy(zero_copy_only=False), dtype=np.int64))))
        offsets = kept[offsets]
        values = values.filter(valid)
        kinds = kinds.filter(valid) if kinds is not None else None
    if kinds is not None and (pc.max(kinds).as_py() or TEXT) != TEXT:
        items, offsets = _typed_items(params, values, kinds.to_numpy(zero_copy_only=False), offsets)
        return _sketch_items(params, items, offsets)
    sizes = np.diff(offsets)
    if not params.from_sketches and len(sizes) > 1 and (sizes <= 1).mean() > 0.5:
        # most groups hold one value (or none): their sketch depends on that value only, so build one sketch
        # per distinct value and give each group its value's; the other groups are built below
        return _by_single_values(params, values, offsets, sizes)
    return _build_groups(params, values, offsets)


def _by_single_values(params: SketchParams, values: pa.Array, offsets: np.ndarray, sizes: np.ndarray) -> pa.Array:
    """`build` when most groups hold one value: one sketch per distinct value of those groups."""
    none, one, many = np.flatnonzero(sizes == 0), np.flatnonzero(sizes == 1), np.flatnonzero(sizes > 1)
    encoded = values.take(pa.array(offsets[one])).dictionary_encode()
    per_value = _build_groups(params, encoded.dictionary, np.arange(len(encoded.dictionary) + 1))
    pieces = [pa.array([empty(params)] * len(none), pa.binary()), per_value.take(encoded.indices)]
    if len(many):
        rows = np.concatenate([np.arange(offsets[g], offsets[g + 1]) for g in many])
        pieces.append(_build_groups(params, values.take(pa.array(rows)),
                                    np.concatenate(([0], np.cumsum(sizes[many])))))
    built_order = np.concatenate([none, one, many])  # the groups, in the order `pieces` holds them
    return pa.concat_arrays(pieces).take(pa.array(np.argsort(built_order, kind="stable")))


def _build_groups(params: SketchParams, values: pa.Array, offsets: np.ndarray) -> pa.Array:
    """One sketch per group of non-null `values`."""
    out: list[bytes] = []
    groups = len(offsets) - 1
    if params.from_sketches:
        texts = values.to_pylist()
        for g in range(groups):
            parts = [base64.b64decode(t) for t in texts[offsets[g]:offsets[g + 1]]]
            out.append(merge(params, parts, rebuild=True))
        return pa.array(out, pa.binary())
    if not isinstance(params.family, HashedSketch):  # quantiles, KLL: numbers
        array = np.array(values.to_numpy(zero_copy_only=False),  # a writable copy: the binding takes no other
                           dtype=np.float32 if params.floats else np.float64)
        for g in range(groups):
            sketch = params.new()
            a, b = offsets[g], offsets[g + 1]
            if b > a:
                sketch.update(array[a:b])
            out.append(sketch.serialize())
        return pa.array(out, pa.binary())
    return _sketch_items(params, _hashable(params, values), offsets)


def _sketch_items(params: SketchParams, items: list[Any], offsets: np.ndarray) -> pa.Array:
    """One theta or HLL sketch per group of Python items (each hashed by its type)."""
    out: list[bytes] = []
    for g in range(len(offsets) - 1):
        sketch = params.new()
        update: Callable[[Any], None] = sketch.update
        for item in items[offsets[g]:offsets[g + 1]]:
            update(item)
        out.append(params.finish(sketch))
    return pa.array(out, pa.binary())


def _typed_items(params: SketchParams, values: pa.Array, kinds: np.ndarray,
                 offsets: np.ndarray) -> tuple[list[Any], np.ndarray]:
    """The items Druid's sketch would hash, and the groups' new offsets: a long as an int (Java's
    update(long)), a double as a float (update(double)), text as text, a list's elements each as text."""
    texts = _hashable(params, values)
    raw = values.to_pylist()
    items: list[Any] = []
    counts = np.ones(len(raw), dtype=np.int64)
    for i, kind in enumerate(kinds):
        if kind == LONG:
            items.append(int(raw[i]))
        elif kind == DOUBLE:
            items.append(float(raw[i]))
        elif kind == LIST:
            elements = [e if isinstance(e, str) else json.dumps(e) for e in json.loads(raw[i]) if e is not None]
            items.extend(_hashable(params, pa.array(elements, pa.string())))
            counts[i] = len(elements)
        else:
            items.append(texts[i])
    return items, np.concatenate(([0], np.cumsum(counts)))[offsets]


def _hashable(params: SketchParams, values: pa.Array) -> list[Any]:
    """The values as Python items the sketch hashes as Druid does: str for text, int for longs, float for
    doubles (Java's update(long) / update(double))."""
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return hash_input(params, values).to_pylist()
    return values.to_pylist()


# ------------------------------------------------------------------------------------------ Spark's merge


def merge_lists(params: SketchParams, lists: pa.Array) -> pa.Array:
    """Each list of partial sketches merged; a list of one (a group seen by one split only) is kept as it is."""
    return combine_lists(lists, lambda parts: merge(params, parts), pa.binary())
