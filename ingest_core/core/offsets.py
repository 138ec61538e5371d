"""Offset value types and start-offset resolution (pure: no broker, no database).

Druid's order for where a partition's next run starts:
  1. the planned end offset of a run that is still in flight (pipelining: it has not published yet);
  2. else the committed offset in the metadata store;
  3. else the earliest or latest offset in Kafka, by `useEarliestOffset`; but a partition discovered after
     the datasource has started (new partitions, new topics of a `topicPattern`) starts from earliest, like
     Druid's subsequently discovered partitions, so records written before discovery are not skipped.
A start below the log start (retention or `delete_records` removed records) is reset with an audit record
when `resetOffsetAutomatically` is set, else it stops the run; a start beyond the log end means the topic was
re-created and always stops the run. So does a topic whose Kafka topic id is not the one the stored offsets
were read from (deleted and re-created, even with more records than the stored offset): `recreated_topics`.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, NamedTuple

from ingest_core.core.errors import (
    DuplicatesNotConfirmedError,
    OffsetOutOfRangeError,
    SkipNotConfirmedError,
    TopicRecreatedError,
    clipped,
    shown,
)


class TopicPartition(NamedTuple):
    """A NamedTuple, not a dataclass: a plan keys and sorts every partition of its topics by it, and a tuple's
    hash and order run in C (a frozen dataclass's in Python: a third of planning 100,000 partitions)."""

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


class StartOffset(NamedTuple):
    """Where a partition's range starts, and the committed offset its publish must find (compare-and-swap).

    `expected_commit` is None for a first start from earliest/latest: publishing then requires that nothing
    was committed for the partition in between. (A NamedTuple, as are `TopicPartition` and `KnownOffset`: one
    per partition of every plan, made fast.)
    """

    offset: int
    source: StartSource
    after_run: str | None = None  # the in-flight or committing run this start continues from
    expected_commit: int | None = None


class KnownOffset(NamedTuple):
    """An offset some run put there: committed by it, or planned as its end while it is in flight."""

    offset: int
    run_id: str | None
    # Kafka's id of the topic it was read from; None: not known (stored before topic ids were; the next publish
    # learns it)
    topic_id: str | None = None


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
    topic_ids: Mapping[str, str] | None = None,
) -> StartResolution:
    """`topic_ids`: the broker's id of each topic now; a stored offset read from another id stops the run
    (`TopicRecreatedError`). None: not checked."""
    starts: dict[TopicPartition, StartOffset] = {}
    resets: list[OffsetReset] = []
    started = bool(inflight) or bool(committed)
    partitions = sorted(partitions)
    truncated: list[tuple[TopicPartition, int, int, int, str]] = []  # below the log start: one error for all
    if topic_ids is not None:
        check_topic_ids(datasource, partitions, inflight, committed, topic_ids, earliest, latest)
    fresh = StartSource.EARLIEST if use_earliest else StartSource.LATEST
    for tp in partitions:
        lo, hi = earliest[tp], latest[tp]
        known, source = inflight.get(tp), StartSource.INFLIGHT
        if known is None:
            known, source = committed.get(tp), StartSource.COMMITTED
        if known is None:
            if started:
                starts[tp] = StartOffset(lo, StartSource.NEW_PARTITION)
            else:
                starts[tp] = StartOffset(lo if use_earliest else hi, fresh)
            continue
        if lo <= known.offset <= hi:  # the usual case, first: in the log
            starts[tp] = StartOffset(known.offset, source, known.run_id, known.offset)
            continue
        where = (f"planned end of in-flight run {known.run_id}" if source is StartSource.INFLIGHT
                 else f"committed by run {known.run_id}" if known.run_id else "committed")
        if known.offset > hi:
            raise OffsetOutOfRangeError(
                f"datasource {datasource!r}, partition {tp}: start offset {known.offset} ({where}) is beyond the "
                f"log end offset {hi}: the partition lost its tail (an unclean leader election) or the topic was "
                f"deleted and re-created, so the stored offset describes another log. Nothing was ingested. Check "
                f"the topic, then continue this partition from its end: `ingest set-offsets {datasource} "
                f"{tp.topic}:{tp.partition}=latest`, or, for a re-created topic, start it over: `ingest "
                f"set-offsets {datasource} {tp.topic}=earliest` (audited; other partitions keep their offsets).",
                topic=tp.topic, partition=tp.partition, offset=known.offset, earliest=lo, latest=hi,
            )
        # below the log start
        if not reset_automatically:
            truncated.append((tp, known.offset, lo, hi, where))
            continue
        target = lo if use_earliest else hi
        resets.append(OffsetReset(tp, known.offset, target, lo, hi))
        reset_source = StartSource.RESET_EARLIEST if use_earliest else StartSource.RESET_LATEST
        # The publish still compare-and-swaps against the offset it was reset from.
        starts[tp] = StartOffset(target, reset_source, known.run_id, known.offset)
    if truncated:
        _raise_truncated(datasource, truncated)
    return StartResolution(starts, resets)


def _raise_truncated(datasource: str, truncated: list[tuple[TopicPartition, int, int, int, str]]) -> None:
    """Every partition whose start lies below its log start, in one error with one command that moves exactly
    those partitions to their log start (a reset would re-read every other one)."""
    what = "; ".join(f"partition {tp}: start offset {start} ({where}) is below the log start offset {lo}: records "
                     f"{start}..{lo - 1} were removed (retention or delete_records) before they were ingested"
                     for tp, start, lo, _, where in truncated)
    these = "this partition" if len(truncated) == 1 else f"these {len(truncated)} partitions"
    command = " ".join(f"{tp.topic}:{tp.partition}=earliest" for tp, *_ in truncated)
    tp, start, lo, hi, _ = truncated[0]
    raise OffsetOutOfRangeError(
        f"datasource {datasource!r}, {what}. The run stops so nothing is skipped silently. To continue, accept the "
        f"loss by moving only {these} to the log start: `ingest set-offsets {datasource} {command}` (audited; other "
        f"partitions keep their offsets), or set tuningConfig.resetOffsetAutomatically: true.",
        topic=tp.topic, partition=tp.partition, offset=start, earliest=lo, latest=hi)


def recreated_topics(known: Mapping[TopicPartition, KnownOffset], topic_ids: Mapping[str, str]
                     ) -> dict[str, tuple[str, str]]:
    """Topics whose stored offsets in `known` were read from another topic id than the broker's now (deleted and
    re-created): name -> (stored id, broker's id). Offsets without a stored id, and topics without a broker id,
    are not judged."""
    out: dict[str, tuple[str, str]] = {}
    changed = [(tp, k) for tp, k in known.items()
               if k.topic_id is not None and topic_ids.get(tp.topic) not in (None, k.topic_id)]
    for tp, k in sorted(changed):  # the first partition's stored id names the topic's
        out.setdefault(tp.topic, (k.topic_id, topic_ids[tp.topic]))
    return out


def check_topic_ids(datasource: str, partitions: Iterable[TopicPartition], inflight: Mapping[TopicPartition, KnownOffset],
                    committed: Mapping[TopicPartition, KnownOffset], topic_ids: Mapping[str, str],
                    earliest: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]) -> None:
    """Raise `TopicRecreatedError` when a topic's stored offsets (in flight or committed) were read from another
    topic id: they describe another log, and reading on from them would skip (or re-read) records of the new one
    without a word. The error names the commands to choose from."""
    recreated = {**recreated_topics(committed, topic_ids), **recreated_topics(inflight, topic_ids)}
    if not recreated:
        return
    lines = []
    for topic, (old, new) in sorted(recreated.items()):
        tps = [tp for tp in partitions if tp.topic == topic]
        records = sum(max(0, latest[tp] - earliest[tp]) for tp in tps)
        stored = ", ".join(f"{tp.partition}: {(inflight.get(tp) or committed[tp]).offset}"
                           for tp in sorted(set(inflight) | set(committed)) if tp.topic == topic)
        lines.append(
            f"topic {topic!r} was deleted and re-created: the stored offsets (partition: offset {stored}) were read "
            f"from topic id {old}, the broker's {topic!r} is now topic id {new} ({records} records in {len(tps)} "
            f"partitions). Those offsets describe another log, so runs stop rather than skip or re-read records of "
            f"the new one. Nothing was ingested. Choose one (audited): `ingest set-offsets {datasource} "
            f"{topic}=earliest` (start over from the new topic's first record: reads its {records} records) or "
            f"`ingest set-offsets {datasource} {topic}=latest` (start from its end: its {records} records are "
            f"skipped)")
    raise TopicRecreatedError(f"datasource {datasource!r}: " + "; ".join(lines) + ".", topics=recreated)


def check_planned_topic_ids(datasource: str, run_id: str, planned: Mapping[str, str], now: Mapping[str, str]) -> None:
    """Raise `TopicRecreatedError` when a topic the run planned has another id now (or none: deleted): what its
    job read came from another log, and must not be published."""
    changed = {t: (planned[t], now.get(t, "none: deleted")) for t in sorted(planned) if now.get(t) != planned[t]}
    if changed:
        raise TopicRecreatedError(
            f"run {run_id} of datasource {datasource!r}: " + "; ".join(
                f"topic {t!r} was deleted and re-created while the run read it (topic id {old} when planned, {new} "
                f"now)" for t, (old, new) in changed.items())
            + ". What it read came from another log and is not published; the next run's plan stops with the "
              "commands to choose from.", topics=changed)


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
            out[tp] = KnownOffset(to, known.run_id, known.topic_id)
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


# ------------------------------------------------------------------------------------------ operator moves

EARLIEST_OFFSET, LATEST_OFFSET = "earliest", "latest"


@dataclass(frozen=True)
class OffsetRequest:
    """One `TOPIC[:PARTITION]=OFFSET` of set-offsets. `partition` None: every partition of the topic; `offset`
    "earliest" / "latest": the partition's log start / end as the broker has them."""

    topic: str
    partition: int | None
    offset: int | str

    def __str__(self) -> str:
        topic = clipped(str(self.topic), TOPIC_NAME_MAX + 1)  # what a client sent, echoed: never all of it
        where = topic if self.partition is None else f"{topic}:{self.partition}"
        return f"{where}={self.offset}"


@dataclass(frozen=True)
class OffsetClamp:
    """An offset outside its partition's log that `--force` moved to the log's nearer end, as Kafka's
    `kafka-consumer-groups --reset-offsets` does."""

    tp: TopicPartition
    requested: int
    offset: int

    def to_json(self) -> dict:
        return {"topic": self.tp.topic, "partition": self.tp.partition, "requested": self.requested,
                "offset": self.offset}


@dataclass(frozen=True)
class OffsetProblem:
    """Why an offset may not be set. `forcible`: `--force` may override it (a negative offset never). `clamp`:
    what `--force` sets instead (an offset outside the log)."""

    message: str
    forcible: bool = True
    clamp: OffsetClamp | None = None


LONG_MAX = 2**63 - 1  # Kafka's offsets are Java longs
INT32_MAX = 2**31 - 1  # and its partitions ints
TOPIC_NAME_MAX = 249  # Kafka's legal topic names: up to 249 of these characters
TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,%d}" % TOPIC_NAME_MAX)


def request_problem(req: OffsetRequest) -> str | None:
    """What no `--force` may override in a request: a value no Kafka log can have."""
    if not isinstance(req.topic, str) or not req.topic:
        return f"a topic is a non-empty name, got {shown(req.topic)}"
    if not TOPIC_NAME.fullmatch(req.topic):
        return (f"{shown(req.topic)} is no Kafka topic name: one is 1 to {TOPIC_NAME_MAX} of the "
                "characters a-z A-Z 0-9 . _ -")
    if isinstance(req.offset, int) and req.offset < 0:
        return "an offset is never negative"
    if isinstance(req.offset, int) and req.offset > LONG_MAX:
        return f"an offset is at most {LONG_MAX} (a 64-bit long)"
    if req.partition is not None and req.partition < 0:
        return "a partition is never negative"
    if req.partition is not None and req.partition > INT32_MAX:
        return f"a partition is at most {INT32_MAX}"
    return None


def resolve_offset_requests(datasource: str, requests: Iterable[OffsetRequest], *, broker_partitions: Mapping[str, int],
                            in_spec: Callable[[str], bool], earliest: Mapping[TopicPartition, int],
                            latest: Mapping[TopicPartition, int], clamp: bool = False
                            ) -> tuple[dict[TopicPartition, int], list[OffsetProblem]]:
    """The offsets `requests` ask for, and every problem with them: a negative offset, a topic not in the
    datasource's spec, a topic or partition the broker does not have, an offset beyond the log end (every run
    would stop there: it reads as a re-created topic) or below the log start (those records are gone).
    `clamp` (`--force`): an offset outside the log is moved to the log's nearer end (the problem says so), as
    Kafka's `kafka-consumer-groups --reset-offsets` does; nothing beyond the log end is ever set, so nothing
    that never existed counts as skipped or lost. `broker_partitions`: partition count per topic on the
    broker; `earliest` / `latest`: of the partitions that exist."""
    out: dict[TopicPartition, int] = {}
    problems: list[OffsetProblem] = []
    given: dict[TopicPartition, OffsetRequest] = {}  # which request asked for each partition
    for req in requests:
        problem = request_problem(req)
        if problem:
            problems.append(OffsetProblem(f"{req}: {problem}", forcible=False))
            continue
        if not in_spec(req.topic):
            problems.append(OffsetProblem(f"{req}: topic {req.topic!r} is not one datasource {datasource!r} reads "
                                          f"(its spec's ioConfig.topic / topicPattern)"))
        count = broker_partitions.get(req.topic)
        if count is None:
            problems.append(OffsetProblem(f"{req}: topic {req.topic!r} does not exist on the broker"))
            if isinstance(req.offset, int) and req.partition is not None:
                out[TopicPartition(req.topic, req.partition)] = req.offset
            continue
        tps = [TopicPartition(req.topic, p) for p in range(count)] if req.partition is None else [
            TopicPartition(req.topic, req.partition)]
        for tp in tps:
            if tp not in latest:
                problems.append(OffsetProblem(f"{req}: topic {req.topic!r} has partitions 0..{count - 1}, not "
                                              f"{tp.partition}"))
                if isinstance(req.offset, int):
                    out[tp] = req.offset
                continue
            if tp in given:  # never keep one of two values silently
                problems.append(OffsetProblem(f"{tp.topic}:{tp.partition} is given twice ({given[tp]}, {req}): give one offset per "
                                              "partition", forcible=False))
                continue
            given[tp] = req
            lo, hi = earliest[tp], latest[tp]
            if req.offset == EARLIEST_OFFSET:
                offset = lo
            elif req.offset == LATEST_OFFSET:
                offset = hi
            else:
                offset = int(req.offset)
                if offset > hi:
                    where = (f"{req}: partition {tp} ends at offset {hi} (log {lo}..{hi}); offset {offset} lies "
                             "beyond it")
                    problems.append(OffsetProblem(
                        f"{where}: set to the log end {hi} instead" if clamp else
                        f"{where}, so every run would stop there until the log grows past it (use {hi}, or "
                        f"`{tp.topic}:{tp.partition}=latest`)", clamp=OffsetClamp(tp, offset, hi) if clamp else None))
                    offset = hi if clamp else offset
                elif offset < lo:
                    where = (f"{req}: partition {tp} starts at offset {lo} (log {lo}..{hi}); records "
                             f"{offset}..{lo - 1} were removed")
                    problems.append(OffsetProblem(
                        f"{where}: set to the log start {lo} instead" if clamp else
                        f"{where}, so runs would stop there (use {lo}, or `{tp.topic}:{tp.partition}=earliest`)",
                        clamp=OffsetClamp(tp, offset, lo) if clamp else None))
                    offset = lo if clamp else offset
            out[tp] = offset
    return out, problems


@dataclass(frozen=True)
class MoveEffect:
    """What moving committed offsets does to records: `reread` were published already and will be ingested again
    (duplicates); `skipped` will never be ingested. Sizes are offsets: an upper bound on records (see
    `OffsetRange.size`)."""

    reread: tuple[OffsetRange, ...] = ()
    skipped: tuple[OffsetRange, ...] = ()

    @property
    def duplicates(self) -> int:
        return sum(r.size for r in self.reread)

    @property
    def skipped_records(self) -> int:
        return sum(r.size for r in self.skipped)


def move_effect(new: Mapping[TopicPartition, int], committed: Mapping[TopicPartition, KnownOffset],
                earliest: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
                topic_ids: Mapping[str, str], claims: Iterable[PublishedRange] = ()) -> MoveEffect:
    """The records that moving the committed offsets to `new` re-reads and skips. Re-read: what was published
    at and above `new` in the log the broker has now (below the committed offset, and the claimed ranges the
    move releases, a backfill's beyond it), from the log start up. Skipped: above the committed offset (or from
    the log start of a re-created topic's new log, which nothing published) up to `new`. A stored offset of
    another topic id is another log: nothing of it is re-read. Partitions the broker does not have count
    neither."""
    by_tp: dict[TopicPartition, list[PublishedRange]] = {}
    for claim in claims:
        by_tp.setdefault(claim.tp, []).append(claim)
    reread, skipped = [], []
    for tp, to in sorted(new.items()):
        if tp not in latest:
            continue
        lo, hi = earliest[tp], latest[tp]
        known = committed.get(tp)
        other_log = known is not None and known.topic_id is not None and topic_ids.get(tp.topic) not in (
            None, known.topic_id)
        at = lo if known is None or other_log else known.offset
        if not other_log:
            spans = [(to, at)] + [(max(to, c.start), c.end) for c in by_tp.get(tp, ()) if c.end > to]
            reread += _merged(tp, [(max(a, lo), min(b, hi)) for a, b in spans])
        if to > at:
            r = OffsetRange(tp, max(at, lo), min(to, hi))
            skipped += [r] if r.size else []
    return MoveEffect(tuple(reread), tuple(skipped))


def _merged(tp: TopicPartition, spans: list[tuple[int, int]]) -> list[OffsetRange]:
    """The non-empty spans as ranges, overlapping ones merged."""
    out: list[OffsetRange] = []
    for a, b in sorted(x for x in spans if x[1] > x[0]):
        if out and a <= out[-1].end:
            out[-1] = OffsetRange(tp, out[-1].start, max(out[-1].end, b))
        else:
            out.append(OffsetRange(tp, a, b))
    return out


def _refused_count(n: int, ranges: Iterable[OffsetRange], confirmed: int | None) -> tuple[str, str] | None:
    """None when a count the operator confirmed (None: none) allows a move of `n` records (none is needed for 0,
    another number refuses: something moved since it was counted); else the refusal's ranges and what was said."""
    if (n == 0 and confirmed in (None, 0)) or confirmed == n:
        return None
    return (", ".join(f"{r.tp} [{r.start}, {r.end})" for r in ranges) or "none",
            "" if confirmed is None else f" (confirmed: {confirmed})")


def check_duplicates_confirmed(what: str, effect: MoveEffect, confirmed: int | None) -> None:
    """An action that would ingest published records again runs only when the operator confirmed exactly how
    many (CLI `--confirm-duplicates N`, REST `"confirmDuplicates": N`)."""
    n = effect.duplicates
    if (refused := _refused_count(n, effect.reread, confirmed)) is None:
        return
    ranges, said = refused
    raise DuplicatesNotConfirmedError(
        f"{what} would read {n} records again that were already published ({ranges}): they would be ingested "
        f"twice{said}. Nothing was changed. To do it anyway, confirm that number: add `--confirm-duplicates {n}` "
        f"(REST: \"confirmDuplicates\": {n} in the body)." if n else
        f"{what} re-reads no published records, but {confirmed} duplicates were confirmed: nothing was changed; "
        f"check the offsets and run it again without --confirm-duplicates", duplicates=n)


def check_skip_confirmed(what: str, effect: MoveEffect, confirmed: int | bool | None) -> None:
    """An action that would skip records nothing ingested (they are lost, counted in status) runs only when the
    operator confirmed it: True (CLI `--yes`: whatever it skips), or exactly how many (CLI `--confirm-skip N`,
    REST `"confirmSkip": N`). A confirmation typed at a terminal is not one: it confirms the command, not the
    records it loses."""
    n = effect.skipped_records
    if confirmed is True or (refused := _refused_count(n, effect.skipped, confirmed or None)) is None:
        return
    ranges, said = refused
    raise SkipNotConfirmedError(
        f"{what} would skip {n} records that were never ingested ({ranges}): they would be lost{said}. Nothing was "
        f"changed. To do it anyway, confirm it: add `--confirm-skip {n}` (or `--yes`; REST: \"confirmSkip\": {n} "
        f"in the body)." if n else
        f"{what} skips no records, but {confirmed} skipped records were confirmed: nothing was changed; check the "
        f"offsets and run it again without --confirm-skip", skipped=n)
