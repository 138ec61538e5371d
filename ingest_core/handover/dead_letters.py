"""Dead letters: the raw Kafka records the row parser did not ingest as sent (unparseable, processedWithError,
and thrownAway when the spec asks), kept as Parquet so they can be inspected and replayed.

Each split writes its own file next to its split report (`<attempt>/dead-letters/split-<i>.parquet`, see
`deep_storage`) and names it in the report; nothing reads attempt folders by listing them: the publish records
the published attempt's files with its segments (`store.publisher`), so dead letters are visible exactly when,
and only where, the run's segments are. One row per record (a record whose JSON held several bad rows is one
dead letter, its errors joined), in offset order, with the record's raw key, value, headers and timestamp.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from ingest_core.handover import deep_storage
from ingest_core.handover.object_store import S3Access
from ingest_core.handover.report import DeadLetterFile, Outcome, Rejection

FOLDER = "dead-letters"

HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
    ("timestamp", pa.timestamp("ms", tz="UTC")),  # the Kafka record's timestamp; null when it has none
    ("key", pa.binary()), ("value", pa.binary()), ("headers", pa.list_(HEADER)),
    ("outcome", pa.string()),  # unparseable, processedWithError or thrownAway (handover.report.Outcome)
    ("error", pa.string()),
])

# of several rows of one record, the dead letter takes the worst outcome
_SEVERITY = {Outcome.UNPARSEABLE: 0, Outcome.PROCESSED_WITH_ERROR: 1, Outcome.THROWN_AWAY: 2}


@dataclass(frozen=True)
class RawRecords:
    """What the row parser does not need but a dead letter keeps, aligned with a chunk's records (the kafka
    input format's chunks carry them already)."""

    keys: Sequence[bytes | None]
    timestamps: Sequence[int | None]  # epoch ms; None when the record has none
    headers: Sequence[Any]  # per record: list of (name, bytes) or None


def file_uri(attempt_uri: str, split_index: int) -> str:
    return deep_storage.join(attempt_uri, FOLDER, f"split-{split_index:05d}.parquet")


def dead_letter_table(chunk: Any, rejections: Sequence[Rejection], raw: RawRecords) -> pa.Table:
    """The dead letters of one parsed chunk (`row_parser.RecordChunk`): its records at the rejections' offsets."""
    worst: dict[int, Rejection] = {}
    messages: dict[int, list[str]] = {}
    for r in rejections:
        have = worst.get(r.offset)
        if have is None or _SEVERITY[r.outcome] < _SEVERITY[have.outcome]:
            worst[r.offset] = r
        messages.setdefault(r.offset, [])
        if r.message not in messages[r.offset]:
            messages[r.offset].append(r.message)
    offsets = sorted(worst)
    index = _indexer(chunk.offsets)
    rows = [index(o) for o in offsets]
    n = len(offsets)
    return pa.Table.from_pydict({
        "topic": [chunk.topic] * n, "partition": [chunk.partition] * n, "offset": offsets,
        "timestamp": [_timestamp(raw.timestamps[i]) for i in rows], "key": [raw.keys[i] for i in rows],
        "value": [chunk.values[i] for i in rows],
        "headers": [_headers(raw.headers[i]) for i in rows],
        "outcome": [worst[o].outcome.value for o in offsets], "error": ["; ".join(messages[o]) for o in offsets],
    }, schema=SCHEMA)


def _indexer(offsets: Sequence[int]):
    """offset -> the record's position in the chunk (offsets only grow; a range when contiguous)."""
    if isinstance(offsets, range):
        return offsets.index
    return lambda o: bisect.bisect_left(offsets, o)


def _timestamp(ms: int | None) -> int | None:
    return ms if ms is not None and ms >= 0 else None  # librdkafka's -1: no timestamp


def _headers(headers: Any) -> list[dict[str, Any]] | None:
    if not headers:
        return None
    return [{"key": k, "value": v if v is None or isinstance(v, bytes) else str(v).encode()} for k, v in headers]


class DeadLetterWriter:
    """One split's dead letters, streamed into one Parquet file as chunks come (a row group per `row_group_bytes`
    of them, so memory stays bounded). Written whole when the split ends (`deep_storage.staging_path`), so a Spark task
    retried in the same attempt replaces the file whole; no file at all when the split had none. A split that
    fails leaves at most a `.tmp` file, which no report names, so nothing ever reads it."""

    def __init__(self, uri: str, row_group_bytes: int = 16 << 20, access: S3Access | None = None):
        self.uri = uri
        self.access = access  # the job's object-store settings (None: those registered for `uri`)
        self.records = 0
        self.row_group_bytes = row_group_bytes
        self._fs: Any = None
        self._tmp = self._path = ""
        self._writer: pq.ParquetWriter | None = None
        self._pending: list[pa.Table] = []
        self._pending_bytes = 0

    def add(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        self._pending.append(table)
        self._pending_bytes += table.nbytes
        self.records += table.num_rows
        if self._pending_bytes >= self.row_group_bytes:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        if self._writer is None:
            self._fs, self._tmp, self._path = deep_storage.staging_path(self.uri, self.access)
            self._writer = pq.ParquetWriter(self._tmp, SCHEMA, filesystem=self._fs, compression="zstd")
        self._writer.write_table(pa.concat_tables(self._pending))
        self._pending, self._pending_bytes = [], 0

    def close(self) -> DeadLetterFile | None:
        self._flush()
        if self._writer is None:
            return None
        self._writer.close()
        deep_storage.settle(self._fs, self._tmp, self._path)
        return DeadLetterFile(self.uri, self.records, self._fs.get_file_info(self._path).size)


def read_files(locations: Sequence[str]) -> pa.Table:
    """Dead-letter files, concatenated in the order given."""
    tables = []
    for location in locations:
        fs, path = deep_storage.filesystem(location)
        tables.append(pq.read_table(path, filesystem=fs, schema=SCHEMA))
    return pa.concat_tables(tables) if tables else SCHEMA.empty_table()
