"""Druid's documented examples: their records (tests/data/druid_docs, from apache/druid), the transform
tutorial's spec and printed rows, and how answers are compared with printed rows; used by
tests/integration/test_druid_docs.py and, through the real DAG, tests/system/test_dag.py; the rollup tutorial's rows
through Druid's clients by tests/system/test_permissions.py."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent / "data" / "druid_docs"


def records(name: str) -> list[bytes]:
    """An example's records, one per line, byte for byte as Druid ships them."""
    return [line.encode() for line in (DOCS / name).read_text().splitlines() if line.strip()]


def same(value: Any) -> Any:
    """A value as compared: doubles to 12 significant digits (a sum's last bit depends on its order)."""
    if isinstance(value, float):
        return float(f"{value:.12g}") if math.isfinite(value) else value
    return value


def table(columns: tuple[str, ...], *values: tuple) -> list[dict]:
    """A table as the documentation prints it: its columns, then its rows."""
    return [dict(zip(columns, row)) for row in values]


def rows(answer: list[dict], *, ordered: bool = False) -> list[dict]:
    """The answer's rows (`SELECT *` has no order in SQL: compared as a multiset unless the query orders)."""
    out = [{k: same(v) for k, v in r.items()} for r in answer]
    return out if ordered else sorted(out, key=lambda r: json.dumps(r, sort_keys=True))


# tutorial-rollup.md

ROLLUP_SCHEMA = {
    "dataSource": "rollup-tutorial",
    "dimensionsSpec": {"dimensions": ["srcIP", "dstIP"]},
    "timestampSpec": {"column": "timestamp", "format": "iso"},
    "metricsSpec": [{"type": "count", "name": "count"},
                    {"type": "longSum", "name": "packets", "fieldName": "packets"},
                    {"type": "longSum", "name": "bytes", "fieldName": "bytes"}],
    "granularitySpec": {"type": "uniform", "segmentGranularity": "week", "queryGranularity": "minute",
                        "intervals": ["2018-01-01/2018-01-03"], "rollup": True},
}
ROLLUP_ROWS = table(  # dsql> select * from "rollup-tutorial";
    ("__time", "bytes", "count", "dstIP", "packets", "srcIP"),
    ("2018-01-01T01:01:00.000Z", 35937, 3, "2.2.2.2", 286, "1.1.1.1"),
    ("2018-01-01T01:02:00.000Z", 366260, 2, "2.2.2.2", 415, "1.1.1.1"),
    ("2018-01-01T01:03:00.000Z", 10204, 1, "2.2.2.2", 49, "1.1.1.1"),
    ("2018-01-02T21:33:00.000Z", 100288, 2, "8.8.8.8", 161, "7.7.7.7"),
    ("2018-01-02T21:35:00.000Z", 2818, 1, "8.8.8.8", 12, "7.7.7.7"))


# tutorial-transform-spec.md

TRANSFORM_SCHEMA = {
    "dataSource": "transform-tutorial",
    "timestampSpec": {"column": "timestamp", "format": "iso"},
    "dimensionsSpec": {"dimensions": ["animal", {"name": "location", "type": "long"}]},
    "metricsSpec": [{"type": "count", "name": "count"},
                    {"type": "longSum", "name": "number", "fieldName": "number"},
                    {"type": "longSum", "name": "triple-number", "fieldName": "triple-number"}],
    "granularitySpec": {"type": "uniform", "segmentGranularity": "week", "queryGranularity": "minute",
                        "intervals": ["2018-01-01/2018-01-03"], "rollup": True},
    "transformSpec": {
        "transforms": [{"type": "expression", "name": "animal", "expression": "concat('super-', animal)"},
                       {"type": "expression", "name": "triple-number", "expression": "number * 3"}],
        "filter": {"type": "or", "fields": [
            {"type": "selector", "dimension": "animal", "value": "super-mongoose"},
            {"type": "selector", "dimension": "triple-number", "value": "300"},
            {"type": "selector", "dimension": "location", "value": "3"}]}},
}
TRANSFORM_ROWS = table(  # dsql> select * from "transform-tutorial";
    ("__time", "animal", "count", "location", "number", "triple-number"),
    ("2018-01-01T05:01:00.000Z", "super-mongoose", 1, 2, 200, 600),
    ("2018-01-01T06:01:00.000Z", "super-snake", 1, 3, 300, 900),
    ("2018-01-01T07:01:00.000Z", "super-octopus", 1, 1, 100, 300))
