"""Planning one run: end offsets, task groups and splits. A pure function of its inputs (`plan_run`).

- End offsets: the latest offsets at plan time, optionally capped by the offsets at a given time (a run for
  the data interval [a, b) reads what had arrived by b; a record stamped in the future caps nothing:
  `time_cap`) and by a per-run record limit (spread over partitions
  in proportion to their lag, like Spark's maxOffsetsPerTrigger).
- Task groups: Druid's `partition % taskCount` (multi-topic: `abs(31 * topic.hashCode() + partition) %
  taskCount`), or opt-in `balanced`, which packs partitions by records to read (largest first onto the
  lightest group). Never more groups than partitions.
- Splits: a group's ranges are cut into splits of at most `maxRecordsPerSplit` records, and into at least
  `minSplitsPerGroup` splits overall, so Spark can read one big partition in parallel. Cuts are even; the
  last split takes the rounding (Spark's KafkaOffsetRangeCalculator).
"""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from datetime import datetime, timedelta
from typing import Mapping, NamedTuple, Sequence

from ingest_core.core.defaults import MAX_RECORDS_PER_SPLIT, MIN_SPLITS_PER_GROUP
from ingest_core.core.offsets import (
    OffsetRange,
    StartOffset,
    StartSource,
    TopicPartition,
)
from ingest_core.core.periods import format_datetime, parse_datetime

MODULO, BALANCED = "modulo", "balanced"
ASSIGNMENTS = (MODULO, BALANCED)
FUTURE_TOLERANCE = timedelta(minutes=1)  # producer clocks may run ahead this much: no "future" record yet


@dataclass(frozen=True)
class PlanRequest:
    datasource: str
    run_id: str
    created_at: datetime  # the task groups' creation time: late/early message rejection is relative to it
    starts: Mapping[TopicPartition, StartOffset]
    latest: Mapping[TopicPartition, int]
    task_count: int
    multi_topic: bool = False
    assignment: str = MODULO
    max_records_per_split: int = MAX_RECORDS_PER_SPLIT
    min_splits_per_group: int = MIN_SPLITS_PER_GROUP
    max_records_per_run: int | None = None
    # Offsets of the first record at or after `end_time`, per partition (None: no record that late yet).
    offsets_at_end_time: Mapping[TopicPartition, int | None] | None = None
    end_time: datetime | None = None
    # Records stamped at or after `future_after` (now plus FUTURE_TOLERANCE) are stamped in the future; the
    # offsets of the first such record per partition (see `time_cap`).
    future_after: datetime | None = None
    offsets_at_future: Mapping[TopicPartition, int | None] | None = None
    spec_fingerprint: str = ""
    topic_ids: Mapping[str, str] = field(default_factory=dict)  # Kafka's id of each topic, as planned


class PartitionPlan(NamedTuple):
    """One partition's range in a plan. A NamedTuple, not a dataclass: a plan holds one per partition of its
    topics, and a tuple is made in a third of a frozen dataclass's time (100,000 of them per plan)."""

    tp: TopicPartition
    start: int
    end: int
    start_source: StartSource
    after_run: str | None = None
    expected_commit: int | None = None

    @property
    def range(self) -> OffsetRange:
        return OffsetRange(self.tp, self.start, self.end)

    @property
    def size(self) -> int:
        """As `OffsetRange.size`: an upper bound on the records."""
        return self.end - self.start if self.end > self.start else 0

    def to_json(self) -> dict:
        return {
            "topic": self.tp.topic, "partition": self.tp.partition, "start": self.start, "end": self.end,
            "startSource": self.start_source.value, "afterRun": self.after_run, "expectedCommit": self.expected_commit,
        }

    @classmethod
    def from_json(cls, d: Mapping) -> "PartitionPlan":
        source = _SOURCES.get(d["startSource"]) or StartSource(d["startSource"])  # (an unknown one raises)
        return cls(TopicPartition(d["topic"], int(d["partition"])), int(d["start"]), int(d["end"]), source,
                   d.get("afterRun"), d.get("expectedCommit"))


_SOURCES = {s.value: s for s in StartSource}  # a dict lookup: StartSource(value) is slow 100,000 times


@dataclass(frozen=True)
class TaskGroup:
    group_id: int
    partitions: tuple[PartitionPlan, ...]
    splits: tuple[OffsetRange, ...]

    @property
    def records(self) -> int:
        return sum(p.size for p in self.partitions)

    @property
    def is_empty(self) -> bool:
        return not self.splits

    def to_json(self) -> dict:
        return {"groupId": self.group_id, "partitions": [p.to_json() for p in self.partitions],
                "splits": [s.to_json() for s in self.splits]}

    @classmethod
    def from_json(cls, d: Mapping) -> "TaskGroup":
        return cls(int(d["groupId"]), tuple(PartitionPlan.from_json(p) for p in d["partitions"]),
                   tuple(OffsetRange.from_json(s) for s in d["splits"]))


@dataclass(frozen=True)
class Plan:
    datasource: str
    run_id: str
    created_at: datetime
    groups: tuple[TaskGroup, ...]
    assignment: str
    end_time: datetime | None = None
    max_records_per_run: int | None = None
    spec_fingerprint: str = ""
    caps: Mapping[str, int] = field(default_factory=dict)  # how many partitions each cap limited
    # 0: as first planned; n: planned again n times (its predecessor never published: `Supervisor.replan`)
    revision: int = 0
    # Kafka's id of each topic when it was planned: its publish stores them with the committed offsets, so a
    # topic deleted and re-created later is noticed (`offsets.check_topic_ids`). Empty: planned before ids were.
    topic_ids: Mapping[str, str] = field(default_factory=dict)

    @cached_property  # asked several times per step (publish, audit, backfill check): sorted once
    def partitions(self) -> tuple[PartitionPlan, ...]:
        return tuple(sorted((p for g in self.groups for p in g.partitions), key=lambda p: p.tp))

    @cached_property
    def records(self) -> int:
        return sum(g.records for g in self.groups)

    @property
    def is_empty(self) -> bool:
        return self.records == 0

    @property
    def is_backfill(self) -> bool:
        """A bounded backfill of a range the main line skipped: it neither continues from nor advances the
        committed offsets, and publishes whole or not at all."""
        parts = self.partitions
        return bool(parts) and all(p.start_source is StartSource.BACKFILL for p in parts)

    def group(self, group_id: int) -> TaskGroup:
        for g in self.groups:
            if g.group_id == group_id:
                return g
        raise KeyError(f"run {self.run_id} has no task group {group_id}")

    def start_offsets(self) -> dict[TopicPartition, int]:
        return {p.tp: p.start for p in self.partitions}

    def end_offsets(self) -> dict[TopicPartition, int]:
        return {p.tp: p.end for p in self.partitions}

    def to_json(self) -> dict:
        """The plan as JSON values (a new top-level dict; its task groups are shared: read them, do not change
        them). Made once per plan: the plan step persists, stages and maybe logs the same plan."""
        return dict(self._json)

    @cached_property
    def _json(self) -> dict:
        out = {
            "datasource": self.datasource, "runId": self.run_id, "createdAt": format_datetime(self.created_at),
            "assignment": self.assignment, "endTime": format_datetime(self.end_time) if self.end_time else None,
            "maxRecordsPerRun": self.max_records_per_run, "specFingerprint": self.spec_fingerprint,
            "caps": dict(self.caps), "groups": [g.to_json() for g in self.groups],
        }
        if self.revision:
            out["revision"] = self.revision
        if self.topic_ids:
            out["topicIds"] = dict(sorted(self.topic_ids.items()))
        return out

    @classmethod
    def from_json(cls, d: Mapping) -> "Plan":
        return cls(
            datasource=d["datasource"], run_id=d["runId"], created_at=parse_datetime(d["createdAt"]),
            groups=tuple(TaskGroup.from_json(g) for g in d["groups"]), assignment=d["assignment"],
            end_time=parse_datetime(d["endTime"]) if d.get("endTime") else None,
            max_records_per_run=d.get("maxRecordsPerRun"), spec_fingerprint=d.get("specFingerprint", ""),
            caps=dict(d.get("caps") or {}), revision=int(d.get("revision", 0)),
            topic_ids=dict(d.get("topicIds") or {}),
        )

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)


# ------------------------------------------------------------------------------------------- pure pieces


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (UTF-16 code units, 32-bit wrap-around), as Druid uses for multi-topic groups."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _java_int(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= 1 << 31 else x


def task_group_id(tp: TopicPartition, task_count: int, multi_topic: bool) -> int:
    """Druid's KafkaSupervisor.getTaskGroupIdForPartition."""
    if not multi_topic:
        return tp.partition % task_count
    h = _java_int(31 * java_string_hash(tp.topic) + tp.partition)
    h = _java_int(abs(h))  # Java's Math.abs(Integer.MIN_VALUE) stays negative
    return int(math.fmod(h, task_count)) % task_count


def cap_by_record_limit(ranges: Mapping[TopicPartition, tuple[int, int]], limit: int) -> dict[TopicPartition, int]:
    """End offsets reading at most `limit` records in all, each partition getting a share of the limit
    proportional to its lag. Leftover records from rounding go to the partitions with the largest remainders."""
    sizes = {tp: max(0, end - start) for tp, (start, end) in ranges.items()}
    total = sum(sizes.values())
    if total <= limit:
        return {tp: end for tp, (_, end) in ranges.items()}
    shares = {tp: limit * size // total for tp, size in sizes.items()}
    leftover = limit - sum(shares.values())
    by_remainder = sorted(sizes, key=lambda tp: (-((limit * sizes[tp]) % total), tp))
    for tp in by_remainder[:leftover]:
        shares[tp] += 1
    return {tp: ranges[tp][0] + shares[tp] for tp in ranges}


def assign_groups(sizes: Mapping[TopicPartition, int], task_count: int, assignment: str,
                  multi_topic: bool) -> dict[int, list[TopicPartition]]:
    groups: dict[int, list[TopicPartition]] = {}
    if assignment == MODULO:
        for tp in sorted(sizes):
            gid = tp.partition % task_count if not multi_topic else task_group_id(tp, task_count, multi_topic)
            group = groups.get(gid)
            if group is None:
                groups[gid] = [tp]
            else:
                group.append(tp)
        return groups
    if assignment != BALANCED:
        raise ValueError(f"unknown assignment {assignment!r}")
    n = min(task_count, len(sizes))
    # the lightest group by (records, partitions, id): a heap of those keys; only the chosen group's key moves
    lightest = [(0, 0, g) for g in range(n)]
    for tp in sorted(sizes, key=lambda t: (-sizes[t], t)):
        load, count, target = lightest[0]
        groups.setdefault(target, []).append(tp)
        heapq.heapreplace(lightest, (load + sizes[tp], count + 1, target))
    return {g: sorted(tps) for g, tps in groups.items()}


def split_ranges(ranges: Sequence[OffsetRange], max_records_per_split: int, min_splits: int = 1) -> list[OffsetRange]:
    """Cut ranges so none holds more than the target size; the target shrinks to give at least `min_splits`."""
    total = sum(r.size for r in ranges)
    if total == 0:
        return []
    target = max_records_per_split
    if min_splits > 1:
        target = max(1, min(target, math.ceil(total / min_splits)))
    out: list[OffsetRange] = []
    for r in ranges:
        if r.size == 0:
            continue
        parts = math.ceil(r.size / target)
        bounds = [r.start + (i * r.size) // parts for i in range(parts)] + [r.end]
        out.extend(OffsetRange(r.tp, a, b) for a, b in zip(bounds, bounds[1:]))
    return out


def _millis(when: datetime | None) -> datetime | None:
    """Plans keep Druid's millisecond precision, so a persisted plan reads back equal."""
    return when.replace(microsecond=when.microsecond // 1000 * 1000) if when is not None else None


def time_cap(req: PlanRequest, tp: TopicPartition) -> int | None:
    """The end-offset cap of a run for the data interval [a, b): the first record stamped at or after b, unless
    that record is stamped in the future (at or after `future_after`). Kafka's offsets_for_times finds the first
    record stamped >= b, so one record stamped 30 days ahead would hide every record after it from this run and
    every later one for 30 days; such a cap says nothing about what had arrived by b, and the run reads up to the
    latest offsets, as one for an interval that ends in the future does."""
    at_end = req.offsets_at_end_time.get(tp) if req.offsets_at_end_time is not None else None
    if at_end is None or req.future_after is None:
        return at_end
    if req.end_time is not None and req.end_time >= req.future_after:
        return None
    return None if at_end == (req.offsets_at_future or {}).get(tp) else at_end


def plan_run(req: PlanRequest) -> Plan:
    # One pass per step over every partition, with each start looked up once: a plan may cover 100,000
    # partitions and should take a fraction of a second (benchmarks/plan_partitions.py).
    tps = sorted(req.starts)
    starts = [req.starts[tp] for tp in tps]
    latest = req.latest
    ends = [latest[tp] for tp in tps]
    caps = {"endTime": 0, "maxRecordsPerRun": 0}
    if req.offsets_at_end_time is not None:
        for i, tp in enumerate(tps):
            at_time = time_cap(req, tp)
            if at_time is not None and at_time < ends[i]:
                ends[i] = at_time
                caps["endTime"] += 1
    ends = [s.offset if s.offset > end else end for s, end in zip(starts, ends)]
    if req.max_records_per_run is not None:
        capped = cap_by_record_limit({tp: (s.offset, end) for tp, s, end in zip(tps, starts, ends)},
                                     req.max_records_per_run)
        new_ends = [capped[tp] for tp in tps]
        caps["maxRecordsPerRun"] = sum(1 for new, end in zip(new_ends, ends) if new < end)
        ends = new_ends
    parts = {tp: PartitionPlan(tp, s.offset, end, s.source, s.after_run, s.expected_commit)
             for tp, s, end in zip(tps, starts, ends)}
    sizes = {tp: (end - s.offset if end > s.offset else 0) for tp, s, end in zip(tps, starts, ends)}
    assigned = assign_groups(sizes, req.task_count, req.assignment, req.multi_topic)
    groups = []
    for gid in sorted(assigned):
        members = tuple(parts[tp] for tp in assigned[gid])
        # an empty range adds no split: only the others are cut
        splits = split_ranges([p.range for p in members if p.end > p.start], req.max_records_per_split,
                              req.min_splits_per_group)
        groups.append(TaskGroup(gid, members, tuple(splits)))
    topics = {tp.topic for tp in tps}
    return Plan(
        datasource=req.datasource, run_id=req.run_id, created_at=_millis(req.created_at), groups=tuple(groups),
        assignment=req.assignment, end_time=_millis(req.end_time), max_records_per_run=req.max_records_per_run,
        spec_fingerprint=req.spec_fingerprint, caps=caps,
        topic_ids={t: i for t, i in req.topic_ids.items() if t in topics},
    )
