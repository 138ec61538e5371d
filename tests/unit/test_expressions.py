"""Druid expressions, function by function: a valid call (and its null row), the wrong number of arguments
(refused when the spec is validated, not by the Spark job), and arguments of the wrong type (refused when the
spec is validated if the argument is a constant, else Druid's coercion) — never a raw pyarrow or Python
error. Parsing and checking are core's (`ingest_core.core.expressions`), evaluation the executor's."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import pyarrow as pa
import pytest

from ingest_core.core.errors import SpecError
from ingest_core.core.expressions import APPLY_FUNCTIONS, ARRAY_FUNCTIONS, FUNCTIONS, JSON_FUNCTIONS, parse_expression
from ingest_core.core.spec import parse_spec
from ingest_core.executor.expressions import (
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


# arrays, lambdas and JSON: tests/unit/test_expression_arrays.py
NON_SCALAR = set(ARRAY_FUNCTIONS) | set(APPLY_FUNCTIONS) | set(JSON_FUNCTIONS)
SCALAR = set(FUNCTIONS) - NON_SCALAR


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
    assert set(VALID) == SCALAR == set(WRONG_TYPE)


@pytest.mark.parametrize("name", sorted(SCALAR))
def test_a_valid_call_and_its_null_row(name):
    text, expected = VALID[name]
    got = evaluate(text)
    assert same(got, expected), got


@pytest.mark.parametrize("name", sorted(SCALAR))
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


# Druid's documented examples (docs/querying/math-expr.md) and the expected values of Druid's own tests
# (processing/src/test/java/org/apache/druid/math/expr/FunctionTest.java), with SQL-compatible nulls, each
# evaluated through the real compile and evaluate path on a one-row chunk.
T = 1767323045123  # 2026-01-02T03:04:05.123Z, a Friday
DRUID_EXAMPLES = [
    # math-expr.md
    ("human_readable_binary_byte_format(1048576)", "1.00 MiB"), ("human_readable_binary_byte_format(1048576, 3)", "1.000 MiB"),
    ("human_readable_decimal_byte_format(1000000)", "1.00 MB"), ("human_readable_decimal_byte_format(1000000, 3)", "1.000 MB"),
    ("human_readable_decimal_format(1000000)", "1.00 M"), ("human_readable_decimal_format(1000000, 3)", "1.000 M"),
    ("human_readable_binary_byte_format(1.0/0.0)", "8.00 EiB"), ("human_readable_binary_byte_format(0.0/0.0)", "0 B"),
    ("ipv4_match('192.168.0.1', '192.168.0.0/16')", 1), ("ipv4_match(3232235521, '192.168.0.0/16')", 1),
    ("ipv4_match('10.0.0.1', '192.168.0.0/16')", 0), ("ipv4_match('not an address', '192.168.0.0/16')", 0),
    ("ipv4_parse('192.168.0.1')", 3232235521), ("ipv4_parse(3232235521)", 3232235521), ("ipv4_parse('1.2.3')", None),
    ("ipv4_stringify(3232235521)", "192.168.0.1"), ("ipv4_stringify('192.168.0.1')", "192.168.0.1"),
    ("ipv4_stringify(-1)", None), ("ipv4_parse('3232235521')", None), ("ipv4_parse(1.5)", None),
    ("ipv4_match('3232235521', '192.168.0.0/16')", 0), ("ipv4_match('192.168.0.0', '192.168.0.0/16')", 1),
    ("ipv4_match('192.168.255.255', '192.168.0.0/16')", 1), ("ipv4_stringify('1.2.3')", None),
    ("ipv6_match('75e9:efa4:29c6:85f6::232c', '75e9:efa4:29c6:85f6::/64')", 1),
    ("ipv6_match('75e9:efa4:29c6:85f7::232c', '75e9:efa4:29c6:85f6::/64')", 0),
    # FunctionTest.java
    ("safe_divide(3, 1)", 3), ("safe_divide(4.5, 2)", 2.25), ("safe_divide(3, 0)", None), ("safe_divide(1, 0.0)", None),
    ("safe_divide(0.0/0.0, 0.0)", None), ("safe_divide(0, 0.0/0.0)", 0.0), ("safe_divide(0, 9223372036854775807)", 0),
    ("safe_divide(9223372036854775807, 0)", None), ("safe_divide(0.0, 1.0/0.0)", 0.0), ("safe_divide(0, 0)", None),
    ("bitwiseAnd(3, 1)", 1), ("bitwiseAnd(2, 1)", 0), ("bitwiseOr(3, 1)", 3), ("bitwiseOr(2, 1)", 3),
    ("bitwiseXor(3, 1)", 2), ("bitwiseXor(2, 1)", 3), ("bitwiseShiftLeft(2, 1)", 4), ("bitwiseShiftRight(2, 1)", 1),
    ("bitwiseAnd(bitwiseComplement(1), 7)", 6), ("bitwiseComplement(1)", -2),
    ("bitwiseConvertDoubleToLongBits(1.0)", 4607182418800017408),
    ("bitwiseConvertLongBitsToDouble(4607182418800017408)", 1.0), ("bitwiseAnd(3.9, 1)", 1),
    ("bitwiseAnd('2', '1')", None), ("bitwiseAnd(3, '1')", 1), ("bitwiseAnd(2, null)", None),
    ("bitwiseComplement('1')", None), ("bitwiseComplement(null)", None), ("bitwiseOr(2.345, 1)", 3),
    ("bitwiseOr(2, 1.3)", 3), ("bitwiseAnd(2.345, 2.0)", 2),
    ("bitwiseAnd(bitwiseConvertDoubleToLongBits(2.345), bitwiseConvertDoubleToLongBits(2.0))", 4611686018427387904),
    ("bitwiseConvertLongBitsToDouble(bitwiseAnd(bitwiseConvertDoubleToLongBits(2.345), "
     "bitwiseConvertDoubleToLongBits(2.0)))", 2.0),
    ("bitwiseConvertDoubleToLongBits(2.0)", 4611686018427387904),
    ("bitwiseConvertDoubleToLongBits(bitwiseConvertDoubleToLongBits(2.0))", 4886405595696988160),
    ("bitwiseConvertLongBitsToDouble(bitwiseConvertLongBitsToDouble(4611686018427387904))", 1.0e-323),
    ("bitwiseConvertLongBitsToDouble('1')", None),  # ('wat'), a constant that is no number, is refused first
    ("bitwiseConvertDoubleToLongBits('1.0')", None), ("bitwiseConvertDoubleToLongBits(null)", None),
    ("repeat('hello', 2)", "hellohello"), ("repeat('hello', -1)", None),
    ("decode_base64_utf8('aGVsbG8=')", "hello"), ("decode_base64_utf8('eyJ0ZXN0IjogMX0=')", '{"test": 1}'),
    ("decode_base64_utf8('')", ""),
    ("decode_base64_utf8('SGVsbG8gV29ybGQhCg==')", "Hello World!\n"),  # sql-functions.md's example
    ("greatest(2, 0)", 2), ("greatest(34.0, 3.1, 5.0, 767.0)", 767.0), ("greatest('B', 'foo', 'A')", "foo"),
    ("greatest(-1, 3.1, 'A')", "A"), ("greatest(-1, 3.1)", 3.1), ("greatest(1, 'A')", "A"),
    ("greatest(1, null, 'A')", "A"), ("least(2, 0)", 0), ("least(34.0, 3.1, 5.0, 767.0)", 3.1),
    ("least('B', 'foo', 'A')", "A"), ("least(-1, 3.1, 'A')", "-1"), ("least(-1, 3.1)", -1.0), ("least(1, 'A')", "1"),
    ("least(1, null, 'A')", "1"), ("least(null, null)", None),
    ("round(2)", 2), ("round(2, 2)", 2), ("round(2, -1)", 0), ("round(34.56)", 35.0), ("round(34.56, 2)", 34.56),
    ("round(34.56, 1)", 34.6), ("round(34.56, -1)", 30.0), ("round(12.34, 1)", 12.3), ("round(12.34, -1)", 10.0),
    ("round(0.0/0.0, 5)", 0.0), ("round(1.0/0.0, 4)", 1.7976931348623157e308),
    ("round(-1.0/0.0, -5)", -1.7976931348623157e308), ("round(null)", None),
    ("human_readable_binary_byte_format(-1024)", "-1.00 KiB"), ("human_readable_binary_byte_format(1024*1024*1024)", "1.00 GiB"),
    ("human_readable_binary_byte_format(1024*1024*1024*1024*1024)", "1.00 PiB"),
    ("human_readable_decimal_byte_format(-1000)", "-1.00 KB"), ("human_readable_decimal_byte_format(1000*1000*1000*1000)", "1.00 TB"),
    ("human_readable_decimal_format(-1000)", "-1.00 K"), ("human_readable_decimal_format(1000*1000*1000)", "1.00 G"),
    ("human_readable_binary_byte_format(1024, 0)", "1 KiB"), ("human_readable_binary_byte_format(1024*1024, 1)", "1.0 MiB"),
    ("human_readable_decimal_byte_format(1234, 0)", "1 KB"), ("human_readable_decimal_byte_format(1234*1000, 1)", "1.2 MB"),
    ("human_readable_decimal_byte_format(1234*1000*1000, 2)", "1.23 GB"),
    ("human_readable_decimal_byte_format(1234*1000*1000*1000, 3)", "1.234 TB"),
    ("human_readable_decimal_format(1234, 0)", "1 K"), ("human_readable_decimal_format(1234*1000*1000*1000, 3)", "1.234 T"),
    ("human_readable_binary_byte_format(12.34)", "12 B"), ("human_readable_binary_byte_format(-1.0/0.0)", "-8.00 EiB"),
    ("human_readable_binary_byte_format(0.0)", "0 B"), ("human_readable_binary_byte_format(null)", None),
    ("lpad('foo', 5, 'foo')", "fofoo"), ("lpad('foo', 5, 2)", "22foo"), ("lpad('foo', 5, 3.1)", "3.foo"),
    ("lpad(2, 5, 'foo')", "foof2"), ("lpad(3.1, 5, 2)", "223.1"), ("rpad('foo', 5, 3.1)", "foo3."),
    ("rpad(2, 5, 'foo')", "2foof"), ("lpad('\U0001F600', 3, 'x')", "x\U0001F600"),  # Java counts UTF-16 units ("rpad(3.1, 5, 2)", "3.122"), ("rpad('foo', -1, 'ab')", ""),
    ("strpos('foo', 'o')", 1), ("strpos('foo', 'o', 0)", 1), ("strpos('foo', 'o', 1)", 1), ("strpos('foo', 'o', 2)", 2),
    ("strpos('foo', 'o', 3)", -1), ("strpos('foo', '')", 0), ("strpos('foo', 'x')", -1),
    ("lpad('foo', 5, 'ab')", "abfoo"), ("lpad('foo', 4, 'ab')", "afoo"), ("lpad('foo', 2, 'ab')", "fo"),
    ("lpad('foo', -1, 'ab')", ""), ("lpad(null, 5, 'ab')", None), ("lpad('foo', 2, '')", "fo"),
    ("lpad('foo', 6, '')", "foo"), ("lpad('', 3, '*')", "***"), ("lpad('foo', 2, null)", None),
    ("lpad('foo', 0, 'ab')", None),
    ("rpad('foo', 5, 'ab')", "fooab"), ("rpad('foo', 4, 'ab')", "fooa"), ("rpad('foo', 2, 'ab')", "fo"),
    ("rpad('foo', 0, 'ab')", None), ("rpad('foo', 5, null)", None), ("rpad(null, 5, 'foo')", None),
    ("substring('foo', 0, 2)", "fo"), ("substring('foo', 1, 2)", "oo"), ("substring('foo', 2, 1)", "o"),
    ("substring('foo', 0, -1)", "foo"), ("substring('foo', 0, 100)", "foo"), ("substring('foo', 4, 5)", None),
    ("strlen('foo')", 3), ("strlen(null)", None), ("strlen('\U0001F600')", 2),
    ("lower('FOO')", "foo"), ("upper('foo')", "FOO"), ("isnull(null)", 1), ("isnull('abc')", 0),
    ("notnull(null)", 0), ("notnull('abc')", 1), ("replace('foo', 'oo', '2')", "f2"),
    ("replace('abc', '', 'x')", "xaxbxcx"), ("replace('', '', 'x')", "x"),
    ("concat('foo', ' ', 'bar')", "foo bar"), ("concat('foo', null)", None),
    ("concat(1.0, '|', 10000000.0, '|', 0.0001, '|', -0.0, '|', 1.0/0.0, '|', 0.0/0.0, '|', 2.5)",
     "1.0|1.0E7|1.0E-4|-0.0|Infinity|NaN|2.5"),  # Java's Double.toString
    ("repeat('foo', 2)", "foofoo"), ("repeat('foo', -1)", None), ("repeat(null, 2)", None),
    ("reverse('foo')", "oof"), ("reverse('a\U0001F600b')", "b\U0001F600a"),
    ("left('foo', 2)", "fo"), ("left('foo', 5)", "foo"), ("right('foo', 2)", "oo"), ("right('foo', 0)", ""),
    ("trim('  foo  ')", "foo"), ("trim('\tfoo ')", "\tfoo"), ("ltrim('xxfooxx', 'x')", "fooxx"),
    ("rtrim('xxfooxx', 'x')", "xxfoo"), ("trim('abcfoocba', 'cba')", "foo"),
    ("round(3.5)", 4.0), ("round(-3.5)", -4.0), ("round(2.675, 2)", 2.68), ("round(15, -1)", 20),
    ("round(12345, -2)", 12300), ("round(3)", 3), ("round(0.0/0.0)", 0.0), ("round(1.0/0.0)", 1.7976931348623157e308),
    ("greatest(1, 2.0)", 2.0), ("greatest('a', 1)", "a"), ("least(1, 2, null)", 1), ("greatest(null, null)", None),
    ("div(10, 3)", 3), ("div(-10, 3)", -3), ("div(10.5, 2)", 5),
    ("pow(2, 3)", 8.0), ("pow(1, 0.0/0.0)", float("nan")), ("max(1, 2)", 2), ("min(1.5, 2)", 1.5), ("scalb(1, 3)", 8.0),
    ("hypot(3, 4)", 5.0), ("atan2(1, 1)", math.pi / 4), ("cbrt(27)", 3.0), ("expm1(0)", 0.0), ("log10(100)", 2.0),
    ("sqrt(4)", 2.0), ("signum(-3)", -1.0), ("toDegrees(pi())", 180.0), ("toRadians(180)", math.pi),
    ("getExponent(8)", 3), ("getExponent(0)", -1023), ("ulp(1)", 2.220446049250313e-16),
    ("nextAfter(1, 2)", 1.0000000000000002), ("nextUp(1)", 1.0000000000000002), ("remainder(5, 3)", -1.0),
    ("rint(2.5)", 2.0), ("ceil(2)", 2.0), ("floor(-2)", -2.0), ("abs(-3)", 3), ("abs(-3.5)", 3.5),
    ("acos(1)", 0.0), ("asin(2)", float("nan")), ("cos(0)", 1.0), ("sin(0)", 0.0), ("tan(0)", 0.0), ("exp(0)", 1.0),
    ("log(1)", 0.0), ("log1p(0)", 0.0), ("cosh(0)", 1.0), ("sinh(0)", 0.0), ("tanh(0)", 0.0), ("atan(0)", 0.0),
    ("copySign(1, -2)", -1.0), ("cot(pi() / 4)", 1.0000000000000002),
    ("parse_long('0x7f', 16)", 127), ("parse_long('101', 2)", 5), ("parse_long('z')", None), ("parse_long('-12')", -12),
    ("parse_long('9223372036854775808')", None),
    ("format('%s %d', 'a', 3)", "a 3"), ("format('%.2f', 1.005)", "1.01"), ("format('%5s|%-5s|', 'ab', 'cd')", "   ab|cd   |"),
    ("format('%,d', 1234567)", "1,234,567"), ("format('%x', -1)", "ffffffffffffffff"), ("format('%d')", "%d"),
    ("format('%s', 1.0)", "1.0"), ("format('%s', 10000000.0)", "1.0E7"), ("format('%d', 1.5)", "%d; 1.5"),
    ("format('%08.3f|%+d', 3.14159, 5)", "0003.142|+5"), ("format('%2$s-%1$s', 'a', 'b')", "b-a"),
    ("regexp_replace('foo bar', 'o', 'a')", "faa bar"), ("regexp_replace('foo', '^', 'x')", "xfoo"),
    ("regexp_replace('a.b', '\\\\.', '$0$0')", "a..b"), ("regexp_replace('abc', '(?<x>b)', '[${x}]')", "a[b]c"),
    ("regexp_replace(null, 'a', 'b')", None),
    # RegexpReplaceExprMacroTest.java (regexp_replace runs on Python's re: Java's lookarounds work)
    (r"regexp_replace(regexp_replace('http://example.com/path/to?query', '\\?(.*)$', ''), '/(\\w+)(?=/|$)', '/*')",
     "http://example.com/*/*"),
    ("regexp_replace('foo', 'f.x', 'beep')", "foo"), ("regexp_replace('foo', '', 'x')", "xfxoxox"),
    ("regexp_replace('', '', 'x')", "x"), ("regexp_replace(null, '', 'x')", None),
    (r"regexp_replace(concat('foo', '\n', 'bar'), '^foo\\nbar$', 'xxx')", "xxx"),
    ("contains_string('foo', 'oo')", 1), ("contains_string('foo', 'OO')", 0), ("icontains_string('FOO', 'oo')", 1),
    ("contains_string(null, 'a')", 0),
    ("coalesce(null, null, 3)", 3), ("coalesce(null, null)", None),
    ("case_simple('b', 'a', 1, 'b', 2, 0)", 2), ("case_simple('c', 'a', 1, 0)", 0), ("case_simple('c', 'a', 1)", None),
    ("decode_base64_utf8('aGVsbG8gd29ybGQ=')", "hello world"), ("decode_base64_utf8('aGVsbG8')", "hello"),
    ("decode_base64_utf8(null)", None),
    ("unix_timestamp('2026-01-02T03:04:05Z')", 1767323045), ("timestamp('2026-01-02')", 1767312000000),
    ("timestamp('02/01/2026', 'dd/MM/yyyy')", 1767312000000),
    (f"timestamp_extract({T}, 'EPOCH')", 1767323045), (f"timestamp_extract({T}, 'MILLISECOND')", 123),
    (f"timestamp_extract({T}, 'SECOND')", 5), (f"timestamp_extract({T}, 'MINUTE')", 4),
    (f"timestamp_extract({T}, 'DAY')", 2), (f"timestamp_extract({T}, 'DOW')", 5), (f"timestamp_extract({T}, 'ISODOW')", 5),
    (f"timestamp_extract({T}, 'DOY')", 2), (f"timestamp_extract({T}, 'WEEK')", 1), (f"timestamp_extract({T}, 'MONTH')", 1),
    (f"timestamp_extract({T}, 'QUARTER')", 1), (f"timestamp_extract({T}, 'YEAR')", 2026),
    (f"timestamp_extract({T}, 'ISOYEAR')", 2026), (f"timestamp_extract({T}, 'DECADE')", 202),
    (f"timestamp_extract({T}, 'CENTURY')", 21.0), (f"timestamp_extract({T}, 'MILLENNIUM')", 3.0),
    (f"timestamp_extract({T}, 'HOUR', 'America/Los_Angeles')", 19), (f"timestamp_extract({T}, 'DAY', '-08:00')", 1),
    ("timestamp_extract('2026-01-02T03:04:05Z', 'HOUR')", 3), (f"timestamp_extract({T}, 'microsecond')", 1767323),
    (f"timestamp_floor({T}, 'P1M')", 1767225600000), (f"timestamp_floor({T}, 'P1D', null, 'America/Los_Angeles')", 1767254400000),
    (f"timestamp_floor({T}, 'PT1H', '2026-01-01T00:30Z')", 1767321000000),
    (f"timestamp_floor({T}, 'P1W')", 1766966400000),  # Monday 2025-12-29
    (f"timestamp_ceil({T}, 'P1D')", 1767398400000), ("timestamp_ceil(1767225600000, 'P1M')", 1767225600000),
    ("timestamp_shift(1767225600000, 'P1M', 1)", 1769904000000), ("timestamp_shift(1769817600000, 'P1M', 1)", 1772236800000),
    ("timestamp_shift(1767225600000, 'P1D', -1, 'America/Los_Angeles')", 1767139200000),
    ("timestamp_parse('2026-01-02')", 1767312000000), ("timestamp_parse('2026')", 1767225600000),
    (f"timestamp_floor({T}, 'P1D', '2026-01-01T06:00', 'Asia/Kolkata')", 1767313800000),  # origin's wall time
    ("trim('xfoox', nvl(null, 'x'))", "foo"), ("trim('xfoox', nvl(null, null))", "xfoox"), ("timestamp_parse('2026-01-02 03:04:05')", 1767323045000),
    ("timestamp_parse('2026-01-02T03:04:05.123+01:00')", 1767319445123), ("timestamp_parse('nope')", None),
    ("timestamp_parse('2026-01-02 03:04:05', null, '+05:30')", 1767303245000),
    ("timestamp_parse('02/01/2026 10', 'dd/MM/yyyy HH')", 1767348000000),
    (f"timestamp_format({T}, 'yyyy-MM-dd HH:mm:ss')", "2026-01-02 03:04:05"),
    (f"timestamp_format({T}, 'EEEE d MMMM yyyy h:mm a', 'America/Los_Angeles')", "Thursday 1 January 2026 7:04 PM"),
    (f"timestamp_format({T}, null, '+01:00')", "2026-01-02T04:04:05.123+01:00"),
    (f"timestamp_format({T}, 'yy-M-d\\'T\\'H:m:s.S Z')", "26-1-2T3:4:5.1 +0000"),
]


@pytest.mark.parametrize("text,expected", DRUID_EXAMPLES)
def test_druids_documented_and_tested_values(text, expected):
    got = evaluate_to_array(compile_expression(text), {}, 1).to_pylist()
    assert same(got, [expected]), got


def test_text_in_math_functions_follows_druids_types():
    """Druid's math functions on text (FunctionTest.testBitwise): one argument that is text is null, even '4';
    of two, both text is null and one text is read as a number; round and the size formats refuse a number
    written as text (an error for those rows)."""
    columns = {"a": pa.array(["4", "x", None]), "b": pa.array([2.0, 2.0, None])}
    got = {f: evaluate_to_array(compile_expression(f), columns, 3).to_pylist()
           for f in ("sqrt(a)", "abs(a)", "bitwiseComplement(a)", "pow(a, b)", "pow(a, a)", "bitwiseOr(a, 1)",
                     "div(a, 3)", "max(a, b)", "safe_divide(a, a)")}
    assert got == {"sqrt(a)": [None, None, None], "abs(a)": [None, None, None],
                   "bitwiseComplement(a)": [None, None, None], "pow(a, b)": [16.0, None, None],
                   "pow(a, a)": [None, None, None], "bitwiseOr(a, 1)": [5, None, None], "div(a, 3)": [1, None, None],
                   "max(a, b)": [4.0, None, None], "safe_divide(a, a)": [None, None, None]}
    assert evaluate_to_array(compile_expression("round(a)"), {"a": pa.array(["x", None])}, 2).to_pylist() == [None, None]
    for text in ("round(a)", "human_readable_decimal_format(a)"):
        with pytest.raises(ExpressionError, match="first argument should be a LONG or DOUBLE but got STRING"):
            evaluate_to_array(compile_expression(text), columns, 3)


def test_a_function_failing_on_a_row_is_an_expression_error():
    # Druid throws for these rows; the row parser turns the error into that row's parse exception
    for text in ("timestamp_shift(t, 'P1M', 1000000000 * n)", "repeat(s, 1000000000)", "lpad(s, 2000000000, 'x')", "format('%999999999d', n)",
                 "div(n, 0)", "timestamp('no time')", "timestamp('2026-01-02 03:04:05')", "decode_base64_utf8('%%%')",
                 "left(s, -1 * n)"):
        with pytest.raises(ExpressionError) as info:
            evaluate(text)
        assert type(info.value) is ExpressionError


@pytest.mark.parametrize("text,message", [
    ("lookup(s, 'countries')", r"lookup\(\) is not supported: query-time lookups .* case_simple"),
    ("javascript('x', 'function(x) { return x; }')", r"javascript\(\) is not supported: JavaScript"),
    ("bloom_filter_test(s, 'AAAA')", r"bloom_filter_test\(\) is not supported: .*`in` filter"),
    ("timestamp_floor(t, 'PT1H', null, 'Mars/Olympus')", r"'Mars/Olympus' is not a time zone"),
    ("timestamp_floor(t, 'PT1H', 'yesterday')", r"origin 'yesterday' is not an ISO-8601 date-time"),
    ("timestamp_floor(t, s)", r"argument 2 \(period\) must be a constant"),
    ("timestamp_shift(t, 'P1X', 1)", r"'P1X' is not a period to shift by"),
    ("timestamp_extract(t, 'HOUR', 'nowhere')", r"'nowhere' is not a time zone"),
    ("timestamp_parse(s, 'yyyy-MM-dd %H')", r"strftime pattern"),
    ("timestamp_parse(s, 'iso')", r"letter 'i' .* timestamp_parse takes a Joda-Time pattern"),
    ("timestamp_format(t, 'yyyy-MM-dd q')", r"letter 'q' .* is not a Joda-Time field"),
    ("timestamp_format(t, 'yyyy', 'Nowhere/City')", r"is not a time zone"),
    ("ipv4_match(s, '300.0.0.0/8')", r"'300.0.0.0/8' is not an IPv4 subnet"),
    ("ipv6_match(s, '10.0.0.0/8')", r"is not an IPv6 subnet"),
    ("ipv6_match(s, '201:ef:168::/invalid')", r"is not an IPv6 subnet"),
    ("human_readable_binary_byte_format(n, 4)", r"argument 2 must be from 0 to 3, got 4"),
    ("parse_long(s, 37)", r"argument 2 must be from 2 to 36, got 37"),
    ("format('%q', s)", r"'%q' in '%q' is not a conversion"),
    ("regexp_replace(s, '[b-a]', 'x')", r"'\[b-a\]' is not a valid regular expression"),
    ("regexp_replace(s, '(a)', '$2')", r"refers to group 2, which '\(a\)' does not have"),
    ("regexp_replace(s, 'a', 'costs $')", r"illegal group reference .*write \\\$ for a dollar sign"),
    ("contains_string(s, n)", r"argument 2 \(search\) must be a constant"),
    ("left(s, -1)", r"argument 2 must be from 0"),
    ("substring(s, -1, 2)", r"substring\(\): argument 2 must be from 0"),
    ("repeat(s, 1.5)", r"argument 2 must be a whole number"),
    ("sin('x')", r"sin\(\): argument 1 \(x\) is a number, got the text 'x'"),
    ("case_simple(s, 'a')", r"case_simple\(\) takes 3 or more arguments, got 2"),
    ("pi(1)", r"pi\(\) takes 0 arguments, got 1"),
])
def test_bad_constants_and_refused_functions_are_refused_when_the_spec_is_validated(text, message):
    with pytest.raises(ExpressionError, match=message):
        parse_expression(text)


def test_ingest_validate_accepts_real_specs_using_time_and_trigonometry(tmp_path):
    """Transforms the issue names as blocking real specs: timestamp_parse/timestamp_format and trigonometry."""
    raw = {"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "geo", "timestampSpec": {"column": "ts"}, "dimensionsSpec": {"dimensions": ["day"]},
                       "transformSpec": {"transforms": [
                           {"type": "expression", "name": "when", "expression": "timestamp_parse(raw_time, 'yyyy-MM-dd HH:mm:ss', 'Europe/Paris')"},
                           {"type": "expression", "name": "day", "expression": "timestamp_format(__time, 'yyyy-MM-dd', 'America/New_York')"},
                           {"type": "expression", "name": "dist", "expression":
                               "6371 * acos(sin(toRadians(lat)) * sin(toRadians(48.85)) + cos(toRadians(lat)) * "
                               "cos(toRadians(48.85)) * cos(toRadians(lon) - toRadians(2.35)))"}]}},
        "ioConfig": {"topic": "t", "inputFormat": {"type": "json"},
                     "consumerProperties": {"bootstrap.servers": "localhost:9092"}}}}
    (tmp_path / "geo.json").write_text(json.dumps(raw))
    done = subprocess.run([sys.executable, "-m", "ingest_core.service.cli", "validate", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK" in done.stdout


def test_vectorized_time_zone_printing_and_flooring_agree_with_the_per_value_joda_rules():
    """timestamp_format and a time-zone timestamp_floor run on pyarrow for times from 1972 to 2036; the same
    values as the per-value Joda-Time rules (value_functions), daylight-saving changes included."""
    from ingest_core.core.periods import Period
    from ingest_core.core.time_formats import time_zone
    from ingest_core.executor import value_functions

    rng = random.Random(7)
    times = [rng.randint(63_072_000_000, 2_114_380_799_999) for _ in range(1500)]
    times += [base + k * 900_000 for base in (1772964000000, 1762678800000) for k in range(-12, 12)]  # LA's DST days
    columns = {"t": pa.array(times, pa.int64())}
    for zone in ("America/Los_Angeles", "Australia/Lord_Howe", "+05:45"):
        for pattern in ("yyyy-MM-dd HH:mm:ss.SSS Z", "EEEE d MMMM yy h:mm a ZZ ZZZ x-w-e D k K S SSSS C G"):
            got = evaluate_to_array(compile_expression(f"timestamp_format(t, '{pattern}', '{zone}')"), columns,
                                    len(times)).to_pylist()
            printer = value_functions.joda_printer(pattern, time_zone(zone))
            assert got == [printer(t) for t in times], (zone, pattern)
        for period in ("P1D", "P1W", "P1M", "P1Y"):
            got = evaluate_to_array(compile_expression(f"timestamp_floor(t, '{period}', null, '{zone}')"), columns,
                                    len(times)).to_pylist()
            buckets = value_functions.PeriodBuckets(Period.parse(period), None, time_zone(zone))
            assert got == [buckets.floor(t) for t in times], (zone, period)


@pytest.mark.parametrize("text,expected", [
    # 01:30 PST, the second 01:30 of 2025-11-09 in Los Angeles: Joda keeps the instant's offset (01:00 PST)
    ("timestamp_floor(1762680600000, 'PT1H', null, 'America/Los_Angeles')", 1762678800000),
    ("timestamp_floor(1762677000000, 'PT1H', null, 'America/Los_Angeles')", 1762675200000),  # 01:30 PDT
    ("timestamp_floor(1772964000000, 'P1D', null, 'America/Los_Angeles')", 1772956800000),  # DST starts that day
    ("timestamp_shift(1772928000000, 'P1D', 1, 'America/Los_Angeles')", 1773010800000),  # a 23-hour day
    ("timestamp_shift(1772928000000, 'PT24H', 1, 'America/Los_Angeles')", 1773014400000),  # 24 elapsed hours
    ("timestamp_format(1772964000000, 'HH:mm ZZ', 'America/Los_Angeles')", "03:00 -07:00"),
    ("timestamp_format(1772964000000 - 1, 'HH:mm ZZ', 'America/Los_Angeles')", "01:59 -08:00"),
    ("timestamp_format(4102444800000, 'yyyy-MM-dd HH:mm ZZ', 'America/Los_Angeles')", "2099-12-31 16:00 -08:00"),
    ("timestamp_format(4118083200000, 'HH:mm ZZ', 'America/Los_Angeles')", "17:00 -07:00"),  # DST in 2100 too
])
def test_daylight_saving_edges(text, expected):
    assert evaluate_to_array(compile_expression(text), {}, 1).to_pylist() == [expected]


@pytest.mark.parametrize("literal,value", [
    (r"'a\nb'", "a\nb"), (r"'tab\there'", "tab\there"), (r"'\u00e9t\u00e9'", "été"), (r"'it\'s'", "it's"),
    (r"'back\\slash'", "back\\slash"), (r"'\d'", "d"), (r"'\101'", "A"),
])
def test_string_literals_unescape_as_druids_parser(literal, value):
    """Druid reads a quoted literal with commons-text's unescapeJava (ExprListenerImpl)."""
    assert evaluate_to_array(compile_expression(literal), {}, 1).to_pylist() == [value]


def test_a_function_failing_on_a_row_in_the_row_parser_fails_that_row_only():
    """Druid's Transformer throws a ParseException for the row a function throws on; the chunk's other rows keep
    their exact values (the row parser finds the rows at fault)."""
    from datetime import datetime, timezone

    from ingest_core.core.spec import parse_spec
    from ingest_core.executor.row_parser import RecordChunk, RowParser

    transforms = {"when": "timestamp(day)", "text": "decode_base64_utf8(b64)", "deg": "toDegrees(asin(x))",
                  "hour": "timestamp_extract(timestamp_parse(day), 'HOUR', 'Asia/Kolkata')"}
    raw = {"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "f", "timestampSpec": {"column": "ts"},
                       "dimensionsSpec": {"dimensions": ["text", {"type": "long", "name": "when"},
                                                         {"type": "double", "name": "deg"},
                                                         {"type": "long", "name": "hour"}]},
                       "transformSpec": {"transforms": [{"type": "expression", "name": k, "expression": v}
                                                        for k, v in transforms.items()]}},
        "ioConfig": {"topic": "t", "inputFormat": {"type": "json"},
                     "consumerProperties": {"bootstrap.servers": "x:1"}}}}
    rows = [{"ts": "2026-01-01T00:00:00Z", "day": "2026-01-02", "b64": "aGk=", "x": 1.0},
            {"ts": "2026-01-01T00:00:00Z", "day": "no day", "b64": "aGk=", "x": 0.5},  # timestamp() throws
            {"ts": "2026-01-01T00:00:00Z", "day": "2026-01-03", "b64": "#!", "x": 2.0},  # not Base64: throws
            {"ts": "2026-01-01T00:00:00Z", "day": "2026-01-04", "b64": None, "x": None}]
    parser = RowParser(parse_spec(raw), datetime(2026, 1, 1, tzinfo=timezone.utc), max_saved_exceptions=10)
    out = parser.parse(RecordChunk("t", 0, range(len(rows)), [json.dumps(r).encode() for r in rows]))
    assert out.stats.unparseable == 2 and sorted(e.offset for e in out.exceptions) == [1, 2]
    assert "timestamp(day)" in str(out.exceptions) and "decode_base64_utf8(b64)" in str(out.exceptions)
    kept = sorted(out.table.to_pylist(), key=lambda r: r["__offset"])
    assert [(r["when"], r["text"], r["deg"], r["hour"]) for r in kept] == [
        (1767312000000, "hi", 90.0, 5), (1767484800000, None, None, 5)]


def test_vectorized_ceil_shift_and_parse_agree_with_the_per_value_rules():
    from ingest_core.core.periods import Period
    from ingest_core.core.time_formats import time_zone
    from ingest_core.executor import value_functions

    rng = random.Random(11)
    times = [rng.randint(-2_000_000_000_000, 4_000_000_000_000) for _ in range(400)]
    times += [1767225600000, 1767225600000 + 1, 1772956800000, None]  # boundaries, and a null
    columns = {"t": pa.array(times, pa.int64())}
    utc = value_functions.EPOCH.tzinfo
    for period in ("P1Y", "P3M", "P1M", "P2W", "P1D", "PT6H", "PT15M", "PT1.5S"):
        buckets = value_functions.PeriodBuckets(Period.parse(period), None, utc)
        got = evaluate_to_array(compile_expression(f"timestamp_ceil(t, '{period}')"), columns, len(times)).to_pylist()
        assert got == [None if t is None else buckets.ceil(t) for t in times], period
    for period, zone in (("PT1H", "UTC"), ("P1D", "UTC"), ("PT90M", "America/Los_Angeles"), ("P1W", "+05:30"),
                         ("P1M", "UTC"), ("P1Y", "UTC"), ("P1Y1M2DT3H", "UTC"), ("P13M", "-08:00"), ("P1M", "+05:45")):
        buckets = value_functions.PeriodBuckets(Period.parse(period), None, time_zone(zone))
        got = evaluate_to_array(compile_expression(f"timestamp_shift(t, '{period}', -3, '{zone}')"), columns,
                                len(times)).to_pylist()
        assert got == [None if t is None else buckets.shift(t, -3) for t in times], period
    texts = ["2026-03-08 02:30:00", "2026-11-01 01:30:00", "2026-01-02", "2026-01-02T03:04:05.123", "2026-07-01T12",
             None, "2099-07-01 12:00:00"]
    for zone in ("UTC", "America/Los_Angeles"):
        expression = compile_expression(f"timestamp_parse(s, null, '{zone}')")
        together = evaluate_to_array(expression, {"s": pa.array(texts)}, len(texts)).to_pylist()
        alone = [evaluate_to_array(expression, {"s": pa.array([t], pa.string())}, 1).to_pylist()[0] for t in texts]
        vectorized = evaluate_to_array(expression, {"s": pa.array(texts[2:6])}, 4).to_pylist()
        assert together == alone and vectorized == alone[2:6], zone
    la = [evaluate_to_array(compile_expression(f"timestamp_parse('{t}', null, 'America/Los_Angeles')"), {}, 1)
          .to_pylist()[0] for t in ("2026-03-08 02:30:00", "2026-11-01 01:30:00", "2099-07-01 12:00:00")]
    # a wall time daylight saving skips is refused (Joda throws, Druid gives null); a repeated one is the
    # earlier instant (PDT); in 2099 Los Angeles still keeps daylight saving time
    assert la == [None, 1793521800000, 4086615600000]


def test_several_weeks_count_from_the_epoch_a_thursday_as_druids_period_granularity():
    # PeriodGranularity: P1W floors to Monday; P2W counts two-week buckets from its origin, 1970-01-01 (Thursday)
    assert evaluate_to_array(compile_expression(f"timestamp_floor({T}, 'P1W')"), {}, 1).to_pylist() == [1766966400000]
    two = evaluate_to_array(compile_expression(f"timestamp_floor({T}, 'P2W')"), {}, 1).to_pylist()[0]
    assert two % (14 * 86_400_000) == 0 and 0 <= T - two < 14 * 86_400_000  # 2025-12-25, a Thursday


def ms(text: str) -> int:
    from datetime import datetime, timezone

    when = datetime.fromisoformat(text)
    return int((when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp() * 1000)


# Druid's ExprMacroTest.java (processing/src/test/java/org/apache/druid/query/expression/), on its bindings
MACRO_COLUMNS = {"t": pa.array([ms("2000-02-03T04:05:06")]), "t1": pa.array([ms("2000-02-03T00:00:00")]),
                 "tstr": pa.array(["2000-02-03T04:05:06"]), "tstr_sql": pa.array(["2000-02-03 04:05:06"]),
                 "x": pa.array(["foo"]), "y": pa.array([2]), "z": pa.array([3.1]), "spacey": pa.array(["  hey there  "]),
                 "ipv4_string": pa.array(["192.168.0.1"]), "ipv4_long": pa.array([3232235521]),
                 "ipv4_network": pa.array(["192.168.0.0"]), "ipv4_broadcast": pa.array(["192.168.255.255"])}
MACRO_EXAMPLES = [
    ("like(x, 'f%')", 1), ("like(x, 'f__')", 1), ("like(x, '%o%')", 1), ("like(x, 'b%')", 0), ("like(x, 'b__')", 0),
    ("like(x, '%x%')", 0), ("like(x, '')", 0),
    ("contains_string('foobar', 'oba')", 1), ("contains_string('foo', 'bar')", 0), ("contains_string('foo', '')", 1),
    ("contains_string('', '')", 1), ("contains_string(null, '')", 0),  # ContainsExprMacroTest
    ("icontains_string('foobar', 'OBA')", 1), ("icontains_string('FOOBAR', 'oba')", 1),  # CaseInsensitiveExprMacroTest
    ("icontains_string('foo', 'bar')", 0), ("icontains_string('', '')", 1), ("icontains_string(null, '')", 0),
    ("ipv6_match('201:ef:168::', '201:ef:168::/32')", 1), ("ipv6_match(null, '201:ef:168::/32')", 0),  # IPv6Address...
    ("ipv6_match('2002:ef:168::', '201:ef:168::/32')", 0), ("ipv6_match('druid.apache.org', '201:ef:168::/32')", 0),
    # TimestampExtractExprMacroTest (PostgreSQL's examples), times given as ISO-8601 text
    ("timestamp_extract('2001-02-16', 'DECADE')", 200), ("timestamp_extract('2000-12-16', 'CENTURY')", 20.0),
    ("timestamp_extract('2001-02-16', 'CENTURY')", 21.0), ("timestamp_extract('2000-12-16', 'MILLENNIUM')", 2.0),
    ("timestamp_extract('2001-02-16', 'MILLENNIUM')", 3.0), ("timestamp_extract('2023-12-15', 'DOW', 'UTC')", 5),
    ("timestamp_extract('2001-01-01T00:00:00Z', 'EPOCH')", 978307200),
    ("timestamp_extract('2001-02-16T12:34:56.789Z', 'MILLISECOND')", 789),
    ("timestamp_extract('2001-02-16T12:34:45Z', 'SECOND')", 45), ("timestamp_extract('2001-02-16T12:34:56Z', 'MINUTE')", 34),
    ("timestamp_extract('2001-02-16T12:34:56Z', 'HOUR')", 12), ("timestamp_extract('2001-02-16T12:34:56Z', 'DAY')", 16),
    ("timestamp_extract('2023-12-15', 'ISODOW')", 5), ("timestamp_extract('2001-02-16', 'DOY')", 47),
    ("timestamp_extract('2001-02-16', 'WEEK')", 7), ("timestamp_extract('2001-02-16', 'MONTH')", 2),
    ("timestamp_extract('2001-02-16', 'QUARTER')", 1), ("timestamp_extract('2001-05-16', 'QUARTER')", 2),
    ("timestamp_extract('2001-02-16', 'YEAR')", 2001), ("timestamp_extract('2001-02-16', 'ISOYEAR')", 2001),
    ("regexp_extract('foo', 'f(.o)')", "foo"), ("regexp_extract('foo', 'f(.o)', 1)", "oo"),  # RegexpExtractExprMacroTest
    ("regexp_extract('foo', 'f(.x)')", None), ("regexp_extract('foo', '.o$')", "oo"), ("regexp_extract('foo', '')", ""),
    ("regexp_extract(null, '')", None),
    ("regexp_extract(x, 'f(.)')", "fo"), ("regexp_extract(x, 'f(.)', 0)", "fo"), ("regexp_extract(x, 'f(.)', 1)", "o"),
    ("timestamp_ceil(null, 'P1M')", None), ("timestamp_ceil(t, 'P1M')", ms("2000-03-01")),
    ("timestamp_ceil(t, 'P1D', null, 'America/Los_Angeles')", ms("2000-02-03T08:00")),
    ("timestamp_ceil(t, 'P1D', '1970-01-01T01', 'Etc/UTC')", ms("2000-02-04T01:00")),
    ("timestamp_ceil(t1, 'P1D')", ms("2000-02-03")),
    ("timestamp_floor(null, 'P1M')", None), ("timestamp_floor(t, 'P1M')", ms("2000-02-01")),
    ("timestamp_floor(t, 'P1D', null, 'America/Los_Angeles')", ms("2000-02-02T08:00")),
    ("timestamp_floor(t, 'P1D', '1970-01-01T01', 'Etc/UTC')", ms("2000-02-03T01:00")),
    ("timestamp_shift(t, 'P1D', 2)", ms("2000-02-05T04:05:06")),
    ("timestamp_shift(t, 'P1D', 2, 'America/Los_Angeles')", ms("2000-02-05T04:05:06")),
    ("timestamp_shift(t, 'P1D', 2, '-08:00')", ms("2000-02-05T04:05:06")),
    ("timestamp_shift(t, 'P1D', 2, '')", ms("2000-02-05T04:05:06")),
    # TimestampShiftMacroTest, from 2020-11-05T04:05:06Z
    (f"timestamp_shift({ms('2020-11-05T04:05:06')}, 'P1M', 0)", ms("2020-11-05T04:05:06")),
    (f"timestamp_shift({ms('2020-11-05T04:05:06')}, 'P1M', 5)", ms("2021-04-05T04:05:06")),
    (f"timestamp_shift({ms('2020-11-05T04:05:06')}, 'P1M', -3)", ms("2020-08-05T04:05:06")),
    (f"timestamp_shift({ms('2020-11-05T04:05:06')}, 'PT1M', 1)", ms("2020-11-05T04:06:06")),
    (f"timestamp_shift({ms('2020-11-05T04:05:06')}, 'P1D', 1)", ms("2020-11-06T04:05:06")),
    (f"timestamp_shift({ms('2020-11-05T04:05:06')}, 'P1Y', 1, 'America/Los_Angeles')", ms("2021-11-04T20:05:06-07:00")),
    (f"timestamp_shift({ms('2020-11-05T04:05:06')}, 'P1Y', y + 1, 'America/Los_Angeles')", ms("2023-11-04T20:05:06-07:00")),
    ("timestamp_shift(null, 'P1M', 1)", None),
    (f"timestamp_shift({ms('2024-02-29')}, 'P1Y', 1)", ms("2025-02-28")),  # Joda clamps to the month's end
    (f"timestamp_shift({ms('2024-02-29')}, 'P1Y1M', 1)", ms("2025-03-28")),  # years first, then months
    (f"timestamp_shift({ms('2024-01-31')}, 'P1M', 1)", ms("2024-02-29")),
    (f"timestamp_shift({ms('1969-12-31T23:59:59.999')}, 'P1M', -1)", ms("1969-11-30T23:59:59.999")),
    ("timestamp_extract(t, 'DAY')", 3), ("timestamp_extract(t, 'HOUR')", 4),
    ("timestamp_extract(t, 'DAY', 'America/Los_Angeles')", 2), ("timestamp_extract(t, 'HOUR', 'America/Los_Angeles')", 20),
    ("timestamp_parse(tstr)", ms("2000-02-03T04:05:06")), ("timestamp_parse(tstr_sql)", ms("2000-02-03T04:05:06")),
    ("timestamp_parse(tstr_sql, null, 'America/Los_Angeles')", ms("2000-02-03T04:05:06-08:00")),
    ("timestamp_parse('2000-02-03')", ms("2000-02-03")), ("timestamp_parse('2000-02')", ms("2000-02-01")),
    ("timestamp_parse(null)", None), ("timestamp_parse('z2000')", None),
    ("timestamp_parse(tstr_sql, 'yyyy-MM-dd HH:mm:ss')", ms("2000-02-03T04:05:06")),
    ("timestamp_parse('02/03/2000', 'MM/dd/yyyy')", ms("2000-02-03")),
    ("timestamp_parse(tstr_sql, 'yyyy-MM-dd HH:mm:ss', 'America/Los_Angeles')", ms("2000-02-03T04:05:06-08:00")),
    ("timestamp_format(t)", "2000-02-03T04:05:06.000Z"), ("timestamp_format(t, 'yyyy-MM-dd HH:mm:ss')", "2000-02-03 04:05:06"),
    ("timestamp_format(t, 'yyyy-MM-dd HH:mm:ss', 'America/Los_Angeles')", "2000-02-02 20:05:06"),
    ("trim('')", ""), ("trim(concat(' ', x, ' '))", "foo"), ("trim(spacey)", "hey there"), ("trim(spacey, '')", "  hey there  "),
    ("trim(spacey, 'he ')", "y ther"), ("trim(spacey, spacey)", ""), ("trim(spacey, substring(spacey, 0, 4))", "y ther"),
    ("ltrim('')", ""), ("ltrim(concat(' ', x, ' '))", "foo "), ("ltrim(spacey)", "hey there  "),
    ("ltrim(spacey, '')", "  hey there  "), ("ltrim(spacey, 'he ')", "y there  "), ("ltrim(spacey, spacey)", ""),
    ("ltrim(spacey, substring(spacey, 0, 4))", "y there  "),
    ("rtrim('')", ""), ("rtrim(concat(' ', x, ' '))", " foo"), ("rtrim(spacey)", "  hey there"),
    ("rtrim(spacey, '')", "  hey there  "), ("rtrim(spacey, 'he ')", "  hey ther"), ("rtrim(spacey, spacey)", ""),
    ("rtrim(spacey, substring(spacey, 0, 4))", "  hey ther"),
    ("ipv4_parse(x)", None), ("ipv4_parse(ipv4_string)", 3232235521), ("ipv4_parse(ipv4_long)", 3232235521),
    ("ipv4_parse(ipv4_stringify(ipv4_long))", 3232235521),
    ("ipv4_stringify(x)", None), ("ipv4_stringify(ipv4_long)", "192.168.0.1"), ("ipv4_stringify(ipv4_string)", "192.168.0.1"),
    ("ipv4_stringify(ipv4_parse(ipv4_string))", "192.168.0.1"),
    ("ipv4_match(ipv4_string, '10.0.0.0/8')", 0), ("ipv4_match(ipv4_string, '192.168.0.0/16')", 1),
    ("ipv4_match(ipv4_network, '192.168.0.0/16')", 1), ("ipv4_match(ipv4_broadcast, '192.168.0.0/16')", 1),
]


@pytest.mark.parametrize("text,expected", MACRO_EXAMPLES)
def test_druids_expression_macro_tests(text, expected):
    got = evaluate_to_array(compile_expression(text), MACRO_COLUMNS, 1).to_pylist()
    assert same(got, [expected]), got
