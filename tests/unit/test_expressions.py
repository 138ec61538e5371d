"""Druid expressions, function by function: a valid call (and its null row), the wrong number of arguments
(refused when the spec is validated, not by the Spark job), and arguments of the wrong type (refused when the
spec is validated if the argument is a constant, else Druid's coercion) — never a raw pyarrow or Python
error. Parsing and checking are core's (`ingest_core.core.expressions`), evaluation the executor's."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ingest_core.core.errors import SpecError
from ingest_core.core.expressions import APPLY_FUNCTIONS, ARRAY_FUNCTIONS, FUNCTIONS, JSON_FUNCTIONS
from ingest_core.core.spec import parse_spec
from ingest_core.executor.expressions import (
    IMPLEMENTATIONS,
    ExpressionError,
    compile_expression,
    evaluate_to_array,
)

# row 0 holds values, row 1 nulls
HOUR_7 = 86_400_000 + 5 * 3_600_000 + 7 * 60_000  # 1970-01-02T05:07:00Z
COLUMNS = {"s": pa.array(["Ab ", None]), "n": pa.array([3, None], pa.int64()), "d": pa.array([-2.5, None]),
           "t": pa.array([HOUR_7, None], pa.int64())}


def evaluate(text: str) -> list:
    return evaluate_to_array(compile_expression(text), COLUMNS, 2).to_pylist()


VALID = {
    "concat": ("concat(s, 'x')", ["Ab x", None]),
    "upper": ("upper(s)", ["AB ", None]),
    "lower": ("lower(s)", ["ab ", None]),
    "strlen": ("strlen(s)", [3, None]),
    "trim": ("trim(s)", ["Ab", None]),
    "ltrim": ("ltrim(concat(' ', s))", ["Ab ", None]),
    "rtrim": ("rtrim(s)", ["Ab", None]),
    "substring": ("substring(s, 0, 1)", ["A", None]),
    "replace": ("replace(s, 'b', 'c')", ["Ac ", None]),
    "nvl": ("nvl(s, 'z')", ["Ab ", "z"]),
    "if": ("if(n > 1, 'y', 'n')", ["y", "n"]),
    "case_searched": ("case_searched(n > 1, 'big', 'small')", ["big", "small"]),
    "cast": ("cast(n, 'DOUBLE')", [3.0, None]),
    "abs": ("abs(d)", [2.5, None]),
    "floor": ("floor(d)", [-3.0, None]),
    "ceil": ("ceil(d)", [-2.0, None]),
    "round": ("round(d, 0)", [-3.0, None]),  # BigDecimal's HALF_UP, as Druid: halves away from zero
    "safe_divide": ("safe_divide(n, 0)", [None, None]),
    "greatest": ("greatest(n, 5)", [5, 5]),  # nulls are ignored, as Druid's greatest does
    "least": ("least(n, 5)", [3, 5]),
    "isnull": ("isnull(s)", [0, 1]),
    "notnull": ("notnull(s)", [1, 0]),
    "like": ("like(s, 'A%')", [1, None]),
    "regexp_like": ("regexp_like(s, '^A')", [1, None]),
    "regexp_extract": ("regexp_extract(s, '(b)', 1)", ["b", None]),
    "timestamp": ("timestamp('2026-01-02T03:04:05Z')", [1767323045000, 1767323045000]),
    "timestamp_floor": ("timestamp_floor(t, 'PT1H')", [86_400_000 + 5 * 3_600_000, None]),
    "timestamp_extract": ("timestamp_extract(t, 'HOUR')", [5, None]),
}

WRONG_TYPE = {  # None: the call is refused with an ExpressionError naming it; else Druid's coercion's result
    # (numeric functions read text as a number, null when it is none; text beside numbers compares as text)
    "concat": ("concat(n, d)", ["3-2.5", None]),
    "upper": ("upper(n)", ["3", None]),
    "lower": ("lower(n)", ["3", None]),
    "strlen": ("strlen(n)", [1, None]),
    "trim": ("trim(n)", ["3", None]),
    "ltrim": ("ltrim(n)", ["3", None]),
    "rtrim": ("rtrim(n)", ["3", None]),
    "substring": ("substring(s, 'a', 1)", None),
    "replace": ("replace(n, '3', '4')", ["4", None]),
    "nvl": ("nvl(n, 'z')", ["3", "z"]),
    "if": ("if(s, 1, 2)", [2, 2]),
    "case_searched": ("case_searched(s, 1, 2)", [2, 2]),
    "cast": ("cast(n, 'BOOL')", None),
    "abs": ("abs(s)", [None, None]),
    "floor": ("floor(s)", [None, None]),
    "ceil": ("ceil(s)", [None, None]),
    "round": ("round(d, 'x')", None),
    "safe_divide": ("safe_divide(s, 2)", [None, None]),
    "greatest": ("greatest(s, 5)", ["Ab ", "5"]),
    "least": ("least(s, n)", ["3", None]),
    "isnull": ("isnull(n)", [0, 1]),
    "notnull": ("notnull(n)", [1, 0]),
    "like": ("like(n, '3%')", [1, None]),
    "regexp_like": ("regexp_like(s, '(')", None),
    "regexp_extract": ("regexp_extract(s, '(b)', 3)", None),
    "timestamp": ("timestamp(s)", [None, None]),  # text that is no time: null, as Druid's timestamp()
    "timestamp_floor": ("timestamp_floor(t, 'PT1X')", None),
    "timestamp_extract": ("timestamp_extract(t, 'FOO')", None),
}


# arrays, lambdas and JSON: tests/unit/test_expression_arrays.py
NON_SCALAR = set(ARRAY_FUNCTIONS) | set(APPLY_FUNCTIONS) | set(JSON_FUNCTIONS)
SCALAR = set(FUNCTIONS) - NON_SCALAR


def test_every_function_is_covered():
    assert set(VALID) == SCALAR == set(WRONG_TYPE) == set(IMPLEMENTATIONS) - NON_SCALAR


@pytest.mark.parametrize("name", sorted(SCALAR))
def test_a_valid_call_and_its_null_row(name):
    text, expected = VALID[name]
    assert evaluate(text) == expected


@pytest.mark.parametrize("name", sorted(SCALAR))
def test_a_wrong_type_is_coerced_or_refused_by_name_never_a_raw_error(name):
    text, expected = WRONG_TYPE[name]
    if expected is None:
        with pytest.raises(ExpressionError) as info:
            evaluate(text)
        assert type(info.value) is ExpressionError
        assert name in str(info.value) or "not supported" in str(info.value)
    else:
        assert evaluate(text) == expected


def _arity_range(name: str) -> tuple[int, int | None]:
    fn = FUNCTIONS[name]
    fewest = sum(1 for p in fn.params if not p.optional)
    return (max(fewest, 1), None) if fn.variadic is not None else (fewest, len(fn.params))


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_the_wrong_number_of_arguments_is_refused_when_compiled(name):
    fewest, most = _arity_range(name)
    counts = [most + 1] if most is not None else []
    if fewest > 0:
        counts.append(fewest - 1)
    assert counts
    for count in counts:
        text = f"{name}({', '.join(['n'] * count)})"
        with pytest.raises(ExpressionError, match=rf"{name}\(\) takes .* got {count}"):
            compile_expression(text)


def test_concat_takes_one_or_more_arguments():
    assert evaluate("concat(s)") == ["Ab ", None]
    assert evaluate("concat(s, s, s)") == ["Ab Ab Ab ", None]


@pytest.mark.parametrize("text,expected", [
    ("n + 1", [4, None]), ("n - 1", [2, None]), ("n * 2", [6, None]), ("d * 2", [-5.0, None]),
    ("n / 2", [1, None]), ("n % 2", [1, None]), ("-n", [-3, None]), ("!n", [0, None]),
    ("n == 3", [1, None]), ("s == 'Ab '", [1, None]), ("n != 3", [0, None]), ("n >= 3", [1, None]),
    ("n > 1 && n < 5", [1, None]), ("n < 1 || n > 2", [1, None]),
    ("1 + 2 * 3", [7, 7]), ("(1 + 2) * 3", [9, 9]), ("-2 * 3", [-6, -6]), ("1 + 2 > 2", [1, 1]),
])
def test_operators_with_nulls_and_precedence(text, expected):
    assert evaluate(text) == expected


@pytest.mark.parametrize("text", ["upper(", "upper(s", "nope(s)", "1 +", "'unterminated", "s s", ")", ""])
def test_malformed_text_is_an_expression_error(text):
    with pytest.raises(ExpressionError):
        compile_expression(text)


def test_spec_validation_reports_a_wrong_arity():
    raw = {"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "wiki", "timestampSpec": {"column": "ts"}, "dimensionsSpec": {"dimensions": ["a"]},
                       "transformSpec": {"transforms": [{"type": "expression", "name": "u",
                                                          "expression": "upper(a, b)"}]}},
        "ioConfig": {"topic": "t", "consumerProperties": {"bootstrap.servers": "localhost:9092"}}}}
    with pytest.raises(SpecError, match=r"transform 'u': in expression 'upper\(a, b\)': upper\(\) takes 1 argument, got 2"):
        parse_spec(raw)
