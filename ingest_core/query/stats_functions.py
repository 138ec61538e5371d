"""Druid SQL's druid-stats aggregates: VARIANCE / VAR_SAMP, VAR_POP, STDDEV / STDDEV_SAMP, STDDEV_POP.

As in Druid, each reads either numbers (the variance of the values) or a `variance` metric's stored collectors
(merged as Druid merges them, Chan et al.: `core.aggregators.variance`), so the variance of a rolled-up column is
the variance of the rows it was built from. DuckDB takes no aggregate UDFs from Python: the aggregate runs as
`list(x)` handed to `druid_variance` (FILTER and OVER kept on the `list`, as for the sketch aggregates). Druid's
results: no value gives null, one value gives 0; VARIANCE and STDDEV are the sample's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
from sqlglot import exp

from ingest_core.core.aggregators.variance import Collector
from ingest_core.query.arguments import Rewrite, arity, call
from ingest_core.query.sketch_functions import aggregate_row

# Druid's name -> (population, standard deviation); sqlglot reads VARIANCE_POP as VAR_POP, VAR_SAMP as VARIANCE
KINDS = {"VARIANCE": (False, False), "VAR_SAMP": (False, False), "VAR_POP": (True, False),
         "STDDEV": (False, True), "STDDEV_SAMP": (False, True), "STDDEV_POP": (True, True)}
NODES = {exp.Variance: "VARIANCE", exp.VariancePop: "VAR_POP", exp.Stddev: "STDDEV", exp.StddevSamp: "STDDEV_SAMP",
         exp.StddevPop: "STDDEV_POP"}


def collector_of(values: list[Any] | None) -> Collector:
    """The collector of a group's values: numbers folded in, stored collectors (bytes) merged."""
    numbers = [float(v) for v in values or () if v is not None and not isinstance(v, (bytes, bytearray))]
    merged = Collector()
    if numbers:
        a = np.asarray(numbers, dtype=np.float64)
        merged = Collector(len(a), float(a.sum()), float(((a - a.mean()) ** 2).sum()))
    for v in values or ():
        if isinstance(v, (bytes, bytearray)):
            if len(v) != 24:
                raise ValueError(f"VARIANCE reads numbers or a variance metric's collectors (24 bytes), not a "
                                    f"{len(v)}-byte value: is the column another metric's?")
            merged = merged.merge(Collector.from_bytes(bytes(v)))
    return merged


@aggregate_row
def variance(values, population, stddev):
    result = collector_of(values).variance(bool(population))
    return None if result is None else math.sqrt(result) if stddev else result


def _rewrite(fn: str, args: list) -> exp.Expression:
    arity(fn, args, 1, 1)
    population, stddev = KINDS[fn]
    return call("druid_variance", call("list", args[0]), exp.Boolean(this=population), exp.Boolean(this=stddev))


AGGREGATES = set(KINDS)
REWRITES: dict[str, Rewrite] = {name: _rewrite for name in KINDS}
FUNCTIONS = {"druid_variance": (variance, pa.float64(), "DOUBLE")}
