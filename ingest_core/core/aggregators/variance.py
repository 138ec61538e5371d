"""`variance` (Druid's druid-stats extension): the variance of a numeric field, stored as Druid stores it.

    {"type": "variance", "name": ..., "fieldName": ..., "inputType": "float", "estimator": null}

The stored value is Druid's `VarianceAggregatorCollector` in its serialized form (`VarianceSerde`): 24 bytes,
big-endian, the count (long), the sum (double) and the sum of squared differences from the mean (`nvariance`,
double). Partials merge with Chan, Golub and LeVeque's pairwise rule, as Druid's (and Hive's) combine does, so
rollup within a run and compaction across runs give the variance of all the rows: the count and sum exactly, the
squares up to the doubles' rounding. `inputType: variance` takes such values (base64 text) to merge. Nulls are
skipped (Druid with SQL-compatible nulls, its default). `estimator` ("population", else the sample variance) is
query-time in Druid: the read side (`read_sql`) gives the variance it names.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from ingest_core.core.aggregators.base import AggregatorType, Evaluator, SerializedInput, base64_bytes
from ingest_core.core.binding import BindContext, join

INPUT_TYPES = ("float", "double", "long", "variance")
_FORMAT = struct.Struct(">qdd")  # count, sum, nvariance: Druid's VarianceAggregatorCollector.toByteArray
_FLOAT = struct.Struct(">f")


@dataclass(frozen=True)
class VarianceParams:
    input_type: str = "float"  # Druid's default
    estimator: str | None = None  # "population"; else the sample variance


@dataclass(frozen=True)
class Collector:
    """Druid's VarianceAggregatorCollector: count, sum and nvariance (n times the population variance)."""

    count: int = 0
    sum: float = 0.0
    nvariance: float = 0.0

    def add(self, v: float) -> "Collector":
        """One value folded in, as Druid's `add` does it (so a group's bytes are Druid's for the same rows)."""
        count, total = self.count + 1, self.sum + v
        nvariance = self.nvariance
        if count > 1:
            t = count * v - total
            nvariance += (t * t) / (float(count) * (count - 1))
        return Collector(count, total, nvariance)

    def merge(self, other: "Collector") -> "Collector":
        """Chan et al., as Druid's `fold`: nvariance = v1 + v2 + n/(m*(m+n)) * ((m/n)*t1 - t2)^2."""
        if not other.count:
            return self
        if not self.count:
            return other
        ratio = self.count / float(other.count)
        t = self.sum / ratio - other.sum
        return Collector(self.count + other.count, self.sum + other.sum,
                         self.nvariance + (other.nvariance + (ratio / (self.count + other.count) * t * t)))

    def variance(self, population: bool) -> float | None:
        if not self.count:
            return None
        if self.count == 1:
            return 0.0
        return self.nvariance / (self.count if population else self.count - 1)

    def to_bytes(self) -> bytes:
        return _FORMAT.pack(self.count, self.sum, self.nvariance)

    @classmethod
    def from_bytes(cls, data: bytes) -> "Collector":
        return cls(*_FORMAT.unpack(data))


class Variance(AggregatorType):
    op = "variance"
    own_fields = frozenset({"inputType", "estimator"})
    params = VarianceParams
    builds_in_python = True

    def check(self, agg: Any, path: str, ctx: BindContext) -> None:
        super().check(agg, path, ctx)
        p: VarianceParams = agg.params
        if p.input_type not in INPUT_TYPES:
            ctx.error(join(path, "inputType"), f"unknown inputType {p.input_type!r}: use one of "
                      f"{', '.join(INPUT_TYPES)} (Druid's default: float)")
        if p.estimator is not None and p.estimator.lower() not in ("population", "sample"):
            ctx.warn(join(path, "estimator"), f"estimator {p.estimator!r} is read as the sample variance (Druid's "
                     "default): only \"population\" means otherwise")

    def reads(self, agg: Any) -> str:
        """How the input field is read: longs as longs, floats and doubles as doubles, `variance` input as base64
        text."""
        return {"variance": "string", "long": "long"}.get(agg.params.input_type, "double")

    def serialized_input(self, agg: Any) -> SerializedInput | None:
        return SerializedInput("a variance collector", _decoded) if agg.params.input_type == "variance" else None

    def stored_type(self, agg: Any) -> str:
        return "binary"

    def build(self, agg: Any, groups: list[list[tuple]], evaluate: Evaluator) -> list[Any]:
        if agg.params.input_type == "variance":
            return [self.combine(agg, [_decoded(v) for (v,) in rows if v is not None], evaluate) for rows in groups]
        out = []
        as_float = agg.params.input_type == "float"  # Druid reads a float input as a float (32 bits)
        for rows in groups:
            collector = Collector()
            for (v,) in rows:
                if v is not None:
                    collector = collector.add(_FLOAT.unpack(_FLOAT.pack(v))[0] if as_float else v)
            out.append(collector.to_bytes())
        return out

    def combine(self, agg: Any, parts: list[Any], evaluate: Evaluator) -> Any:
        merged = Collector()
        for part in parts:
            if part is not None:
                merged = merged.merge(Collector.from_bytes(part))
        return merged.to_bytes()

    def read_sql(self, agg: Any, column: str) -> str:
        """DuckDB SQL: the variance of the rows' collectors (an aggregate), as Druid's VARIANCE (sample, or
        population with `estimator: population`) reads a variance column."""
        return variance_sql(column, population=is_population(agg.params.estimator))


def is_population(estimator: str | None) -> bool:
    return estimator is not None and estimator.lower() == "population"  # Druid: equalsIgnoreCase


def _decoded(text: str) -> bytes:
    """A collector sent as input (`inputType: variance`): ValueError saying what is wrong."""
    data = base64_bytes(text, "a serialized variance collector")
    if len(data) != _FORMAT.size:
        raise ValueError(f"not a serialized variance collector ({_FORMAT.size} bytes: count, sum, nvariance), "
                         f"got {len(data)} bytes")
    return data


def _long_sql(blob: str, at: int) -> str:
    return f"CAST(('0x' || substr(hex({blob}), {2 * at - 1}, 16)) AS UBIGINT)"  # DuckDB's substr takes no BLOB


def _double_sql(blob: str, at: int) -> str:
    """The IEEE 754 double in 8 big-endian bytes of `blob`, in DuckDB SQL (it has no reinterpret cast)."""
    bits = _long_sql(blob, at)
    return (f"((1 - 2 * CAST(({bits} >> 63) AS DOUBLE)) * CASE WHEN (({bits} >> 52) & 2047) = 0 "
            f"THEN CAST(({bits} & 4503599627370495) AS DOUBLE) * pow(2, -1074) "
            f"ELSE (1 + CAST(({bits} & 4503599627370495) AS DOUBLE) / 4503599627370496) "
            f"* pow(2, CAST((({bits} >> 52) & 2047) AS INTEGER) - 1023) END)")


def variance_sql(column: str, population: bool) -> str:
    """The variance over a group's stored collectors: sum of nvariance plus the spread of the parts' means,
    n_i * (mean_i - mean)^2 = t_i^2/n_i - 2*mean*t_i + n_i*mean^2, summed: sum(t_i^2/n_i) - T^2/N."""
    n = f"CAST({_long_sql(column, 1)} AS DOUBLE)"
    t, m2 = _double_sql(column, 9), _double_sql(column, 17)
    total_n, total_t = f"sum({n})", f"sum({t})"
    spread = f"sum(CASE WHEN {n} > 0 THEN {t} * {t} / {n} ELSE 0 END) - {total_t} * {total_t} / {total_n}"
    divisor = total_n if population else f"({total_n} - 1)"
    return (f"CASE WHEN coalesce({total_n}, 0) = 0 THEN NULL WHEN {total_n} = 1 THEN 0.0 "
            f"ELSE greatest(sum({m2}) + {spread}, 0) / {divisor} END")
