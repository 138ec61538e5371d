"""Protobuf descriptor sets for the `protobuf` input format: read, checked and shipped.

A `file` decoder's descriptor set (what `protoc -o` writes) is read where the spec is (`ingest validate`, the DAG
factory, the run's staging) and travels inline with the job, so the Spark executors need no access to its path;
a schema registry's answer (a serialized FileDescriptorProto, or .proto text compiled by protoc) becomes a
descriptor the same way. Imports come from the set itself, the registry's references, or protobuf's own
well-known types.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import importlib
import importlib.resources
import tempfile
import threading
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable

from google.protobuf import descriptor_pb2, descriptor_pool, message
from google.protobuf.descriptor import Descriptor

from ingest_core.core.binding import did_you_mean
from ingest_core.core.errors import SpecProblem
from ingest_core.core.spec import DatasourceSpec, InputFormat, ProtoBytesDecoder
from ingest_core.executor.formats.schema_registry import (
    RegisteredSchema,
    RegistryUnavailableError,
)
from ingest_core.handover import deep_storage

# the well-known types an import may name without the set (or the registry) carrying them
_WELL_KNOWN = ("any", "api", "duration", "empty", "field_mask", "source_context", "struct", "timestamp", "type",
               "wrappers", "descriptor")


def well_known_file(name: str) -> bytes | None:
    """The serialized FileDescriptorProto of `google/protobuf/<x>.proto`, from the protobuf package itself."""
    if not (name.startswith("google/protobuf/") and name.endswith(".proto")):
        return None
    stem = name[len("google/protobuf/"):-len(".proto")]
    if stem not in _WELL_KNOWN:
        return None

    module = importlib.import_module(f"google.protobuf.{stem}_pb2")
    return module.DESCRIPTOR.serialized_pb


def pool_of(files: list[descriptor_pb2.FileDescriptorProto],
            find: Callable[[str], descriptor_pb2.FileDescriptorProto | None] = lambda name: None
            ) -> descriptor_pool.DescriptorPool:
    """A pool holding `files`, each after its imports: from `files`, protobuf's well-known types, or `find`."""
    by_name = {f.name: f for f in files}
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(name: str, stack: tuple[str, ...]) -> None:
        if name in added:
            return
        if name in stack:
            raise ValueError(f"the descriptor files import each other in a cycle: {' -> '.join(stack + (name,))}")
        fdp = by_name.get(name)
        if fdp is None:
            known = well_known_file(name)
            if known is not None:
                pool.AddSerializedFile(known)
                added.add(name)
                return
            fdp = find(name)
            if fdp is None:
                raise ValueError(f"{stack[-1] if stack else 'the descriptor'} imports {name!r}, which is not in "
                                 "the descriptor set: compile with `protoc --include_imports -o ...`")
        for dep in fdp.dependency:
            add(dep, stack + (name,))
        try:
            pool.AddSerializedFile(fdp.SerializeToString())
        except (TypeError, ValueError) as exc:
            raise ValueError(f"descriptor file {name!r} is not valid: {exc}") from None
        added.add(name)

    for f in files:
        add(f.name, ())
    return pool


def descriptor_set(data: bytes, where: str) -> list[descriptor_pb2.FileDescriptorProto]:
    try:
        files = list(descriptor_pb2.FileDescriptorSet.FromString(data).file)
    except message.DecodeError as exc:
        raise ValueError(f"{where} is not a descriptor set ({exc}): write it with `protoc -o metrics.desc "
                         "metrics.proto` (--descriptor_set_out), not --python_out or a .proto file") from None
    if not files:
        raise ValueError(f"{where} holds no descriptor file: write it with `protoc -o metrics.desc metrics.proto`")
    return files


def _all_messages(desc_list: Any) -> list[Descriptor]:
    out = []
    for d in desc_list:
        out.append(d)
        out.extend(_all_messages(d.nested_types))
    return out


def find_message_type(pool: descriptor_pool.DescriptorPool, files: list[descriptor_pb2.FileDescriptorProto],
                      name: str | None, where: str) -> Descriptor:
    """Druid's rule: `protoMessageType` by full or short name (nested as `Outer.Inner` too); without it, the first
    message of the file the set was compiled from (not of an import `--include_imports` put first)."""
    imported = {dep for f in files for dep in f.dependency}
    files = [f for f in files if f.name not in imported] + [f for f in files if f.name in imported]
    candidates = [d for f in files for d in _all_messages(pool.FindFileByName(f.name).message_types_by_name.values())]
    if not candidates:
        raise ValueError(f"{where} defines no message type")
    if not name:
        return candidates[0]
    for d in candidates:
        full = d.full_name
        if name in (full, d.name) or full.endswith("." + name):
            return d
    names = sorted({d.full_name for d in candidates})
    raise ValueError(f"protoMessageType {name!r} is not in {where}{did_you_mean(name, names)}; it defines: "
                     f"{', '.join(names[:20])}")


MAX_DESCRIPTOR_BYTES = 16 << 20  # a descriptor set of thousands of messages is a few MB


def read_descriptor_file(descriptor: str, relative_to: str | None = None) -> bytes:
    """The bytes of a `file` decoder's descriptor: a path (relative: to the spec file's folder), a file:// url, an
    http(s) url, or any url pyarrow reads (s3://, hdfs://, gs://)."""
    parsed = urllib.parse.urlsplit(descriptor)
    try:
        if parsed.scheme in ("http", "https"):
            with urllib.request.urlopen(descriptor, timeout=30) as resp:
                return resp.read()
        if parsed.scheme in ("", "file"):
            path = Path(urllib.parse.unquote(parsed.path) if parsed.scheme else descriptor)
            if not path.is_absolute() and relative_to and "://" not in relative_to:
                path = Path(relative_to).parent / path
            if path.exists() and not path.is_file():  # a FIFO or a device would block the DAG file's parse
                raise ValueError(f"descriptor {descriptor!r} is not a regular file: give the path of a descriptor "
                                 "set file (protoc --descriptor_set_out)")
            if path.exists() and path.stat().st_size > MAX_DESCRIPTOR_BYTES:
                raise ValueError(f"descriptor {descriptor!r} is {path.stat().st_size:,} bytes, over the "
                                 f"{MAX_DESCRIPTOR_BYTES:,} a descriptor set may be: is it the right file?")
            return path.read_bytes()

        fs, path_in_fs = deep_storage.filesystem(descriptor)
        with fs.open_input_stream(path_in_fs) as f:
            return f.read()
    except OSError as exc:
        raise ValueError(f"descriptor {descriptor!r} cannot be read ({getattr(exc, 'strerror', None) or exc}): "
                         "check the path (relative paths start at the spec file's folder) and that this machine "
                         "can read it") from None


def decoder_of(fmt: InputFormat) -> ProtoBytesDecoder:
    assert fmt.proto_bytes_decoder is not None
    return fmt.proto_bytes_decoder


def inline_descriptors(spec: DatasourceSpec) -> DatasourceSpec:
    """`spec` with each `file` protoBytesDecoder's descriptor read here and carried inline (type `inline`): the
    Spark executors then need no access to the path. Called where the spec is staged and by the job's driver."""
    io = spec.io_config

    def inlined(fmt: InputFormat | None) -> InputFormat | None:
        if fmt is None:
            return None
        if fmt.type == "kafka":
            return dataclasses.replace(fmt, value_format=inlined(fmt.value_format), key_format=inlined(fmt.key_format))
        if fmt.type != "protobuf" or decoder_of(fmt).type != "file":
            return fmt
        dec = decoder_of(fmt)
        data = read_descriptor_file(dec.descriptor or "", spec.source)
        return dataclasses.replace(fmt, proto_bytes_decoder=ProtoBytesDecoder(
            type="inline", descriptor_string=base64.b64encode(data).decode("ascii"),
            proto_message_type=dec.proto_message_type))

    fmt = inlined(io.input_format)
    if fmt == io.input_format:
        return spec
    return dataclasses.replace(spec, io_config=dataclasses.replace(io, input_format=fmt))


def descriptor_problems(spec: DatasourceSpec) -> list[SpecProblem]:
    """`ingest validate` and the DAG factory: each `file` / `inline` decoder's descriptor set can be read,
    parses, and holds its message type. Remote descriptors (http, s3, ...) are read when the run is staged."""
    problems = []
    for path, fmt in _protobuf_formats(spec.io_config.input_format, "spec.ioConfig.inputFormat"):
        dec = decoder_of(fmt)
        where = f"{path}.protoBytesDecoder"
        try:
            if dec.type == "file":
                if urllib.parse.urlsplit(dec.descriptor or "").scheme not in ("", "file"):
                    continue
                data = read_descriptor_file(dec.descriptor or "", spec.source)
                what = f"descriptor {dec.descriptor!r}"
            elif dec.type == "inline":
                data = base64.b64decode(dec.descriptor_string or "")
                what = "descriptorString"
            else:
                continue
            files = descriptor_set(data, what)
            find_message_type(pool_of(files), files, dec.proto_message_type, what)
        except ValueError as exc:
            field = "protoMessageType" if "protoMessageType" in str(exc) else (
                "descriptor" if dec.type == "file" else "descriptorString")
            problems.append(SpecProblem(f"{where}.{field}", str(exc)))
    return problems


def _protobuf_formats(fmt: InputFormat | None, path: str) -> list[tuple[str, InputFormat]]:
    if fmt is None:
        return []
    if fmt.type == "kafka":
        return (_protobuf_formats(fmt.value_format, f"{path}.valueFormat")
                + _protobuf_formats(fmt.key_format, f"{path}.keyFormat"))
    return [(path, fmt)] if fmt.type == "protobuf" and fmt.proto_bytes_decoder is not None else []


# ------------------------------------------------------------------------------------------ registry answers

_compile_lock = threading.Lock()


def registry_file(schema: RegisteredSchema, what: str, serialized: Callable[[], RegisteredSchema],
                  imports: Callable[[], dict[str, str]]) -> descriptor_pb2.FileDescriptorProto:
    """A registered Protobuf schema as a FileDescriptorProto. The registry's plain answer is base64 of one when the
    producer registered it so (confluent-kafka's serializers do); .proto text otherwise (Java's serializers),
    then `serialized()` (`?format=serialized`: base64 from Confluent's registry) is asked, and if that is no
    descriptor either (Apicurio 3 answers raw bytes as text, or fails) the text is compiled by protoc with the
    text of its imports (`imports()`)."""
    found = _serialized_file(schema.schema)
    if found is not None:
        return found
    try:
        found = _serialized_file(serialized().schema)
    except RegistryUnavailableError:
        found = None  # the plain answer came: a registry that cannot serialize, not one that is down
    return found if found is not None else compile_proto_text(schema.schema, what, imports())


def _serialized_file(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    try:
        return descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text.strip(), validate=True))
    except (binascii.Error, ValueError, message.DecodeError):
        return None


def compile_proto_text(text: str, what: str, imports: dict[str, str] | None = None
                       ) -> descriptor_pb2.FileDescriptorProto:
    """.proto text -> its FileDescriptorProto, by protoc itself (grpcio-tools bundles it): the maintained parser,
    not one of our own. Its imports come from `imports` (name -> text) or protoc's well-known types."""
    try:
        from grpc_tools import protoc
    except ImportError:
        raise ValueError(f"{what} came back as .proto text, and this executor has no protoc to compile it: "
                         "install grpcio-tools on the Spark executors, or use a registry that serves "
                         "?format=serialized (as Confluent's does)") from None

    with tempfile.TemporaryDirectory(prefix="ingest-proto-") as tmp, _compile_lock:
        root = Path(tmp)
        for name, source in {**(imports or {}), "schema.proto": text}.items():
            target = (root / name).resolve()
            if root.resolve() not in target.parents:
                raise ValueError(f"{what} imports {name!r}, a path outside the schema's folder")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(source)
        includes = str(importlib.resources.files("grpc_tools") / "_proto")
        out = root / "out.desc"
        code = protoc.main(["protoc", f"-I{root}", f"-I{includes}", f"-o{out}", "schema.proto"])
        if code != 0 or not out.exists():
            raise ValueError(f"{what} is not valid .proto text (protoc exited {code})")
        return descriptor_set(out.read_bytes(), what)[0]
