"""KafkaOffsetReader: asks the broker which partitions exist and what their offsets are. Nothing else.

Every offset query is batched: ListOffsets requests of up to 1,000 partitions each (librdkafka groups them per
leader; the special timestamps -2 and -1 of the Kafka protocol mean earliest and latest), never one call per
partition, and the earliest / latest / by-time queries of a snapshot are in flight at the same time: that is
what keeps planning 10,000 partitions under two seconds. With `isolation.level=read_committed` (the default)
"latest" is the last stable offset, so a plan never reaches into open transactions.
"""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicCollection
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient

from ingest_core.core.defaults import ISOLATION_LEVEL, KAFKA_CALL_TIMEOUT_S
from ingest_core.core.errors import BrokerUnavailableError, KafkaAuthenticationError, TopicNotFoundError
from ingest_core.core.offsets import TopicPartition
from ingest_core.kafka.config import KafkaClientConfig, list_topics
from ingest_core.kafka.properties import call_timeout_s

EARLIEST, LATEST = -2, -1  # ListOffsets timestamps with special meaning in the Kafka protocol
_MISSING_PARTITION = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC}
# A partition whose leader is being elected or has moved (a topic just created, a broker restarting): ask again
_LEADER_MOVING = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                  KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.FENCED_LEADER_EPOCH, KafkaError.OFFSET_NOT_AVAILABLE}


class KafkaOffsetReader:
    max_partitions_per_request = 1000  # see _query_once

    def __init__(self, config: KafkaClientConfig, *, isolation_level: str = ISOLATION_LEVEL,
                 timeout_s: float = KAFKA_CALL_TIMEOUT_S):
        self.config = config
        self.timeout_s = timeout_s
        self._conf = config.consumer(**{"isolation.level": isolation_level,
                                         "socket.connection.setup.timeout.ms": int(timeout_s * 1000)})
        self._local = threading.local()  # one consumer per thread: queries of a snapshot run in parallel
        self._clients: list[Consumer] = []  # every thread's, for close()
        self._clients_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(5, thread_name_prefix="offset-reader")  # a snapshot's five queries
        self._admin: AdminClient | None = None  # for topic ids only; made on first use
        self._client()  # fail fast on an invalid configuration

    def _client(self) -> Consumer:
        client = getattr(self._local, "client", None)
        if client is None:
            try:
                client = Consumer(self._conf)
            except KafkaException as exc:
                raise BrokerUnavailableError(
                    f"invalid Kafka client configuration in consumerProperties: {self._describe(exc)}") from None
            self._local.client = client
            with self._clients_lock:
                self._clients.append(client)
        return client

    @classmethod
    def for_spec(cls, spec, timeout_s: float | None = None) -> "KafkaOffsetReader":
        """A reader of `spec`'s cluster; each call within `timeout_s`, by default the spec's
        (consumerProperties `default.api.timeout.ms`, else defaults.KAFKA_CALL_TIMEOUT_S)."""
        io = spec.io_config
        return cls(KafkaClientConfig.from_properties(io.consumer_properties), isolation_level=io.isolation_level,
                   timeout_s=call_timeout_s(io.consumer_properties) if timeout_s is None else timeout_s)

    def _describe(self, exc: BaseException) -> str:
        return self.config.redact(str(exc.args[0] if exc.args else exc))

    def _refusal(self) -> KafkaAuthenticationError | None:
        """The broker's refusal of this reader's clients, if one came (poll serves their error_cb)."""
        for client in (self._client(), self._admin):
            if client is not None:
                client.poll(0)
        return self.config.refusal()

    def _unavailable(self, what: str, exc: BaseException) -> BrokerUnavailableError:
        if (refused := self._refusal()) is not None:
            return refused
        return self.config.unavailable(what, self.timeout_s, exc, "nothing was planned or committed")

    # ------------------------------------------------------------------------------------------ discovery

    def topics(self, topic: str | None = None) -> dict[str, int]:
        """All non-internal topics with their partition counts (with `topic`: that one, if it exists). Asked in
        slices of a second, so that a broker refusing the credentials or the certificate ends it at once
        (librdkafka itself reconnects and asks again until the timeout)."""
        try:
            md = list_topics(self._client(), self.config, self.timeout_s, topic)
        except KafkaException as exc:
            raise self._unavailable("a metadata request", exc) from None
        return {name: len(t.partitions) for name, t in md.topics.items()
                if not name.startswith("__") and t.error is None}

    def partitions(self, *, topic: str | None = None, pattern: str | None = None) -> list[TopicPartition]:
        """Partitions of `topic`, or of every topic whose whole name matches `pattern` (Druid's rule)."""
        # one topic's metadata only: a cluster's other topics may hold 100,000 partitions more
        topics = self.topics(topic) if topic is not None else self.topics()
        if topic is not None:
            if topic not in topics:
                topics = self.topics()  # to name the ones there are
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

    def topic_ids(self, topics: Iterable[str]) -> dict[str, str]:
        """Kafka's id of each topic (DescribeTopics): a topic deleted and re-created under the same name gets a
        new one. A topic the broker gives no id (before Kafka 2.8: the all-zero id) is left out."""
        names = sorted(set(topics))
        if not names:
            return {}
        if self._admin is None:
            self._admin = AdminClient(self.config.admin(
                **{"socket.connection.setup.timeout.ms": int(self.timeout_s * 1000)}))
        out: dict[str, str] = {}
        try:
            futures = self._admin.describe_topics(TopicCollection(names), request_timeout=self.timeout_s)
            for name, future in futures.items():
                uuid = future.result(timeout=self.timeout_s + 5).topic_id
                if uuid is not None and (uuid.get_most_significant_bits() or uuid.get_least_significant_bits()):
                    out[name] = str(uuid)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() in _MISSING_PARTITION:
                raise TopicNotFoundError(f"a topic of {names} does not exist (any more) on "
                                         f"{self.config.bootstrap_servers!r}") from None
            raise self._unavailable("a DescribeTopics request", exc) from None
        except TimeoutError as exc:
            raise self._unavailable("a DescribeTopics request", exc) from None
        return out

    # ------------------------------------------------------------------------------------------ offsets

    def earliest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._query(list(tps), EARLIEST, "earliest offsets")

    def latest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._query(list(tps), LATEST, "latest offsets")

    def offsets_at(self, tps: Iterable[TopicPartition], when: datetime) -> dict[TopicPartition, int | None]:
        """Offset of the first record with timestamp >= `when` per partition; None when there is none yet."""
        found = self._query(list(tps), int(when.timestamp() * 1000), "offsets by timestamp")
        return {tp: (off if off >= 0 else None) for tp, off in found.items()}

    def snapshot(self, tps: Iterable[TopicPartition], at: datetime | None = None,
                 future_after: datetime | None = None, topic_ids: bool = False) -> "OffsetSnapshot":
        """Earliest, latest (and offsets at `at` and at `future_after`, and with `topic_ids` the topics' ids),
        their requests in flight at the same time (at 100,000 partitions each takes seconds)."""
        tps = list(tps)
        ids = self._pool.submit(self.topic_ids, {tp.topic for tp in tps}) if topic_ids else None
        earliest = self._pool.submit(self.earliest, tps)
        latest = self._pool.submit(self.latest, tps)
        at_time = self._pool.submit(self.offsets_at, tps, at) if at is not None else None
        future = self._pool.submit(self.offsets_at, tps, future_after) if future_after is not None else None
        return OffsetSnapshot(earliest.result(), latest.result(), at_time.result() if at_time else None,
                              future.result() if future else None, ids.result() if ids else None)

    def _query(self, tps: list[TopicPartition], timestamp: int, what: str) -> dict[TopicPartition, int]:
        if not tps:
            return {}
        try:
            return self._query_once(tps, timestamp, what)
        except TopicNotFoundError:
            # This thread's client may hold metadata from before a partition was added: refresh, ask again.
            client = self._client()
            for topic in sorted({tp.topic for tp in tps}):
                try:
                    client.list_topics(topic, timeout=self.timeout_s)
                except KafkaException as exc:
                    raise self._unavailable("a metadata request", exc) from None
            return self._query_once(tps, timestamp, what)

    def _query_once(self, tps: list[TopicPartition], timestamp: int, what: str) -> dict[TopicPartition, int]:
        # librdkafka's CPU for one request grows about with the square of its partitions (measured: about 1 s
        # for 10,000, 0.15 s for the same in requests of 1,000): ask in slices, one after another
        step = self.max_partitions_per_request
        answers: list[KafkaTopicPartition] = []
        deadline = time.monotonic() + self.timeout_s
        for first in range(0, len(tps), step):
            request = [KafkaTopicPartition(tp.topic, tp.partition, timestamp) for tp in tps[first:first + step]]
            try:
                answers += self._ask(request, deadline)
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if isinstance(err, KafkaError) and err.code() in _MISSING_PARTITION:
                    raise TopicNotFoundError(f"a partition of {sorted({tp.topic for tp in tps})} does not exist "
                                             f"(any more) on {self.config.bootstrap_servers!r}") from None
                raise self._unavailable(what, exc) from None
        out: dict[TopicPartition, int] = {}
        for ans in answers:
            tp = TopicPartition(ans.topic, ans.partition)
            if ans.error is not None:
                if ans.error.code() in _MISSING_PARTITION:
                    raise TopicNotFoundError(f"partition {tp} does not exist (any more) on "
                                             f"{self.config.bootstrap_servers!r}")
                raise self._unavailable(f"{what} for {tp}", KafkaException(ans.error))
            out[tp] = int(ans.offset)
        return out

    def _ask(self, request: list[KafkaTopicPartition], deadline: float) -> list[KafkaTopicPartition]:
        """One ListOffsets round, asked again while a leader is moving, until the deadline; then the last answer
        (or error) stands."""
        while True:
            try:
                answers = self._client().offsets_for_times(request, timeout=max(deadline - time.monotonic(), 0.5))
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if not (isinstance(err, KafkaError) and err.code() in _LEADER_MOVING) or time.monotonic() >= deadline:
                    raise
            else:
                if time.monotonic() >= deadline or not any(
                        a.error is not None and a.error.code() in _LEADER_MOVING for a in answers):
                    return answers
            time.sleep(0.2)

    def close(self) -> None:
        """Stop the query threads and close every thread's consumer (their connections to the brokers)."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._clients_lock:
            clients, self._clients = self._clients, []
        for client in clients:
            client.close()


@dataclass(frozen=True)
class OffsetSnapshot:
    earliest: dict[TopicPartition, int]
    latest: dict[TopicPartition, int]
    at_time: dict[TopicPartition, int | None] | None
    at_future: dict[TopicPartition, int | None] | None = None
    topic_ids: dict[str, str] | None = None  # asked for with the offsets (`snapshot(topic_ids=True)`)
