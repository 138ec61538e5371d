"""Druid's arrays, lambdas and JSON functions, through the real compile + evaluate path: each function's
examples from docs/querying/math-expr.md and from Druid's own tests (ApplyFunctionTest, FunctionTest,
NestedDataExpressionsTest: the expressions and expected values are theirs, apache/druid, Apache-2.0), with
nulls; what validation refuses; and a JSON record with nested objects and arrays through the RowParser."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone

import pyarrow as pa
import pytest

from ingest_core.core.errors import SpecError
from ingest_core.core.expressions import ArrayLiteral, Column, Literal, parse_expression
from ingest_core.core.spec import parse_spec
from ingest_core.executor.expr_values import Json, build, expression_input
from ingest_core.executor.expressions import ExpressionError, compile_expression, evaluate_to_array
from ingest_core.executor.row_parser import RecordChunk, RowParser

# the bindings of Druid's ApplyFunctionTest / FunctionTest (one row)
ARRAYS = {"a": pa.array([["foo", "bar", "baz", "foobar"]]), "b": pa.array([[1, 2, 3, 4, 5]]),
          "c": pa.array([[3.1, 4.2, 5.3]]), "x": pa.array(["foo"]), "y": pa.array([2]), "z": pa.array([3.1]),
          "d": pa.array([[None]], pa.list_(pa.string())), "e": pa.array([[None, "foo", "bar"]]),
          "f": pa.array([[]], pa.list_(pa.string()))}


def one(text: str, columns=ARRAYS):
    return evaluate_to_array(compile_expression(text), columns, 1).to_pylist()[0]


def same(got, expected) -> bool:
    """Equal and of the same type; doubles to 1e-9 (Druid's tests compare doubles with a tolerance too)."""
    if isinstance(expected, list) and isinstance(got, list):
        return len(got) == len(expected) and all(same(g, e) for g, e in zip(got, expected))
    if isinstance(expected, float) and isinstance(got, float):
        return math.isclose(got, expected, rel_tol=1e-9)
    return got == expected and type(got) is type(expected)


APPLY = [  # ApplyFunctionTest
 ("map((x) -> concat(x, 'foo'), ['foo', 'bar', 'baz', 'foobar'])", ["foofoo", "barfoo", "bazfoo", "foobarfoo"]),
 ("map((x) -> concat(x, 'foo'), a)", ["foofoo", "barfoo", "bazfoo", "foobarfoo"]),
 ("map((x) -> x + 1, [1, 2, 3, 4, 5])", [2, 3, 4, 5, 6]),
 ("map((x) -> x + 1, b)", [2, 3, 4, 5, 6]),
 ("map((c) -> c + z, [3.1, 4.2, 5.3])", [6.2, 7.3, 8.4]),
 ("map((c) -> c + z, c)", [6.2, 7.3, 8.4]),
 ("map((x) -> x + 1, map((x) -> x + 1, b))", [3, 4, 5, 6, 7]),
 ("map((x) -> 1, [1, 2, 3, 4, 5])", [1] * 5),
 ("cartesian_map((x, y) -> concat(x, y), ['foo', 'bar', 'baz', 'foobar'], ['bar', 'baz'])",
  ["foobar", "foobaz", "barbar", "barbaz", "bazbar", "bazbaz", "foobarbar", "foobarbaz"]),
 ("cartesian_map((x, y, z) -> concat(concat(x, y), z), ['foo', 'bar', 'baz', 'foobar'], ['bar', 'baz'], ['omg'])",
  ["foobaromg", "foobazomg", "barbaromg", "barbazomg", "bazbaromg", "bazbazomg", "foobarbaromg", "foobarbazomg"]),
 ("cartesian_map((x, y) -> 1, [1, 2], [1, 2, 3])", [1] * 6),
 ("cartesian_map((x, y) -> concat(x, y), d, d)", [None]),
 ("cartesian_map((x, y) -> concat(x, y), d, f)", []),
 ("cartesian_map((x, y) -> concat(x, y), d, e)", [None, None, None]),
 ("cartesian_map((x, y) -> concat(x, y), e, e)",
  [None, None, None, None, "foofoo", "foobar", None, "barfoo", "barbar"]),
 ("filter((x) -> strlen(x) > 3, ['foo', 'bar', 'baz', 'foobar'])", ["foobar"]),
 ("filter((x) -> strlen(x) > 3, a)", ["foobar"]),
 ("filter((x) -> x > 2, [1, 2, 3, 4, 5])", [3, 4, 5]),
 ("filter((x) -> x > 2, b)", [3, 4, 5]),
 ("filter((x) -> array_contains([], x), ['a', 'b'])", None),
 ("filter((x) -> array_contains([], x), null)", None),
 ("fold((x, y) -> x + y, [1, 1, 1, 1, 1], 0)", 5),
 ("fold((b, acc) -> b * acc, map((b) -> b * 2, filter(b -> b > 3, b)), 1)", 80),
 ("fold((a, acc) -> concat(a, acc), a, '')", "foobarbazbarfoo"),
 ("fold((a, acc) -> array_append(acc, a), a, [])", ["foo", "bar", "baz", "foobar"]),
 ("fold((a, acc) -> array_append(acc, a), b, <LONG>[])", [1, 2, 3, 4, 5]),
 ("cartesian_fold((x, y, acc) -> x + y + acc, [1, 1, 1, 1, 1], [1, 1], 0)", 20),
 ("any(x -> x > 3, [1, 2, 3, 4])", 1), ("any(x -> x > 3, [1, 2, 3])", 0),
 ("any(x -> x, map(x -> x > 3, [1, 2, 3, 4]))", 1), ("any(x -> x, map(x -> x > 3, [1, 2, 3]))", 0),
 ("all(x -> x > 0, [1, 2, 3, 4])", 1), ("all(x -> x > 1, [1, 2, 3, 4])", 0),
 ("all(x -> x, map(x -> x > 0, [1, 2, 3, 4]))", 1), ("all(x -> x, map(x -> x > 1, [1, 2, 3, 4]))", 0),
 # scoping: a lambda's parameter hides the column of its name
 ("map(b -> b + 1, b)", [2, 3, 4, 5, 6]),
 ("fold((b, acc) -> acc + b, map(b -> b + 1, b), 0)", 20),
 ("fold((b, acc) -> acc + b, map(b -> b + 1, b), fold((b, acc) -> acc + b, map(b -> b + 1, b), 0))", 40),
 ("fold((b, acc) -> acc + b, map(b -> b + 1, b), 0) + fold((b, acc) -> acc + b, map(b -> b + 1, b), 0)", 40),
 ("fold((b, acc) -> acc + b, map(b -> b + 1, b), fold((b, acc) -> acc + b, map(b -> b + 1, b), 0) + "
  "fold((b, acc) -> acc + b, map(b -> b + 1, b), 0))", 60),
 # null and empty arrays
 ("map(x -> x + 1, null)", None), ("map(x -> x + 1, <LONG>[])", []), ("any(x -> x > 0, null)", 0),
 ("all(x -> x > 0, null)", 0), ("all(x -> x > 0, <LONG>[])", 1), ("fold((x, acc) -> x + acc, null, 0)", None),
 ("fold((x, acc) -> x + acc, <LONG>[], 7)", 7), ("cartesian_fold((x, y, acc) -> x + y + acc, [1], <LONG>[], 0)", []),
 # the accumulator keeps its initial value's type (Druid's ExprEval.ofType(accumulator type, ...))
 ("fold((x, acc) -> x + acc, [1.5, 1.5], 0)", 2),
]

ARRAY = [  # FunctionTest, and the doc's table
    ('array(1, 2, 3, 4)', [1, 2, 3, 4]),
    ("array(1, 2, 3, 'bar')", [1, 2, 3, None]),
    ('array(1.0)', [1.0]),
    ("array('foo', 'bar')", ['foo', 'bar']),
    # Druid's test binds a and b as typed arrays; list columns here are multi-value: array(a, b) is mapped
    ("array(['foo', 'bar', 'baz', 'foobar'], [1, 2, 3, 4, 5])",
     [['foo', 'bar', 'baz', 'foobar'], ['1', '2', '3', '4', '5']]),
    ('array_length([1,2,3])', 3),
    ('array_length(a)', 4),
    ('array_offset([1, 2, 3], 2)', 3),
    ('array_offset([1, 2, 3], 3)', None),
    ('array_offset(a, 2)', 'baz'),
    ('array_ordinal([1, 2, 3], 3)', 3),
    ('array_ordinal([1, 2, 3], 4)', None),
    ('array_ordinal(a, 3)', 'baz'),
    ('array_offset_of([1, 2, 3], 3)', 2),
    ('array_offset_of([1, 2, 3], 4)', None),
    ("array_offset_of(a, 'baz')", 2),
    ('array_ordinal_of([1, 2, 3], 3)', 3),
    ('array_ordinal_of([1, 2, 3], 4)', None),
    ("array_ordinal_of(a, 'baz')", 3),
    ('array_contains([1, 2, 3], 2)', 1),
    ('array_contains([1, 2, 3], 4)', 0),
    ('array_contains([1, 2, 3], [2, 3])', 1),
    ('array_contains([1, 2, 3], [3, 4])', 0),
    ('array_contains(b, [3, 4])', 1),
    ('array_contains(null, [3, 4])', None),
    ('array_contains(null, null)', None),
    ('array_contains([1, null, 2], null)', 1),
    ('array_contains([1, null, 2], [null])', 1),
    ('array_contains([1, 2], null)', 0),
    ('array_overlap([1, 2, 3], [2, 4, 6])', 1),
    ('array_overlap([1, 2, 3], [4, 5, 6])', 0),
    ('array_overlap(null, [4, 5, 6])', None),
    ('array_overlap([4, null], [4, 5, 6])', 1),
    ('array_overlap([4, 5, 6], null)', 0),
    ('array_overlap([4, 5, 6], [null])', 0),
    ('array_overlap([4, 5, null, 6], null)', 0),
    ('array_overlap([4, 5, null, 6], [null])', 1),
    ('array_append([1, 2, 3], 4)', [1, 2, 3, 4]),
    ("array_append([1, 2, 3], 'bar')", [1, 2, 3, None]),
    ('array_append([], 1)', ['1']),
    ('array_append(<LONG>[], 1)', [1]),
    ('array_concat([1, 2, 3], [2, 4, 6])', [1, 2, 3, 2, 4, 6]),
    ('array_concat([1, 2, 3], 4)', [1, 2, 3, 4]),
    ('array_concat(0, [1, 2, 3])', [0, 1, 2, 3]),
    ('array_concat(map(y -> y * 3, b), [1, 2, 3])', [3, 6, 9, 12, 15, 1, 2, 3]),
    ('array_concat(0, 1)', [0, 1]),
    ('array_set_add([1, 2, 3], 4)', [1, 2, 3, 4]),
    ("array_set_add([1, 2, 3], 'bar')", [None, 1, 2, 3]),
    ('array_set_add([1, 2, 2], 1)', [1, 2]),
    ('array_set_add([], 1)', ['1']),
    ('array_set_add(<LONG>[], 1)', [1]),
    ('array_set_add(<LONG>[], null)', [None]),
    ('array_set_add_all([1, 2, 3], [2, 4, 6])', [1, 2, 3, 4, 6]),
    ('array_set_add_all([1, 2, 3], 4)', [1, 2, 3, 4]),
    ('array_set_add_all(0, [1, 2, 3])', [0, 1, 2, 3]),
    ('array_set_add_all(map(y -> y * 3, b), [1, 2, 3])', [1, 2, 3, 6, 9, 12, 15]),
    ('array_set_add_all(0, 1)', [0, 1]),
    ("array_to_string([1, 2, 3], ',')", '1,2,3'),
    ("array_to_string([1], '|')", '1'),
    ("array_to_string(a, '|')", 'foo|bar|baz|foobar'),
    ("string_to_array('1,2,3', ',')", ['1', '2', '3']),
    ("string_to_array(null, ',')", None),
    ("string_to_array('1', ',')", ['1']),
    ("string_to_array(array_to_string(a, ','), ',')", ['foo', 'bar', 'baz', 'foobar']),
    ('array_slice([1, 2, 3, 4], 1, 3)', [2, 3]),
    ('array_slice([1.0, 2.1, 3.2, 4.3], 2)', [3.2, 4.3]),
    ("array_slice(['a', 'b', 'c', 'd'], 4, 6)", [None, None]),
    ('array_slice([1, 2, 3, 4], 2, 2)', []),
    ('array_slice([1, 2, 3, 4], 5, 7)', None),
    ('array_slice([1, 2, 3, 4], 2, 1)', None),
    ('array_prepend(4, [1, 2, 3])', [4, 1, 2, 3]),
    ("array_prepend('bar', [1, 2, 3])", [None, 1, 2, 3]),
    ('array_prepend(1, [])', ['1']),
    ('array_prepend(1, <LONG>[])', [1]),
    ('array_prepend(1, <DOUBLE>[])', [1.0]),
    ('scalar_in_array(2, [1, 2])', 1),
    ('scalar_in_array(3, [1, 2])', 0),
    ('scalar_in_array(null, [1, 2])', None),
    ('scalar_in_array(1, null)', 0),
    ('array_to_mv([1, 2])', ['1', '2']),
    ("string_to_array('a1b22c', '[0-9]+')", ['a', 'b', 'c']),
    ("string_to_array('abc', '')", ['a', 'b', 'c']),
    ("string_to_array('a,b,,', ',')", ['a', 'b']),
    ("array_to_string([1.0, null], '-')", '1.0-null'),
    # casts to array types (FunctionTest's testArrayCast / testArrayCastLegacy)
    ("cast([1, 2, 3], 'STRING_ARRAY')", ['1', '2', '3']),
    ("cast([1, 2, 3], 'DOUBLE_ARRAY')", [1.0, 2.0, 3.0]),
    ("cast(c, 'LONG_ARRAY')", [3, 4, 5]),
    ("cast(['1.0', '2.0', '3.0'], 'LONG_ARRAY')", [1, 2, 3]),
    ("cast(string_to_array(array_to_string(b, ','), ','), 'ARRAY<LONG>')", [1, 2, 3, 4, 5]),
    ("cast([1, 2, 3], 'ARRAY<STRING>')", ['1', '2', '3']),
    ("cast(c, 'ARRAY<LONG>')", [3, 4, 5]),
    ("cast(5, 'ARRAY<LONG>')", [5]),
    ("cast(null, 'ARRAY<LONG>')", None),
]

NEST = {"x": 100, "y": 200, "z": 300}
NESTER = {"x": ["a", "b", "c"], "y": {"a": "hello", "b": "world"}}
NESTERER = {"x": {"a1": [1, None, 3], "a2": [1.1, None, 3.3], "a3": ["a", None, "b", "100"]},
            "y": [{"x": 1, "y": 1.1}, {"x": 2, "y": 2.2}, {"x": 3, "y": 3.3}]}
# nested values as the row parser gives them to a transform (objects are JSON values)
JSON_COLUMNS = {"nest": expression_input([NEST]), "nester": expression_input([NESTER]),
                "nesterer": expression_input([NESTERER]), "long": pa.array([1234]), "string": pa.array(["abcdef"])}

JSON_CASES = [  # NestedDataExpressionsTest
    ("json_object('x',100,'y',200,'z',300)", NEST),
    ("json_object('x',array('a','b','c'),'y',json_object('a','hello','b','world'))", NESTER),
    ("json_keys(nest, '$.')", ['x', 'y', 'z']),
    ("json_keys(nester, '$.x')", ['0', '1', '2']),
    ("json_keys(nester, '$.y')", ['a', 'b']),
    ("json_keys(nester, '$.x.a')", None),
    ("json_keys(nester, '$.x.a.b')", None),
    ('json_paths(nest)', ['$.x', '$.y', '$.z']),
    ('json_paths(nester)', ['$.x', '$.y.a', '$.y.b']),
    ("json_value(nest, '$.x')", 100),
    ("json_value(nester, '$.x')", ['a', 'b', 'c']),
    ("json_value(nester, '$.x[1]')", 'b'),
    ("json_value(nester, '$.x[23]')", None),
    ("json_value(nester, '$.x[1].b')", None),
    ("json_value(nester, '$.y[1]')", None),
    ("json_value(nester, '$.y.a')", 'hello'),
    ("json_value(nester, '$.y.a', 'LONG')", None),
    ("json_value(nester, '$.y.a.b.c[12]')", None),
    ("json_value(long, '$')", 1234),
    ("json_value(long, '$', 'STRING')", '1234'),
    ("json_value(nest, '$.x', 'DOUBLE')", 100.0),
    ("json_value(nest, '$.x', 'STRING')", '100'),
    ("json_value(nesterer, '$.x.a1')", [1, None, 3]),
    ("json_value(nesterer, '$.x.a1', 'ARRAY<STRING>')", ['1', None, '3']),
    ("json_value(nesterer, '$.x.a1', 'ARRAY<DOUBLE>')", [1.0, None, 3.0]),
    ("json_value(nesterer, '$.x.a2')", [1.1, None, 3.3]),
    ("json_value(nesterer, '$.x.a2', 'ARRAY<LONG>')", [1, None, 3]),
    ("json_value(nesterer, '$.x.a2', 'ARRAY<STRING>')", ['1.1', None, '3.3']),
    ("json_value(nesterer, '$.x.a3')", ['a', None, 'b', '100']),
    ("json_value(nesterer, '$.x.a3', 'ARRAY<LONG>')", [None, None, None, 100]),
    ("json_value(nesterer, '$.y')", None),
    ("json_value(json_object('k1', array(1,2,3), 'k2', array('a', 'b', 'c')), '$.k1', 'ARRAY<STRING>')",
     ['1', '2', '3']),
    ('json_value(nester, array_offset(json_paths(nester), 0))', ['a', 'b', 'c']),
    ("json_query(nest, '$.x')", 100),
    ("json_query(nester, '$.x')", ['a', 'b', 'c']),
    ("json_query(nester, '$.x[1]')", 'b'),
    ("json_query(nester, '$.x[23]')", None),
    ("json_query(nester, '$.y.a')", 'hello'),
    ("json_query(long, '$')", 1234),
    ('json_query(nester, array_offset(json_paths(nester), 0))', ['a', 'b', 'c']),
    ("json_query_array(nest, '$.x')", [100]),
    ("json_query_array(nester, '$.x')", ['a', 'b', 'c']),
    ("json_query_array(nesterer, '$.y')", NESTERER["y"]),
    ("array_length(json_query_array(nesterer, '$.y'))", 3),
    ('parse_json(null)', None),
    ("parse_json('null')", None),
    ("try_parse_json('{')", None),
    ("try_parse_json('hello world')", None),
    ('parse_json(\'"hello world"\')', 'hello world'),
    ("parse_json('1')", 1),
    ("parse_json('true')", True),
    ('parse_json(\'{"foo":1}\')', {'foo': 1}),
    ('to_json_string(nest)', '{"x":100,"y":200,"z":300}'),
    ('parse_json(to_json_string(nest))', NEST),
    ('json_value(parse_json(\'{"x":100,"y":200,"z":300}\'), \'$.x\')', 100),
    ("to_json_string(json_object('x', nest))", '{"x":{"x":100,"y":200,"z":300}}'),
    ("to_json_string(json_object('xs', array(nest, nest)))",
     '{"xs":[{"x":100,"y":200,"z":300},{"x":100,"y":200,"z":300}]}'),
    ("array_to_string(json_query_array(nesterer, '$.y'), ';')", '{"x":1,"y":1.1};{"x":2,"y":2.2};{"x":3,"y":3.3}'),
    ('json_merge(\'{"a":1}\', parse_json(\'{"b":2}\'), json_object(\'a\', 3))', {'a': 3, 'b': 2}),
    ("map((o) -> json_value(o, '$.x'), json_query_array(nesterer, '$.y'))", [1, 2, 3]),
    ("json_value(string, '$')", 'abcdef'),
    ("json_value(string, '$.a')", None),
    ("json_value(null, '$.a')", None),
    ("json_keys(null, '$')", None),
    ('json_paths(null)', None),
    ('to_json_string(null)', None),
    ('to_json_string(array(1, 2))', '[1,2]'),
    ("to_json_string('a')", '"a"'),
]


@pytest.mark.parametrize("text,expected", APPLY)
def test_apply_functions(text, expected):
    assert same(one(text), expected), one(text)


@pytest.mark.parametrize("text,expected", ARRAY)
def test_array_functions(text, expected):
    assert same(one(text), expected), one(text)


@pytest.mark.parametrize("text,expected", JSON_CASES)
def test_json_functions(text, expected):
    assert same(one(text, JSON_COLUMNS), expected), one(text, JSON_COLUMNS)


def test_rows_of_arrays_with_nulls_and_outer_columns():
    columns = {"tags": pa.array([["b", "a"], None, [], ["x", None]]), "n": pa.array([1, 2, None, 4])}
    assert evaluate_to_array(compile_expression("map(t -> concat(t, n), tags)"), columns, 4).to_pylist() == \
        [["b1", "a1"], None, [], ["x4", None]]
    assert evaluate_to_array(compile_expression("array_length(tags)"), columns, 4).to_pylist() == [2, None, 0, 2]
    assert evaluate_to_array(compile_expression("array_append(tags, n)"), columns, 4).to_pylist() == \
        [["b", "a", "1"], None, [None], ["x", None, "4"]]
    assert evaluate_to_array(compile_expression("fold((t, acc) -> acc + n, tags, 0)"), columns, 4).to_pylist() == \
        [2, None, 0, 8]


@pytest.mark.parametrize("text,root", [
    ("[1, 2, 3]", ArrayLiteral("LONG", (1, 2, 3))),
    ("[1, 2.5, null]", ArrayLiteral("DOUBLE", (1.0, 2.5, None))),
    ("['a', null]", ArrayLiteral("STRING", ("a", None))),
    ("[]", ArrayLiteral("STRING", ())),
    ("<LONG>[]", ArrayLiteral("LONG", ())),
    ("<DOUBLE>[1]", ArrayLiteral("DOUBLE", (1.0,))),
    ("<STRING>['a', 1, 2.5]", ArrayLiteral("STRING", ("a", "1", "2.5"))),
    ("ARRAY<LONG>[1, '2']", ArrayLiteral("LONG", (1, 2))),
    ("'a\\'b\\n\\u00e9\\\\'", Literal("a'b\né\\")),
    ("1e3", Literal(1000.0)), ("1.", Literal(1.0)), ("Infinity", Literal(math.inf)),
    ('"a b"', Column("a b")), ("-9223372036854775808", Literal(-2 ** 63)), ("NULL", Column("NULL")),
])
def test_the_grammar(text, root):
    assert parse_expression(text).root == root


def test_lambda_parameters_are_not_columns():
    assert parse_expression("map((x) -> x + y, x)").columns == {"x", "y"}
    assert parse_expression("map(x -> x + y, tags)").columns == {"tags", "y"}
    assert parse_expression("fold((x, acc) -> x + acc, [1], 0)").columns == frozenset()


@pytest.mark.parametrize("text,message", [
    ("fold((x, y) -> x + 1, [1, 1, 1, 1, 1])", r"fold\(\) takes 3 arguments, got 2"),
    ("fold(() -> 1, [1, 1, 1, 1, 1], 0)",
     r"lambda expression argument count of 0 does not match the 2 arguments passed to it"),
    ("cartesian_fold(() -> 1, [1, 1, 1, 1, 1], [1, 1], 0)", r"argument count of 0 does not match the 3 arguments"),
    ("any((x) -> 1, [1, 2, 3, 4], y)", r"any\(\) takes 2 arguments, got 3"),
    ("all(() -> 0, [1, 2, 3, 4])", r"argument count of 0 does not match the 1 arguments"),
    ("map([1], [2])", r"map\(\): argument 1 must be a lambda"),
    ("upper(x -> x)", r"upper\(\) takes no lambda"),
    ("map((x, x) -> x, a)", r"names a parameter twice"),
    ("[1, y]", r"array literal elements must be constants"),
    ("[1, 'a']", r"mixes text and numbers"),
    ("array_slice(a, 'x')", r"argument 2 \(start\) is a number"),
    ("string_to_array(s, '(')", r"not a valid regular expression"),
    ("json_value(j, 'a.b')", r"must start with '\$'"),
    ("json_value(j, '$.a', 'BOOLEAN')", r"returning type 'BOOLEAN' is not supported"),
    ("json_object('a', 1, 'b')", r"alternating keys and values"),
    ("json_object(1, 2)", r"key 1 must be text"),
    ("parse_json('{')", r"is not JSON"),
    ("array_length()", r"array_length\(\) takes 1 argument, got 0"),
    ("9223372036854775808", r"outside the LONG range"), ("--9223372036854775808", r"outside the LONG range"),
])
def test_validation_refuses(text, message):
    with pytest.raises(ExpressionError, match=message):
        compile_expression(text)


def test_spec_validation_names_the_transform():
    raw = {"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "w", "timestampSpec": {"column": "ts"}, "dimensionsSpec": {"dimensions": ["a"]},
                       "transformSpec": {"transforms": [{"type": "expression", "name": "m",
                                                          "expression": "map((x, y) -> x, a)"}]}},
        "ioConfig": {"topic": "t", "consumerProperties": {"bootstrap.servers": "localhost:9092"}}}}
    with pytest.raises(SpecError, match=r"transform 'm': .*map\(\): lambda expression argument count of 2"):
        parse_spec(raw)


@pytest.mark.parametrize("text", ["parse_json(s)", "array_offset(json_paths(j), 1.5e400)"])
def test_a_value_a_function_cannot_take_fails_by_name(text):
    with pytest.raises(ExpressionError, match=r"parse_json|array_offset"):
        evaluate_to_array(compile_expression(text), {"s": pa.array(["{"]), "j": expression_input([{"a": 1}])}, 1)


def _nested_spec(transforms: list[dict], dimensions: list, flt: dict | None = None) -> object:
    return parse_spec({"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "n", "timestampSpec": {"column": "ts", "format": "auto"},
                       "dimensionsSpec": {"dimensions": dimensions},
                       "transformSpec": {"transforms": transforms, **({"filter": flt} if flt else {})},
                       "granularitySpec": {"segmentGranularity": "HOUR"}},
        "ioConfig": {"topic": "t", "inputFormat": {"type": "json"},
                     "consumerProperties": {"bootstrap.servers": "x:1"}}}})


def test_row_parser_gives_transforms_nested_objects_and_arrays():
    """A JSON record's object field is a JSON value and its list fields arrays (Druid's ExpressionTransform);
    an array result is a multi-value string dimension (sorted, as Druid's default SORTED_ARRAY); a row whose
    expression fails is that row's parse exception only."""
    transforms = [
        {"type": "expression", "name": "city", "expression": "json_value(user, '$.address.city')"},
        {"type": "expression", "name": "age", "expression": "json_value(user, '$.age', 'LONG') + 1"},
        {"type": "expression", "name": "first_tag", "expression": "array_offset(tags, 0)"},
        {"type": "expression", "name": "upper_tags", "expression": "map(t -> upper(t), tags)"},
        {"type": "expression", "name": "total", "expression": "fold((x, acc) -> x + acc, scores, 0)"},
        {"type": "expression", "name": "keys", "expression": "json_keys(user, '$')"},
        {"type": "expression", "name": "parsed", "expression": "json_value(parse_json(raw), '$.k')"},
        {"type": "expression", "name": "address", "expression": "json_query(user, '$.address')"},
        {"type": "expression", "name": "doubled", "expression": "map(x -> x * 2, scores)"},
    ]
    dims = ["city", {"type": "long", "name": "age"}, "first_tag", "upper_tags", {"type": "long", "name": "total"},
            "keys", "parsed", {"type": "json", "name": "user"}, {"type": "json", "name": "address"}, "doubled"]
    parser = RowParser(_nested_spec(transforms, dims), datetime(2026, 1, 1, tzinfo=timezone.utc))
    records = [
        {"ts": "2026-01-01T00:00:00Z", "user": {"age": 41, "address": {"city": "Oslo"}}, "tags": ["b", "a"],
         "scores": [1, 2, 3], "raw": '{"k": "v"}'},
        {"ts": "2026-01-01T00:00:01Z", "user": {"age": "x"}, "tags": ["z"], "scores": [1.5, 2.5], "raw": "{}"},
        {"ts": "2026-01-01T00:00:02Z", "tags": [], "scores": None, "raw": "not json"},  # parse_json fails here
        {"ts": "2026-01-01T00:00:03Z", "user": {"age": 7}, "tags": "solo", "scores": [9]},
    ]
    parsed = parser.parse(RecordChunk("t", 0, range(len(records)), [json.dumps(r).encode() for r in records]))
    rows = parsed.table.to_pylist()
    assert [(r["city"], r["age"], r["first_tag"], r["upper_tags"], r["total"], r["keys"], r["parsed"])
            for r in rows] == [
        ("Oslo", 42, "b", '["A","B"]', 6, '["address","age"]', "v"),
        (None, None, "z", "Z", 3, "age", None),  # the accumulator is read as LONG (0's type): 1.5, then 2.5 + 1
        (None, 8, "solo", "SOLO", 9, "age", None),  # a text field is a one-element array for array functions
    ]
    assert json.loads(rows[0]["user"]) == records[0]["user"]
    assert [r["address"] for r in rows] == ['{"city":"Oslo"}', None, None]
    # each row's own array type, whatever its neighbours' (a LONG array beside a DOUBLE one)
    assert [r["doubled"] for r in rows] == ['["2","4","6"]', '["3.0","5.0"]', "18"]
    assert parsed.stats.unparseable == 1 and "parse_json" in parsed.exceptions[0].message


@pytest.mark.parametrize("text,expected", [
    ("upper(tags)", [["A", "B"], ["C"], None, []]),  # map((tags) -> upper(tags), tags)
    ("concat(tags, s)", [["ap", "bp"], ["cq"], None, []]),
    ("tags + '!'", [["a!", "b!"], ["c!"], None, []]),
    ("concat(tags, other)", [["ax", "ay", "bx", "by"], ["cz"], None, []]),  # two: their cartesian product
    ("array_length(tags)", [2, 1, None, 0]),  # read as an array: not mapped
    ("concat(tags, array_length(tags))", ["[a, b]2", "[c]1", None, "[]0"]),  # both: Druid's text of the array
    ("strlen(s)", [1, 1, 1, 1]),
])
def test_a_multi_value_column_read_as_a_scalar_is_mapped(text, expected):
    """Druid's rule for multi-value columns (math-expr.md): a scalar use is mapped over the values."""
    columns = {"tags": expression_input([["a", "b"], ["c"], None, []]), "s": pa.array(["p", "q", "r", "s"]),
               "other": expression_input([["x", "y"], ["z"], ["w"], ["v"]])}
    assert evaluate_to_array(compile_expression(text), columns, 4).to_pylist() == expected


def test_a_json_value_read_as_a_scalar():
    columns = {"j": expression_input([{"a": 1, "n": 5}, {"a": "x", "n": 6}])}
    assert evaluate_to_array(compile_expression("concat(j, '')"), columns, 2).to_pylist() == \
        ['{"a":1,"n":5}', '{"a":"x","n":6}']
    assert evaluate_to_array(compile_expression("json_query(j, '$.n') + 1"), columns, 2).to_pylist() == [6, 7]
    assert evaluate_to_array(compile_expression("json_query(j, '$.a') == 'x'"), columns, 2).to_pylist() == [0, 1]


@pytest.mark.parametrize("text", ["map(x -> concat(x, n), v)", "filter(x -> x > 'b', v)", "any(x -> x == 'c', v)",
                                  "all(x -> notnull(x), v)", "map(x -> x > 'a', v)", "array_length(v)"])
def test_list_columns_take_the_vectorized_path_with_the_same_results(text):
    """A list column is mapped with Arrow (its elements flattened); other arrays (here JSON lists) row by row in
    Python: the same values either way."""
    lists = [["a", "b"], None, [], ["c", None, "d"], ["b"]]
    n = pa.array([1, 2, 3, None, 5])
    vectorized = evaluate_to_array(compile_expression(text), {"n": n, "v": pa.array(lists)}, 5).to_pylist()
    json_lists = build([None if x is None else Json(x) for x in lists], "JSON")
    assert vectorized == evaluate_to_array(compile_expression(text), {"n": n, "v": json_lists}, 5).to_pylist()


@pytest.mark.parametrize("text,expected", [  # Druid's ParserTest.testApplyUnapplied rewrites, evaluated
    ("array_to_string(concat(x, 'hello'), ',')", ["ahello,bhello", "chello"]),  # the argument mapped on its own
    ("map(v -> concat(v, y), x)", [["a1", "a2", "b1", "b2"], ["c3"]]),  # y lifted: cartesian_map((v, y) -> ...)
    ("map(v -> v, concat(x, '!'))", [["a!", "b!"], ["c!"]]),
    ("fold((v, acc) -> concat(acc, v, y), x, '')", ["a1a2b1b2", "c3"]),  # cartesian_fold((v, y, acc) -> ...)
    ("filter(v -> v > y, x)", [[1, 1, 1, 1], [1]]),  # filter(_ -> _, cartesian_map(...)): Druid's rewrite
    ("array_overlap(nvl(x, 'other'), ['a', 'b', 'other'])", [1, 0]),
    ("case_searched((x == 'b'), 'b', (x == 'g'), 'g', 'Other')", [["Other", "b"], ["Other"]]),
    ("cast(x, 'LONG_ARRAY')", [[None, None], [None]]),  # an array cast reads the column as an array
])
def test_druid_rewrites_of_multi_value_columns(text, expected):
    columns = {"x": expression_input([["a", "b"], ["c"]]), "y": expression_input([["1", "2"], ["3"]])}
    assert evaluate_to_array(compile_expression(text), columns, 2).to_pylist() == expected


def test_the_filter_reads_a_transforms_array_as_its_dimension_text():
    transforms = [{"type": "expression", "name": "up", "expression": "upper(tags)"},
                  {"type": "expression", "name": "first", "expression": "json_value(user, '$.name')"}]
    flt = {"type": "or", "fields": [{"type": "selector", "dimension": "up", "value": "A"},
                                    {"type": "selector", "dimension": "first", "value": "bo"}]}
    records = [{"ts": "2026-01-01T00:00:00Z", "tags": ["a"], "user": {"name": "al"}},
               {"ts": "2026-01-01T00:00:01Z", "tags": ["a", "b"], "user": {"name": "bo"}},
               {"ts": "2026-01-01T00:00:02Z", "tags": ["c", "d"], "user": {"name": "cy"}}]
    parsed = RowParser(_nested_spec(transforms, ["up", "first"], flt), datetime(2026, 1, 1, tzinfo=timezone.utc)).parse(
        RecordChunk("t", 0, range(3), [json.dumps(r).encode() for r in records]))
    assert [(r["up"], r["first"]) for r in parsed.table.to_pylist()] == [("A", "al"), ('["A","B"]', "bo")]
    assert parsed.stats.unparseable == 0 and parsed.stats.thrown_away == 1


@pytest.mark.parametrize("path,expected", [  # Druid's NestedPathFinder.parseJsonPath
    ("$", {"a b": {"c.d": [10, 20]}, "x-y": 1}), ("$.", {"a b": {"c.d": [10, 20]}, "x-y": 1}),
    ("$.x-y", 1), ("$.a b", {"c.d": [10, 20]}), ("$['a b']['c.d'][1]", 20), ("$.a b['c.d']", [10, 20]),
    ("$.nope[3]", None),
])
def test_json_paths_as_druid_reads_them(path, expected):
    columns = {"j": expression_input([{"a b": {"c.d": [10, 20]}, "x-y": 1}])}
    quoted = path.replace("'", "\\'")  # a quote in an expression's string literal is escaped
    assert one(f"json_query(j, '{quoted}')", columns) == expected


@pytest.mark.parametrize("path", ["$.a..b", "$.a[-1]", "$.a[x]", "$x", "$['a", "$.a[0]b"])
def test_json_paths_druid_refuses_are_refused_when_validated(path):
    with pytest.raises(ExpressionError, match="JSONPath"):
        compile_expression("json_value(j, '" + path.replace("'", "\\'") + "')")


def test_json_paths_names_fields_as_druid_normalizes_them():
    columns = {"j": expression_input([{"a b": {"c.d": [10, 20]}, "l": [{"k": 1}, 2]}]), "n": pa.array([5])}
    assert one("json_paths(j)", columns) == ["$.a b['c.d']", "$.l[0].k", "$.l[1]"]
    assert one("json_paths(n)", columns) == ["$."]


@pytest.mark.parametrize("text,expected", [
    ("array_contains(json_query_array(j, '$.y'), json_query(j, '$.y[0]'))", 1),
    ("array_set_add_all(json_query_array(j, '$.y'), json_query_array(j, '$.y'))", [{"x": 1}, {"x": 2}]),
    ("array_append(json_query_array(j, '$.y'), json_object('z', 3))", [{"x": 1}, {"x": 2}, {"x": 1}, {"z": 3}]),
    ("map(o -> json_value(o, '$.x') * 10, json_query_array(j, '$.y'))", [10, 20, 10]),
    ("array_length(filter(o -> json_value(o, '$.x') > 1, json_query_array(j, '$.y')))", 1),
])
def test_arrays_of_json_objects(text, expected):
    assert one(text, {"j": expression_input([{"y": [{"x": 1}, {"x": 2}, {"x": 1}]}])}) == expected


def test_an_input_number_past_the_long_range_reads_as_a_double_never_an_overflow():
    from ingest_core.executor.expr_values import expression_input

    assert expression_input([1, 2 ** 70, None]).to_pylist() == [1.0, float(2 ** 70), None]
    assert expression_input([[1, -(2 ** 64)]]).to_pylist() == [[1.0, -float(2 ** 64)]]
