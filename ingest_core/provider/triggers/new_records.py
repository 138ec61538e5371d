"""NewRecordsTrigger: waits, in the triggerer, until a datasource's topic has enough new records.

Seed 002's DelayedFetch as an Airflow trigger: the gate's task gives up its worker slot while this waits. It
polls the latest offsets (one batched ListOffsets request per poll) and fires when the records past the
starts the gate resolved reach `min_records`, or when the deadline passes, whichever comes first. The trigger
holds no secrets: it reloads the spec from its file (as every Airflow component sees the DAG folder) and
resolves the Kafka credentials there.

A triggerer runs every deferred gate of a fleet in one process, so the gates on one cluster with the same client
settings share one offset reader (`SharedReaders`): a reader of its own per gate held about 19 threads and 3 Kafka
clients (each a pthread key, of the 1,024 a process has), and 200 gates failed with confluent-kafka's "Failed to
initialize thread local storage".
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ingest_core.core.errors import IngestError, KafkaAuthenticationError
from ingest_core.core.offsets import TopicPartition, pending_records
from ingest_core.core.spec import DatasourceSpec, IOConfig, load_spec
from ingest_core.kafka.config import KafkaClientConfig
from ingest_core.kafka.offset_reader import KafkaOffsetReader

log = logging.getLogger(__name__)


GATE_CALL_TIMEOUT_S = 10.0  # each Kafka call of a gate's poll: a broker down now is asked again at the next poll


@dataclass
class SharedReader:
    """One gate's hold on a shared reader (`SharedReaders.acquire`)."""

    key: tuple
    reader: KafkaOffsetReader
    holders: int = 0


class SharedReaders:
    """The triggerer process's offset readers, one per distinct client configuration (every resolved property,
    credentials included, and the isolation level: gates share a reader only when their clients would be the
    same), counted by the gates holding them; the last to let go closes it. A reader serves concurrent polls:
    each thread has its own consumer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._readers: dict[tuple, SharedReader] = {}

    def acquire(self, spec: DatasourceSpec) -> SharedReader:
        io = spec.io_config
        config = KafkaClientConfig.from_properties(io.consumer_properties)
        key = (tuple(sorted((k, repr(v)) for k, v in config.properties.items())), io.isolation_level)
        with self._lock:
            shared = self._readers.get(key)
            if shared is None:  # (made under the lock: two gates starting at once make one reader)
                shared = self._readers[key] = SharedReader(key, KafkaOffsetReader(
                    config, isolation_level=io.isolation_level, timeout_s=GATE_CALL_TIMEOUT_S))
            shared.holders += 1
            return shared

    def release(self, shared: SharedReader, *, discard: bool = False) -> None:
        """`discard`: the broker refused the credentials. A reader remembers a refusal, so the next gate gets a new
        one (they may have been granted since); the gates holding this one keep it until they let go."""
        with self._lock:
            shared.holders -= 1
            if (discard or shared.holders == 0) and self._readers.get(shared.key) is shared:
                del self._readers[shared.key]
            close = shared.holders == 0
        if close:
            shared.reader.close()

    def open(self) -> int:
        with self._lock:
            return len(self._readers)


SHARED_READERS = SharedReaders()


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
        spec = shared = None
        records, error, refused = 0, None, False
        try:
            while True:
                try:
                    if shared is None:
                        spec = await asyncio.to_thread(load_spec, self.spec_path)
                        shared = await asyncio.to_thread(SHARED_READERS.acquire, spec)
                    records = await asyncio.to_thread(_pending, shared.reader, spec.io_config, starts)
                    error = None
                except KafkaAuthenticationError as exc:  # refused credentials: asking again cannot help
                    refused = True
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
            if shared is not None:  # a close waits for a query still running: not on the triggerer's loop
                await asyncio.to_thread(SHARED_READERS.release, shared, discard=refused)


def _pending(reader: KafkaOffsetReader, io: IOConfig, starts: dict[TopicPartition, int]) -> int:
    snap = reader.snapshot(reader.partitions(topic=io.topic, pattern=io.topic_pattern))
    return pending_records(starts, snap.earliest, snap.latest)
