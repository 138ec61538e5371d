"""The subset of Druid's expression language used by `transformSpec.transforms`, compiled to vectorized
pyarrow compute functions.

Supported (anything else is rejected when the spec is validated, naming what is not supported):
  literals     123, 1.5, 'text', null
  columns      name, "quoted name"; `__time` is the row timestamp in epoch milliseconds
  operators    unary - and !, ^, * / %, + -, < <= > >= == !=, &&, ||  (Druid's precedence; long / long is
               integer division; comparisons and logic yield 1 or 0)
  functions    see FUNCTIONS below (concat, upper, lower, substring, replace, nvl, if, case_searched, cast,
               like, regexp_extract, timestamp, timestamp_floor, timestamp_extract, ...)

A compiled expression is a function from a column lookup (name -> pyarrow array) to a pyarrow array.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.executor import buckets

Columns = Mapping[str, pa.Array]
Compiled = Callable[[Columns, int], Any]  # (columns, row count) -> pa.Array or a Python scalar


class ExpressionError(ValueError):
    """An expression that cannot be parsed or uses something unsupported."""


_TOKEN = re.compile(r"""
    \s*(?:
      (?P<num>\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?)
     |(?P<str>'(?:[^'\\]|\\.)*')
     |(?P<qid>"(?:[^"\\]|\\.)*")
     |(?P<id>[A-Za-z_$][A-Za-z0-9_$.]*)
     |(?P<op><=|>=|==|!=|&&|\|\||[-+*/%^<>!(),])
    )""", re.VERBOSE)


def _tokenize(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ExpressionError(f"cannot read expression {text!r} at position {pos}: {text[pos:pos + 10]!r}")
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


# ------------------------------------------------------------------------------------ value helpers


def _arr(v: Any, n: int) -> pa.Array:
    if isinstance(v, (pa.Array, pa.ChunkedArray)):
        return v
    return pa.array([v] * n) if v is not None else pa.nulls(n)


def _is_arrow(v: Any) -> bool:
    return isinstance(v, (pa.Array, pa.ChunkedArray))


def _lift(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Apply a pyarrow compute function to arrays or Python scalars."""
    def call(*args: Any) -> Any:
        if not any(_is_arrow(a) for a in args):
            if any(a is None for a in args):
                return None
            return fn(*[pa.scalar(a) for a in args]).as_py()
        return fn(*[a if _is_arrow(a) else (pa.scalar(a) if a is not None else pa.scalar(None, pa.null())) for a in args])
    return call


def _type_of(v: Any) -> pa.DataType:
    if _is_arrow(v):
        return v.type
    if isinstance(v, bool):
        return pa.bool_()
    if isinstance(v, int):
        return pa.int64()
    if isinstance(v, float):
        return pa.float64()
    if v is None:
        return pa.null()
    return pa.string()


def _as_bool(v: Any, n: int) -> Any:
    t = _type_of(v)
    if pa.types.is_boolean(t):
        return v
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return _lift(pc.greater)(v, 0)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _lift(pc.equal)(_lift(pc.utf8_lower)(v), "true")
    if pa.types.is_null(t):
        return v
    raise ExpressionError(f"cannot use a value of type {t} as a condition")


def _as_long(v: Any) -> Any:
    t = _type_of(v)
    if pa.types.is_boolean(t):
        return int(v) if not _is_arrow(v) else pc.cast(v, pa.int64())
    return v


def _to_long(v: Any) -> Any:
    if not _is_arrow(v):
        if v is None:
            return None
        try:
            return int(float(v)) if not isinstance(v, bool) else int(v)
        except ValueError:
            return None
    if pa.types.is_string(v.type) or pa.types.is_large_string(v.type):
        return pc.cast(_to_double(v), pa.int64(), safe=False)
    if pa.types.is_floating(v.type):
        return pc.cast(pc.trunc(v), pa.int64(), safe=False)
    return pc.cast(v, pa.int64())


def _to_double(v: Any) -> Any:
    if not _is_arrow(v):
        if v is None:
            return None
        try:
            return float(v)
        except ValueError:
            return None
    if pa.types.is_string(v.type) or pa.types.is_large_string(v.type):
        ok = pc.match_substring_regex(v, r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$")
        cleaned = pc.if_else(ok, pc.utf8_trim_whitespace(v), pa.scalar(None, pa.string()))
        return pc.cast(cleaned, pa.float64())
    return pc.cast(v, pa.float64())


def _to_string(v: Any) -> Any:
    if not _is_arrow(v):
        return None if v is None else (str(v).lower() if isinstance(v, bool) else str(v))
    return v if pa.types.is_string(v.type) else pc.cast(v, pa.string())


def _arith(name: str) -> Callable[[Any, Any], Any]:
    fn = {"+": pc.add, "-": pc.subtract, "*": pc.multiply, "/": pc.divide, "%": None, "^": pc.power}[name]

    def op(a: Any, b: Any) -> Any:
        a, b = _as_long(a), _as_long(b)
        ta, tb = _type_of(a), _type_of(b)
        if name == "+" and (pa.types.is_string(ta) or pa.types.is_string(tb)):
            return _lift(pc.binary_join_element_wise)(_to_string(a), _to_string(b), "")
        if name == "%":
            if pa.types.is_integer(ta) and pa.types.is_integer(tb):
                # Java's remainder keeps the dividend's sign
                q = _lift(pc.divide)(a, b)
                return _lift(pc.subtract)(a, _lift(pc.multiply)(q, b))
            q = _lift(pc.trunc)(_lift(pc.divide)(_to_double(a), _to_double(b)))
            return _lift(pc.subtract)(_to_double(a), _lift(pc.multiply)(q, _to_double(b)))
        if name == "/" and pa.types.is_integer(ta) and pa.types.is_integer(tb):
            return _lift(pc.divide)(a, b)  # integer division truncates toward zero, as in Java
        if name == "^":
            return _lift(pc.power)(_to_double(a), _to_double(b))
        return _lift(fn)(a, b)
    return op


def _compare(name: str) -> Callable[[Any, Any], Any]:
    fn = {"<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal,
          "==": pc.equal, "!=": pc.not_equal}[name]

    def op(a: Any, b: Any) -> Any:
        a, b = _as_long(a), _as_long(b)
        ta, tb = _type_of(a), _type_of(b)
        numeric = lambda t: pa.types.is_integer(t) or pa.types.is_floating(t)  # noqa: E731
        if numeric(ta) != numeric(tb) and not (pa.types.is_null(ta) or pa.types.is_null(tb)):
            a, b = _to_double(a), _to_double(b)
        return _lift(fn)(a, b)
    return op


# ------------------------------------------------------------------------------------ functions


def _f_concat(n: int, *args: Any) -> Any:
    return _lift(pc.binary_join_element_wise)(*[_to_string(a) for a in args], "")


def _f_substring(n: int, s: Any, index: Any, length: Any = None) -> Any:
    if _is_arrow(index) or _is_arrow(length):
        raise ExpressionError("substring: index and length must be constants")
    start = int(index)
    stop = None if length is None or int(length) < 0 else start + int(length)
    return _lift(lambda x: pc.utf8_slice_codeunits(x, start, stop if stop is not None else 2**31 - 1))(_to_string(s))


def _f_replace(n: int, s: Any, pattern: Any, replacement: Any) -> Any:
    return _lift(lambda x: pc.replace_substring(x, str(pattern), str(replacement)))(_to_string(s))


def _f_nvl(n: int, a: Any, b: Any) -> Any:
    if not _is_arrow(a):
        return b if a is None else a
    return pc.coalesce(a, b if _is_arrow(b) else pa.scalar(b, a.type) if b is not None else pa.scalar(None, a.type))


def _f_if(n: int, cond: Any, a: Any, b: Any) -> Any:
    c = _as_bool(cond, n)
    if not _is_arrow(c) and not _is_arrow(a) and not _is_arrow(b):
        return a if c else b
    a, b = _unify(a, b, n)
    return pc.if_else(pc.fill_null(_arr(c, n), False), a, b)


def _unify(a: Any, b: Any, n: int) -> tuple[pa.Array, pa.Array]:
    ta, tb = _type_of(a), _type_of(b)
    if ta != tb and not pa.types.is_null(ta) and not pa.types.is_null(tb):
        if pa.types.is_string(ta) or pa.types.is_string(tb):
            a, b = _to_string(a), _to_string(b)
        else:
            a, b = _to_double(a), _to_double(b)
    aa, bb = _arr(a, n), _arr(b, n)
    if pa.types.is_null(aa.type):
        aa = pa.nulls(n, bb.type)
    if pa.types.is_null(bb.type):
        bb = pa.nulls(n, aa.type)
    return aa, bb


def _f_case_searched(n: int, *args: Any) -> Any:
    if len(args) < 2:
        raise ExpressionError("case_searched needs condition, result pairs")
    otherwise = args[-1] if len(args) % 2 == 1 else None
    pairs = list(zip(args[0:len(args) - (len(args) % 2):2], args[1::2]))
    result = otherwise
    for cond, value in reversed(pairs):
        result = _f_if(n, cond, value, result)
    return result


def _f_cast(n: int, v: Any, to: Any) -> Any:
    kind = str(to).upper()
    if kind == "LONG":
        return _to_long(v)
    if kind in ("DOUBLE", "FLOAT"):
        return _to_double(v)
    if kind == "STRING":
        return _to_string(v)
    raise ExpressionError(f"cast to {to!r} is not supported; use 'LONG', 'DOUBLE' or 'STRING'")


def _f_timestamp_floor(n: int, t: Any, period: Any) -> Any:
    from ingest_core.core.granularity import Granularity
    from ingest_core.core.periods import Period

    gran = Granularity(str(period), Period.parse(str(period)))
    millis = _to_long(t)
    ts = pc.cast(_arr(millis, n), pa.timestamp("ms", tz="UTC"))
    return pc.cast(pc.cast(buckets.floor(gran, ts), pa.timestamp("ms", tz="UTC")), pa.int64())


def _f_timestamp(n: int, s: Any, fmt: Any = None) -> Any:
    from ingest_core.executor.timestamps import timestamp_parser

    parse = timestamp_parser(str(fmt) if fmt is not None else "auto")

    def one(x: Any) -> int | None:
        try:
            return None if x is None else parse(x)
        except (ValueError, TypeError):
            return None
    if not _is_arrow(s):
        return one(s)
    return pa.array([one(x) for x in s.to_pylist()], pa.int64())


_TIME_UNITS = {"EPOCH": None, "SECOND": pc.second, "MINUTE": pc.minute, "HOUR": pc.hour, "DAY": pc.day,
               "DOW": lambda t: pc.add(pc.day_of_week(t), 1), "DOY": pc.day_of_year, "WEEK": pc.iso_week,
               "MONTH": pc.month, "QUARTER": pc.quarter, "YEAR": pc.year}


def _f_timestamp_extract(n: int, t: Any, unit: Any) -> Any:
    u = str(unit).upper()
    if u not in _TIME_UNITS:
        raise ExpressionError(f"timestamp_extract unit {unit!r} is not supported; use one of {', '.join(_TIME_UNITS)}")
    millis = _to_long(t)
    if u == "EPOCH":
        return _lift(pc.divide)(millis, 1000)
    ts = pc.cast(_arr(millis, n), pa.timestamp("ms", tz="UTC"))
    return pc.cast(_TIME_UNITS[u](ts), pa.int64())


def _f_regexp_extract(n: int, s: Any, pattern: Any, index: Any = 0) -> Any:
    rx = re.compile(str(pattern))
    group = int(index)

    def one(x: str | None) -> str | None:
        if x is None:
            return None
        m = rx.search(x)
        return m.group(group) if m else None
    s = _to_string(s)
    if not _is_arrow(s):
        return one(s)
    return pa.array([one(x) for x in s.to_pylist()], pa.string())


def _like_to_regex(pattern: str, escape: str | None = None) -> str:
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if escape and ch == escape and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return "^" + "".join(out) + "$"


def _f_like(n: int, s: Any, pattern: Any, escape: Any = None) -> Any:
    rx = _like_to_regex(str(pattern), None if escape is None else str(escape))
    return _lift(lambda x: pc.match_substring_regex(x, rx))(_to_string(s))


def _f_regexp_like(n: int, s: Any, pattern: Any) -> Any:
    return _lift(lambda x: pc.match_substring_regex(x, str(pattern)))(_to_string(s))


def _f_round(n: int, x: Any, scale: Any = 0) -> Any:
    return _lift(lambda v: pc.round(v, int(scale)))(_to_double(x)) if _type_of(x) != pa.int64() else x


def _f_greatest(n: int, first: Any, *rest: Any) -> Any:
    return _lift(pc.max_element_wise)(first, *rest)


def _f_least(n: int, first: Any, *rest: Any) -> Any:
    return _lift(pc.min_element_wise)(first, *rest)


def _f_isnull(n: int, x: Any) -> Any:
    return (x is None) if not _is_arrow(x) else pc.is_null(x)


def _f_notnull(n: int, x: Any) -> Any:
    return (x is not None) if not _is_arrow(x) else pc.is_valid(x)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "concat": _f_concat,
    "upper": lambda n, s: _lift(pc.utf8_upper)(_to_string(s)),
    "lower": lambda n, s: _lift(pc.utf8_lower)(_to_string(s)),
    "strlen": lambda n, s: _lift(lambda x: pc.cast(pc.utf8_length(x), pa.int64()))(_to_string(s)),
    "trim": lambda n, s: _lift(pc.utf8_trim_whitespace)(_to_string(s)),
    "ltrim": lambda n, s: _lift(pc.utf8_ltrim_whitespace)(_to_string(s)),
    "rtrim": lambda n, s: _lift(pc.utf8_rtrim_whitespace)(_to_string(s)),
    "substring": _f_substring,
    "replace": _f_replace,
    "nvl": _f_nvl,
    "if": _f_if,
    "case_searched": _f_case_searched,
    "cast": _f_cast,
    "abs": lambda n, x: _lift(pc.abs)(x),
    "floor": lambda n, x: _lift(pc.floor)(x) if not pa.types.is_integer(_type_of(x)) else x,
    "ceil": lambda n, x: _lift(pc.ceil)(x) if not pa.types.is_integer(_type_of(x)) else x,
    "round": _f_round,
    "greatest": _f_greatest,
    "least": _f_least,
    "isnull": _f_isnull,
    "notnull": _f_notnull,
    "like": _f_like,
    "regexp_like": _f_regexp_like,
    "regexp_extract": _f_regexp_extract,
    "timestamp": _f_timestamp,
    "timestamp_floor": _f_timestamp_floor,
    "timestamp_extract": _f_timestamp_extract,
}


# ------------------------------------------------------------------------------------ parser


@dataclass
class Expression:
    """A parsed expression: its source text, the columns it reads, and a vectorized evaluator."""

    text: str
    columns: frozenset[str]
    evaluate: Compiled

    def __call__(self, columns: Columns, num_rows: int) -> Any:
        return self.evaluate(columns, num_rows)


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = _tokenize(text)
        self.i = 0
        self.columns: set[str] = set()

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value):
            found = "the end" if tok is None else repr(tok[1])
            raise ExpressionError(f"in expression {self.text!r}: expected {value or 'more input'}, found {found}")
        self.i += 1
        return tok

    def at(self, *values: str) -> bool:
        tok = self.peek()
        return tok is not None and tok[0] == "op" and tok[1] in values

    def parse(self) -> Compiled:
        node = self.or_()
        if self.peek() is not None:
            raise ExpressionError(f"in expression {self.text!r}: unexpected {self.peek()[1]!r}")
        return node

    def _binary(self, sub: Callable[[], Compiled], ops: tuple[str, ...], make: Callable[[str], Callable]) -> Compiled:
        left = sub()
        while self.at(*ops):
            op = make(self.take()[1])
            right = sub()
            left = (lambda l, r, o: lambda cols, n: o(l(cols, n), r(cols, n)))(left, right, op)
        return left

    def or_(self) -> Compiled:
        def logic(op: str) -> Callable:
            fn = pc.or_kleene if op == "||" else pc.and_kleene

            def apply(a: Any, b: Any) -> Any:
                return _as_long(_lift(fn)(_as_bool(a, 0), _as_bool(b, 0)))
            return apply
        return self._binary(lambda: self._binary(self.comparison, ("&&",), logic), ("||",), logic)

    def comparison(self) -> Compiled:
        left = self.additive()
        if self.at("<", "<=", ">", ">=", "==", "!="):
            op = _compare(self.take()[1])
            right = self.additive()
            return lambda cols, n: _as_long(op(left(cols, n), right(cols, n)))
        return left

    def additive(self) -> Compiled:
        return self._binary(self.multiplicative, ("+", "-"), _arith)

    def multiplicative(self) -> Compiled:
        return self._binary(self.unary, ("*", "/", "%"), _arith)

    def unary(self) -> Compiled:
        if self.at("-"):
            self.take()
            inner = self.unary()
            return lambda cols, n: _lift(pc.negate)(_as_long(inner(cols, n)))
        if self.at("!"):
            self.take()
            inner = self.unary()
            return lambda cols, n: _as_long(_lift(pc.invert)(_as_bool(inner(cols, n), n)))
        base = self.primary()
        if self.at("^"):
            self.take()
            exp = self.unary()
            pw = _arith("^")
            return lambda cols, n: pw(base(cols, n), exp(cols, n))
        return base

    def primary(self) -> Compiled:
        kind, value = self.take()
        if kind == "num":
            num: Any = float(value) if any(c in value for c in ".eE") else int(value)
            return lambda cols, n: num
        if kind == "str":
            text = re.sub(r"\\(.)", r"\1", value[1:-1])
            return lambda cols, n: text
        if kind == "op" and value == "(":
            inner = self.or_()
            self.take(")")
            return inner
        if kind in ("id", "qid"):
            name = re.sub(r"\\(.)", r"\1", value[1:-1]) if kind == "qid" else value
            if kind == "id" and name == "null":
                return lambda cols, n: None
            if kind == "id" and self.at("("):
                return self.call(name)
            self.columns.add(name)
            return lambda cols, n: cols[name] if name in cols else pa.nulls(n)
        raise ExpressionError(f"in expression {self.text!r}: unexpected {value!r}")

    def call(self, name: str) -> Compiled:
        fn = FUNCTIONS.get(name.lower())
        if fn is None:
            raise ExpressionError(
                f"function {name}() is not supported in transforms; supported: {', '.join(sorted(FUNCTIONS))}")
        self.take("(")
        args: list[Compiled] = []
        if not self.at(")"):
            args.append(self.or_())
            while self.at(","):
                self.take()
                args.append(self.or_())
        self.take(")")
        text = self.text
        try:  # the arity is known now: `ingest validate` reports it, not the Spark job
            inspect.signature(fn).bind(0, *args)
        except TypeError:
            raise ExpressionError(f"in expression {text!r}: {name}() takes {_arity(fn)}, "
                                  f"got {len(args)}") from None

        def apply(cols: Columns, n: int) -> Any:
            try:
                return fn(n, *[a(cols, n) for a in args])
            except ExpressionError:
                raise
            except (TypeError, IndexError, ValueError, pa.ArrowException) as exc:
                # a value the function cannot take (a string to abs(), a group the pattern lacks): say which call
                raise ExpressionError(f"in expression {text!r}: {name}(): {exc}") from None
        return apply


def _arity(fn: Callable[..., Any]) -> str:
    """How many arguments `fn` takes, in words (its first parameter is the row count, not an argument)."""
    params = list(inspect.signature(fn).parameters.values())[1:]
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        required = sum(1 for p in params if p.kind is not p.VAR_POSITIONAL and p.default is p.empty)
        return f"{required} or more arguments"
    required = sum(1 for p in params if p.default is p.empty)
    most = len(params)
    if required == most:
        return f"{most} argument{'s' if most != 1 else ''}"
    return f"{required} to {most} arguments"


def compile_expression(text: str) -> Expression:
    parser = _Parser(text)
    evaluate = parser.parse()
    return Expression(text, frozenset(parser.columns), evaluate)


def evaluate_to_array(expr: Expression, columns: Columns, num_rows: int) -> pa.Array:
    """Evaluate and always return an array of `num_rows` (constants are broadcast, booleans become 1/0)."""
    value = _as_long(expr(columns, num_rows))
    arr = _arr(value, num_rows)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return arr
