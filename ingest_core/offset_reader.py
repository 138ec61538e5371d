"""KafkaOffsetReader: asks the broker which partitions exist and what their offsets are. Nothing else.

Every offset query is one batched ListOffsets call for all partitions (the admin client groups them per
leader), never one call per partition: that is what keeps planning 10,000 partitions under two seconds.
With `isolation.level=read_committed` (the default) "latest" is the last stable offset, so a plan never
reaches into open transactions.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Iterable, Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from .errors import BrokerUnavailableError, TopicNotFoundError
from .kafka_config import KafkaClientConfig
from .offsets import TopicPartition

try:  # confluent-kafka >= 2.3
    from confluent_kafka import IsolationLevel
except ImportError:  # pragma: no cover
    from confluent_kafka.admin import IsolationLevel  # type: ignore[no-redef]


class KafkaOffsetReader:
    def __init__(self, config: KafkaClientConfig, *, isolation_level: str = "read_committed",
                 timeout_s: float = 15.0):
        self.config = config
        self.timeout_s = timeout_s
        self.isolation = (IsolationLevel.READ_COMMITTED if isolation_level == "read_committed"
                          else IsolationLevel.READ_UNCOMMITTED)
        try:
            self._admin = AdminClient(config.admin(**{"socket.connection.setup.timeout.ms": int(timeout_s * 1000)}))
        except KafkaException as exc:
            raise BrokerUnavailableError(
                f"invalid Kafka client configuration in consumerProperties: {self._describe(exc)}") from None

    @classmethod
    def for_spec(cls, spec, timeout_s: float = 15.0) -> "KafkaOffsetReader":
        io = spec.io_config
        return cls(KafkaClientConfig.from_properties(io.consumer_properties), isolation_level=io.isolation_level,
                   timeout_s=timeout_s)

    def _describe(self, exc: BaseException) -> str:
        return self.config.redact(str(exc.args[0] if exc.args else exc))

    def _unavailable(self, what: str, exc: BaseException) -> BrokerUnavailableError:
        return BrokerUnavailableError(
            f"Kafka at {self.config.bootstrap_servers!r} did not answer {what} within {self.timeout_s:g}s: "
            f"{self._describe(exc)}. Check that the brokers are up and consumerProperties.bootstrap.servers "
            f"points at them; nothing was planned or committed."
        )

    # ------------------------------------------------------------------------------------------ discovery

    def topics(self) -> dict[str, int]:
        """All non-internal topics with their partition counts."""
        try:
            md = self._admin.list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            raise self._unavailable("a metadata request", exc) from None
        return {name: len(t.partitions) for name, t in md.topics.items()
                if not name.startswith("__") and t.error is None}

    def partitions(self, *, topic: str | None = None, pattern: str | None = None) -> list[TopicPartition]:
        """Partitions of `topic`, or of every topic whose whole name matches `pattern` (Druid's rule)."""
        topics = self.topics()
        if topic is not None:
            if topic not in topics:
                raise TopicNotFoundError(
                    f"topic {topic!r} does not exist on {self.config.bootstrap_servers!r} "
                    f"(found: {', '.join(sorted(topics)[:20]) or 'no topics'}); create it or fix ioConfig.topic")
            chosen = {topic: topics[topic]}
        elif pattern is not None:
            rx = re.compile(pattern)
            chosen = {t: n for t, n in topics.items() if rx.fullmatch(t)}
        else:
            raise ValueError("topic or pattern is required")
        return sorted(TopicPartition(t, p) for t, n in chosen.items() for p in range(n))

    # ------------------------------------------------------------------------------------------ offsets

    def earliest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list_offsets(tps, lambda tp: OffsetSpec.earliest(), "earliest offsets")

    def latest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list_offsets(tps, lambda tp: OffsetSpec.latest(), "latest offsets")

    def offsets_at(self, tps: Iterable[TopicPartition], when: datetime) -> dict[TopicPartition, int | None]:
        """Offset of the first record with timestamp >= `when` per partition; None when there is none yet."""
        ms = int(when.timestamp() * 1000)
        found = self._list_offsets(tps, lambda tp: OffsetSpec.for_timestamp(ms), "offsets by timestamp")
        return {tp: (off if off >= 0 else None) for tp, off in found.items()}

    def _list_offsets(self, tps: Iterable[TopicPartition], spec_for, what: str) -> dict[TopicPartition, int]:
        tps = list(tps)
        if not tps:
            return {}
        request: Mapping[KafkaTopicPartition, OffsetSpec] = {
            KafkaTopicPartition(tp.topic, tp.partition): spec_for(tp) for tp in tps}
        try:
            futures = self._admin.list_offsets(request, isolation_level=self.isolation,
                                               request_timeout=self.timeout_s)
        except KafkaException as exc:
            raise self._unavailable(what, exc) from None
        out: dict[TopicPartition, int] = {}
        for ktp, fut in futures.items():
            tp = TopicPartition(ktp.topic, ktp.partition)
            try:
                out[tp] = int(fut.result(timeout=self.timeout_s + 5).offset)
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if isinstance(err, KafkaError) and err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                                  KafkaError._UNKNOWN_PARTITION,
                                                                  KafkaError._UNKNOWN_TOPIC):
                    raise TopicNotFoundError(f"partition {tp} does not exist (any more) on "
                                             f"{self.config.bootstrap_servers!r}") from None
                raise self._unavailable(f"{what} for {tp}", exc) from None
            except TimeoutError as exc:  # concurrent.futures
                raise self._unavailable(f"{what} for {tp}", exc) from None
        return out
