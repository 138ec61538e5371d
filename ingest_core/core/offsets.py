"""Offset value types and start-offset resolution (pure: no broker, no database).

Druid's order for where a partition's next run starts:
  1. the planned end offset of a run that is still in flight (pipelining: it has not published yet);
  2. else the committed offset in the metadata store;
  3. else the earliest or latest offset in Kafka, by `useEarliestOffset`; but a partition discovered after
     the datasource has started (new partitions, new topics of a `topicPattern`) starts from earliest, like
     Druid's subsequently discovered partitions, so records written before discovery are not skipped.
A start below the log start (retention or `delete_records` removed records) is reset with an audit record
when `resetOffsetAutomatically` is set, else it stops the run; a start beyond the log end means the topic was
re-created and always stops the run.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable, Mapping

from ingest_core.core.errors import OffsetOutOfRangeError


@dataclass(frozen=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets [start, end) of one partition.

    `size` is an upper bound on the records it holds: transaction markers, aborted transactions and
    compaction leave gaps, so a reader must stop at its position reaching `end`, never wait to see `end - 1`.
    """

    tp: TopicPartition
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)

    def to_json(self) -> dict:
        return {"topic": self.tp.topic, "partition": self.tp.partition, "start": self.start, "end": self.end}

    @classmethod
    def from_json(cls, d: Mapping) -> "OffsetRange":
        return cls(TopicPartition(d["topic"], int(d["partition"])), int(d["start"]), int(d["end"]))


class StartSource(str, enum.Enum):
    INFLIGHT = "inflight"  # planned end of a run that has not published yet
    COMMITTED = "committed"
    EARLIEST = "earliest"
    LATEST = "latest"
    RESET_EARLIEST = "reset-earliest"  # resetOffsetAutomatically moved a truncated start
    RESET_LATEST = "reset-latest"
    NEW_PARTITION = "new-partition"  # appeared after the first run: read from earliest so nothing is missed
    BACKFILL = "backfill"  # a fixed range skipped by `reset --to-latest --backfill`; publishes apart from the main line


@dataclass(frozen=True)
class StartOffset:
    """Where a partition's range starts, and the committed offset its publish must find (compare-and-swap).

    `expected_commit` is None for a first start from earliest/latest: publishing then requires that nothing
    was committed for the partition in between.
    """

    offset: int
    source: StartSource
    after_run: str | None = None  # the in-flight or committing run this start continues from
    expected_commit: int | None = None


@dataclass(frozen=True)
class KnownOffset:
    """An offset some run put there: committed by it, or planned as its end while it is in flight."""

    offset: int
    run_id: str | None


@dataclass(frozen=True)
class OffsetReset:
    """What `resetOffsetAutomatically` did to one partition; goes to the audit log."""

    tp: TopicPartition
    from_offset: int
    to_offset: int
    earliest: int
    latest: int


@dataclass(frozen=True)
class StartResolution:
    starts: dict[TopicPartition, StartOffset]
    resets: list[OffsetReset]


def resolve_start_offsets(
    partitions: Iterable[TopicPartition],
    *,
    datasource: str,
    inflight: Mapping[TopicPartition, KnownOffset],
    committed: Mapping[TopicPartition, KnownOffset],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    use_earliest: bool,
    reset_automatically: bool,
) -> StartResolution:
    starts: dict[TopicPartition, StartOffset] = {}
    resets: list[OffsetReset] = []
    started = bool(inflight) or bool(committed)
    for tp in sorted(partitions):
        lo, hi = earliest[tp], latest[tp]
        if tp in inflight:
            known, source = inflight[tp], StartSource.INFLIGHT
        elif tp in committed:
            known, source = committed[tp], StartSource.COMMITTED
        elif started:
            starts[tp] = StartOffset(lo, StartSource.NEW_PARTITION)
            continue
        else:
            fresh = StartSource.EARLIEST if use_earliest else StartSource.LATEST
            starts[tp] = StartOffset(lo if use_earliest else hi, fresh)
            continue
        where = (f"planned end of in-flight run {known.run_id}" if source is StartSource.INFLIGHT
                 else f"committed by run {known.run_id}" if known.run_id else "committed")
        if known.offset > hi:
            raise OffsetOutOfRangeError(
                f"datasource {datasource!r}, partition {tp}: start offset {known.offset} ({where}) is beyond the "
                f"log end offset {hi}. The topic was probably deleted and re-created, so the stored offsets "
                f"describe another log. Nothing was ingested. Check the topic, then run "
                f"`ingest reset {datasource}` (start over from earliest/latest by useEarliestOffset) or "
                f"`ingest set-offsets {datasource} {tp.topic}:{tp.partition}=<offset>`.",
                topic=tp.topic, partition=tp.partition, offset=known.offset, earliest=lo, latest=hi,
            )
        if known.offset < lo:
            if not reset_automatically:
                raise OffsetOutOfRangeError(
                    f"datasource {datasource!r}, partition {tp}: start offset {known.offset} ({where}) is below "
                    f"the log start offset {lo}: records {known.offset}..{lo - 1} were removed (retention or "
                    f"delete_records) before they were ingested. The run stops so nothing is skipped silently. "
                    f"To continue, accept the loss with `ingest set-offsets {datasource} "
                    f"{tp.topic}:{tp.partition}={lo}` or `ingest reset {datasource}`, or set "
                    f"tuningConfig.resetOffsetAutomatically: true.",
                    topic=tp.topic, partition=tp.partition, offset=known.offset, earliest=lo, latest=hi,
                )
            target = lo if use_earliest else hi
            resets.append(OffsetReset(tp, known.offset, target, lo, hi))
            reset_source = StartSource.RESET_EARLIEST if use_earliest else StartSource.RESET_LATEST
            # The publish still compare-and-swaps against the offset it was reset from.
            starts[tp] = StartOffset(target, reset_source, known.run_id, known.offset)
            continue
        starts[tp] = StartOffset(known.offset, source, known.run_id, known.offset)
    return StartResolution(starts, resets)


def clamp_to_log(committed: Mapping[TopicPartition, KnownOffset], earliest: Mapping[TopicPartition, int],
                 latest: Mapping[TopicPartition, int]) -> tuple[dict[TopicPartition, KnownOffset], list[OffsetReset]]:
    """Committed offsets moved into their partition's log, for `reset --to-latest`, whose job is to get past
    them: below the log start (records removed before they were ingested) to the log start, beyond the log end
    (the topic was re-created) to the log end. Returns the offsets and what was moved; partitions that are not
    in the log any more stay as they are."""
    out, moved = dict(committed), []
    for tp in sorted(committed):
        if tp not in earliest:
            continue
        known, lo, hi = committed[tp], earliest[tp], latest[tp]
        to = min(max(known.offset, lo), hi)
        if to != known.offset:
            out[tp] = KnownOffset(to, known.run_id)
            moved.append(OffsetReset(tp, known.offset, to, lo, hi))
    return out, moved


def pending_records(starts: Mapping[TopicPartition, int], earliest: Mapping[TopicPartition, int],
                    latest: Mapping[TopicPartition, int]) -> int:
    """Records between each partition's start and its latest offset (an upper bound: gaps count). A partition
    without a start appeared since the starts were resolved and counts from its earliest offset."""
    return sum(max(0, hi - starts.get(tp, earliest.get(tp, hi))) for tp, hi in latest.items())


@dataclass(frozen=True)
class PublishedRange:
    """Offsets [start, end) of a partition that a publish made visible: claimed, so no other run publishes
    them again (`metadata.published_ranges`)."""

    tp: TopicPartition
    start: int
    end: int
    run_id: str  # the run that published it; of the main line's stretch, the latest run that extended it
    backfill: bool


def find_overlap(ranges: Iterable[OffsetRange], claims: Iterable[PublishedRange]
                 ) -> tuple[OffsetRange, PublishedRange] | None:
    """The first of `ranges` that overlaps a published range, with that range; None when none does."""
    by_tp: dict[TopicPartition, list[PublishedRange]] = {}
    for claim in claims:
        by_tp.setdefault(claim.tp, []).append(claim)
    for r in sorted(ranges):
        for claim in sorted(by_tp.get(r.tp, ()), key=lambda c: c.start):
            if r.size and r.start < claim.end and claim.start < r.end:
                return r, claim
    return None


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Spark's offset JSON: {"topic": {"0": 23, "1": 42}}."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def offsets_from_json(data: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    return {TopicPartition(t, int(p)): int(o) for t, parts in data.items() for p, o in parts.items()}
