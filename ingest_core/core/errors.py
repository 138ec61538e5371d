"""Errors are part of the interface: each says what was wrong, where, and what to do next.

Each error class has a stable `code` (docs/errors.md lists them all): job reports, `ingest status` / `health`
and the REST API's recent errors carry it, and code that must tell errors apart compares codes, never message
text (as Spark's Kafka connector gives each failure an error condition). A Spark job's executors write the code of the error that stopped a
split into its report; the driver raises the same error again from there (`error_for_code`)."""

from __future__ import annotations

import difflib
import reprlib
from dataclasses import dataclass
from typing import ClassVar


class IngestError(Exception):
    """Base class for every error this system raises on purpose. A subclass names its own `code`."""

    code: ClassVar[str] = "INGEST_ERROR"
    _by_code: ClassVar[dict[str, type["IngestError"]]] = {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "code" in cls.__dict__:
            known = IngestError._by_code.get(cls.code)
            # the same class again is a module loaded twice (as __main__ and by its name)
            if known is not None and known.__qualname__ != cls.__qualname__:
                raise TypeError(f"error code {cls.code} of {cls.__qualname__} is {known.__qualname__}'s already")
            IngestError._by_code[cls.code] = cls


def error_for_code(code: str, message: str) -> IngestError:
    """The error of `code` with `message`, as a report recorded it where it was raised (a Spark executor).
    An error class whose constructor needs more than its message (or a code of a module not loaded here)
    comes back as an `IngestError` that carries the code."""
    cls = IngestError._by_code.get(code)
    try:
        return cls(message) if cls is not None else _coded(code, message)
    except TypeError:
        return _coded(code, message)


def _coded(code: str, message: str) -> IngestError:
    error = IngestError(message)
    error.code = code  # type: ignore[misc]  # this one error's code, not the class's
    return error


_SHOWN = reprlib.Repr()  # Python 3.11's takes no keywords
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxlong, _SHOWN.maxother = 2, 60, 40, 60
_SHOWN.maxtuple = _SHOWN.maxlist = _SHOWN.maxdict = _SHOWN.maxset = 4
SHOWN_CHARS = 100


def shown(value: object) -> str:
    """A value as an error message echoes it: its repr, never longer than SHOWN_CHARS (a list, an object or a
    string cut with "..."). reprlib walks only what it shows, so a spec value of millions of elements (an
    alias bomb, a pasted file) costs what a short one does."""
    try:
        text = _SHOWN.repr(value)
    except ValueError:  # an integer past Python's 4,300 digits for str()
        return "a number of thousands of digits"
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


@dataclass(frozen=True)
class SpecProblem:
    path: str  # field path inside the spec, e.g. "spec.ioConfig.taskCount"
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class SpecError(IngestError):
    """A datasource spec that cannot be used. Lists every problem found, not only the first."""

    code = "INGEST_SPEC_INVALID"

    def __init__(self, source: str, problems: list[SpecProblem]):
        self.source = source
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        noun = "problem" if len(self.problems) == 1 else "problems"
        super().__init__(f"{source}: {len(self.problems)} {noun} in datasource spec:\n{lines}")


class DependencyUnavailableError(IngestError):
    """A remote dependency did not answer within its deadline (or could not be reached). `dependency` names it
    as `ingest status` does, `endpoint` says where (secrets hidden) and `deadline_s` how long it was given (None:
    not known where raised). One subclass per dependency; docs/deadlines.md lists them with their settings."""

    code = "INGEST_DEPENDENCY_UNAVAILABLE"
    dependency = "dependency"
    refused = ""  # what the dependency refused ("the credentials"): it answered, and asking again cannot help

    def __init__(self, message: str, *, endpoint: str = "", deadline_s: float | None = None, refused: str = ""):
        super().__init__(message)
        self.endpoint, self.deadline_s = endpoint, deadline_s
        self.refused = refused or self.refused

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"dependency": self.dependency, "endpoint": self.endpoint,
                                  "deadlineSeconds": self.deadline_s}
        if self.refused:
            out["refused"] = self.refused
        return out


class BrokerUnavailableError(DependencyUnavailableError):
    """Kafka could not be reached, or did not answer in time."""

    code = "INGEST_KAFKA_UNAVAILABLE"
    dependency = "kafka"


class ObjectStoreUnavailableError(DependencyUnavailableError):
    """Deep storage (an object store: S3 or another S3-compatible one) did not answer in time."""

    code = "INGEST_OBJECT_STORE_UNAVAILABLE"
    dependency = "objectStore"


class ObjectStoreRefusedError(ObjectStoreUnavailableError):
    """The object store refused the credentials (403: an unknown access key, a signature that does not match,
    access denied). Asking again cannot help until the settings are fixed, so it is raised at the first refusal,
    never retried."""

    code = "INGEST_OBJECT_STORE_REFUSED"
    refused = "the credentials"


class SparkConnectError(IngestError):
    """The Spark Connect server cannot run this job (unreachable, or a different Python)."""

    code = "INGEST_SPARK_CONNECT_FAILED"


class SparkConnectUnavailableError(SparkConnectError, DependencyUnavailableError):
    """The Spark Connect server accepted no session within its deadline (down, or not answering)."""

    code = "INGEST_SPARK_CONNECT_UNAVAILABLE"
    dependency = "sparkConnect"


class KafkaAuthenticationError(BrokerUnavailableError):
    """A broker refused the client: SASL credentials rejected, or a TLS handshake refused (a client certificate
    the listener does not trust, a CA that does not match). Asking again cannot help until the configuration is
    fixed, so it is raised at the first refusal, never retried."""

    code = "INGEST_KAFKA_AUTHENTICATION_FAILED"


class TopicNotFoundError(IngestError):
    """The spec's topic (or no topic at all for a topicPattern) exists on the cluster."""

    code = "INGEST_KAFKA_TOPIC_NOT_FOUND"


class OffsetOutOfRangeError(IngestError):
    """A start offset lies outside what the partition holds now (truncated, or the topic was re-created)."""

    code = "INGEST_KAFKA_OFFSET_OUT_OF_RANGE"

    def __init__(self, message: str, *, topic: str = "", partition: int = -1, offset: int = -1, earliest: int = -1,
                 latest: int = -1):
        self.topic, self.partition, self.offset = topic, partition, offset
        self.earliest, self.latest = earliest, latest
        super().__init__(message)


class TopicRecreatedError(IngestError):
    """A topic's Kafka topic id is not the one its committed (or in-flight) offsets were read from: it was
    deleted and re-created, so those offsets describe another log. `topics`: name -> (stored id, broker's id)."""

    code = "INGEST_KAFKA_TOPIC_RECREATED"

    def __init__(self, message: str, *, topics: dict[str, tuple[str, str]]):
        self.topics = topics
        super().__init__(message)


class DuplicatesNotConfirmedError(IngestError):
    """An operator action would ingest `duplicates` published records again, and that number was not confirmed."""

    code = "INGEST_ACTION_DUPLICATES_NOT_CONFIRMED"

    def __init__(self, message: str, *, duplicates: int):
        self.duplicates = duplicates
        super().__init__(message)


class SkipNotConfirmedError(IngestError):
    """An operator action would skip `skipped` records that were never ingested (they would be lost), and it was not
    confirmed: `--yes`, or that number."""

    code = "INGEST_ACTION_SKIP_NOT_CONFIRMED"

    def __init__(self, message: str, *, skipped: int):
        self.skipped = skipped
        super().__init__(message)


class OffsetSyntaxError(IngestError):
    """A `TOPIC[:PARTITION]=OFFSET` of `ingest set-offsets` that is not one (a usage error: exit code 2)."""

    code = "INGEST_CLI_OFFSET_SYNTAX"


class StaleRunError(IngestError):
    """A run's planned start offsets no longer match the committed ones: another run got there first."""

    code = "INGEST_PUBLISH_STALE_RUN"

    def __init__(self, message: str, *, run_id: str, superseded_by: str | None):
        self.run_id, self.superseded_by = run_id, superseded_by
        super().__init__(message)


class PublishPendingError(IngestError):
    """A pipelined run continues from a run that has not published yet: it must publish after it, not instead."""

    code = "INGEST_PUBLISH_PENDING"

    def __init__(self, message: str, *, run_id: str, waiting_for: str):
        self.run_id, self.waiting_for = run_id, waiting_for
        super().__init__(message)


class RunExpiredError(IngestError):
    """A run outlived its deadline (completionTimeout): it is FAILED for good and its publish is refused."""

    code = "INGEST_RUN_EXPIRED"

    def __init__(self, message: str, *, run_id: str):
        self.run_id = run_id
        super().__init__(message)


class RunNotFoundError(IngestError):
    """No persisted plan for that run id."""

    code = "INGEST_RUN_NOT_FOUND"


class MetadataStoreError(IngestError):
    """The metadata store is unreachable or its schema is missing or too old."""

    code = "INGEST_METADATA_STORE_UNAVAILABLE"


class MetadataStoreUnavailableError(MetadataStoreError, DependencyUnavailableError):
    """The metadata store did not answer (no connection within its deadline, or a lost one that retries did not
    bring back)."""

    code = "INGEST_METADATA_STORE_NO_ANSWER"
    dependency = "metadataStore"


class MetadataUrlError(MetadataStoreError):
    """The metadata store's URL cannot be used at all (not a URL, an unknown database, a bad port): a usage
    error, exit code 2 in the CLI."""

    code = "INGEST_METADATA_STORE_URL_INVALID"


class UnknownDatasourceError(IngestError):
    """No datasource of that name in the metadata store: exit code 2 in the CLI, HTTP 404 in the REST API, the
    same message with a did-you-mean everywhere."""

    code = "INGEST_DATASOURCE_UNKNOWN"

    def __init__(self, name: str, known: list[str]):
        self.name, self.known = name, list(known)
        close = difflib.get_close_matches(name, self.known, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        listed = ", ".join(self.known[:20]) + (f", ... ({len(self.known)} in all)" if len(self.known) > 20 else "")
        listed = listed or "none yet: a datasource appears with its DAG's first run"
        super().__init__(f"unknown datasource {name!r}: {hint}(known: {listed})")


class NothingSucceededError(IngestError):
    """A run whose task groups with records all failed: nothing is published, and it never shows as published."""

    code = "INGEST_PUBLISH_NOTHING_SUCCEEDED"


class PredecessorGoneError(IngestError):
    """A pipelined run's predecessor will never publish (failed, expired, superseded): its range is not committed,
    so this run's commit is refused; it is not stale, it plans again from the committed offsets
    (`Supervisor.replan`) and publishes."""

    code = "INGEST_PUBLISH_PREDECESSOR_GONE"

    def __init__(self, message: str, *, run_id: str, predecessor: str):
        super().__init__(message)
        self.run_id = run_id
        self.predecessor = predecessor


class JobFailedError(IngestError):
    """A Spark job stopped by something other than this system's own errors: an executor lost or out of memory,
    a Spark error, an unexpected exception in a split (the report names its type and message)."""

    code = "INGEST_JOB_FAILED"


def clipped(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, ending in an ellipsis when cut: a message, or a bounded column,
    never carries all of what a client sent."""
    return text if len(text) <= limit else text[:max(0, limit - 1)] + "\u2026"
