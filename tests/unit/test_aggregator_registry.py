"""The aggregator registry (`core.aggregators`): every Druid type is one registered class, and no other product
module dispatches on an aggregator's type name (issue 45: adding a type is one module and a registration line)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ingest_core.core import aggregators as A
from ingest_core.core.aggregators.base import AggregatorType

ROOT = Path(__file__).resolve().parents[2] / "ingest_core"
# an aggregator's type or family compared with one of their names: `a.op == "sum"`, `params.op in ("quantiles",
# "kll")`, `agg_type == "count"` (other `op`s, the expression language's operators, compare other names)
NAMES = ({t.op for t in A.REGISTRY.values()} | set(A.REGISTRY) | {"filtered"}) - {
    "expression"}  # also a transform's type (`transformSpec.transforms`)
COMPARED = re.compile(r"\b(?:op|agg_type|type)\s*(?:==|!=|\bin\b|\bnot in\b)\s*\(?\s*[\"']([\w]+)[\"']")


def dispatches(line: str) -> bool:
    return any(m.group(1) in NAMES for m in COMPARED.finditer(line))


def test_every_registered_type_is_an_instance_of_its_class_with_its_druid_name():
    assert {"count", "longSum", "doubleFirst", "stringAny", "thetaSketch", "HLLSketchMerge", "cardinality",
            "quantilesDoublesSketch", "KllFloatsSketch"} <= set(A.REGISTRY)
    for name, t in A.REGISTRY.items():
        assert isinstance(t, AggregatorType) and t.name == name and A.of(name) is t
        assert t.op, name
        # exactly one way to compute its row step
        ways = [t.counts_rows, t.splits_long_sum, t.order is not None, t.builds_in_python,
                t.hash_aggregate is not None and not t.splits_long_sum]
        assert sum(ways) == 1, (name, ways)


ALLOWED = ("core/aggregators/", "core/spec/metrics.py")  # the registry; `filtered`, the wrapper, in the spec


def test_no_product_module_outside_the_registry_dispatches_on_an_aggregator_type():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if dispatches(line.split("#")[0]) and not rel.startswith(ALLOWED):
                found.append(f"{rel}:{number}: {line.strip()}")
    assert found == [], "ask the registry (core.aggregators) instead:\n" + "\n".join(found)


@pytest.mark.parametrize("line", ['if a.op == "count":', 'elif a.op in ("first", "last"):',
                                  'if params.op == "theta":', 'if op == "hll":'])
def test_the_dispatch_pattern_finds_what_the_registry_replaced(line):
    assert dispatches(line)
