"""`ingest dead-letters DATASOURCE`: the dead letters of a datasource's published runs, as lines or JSON."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from ingest_core.core.periods import format_datetime
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.reader import DatasourceReader

PREVIEW_CHARS = 60


@dataclass(frozen=True)
class DeadLetterView:
    run_id: str
    topic: str
    partition: int
    offset: int
    timestamp: Any
    outcome: str
    error: str
    key: bytes | None
    value: bytes | None

    def to_json(self) -> dict[str, Any]:
        """Text as readable as the bytes allow (undecodable bytes as \\x escapes), and the exact bytes in base64."""
        return {"runId": self.run_id, "topic": self.topic, "partition": self.partition, "offset": self.offset,
                "timestamp": format_datetime(self.timestamp) if self.timestamp is not None else None,
                "outcome": self.outcome, "error": self.error, "key": _text(self.key), "value": _text(self.value),
                "keyBase64": _b64(self.key), "valueBase64": _b64(self.value)}

    def line(self) -> str:
        return (f"{self.run_id}  {self.topic}/{self.partition}@{self.offset}  {self.outcome}  {self.error}  "
                f"value: {preview(self.value)}")


def preview(value: bytes | None) -> str:
    if value is None:
        return "(null)"
    text = (_text(value) or "").replace("\n", "\\n").replace("\r", "\\r")
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "..."


def _text(value: bytes | None) -> str | None:
    return value.decode("utf-8", "backslashreplace") if value is not None else None


def _b64(value: bytes | None) -> str | None:
    return base64.b64encode(value).decode() if value is not None else None


def dead_letters(store: MetadataStore, datasource: str, run_id: str | None = None,
                 limit: int | None = None) -> tuple[list[DeadLetterView], int]:
    """The last `limit` dead letters (all: None), oldest first, and how many there are. A `run_id` the datasource
    never planned is `RunNotFoundError`, not "0 dead letters"."""
    store.datasources.require(datasource)
    if run_id is not None:
        store.runs.require(datasource, run_id)
    table = DatasourceReader(store, datasource).dead_letters(run_id)
    total = table.num_rows
    if limit is not None:
        table = table.slice(max(0, total - limit))
    views = [DeadLetterView(r["run_id"], r["topic"], r["partition"], r["offset"], r["timestamp"], r["outcome"],
                            r["error"], r["key"], r["value"]) for r in table.to_pylist()]
    return views, total
