"""Avro records of one schema -> Arrow columns, a field at a time over the whole chunk (numpy), not a record at
a time: the columnar path of `avro_stream`, as pyarrow's JSON reader is JSON's.

The schema gives every column's type up front, so nothing is inferred: each field is read for all records at
once (varints as a gather of 10 bytes per record, strings as one gather of their bytes), records advancing by
their own lengths. Flat records only: a field of an array or map type, or a union other than [null, T], makes
the plan None (`ColumnarPlan.of`); a field that cannot be materialized here (bytes, fixed, boolean, a nested
record) may still be skipped over when no column needs it. Anything unusual in a chunk (a truncated record, a
branch or enum index out of range, text that is not UTF-8, bytes left over) returns None: the row parser then
decodes that chunk record by record, which names the records at fault. Both paths give the same columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

_PRIMITIVE = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
_PAD = 16  # zero bytes after the chunk, so a gather of 10 bytes from any position stays inside the buffer


class _Misfit(Exception):
    """The chunk does not fit the columnar path: decode it record by record."""


@dataclass(frozen=True)
class _Field:
    name: str
    kind: str  # a primitive name, "enum", "fixed", "record" or "union"
    symbols: tuple[str, ...] = ()  # enum
    size: int = 0  # fixed
    fields: tuple["_Field", ...] = ()  # record
    branch: "_Field | None" = None  # union [null, T]: T
    branch_index: int = 1  # which of the two is T


def _field(name: str, schema: Any, named: dict[str, Any]) -> _Field | None:
    if isinstance(schema, str):
        if schema in _PRIMITIVE:
            return _Field(name, schema)
        schema = named.get(schema)
        if schema is None:
            return None
    if isinstance(schema, list):
        if len(schema) == 2 and "null" in schema:
            i = 1 - schema.index("null")
            branch = _field(name, schema[i], named)
            if branch is None or branch.kind == "union":
                return None
            return _Field(name, "union", branch=branch, branch_index=i)
        return None
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if schema.get("name"):
        named.setdefault(schema["name"], schema)
    if kind in _PRIMITIVE:
        return _Field(name, kind)
    if kind == "enum":
        return _Field(name, "enum", symbols=tuple(schema["symbols"]))
    if kind == "fixed":
        return _Field(name, "fixed", size=int(schema["size"]))
    if kind == "record":
        fields = [_field(f["name"], f["type"], named) for f in schema.get("fields", [])]
        if any(f is None for f in fields):
            return None
        return _Field(name, "record", fields=tuple(fields))  # type: ignore[arg-type]
    return None  # array, map


@dataclass(frozen=True)
class ColumnarPlan:
    fields: tuple[_Field, ...]

    @classmethod
    def of(cls, parsed_schema: Any) -> "ColumnarPlan | None":
        """The plan of a (fastavro-parsed) record schema, or None when it has a field this path cannot read."""
        named = dict(parsed_schema.get("__named_schemas") or {}) if isinstance(parsed_schema, dict) else {}
        top = _field("", parsed_schema, named)
        if top is None or top.kind != "record":
            return None
        return cls(top.fields)

    def read(self, payloads: list[bytes | memoryview], wanted: dict[tuple[str, ...], list[str]], skip: int = 0,
             text: bool = False) -> dict[str, pa.Array] | None:
        """The columns `wanted` names (a field's path, `("geo", "city")` for `$.geo.city` -> its columns' names),
        or None when the chunk does not fit (see the module). A wanted path the schema does not have is a column
        of nulls, as a flattenSpec path that finds nothing. `skip`: header bytes before each payload. `text`:
        bytes fields as UTF-8 text (binaryAsString)."""
        data = b"".join(payloads)
        lengths = np.fromiter(map(len, payloads), dtype=np.int64, count=len(payloads))
        ends = np.cumsum(lengths)
        reader = _Reader(np.frombuffer(data + bytes(_PAD), dtype=np.uint8), ends - lengths + skip, ends, text,
                         set(wanted))
        try:
            everyone = np.arange(len(payloads))
            found: dict[tuple[str, ...], pa.Array] = {}
            for f in self.fields:
                found.update(reader.field(f, everyone, (f.name,)))
            if not np.array_equal(reader.pos, ends):
                return None  # bytes left over: some record was written with another schema
        except _Misfit:
            return None
        out: dict[str, pa.Array] = {}
        for path, names in wanted.items():
            column = found.get(path, pa.nulls(len(payloads)))
            for name in names:
                out[name] = column
        return out


class _Reader:
    def __init__(self, buf: np.ndarray, pos: np.ndarray, ends: np.ndarray, binary_as_string: bool,
                 wanted: set[tuple[str, ...]]):
        self.buf, self.pos, self.ends = buf, pos, ends
        self.binary_as_string = binary_as_string
        self.wanted = wanted
        self.inner = {p[:i] for p in wanted for i in range(1, len(p))}  # paths that lead to a wanted one

    def _advance(self, rows: np.ndarray, by: np.ndarray) -> np.ndarray:
        start = self.pos[rows]
        end = start + by
        if (end > self.ends[rows]).any():
            raise _Misfit()  # truncated
        self.pos[rows] = end
        return start

    def varint(self, rows: np.ndarray) -> np.ndarray:
        """Zigzag varints (Avro int and long) at the rows' positions, as int64: a byte at a time, each step
        over the rows whose varint goes on (most are one or two bytes long)."""
        start = self.pos[rows]
        byte = self.buf[start].astype(np.uint64)
        values = byte & np.uint64(0x7F)
        n = np.ones(len(rows), dtype=np.int64)
        more = np.flatnonzero(byte & np.uint64(0x80))
        shift = 7
        while more.size:
            if shift > 63:
                raise _Misfit()  # longer than a long
            byte = self.buf[start[more] + n[more]].astype(np.uint64)
            values[more] |= (byte & np.uint64(0x7F)) << np.uint64(shift)
            n[more] += 1
            more = more[(byte & np.uint64(0x80)) != 0]
            shift += 7
        self._advance(rows, n)
        return ((values >> np.uint64(1)).astype(np.int64)) ^ -((values & np.uint64(1)).astype(np.int64))

    def _sized(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        size = self.varint(rows)
        if (size < 0).any():
            raise _Misfit()
        return self._advance(rows, size), size

    def field(self, f: _Field, rows: np.ndarray, path: tuple[str, ...]) -> dict[tuple[str, ...], pa.Array]:
        """Reads field `f` at `path` for `rows` (advancing them): the wanted columns at or under `path`."""
        want = path in self.wanted
        if path in self.inner and f.kind not in ("record", "union"):
            raise _Misfit()  # a path into a value that has no fields: the per-record path says null
        kind = f.kind
        if kind == "record":
            if want:
                raise _Misfit()  # a nested record as a column: the per-record path gives its JSON text
            out: dict[tuple[str, ...], pa.Array] = {}
            for sub in f.fields:
                out.update(self.field(sub, rows, path + (sub.name,)))
            return out
        if kind == "union":
            assert f.branch is not None
            branch = self.varint(rows)
            if ((branch != 0) & (branch != 1)).any():
                raise _Misfit()
            present = branch == f.branch_index
            where = pa.array(np.cumsum(present) - 1, mask=~present)
            return {p: values.take(where) for p, values in self.field(f.branch, rows[present], path).items()}
        value = self._leaf(f, rows, want)
        return {path: value} if value is not None else {}

    def _leaf(self, f: _Field, rows: np.ndarray, want: bool) -> pa.Array | None:
        kind = f.kind
        if kind == "null":
            return pa.nulls(len(rows)) if want else None
        if kind in ("int", "long"):
            values = self.varint(rows)
            return pa.array(values, pa.int64()) if want else None
        if kind in ("float", "double"):
            width = 4 if kind == "float" else 8
            start = self._advance(rows, np.full(len(rows), width))
            if not want:
                return None
            raw = np.ascontiguousarray(self.buf[start[:, None] + np.arange(width)])
            values = raw.view("<f4" if width == 4 else "<f8").ravel().astype(np.float64)
            return pa.array(values, pa.float64())
        if kind == "string" or kind == "bytes":
            start, size = self._sized(rows)
            if not want:
                return None
            if kind == "bytes" and not self.binary_as_string:
                raise _Misfit()  # base64 text: the per-record path
            return self._text(start, size)
        if kind == "boolean":
            start = self._advance(rows, np.ones(len(rows), dtype=np.int64))
            if (self.buf[start] > 1).any() or want:
                raise _Misfit()
            return None
        if kind == "enum":
            index = self.varint(rows)
            if ((index < 0) | (index >= len(f.symbols))).any():
                raise _Misfit()
            return pa.array(f.symbols, pa.string()).take(pa.array(index)) if want else None
        assert kind == "fixed"
        self._advance(rows, np.full(len(rows), f.size))
        if want:
            raise _Misfit()
        return None

    def _text(self, start: np.ndarray, size: np.ndarray) -> pa.Array:
        offsets = np.zeros(len(size) + 1, dtype=np.int64)
        np.cumsum(size, out=offsets[1:])
        total = int(offsets[-1])
        if total >= 2 ** 31:
            raise _Misfit()
        gather = np.arange(total, dtype=np.int64) - np.repeat(offsets[:-1] - start, size)
        values = self.buf[gather]
        array = pa.StringArray.from_buffers(len(size), pa.py_buffer(offsets.astype(np.int32)),
                                            pa.py_buffer(values))
        try:
            array.validate(full=True)  # UTF-8
        except pa.ArrowInvalid:
            raise _Misfit() from None
        return array


def same_header(payloads: list[bytes], size: int) -> bytes | None:
    """The header (the first `size` bytes) every record shares, or None when they differ or one is too short."""
    if not payloads or size == 0:
        return b""
    first = payloads[0][:size]
    if len(first) < size or any(p[:size] != first for p in payloads):
        return None
    return bytes(first)

