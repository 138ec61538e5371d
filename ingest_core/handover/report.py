"""Row stats and parse exceptions, per split and merged per task group (Task -> TaskGroup -> Job),
the task group's report with the segments it staged, and which of a group's reports is the published one.

Druid's meanings:
  processed           rows ingested without a parse error
  processedBytes      bytes of the records read (values, plus keys and headers for the kafka format)
  processedWithError  rows ingested, but with a column that could not be converted (stored as null)
  unparseable         rows dropped because they could not be parsed (bad JSON, bad timestamp, ...)
  thrownAway          rows dropped on purpose: filtered out, null (tombstone) records, late or early messages
Parse exceptions (processedWithError + unparseable) count towards `maxParseExceptions`.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Mapping

from ingest_core.core.errors import IngestError, JobFailedError, KafkaAuthenticationError
from ingest_core.core.offsets import (
    OffsetRange,
    offsets_from_json,
    offsets_to_json,
)
from ingest_core.core.periods import format_datetime, parse_datetime
from ingest_core.handover import deep_storage


class ParseExceptionLimitError(IngestError):
    """More parse exceptions than `tuningConfig.maxParseExceptions` allows."""

    code = "INGEST_PARSE_EXCEPTION_LIMIT"


class JobLostError(IngestError):
    """A task group's job left no report: its process died (killed, out of memory) before writing one."""

    code = "INGEST_JOB_LOST"


@dataclass
class RowStats:
    processed: int = 0
    processed_bytes: int = 0
    processed_with_error: int = 0
    unparseable: int = 0
    thrown_away: int = 0

    @property
    def parse_exceptions(self) -> int:
        return self.processed_with_error + self.unparseable

    def add(self, other: "RowStats") -> None:
        self.processed += other.processed
        self.processed_bytes += other.processed_bytes
        self.processed_with_error += other.processed_with_error
        self.unparseable += other.unparseable
        self.thrown_away += other.thrown_away

    def to_json(self) -> dict[str, int]:
        return {"processed": self.processed, "processedBytes": self.processed_bytes,
                "processedWithError": self.processed_with_error, "unparseable": self.unparseable,
                "thrownAway": self.thrown_away}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "RowStats":
        return cls(int(d.get("processed", 0)), int(d.get("processedBytes", 0)), int(d.get("processedWithError", 0)),
                   int(d.get("unparseable", 0)), int(d.get("thrownAway", 0)))


@dataclass(frozen=True)
class ParseExceptionRecord:
    topic: str
    partition: int
    offset: int
    message: str
    unparseable: bool  # False: the row was ingested with a column set to null
    timestamp_ms: int | None = None
    input: str | None = None  # the start of the raw record, for the report

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset, "details": self.message,
                "unparseable": self.unparseable, "timestamp": self.timestamp_ms, "input": self.input}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ParseExceptionRecord":
        return cls(d["topic"], int(d["partition"]), int(d["offset"]), d["details"], bool(d["unparseable"]),
                   d.get("timestamp"), d.get("input"))

    def describe(self) -> str:
        kind = "unparseable row" if self.unparseable else "row ingested with errors"
        return f"{kind} at {self.topic}/{self.partition} offset {self.offset}: {self.message}"


class ServiceUnavailableError(ValueError):
    """A record unreadable because a service its decoder needs did not answer (a schema registry): unparseable
    like any bad record, and also counted per service in the reports (`ServiceProblem`), so that `status`
    names the service rather than leaving it to the parse exceptions."""

    def __init__(self, message: str, service: str, url: str):
        super().__init__(message)
        self.service, self.url = service, url


@dataclass
class ServiceProblem:
    """A service that did not answer while a split read: which (`service`, e.g. schemaRegistry, and its `url`),
    the last error, and how many records it left unparseable."""

    service: str
    url: str
    message: str
    records: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"service": self.service, "url": self.url, "message": self.message, "records": self.records}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ServiceProblem":
        return cls(d["service"], d["url"], d["message"], int(d.get("records", 0)))

    @staticmethod
    def merge(into: list["ServiceProblem"], more: Iterable["ServiceProblem"]) -> None:
        """Add `more` to `into`, one entry per service and url (the latest message, the records summed)."""
        for p in more:
            same = next((q for q in into if (q.service, q.url) == (p.service, p.url)), None)
            if same is None:
                into.append(ServiceProblem(p.service, p.url, p.message, p.records))
            else:
                same.message, same.records = p.message, same.records + p.records


class Outcome(str, enum.Enum):
    """What became of a record the parser did not ingest exactly as sent (Druid's row stats' names)."""

    UNPARSEABLE = "unparseable"                 # dropped: it could not be read
    PROCESSED_WITH_ERROR = "processedWithError"  # ingested with a column set to null
    THROWN_AWAY = "thrownAway"                  # dropped on purpose: the filter or the rejection window


@dataclass(frozen=True)
class Rejection:
    """One record's row that was not ingested as sent: the record's offset (its partition is the chunk's),
    what became of the row and why. The row parser lists every one (thrown-away rows only when asked), so a
    dead-letter writer can keep the record's raw bytes; the parse-exception reports keep only the last few."""

    offset: int
    outcome: Outcome
    message: str


def limit_exceeded_message(limit: int, count: int, where: str, last: ParseExceptionRecord | None) -> str:
    tail = f" Last: {last.describe()}." if last else ""
    return (f"Max parse exceptions [{limit}] exceeded in {where}: {count} rows could not be parsed "
            f"(tuningConfig.maxParseExceptions = {limit}).{tail} Fix the data or the spec's inputFormat/"
            f"timestampSpec, or raise maxParseExceptions; set logParseExceptions: true to log every row.")


@dataclass(frozen=True)
class SplitFailure:
    """Why a split's reader stopped, written by the executor into the split's report as it raises: the error's
    stable code (`IngestError.code`; `INGEST_JOB_FAILED` for an exception not of this system), its type's name
    and its message. Spark hands the driver only the exception's text: the driver reads this instead."""

    code: str
    error_class: str
    message: str

    @classmethod
    def of(cls, error: BaseException) -> "SplitFailure":
        code = error.code if isinstance(error, IngestError) else JobFailedError.code
        return cls(code, type(error).__name__, str(error))

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "exceptionClass": self.error_class, "message": self.message}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SplitFailure":
        return cls(d["code"], d["exceptionClass"], d["message"])


@dataclass(frozen=True)
class GroupFailure:
    """Why a task group's job failed and which records it was reading: the error's stable code (`IngestError.code`),
    its type and message, the group's offset ranges, and, when maxParseExceptions stopped it, the limit, the
    count and the last parse exception (with its offset). Status, health, the UI and the REST API show it as
    it is."""

    code: str
    error_class: str
    message: str
    ranges: tuple[OffsetRange, ...]
    max_parse_exceptions: int | None = None
    parse_exceptions: int | None = None
    last_parse_exception: ParseExceptionRecord | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "exceptionClass": self.error_class, "message": self.message,
                               "partitions": [r.to_json() for r in self.ranges]}
        if self.max_parse_exceptions is not None:
            out["maxParseExceptions"] = self.max_parse_exceptions
            out["parseExceptions"] = self.parse_exceptions
            out["lastParseException"] = self.last_parse_exception.to_json() if self.last_parse_exception else None
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "GroupFailure":
        last = d.get("lastParseException")
        return cls(d.get("code", IngestError.code), d["exceptionClass"], d["message"],
                   tuple(OffsetRange.from_json(r) for r in d.get("partitions", [])),
                   d.get("maxParseExceptions"), d.get("parseExceptions"),
                   ParseExceptionRecord.from_json(last) if last else None)

    @property
    def title(self) -> str:
        """What went wrong, for people: `[code] type`, as Spark prints an error condition."""
        return f"[{self.code}] {self.error_class}"

    @property
    def retry_can_help(self) -> bool:
        """False when the job would fail again: on the same records (they are read again as they are), or
        refused by the broker (its credentials or certificate are the same on a retry)."""
        return self.code not in (ParseExceptionLimitError.code, KafkaAuthenticationError.code)

    def describe_records(self) -> str:
        """Which records, for people: the ranges, and what stopped the group when maxParseExceptions did."""
        text = ", ".join(f"{r.tp.topic}:{r.tp.partition} [{r.start}, {r.end})" for r in self.ranges) or "none"
        if self.max_parse_exceptions is not None:
            text += (f"; {self.parse_exceptions} parse exceptions, maxParseExceptions {self.max_parse_exceptions}"
                     + (f"; last: {self.last_parse_exception.describe()}" if self.last_parse_exception else ""))
        return text


@dataclass
class SplitReport:
    """What one Spark task (one split) read."""

    index: int
    topic: str
    partition: int
    start: int
    end: int
    stats: RowStats = field(default_factory=RowStats)
    records: int = 0  # Kafka records read (a record may hold several rows, or none)
    last_offset: int | None = None
    saved_exceptions: list[ParseExceptionRecord] = field(default_factory=list)
    seconds: float = 0.0
    # when it started, epoch seconds on its executor's clock: with the group's `marks`, where a job's time went
    started_at: float | None = None
    dead_letters: "DeadLetterFile | None" = None  # when dead letters are on and the split had any
    problems: list[ServiceProblem] = field(default_factory=list)  # services that did not answer
    failure: SplitFailure | None = None  # the error that stopped the split (its last progress report)

    def to_json(self) -> dict[str, Any]:
        out = {"index": self.index, "topic": self.topic, "partition": self.partition, "start": self.start,
               "end": self.end, "records": self.records, "lastOffset": self.last_offset,
               "rowStats": self.stats.to_json(), "seconds": round(self.seconds, 3),
               "unparseableEvents": [e.to_json() for e in self.saved_exceptions]}
        if self.started_at is not None:
            out["startedAt"] = round(self.started_at, 3)
        if self.dead_letters is not None:
            out["deadLetters"] = self.dead_letters.to_json()
        if self.problems:
            out["problems"] = [p.to_json() for p in self.problems]
        if self.failure is not None:
            out["failure"] = self.failure.to_json()
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SplitReport":
        return cls(int(d["index"]), d["topic"], int(d["partition"]), int(d["start"]), int(d["end"]),
                   RowStats.from_json(d["rowStats"]), int(d.get("records", 0)), d.get("lastOffset"),
                   [ParseExceptionRecord.from_json(e) for e in d.get("unparseableEvents", [])],
                   float(d.get("seconds", 0.0)),
                   float(d["startedAt"]) if d.get("startedAt") is not None else None,
                   DeadLetterFile.from_json(d["deadLetters"]) if d.get("deadLetters") else None,
                   [ServiceProblem.from_json(p) for p in d.get("problems", [])],
                   SplitFailure.from_json(d["failure"]) if d.get("failure") else None)


def latest_split_reports(attempt_uri: str) -> tuple[dict[int, SplitReport], set[int]]:
    """The latest report of each split of a job attempt (its final one once it finished, else its last
    progress report), and the indexes of the splits that finished."""
    reports: dict[int, SplitReport] = {}
    done: set[int] = set()
    for kind in ("progress", "splits"):  # a finished split's final report wins
        for info in deep_storage.list_files(deep_storage.join(attempt_uri, kind), ".json"):
            try:
                report = SplitReport.from_json(deep_storage.read_json(deep_storage.to_uri(attempt_uri, info.path)))
            except (OSError, ValueError, KeyError):
                continue  # being written, or cut short while it was
            reports[report.index] = report
            if kind == "splits":
                done.add(report.index)
    return reports, done


@dataclass(frozen=True)
class GroupProgress:
    """A task group's job while it runs, from its splits' latest reports (Task -> TaskGroup)."""

    group_id: int
    planned: int  # offsets to read
    records: int  # records read so far
    remaining: int  # offsets left: the group's lag within its range
    records_per_s: float
    splits_done: int
    splits: int

    @classmethod
    def from_splits(cls, group_id: int, ranges: list[tuple[int, int]], reports: dict[int, SplitReport],
                    done: set[int]) -> "GroupProgress":
        """`ranges`: each split's [start, end); `reports`: the latest report of each split that has one."""
        remaining = 0
        for index, (start, end) in enumerate(ranges):
            report = reports.get(index)
            position = end if index in done else (report.last_offset + 1 if report and report.last_offset is not None
                                                  else start)
            remaining += max(0, end - position)
        records = sum(r.records for r in reports.values())
        rate = sum(r.records / r.seconds for r in reports.values() if r.seconds > 0)  # splits run in parallel
        return cls(group_id, sum(e - s for s, e in ranges), records, remaining, rate, len(done), len(ranges))

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group_id, "plannedRecords": self.planned, "records": self.records,
                "lag": self.remaining, "recordsPerSecond": round(self.records_per_s, 1),
                "splitsDone": self.splits_done, "splits": self.splits}


class GroupState(str, enum.Enum):
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"


class ReportFormatError(IngestError):
    """A file or stored record that does not read as a task group report."""

    code = "INGEST_REPORT_UNREADABLE"


@dataclass(frozen=True)
class StagedSegment:
    """A segment (one Parquet file) a job wrote to deep storage: not visible until its run publishes."""

    interval_start: datetime
    interval_end: datetime
    shard: int  # the file's number within its interval, in this attempt
    location: str
    rows: int
    bytes: int
    min_time: datetime | None  # from the file's statistics; None when it holds none
    max_time: datetime | None
    columns: tuple[str, ...]
    dimensions: tuple[str, ...]
    metrics: tuple[str, ...]
    offsets: tuple[OffsetRange, ...]  # the task group's ranges: every segment of a group carries all of them
    # column -> type (`core.column_types`: LONG, DOUBLE, ARRAY<LONG>, COMPLEX<json>, ...): what the file's
    # Arrow schema cannot say (a string column holding JSON); empty in reports of before
    types: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        def time(value: datetime | None) -> str | None:
            return format_datetime(value) if value is not None else None

        return {
            "interval": [format_datetime(self.interval_start), format_datetime(self.interval_end)],
            "shard": self.shard, "location": self.location, "rows": self.rows, "bytes": self.bytes,
            "minTime": time(self.min_time), "maxTime": time(self.max_time), "columns": list(self.columns),
            "dimensions": list(self.dimensions), "metrics": list(self.metrics),
            "offsets": {"start": offsets_to_json({r.tp: r.start for r in self.offsets}),
                        "end": offsets_to_json({r.tp: r.end for r in self.offsets})},
            **({"types": dict(self.types)} if self.types else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "StagedSegment":
        def time(value: str | None) -> datetime | None:
            return parse_datetime(value) if value is not None else None

        start, end = offsets_from_json(d["offsets"]["start"]), offsets_from_json(d["offsets"]["end"])
        if start.keys() != end.keys():
            raise ValueError(f"segment {d['location']}: its offsets' start and end name different partitions")
        return cls(parse_datetime(d["interval"][0]), parse_datetime(d["interval"][1]), int(d["shard"]),
                   d["location"], int(d["rows"]), int(d["bytes"]), time(d.get("minTime")), time(d.get("maxTime")),
                   tuple(d["columns"]), tuple(d["dimensions"]), tuple(d["metrics"]),
                   tuple(OffsetRange(tp, start[tp], end[tp]) for tp in sorted(start)), dict(d.get("types") or {}))


@dataclass(frozen=True)
class DeadLetterFile:
    """A split's dead letters (one Parquet file, `handover.dead_letters`), in its attempt's folder: not visible
    until its run publishes (the publish records it with the segments)."""

    location: str
    records: int
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"location": self.location, "records": self.records, "bytes": self.bytes}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "DeadLetterFile":
        return cls(d["location"], int(d["records"]), int(d["bytes"]))


@dataclass
class GroupReport:
    """A task group's report: merged row stats, the most recent parse exceptions, and its segments. The Spark
    job writes it (`report.json` in its attempt folder); the publish reads it; the store keeps the published
    ones. One JSON form for all three: `to_json` / `from_json`."""

    datasource: str
    run_id: str
    group_id: int
    replica: int
    state: GroupState
    stats: RowStats
    splits: list[SplitReport]
    saved_exceptions: list[ParseExceptionRecord]
    segments: list[StagedSegment] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    failure: GroupFailure | None = None  # FAILED: why, typed (reports written before it have only `error`)
    # epoch seconds on the driver's clock: "started", "writeStarted" (the Spark action: read, sort, Parquet
    # write), "writeEnded", "ended" (after the splits' reports and the segments' footers were read)
    marks: dict[str, float] = field(default_factory=dict)

    @classmethod
    def merge(cls, datasource: str, run_id: str, group_id: int, replica: int, splits: Iterable[SplitReport],
              max_saved: int) -> "GroupReport":
        ordered = sorted(splits, key=lambda s: s.index)
        stats = RowStats()
        for s in ordered:
            stats.add(s.stats)
        exceptions = sorted((e for s in ordered for e in s.saved_exceptions),
                            key=lambda e: (e.topic, e.partition, e.offset))
        return cls(datasource, run_id, group_id, replica, GroupState.SUCCESS, stats, ordered,
                   exceptions[-max_saved:] if max_saved else [])

    @classmethod
    def lost(cls, datasource: str, run_id: str, group_id: int, ranges: Iterable[OffsetRange]) -> "GroupReport":
        """The report of a group whose job left none (its process died before writing one)."""
        error = JobLostError(f"the Spark job of task group {group_id} of run {run_id} left no report: it died "
                             "before finishing (killed, out of memory, a lost driver); see its spark_job task log")
        report = cls(datasource, run_id, group_id, 0, GroupState.FAILED, RowStats(), [], [], error=str(error))
        report.failure = GroupFailure(error.code, type(error).__name__, str(error), tuple(ranges))
        return report

    @property
    def records(self) -> int:
        return sum(s.records for s in self.splits)

    @property
    def dead_letters(self) -> list[DeadLetterFile]:
        """The splits' dead-letter files: the publish of this report makes them visible."""
        return [s.dead_letters for s in self.splits if s.dead_letters is not None]

    @property
    def succeeded(self) -> bool:
        return self.state is GroupState.SUCCESS

    @property
    def problems(self) -> list[ServiceProblem]:
        """The services that did not answer while its splits read (from the splits)."""
        out: list[ServiceProblem] = []
        for s in self.splits:
            ServiceProblem.merge(out, s.problems)
        return out

    def to_json(self) -> dict[str, Any]:
        out = {
            "datasource": self.datasource, "runId": self.run_id, "groupId": self.group_id, "replica": self.replica,
            "state": self.state.value, "error": self.error, "seconds": round(self.seconds, 3),
            "records": self.records, "rowStats": self.stats.to_json(),
            "unparseableEvents": [e.to_json() for e in self.saved_exceptions],
            "segments": [s.to_json() for s in self.segments], "splits": [s.to_json() for s in self.splits],
        }
        if self.failure is not None:
            out["failure"] = self.failure.to_json()
        if self.marks:
            out["marks"] = {k: round(v, 3) for k, v in self.marks.items()}
        if self.dead_letters:  # the splits' files, listed for readers of the report (read back from the splits)
            out["deadLetters"] = [f.to_json() for f in self.dead_letters]
        return out

    @classmethod
    def from_json(cls, d: Any, source: str) -> "GroupReport":
        """`source` says where `d` came from (a file's URI, a stored record), for the error when it is not a
        report. `records` is derived from the splits, not read."""
        try:
            return cls(d["datasource"], d["runId"], int(d["groupId"]), int(d.get("replica", 0)),
                       GroupState(d["state"]), RowStats.from_json(d["rowStats"]),
                       [SplitReport.from_json(s) for s in d.get("splits", [])],
                       [ParseExceptionRecord.from_json(e) for e in d.get("unparseableEvents", [])],
                       [StagedSegment.from_json(s) for s in d.get("segments", [])], d.get("error"),
                       float(d.get("seconds", 0.0)),
                       GroupFailure.from_json(d["failure"]) if d.get("failure") else None,
                       {str(k): float(v) for k, v in d.get("marks", {}).items()})
        except KeyError as exc:
            raise _malformed(source, f"it has no {exc.args[0]!r}") from None
        except (TypeError, ValueError, AttributeError, IndexError) as exc:
            raise _malformed(source, str(exc)) from None

    @classmethod
    def loads(cls, text: str, source: str) -> "GroupReport":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise _malformed(source, f"not JSON: {exc}") from None
        return cls.from_json(data, source)


def _malformed(source: str, problem: str) -> ReportFormatError:
    return ReportFormatError(
        f"{source} is not a task group report as the Spark job writes it ({problem}). Nothing was read from it; "
        "re-running the task group's Spark job (clear its spark_job task) writes a new one.")


@dataclass(frozen=True)
class AttemptReport:
    """The report one job attempt of a task group's replica left. `attempt` (its folder's id) orders the
    attempts of a replica by when they started; a report kept in the store has none ("")."""

    report: GroupReport
    attempt: str = ""

    @property
    def replica(self) -> int:
        return self.report.replica


def successful_attempts(attempts: Iterable[AttemptReport]) -> list[AttemptReport]:
    """One successful attempt per replica (its earliest), lowest replica first. The first is the group's
    published one: the earliest successful attempt of its lowest successful replica. Deterministic, so a
    retried publish picks the same attempt, and row stats count the replica that was published."""
    first: dict[int, AttemptReport] = {}
    for a in sorted((a for a in attempts if a.report.succeeded), key=lambda a: (a.replica, a.attempt)):
        first.setdefault(a.replica, a)
    return list(first.values())


def published_attempt(attempts: Iterable[AttemptReport]) -> AttemptReport | None:
    """The attempt a task group publishes (see `successful_attempts`); None when none succeeded."""
    chosen = successful_attempts(attempts)
    return chosen[0] if chosen else None
