"""Druid's ingestion aggregators: one class per type (`base.AggregatorType`), registered here by Druid's type name.

Pure description (no I/O): the spec binder parses and checks a metricsSpec entry with its type's class
(`spec.Aggregator`), the executors build partial rows from it (`executor.rollup`), Spark merges them
(`spark.rollup`), compaction combines them again (`spark.compaction`) and SQL reads them (`read_sql`). No other
module knows a type by its name: each asks the registry (`of`) and the class it returns.

    type                          class            input    stored as
    count                         Count            -        long
    long/double/floatSum          (Long)Sum        kind     kind (a longSum exact, never wrapped)
    long/double/floatMin|Max      Min, Max         kind     kind
    long/double/float/stringFirst|Last  First, Last  kind   kind (strings: at most maxStringBytes UTF-8 bytes)
    long/double/float/stringAny   AnyValue         kind     kind
    thetaSketch                   ThetaSketch      string   binary: a compact ordered theta sketch
    HLLSketchBuild / HLLSketchMerge,
    hyperUnique, cardinality      HllSketch        string   binary: a compact HLL sketch of tgtHllType
    quantilesDoublesSketch        QuantilesSketch  double   binary: a classic quantiles doubles sketch
    KllDoublesSketch / KllFloatsSketch  KllSketch  double / float  binary: a KLL sketch
    expression                    ExpressionAggregator  fields  initialValue's type: fold, then combine
    variance                      Variance         inputType  binary: Druid's variance collector (count, sum, m2)

`filtered` wraps any of them (`spec.Aggregator`). Sketches are Apache DataSketches' standard serialized bytes
(what Druid's Java library writes), so Druid, Spark's sketch functions, Trino and `datasketches` read them.
"""

from __future__ import annotations

from ingest_core.core.aggregators.base import (
    DOUBLE,
    LIST,
    LONG,
    STRING_DEFAULT_MAX_BYTES,
    REGISTRY,
    TEXT,
    AggregatorType,
    Evaluator,
    Orders,
    SerializedInput,
    of,
    register,
)
from ingest_core.core.aggregators.expression import ExpressionAggregator
from ingest_core.core.aggregators.numeric import Count, LongSum, Max, Min, Sum
from ingest_core.core.aggregators.ordered import AnyValue, First, Last
from ingest_core.core.aggregators.sketches import (
    HllSketch,
    KllSketch,
    QuantilesSketch,
    SketchParams,
    ThetaSketch,
)
from ingest_core.core.aggregators.variance import Variance

__all__ = ["DOUBLE", "LIST", "LONG", "TEXT", "STRING_DEFAULT_MAX_BYTES", "AggregatorType", "Evaluator", "Orders",
           "SerializedInput", "SketchParams", "REGISTRY", "of", "register", "SUPPORTED_AGGREGATORS", "REFUSED_AGGREGATORS"]

register(Count, "count")
for _kind in ("long", "double", "float"):
    _cap = _kind.capitalize()
    register(LongSum if _kind == "long" else Sum, f"{_kind}Sum", _kind)
    register(Min, f"{_kind}Min", _kind)
    register(Max, f"{_kind}Max", _kind)
for _kind in ("long", "double", "float", "string"):
    register(First, f"{_kind}First", _kind)
    register(Last, f"{_kind}Last", _kind)
    register(AnyValue, f"{_kind}Any", _kind)
register(ThetaSketch, "thetaSketch", "string")
for _name in ("HLLSketchBuild", "HLLSketchMerge", "hyperUnique", "cardinality"):
    register(HllSketch, _name, "string")
register(QuantilesSketch, "quantilesDoublesSketch", "double")
register(KllSketch, "KllDoublesSketch", "double")
register(KllSketch, "KllFloatsSketch", "float")
register(ExpressionAggregator, "expression")
register(Variance, "variance", "double")

SUPPORTED_AGGREGATORS = tuple(REGISTRY) + ("filtered",)

# refused by name, with what to do instead
REFUSED_AGGREGATORS = {
    "javascript": "JavaScript is disabled here as in a default Druid: compute the value with a "
                  "transformSpec.transforms expression and aggregate it with a typed aggregator",
}
