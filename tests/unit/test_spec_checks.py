"""What would fail on Spark is refused when the spec is validated (`ingest validate`, DAG parsing): transforms,
filters and timestamp formats are parsed and checked in core, each problem with its field path and what to
write instead. And what the executor evaluates follows Druid's rules for the values that used to stop a job."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ingest_core.core.errors import SpecError
from ingest_core.core.expressions import ExpressionError, parse_expression
from ingest_core.core.filters import Bound, Equals, FilterError, parse_filter
from ingest_core.core.spec import parse_spec
from ingest_core.core.time_formats import timestamp_format_problem
from ingest_core.executor.expressions import compile_expression, evaluate_to_array
from ingest_core.executor.filters import compile_filter


def spec(transforms=(), filter=None, timestamp_format="auto"):
    transform_spec = {"transforms": [{"type": "expression", "name": f"t{i}", "expression": e}
                                     for i, e in enumerate(transforms)]}
    if filter is not None:
        transform_spec["filter"] = filter
    return {"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "wiki", "timestampSpec": {"column": "ts", "format": timestamp_format},
                       "dimensionsSpec": {"dimensions": ["a"]}, "transformSpec": transform_spec},
        "ioConfig": {"topic": "t", "inputFormat": {"type": "json"}, "consumerProperties": {"bootstrap.servers": "localhost:9092"}}}}


@pytest.mark.parametrize("expression,path_and_message", [
    ("upper(a, b)", r"transforms\[0\]: transform 't0': .*upper\(\) takes 1 argument, got 2"),
    ("cast(x, 'BOOL')", r"cast to 'BOOL' is not supported.*use one of 'LONG', 'DOUBLE', 'FLOAT', 'STRING'"),
    ("regexp_like(a, '(')", r"'\(' is not a valid regular expression"),
    ("regexp_extract(a, '[')", r"not a valid regular expression"),
    ("regexp_extract(a, 'a(b)', 2)", r"group 2 does not exist: the pattern 'a\(b\)' has 1 group"),
    ("regexp_like(a, 'x(?=y)')", r"lookaround assertions.*not supported"),
    ("regexp_like(a, '(a)\\\\1')", r"backreferences"),
    ("regexp_like(a, b)", r"argument 2 \(pattern\) must be a constant"),
    ("timestamp_floor(__time, 'PT1X')", r"'PT1X' is not a period to floor to.*'PT1H'"),
    ("timestamp_extract(__time, 'FORTNIGHT')", r"unit 'FORTNIGHT' is not supported"),
    ("timestamp(a, '%Y-%m-%d')", r"strftime pattern.*write 'yyyy-MM-dd'"),
    ("timestamp(a, 'yyyy-qq')", r"letter 'q'.*not supported"),
    ("substring(a, 'x', 1)", r"substring\(\): argument 2 \(index\) is a number, got the text 'x'"),
    ("round(a, 1.5)", r"round\(\): argument 2 must be a whole number"),
    ("like(a, 'x%', 'ab')", r"escape must be one character"),
    ("abs('seven')", r"abs\(\): argument 1 \(x\) is a number, got the text 'seven'"),
    ("uper(a)", r"function uper\(\) is not supported in transforms \(did you mean 'upper'\?\)"),
    ("", r"the expression is empty"),
])
def test_a_transform_the_job_could_not_run_is_refused_with_its_path(expression, path_and_message):
    with pytest.raises(SpecError, match=r"spec\.dataSchema\.transformSpec\.transforms\[0\]") as info:
        parse_spec(spec([expression]))
    assert __import__("re").search(path_and_message, str(info.value)), str(info.value)


def test_deep_nesting_is_an_expression_error_not_a_recursion_error():
    with pytest.raises(ExpressionError, match="nests deeper than"):
        parse_expression("(" * 5000 + "1" + ")" * 5000)
    with pytest.raises(ExpressionError, match="nests deeper than"):
        parse_expression("-" * 5000 + "1")
    assert parse_expression("(" * 30 + "a" + ")" * 30).columns == {"a"}


@pytest.mark.parametrize("flt,message", [
    ({"type": "bound", "dimension": "a", "lower": "abc", "ordering": "numeric"},
     r"filter\.lower: 'abc' is not a number"),
    ({"type": "range", "column": "a", "matchValueType": "LONG", "upper": "x"}, r"filter\.upper: 'x' is not a number"),
    ({"type": "equals", "column": "a", "matchValueType": "DOUBLE", "matchValue": "NaN"}, r"NaN matches nothing"),
    ({"type": "equals", "column": "a", "matchValueType": "BOOLEAN", "matchValue": 1}, r"matchValueType.*not supported"),
    ({"type": "regex", "dimension": "a", "pattern": "(?<=x)y"}, r"filter\.pattern: .*lookaround"),
    ({"type": "and", "fields": [{"type": "search", "dimension": "a"}]}, r"filter\.fields\[0\]: filter type 'search'"),
    ({"type": "like", "dimension": "a", "pattern": "x", "escape": "ab"}, r"filter\.escape"),
])
def test_a_filter_the_job_could_not_apply_is_refused_with_its_path(flt, message):
    with pytest.raises(SpecError, match=r"spec\.dataSchema\.transformSpec\.filter: .*" + message):
        parse_spec(spec(filter=flt))


def test_filters_nested_too_deep_are_refused():
    flt: dict = {"type": "true"}
    for _ in range(500):
        flt = {"type": "not", "field": flt}
    with pytest.raises(FilterError, match="nest deeper than"):
        parse_filter(flt)


def test_filters_are_typed_values():
    assert parse_filter({"type": "bound", "dimension": "a", "lower": "10", "ordering": "numeric"}) == \
        Bound("a", 10.0, None, False, False, True)
    assert parse_filter({"type": "equals", "column": "a", "matchValueType": "LONG", "matchValue": 5}) == Equals("a", 5.0)
    assert parse_filter({"type": "selector", "dimension": "a", "value": True}) == Equals("a", "true")


@pytest.mark.parametrize("fmt,problem", [
    ("%Y-%m-%dT%H:%M:%S", r"strftime pattern.*write 'yyyy-MM-ddTHH:mm:ss'"),
    ("yyyy-MM-dd qq", r"letter 'q'"),
    ("iso8601", r"letter 'i'"),
    ("---", r"holds no date or time letters"),
    ("yyyy-MM-dd'T", r"unterminated quote"),
])
def test_a_timestamp_format_the_parser_cannot_read_is_refused(fmt, problem):
    assert timestamp_format_problem(fmt) is not None
    with pytest.raises(SpecError, match=r"spec\.dataSchema\.timestampSpec\.format: .*" + problem):
        parse_spec(spec(timestamp_format=fmt))


@pytest.mark.parametrize("fmt", ["auto", "ISO", "millis", "posix", "yyyy-MM-dd HH:mm:ss.SSS", "dd/MMM/yyyy:HH:mm:ss Z"])
def test_good_timestamp_formats_pass(fmt):
    assert timestamp_format_problem(fmt) is None


# ------------------------------------------------------------------------- evaluation: Druid's rules


def values(expression: str, **columns) -> list:
    n = len(next(iter(columns.values())))
    return evaluate_to_array(compile_expression(expression), columns, n).to_pylist()


def test_arithmetic_on_text_reads_numbers_as_druid_does():
    added = pa.array(["7", "abc", None, " 2.5 "])
    assert values("added * 2", added=added) == [14.0, None, None, 5.0]
    assert values("added - 1", added=added) == [6.0, None, None, 1.5]
    assert values("added + 1", added=added) == ["71", "abc1", None, " 2.5 1"]  # + with text concatenates


def test_long_division_by_zero_is_an_error_and_safe_divide_is_null():
    with pytest.raises(ExpressionError, match="long division by zero"):
        values("a / b", a=pa.array([4, 1]), b=pa.array([2, 0]))
    with pytest.raises(ExpressionError, match="long division by zero"):
        values("a % 0", a=pa.array([4]))
    assert values("safe_divide(a, b)", a=pa.array([4, 1]), b=pa.array([2, 0])) == [2, None]
    assert values("a / b", a=pa.array([1.0, -1.0]), b=pa.array([0.0, 0.0])) == [float("inf"), float("-inf")]


def test_long_arithmetic_never_wraps():
    big = pa.array([2 ** 62, 1])
    with pytest.raises(ExpressionError, match="overflow"):
        values("a * 4", a=big)
    with pytest.raises(ExpressionError, match="overflow"):
        values("a + a + a", a=big)
    with pytest.raises(ExpressionError, match="overflow"):
        values("-a", a=pa.array([-(2 ** 63)]))


def test_a_cast_to_long_never_changes_a_number():
    assert values("cast(a, 'LONG')", a=pa.array(["9007199254740993", "12.9", "-12.9", "x", None])) == \
        [9007199254740993, 12, -12, None, None]
    for bad in (["1e300"], ["9223372036854775808"]):
        with pytest.raises(ExpressionError, match="LONG"):
            values("cast(a, 'LONG')", a=pa.array(bad))
    for bad in ([float("nan")], [float("inf")], [1e20]):
        with pytest.raises(ExpressionError, match="LONG"):
            values("cast(a, 'LONG')", a=pa.array(bad))
    with pytest.raises(ExpressionError, match="LONG range"):
        values("cast('1e300', 'LONG')", a=pa.array([1]))


def test_regexp_extract_without_a_match_is_null():
    assert values("regexp_extract(a, 'x(\\\\d+)', 1)", a=pa.array(["x12", "y", None])) == ["12", None, None]


def test_the_executor_compiles_the_checked_filter_tree():
    pred = compile_filter({"type": "bound", "dimension": "a", "lower": 2, "ordering": "numeric"})
    assert pred({"a": pa.array(["3", "abc", None, "1"])}, 4).to_pylist() == [True, False, False, False]
