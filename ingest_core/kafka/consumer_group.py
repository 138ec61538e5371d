"""The committed offsets of a datasource, mirrored to a Kafka consumer group after each publish, so its lag shows
in Kafka's own tooling (`kafka-consumer-groups.sh --describe --group ingest.<dataSource>`, Burrow, Cruise
Control, a cloud console). The metadata store stays the only source of truth: nothing reads the group's offsets
back. A mirror that fails (a broker down, an ACL, a group that someone consumes with) fails nothing and only
logs; the next publish mirrors the whole committed map again. Operator actions that move the offsets (reset,
set-offsets, skip, reset --to-latest) sync the group too (`sync_group`: a hard reset deletes it)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Mapping

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient

from ingest_core.core.errors import BrokerUnavailableError
from ingest_core.core.offsets import TopicPartition
from ingest_core.core.spec import DatasourceSpec
from ingest_core.kafka.config import KafkaClientConfig, unanswered
from ingest_core.kafka.properties import call_timeout_s

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


@dataclass(frozen=True)
class GroupSync:
    """What an offset action did to the consumer group: set its offsets (`offsets`), deleted it (`offsets`
    None: nothing is committed), or nothing (`group` None: mirroring is off; `error`: the broker refused or did
    not answer, the group keeps its older offsets; `unavailable`: the typed error when it did not answer)."""

    group: str | None
    offsets: dict[TopicPartition, int] | None = None
    error: str | None = None
    unavailable: BrokerUnavailableError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def _timeout(spec: DatasourceSpec, timeout_s: float | None) -> float:
    return call_timeout_s(spec.io_config.consumer_properties) if timeout_s is None else timeout_s


def mirror_offsets(spec: DatasourceSpec, offsets: Mapping[TopicPartition, int],
                   timeout_s: float | None = None) -> str | None:
    """Set the group's offsets to `offsets` (AlterConsumerGroupOffsets, as `kafka-consumer-groups.sh
    --reset-offsets` does). The group, when the broker took all of them; else None."""
    if mirror_group(spec) is None or not offsets:
        return None
    done = sync_group(spec, offsets, timeout_s)
    if not done.ok:
        log.warning("the committed offsets of %s were not mirrored to consumer group %r (the ingestion is not "
                    "affected; Kafka's tooling shows the group's older offsets until a publish mirrors them): %s",
                    spec.datasource, done.group, done.error)
        return None
    return done.group


def sync_group(spec: DatasourceSpec, offsets: Mapping[TopicPartition, int],
               timeout_s: float | None = None) -> GroupSync:
    """Make the group show `offsets`: set them, or with none (a hard reset cleared them) delete the group, so
    Kafka's tooling shows no stale lag; within `timeout_s` (default: the spec's, `call_timeout_s`). Never
    raises: a failure is the result's `error` (secrets redacted)."""
    group = mirror_group(spec)
    if group is None:
        return GroupSync(None)
    timeout_s = _timeout(spec, timeout_s)
    deadline = time.monotonic() + timeout_s
    config = None
    try:
        config = KafkaClientConfig.from_properties(spec.io_config.consumer_properties)
        admin = _admin(config, timeout_s)
        if offsets:
            request = ConsumerGroupTopicPartitions(group, [KafkaTopicPartition(tp.topic, tp.partition, offset)
                                                           for tp, offset in sorted(offsets.items())])
            step = lambda left: _alter(admin, request, left)  # noqa: E731
        else:
            step = lambda left: _delete(admin, group, left)  # noqa: E731
        while True:
            error = step(max(deadline - time.monotonic(), 1.0))
            if error is None:
                return GroupSync(group, dict(offsets) if offsets else None)
            if error.code() not in _COORDINATOR_MOVING or time.monotonic() >= deadline:
                raise KafkaException(error)
            time.sleep(0.5)
    except Exception as exc:  # noqa: BLE001 - whatever went wrong, the metadata store stays the truth
        if config is not None and unanswered(exc):
            down = config.unavailable(f"for the offsets of consumer group {group!r}", timeout_s, exc,
                                      "the group keeps its older offsets")
            return GroupSync(group, None, str(down), down)
        text = str(exc.args[0] if exc.args else exc)
        return GroupSync(group, None, config.redact(text) if config is not None else text)


def _delete(admin: AdminClient, group: str, timeout_s: float) -> KafkaError | None:
    """One DeleteGroups: its error, None when the group is gone (or never was)."""
    try:
        admin.delete_consumer_groups([group], request_timeout=timeout_s)[group].result(timeout=timeout_s + 5)
    except KafkaException as exc:
        if exc.args and isinstance(exc.args[0], KafkaError):
            return None if exc.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND else exc.args[0]
        raise
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
                     timeout_s: float | None = None) -> dict[TopicPartition, int]:
    """The group's offsets of `tps`, as Kafka's tooling reads them (partitions it has none for are left out)."""
    group = mirror_group(spec)
    if group is None:
        return {}
    timeout_s = _timeout(spec, timeout_s)
    config = KafkaClientConfig.from_properties(spec.io_config.consumer_properties)
    admin = _admin(config, timeout_s)
    request = ConsumerGroupTopicPartitions(group, [KafkaTopicPartition(tp.topic, tp.partition) for tp in tps])
    try:
        answer = admin.list_consumer_group_offsets([request], request_timeout=timeout_s)[group].result(timeout_s + 5)
    except (KafkaException, TimeoutError) as exc:
        if unanswered(exc):
            raise config.unavailable(f"for the offsets of consumer group {group!r}", timeout_s, exc,
                                     "nothing was read") from None
        raise
    return {TopicPartition(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions if tp.offset >= 0}
