"""The committed offsets of a datasource, mirrored to a Kafka consumer group after each publish, so its lag shows
in Kafka's own tooling (`kafka-consumer-groups.sh --describe --group ingest.<dataSource>`, Burrow, Cruise
Control, a cloud console). The metadata store stays the only source of truth: nothing reads the group's offsets
back. A mirror that fails (a broker down, an ACL, a group that someone consumes with) fails nothing and only
logs; the next publish mirrors the whole committed map again."""

from __future__ import annotations

import logging
import time
from typing import Mapping

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient

from ingest_core.core.offsets import TopicPartition
from ingest_core.core.spec import DatasourceSpec
from ingest_core.kafka.config import KafkaClientConfig

log = logging.getLogger(__name__)
# the group's coordinator is starting (Kafka creates __consumer_offsets on first use) or moving: ask again
_COORDINATOR_MOVING = {KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
                       KafkaError.NOT_COORDINATOR}


def mirror_group(spec: DatasourceSpec) -> str | None:
    """The consumer group a datasource's offsets go to; None when mirroring is off."""
    if not spec.microbatch.mirror_offsets:
        return None
    return spec.microbatch.consumer_group or f"ingest.{spec.datasource}"


def _admin(config: KafkaClientConfig, timeout_s: float) -> AdminClient:
    return AdminClient(config.admin(**{"socket.connection.setup.timeout.ms": int(timeout_s * 1000)}))


def mirror_offsets(spec: DatasourceSpec, offsets: Mapping[TopicPartition, int],
                   timeout_s: float = 10.0) -> str | None:
    """Set the group's offsets to `offsets` (AlterConsumerGroupOffsets, as `kafka-consumer-groups.sh
    --reset-offsets` does). The group, when the broker took all of them; else None."""
    group = mirror_group(spec)
    if group is None or not offsets:
        return None
    request = ConsumerGroupTopicPartitions(group, [KafkaTopicPartition(tp.topic, tp.partition, offset)
                                                   for tp, offset in sorted(offsets.items())])
    deadline = time.monotonic() + timeout_s
    config = None
    try:
        config = KafkaClientConfig.from_properties(spec.io_config.consumer_properties)
        admin = _admin(config, timeout_s)
        while True:
            error = _alter(admin, request, max(deadline - time.monotonic(), 1.0))
            if error is None:
                return group
            if error.code() not in _COORDINATOR_MOVING or time.monotonic() >= deadline:
                raise KafkaException(error)
            time.sleep(0.5)
    except Exception as exc:  # noqa: BLE001 - whatever went wrong, the publish stands
        text = str(exc.args[0] if exc.args else exc)
        text = config.redact(text) if config is not None else text
        log.warning("the committed offsets of %s were not mirrored to consumer group %r (the ingestion is not "
                    "affected; Kafka's tooling shows the group's older offsets until a publish mirrors them): %s",
                    spec.datasource, group, text)
        return None


def _alter(admin: AdminClient, request: ConsumerGroupTopicPartitions, timeout_s: float) -> KafkaError | None:
    """One AlterConsumerGroupOffsets: its first error, None when every offset was taken."""
    try:
        done = admin.alter_consumer_group_offsets([request], request_timeout=timeout_s)[request.group_id]
        answer = done.result(timeout=timeout_s + 5)
    except KafkaException as exc:
        if exc.args and isinstance(exc.args[0], KafkaError):
            return exc.args[0]
        raise
    return next((tp.error for tp in answer.topic_partitions if tp.error is not None), None)


def mirrored_offsets(spec: DatasourceSpec, tps: list[TopicPartition],
                     timeout_s: float = 10.0) -> dict[TopicPartition, int]:
    """The group's offsets of `tps`, as Kafka's tooling reads them (partitions it has none for are left out)."""
    group = mirror_group(spec)
    if group is None:
        return {}
    admin = _admin(KafkaClientConfig.from_properties(spec.io_config.consumer_properties), timeout_s)
    request = ConsumerGroupTopicPartitions(group, [KafkaTopicPartition(tp.topic, tp.partition) for tp in tps])
    answer = admin.list_consumer_group_offsets([request], request_timeout=timeout_s)[group].result(timeout_s + 5)
    return {TopicPartition(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions if tp.offset >= 0}
