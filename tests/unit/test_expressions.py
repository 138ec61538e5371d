"""Druid expressions, function by function: a valid call (and its null row), the wrong number of arguments
(refused when the spec is validated, not by the Spark job), and arguments of the wrong type (refused when the
spec is validated if the argument is a constant, else Druid's coercion) — never a raw pyarrow or Python
error. Parsing and checking are core's (`ingest_core.core.expressions`), evaluation the executor's."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest

from ingest_core.core.errors import SpecError
from ingest_core.core.expressions import FUNCTIONS
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


MATH_1 = {  # name: Java's value at -2.5 (the column d), via the same IEEE operations
    "acos": float("nan"), "asin": float("nan"), "atan": math.atan(-2.5),
    "cbrt": -(2.5 ** (1 / 3)), "cos": math.cos(-2.5), "cosh": math.cosh(-2.5), "cot": math.cos(-2.5) / math.sin(-2.5),
    "exp": math.exp(-2.5), "expm1": math.expm1(-2.5), "log": float("nan"), "log10": float("nan"),
    "log1p": float("nan"), "nextup": math.nextafter(-2.5, math.inf), "rint": -2.0, "signum": -1.0,
    "sin": math.sin(-2.5), "sinh": math.sinh(-2.5), "sqrt": float("nan"), "tan": math.tan(-2.5),
    "tanh": math.tanh(-2.5), "todegrees": -2.5 * 57.29577951308232, "toradians": -2.5 * 0.017453292519943295,
    "ulp": 4.440892098500626e-16, "getexponent": 1, "bitwisecomplement": 1,
    "bitwiseconvertdoubletolongbits": -4610560118520545280, "bitwiseconvertlongbitstodouble": 0.0,
}
MATH_2 = {  # name: Java's value at (d, 2) = (-2.5, 2)
    "atan2": math.atan2(-2.5, 2), "copysign": 2.5, "div": -1, "hypot": math.hypot(-2.5, 2),
    "max": 2.0, "min": -2.5, "nextafter": math.nextafter(-2.5, 2), "pow": 6.25, "remainder": -0.5, "scalb": -10.0,
    "bitwiseand": 2, "bitwiseor": -2, "bitwisexor": -4, "bitwiseshiftleft": -8, "bitwiseshiftright": -1,
}

VALID = {
    "concat": ("concat(s, 'x')", ["Ab x", None]),
    "format": ("format('%s=%d', s, n)", ["Ab =3", "null=null"]),
    "parse_long": ("parse_long(concat(n, '0'), 16)", [48, None]),
    "upper": ("upper(s)", ["AB ", None]),
    "lower": ("lower(s)", ["ab ", None]),
    "reverse": ("reverse(s)", [" bA", None]),
    "strlen": ("strlen(s)", [3, None]),
    "strpos": ("strpos(s, 'b')", [1, None]),
    "trim": ("trim(s)", ["Ab", None]),
    "ltrim": ("ltrim(concat(' ', s))", ["Ab ", None]),
    "rtrim": ("rtrim(s)", ["Ab", None]),
    "substring": ("substring(s, 0, 1)", ["A", None]),
    "left": ("left(s, 1)", ["A", None]),
    "right": ("right(s, 2)", ["b ", None]),
    "repeat": ("repeat(s, 2)", ["Ab Ab ", None]),
    "lpad": ("lpad(s, 5, '*')", ["**Ab ", None]),
    "rpad": ("rpad(s, 5, '*')", ["Ab **", None]),
    "replace": ("replace(s, 'b', 'c')", ["Ac ", None]),
    "regexp_replace": ("regexp_replace(s, '([a-z])', '<$1>')", ["A<b> ", None]),
    "contains_string": ("contains_string(s, 'b')", [1, 0]),
    "icontains_string": ("icontains_string(s, 'B')", [1, 0]),
    "nvl": ("nvl(s, 'z')", ["Ab ", "z"]),
    "coalesce": ("coalesce(s, null, 'z')", ["Ab ", "z"]),
    "if": ("if(n > 1, 'y', 'n')", ["y", "n"]),
    "case_searched": ("case_searched(n > 1, 'big', 'small')", ["big", "small"]),
    "case_simple": ("case_simple(n, 1, 'one', 3, 'three', 'other')", ["three", "other"]),
    "cast": ("cast(n, 'DOUBLE')", [3.0, None]),
    "abs": ("abs(d)", [2.5, None]),
    "floor": ("floor(d)", [-3.0, None]),
    "ceil": ("ceil(d)", [-2.0, None]),
    "round": ("round(d, 0)", [-3.0, None]),  # BigDecimal's HALF_UP, as Druid: halves away from zero
    "safe_divide": ("safe_divide(n, 0)", [None, None]),
    "pi": ("pi() + 0 * n", [math.pi, None]),
    "greatest": ("greatest(n, 5)", [5, 5]),  # nulls are ignored, as Druid's greatest does
    "least": ("least(n, 5)", [3, 5]),
    "isnull": ("isnull(s)", [0, 1]),
    "notnull": ("notnull(s)", [1, 0]),
    "like": ("like(s, 'A%')", [1, None]),
    "regexp_like": ("regexp_like(s, '^A')", [1, None]),
    "regexp_extract": ("regexp_extract(s, '(b)', 1)", ["b", None]),
    "timestamp": ("timestamp('2026-01-02T03:04:05Z')", [1767323045000, 1767323045000]),
    "unix_timestamp": ("unix_timestamp('2026-01-02T03:04:05Z')", [1767323045, 1767323045]),
    "timestamp_floor": ("timestamp_floor(t, 'PT1H')", [86_400_000 + 5 * 3_600_000, None]),
    "timestamp_ceil": ("timestamp_ceil(t, 'PT1H')", [86_400_000 + 6 * 3_600_000, None]),
    "timestamp_shift": ("timestamp_shift(t, 'PT1H', 2)", [HOUR_7 + 2 * 3_600_000, None]),
    "timestamp_extract": ("timestamp_extract(t, 'HOUR')", [5, None]),
    "timestamp_parse": ("timestamp_parse(s)", [None, None]),
    "timestamp_format": ("timestamp_format(t)", ["1970-01-02T05:07:00.000Z", None]),
    "ipv4_match": ("ipv4_match(s, '10.0.0.0/8')", [0, 0]),
    "ipv4_parse": ("ipv4_parse(n)", [3, None]),
    "ipv4_stringify": ("ipv4_stringify(n)", ["0.0.0.3", None]),
    "ipv6_match": ("ipv6_match(s, '::/0')", [0, 0]),
    "human_readable_binary_byte_format": ("human_readable_binary_byte_format(n * 1024)", ["3.00 KiB", None]),
    "human_readable_decimal_byte_format": ("human_readable_decimal_byte_format(n * 1000)", ["3.00 KB", None]),
    "human_readable_decimal_format": ("human_readable_decimal_format(n)", ["3", None]),
    "decode_base64_utf8": ("decode_base64_utf8(concat(s, '='))", None),  # 'Ab =' is not Base64: refused
    **{name: (f"{name}(d)", [value, None]) for name, value in MATH_1.items()},
    **{name: (f"{name}(d, 2)", [value, None]) for name, value in MATH_2.items()},
}
VALID["bitwiseconvertlongbitstodouble"] = ("bitwiseConvertLongBitsToDouble(bitwiseConvertDoubleToLongBits(d))",
                                           [-2.5, None])
VALID["decode_base64_utf8"] = ("decode_base64_utf8(replace(s, ' ', 'c='))", ["\x01\ufffd", None])  # bad UTF-8 replaced, as Java

WRONG_TYPE = {  # None: the call is refused with an ExpressionError naming it; else Druid's coercion's result
    # (numeric functions read text as a number, null when it is none; text beside numbers compares as text)
    "concat": ("concat(n, d)", ["3-2.5", None]),
    "format": ("format('%d', s)", ["%d; Ab ", "null"]),  # Java's IllegalFormatException: Druid's fallback
    "parse_long": ("parse_long(d)", [None, None]),
    "upper": ("upper(n)", ["3", None]),
    "lower": ("lower(n)", ["3", None]),
    "reverse": ("reverse(n)", None),  # Druid: needs a STRING argument
    "strlen": ("strlen(n)", [1, None]),
    "strpos": ("strpos(n, '3')", [0, None]),
    "trim": ("trim(n)", ["3", None]),
    "ltrim": ("ltrim(n)", ["3", None]),
    "rtrim": ("rtrim(n)", ["3", None]),
    "substring": ("substring(s, 'a', 1)", None),
    "left": ("left(n, 1)", None),
    "right": ("right(s, d)", None),  # Druid: needs a LONG as second argument
    "repeat": ("repeat(s, 'x')", None),
    "lpad": ("lpad(s, 'x', '*')", None),
    "rpad": ("rpad(s, 'x', '*')", None),
    "replace": ("replace(n, '3', '4')", ["4", None]),
    "regexp_replace": ("regexp_replace(s, '(', 'x')", None),
    "contains_string": ("contains_string(s, n)", None),
    "icontains_string": ("icontains_string(s, n)", None),
    "nvl": ("nvl(n, 'z')", ["3", "z"]),
    "coalesce": ("coalesce(n, 'z')", ["3", "z"]),
    "if": ("if(s, 1, 2)", [2, 2]),
    "case_searched": ("case_searched(s, 1, 2)", [2, 2]),
    "case_simple": ("case_simple(n, '3', 'three', 'other')", ["three", "other"]),
    "cast": ("cast(n, 'BOOL')", None),
    "round": ("round(d, 'x')", None),
    "safe_divide": ("safe_divide(s, 2)", [None, None]),
    "pi": ("pi(1)", None),
    "greatest": ("greatest(s, 5)", ["Ab ", "5"]),
    "least": ("least(s, n)", ["3", None]),
    "isnull": ("isnull(n)", [0, 1]),
    "notnull": ("notnull(n)", [1, 0]),
    "like": ("like(n, '3%')", [1, None]),
    "regexp_like": ("regexp_like(s, '(')", None),
    "regexp_extract": ("regexp_extract(s, '(b)', 3)", None),
    "timestamp": ("timestamp(s)", None),  # Druid's timestamp() throws on text that is no time
    "unix_timestamp": ("unix_timestamp(n)", None),  # and on a number
    "timestamp_floor": ("timestamp_floor(t, 'PT1X')", None),
    "timestamp_ceil": ("timestamp_ceil(t, 'PT1H', null, 'Mars/Olympus')", None),
    "timestamp_shift": ("timestamp_shift(t, 'PT1H', s)", [None, None]),
    "timestamp_extract": ("timestamp_extract(t, 'FOO')", None),
    "timestamp_parse": ("timestamp_parse(s, 'yyyy', 'nowhere')", None),
    "timestamp_format": ("timestamp_format(t, 'yyyy-MM-dd q')", None),
    "ipv4_match": ("ipv4_match(s, '10.0.0.0')", None),
    "ipv4_parse": ("ipv4_parse(d)", [None, None]),
    "ipv4_stringify": ("ipv4_stringify(s)", [None, None]),
    "ipv6_match": ("ipv6_match(s, '10.0.0.0/8')", None),
    "human_readable_binary_byte_format": ("human_readable_binary_byte_format(n, 4)", None),
    "human_readable_decimal_byte_format": ("human_readable_decimal_byte_format(s)", [None, None]),
    "human_readable_decimal_format": ("human_readable_decimal_format(n, -1)", None),
    "decode_base64_utf8": ("decode_base64_utf8(n)", None),  # '3' is not Base64
    **{name: (f"{name}(s)", [None, None]) for name in MATH_1},
    **{name: (f"{name}(s, 2)", [None, None]) for name in MATH_2},
    "abs": ("abs(s)", [None, None]),
    "floor": ("floor(s)", [None, None]),
    "ceil": ("ceil(s)", [None, None]),
}


def same(got: list, expected: list) -> bool:
    """Lists equal, floats to the last bit but NaN equal to NaN."""
    if len(got) != len(expected):
        return False
    for g, e in zip(got, expected):
        if isinstance(e, float) and isinstance(g, float) and math.isnan(e):
            if not math.isnan(g):
                return False
        elif isinstance(e, float) and isinstance(g, (int, float)):
            if g != pytest.approx(e, rel=1e-15, abs=0):
                return False
        elif g != e or type(g) is not type(e):
            return False
    return True


def test_every_function_is_covered():
    assert set(VALID) == set(FUNCTIONS) == set(WRONG_TYPE) == set(IMPLEMENTATIONS)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_a_valid_call_and_its_null_row(name):
    text, expected = VALID[name]
    got = evaluate(text)
    assert same(got, expected), got


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_a_wrong_type_is_coerced_or_refused_by_name_never_a_raw_error(name):
    text, expected = WRONG_TYPE[name]
    if expected is None:
        with pytest.raises(ExpressionError) as info:
            evaluate(text)
        assert type(info.value) is ExpressionError
        assert name in str(info.value) or "not supported" in str(info.value)
    else:
        got = evaluate(text)
        assert same(got, expected), got


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
