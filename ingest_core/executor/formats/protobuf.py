"""The `protobuf` input format: Druid's `protoBytesDecoder` types `file`, `inline` and `schema_registry`.

A message becomes a row as Druid's ProtobufConverter makes it (older Druids printed it with protobuf's
JsonFormat, int64 as text; the same otherwise):
  - only the fields the message holds: an unset field, and in proto3 a scalar at its default (0, "", false),
    is absent (null), as `getAllFields()` gives them;
  - each field under its JSON name (`json_name`, lowerCamelCase: `http_method` reads as `httpMethod`);
  - enums by their value's name (an unknown number as the number), bytes as base64 text, int64 as numbers,
    float as the shortest decimal of the float32, maps as objects (keys as text), repeated as lists, nested
    messages as objects;
  - well-known types: Timestamp as RFC 3339 text, Duration as "1.5s", FieldMask as text, wrappers as their
    value, Struct / Value / ListValue as the JSON they hold, Any as its JSON text.
Then `flattenSpec` applies as to JSON. A record that cannot become a row raises ValueError saying why (the row
parser keeps it as a parse exception / dead letter).

`schema_registry`: each record is in Confluent's wire format (magic byte, schema id, message indexes); its
schema is looked up by id once per task (the client caches it per process) and becomes a descriptor as
`protobuf_descriptors.registry_file` says, its imports from the references and protobuf's own well-known types.
"""

from __future__ import annotations

import base64
import dataclasses
import math
import struct
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from ingest_core.core.spec import ProtoBytesDecoder
from ingest_core.executor.formats.base import json_text
from ingest_core.executor.formats.protobuf_descriptors import pool_of, registry_file
from ingest_core.executor.formats.schema_registry import (
    RegistryConfig,
    RegistryUnavailableError,
    SchemaRegistryError,
    client_for,
    read_message_indexes,
    split_wire_format,
)

# ------------------------------------------------------------------------------------------ message -> row

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_TIMESTAMP_SECONDS = (-62135596800, 253402300799)  # 0001-01-01 to 9999-12-31, as protobuf's JSON mapping
_DURATION_SECONDS = 315576000000


def _float32(v: float) -> float:
    """The shortest decimal that reads back as the same float32 (what Java's Float.toString prints), so a
    float field of 0.1 reads 0.1, not 0.10000000149011612."""
    if not math.isfinite(v):
        return v
    for digits in range(1, 10):
        short = float(f"{v:.{digits}g}")
        try:
            if struct.unpack("<f", struct.pack("<f", short))[0] == v:
                return short
        except OverflowError:  # rounded past float32's largest: the next digit count fits
            continue
    return v


def _fraction(nanos: int) -> str:
    if nanos == 0:
        return ""
    if nanos % 1_000_000 == 0:
        return f".{nanos // 1_000_000:03d}"
    if nanos % 1000 == 0:
        return f".{nanos // 1000:06d}"
    return f".{nanos:09d}"


def _timestamp(msg: Any) -> str:
    seconds, nanos = msg.seconds, msg.nanos
    if not _TIMESTAMP_SECONDS[0] <= seconds <= _TIMESTAMP_SECONDS[1] or not 0 <= nanos < 1_000_000_000:
        raise ValueError(f"google.protobuf.Timestamp {seconds}s {nanos}ns is out of range (years 1 to 9999)")
    t = _EPOCH + timedelta(seconds=seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%S").rjust(19, "0") + _fraction(nanos) + "Z"


def _duration(msg: Any) -> str:
    seconds, nanos = msg.seconds, msg.nanos
    if abs(seconds) > _DURATION_SECONDS or abs(nanos) >= 1_000_000_000 or (seconds and nanos and
                                                                         (seconds < 0) != (nanos < 0)):
        raise ValueError(f"google.protobuf.Duration {seconds}s {nanos}ns is out of range or mixes signs")
    sign = "-" if seconds < 0 or nanos < 0 else ""
    return f"{sign}{abs(seconds)}{_fraction(abs(nanos))}s"


def _camel(path: str) -> str:
    head, *rest = path.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def row_name(fd: FieldDescriptor) -> str:
    """A field's name in the row: its JSON name, as Druid's converter names it."""
    return fd.json_name or _camel(fd.name)


class Converter:
    """Message -> plain Python values, one plan per message type (the field's name and how its value reads),
    built on first use."""

    def __init__(self, pool: descriptor_pool.DescriptorPool):
        self.pool = pool
        self._plans: dict[Descriptor, dict[FieldDescriptor, tuple[str, Callable[[Any], Any] | None]]] = {}
        self._special: dict[str, Callable[[Any], Any]] = {
            "google.protobuf.Timestamp": _timestamp,
            "google.protobuf.Duration": _duration,
            "google.protobuf.FieldMask": lambda m: ",".join(_camel(p) for p in m.paths),
            "google.protobuf.Struct": self._struct,
            "google.protobuf.Value": self._value,
            "google.protobuf.ListValue": lambda m: [self._value(v) for v in m.values],
            "google.protobuf.Any": self._any,
        }
        for wrapper in ("Bool", "Int32", "UInt32", "Int64", "UInt64", "String", "Bytes", "Float", "Double"):
            self._special[f"google.protobuf.{wrapper}Value"] = self._wrapper

    def message(self, msg: Any) -> dict[str, Any]:
        plan = self._plans.get(msg.DESCRIPTOR)
        if plan is None:
            plan = self._plans[msg.DESCRIPTOR] = {}
        out: dict[str, Any] = {}
        for fd, value in msg.ListFields():
            step = plan.get(fd)
            if step is None:
                step = plan[fd] = (row_name(fd), self._reader(fd))
            name, read = step
            out[name] = value if read is None else read(value)
        return out

    def _reader(self, fd: FieldDescriptor) -> Callable[[Any], Any] | None:
        """How a field's value reads (None: as it is), for repeated and map fields the whole container."""
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            key = self._single(fd.message_type.fields_by_name["key"])
            value = self._single(fd.message_type.fields_by_name["value"])
            return lambda m: {_map_key(k if key is None else key(k)): (v if value is None else value(v))
                              for k, v in m.items()}
        one = self._single(fd)
        if _is_repeated(fd):
            return list if one is None else (lambda vs: [one(v) for v in vs])
        return one

    def _single(self, fd: FieldDescriptor) -> Callable[[Any], Any] | None:
        t = fd.type
        if t == FieldDescriptor.TYPE_BYTES:
            return lambda b: base64.b64encode(b).decode("ascii")
        if t == FieldDescriptor.TYPE_FLOAT:
            return _float32
        if t == FieldDescriptor.TYPE_ENUM:
            if fd.enum_type.full_name == "google.protobuf.NullValue":
                return lambda _: None
            names = {v.number: v.name for v in fd.enum_type.values}
            return lambda n: names.get(n, n)
        if t in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
            return self._special.get(fd.message_type.full_name, self.message)
        return None

    def _wrapper(self, msg: Any) -> Any:
        fd = msg.DESCRIPTOR.fields_by_name["value"]
        read = self._single(fd)
        value = msg.value
        return value if read is None else read(value)

    def _struct(self, msg: Any) -> dict[str, Any]:
        return {k: self._value(v) for k, v in msg.fields.items()}

    def _value(self, msg: Any) -> Any:
        kind = msg.WhichOneof("kind")
        if kind is None or kind == "null_value":
            return None
        if kind == "struct_value":
            return self._struct(msg.struct_value)
        if kind == "list_value":
            return [self._value(v) for v in msg.list_value.values]
        return getattr(msg, kind)

    def _any(self, msg: Any) -> str:
        try:
            return json_text(json_format.MessageToDict(msg, descriptor_pool=self.pool))
        except (json_format.Error, TypeError, KeyError) as exc:
            raise ValueError(f"google.protobuf.Any of type {msg.type_url!r} cannot be read: {exc}") from None


def _is_repeated(fd: FieldDescriptor) -> bool:
    try:
        return fd.is_repeated  # protobuf >= 6.31, which dropped `label`
    except AttributeError:
        return fd.label == FieldDescriptor.LABEL_REPEATED


def _is_required(fd: FieldDescriptor) -> bool:
    try:
        return fd.is_required
    except AttributeError:
        return fd.label == FieldDescriptor.LABEL_REQUIRED


def _map_key(k: Any) -> str:
    return ("true" if k else "false") if isinstance(k, bool) else str(k)


def _has_required(desc: Descriptor, seen: set[str] | None = None) -> bool:
    seen = set() if seen is None else seen
    if desc.full_name in seen:
        return False
    seen.add(desc.full_name)
    for fd in desc.fields:
        if _is_required(fd):
            return True
        if fd.message_type is not None and _has_required(fd.message_type, seen):
            return True
    return False


@dataclasses.dataclass
class MessageReader:
    """Bytes of one message type -> its row: parse, check required fields (proto2, as Java's parser does),
    convert."""

    descriptor: Descriptor
    converter: Converter
    cls: Any = None
    required: bool = False

    def __post_init__(self) -> None:
        self.cls = message_factory.GetMessageClass(self.descriptor)
        self.required = _has_required(self.descriptor)

    def read(self, data: bytes | memoryview, what: str = "") -> dict[str, Any]:
        try:
            msg = self.cls.FromString(bytes(data) if isinstance(data, memoryview) else data)
        except (message.DecodeError, RuntimeError, ValueError, OverflowError) as exc:
            raise ValueError(f"bytes do not parse as Protobuf message {self.descriptor.full_name}{what} "
                             f"({exc}): a truncated record, or one written with another schema") from None
        if self.required and not msg.IsInitialized():
            missing = ", ".join(msg.FindInitializationErrors())
            raise ValueError(f"Protobuf message {self.descriptor.full_name}{what} lacks required fields: "
                             f"{missing}")
        return self.converter.message(msg)


# ------------------------------------------------------------------------------------------ schema registry


@dataclasses.dataclass
class _RegistrySchema:
    pool: descriptor_pool.DescriptorPool
    file: Any  # the pool's FileDescriptor
    converter: Converter
    readers: dict[tuple[int, ...], MessageReader] = dataclasses.field(default_factory=dict)


class RegistryDecoder:
    """Records in Confluent's wire format, their schemas by id from the registry (cached per task; the client
    caches per process and retries a registry that does not answer)."""

    def __init__(self, dec: ProtoBytesDecoder):
        self.client = client_for(RegistryConfig.of_decoder(dec.registry))
        self._schemas: dict[int, _RegistrySchema | ValueError] = {}

    def read(self, data: bytes) -> dict[str, Any]:
        schema_id, payload = split_wire_format(data)
        indexes, body = read_message_indexes(payload)
        return self.reader(schema_id, indexes).read(body, f" (schema id {schema_id})")

    def reader(self, schema_id: int, indexes: list[int]) -> MessageReader:
        """The reader of the message type a schema id and message indexes name (ValueError when none)."""
        schema = self._schemas.get(schema_id)
        if schema is None:
            try:
                schema = self._load(schema_id)
            except RegistryUnavailableError:
                raise  # may answer for a later record (the client fails fast meanwhile): not kept here
            except ValueError as exc:  # unknown to the registry, or not a usable Protobuf schema: for the task
                schema = exc
            self._schemas[schema_id] = schema
        if isinstance(schema, ValueError):
            raise ValueError(str(schema))  # a new one per record: re-raising one object grows its traceback
        reader = schema.readers.get(tuple(indexes))
        if reader is None:
            reader = schema.readers[tuple(indexes)] = MessageReader(
                self._message(schema, indexes, schema_id), schema.converter)
        return reader

    def _load(self, schema_id: int) -> _RegistrySchema:
        what = f"schema id {schema_id}"
        plain = self.client.schema(schema_id)
        kind = plain.schema_type
        if kind.upper() != "PROTOBUF":
            raise ValueError(f"{what} is an {kind} schema, not Protobuf: this topic's producers use another "
                             "serializer (use the inputFormat that matches it, e.g. avro_stream)")
        refs = {r.name: r for r in plain.references}

        def texts(references: dict[str, Any]) -> dict[str, str]:
            """The .proto text of the imports, for a registry that answers text (protoc compiles them)."""
            out: dict[str, str] = {}
            for name, ref in references.items():
                imported = self.client.referenced(ref)
                out[name] = imported.schema
                out.update(texts({r.name: r for r in imported.references}))
            return out

        main = registry_file(plain, what, lambda: self.client.schema(schema_id, fmt="serialized"),
                             lambda: texts(refs))
        main.name = main.name or "schema.proto"

        def find(name: str) -> descriptor_pb2.FileDescriptorProto | None:
            ref = refs.get(name)
            if ref is None:
                return None
            imported = self.client.referenced(ref)
            nested = {r.name: r for r in imported.references}
            fdp = registry_file(imported, f"{what}'s import {name!r}",
                                lambda: self.client.referenced(ref, fmt="serialized"), lambda: texts(nested))
            fdp.name = name
            refs.update(nested)
            return fdp

        try:
            pool = pool_of([main], find)
        except SchemaRegistryError:
            raise  # says which schema already
        except ValueError as exc:
            raise ValueError(f"{what}: {exc}") from None
        return _RegistrySchema(pool, pool.FindFileByName(main.name), Converter(pool))

    @staticmethod
    def _message(schema: _RegistrySchema, indexes: list[int], schema_id: int) -> Descriptor:
        types = list(schema.file.message_types_by_name.values())
        desc = None
        for depth, i in enumerate(indexes):
            if not 0 <= i < len(types):
                raise ValueError(f"message index {indexes} does not exist in schema id {schema_id} (level {depth} "
                                 f"has {len(types)} message types): the record was written with another schema")
            desc = types[i]
            types = list(desc.nested_types)
        assert desc is not None
        return desc
