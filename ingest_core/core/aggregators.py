"""Druid's ingestion aggregators: what each computes, from which kind of input, and how it is stored.

Pure description (no I/O): the spec binder checks a metricsSpec against it (`spec.Aggregator`), the executors
build partial rows from it (`executor.rollup`), Spark merges them (`spark.job.rollup`), compaction combines
them again (`spark.compaction`).

    type                          op         input    stored as
    count                         count      -        long
    long/double/floatSum|Min|Max  sum/min/max  kind   kind (float sums as double)
    long/double/floatFirst|Last   first/last kind     kind
    stringFirst / stringLast      first/last string   string (at most maxStringBytes UTF-8 bytes)
    long/double/float/stringAny   any        kind     kind
    thetaSketch                   theta      string   binary: a compact ordered theta sketch
    HLLSketchBuild / HLLSketchMerge,
    hyperUnique, cardinality      hll        string   binary: a compact HLL sketch of tgtHllType
    quantilesDoublesSketch        quantiles  double   binary: a classic quantiles doubles sketch
    KllDoublesSketch / KllFloatsSketch  kll  double / float  binary: a KLL sketch

Sketches are Apache DataSketches' standard serialized bytes (what Druid's Java library writes), so Druid, Spark's
sketch functions, Trino and the `datasketches` package read them.
"""

from __future__ import annotations

from dataclasses import dataclass

# type -> (op, input kind or None for count)
_KINDS: dict[str, tuple[str, str | None]] = {"count": ("count", None)}
for _kind in ("long", "double", "float"):
    for _op in ("Sum", "Min", "Max", "First", "Last", "Any"):
        _KINDS[f"{_kind}{_op}"] = (_op.lower(), _kind)
_KINDS.update({
    "stringFirst": ("first", "string"), "stringLast": ("last", "string"), "stringAny": ("any", "string"),
    "thetaSketch": ("theta", "string"),
    "HLLSketchBuild": ("hll", "string"), "HLLSketchMerge": ("hll", "string"),
    "hyperUnique": ("hll", "string"), "cardinality": ("hll", "string"),
    "quantilesDoublesSketch": ("quantiles", "double"),
    "KllDoublesSketch": ("kll", "double"), "KllFloatsSketch": ("kll", "float"),
})

SUPPORTED_AGGREGATORS = tuple(_KINDS) + ("filtered",)
SKETCH_OPS = ("theta", "hll", "quantiles", "kll")

# refused by name, with what to do instead
REFUSED_AGGREGATORS = {
    "expression": "compute the value with a transformSpec.transforms expression and aggregate its name with a "
                  "typed aggregator (e.g. longSum), or a filtered aggregator for a condition",
    "javascript": "JavaScript is disabled here as in a default Druid: compute the value with a "
                  "transformSpec.transforms expression and aggregate it with a typed aggregator",
}

# Druid's defaults and ranges (the DataSketches libraries' own limits)
THETA_DEFAULT_SIZE = 16384
THETA_MIN_SIZE, THETA_MAX_SIZE = 16, 1 << 26
HLL_DEFAULT_LG_K, HLL_MIN_LG_K, HLL_MAX_LG_K = 12, 4, 21
HLL_TYPES = ("HLL_4", "HLL_6", "HLL_8")
HLL_STRING_ENCODINGS = ("utf16le", "utf8")  # Druid's default: utf16le (a string hashed as Java's char[])
QUANTILES_DEFAULT_K, QUANTILES_MIN_K, QUANTILES_MAX_K = 128, 2, 32768
KLL_DEFAULT_K, KLL_MIN_K, KLL_MAX_K = 200, 8, 65535
HYPER_UNIQUE_LG_K = 11  # Druid's hyperUnique has 2^11 registers: the HLL sketch it becomes keeps that accuracy
STRING_DEFAULT_MAX_BYTES = 1024


# How a hashed sketch input (thetaSketch, HLLSketchBuild, hyperUnique) arrived, as Druid's parser would have typed
# it: Druid hashes a JSON integer as a long, a JSON decimal as a double, text as text, and each element of a list
# (a multi-value field) as text. The row parser keeps the value as text beside its kind (`row_parser.value_kinds`).
TEXT, LONG, DOUBLE, LIST = 0, 1, 2, 3


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def operation(agg_type: str) -> tuple[str, str | None]:
    """(op, input kind) of a supported non-filtered aggregator type."""
    return _KINDS[agg_type]


@dataclass(frozen=True)
class SketchParams:
    """How one sketch metric is built. `lg_k`: theta's log2(size), HLL's lgK; `k`: quantiles and KLL;
    `from_sketches`: the input values are serialized sketches (base64 text, as Druid takes them) to merge."""

    op: str  # theta, hll, quantiles, kll
    lg_k: int = 0
    tgt_hll_type: str = "HLL_4"
    k: int = 0
    floats: bool = False  # KllFloatsSketch
    from_sketches: bool = False
    utf16le: bool = False  # HLL: strings hashed as UTF-16LE (Druid's default stringEncoding)
