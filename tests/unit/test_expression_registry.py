"""The function registry (`ingest_core.core.expression.functions`) is the one place a function is defined: every
entry's implementation exists in the evaluator, no name is registered twice, and every example it carries from
Druid's documentation gives Druid's value through the real parse, check, compile and evaluate path."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest

from ingest_core.core.expression.function import Function
from ingest_core.core.expression.functions import FUNCTIONS, SECTIONS
from ingest_core.executor.expression.apply import Apply
from ingest_core.executor.expressions import compile_expression, evaluate_to_array, implementation

EXAMPLES = [(fn.name, example) for fn in FUNCTIONS.values() for example in fn.examples]


def _same(got: object, expected: object) -> bool:
    if isinstance(expected, float) and isinstance(got, float):
        return (math.isnan(got) and math.isnan(expected)) or got == expected
    return got == expected and type(got) is type(expected)


@pytest.mark.parametrize("name,example", EXAMPLES, ids=[e.text for _, e in EXAMPLES])
def test_every_documented_example_gives_druids_value(name, example):
    compiled = compile_expression(example.text)
    assert name in example.text.lower(), f"{name}'s example {example.text!r} does not call it"
    got = evaluate_to_array(compiled, {}, 1).to_pylist()
    assert len(got) == 1 and _same(got[0], example.result), (example.text, got, example.source)


def test_there_are_documented_examples_from_druids_pages():
    assert {e.source for _, e in EXAMPLES} >= {"math-expr.md"}
    assert len(EXAMPLES) >= 15


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_every_entry_names_its_implementation_in_the_evaluator(name):
    fn = FUNCTIONS[name]
    code = implementation(name)
    assert isinstance(code, Apply) if fn.takes_lambda else callable(code), (fn.implementation, code)


def test_no_function_is_registered_twice_nor_outside_a_section():
    names = [fn.name for section in SECTIONS for fn in section.FUNCTIONS]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert set(names) == set(FUNCTIONS)
    assert all(isinstance(fn, Function) and fn.name == fn.name.lower() for fn in FUNCTIONS.values())


def test_a_function_is_called_by_its_entry_whatever_the_case_of_its_name():
    out = evaluate_to_array(compile_expression("bitwiseAnd(a, 6) + BITWISEAND(a, 3)"), {"a": pa.array([5])}, 1)
    assert out.to_pylist() == [4 + 1]
