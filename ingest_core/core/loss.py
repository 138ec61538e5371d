"""Records lost: offsets the main line moved past without reading them (pure: no broker, no database).

A loss happens when the committed offsets move forward over offsets no publish read: retention or
`delete_records` removed them (an automatic reset, or an operator's reset, set-offsets or reset --to-latest
that accepts it), or an operator skipped them (`ingest skip`, set-offsets forward, reset --to-latest without
a backfill). Each such move writes one `RecordsLost` to the audit log in the transaction that makes it, so the
counter in `status` is exact: the sum of every range's size, per partition.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ingest_core.core.offsets import PublishedRange, TopicPartition


class LossCause(str, enum.Enum):
    """What moved the main line past the records."""

    AUTO_RESET = "resetOffsetAutomatically"  # a run's start below the log start, reset by the spec's setting
    RESET = "reset"  # the first publish after a hard reset started above where the main line stood
    RESET_TO_LATEST = "reset --to-latest"
    SET_OFFSETS = "set-offsets"
    SKIP = "skip"


@dataclass(frozen=True, order=True)
class LostRange:
    """Offsets [start, end) of one partition that nothing read and the main line moved past.

    `records` counts offsets: exact for records removed by retention or `delete_records` and for records
    skipped in an ordinary log (a compacted or transactional topic's gaps count too)."""

    tp: TopicPartition
    start: int
    end: int

    @property
    def records(self) -> int:
        return max(0, self.end - self.start)

    def __str__(self) -> str:
        return f"{self.tp} offsets [{self.start}, {self.end}) ({self.records:,} records)"

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.tp.topic, "partition": self.tp.partition, "start": self.start, "end": self.end,
                "records": self.records}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "LostRange":
        return cls(TopicPartition(d["topic"], int(d["partition"])), int(d["start"]), int(d["end"]))


@dataclass(frozen=True)
class RecordsLost:
    """One move of the main line that lost records: why, which ranges, and the run or operator behind it."""

    cause: LossCause
    ranges: tuple[LostRange, ...]
    run_id: str | None = None  # the publishing run (automatic reset, first start after a reset)

    @property
    def records(self) -> int:
        return sum(r.records for r in self.ranges)

    def describe(self) -> str:
        by = f" (run {self.run_id})" if self.run_id else ""
        return (f"{self.records:,} records lost by {self.cause.value}{by}: "
                + "; ".join(str(r) for r in self.ranges))

    def to_json(self) -> dict[str, Any]:
        return {"cause": self.cause.value, "records": self.records, "runId": self.run_id,
                "ranges": [r.to_json() for r in self.ranges]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "RecordsLost":
        return cls(LossCause(d["cause"]), tuple(LostRange.from_json(r) for r in d.get("ranges", ())), d.get("runId"))


def subtract(tp: TopicPartition, start: int, end: int, read: Iterable[tuple[int, int]]) -> list[LostRange]:
    """[start, end) of `tp` without the [a, b) ranges of `read` (offsets some publish made visible)."""
    out, at = [], start
    for a, b in sorted(read):
        if b <= at or a >= end:
            continue
        if a > at:
            out.append(LostRange(tp, at, a))
        at = max(at, b)
    if at < end:
        out.append(LostRange(tp, at, end))
    return out


def read_by_partition(claims: Iterable[PublishedRange]) -> dict[TopicPartition, list[tuple[int, int]]]:
    """The claimed (published) ranges per partition: offsets a move jumps over without losing them."""
    out: dict[TopicPartition, list[tuple[int, int]]] = {}
    for c in claims:
        out.setdefault(c.tp, []).append((c.start, c.end))
    return out


def moved_past(before: Mapping[TopicPartition, int], after: Mapping[TopicPartition, int],
               read: Mapping[TopicPartition, Iterable[tuple[int, int]]] | None = None,
               log_end: Mapping[TopicPartition, int] | None = None) -> list[LostRange]:
    """The offsets a move of the main line from `before` to `after` skips, per partition that moves forward:
    [before, after) less what was published (`read`: claimed ranges, a backfill's range). A partition without
    a `before` (nothing committed) has no position to lose from. `log_end`: the broker's log end offsets; only
    records that existed are lost, so nothing at or past a partition's log end counts, nor any of a partition
    the broker does not have."""
    read = read or {}
    out: list[LostRange] = []
    for tp in sorted(after):
        end = after[tp] if log_end is None else min(after[tp], log_end.get(tp, -1))
        if tp in before and end > before[tp]:
            out += subtract(tp, before[tp], end, read.get(tp, ()))
    return out


def lost_per_partition(events: Iterable[RecordsLost]) -> dict[TopicPartition, int]:
    out: dict[TopicPartition, int] = {}
    for event in events:
        for r in event.ranges:
            out[r.tp] = out.get(r.tp, 0) + r.records
    return out
