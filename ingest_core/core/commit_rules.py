"""The exactly-once rules of a publish, pure: what the metadata store holds now and what a run proposes to commit
go in; the decision (which task groups publish, which ranges they claim) or the typed error of the rule it broke
comes out. `store.publisher` reads the state inside its transaction, asks `decide`, and applies the decision.

As pyiceberg states a commit's preconditions (`AssertRefSnapshotId.validate(base)`), each rule here is a small
value with `validate(state)`, checked in order; the first that fails refuses the whole commit:

  1. `GroupsKnown`         the results name only task groups of the plan
  2. `SomethingSucceeded`  a run whose every group with records failed publishes nothing
  3. `BackfillWhole`       a backfill (behind the main line) publishes whole or not at all
  4. `PublishesInOrder`    a run planned from the end of one still in flight publishes after it (Druid's ordered
                           publishes); if that one will never publish, this one plans again
  5. `StartsWhereCommitted` the compare-and-swap: each partition starts where the committed offsets end (or, on
                           a first start, nothing was committed since it was planned)
  6. `NothingClaimedTwice` no offset it publishes was published before (a backfill has no committed offset to
                           swap on, and an operator may move the main line back into a published range)

Rules 4 and 5 are the main line's, checked partition by partition (`ContinuesTheMainLine`); a backfill skips
them. A compaction's publish has one rule of its own (`decide_compaction`, `VisibleSetUnchanged`): the
interval's visible segments are exactly those it read. Whether the run may publish at all (superseded,
expired, already published) is the run's lifecycle, decided by the store before it asks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence

from ingest_core.core.errors import (
    IngestError,
    NothingSucceededError,
    PredecessorGoneError,
    PublishPendingError,
    StaleRunError,
)
from ingest_core.core.offsets import KnownOffset, OffsetRange, PublishedRange, TopicPartition, find_overlap
from ingest_core.core.planner import PartitionPlan, Plan, TaskGroup


@dataclass(frozen=True)
class Predecessor:
    """A run another run was planned to continue from, as the store holds it now."""

    run_id: str
    status: str  # RunStatus' value
    in_flight: bool  # PLANNED or RUNNING: it may still publish
    published: bool
    error: str | None = None


@dataclass(frozen=True)
class LineState:
    """The datasource's state the commit is checked against, read inside the publish transaction."""

    datasource: str
    committed: Mapping[TopicPartition, KnownOffset]
    claims: Sequence[PublishedRange]
    predecessors: Mapping[str, Predecessor] = field(default_factory=dict)  # by run id: the plan's `after_run`s


@dataclass(frozen=True)
class Proposal:
    """What a run asks to commit: its plan and the task groups whose jobs succeeded."""

    plan: Plan
    succeeded: frozenset[int]

    @property
    def run_id(self) -> str:
        return self.plan.run_id

    @property
    def publishing(self) -> tuple[TaskGroup, ...]:
        """Groups that succeeded, and empty groups (they read nothing, so they succeed without a job)."""
        return tuple(g for g in self.plan.groups if g.group_id in self.succeeded or g.is_empty)

    @property
    def failed(self) -> tuple[TaskGroup, ...]:
        return tuple(g for g in self.plan.groups if g.group_id not in self.succeeded and not g.is_empty)

    @property
    def parts(self) -> tuple[PartitionPlan, ...]:
        return tuple(p for g in self.publishing for p in g.partitions)


@dataclass(frozen=True)
class Decision:
    """A commit every rule allows: the groups to publish and mark failed, and the ranges it claims."""

    proposal: Proposal
    publishing: tuple[TaskGroup, ...]
    failed: tuple[TaskGroup, ...]
    ranges: tuple[OffsetRange, ...]

    @property
    def new_offsets(self) -> dict[TopicPartition, int]:
        """The main line's offsets after the commit (a backfill's ends are not the main line's)."""
        return {} if self.proposal.plan.is_backfill else {p.tp: p.end for p in self.proposal.parts}


class Rule(Protocol):
    def validate(self, proposal: Proposal, state: LineState) -> None:
        """Raise the rule's typed error when `proposal` may not commit onto `state`."""


@dataclass(frozen=True)
class GroupsKnown:
    def validate(self, proposal: Proposal, state: LineState) -> None:
        unknown = proposal.succeeded - {g.group_id for g in proposal.plan.groups}
        if unknown:
            raise ValueError(f"run {proposal.run_id} has no task groups {sorted(unknown)}")


@dataclass(frozen=True)
class SomethingSucceeded:
    def validate(self, proposal: Proposal, state: LineState) -> None:
        failed = proposal.failed
        if failed and not any(g.group_id in proposal.succeeded for g in proposal.publishing):
            # only its empty groups "succeeded": publishing them would mark a run that ingested nothing PUBLISHED
            raise NothingSucceededError(
                f"run {proposal.run_id} of {state.datasource!r} was not published: every task group with records "
                f"failed ({[g.group_id for g in failed]}); nothing was written and the committed offsets stay. "
                f"`ingest status {state.datasource}` shows why (recentErrors); the next run reads the same offsets "
                "again.")


@dataclass(frozen=True)
class BackfillWhole:
    def validate(self, proposal: Proposal, state: LineState) -> None:
        if proposal.plan.is_backfill and proposal.failed:
            # its range lies behind the main line: a part left out would never be read again
            raise IngestError(
                f"backfill run {proposal.run_id} of {state.datasource!r}: task groups "
                f"{[g.group_id for g in proposal.failed]} failed; a backfill publishes whole, so nothing was "
                "published. Re-run it (clear the run in Airflow).")


@dataclass(frozen=True)
class PublishesInOrder:
    def check(self, p: PartitionPlan, proposal: Proposal, state: LineState) -> None:
        current = state.committed.get(p.tp)
        if p.after_run is None or (current.offset if current else None) == p.expected_commit:
            return
        before = state.predecessors.get(p.after_run)
        if before is not None and before.in_flight:
            raise PublishPendingError(
                f"run {proposal.run_id} of {state.datasource!r} continues from run {p.after_run} (partition "
                f"{p.tp} from offset {p.start}), which has not published yet ({before.status}): it publishes "
                "after it", run_id=proposal.run_id, waiting_for=p.after_run)
        if before is not None and not before.published and (current is None or current.offset < p.start):
            # nobody committed its predecessor's range: this run is not stale, it must read from further back
            raise PredecessorGoneError(
                f"run {proposal.run_id} of {state.datasource!r} continues from run {p.after_run} (partition "
                f"{p.tp} from offset {p.start}), which will never publish ({before.status}: "
                f"{before.error or 'no reason kept'}); its range was never committed, so this run's commit is "
                "refused and it plans again from the committed offsets",
                run_id=proposal.run_id, predecessor=p.after_run)


@dataclass(frozen=True)
class StartsWhereCommitted:
    def check(self, p: PartitionPlan, proposal: Proposal, state: LineState) -> None:
        current = state.committed.get(p.tp)
        if (current.offset if current else None) != p.expected_commit:
            if current is None:
                why = (f"it continues from run {p.after_run}, which never committed this partition"
                       if p.after_run else "the committed offsets were cleared after it was planned")
                superseded_by = p.after_run
            else:
                why = (f"run {current.run_id} committed offset {current.offset}, but this run was planned to "
                       f"continue from {p.expected_commit if p.expected_commit is not None else 'a first start'}")
                superseded_by = current.run_id
            raise StaleRunError(
                f"run {proposal.run_id} of {state.datasource!r} is stale and was not published: partition {p.tp} "
                f"was planned to start at offset {p.start}, but {why}. Nothing was written; plan a new run to "
                "ingest from the committed offsets.", run_id=proposal.run_id, superseded_by=superseded_by)


@dataclass(frozen=True)
class ContinuesTheMainLine:
    """The main line's rules, partition by partition in the plan's order (a backfill lies behind the main line:
    it has none of them)."""

    checks: tuple[PublishesInOrder | StartsWhereCommitted, ...] = (PublishesInOrder(), StartsWhereCommitted())

    def validate(self, proposal: Proposal, state: LineState) -> None:
        if proposal.plan.is_backfill:
            return
        for p in proposal.parts:
            for check in self.checks:
                check.check(p, proposal, state)


@dataclass(frozen=True)
class NothingClaimedTwice:
    def validate(self, proposal: Proposal, state: LineState) -> None:
        overlap = find_overlap([p.range for p in proposal.parts], state.claims)
        if overlap is None:
            return
        r, claim = overlap
        holder = (f"backfill run {claim.run_id}" if claim.backfill
                  else f"the main line (its latest run there: {claim.run_id})")
        where = f"{state.datasource} {r.tp.topic}:{r.tp.partition}"
        fix = "" if proposal.plan.is_backfill else (
            f" To go on after them: `ingest set-offsets {where}={claim.end}`; to ingest them again: "
            f"`ingest set-offsets {where}={r.start}` (which releases them).")
        raise StaleRunError(
            f"run {proposal.run_id} of {state.datasource!r} was not published: partition {r.tp} offsets "
            f"[{r.start}, {r.end}) overlap offsets [{claim.start}, {claim.end}) already published by {holder}; "
            f"they would be ingested twice. Nothing was written.{fix}",
            run_id=proposal.run_id, superseded_by=claim.run_id)


RULES: tuple[Rule, ...] = (GroupsKnown(), SomethingSucceeded(), BackfillWhole(), ContinuesTheMainLine(),
                           NothingClaimedTwice())


def decide(proposal: Proposal, state: LineState, rules: Sequence[Rule] = RULES) -> Decision:
    """The commit `proposal` may make onto `state`, or the typed error of the first rule it breaks."""
    for rule in rules:
        rule.validate(proposal, state)
    return Decision(proposal, proposal.publishing, proposal.failed, tuple(p.range for p in proposal.parts))


# ---------------------------------------------------------------------------------------------- compaction


class CompactionConflictError(IngestError):
    """The interval changed after the compaction read it: nothing was written."""

    code = "INGEST_COMPACTION_CONFLICT"


@dataclass(frozen=True)
class VisibleSegment:
    """A segment visible in the interval now, as the compaction's rule needs it."""

    id: str
    run_id: str  # the run, or the compaction task, that published it
    location: str


@dataclass(frozen=True)
class CompactionProposal:
    """What a compaction asks to commit: the segments it read (their ids) and what it wrote in their place."""

    task_id: str
    what: str  # "compaction <task> of '<datasource>' interval <start>/<end>", for the messages
    expected: frozenset[str]
    locations: frozenset[str]


@dataclass(frozen=True)
class VisibleSetUnchanged:
    """The compare-and-swap of a compaction: the interval's visible segments are exactly those it read. An
    append published meanwhile refuses it, so the append is never lost; the next compaction reads it too."""

    def validate(self, proposal: CompactionProposal, visible: Sequence[VisibleSegment]) -> None:
        found = {s.id for s in visible}
        if found != proposal.expected:
            appended = sorted(found - proposal.expected)
            raise CompactionConflictError(
                f"{proposal.what} was not published: the interval changed after it was read ({len(appended)} "
                f"segments published since, e.g. {appended[:3]}; {len(proposal.expected - found)} no longer "
                "visible). Nothing was written; the next compaction run reads the interval again.")


def decide_compaction(proposal: CompactionProposal, visible: Sequence[VisibleSegment]) -> bool:
    """True: publish the rewrite; False: it is visible already (a retry whose commit went through), nothing to
    do; `CompactionConflictError` when the interval changed since it was read."""
    mine = {s.location for s in visible if s.run_id == proposal.task_id}
    if mine and mine == set(proposal.locations):
        return False
    VisibleSetUnchanged().validate(proposal, visible)
    return True
