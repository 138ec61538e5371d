"""Protobuf messages of one type -> Arrow columns, a tag at a time over the whole chunk (numpy), not a message at
a time: the columnar path of the `protobuf` format, as `avro_columns` is Avro's.

All records' cursors advance together: each step reads one tag per record (a varint gather: field number and
wire type), then its value by wire type (varints, fixed 32 and 64 bits, length-delimited spans), and scatters
it into the field's slot with the record's presence. The columns are those Druid's converter
(`protobuf.Converter`) gives: only present fields (a proto3 scalar without `optional` at its default is
absent), named by their JSON names, enums by name, int64 as numbers, float as the shortest decimal of the
float32, bytes as base64 text.

Singular scalar fields are read, also through singular nested messages (flattenSpec paths such as `$.user.name`:
the nested messages' spans read the same way); the other fields (repeated, maps, well-known types) are checked,
not read: the spans of all records' such fields are parsed by upb as one message, so a record the per-record
path refuses is found here too. A column naming such a field, or a path with a list index, decodes record by
record (`ChunkColumns.read` returns None); so does a chunk with anything unusual: a singular field seen twice in
a record, a field with an unexpected wire type, groups, a truncated record, text that is not UTF-8, an enum
number the schema does not name, a uint64 past int64's range, two members of one oneof, a missing required
field, a well-known type whose conversion can fail (Timestamp, Duration, Any). The per-record path then names
the records at fault. Both paths give the same columns.
"""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from ingest_core.executor.formats.avro_columns import same_header
from ingest_core.executor.formats.base import Flattener
from ingest_core.executor.formats.protobuf import (
    MessageReader,
    RegistryDecoder,
    _float32,
    _is_repeated,
    _is_required,
    row_name,
)
from ingest_core.executor.formats.schema_registry import read_message_indexes, split_wire_format

_PAD = 16  # zero bytes after the chunk, so a gather of up to 10 bytes from any position stays inside the buffer
_FT = FieldDescriptor
_WIRE = {_FT.TYPE_DOUBLE: 1, _FT.TYPE_FIXED64: 1, _FT.TYPE_SFIXED64: 1, _FT.TYPE_FLOAT: 5, _FT.TYPE_FIXED32: 5,
         _FT.TYPE_SFIXED32: 5, _FT.TYPE_STRING: 2, _FT.TYPE_BYTES: 2}  # the others scalars: varints (0)
_BITS32 = {_FT.TYPE_INT32, _FT.TYPE_UINT32, _FT.TYPE_SINT32, _FT.TYPE_ENUM, _FT.TYPE_FIXED32, _FT.TYPE_SFIXED32,
           _FT.TYPE_FLOAT}  # stored in 32 bits: a varint's higher bits are dropped
# types whose conversion to a row can fail (`protobuf.Converter`): a record holding one decodes per record
_FRAGILE = {"google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.Any"}


class _Misfit(Exception):
    """The chunk does not fit the columnar path: decode it record by record."""


@dataclass(frozen=True)
class _Field:
    index: int  # its row in the chunk's `seen` (and, for a scalar, `raw`/`size`)
    fd: FieldDescriptor
    name: str  # as the row names it
    scalar: bool  # singular and not a message: read; otherwise only checked
    wire: int  # the wire type a scalar arrives with (-1: any, for the others)
    implicit: bool  # proto3 without `optional`: absent at its default
    fragile: bool  # a non-scalar whose conversion can fail or that holds required fields


def _fragile(desc: Descriptor, seen: set[str]) -> bool:
    if desc.full_name in _FRAGILE:
        return True
    if desc.full_name in seen:
        return False
    seen.add(desc.full_name)
    return any(_is_required(fd) or (fd.message_type is not None and _fragile(fd.message_type, seen))
               for fd in desc.fields)


@dataclass
class ColumnarPlan:
    reader: MessageReader
    fields: tuple[_Field, ...]
    by_name: dict[str, _Field]
    field_of: np.ndarray  # field number -> `fields` index; past its end: unknown (the index len(fields))
    wire_fits: np.ndarray  # [field index, wire type]: whether it fits (the last two rows: unknown, field 0)
    scalars: int  # the first `scalars` fields are the singular scalars
    is_scalar: np.ndarray  # per field (and unknown, field 0)
    required: tuple[int, ...]
    oneofs: tuple[tuple[int, ...], ...]  # the indexes of each oneof's members (of two or more)
    nested: dict[int, "ColumnarPlan | None"] = dataclasses.field(default_factory=dict)  # by field index, made when a path asks

    @classmethod
    def of(cls, reader: MessageReader) -> "ColumnarPlan | None":
        """The plan of a message type, or None when it has extensions, groups or a required non-scalar field, or
        two fields of one row name."""
        desc = reader.descriptor
        if desc.extension_ranges:
            return None
        fields: list[_Field] = []
        scalars = [fd for fd in desc.fields if not _is_repeated(fd) and fd.message_type is None]
        others = [fd for fd in desc.fields if _is_repeated(fd) or fd.message_type is not None]
        for fd in scalars + others:
            if fd.type == _FT.TYPE_GROUP or (_is_required(fd) and fd.message_type is not None):
                return None
            scalar = fd in scalars
            fields.append(_Field(len(fields), fd, row_name(fd), scalar, _WIRE.get(fd.type, 0) if scalar else -1,
                                 scalar and not fd.has_presence,
                                 not scalar and fd.message_type is not None and _fragile(fd.message_type, set())))
        by_name = {f.name: f for f in fields}
        if len(by_name) != len(fields):
            return None
        unknown = len(fields)
        top = max((f.fd.number for f in fields), default=0)
        if top > 1 << 16:
            return None  # a sparse numbering: not worth a table
        field_of = np.full(top + 2, unknown, dtype=np.intp)
        field_of[0] = unknown + 1  # field number 0: corrupt
        wire_fits = np.zeros((unknown + 2, 8), dtype=bool)
        wire_fits[:unknown + 1, [0, 1, 2, 5]] = True  # groups (3, 4) and 6, 7 do not fit
        for f in fields:
            field_of[f.fd.number] = f.index
            if f.scalar:  # another wire type: upb keeps the field unknown
                wire_fits[f.index] = False
                wire_fits[f.index, f.wire] = True
        oneofs = tuple(tuple(f.index for f in fields if f.fd.containing_oneof is o)
                       for o in desc.oneofs if len(o.fields) > 1)
        return cls(reader, tuple(fields), by_name, field_of, wire_fits, len(scalars),
                   np.array([f.scalar for f in fields] + [False, False]),
                   tuple(f.index for f in fields if _is_required(f.fd)), oneofs)

    def read(self, payloads: Sequence[bytes], wanted: dict[tuple[str, ...], list[str]], skip: int = 0
             ) -> dict[str, pa.Array] | None:
        """The columns `wanted` names (a field's path -> its columns' names), or None when a path is not a
        scalar field's (through singular nested messages) or the chunk does not fit (see the module). A path
        no field has is a column of nulls. `skip`: header bytes before each message."""
        data = b"".join([*payloads, bytes(_PAD)])
        lengths = np.fromiter(map(len, payloads), dtype=np.int64, count=len(payloads))
        ends = np.cumsum(lengths)
        try:
            found = self._read(np.frombuffer(data, dtype=np.uint8), ends - lengths + skip, ends, list(wanted))
        except _Misfit:
            return None
        return {name: found[path] for path, names in wanted.items() for name in names}

    def _read(self, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, paths: list[tuple[str, ...]]
              ) -> dict[tuple[str, ...], pa.Array]:
        """The columns of `paths` over the messages at `starts` to `ends` in `buf` (raises _Misfit)."""
        if not len(starts):
            return {path: pa.nulls(0) for path in paths}  # a nested message no record holds
        scalars: list[_Field] = []
        nested: dict[int, list[tuple[str, ...]]] = {}
        for path in paths:
            f = self.by_name.get(path[0])
            if f is None:
                continue  # a column of nulls, as the flattener finds nothing there
            if len(path) == 1:
                if not f.scalar:
                    raise _Misfit()  # a nested message, list or map: the per-record path gives its value or text
                scalars.append(f)
            elif self._nested(f) is None:
                raise _Misfit()  # a path into a scalar, a list, a map or a well-known type
            else:
                nested.setdefault(f.index, []).append(path[1:])
        chunk = _Chunk(self, buf, starts, ends, [f.index for f in scalars], list(nested))
        chunk.scan()
        chunk.check({f.index for f in scalars})
        found = {(f.name,): chunk.column(f) for f in scalars}
        for index, inner in nested.items():
            f, sub = self.fields[index], self.nested[index]
            assert sub is not None
            present, slot = chunk.seen[index], chunk.slot_of[index]
            start = chunk.raw[slot][present].astype(np.int64)
            where = pa.array(np.cumsum(present) - 1, mask=~present)  # each record's nested message, if any
            for path, column in sub._read(buf, start, start + chunk.size[slot][present], inner).items():
                found[(f.name,) + path] = column.take(where)
        return {path: found.get(path, pa.nulls(len(starts))) for path in paths}

    def _nested(self, f: _Field) -> "ColumnarPlan | None":
        """The plan of a singular nested message field's type (one the converter gives as an object), or None."""
        if f.index not in self.nested:
            fd = f.fd
            plain = (fd.message_type is not None and not _is_repeated(fd)
                     and not fd.message_type.full_name.startswith("google.protobuf."))
            self.nested[f.index] = ColumnarPlan.of(MessageReader(fd.message_type, self.reader.converter)) \
                if plain else None
        return self.nested[f.index]


def _varints(buf: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varints at positions `at` (uint64, as upb reads them: bits past 64 dropped, at most 10 bytes) and
    their lengths: a byte at a time, each step over the varints that go on (most are one or two bytes)."""
    byte = buf[at]
    values = (byte & 0x7F).astype(np.uint64)
    n = np.ones(len(at), dtype=np.int64)
    more = np.flatnonzero(byte & 0x80)
    shift = 7
    while more.size:
        if shift > 63:
            raise _Misfit()  # longer than 10 bytes: corrupt
        byte = buf[at[more] + n[more]]
        values[more] |= (byte & 0x7F).astype(np.uint64) << np.uint64(shift)
        n[more] += 1
        more = more[(byte & 0x80) != 0]
        shift += 7
    return values, n


class _Chunk:
    """One chunk's scan: per field, whether each record holds it (`seen`); for the fields read and the strings
    (checked), their raw values (`raw`: the varint or fixed bits; for strings and bytes the start, `size` their
    length), each field in its slot."""

    def __init__(self, plan: ColumnarPlan, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                 reads: list[int], nested: list[int]):
        self.plan, self.buf, self.ends = plan, buf, ends
        self.starts = starts
        self.pos = starts.copy()
        n = len(starts)
        self.everyone = np.arange(n)
        self.n = n
        fields = len(plan.fields)
        self.seen = np.zeros((fields + 1, n), dtype=bool)  # the last row: unknown fields
        kept = sorted(set(reads) | set(nested)
                      | {f.index for f in plan.fields if f.scalar and f.fd.type == _FT.TYPE_STRING})
        self.trash = len(kept)  # the slot where the other fields' values go, unread
        self.slot_of = np.full(fields + 2, self.trash, dtype=np.int64)
        self.slot_of[kept] = np.arange(len(kept))
        self.raw = np.zeros((len(kept) + 1, n), dtype=np.uint64)
        self.size = np.zeros((len(kept) + 1, n), dtype=np.int64)
        self.hits = 0  # the occurrences of singular fields: scalars, and the nested messages a path reads
        self.nested = bool(nested)
        self.counted = plan.is_scalar.copy()
        self.counted[nested] = True  # merged when twice (the per-record path): read only once per record
        self.wire_fits = plan.wire_fits
        if nested:
            self.wire_fits = plan.wire_fits.copy()
            self.wire_fits[nested] = False
            self.wire_fits[nested, 2] = True  # another wire type: upb keeps the field unknown
        self.spans: list[tuple[np.ndarray, np.ndarray]] = []  # the non-scalars' bytes, tag to value's end
        self.data = pa.py_buffer(buf)
        self.b8 = np.ndarray((len(buf) - 7,), dtype="<u8", buffer=buf, strides=(1,))  # 8 bytes at each position
        self.b4 = np.ndarray((len(buf) - 3,), dtype="<u4", buffer=buf, strides=(1,))

    def scan(self) -> None:
        """Reads every record's fields, one tag per record and step (the records with bytes left)."""
        plan, buf, n = self.plan, self.buf, self.n
        top = len(plan.field_of) - 1
        rows = np.flatnonzero(self.pos < self.ends)
        while rows.size:
            every = rows.size == n  # the usual case: no gathers of the rows
            at = self.pos if every else self.pos[rows]  # `pos` is replaced below, not changed
            end = self.ends if every else self.ends[rows]
            tag, tag_len = _varints(buf, at)
            longest = tag_len.max()
            if longest > 5 or (longest == 5 and tag.max() >= np.uint64(1 << 32)):
                raise _Misfit()  # corrupt
            wire = (tag & np.uint64(7)).astype(np.intp)
            field = plan.field_of[np.minimum(tag >> np.uint64(3), np.uint64(top)).astype(np.intp)]
            if not self.wire_fits[field, wire].all():
                raise _Misfit()  # a known scalar with another wire type, a group, field 0, wire type 6 or 7
            value_at = at + tag_len
            counts = np.bincount(wire, minlength=8)
            value = np.empty(len(at), dtype=np.uint64)
            size = np.zeros(len(at), dtype=np.int64)
            after = np.empty(len(at), dtype=np.int64)
            for w in np.flatnonzero(counts):
                sel: Any = slice(None) if counts[w] == len(at) else np.flatnonzero(wire == w)
                p = value_at[sel]
                if w == 0:
                    value[sel], length = _varints(buf, p)
                    after[sel] = p + length
                elif w == 1:
                    value[sel] = self.b8[p]
                    after[sel] = p + 8
                elif w == 5:
                    value[sel] = self.b4[p]
                    after[sel] = p + 4
                else:
                    count, length = _varints(buf, p)
                    start = p + length
                    room = end[sel] - start
                    if room.min() < 0 or (count > room.astype(np.uint64)).any():
                        raise _Misfit()  # truncated
                    value[sel] = start
                    size[sel] = count
                    after[sel] = start + size[sel]
            if (after > end).any():
                raise _Misfit()  # truncated
            self.seen.ravel()[field * n + rows] = True
            slot = self.slot_of[field]
            flat = slot * n + rows
            self.raw.ravel()[flat] = value
            if counts[2]:
                self.size.ravel()[flat] = size
            others = ~plan.is_scalar[field]
            unread = int(np.count_nonzero(others))
            self.hits += int(np.count_nonzero(self.counted[field])) if self.nested else len(at) - unread
            if unread:
                other = np.flatnonzero(others)
                self.spans.append((at[other], after[other]))
            if every:
                self.pos = after
            else:
                self.pos[rows] = after
            rows = rows[after < end]
        # a singular field twice in a record (the last one wins, per record): more hits than such fields seen (a
        # record's hits are at least its fields seen, so equal sums mean equal counts in every record)
        if np.count_nonzero(self.seen[np.flatnonzero(self.counted)]) != self.hits:
            raise _Misfit()

    def check(self, read: set[int]) -> None:
        """What the per-record path would refuse that the scan does not see: a missing required field, two
        members of a oneof, a bad value inside a field that is not read (upb parses those spans, all at once)."""
        plan = self.plan
        for i in plan.required:
            if not self.seen[i].all():
                raise _Misfit()
        for members in plan.oneofs:
            if (self.seen[list(members)].sum(axis=0) > 1).any():
                raise _Misfit()
        for f in plan.fields:
            if f.fragile and self.seen[f.index].any():
                raise _Misfit()
            if f.scalar and f.fd.type == _FT.TYPE_STRING and f.index not in read and self.seen[f.index].any():
                self._text(self.slot_of[f.index], self.seen[f.index])  # UTF-8 (proto3 refuses the record otherwise)
        if self.spans:
            starts = np.concatenate([s for s, _ in self.spans])
            stops = np.concatenate([e for _, e in self.spans])
            blob = self.buf[_gather(starts, stops - starts)].tobytes()
            try:
                plan.reader.cls.FromString(blob)  # each span a field of the message: any record's error fails it
            except Exception:  # noqa: BLE001 - upb's errors on hostile bytes: the per-record path names them
                raise _Misfit() from None

    def _text(self, slot: int, present: np.ndarray) -> pa.Array:
        """The strings of a field as a column (null where not `present`), or a misfit when one is not UTF-8: the
        records' spans and the bytes between them as one binary array over the chunk's buffer, every other
        element taken (Arrow copies each string at once)."""
        n = self.n
        start = np.where(present, self.raw[slot].view(np.int64), self.starts)  # an absent one: empty, in order
        offsets = np.empty(2 * n + 1, dtype=np.int64)
        offsets[0:2 * n:2] = start
        offsets[1:2 * n:2] = start + np.where(present, self.size[slot], 0)
        offsets[-1] = offsets[-2]
        if offsets[-1] >= 2 ** 31:
            raise _Misfit()
        spans = pa.BinaryArray.from_buffers(pa.binary(), 2 * n, [None, pa.py_buffer(offsets.astype(np.int32)),
                                                                 self.data])
        try:
            return spans.take(pa.array(self.everyone * 2, mask=~present)).cast(pa.string())  # UTF-8
        except pa.ArrowInvalid:
            raise _Misfit() from None

    def column(self, f: _Field) -> pa.Array:
        """Field `f`'s column as the per-record path types it (see the module)."""
        slot = self.slot_of[f.index]
        seen, raw, t = self.seen[f.index], self.raw[slot], f.fd.type
        if f.implicit:  # proto3 without `optional`: a default value is absent (a float's by its bits, so -0.0 is not)
            seen = seen & ((self.size[slot] != 0) if f.wire == 2 else
                           ((raw & np.uint64(0xFFFFFFFF)) != 0) if t in _BITS32 else (raw != 0))
        if t == _FT.TYPE_STRING:
            return self._text(slot, seen)
        if t == _FT.TYPE_BYTES:
            start, size = raw.astype(np.int64), self.size[slot]
            blobs = self.buf[_gather(start[seen], size[seen])].tobytes()
            ends = np.cumsum(size[seen])
            texts = iter([base64.b64encode(blobs[e - s:e]).decode("ascii") for s, e in zip(size[seen], ends)])
            return pa.array([next(texts) if s else None for s in seen], pa.string())
        mask = ~seen
        if t in (_FT.TYPE_INT64, _FT.TYPE_SFIXED64):
            return pa.array(raw.view(np.int64), pa.int64(), mask=mask)
        if t in (_FT.TYPE_UINT64, _FT.TYPE_FIXED64):
            if (raw[seen] >= np.uint64(1 << 63)).any():
                raise _Misfit()  # past int64: the per-record path's Python ints type it otherwise
            return pa.array(raw.view(np.int64), pa.int64(), mask=mask)
        if t in (_FT.TYPE_INT32, _FT.TYPE_SFIXED32):
            return pa.array(raw.astype(np.uint32).view(np.int32).astype(np.int64), pa.int64(), mask=mask)
        if t in (_FT.TYPE_UINT32, _FT.TYPE_FIXED32):
            return pa.array(raw.astype(np.uint32).astype(np.int64), pa.int64(), mask=mask)
        if t in (_FT.TYPE_SINT32, _FT.TYPE_SINT64):
            u = raw.astype(np.uint32).astype(np.uint64) if t == _FT.TYPE_SINT32 else raw
            values = (u >> np.uint64(1)).view(np.int64) ^ -(u & np.uint64(1)).view(np.int64)
            return pa.array(values, pa.int64(), mask=mask)
        if t == _FT.TYPE_DOUBLE:
            return pa.array(raw.view(np.float64), pa.float64(), mask=mask)
        if t == _FT.TYPE_FLOAT:
            return pa.array(_shortest_floats(raw.astype(np.uint32)), pa.float64(), mask=mask)
        if t == _FT.TYPE_ENUM:
            return self._enum(f, raw.astype(np.uint32).view(np.int32), seen)
        raise _Misfit()  # bool: the per-record path keeps Python booleans, which type as text there

    def _enum(self, f: _Field, numbers: np.ndarray, seen: np.ndarray) -> pa.Array:
        if f.fd.enum_type.full_name == "google.protobuf.NullValue":
            raise _Misfit()
        names = {v.number: v.name for v in f.fd.enum_type.values}  # as Converter: the last alias of a number
        used, where = np.unique(numbers[seen], return_inverse=True)
        if any(int(u) not in names for u in used):
            raise _Misfit()  # a number the schema does not name: the per-record path keeps the number
        index = np.zeros(self.n, dtype=np.int64)
        index[seen] = where
        return pa.array([names[int(u)] for u in used], pa.string()).take(pa.array(index, mask=~seen))


def _gather(start: np.ndarray, size: np.ndarray) -> np.ndarray:
    """The buffer positions of the spans (start, size), one after another."""
    offsets = np.cumsum(size) - size
    return np.arange(int(size.sum()), dtype=np.int64) - np.repeat(offsets - start, size)


def _shortest_floats(bits: np.ndarray) -> np.ndarray:
    """float32 bits -> the doubles `protobuf._float32` gives (the shortest decimal), once per distinct value."""
    used, where = np.unique(bits, return_inverse=True)
    floats = used.view(np.float32)
    return np.array([_float32(float(v)) for v in floats], dtype=np.float64)[where.ravel()]


class ChunkColumns:
    """A `protobuf` decoder's columnar path: a chunk of records of one message type (one schema id and message
    index for the schema registry) -> the needed columns, or None (then the row parser decodes record by
    record)."""

    def __init__(self, flatten: Flattener, fixed: MessageReader | None, registry: RegistryDecoder | None):
        self._flatten, self._fixed, self._registry = flatten, fixed, registry
        self._wanted: dict[frozenset, dict[tuple[str, ...], list[str]]] = {}
        self._plans: dict[int, ColumnarPlan | None] = {}  # by id() of a MessageReader, which the decoder keeps

    def read(self, values: list[bytes], needed: set[str]) -> dict[str, pa.Array] | None:
        wanted = self._wanted.get(frozenset(needed))
        if wanted is None:
            wanted = self._wanted[frozenset(needed)] = self._flatten.columns_wanted(needed)
        if not wanted or not values:
            return None
        found = self._reader(values)
        if found is None:
            return None
        reader, skip = found
        if id(reader) not in self._plans:
            self._plans[id(reader)] = ColumnarPlan.of(reader)
        plan = self._plans[id(reader)]
        return None if plan is None else plan.read(values, wanted, skip)

    def _reader(self, values: list[bytes]) -> tuple[MessageReader, int] | None:
        """The chunk's message reader and header size, or None when its records' headers differ."""
        if self._fixed is not None:
            return self._fixed, 0
        assert self._registry is not None
        try:
            schema_id, payload = split_wire_format(values[0])
            indexes, body = read_message_indexes(payload)
            skip = len(values[0]) - len(body)
            if same_header(values, skip) is None:
                return None
            return self._registry.reader(schema_id, indexes), skip
        except ValueError:  # the registry's errors too: the per-record path names them per record
            return None
