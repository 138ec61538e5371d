"""NewRecordsTrigger: waits, in the triggerer, until a datasource's topic has enough new records.

Seed 002's DelayedFetch as an Airflow trigger: the gate's task gives up its worker slot while this waits. It
polls the latest offsets (one batched ListOffsets request per poll) and fires when the records past the
starts the gate resolved reach `min_records`, or when the deadline passes, whichever comes first. The trigger
holds no secrets: it reloads the spec from its file (as every Airflow component sees the DAG folder) and
resolves the Kafka credentials there.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ingest_core.core.errors import IngestError, KafkaAuthenticationError
from ingest_core.core.offsets import TopicPartition, pending_records
from ingest_core.core.spec import IOConfig, load_spec
from ingest_core.kafka.offset_reader import KafkaOffsetReader

log = logging.getLogger(__name__)


class NewRecordsTrigger(BaseTrigger):
    def __init__(self, spec_path: str, starts: list[list[Any]], min_records: int, deadline: str,
                 poke_interval_s: float):
        super().__init__()
        self.spec_path = spec_path
        self.starts = starts  # [[topic, partition, offset], ...]: JSON, as trigger kwargs are stored
        self.min_records = min_records
        self.deadline = deadline  # ISO-8601, UTC
        self.poke_interval_s = poke_interval_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"spec_path": self.spec_path, "starts": self.starts, "min_records": self.min_records,
                 "deadline": self.deadline, "poke_interval_s": self.poke_interval_s})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        deadline = datetime.fromisoformat(self.deadline)
        starts = {TopicPartition(t, int(p)): int(o) for t, p, o in self.starts}
        spec = reader = None
        records, error = 0, None
        try:
            while True:
                try:
                    if reader is None:
                        spec = await asyncio.to_thread(load_spec, self.spec_path)
                        reader = await asyncio.to_thread(KafkaOffsetReader.for_spec, spec, 10.0)
                    records = await asyncio.to_thread(_pending, reader, spec.io_config, starts)
                    error = None
                except KafkaAuthenticationError as exc:  # refused credentials: asking again cannot help
                    yield TriggerEvent({"status": "refused", "records": 0, "error": str(exc)})
                    return
                except IngestError as exc:  # a broker that is down now may be back before the deadline
                    error = str(exc)
                    self.log.warning("data gate: %s", error)
                if error is None and records >= self.min_records:
                    yield TriggerEvent({"status": "ready", "records": records})
                    return
                remaining = (deadline - datetime.now(timezone.utc)).total_seconds()
                if remaining <= 0:
                    yield TriggerEvent({"status": "max_wait", "records": records, "error": error})
                    return
                self.log.info("data gate: %d of %d new records; waiting up to %.0fs more", records,
                              self.min_records, remaining)
                await asyncio.sleep(min(self.poke_interval_s, remaining))
        finally:
            if reader is not None:  # close waits for a query still running: not on the triggerer's loop
                await asyncio.to_thread(reader.close)


def _pending(reader: KafkaOffsetReader, io: IOConfig, starts: dict[TopicPartition, int]) -> int:
    snap = reader.snapshot(reader.partitions(topic=io.topic, pattern=io.topic_pattern))
    return pending_records(starts, snap.earliest, snap.latest)
