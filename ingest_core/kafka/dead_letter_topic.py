"""Producing a datasource's published dead letters to `microbatch.deadLetter.topic`, exactly once per published
run.

The metadata store numbers the publishes that made dead letters visible (`publish_seq`, in commit order). Each
run's dead letters go in one Kafka transaction that also commits, with `send_offsets_to_transaction`, the
offset `publish_seq` (metadata: the run id) for the consumer group `ingest.<dataSource>.deadletters` on
partition 0 of the dead-letter topic: the records and the "delivered up to here" marker become visible
together or not at all. The producer's `transactional.id` is that group's name, one per datasource, so
`init_transactions` fences any earlier producer (a report task still running, or one that died mid-produce)
and completes or aborts its open transaction before the marker is read. A delivery then produces only the
publishes after the marker, in order:
  - a report task retried or re-executed after a delivery reads the marker and produces nothing again;
  - a crash mid-produce leaves an aborted transaction, invisible to `read_committed` consumers, and the next
    delivery produces that run again;
  - two deliveries at once: the second fences the first, whose commit then fails.
Consumers of the topic must read with `isolation.level=read_committed` (the default of Kafka's Java consumer
is read_uncommitted, which also shows aborted attempts).

Each record keeps the original key, value and timestamp, then the original headers plus, in the spirit of
Kafka Connect's `__connect.errors.*`: `__ingest.errors.topic`, `.partition`, `.offset`, `.outcome`,
`.message`, `.datasource`, `.run`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from ingest_core.core.spec import DatasourceSpec
from ingest_core.kafka.config import KafkaClientConfig, unanswered
from ingest_core.kafka.properties import call_timeout_s

log = logging.getLogger(__name__)

HEADER_PREFIX = "__ingest.errors."
MARKER_PARTITION = 0  # the dead-letter topic's partition that carries the delivery marker


def delivery_group(spec: DatasourceSpec) -> str:
    """The consumer group holding the delivery marker; also the producer's transactional.id."""
    return f"ingest.{spec.datasource}.deadletters"


@dataclass(frozen=True)
class PublishedDeadLetters:
    """One publish's dead letters (`handover.dead_letters.SCHEMA` rows)."""

    publish_seq: int
    run_id: str
    letters: pa.Table


def error_headers(spec: DatasourceSpec, run_id: str, letter: dict[str, Any]) -> list[tuple[str, bytes]]:
    """The original headers, then where the record came from and why it is a dead letter."""
    ours = {"topic": letter["topic"], "partition": letter["partition"], "offset": letter["offset"],
            "outcome": letter["outcome"], "message": letter["error"] or "", "datasource": spec.datasource,
            "run": run_id}
    original = [(h["key"], h["value"]) for h in letter["headers"] or []]
    return original + [(HEADER_PREFIX + k, str(v).encode()) for k, v in ours.items()]


class DeadLetterProducer:
    """A transactional producer for one datasource's dead-letter topic. Opening it fences earlier ones."""

    def __init__(self, spec: DatasourceSpec, timeout_s: float | None = None):
        """Each call within `timeout_s` (default: the spec's, `call_timeout_s`); a broker that does not answer
        is `BrokerUnavailableError`, and the next report task delivers again."""
        dead_letter = spec.microbatch.dead_letter
        if dead_letter is None or not dead_letter.topic:
            raise ValueError(f"{spec.source}: microbatch.deadLetter.topic is not set")
        if timeout_s is None:
            timeout_s = call_timeout_s(spec.io_config.consumer_properties)
        self.spec, self.topic, self.group, self.timeout_s = spec, dead_letter.topic, delivery_group(spec), timeout_s
        self.config = KafkaClientConfig.from_properties(spec.io_config.consumer_properties)
        producer_conf = self.config.admin(**dead_letter.producer_properties)
        producer_conf.update({"transactional.id": self.group, "enable.idempotence": True, "acks": "all",
                              "transaction.timeout.ms": 300_000})
        self.producer = Producer(producer_conf)
        try:
            self.producer.init_transactions(timeout_s)  # fences an earlier producer, ends its open transaction
        except KafkaException as exc:
            raise self._unavailable_or(exc, "the dead-letter producer's InitProducerId") from None
        self.consumer = Consumer(self.config.consumer(**{"group.id": self.group, "isolation.level": "read_committed"}))

    def _unavailable_or(self, exc: Exception, what: str) -> Exception:
        """A broker that did not answer as `BrokerUnavailableError`; any other error as it is."""
        if unanswered(exc):
            return self.config.unavailable(what, self.timeout_s, exc, "no dead letters were produced")
        return exc

    def delivered_seq(self) -> int:
        """The last publish whose dead letters were produced (0: none yet)."""
        tp = KafkaTopicPartition(self.topic, MARKER_PARTITION)
        try:
            [committed] = self.consumer.committed([tp], timeout=self.timeout_s)
        except KafkaException as exc:
            raise self._unavailable_or(exc, f"the delivery marker of group {self.group!r}") from None
        if committed.error is not None:
            raise KafkaException(committed.error)
        return max(committed.offset, 0)

    def deliver(self, batch: PublishedDeadLetters) -> None:
        """One publish's dead letters and its marker, in one transaction."""
        self.producer.begin_transaction()
        try:
            for letter in batch.letters.to_pylist():
                kwargs: dict[str, Any] = {"key": letter["key"], "value": letter["value"],
                                          "headers": error_headers(self.spec, batch.run_id, letter)}
                if letter["timestamp"] is not None:
                    kwargs["timestamp"] = int(letter["timestamp"].timestamp() * 1000)
                self._produce(kwargs)
            marker = KafkaTopicPartition(self.topic, MARKER_PARTITION, batch.publish_seq, metadata=batch.run_id)
            self.producer.send_offsets_to_transaction([marker], self.consumer.consumer_group_metadata(),
                                                      self.timeout_s)
            self.producer.commit_transaction(self.timeout_s)
        except BaseException:
            try:
                self.producer.abort_transaction(self.timeout_s)
            except Exception:  # noqa: BLE001 - fenced or gone: the broker aborts it, the next delivery retries
                pass
            raise

    def _produce(self, kwargs: dict[str, Any]) -> None:
        while True:
            try:
                self.producer.produce(self.topic, **kwargs)
                self.producer.poll(0)
                return
            except BufferError:  # the local queue is full: let it drain
                self.producer.poll(0.5)

    def close(self) -> None:
        self.consumer.close()
        self.producer.flush(1)

    def redact(self, text: str) -> str:
        return self.config.redact(text)


def produce_pending(spec: DatasourceSpec, pending: Any, timeout_s: float | None = None) -> list[str]:
    """Produce every publish after the marker. `pending(after_seq)` returns them (`PublishedDeadLetters`, in
    publish order). Returns the runs produced; raises when one could not be (the ones before it stay produced)."""
    started = time.monotonic()
    producer = DeadLetterProducer(spec, timeout_s)
    try:
        done: list[str] = []
        for batch in pending(producer.delivered_seq()):
            producer.deliver(batch)
            done.append(batch.run_id)
            log.info("dead letters of run %s of %s (%d records) produced to %s", batch.run_id, spec.datasource,
                     batch.letters.num_rows, producer.topic)
        log.debug("dead-letter delivery took %.1fs", time.monotonic() - started)
        return done
    finally:
        producer.close()
