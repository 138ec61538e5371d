"""The librdkafka configuration for a spec's `consumerProperties`, secrets resolved only here."""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from confluent_kafka import KafkaError, KafkaException

from ingest_core.core import secrets
from ingest_core.core.defaults import CONSUMER_GROUP_ID, ISOLATION_LEVEL
from ingest_core.core.errors import BrokerUnavailableError, KafkaAuthenticationError
from ingest_core.kafka.properties import to_librdkafka
from ingest_core.kafka.secrets import mask_in_airflow_logs, resolve_properties, secret_values

# librdkafka's own log lines (a refused connection is logged every reconnect: hundreds while a broker is down) go
# through Python logging under this name instead of straight to stderr: Airflow's task logs keep them, and the
# CLI shows them only with -v, printing one line per problem itself.
LIBRDKAFKA_LOGGER = logging.getLogger("ingest_core.kafka.librdkafka")

# Consumer-only settings: harmless to a consumer, noise (warnings) to an admin client.
_CONSUMER_ONLY = {"isolation.level", "group.id", "auto.offset.reset", "enable.auto.commit", "enable.auto.offset.store",
                  "enable.partition.eof", "fetch.min.bytes", "fetch.max.bytes", "fetch.wait.max.ms",
                  "max.partition.fetch.bytes", "session.timeout.ms", "heartbeat.interval.ms",
                  "max.poll.interval.ms", "partition.assignment.strategy", "group.instance.id",
                  "queued.min.messages", "queued.max.messages.kbytes", "check.crcs"}


_LISTENER = re.compile(r"^\s*(\w+://[^/\s:]+(?::\d+)?)")


def is_refusal(err: KafkaError) -> bool:
    """Whether librdkafka's error is a broker refusing this client (SASL credentials, or a TLS alert the
    broker sent during the handshake), not a broker that is down or slow. librdkafka reconnects after either
    without end: only a refusal is worth stopping for at once."""
    code = err.code()
    return code in (KafkaError._AUTHENTICATION, KafkaError._SSL) or (
        code == KafkaError._TRANSPORT and "alert" in err.str() and "SSL" in err.str())


class ClientRefusals:
    """The first refusal the clients of one configuration reported (their `error_cb`, which librdkafka calls
    from the client's poll: `poll(0)` serves it)."""

    def __init__(self) -> None:
        self._first: KafkaError | None = None
        self._lock = threading.Lock()

    def record(self, err: KafkaError) -> None:
        if is_refusal(err):
            with self._lock:
                self._first = self._first or err

    @property
    def first(self) -> KafkaError | None:
        return self._first


@dataclass(frozen=True)
class KafkaClientConfig:
    """Resolved client properties plus the values that must never be printed."""

    properties: Mapping[str, str]
    secrets: tuple[str, ...]
    refusals: ClientRefusals = field(default_factory=ClientRefusals, compare=False, repr=False)

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> "KafkaClientConfig":
        """Secret references resolved, then Java-client settings translated for librdkafka (sasl.jaas.config
        -> sasl.username/sasl.password, deserializers dropped): see ingest_core.kafka.properties."""
        resolved = resolve_properties(props)
        client, revealed = to_librdkafka(resolved)
        config = cls(client, tuple(secret_values(props, resolved)) + tuple(revealed))
        mask_in_airflow_logs(config.secrets)
        return config

    @property
    def bootstrap_servers(self) -> str:
        return self.properties.get("bootstrap.servers", "")

    def admin(self, **overrides: Any) -> dict[str, Any]:
        conf: dict[str, Any] = {k: v for k, v in self.properties.items() if k not in _CONSUMER_ONLY}
        conf["logger"] = LIBRDKAFKA_LOGGER
        conf["error_cb"] = self.refusals.record
        conf.update(overrides)
        return conf

    def consumer(self, **overrides: Any) -> dict[str, Any]:
        conf: dict[str, Any] = {"group.id": CONSUMER_GROUP_ID, "enable.auto.commit": False,
                                "enable.auto.offset.store": False, "auto.offset.reset": "error",
                                "isolation.level": ISOLATION_LEVEL}
        conf.update(self.properties)
        # Offsets live in the metadata store; never let Kafka's group offsets or auto-reset move a range.
        conf.update({"enable.auto.commit": False, "auto.offset.reset": "error", "logger": LIBRDKAFKA_LOGGER,
                     "error_cb": self.refusals.record})
        conf.update(overrides)
        return conf

    def redact(self, text: str) -> str:
        return secrets.redact_text(text, self.secrets)

    def unavailable(self, what: str, timeout_s: float, exc: BaseException, outcome: str) -> BrokerUnavailableError:
        """The typed error of a call to the brokers that got no answer within `timeout_s` (secrets redacted);
        `outcome`: what that left undone."""
        cause = self.redact(str(exc.args[0] if exc.args else exc) or type(exc).__name__)
        return BrokerUnavailableError(
            f"Kafka at {self.bootstrap_servers!r} did not answer {what} within {timeout_s:g}s: {cause}. Check that "
            f"the brokers are up and consumerProperties.bootstrap.servers points at them; {outcome}.",
            endpoint=self.bootstrap_servers, deadline_s=timeout_s)


    def refusal(self) -> KafkaAuthenticationError | None:
        """The error to raise when a broker refused one of this configuration's clients (see `is_refusal`):
        it names the listener, the security protocol and the SASL mechanism, and never a secret."""
        err = self.refusals.first
        if err is None:
            return None
        text = self.redact(err.str())
        found = _LISTENER.match(text)
        listener = found.group(1) if found else self.bootstrap_servers
        reason = re.sub(r"^/[^:\s]*:\s*", "", text[found.end():]) if found else text  # "/bootstrap: ..."
        protocol = self.properties.get("security.protocol", "plaintext").upper()
        if err.code() == KafkaError._AUTHENTICATION and "SASL" in protocol:
            mechanism = (self.properties.get("sasl.mechanism") or self.properties.get("sasl.mechanisms")
                         or "GSSAPI").upper()
            return KafkaAuthenticationError(
                f"Kafka listener {listener} refused the credentials (security.protocol {protocol}, sasl.mechanism "
                f"{mechanism}): {reason}. Check sasl.username and sasl.password (or sasl.jaas.config) in "
                f"consumerProperties and the user's {mechanism} credentials on the brokers; asking again cannot "
                f"help until they are fixed.", endpoint=self.bootstrap_servers, refused="the credentials")
        return KafkaAuthenticationError(
            f"Kafka listener {listener} refused the TLS handshake (security.protocol {protocol}): {reason}. Check "
            f"ssl.ca.location (the brokers' CA) and, where the listener requires client certificates, "
            f"ssl.certificate.location, ssl.key.location and ssl.key.password; asking again cannot help until "
            f"they are fixed.", endpoint=self.bootstrap_servers, refused="the TLS handshake")


# librdkafka's errors for a call that got no answer (timed out, no connection), as opposed to a refusal
_UNANSWERED = {KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
               KafkaError._MSG_TIMED_OUT, KafkaError.REQUEST_TIMED_OUT, KafkaError._RESOLVE,
               KafkaError.COORDINATOR_NOT_AVAILABLE}


def unanswered(exc: BaseException) -> bool:
    """Whether `exc` says the brokers did not answer in time (rather than refused what was asked)."""
    if isinstance(exc, TimeoutError):  # a future's result(timeout=...)
        return True
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return isinstance(err, KafkaError) and err.code() in _UNANSWERED

def list_topics(client: Any, config: KafkaClientConfig, timeout_s: float, topic: str | None = None) -> Any:
    """`client.list_topics` (a Consumer's, an AdminClient's) made with `config`, asked in slices of a second so
    that a broker refusing the credentials or the certificate ends it at once with `KafkaAuthenticationError`:
    librdkafka itself reconnects and asks again until the timeout. Each slice is twice the last: an answer that
    takes longer than a slice (100,000 partitions' metadata on a loaded machine) is asked again from scratch, so
    slices of a second each would never get it. Other failures raise KafkaException."""
    deadline = time.monotonic() + timeout_s
    slice_s = 1.0
    while True:
        try:
            return client.list_topics(topic, timeout=min(slice_s, max(deadline - time.monotonic(), 0.1)))
        except KafkaException:
            slice_s *= 2
            client.poll(0)  # serves the client's error_cb: a refusal is recorded
            if (refused := config.refusal()) is not None:
                raise refused from None
            if time.monotonic() >= deadline:
                raise
