"""The `protobuf` input format's decoder: one row per record through Druid's converter (`protobuf`), or a
chunk of one message type into columns at once (`protobuf_columns`)."""

from __future__ import annotations

import base64
from typing import Any

import pyarrow as pa

from ingest_core.core.spec import InputFormat
from ingest_core.executor.formats.base import Flattener
from ingest_core.executor.formats.protobuf import Converter, MessageReader, RegistryDecoder
from ingest_core.executor.formats.protobuf_descriptors import (
    decoder_of,
    descriptor_set,
    find_message_type,
    pool_of,
    read_descriptor_file,
)
from ingest_core.executor.formats.protobuf_columns import ChunkColumns


class ProtobufDecoder:
    """`rows(data)`: one row per record, its fields as Druid names them, then the flattenSpec; `columns`: a chunk
    of one message type into columns at once (`protobuf_columns`)."""

    def __init__(self, fmt: InputFormat):
        dec = decoder_of(fmt)
        self.flatten = Flattener(fmt.flatten_spec)
        self.paths = self.flatten.paths
        self._registry: RegistryDecoder | None = None
        self._fixed: MessageReader | None = None
        if dec.type == "schema_registry":
            self._registry = RegistryDecoder(dec)
            self._columns = ChunkColumns(self.flatten, None, self._registry)
            return
        if dec.type == "file":
            data, what = read_descriptor_file(dec.descriptor or ""), f"descriptor {dec.descriptor!r}"
        else:
            data, what = base64.b64decode(dec.descriptor_string or ""), "descriptorString"
        files = descriptor_set(data, what)
        pool = pool_of(files)
        self._fixed = MessageReader(find_message_type(pool, files, dec.proto_message_type, what), Converter(pool))
        self._columns = ChunkColumns(self.flatten, self._fixed, None)

    def rows(self, data: bytes) -> list[dict[str, Any]]:
        if self._fixed is not None:
            doc = self._fixed.read(data)
        else:
            assert self._registry is not None
            doc = self._registry.read(data)
        return [self.flatten(doc)]

    def columns(self, values: list[bytes], needed: set[str]) -> dict[str, pa.Array] | None:
        """The chunk as Arrow columns (those of `needed`) in one columnar pass, or None: the row parser then
        decodes it record by record (`rows`), which names the records at fault."""
        return self._columns.read(values, needed)
