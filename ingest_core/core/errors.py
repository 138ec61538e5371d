"""Errors are part of the interface: each says what was wrong, where, and what to do next."""

from __future__ import annotations

import difflib
from dataclasses import dataclass


class IngestError(Exception):
    """Base class for every error this system raises on purpose."""


@dataclass(frozen=True)
class SpecProblem:
    path: str  # field path inside the spec, e.g. "spec.ioConfig.taskCount"
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class SpecError(IngestError):
    """A datasource spec that cannot be used. Lists every problem found, not only the first."""

    def __init__(self, source: str, problems: list[SpecProblem]):
        self.source = source
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        noun = "problem" if len(self.problems) == 1 else "problems"
        super().__init__(f"{source}: {len(self.problems)} {noun} in datasource spec:\n{lines}")


class BrokerUnavailableError(IngestError):
    """Kafka could not be reached, or did not answer in time."""


class KafkaAuthenticationError(BrokerUnavailableError):
    """A broker refused the client: SASL credentials rejected, or a TLS handshake refused (a client certificate
    the listener does not trust, a CA that does not match). Asking again cannot help until the configuration is
    fixed, so it is raised at the first refusal, never retried."""


class TopicNotFoundError(IngestError):
    """The spec's topic (or no topic at all for a topicPattern) exists on the cluster."""


class OffsetOutOfRangeError(IngestError):
    """A start offset lies outside what the partition holds now (truncated, or the topic was re-created)."""

    def __init__(self, message: str, *, topic: str = "", partition: int = -1, offset: int = -1, earliest: int = -1,
                 latest: int = -1):
        self.topic, self.partition, self.offset = topic, partition, offset
        self.earliest, self.latest = earliest, latest
        super().__init__(message)


class TopicRecreatedError(IngestError):
    """A topic's Kafka topic id is not the one its committed (or in-flight) offsets were read from: it was
    deleted and re-created, so those offsets describe another log. `topics`: name -> (stored id, broker's id)."""

    def __init__(self, message: str, *, topics: dict[str, tuple[str, str]]):
        self.topics = topics
        super().__init__(message)


class DuplicatesNotConfirmedError(IngestError):
    """An operator action would ingest `duplicates` published records again, and that number was not confirmed."""

    def __init__(self, message: str, *, duplicates: int):
        self.duplicates = duplicates
        super().__init__(message)


class StaleRunError(IngestError):
    """A run's planned start offsets no longer match the committed ones: another run got there first."""

    def __init__(self, message: str, *, run_id: str, superseded_by: str | None):
        self.run_id, self.superseded_by = run_id, superseded_by
        super().__init__(message)


class PublishPendingError(IngestError):
    """A pipelined run continues from a run that has not published yet: it must publish after it, not instead."""

    def __init__(self, message: str, *, run_id: str, waiting_for: str):
        self.run_id, self.waiting_for = run_id, waiting_for
        super().__init__(message)


class RunExpiredError(IngestError):
    """A run outlived its deadline (completionTimeout): it is FAILED for good and its publish is refused."""

    def __init__(self, message: str, *, run_id: str):
        self.run_id = run_id
        super().__init__(message)


class RunNotFoundError(IngestError):
    """No persisted plan for that run id."""


class MetadataStoreError(IngestError):
    """The metadata store is unreachable or its schema is missing or too old."""


class MetadataUrlError(MetadataStoreError):
    """The metadata store's URL cannot be used at all (not a URL, an unknown database, a bad port): a usage
    error, exit code 2 in the CLI."""


class UnknownDatasourceError(IngestError):
    """No datasource of that name in the metadata store: exit code 2 in the CLI, HTTP 404 in the REST API, the
    same message with a did-you-mean everywhere."""

    def __init__(self, name: str, known: list[str]):
        self.name, self.known = name, list(known)
        close = difflib.get_close_matches(name, self.known, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        listed = ", ".join(self.known[:20]) + (f", ... ({len(self.known)} in all)" if len(self.known) > 20 else "")
        listed = listed or "none yet: a datasource appears with its DAG's first run"
        super().__init__(f"unknown datasource {name!r}: {hint}(known: {listed})")


class NothingSucceededError(IngestError):
    """A run whose task groups with records all failed: nothing is published, and it never shows as published."""


class PredecessorGoneError(IngestError):
    """A pipelined run's predecessor will never publish (failed, expired, superseded): its range is not committed,
    so this run's commit is refused; it is not stale, it plans again from the committed offsets
    (`Supervisor.replan`) and publishes."""

    def __init__(self, message: str, *, run_id: str, predecessor: str):
        super().__init__(message)
        self.run_id = run_id
        self.predecessor = predecessor
