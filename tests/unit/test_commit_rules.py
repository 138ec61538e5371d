"""The exactly-once rules of a publish (`core.commit_rules`) without a database: each rule's refusal, and, with
Hypothesis, any interleaving of produce / plan / publish / fail over a few partitions keeps every record
published at most once and the main line without holes."""

from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest_core.core.commit_rules import (
    CompactionConflictError,
    CompactionProposal,
    LineState,
    Predecessor,
    Proposal,
    VisibleSegment,
    decide,
    decide_compaction,
)
from ingest_core.core.errors import (
    IngestError,
    NothingSucceededError,
    PredecessorGoneError,
    PublishPendingError,
    StaleRunError,
)
from ingest_core.core.offsets import (
    KnownOffset,
    OffsetRange,
    PublishedRange,
    StartOffset,
    StartSource,
    TopicPartition,
)
from ingest_core.core.planner import PlanRequest, plan_run

NOW = datetime(2026, 11, 26, 12, tzinfo=timezone.utc)
TPS = [TopicPartition("t", p) for p in range(3)]


def plan(run_id, starts, latest, task_count=3):
    return plan_run(PlanRequest(datasource="ds", run_id=run_id, created_at=NOW, starts=starts, latest=latest,
                                task_count=task_count))


def after(run_id, offset):
    return StartOffset(offset, StartSource.COMMITTED, run_id, offset)


def state(committed=None, claims=(), predecessors=None):
    return LineState("ds", committed or {}, list(claims), predecessors or {})


def test_a_run_that_starts_where_the_committed_offsets_end_publishes_its_groups_and_claims_their_ranges():
    p = plan("r2", {TPS[0]: after("r1", 5), TPS[1]: after("r1", 7)}, {TPS[0]: 9, TPS[1]: 7})
    d = decide(Proposal(p, frozenset({0})), state({TPS[0]: KnownOffset(5, "r1"), TPS[1]: KnownOffset(7, "r1")}))
    # group 1 read nothing (7..7): it publishes without a job; its offsets advance too
    assert [g.group_id for g in d.publishing] == [0, 1] and d.failed == ()
    assert d.ranges == (OffsetRange(TPS[0], 5, 9), OffsetRange(TPS[1], 7, 7))
    assert d.new_offsets == {TPS[0]: 9, TPS[1]: 7}


def test_each_rule_refuses_with_its_own_error():
    p = plan("r2", {TPS[0]: after("r1", 5), TPS[1]: after("r1", 7)}, {TPS[0]: 9, TPS[1]: 8}, task_count=2)
    line = state({TPS[0]: KnownOffset(5, "r1"), TPS[1]: KnownOffset(7, "r1")})
    with pytest.raises(ValueError, match="no task groups"):
        decide(Proposal(p, frozenset({7})), line)
    with pytest.raises(NothingSucceededError, match="every task group with records failed"):
        decide(Proposal(p, frozenset()), line)
    with pytest.raises(StaleRunError, match="run r9 committed offset 6") as stale:
        decide(Proposal(p, frozenset({0, 1})), state({TPS[0]: KnownOffset(6, "r9"), TPS[1]: KnownOffset(7, "r1")}))
    assert stale.value.superseded_by == "r9"
    with pytest.raises(StaleRunError, match=r"already published by backfill run b1.*ingested twice"):
        decide(Proposal(p, frozenset({0, 1})), state(line.committed, [PublishedRange(TPS[0], 8, 20, "b1", True)]))
    # a run planned from an in-flight run's end waits for it, or plans again if it will never publish
    piped = plan("r3", {TPS[0]: after("r2", 9)}, {TPS[0]: 12})
    with pytest.raises(PublishPendingError, match="has not published yet"):
        decide(Proposal(piped, frozenset({0})), line.__class__("ds", line.committed, [],
                                                              {"r2": Predecessor("r2", "RUNNING", True, False)}))
    with pytest.raises(PredecessorGoneError, match="will never publish"):
        decide(Proposal(piped, frozenset({0})), line.__class__("ds", line.committed, [],
                                                              {"r2": Predecessor("r2", "SUPERSEDED", False, False)}))
    backfill = plan("b2", {TPS[0]: StartOffset(2, StartSource.BACKFILL), TPS[1]: StartOffset(1, StartSource.BACKFILL)},
                    {TPS[0]: 4, TPS[1]: 3}, task_count=2)
    with pytest.raises(IngestError, match="a backfill publishes whole"):
        decide(Proposal(backfill, frozenset({0})), line)
    # a backfill does not swap on the main line's offsets: behind it, it publishes whole
    assert decide(Proposal(backfill, frozenset({0, 1})), line).new_offsets == {}


# ---------------------------------------------------------------------------------------------- the model

class Model:
    """The store, as far as the rules see it: committed offsets, claimed ranges, runs and their statuses, and
    what an operator skipped (reset to latest) and backfilled."""

    def __init__(self) -> None:
        self.log_end = {tp: 0 for tp in TPS}
        self.committed: dict[TopicPartition, KnownOffset] = {}
        self.claims: list[PublishedRange] = []
        self.runs: dict[str, tuple] = {}  # id -> (plan, status)
        self.first_start: dict[TopicPartition, int] = {}
        self.skipped: dict[TopicPartition, set[int]] = {tp: set() for tp in TPS}  # not read, counted as lost

    def in_flight(self) -> dict[TopicPartition, KnownOffset]:
        """The planned ends of runs not yet published (the planner's pipelining source), latest run last."""
        out = {}
        for run_id, (p, status) in self.runs.items():
            if status == "PLANNED":
                out.update({part.tp: KnownOffset(part.end, run_id) for part in p.partitions})
        return out

    def plan(self, pipelined: bool, task_count: int) -> None:
        run_id = f"r{len(self.runs)}"
        source = {**self.committed, **(self.in_flight() if pipelined else {})}
        starts = {tp: after(source[tp].run_id, source[tp].offset) if tp in source
                  else StartOffset(0, StartSource.EARLIEST) for tp in TPS}
        latest = {tp: max(self.log_end[tp], starts[tp].offset) for tp in TPS}
        self.runs[run_id] = (plan(run_id, starts, latest, task_count), "PLANNED")

    def backfill(self, tp: TopicPartition, start: int, size: int) -> None:
        """An operator's backfill of [start, start + size) behind the main line (it may overlap published data)."""
        end = min(start + size, self.committed[tp].offset) if tp in self.committed else 0
        if tp in self.committed and start < end:
            run_id = f"r{len(self.runs)}"
            p = plan(run_id, {tp: StartOffset(start, StartSource.BACKFILL)}, {tp: end}, 1)
            self.runs[run_id] = (p, "FAILED")  # planned apart; `publish` picks it up
            self._publish(run_id, frozenset({0}))

    def skip(self, tp: TopicPartition, count: int) -> None:
        """`reset --to-latest`: the main line moves past `count` records unread; runs in flight are superseded."""
        if tp in self.committed:
            old = self.committed[tp].offset
            self.committed[tp] = KnownOffset(old + count, "reset")
            self.log_end[tp] = max(self.log_end[tp], old + count)
            self.skipped[tp] |= set(range(old, old + count))
            for run_id, (p, status) in self.runs.items():
                if status in ("PLANNED", "FAILED"):
                    self.runs[run_id] = (p, "SUPERSEDED")

    def fail_latest(self) -> None:
        planned = [rid for rid, (_, s) in self.runs.items() if s == "PLANNED"]
        if planned:
            self.runs[planned[-1]] = (self.runs[planned[-1]][0], "FAILED")

    def publish(self, index: int, succeeded: frozenset[int]) -> None:
        if self.runs:
            self._publish(sorted(self.runs)[index % len(self.runs)], succeeded)

    def _publish(self, run_id: str, succeeded: frozenset[int]) -> None:
        p, status = self.runs[run_id]
        if status not in ("PLANNED", "FAILED"):
            return
        predecessors = {rid: Predecessor(rid, s, s == "PLANNED", s == "PUBLISHED")
                        for rid, (_, s) in self.runs.items()}
        try:
            d = decide(Proposal(p, succeeded & {g.group_id for g in p.groups}),
                       LineState("ds", dict(self.committed), list(self.claims), predecessors))
        except PublishPendingError:
            return
        except (StaleRunError, PredecessorGoneError):
            self.runs[run_id] = (p, "SUPERSEDED")
            return
        except (NothingSucceededError, IngestError):
            self.runs[run_id] = (p, "FAILED")
            return
        for r in d.ranges:
            if r.size:
                self.claims.append(PublishedRange(r.tp, r.start, r.end, run_id, p.is_backfill))
                self.skipped[r.tp] -= set(range(r.start, r.end))
        for part in d.proposal.parts:
            self.first_start.setdefault(part.tp, part.start)
        self.committed.update({tp: KnownOffset(end, run_id) for tp, end in d.new_offsets.items()})
        self.runs[run_id] = (p, "PUBLISHED")

    def check(self) -> None:
        for tp in TPS:
            published: list[int] = [o for c in self.claims if c.tp == tp for o in range(c.start, c.end)]
            assert len(published) == len(set(published)), f"{tp}: offsets published twice: {self.claims}"
            if tp in self.committed:  # below the committed offset every record was published or skipped: no hole
                assert set(published) | self.skipped[tp] == set(range(self.first_start[tp], self.committed[tp].offset)), (
                    tp, sorted(published), sorted(self.skipped[tp]), self.committed[tp])


ACTIONS = st.lists(st.one_of(
    st.tuples(st.just("produce"), st.integers(0, 2), st.integers(1, 5)),
    st.tuples(st.just("plan"), st.booleans(), st.integers(1, 3)),
    st.tuples(st.just("publish"), st.integers(0, 5), st.frozensets(st.integers(0, 2))),
    st.tuples(st.just("fail")),
    st.tuples(st.just("skip"), st.integers(0, 2), st.integers(1, 4)),
    st.tuples(st.just("backfill"), st.integers(0, 2), st.integers(0, 12), st.integers(1, 6)),
), max_size=30)


@settings(max_examples=300)  # enough to find each rule's counterexample when that rule is left out
@given(ACTIONS)
def test_any_interleaving_publishes_every_record_at_most_once_and_leaves_no_hole(actions):
    model = Model()
    for kind, *args in actions:
        if kind == "produce":
            model.log_end[TPS[args[0]]] += args[1]
        elif kind == "plan":
            model.plan(*args)
        elif kind == "publish":
            model.publish(*args)
        elif kind == "fail":  # a run's jobs fail: it may be retried, and still publish
            model.fail_latest()
        elif kind == "skip":
            model.skip(TPS[args[0]], args[1])
        else:
            model.backfill(TPS[args[0]], args[1], args[2])
        model.check()


# ---------------------------------------------------------------------------------------------- compaction


def compaction(expected, locations=("c/0",), task="compact_1"):
    return CompactionProposal(task, f"compaction {task} of 'ds' interval I", frozenset(expected), frozenset(locations))


def test_a_compaction_publishes_only_onto_the_visible_set_it_read():
    read = [VisibleSegment("s1", "r1", "a/0"), VisibleSegment("s2", "r2", "b/0")]
    assert decide_compaction(compaction({"s1", "s2"}), read) is True
    appended = [*read, VisibleSegment("s3", "r3", "c/9")]
    with pytest.raises(CompactionConflictError, match=r"compaction compact_1 of 'ds' interval I was not published: "
                                                      r"the interval changed after it was read \(1 segments "
                                                      r"published since, e\.g\. \['s3'\]; 0 no longer visible\)"):
        decide_compaction(compaction({"s1", "s2"}), appended)
    # its own rewrite visible already (a retry whose commit went through): nothing to do
    mine = [VisibleSegment("n0", "compact_1", "c/0")]
    assert decide_compaction(compaction({"s1", "s2"}), mine) is False


@settings(max_examples=200, deadline=None)
@given(st.sets(st.sampled_from([f"s{i}" for i in range(6)])), st.sets(st.sampled_from([f"s{i}" for i in range(6)])))
def test_a_compaction_is_refused_whenever_the_visible_set_differs(expected, visible_ids):
    visible = [VisibleSegment(i, "r", f"loc/{i}") for i in sorted(visible_ids)]
    if expected == visible_ids:
        assert decide_compaction(compaction(expected), visible) is True
    else:
        with pytest.raises(CompactionConflictError, match="Nothing was written"):
            decide_compaction(compaction(expected), visible)
