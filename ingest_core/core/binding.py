"""Binds raw JSON/YAML values onto typed spec dataclasses, collecting every problem with its field path.

Spec classes are plain dataclasses whose fields are snake_case; the JSON key is the camelCase form unless
`key=` says otherwise. Fields marked `ignored_in_batch=...` are Druid settings that have no meaning for a
bounded batch job: they are accepted (a Druid spec must load as-is) and produce a warning when set to other
than their default (Druid's export writes every default: no news).

Unknown fields follow Druid, whose JSON reader ignores them: a warning naming the field (with a did-you-mean),
not an error; an error in strict mode (`BindContext(strict=True)`) and inside this system's own sections
(`BindContext.own_section`). An explicit `null` is the field left out, as in Druid.
A class may define:
  - `_IGNORED` (ClassVar of JSON keys): fields Druid writes when it exports a spec, or reads and ignores, that
    mean nothing here: accepted without a word;
  - `_from_raw(raw, path, ctx)` (classmethod) to take over binding entirely (polymorphic `type` objects);
  - `_validate(self, path, ctx)` for range checks and contradictions between fields.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Iterator, Union

from ingest_core.core.errors import SpecProblem, shown
from ingest_core.core.periods import Period, PeriodError, format_datetime, parse_datetime

_NO_DEFAULT = dataclasses.MISSING
LONG_LIMIT = 2**63  # Java's long, which every Druid integer setting fits


def spec_field(
    default: Any = _NO_DEFAULT,
    *,
    default_factory: Any = _NO_DEFAULT,
    key: str | None = None,
    ignored_in_batch: str | None = None,
    secret_map: bool = False,
) -> Any:
    """A dataclass field with its JSON key and batch semantics."""
    meta = {"key": key, "ignored_in_batch": ignored_in_batch, "secret_map": secret_map}
    if default_factory is not _NO_DEFAULT:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def json_key(f: dataclasses.Field) -> str:
    if f.metadata.get("key"):
        return f.metadata["key"]
    head, *rest = f.name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


UNKNOWN_IGNORED = "ignored, as Druid ignores fields it does not know (`ingest validate --strict` refuses them)"


class BindContext:
    """Collects errors and warnings while a spec is bound. `strict`: unknown fields are errors everywhere."""

    def __init__(self, strict: bool = False) -> None:
        self.errors: list[SpecProblem] = []
        self.warnings: list[SpecProblem] = []
        self.strict = strict
        self._own_depth = 0

    def child(self) -> "BindContext":
        """A context to try a binding in, with this one's rules."""
        trial = BindContext(self.strict)
        trial._own_depth = self._own_depth
        return trial

    @contextmanager
    def own_section(self) -> Iterator[None]:
        """Inside this system's own sections (`microbatch`, `compaction`) nothing is Druid's to ignore: an
        unknown field there is an error."""
        self._own_depth += 1
        try:
            yield
        finally:
            self._own_depth -= 1

    def unknown(self, path: str, message: str) -> None:
        """A field nothing here reads: an error in strict mode or an own section, else a warning (Druid ignores
        it)."""
        if self.strict or self._own_depth:
            self.error(path, message)
        else:
            self.warn(path, f"{message}: {UNKNOWN_IGNORED}")

    def error(self, path: str, message: str) -> None:
        self.errors.append(SpecProblem(path, message))

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(SpecProblem(path, message))


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def did_you_mean(word: str, choices: typing.Iterable[str]) -> str:
    choices = list(choices)
    lowered = {c.lower(): c for c in choices}
    if word.lower() in lowered:
        return f" (did you mean '{lowered[word.lower()]}'?)"
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _type_name(tp: Any) -> str:
    if tp is Period:
        return "an ISO-8601 period such as 'PT1H'"
    if tp is datetime:
        return "an ISO-8601 date-time such as '2016-01-01T11:00Z'"
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    return names.get(tp, getattr(tp, "__name__", str(tp)))


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return f"{str(value).lower()}"
    if isinstance(value, str):
        return f"the string {shown(value)}" if len(value) < 60 else "a string"
    return repr(value)


_MISSING_VALUE = object()


def bind_value(tp: Any, raw: Any, path: str, ctx: BindContext) -> Any:
    """Convert `raw` to `tp`; on failure record an error and return `_MISSING_VALUE`."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if raw is None:
            return None
        if len(args) == 1:
            return bind_value(args[0], raw, path, ctx)
        # Union of several types: the first that binds without error wins.
        for arg in args:
            trial = ctx.child()
            value = bind_value(arg, raw, path, trial)
            if not trial.errors:
                ctx.warnings.extend(trial.warnings)
                return value
        ctx.error(path, f"expected {' or '.join(_type_name(a) for a in args)}, got {_describe(raw)}")
        return _MISSING_VALUE
    if tp is Any:
        return raw
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(raw, list):
            ctx.error(path, f"expected a list, got {_describe(raw)}")
            return _MISSING_VALUE
        items = [bind_value(item_tp, item, join(path, i), ctx) for i, item in enumerate(raw)]
        return [i for i in items if i is not _MISSING_VALUE]
    if origin is dict:
        _, val_tp = typing.get_args(tp)
        if not isinstance(raw, dict):
            ctx.error(path, f"expected an object, got {_describe(raw)}")
            return _MISSING_VALUE
        out = {}
        for k, v in raw.items():
            bound = bind_value(val_tp, v, join(path, str(k)), ctx)
            if bound is not _MISSING_VALUE:
                out[str(k)] = bound
        return out
    if dataclasses.is_dataclass(tp) and tp is not Period:
        return bind_object(tp, raw, path, ctx)
    if tp is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in ("true", "false"):
            return raw.lower() == "true"
    elif tp is int:
        value = None
        if isinstance(raw, int) and not isinstance(raw, bool):
            value = raw
        elif isinstance(raw, float) and raw.is_integer():
            value = int(raw)
        elif isinstance(raw, str) and raw.strip().lstrip("-").isdigit():
            value = int(raw)
        if value is not None:
            if -LONG_LIMIT <= value < LONG_LIMIT:
                return value
            ctx.error(path, f"{value:.3g} does not fit a 64-bit integer (Druid's long); use a value up to "
                      f"{LONG_LIMIT - 1}, or the field's documented range")
            return _MISSING_VALUE
    elif tp is float:
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return float(raw)
        if isinstance(raw, str):
            try:
                return float(raw)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(raw, str):
            return raw
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return str(raw)
    elif tp is Period:
        try:
            return Period.parse(raw) if not isinstance(raw, Period) else raw
        except PeriodError as exc:
            ctx.error(path, str(exc))
            return _MISSING_VALUE
    elif tp is datetime:
        try:
            return parse_datetime(raw)
        except PeriodError as exc:
            ctx.error(path, str(exc))
            return _MISSING_VALUE
    else:
        raise TypeError(f"binder does not know type {tp!r}")
    ctx.error(path, f"expected {_type_name(tp)}, got {_describe(raw)}")
    return _MISSING_VALUE


@functools.cache
def _bindable(cls: type) -> tuple[dict[str, Any], dict[str, dataclasses.Field]]:
    """`cls`'s field types and its fields by JSON key: once per class (resolving the hints compiles each
    annotation, most of a spec's parse time; every Spark task parses its job's spec)."""
    return typing.get_type_hints(cls), {json_key(f): f for f in dataclasses.fields(cls) if f.init}


def bind_object(cls: type, raw: Any, path: str, ctx: BindContext, *, custom_hook: bool = True) -> Any:
    """Bind a dict onto dataclass `cls`: unknown keys are `ctx.unknown`, missing required fields are errors, a
    `null` is the field left out. A class's own `_from_raw` calls this with `custom_hook=False` for the
    field-by-field part."""
    custom = cls.__dict__.get("_from_raw") if custom_hook else None
    if custom is not None:
        return custom.__get__(None, cls)(raw, path, ctx)
    if not isinstance(raw, dict):
        ctx.error(path, f"expected an object, got {_describe(raw)}")
        return _MISSING_VALUE
    hints, fields = _bindable(cls)
    ignored = getattr(cls, "_IGNORED", frozenset())
    for key in raw:
        if key not in fields and key not in ignored and raw[key] is not None:  # a null says nothing: absent
            ctx.unknown(join(path, str(key)), "unknown field" + did_you_mean(str(key), fields))
    kwargs: dict[str, Any] = {}
    ok, constructible = True, True
    for key, f in fields.items():
        fpath = join(path, key)
        required = f.default is _NO_DEFAULT and f.default_factory is _NO_DEFAULT
        if raw.get(key) is None:  # left out, or Druid's explicit null: the default
            if required:
                ctx.error(fpath, "required field is missing" if key not in raw else "is null, but required")
                ok = constructible = False
            continue
        reason = f.metadata.get("ignored_in_batch")
        if reason and raw[key] not in ([], {}) and not _is_default(f, hints[f.name], raw[key]):
            # a value Druid writes on every export (its default) changes nothing: only a setting is worth a word
            ctx.warn(fpath, f"accepted but has no effect in batch ingestion: {reason}")
        value = bind_value(hints[f.name], raw[key], fpath, ctx)
        if value is _MISSING_VALUE:
            ok = False
            constructible = constructible and not required
        else:
            kwargs[f.name] = value
    if not constructible:
        return _MISSING_VALUE
    # Validate even when a field failed (it falls back to its default), so every problem is reported at once.
    obj = cls(**kwargs)
    validate = getattr(obj, "_validate", None)
    if validate is not None:
        try:
            validate(path, ctx)
        except RecursionError:
            raise
        except Exception as exc:  # a check that broke is still this field's problem, never a crash
            ctx.error(path, f"cannot be checked: {type(exc).__name__}: {exc}")
    return obj if ok else _MISSING_VALUE


def _is_default(f: dataclasses.Field, tp: Any, raw: Any) -> bool:
    default = f.default_factory() if f.default_factory is not _NO_DEFAULT else f.default
    value = bind_value(tp, raw, "", BindContext())
    return value == default


def check_range(ctx: BindContext, path: str, value: int | float | None, *, minimum: float | None = None,
                maximum: float | None = None) -> None:
    if value is None:
        return
    shown = f"{value:.3g}" if abs(value) >= 1e15 else str(value)
    span = f" (the range is {minimum} to {maximum})" if minimum is not None and maximum is not None else ""
    if minimum is not None and value < minimum:
        ctx.error(path, f"must be at least {minimum}, got {shown}{span}")
    if maximum is not None and value > maximum:
        ctx.error(path, f"must be at most {maximum}, got {shown}{span}")


def check_period(ctx: BindContext, path: str, period: Period, *, allow_zero: bool = False,
                 allow_calendar: bool = False) -> None:
    """A duration Airflow waits or schedules by: positive (or zero where that means "no wait"), and of fixed
    length unless a calendar schedule is meant."""
    if period.negative or (period.is_zero and not allow_zero):
        ctx.error(path, f"must be a {'non-negative' if allow_zero else 'positive'} period, got {period}; "
                  "e.g. PT10S")
    elif period.is_calendar and not allow_calendar:
        ctx.error(path, f"{period} has months or years, which have no fixed length: use days, hours, minutes or "
                  "seconds, e.g. P30D")


def to_raw(obj: Any) -> Any:
    """The JSON form of a bound spec object (camelCase keys, periods and date-times as ISO strings)."""
    if isinstance(obj, Period):
        return str(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        custom = getattr(obj, "_to_raw", None)
        if custom is not None:
            return custom()
        return {json_key(f): to_raw(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
    if isinstance(obj, Period):
        return str(obj)
    if isinstance(obj, datetime):
        return format_datetime(obj)
    if isinstance(obj, list):
        return [to_raw(x) for x in obj]
    if isinstance(obj, dict):
        return {k: to_raw(v) for k, v in obj.items()}
    return obj


MISSING_VALUE = _MISSING_VALUE
