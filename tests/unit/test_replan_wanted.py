"""Which plans can ever be planned again (`supervisor.replan.may_be_planned_again`): the plan task skips the
replan step and its jobs for the others, so the rule must never skip a run that `Supervisor.replan` could still
plan again, whatever becomes of the runs it continues from."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from hypothesis import given, settings, strategies as st

from ingest_core.core.offsets import StartOffset, StartSource, TopicPartition
from ingest_core.core.planner import PlanRequest, plan_run
from ingest_core.core.states import RunStatus
from ingest_core.supervisor.planning import restart_points
from ingest_core.supervisor.replan import may_be_planned_again

T0 = datetime(2026, 11, 28, tzinfo=timezone.utc)
RUNS = ["r0", "r1", "r2"]  # earlier runs; each partition of the plan continues from one of them, or from none
# what a run's status may still become: published and the dead ones are final, a failed run may be retried
NEXT = {RunStatus.PLANNED: set(RunStatus), RunStatus.RUNNING: set(RunStatus) - {RunStatus.PLANNED},
        RunStatus.FAILED: {RunStatus.FAILED, RunStatus.PUBLISHED, RunStatus.SUPERSEDED},
        RunStatus.PUBLISHED: {RunStatus.PUBLISHED}, RunStatus.SUPERSEDED: {RunStatus.SUPERSEDED},
        RunStatus.EXPIRED: {RunStatus.EXPIRED}}


@dataclass
class Run:
    """The part of a RunRecord that `restart_points` reads."""

    run_id: str
    status: RunStatus
    plan: object


def plan_of(run_id: str, starts: dict[TopicPartition, tuple[int, str | None]]):
    return plan_run(PlanRequest(
        datasource="wiki", run_id=run_id, created_at=T0, task_count=2, latest={tp: o + 10 for tp, (o, _) in
                                                                                 starts.items()},
        starts={tp: StartOffset(o, StartSource.INFLIGHT if a else StartSource.COMMITTED, a, o if a else None)
                for tp, (o, a) in starts.items()}))


@given(after=st.lists(st.sampled_from([None, *RUNS]), min_size=1, max_size=4),
       now=st.lists(st.sampled_from(list(RunStatus)), min_size=3, max_size=3),
       missing=st.sets(st.sampled_from(RUNS)), data=st.data())
@settings(max_examples=200, deadline=None)
def test_a_plan_the_rule_skips_is_never_planned_again_whatever_its_predecessors_become(after, now, missing, data):
    tps = [TopicPartition("edits", p) for p in range(len(after))]
    # each earlier run read every partition from 0 to 10; the plan continues from their ends
    earlier = {rid: Run(rid, status, plan_of(rid, {tp: (0, None) for tp in tps}))
               for rid, status in zip(RUNS, now) if rid not in missing}
    plan = plan_of("r9", {tp: (10, a) for tp, a in zip(tps, after)})
    skipped = not may_be_planned_again(plan, earlier.get)
    later = {rid: Run(rid, data.draw(st.sampled_from(sorted(NEXT[r.status]))), r.plan) for rid, r in earlier.items()}
    _, gone = restart_points(plan, later.get)
    waits = any(p.after_run in later and later[p.after_run].status.in_flight for p in plan.partitions)
    if skipped:  # nothing the replan step waits for, and nothing it could restart from, ever
        assert not gone and not waits
    else:  # some partition continues from a run that has not published
        assert any(p.after_run in earlier and earlier[p.after_run].status is not RunStatus.PUBLISHED
                   for p in plan.partitions)
