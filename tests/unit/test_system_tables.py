"""The sys tables' row builders (`query.system_tables`), pure: generated segment sets and runs in, Druid's rows out."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from ingest_core.core.states import GroupStatus, RunStatus
from ingest_core.query.system_tables import segment_rows, task_rows
from ingest_core.store.records import GroupOutline, RunOutline, SegmentRecord

T0 = datetime(2026, 11, 22, tzinfo=timezone.utc)


@st.composite
def segment_sets(draw) -> list[SegmentRecord]:
    """Segments of one datasource over a few hours: intervals of 1 or 2 hours, a few versions, used or not."""
    out = []
    for i in range(draw(st.integers(0, 12))):
        start = draw(st.integers(0, 4))
        hours = draw(st.sampled_from([1, 2]))
        version = f"2026-11-2{draw(st.integers(0, 3))}T00:00:00.000Z"
        out.append(SegmentRecord(
            id=f"s{i}", datasource="wiki", interval_start=T0 + timedelta(hours=start),
            interval_end=T0 + timedelta(hours=start + hours), version=version, partition_num=i, location=f"/s{i}",
            num_rows=draw(st.integers(0, 100)), size_bytes=draw(st.integers(0, 10_000)), used=draw(st.booleans()),
            run_id="r", group_id=0, start_offsets={}, end_offsets={}, created_at=T0,
            payload=draw(st.sampled_from([{}, {"dimensions": ["page"], "metrics": ["added"]},
                                          {"compactedFrom": ["x"]}]))))
    return out


@settings(max_examples=300, deadline=None)
@given(segment_sets())
def test_sys_segments_lists_the_used_segments_and_marks_the_fully_covered_ones_overshadowed(segments):
    rows = {r["segment_id"]: r for r in segment_rows(segments)}
    assert set(rows) == {s.id for s in segments if s.used}  # Druid's sys.segments: published means used
    for s in segments:
        if not s.used:
            continue
        row = rows[s.id]
        covered = any(o.used and o.version > s.version and o.interval_start <= s.interval_start
                      and s.interval_end <= o.interval_end for o in segments)
        assert row["is_overshadowed"] == int(covered)
        assert row["is_active"] == row["is_available"] == row["num_replicas"] == row["replication_factor"] == (
            1 - row["is_overshadowed"])
        assert (row["is_published"], row["is_realtime"]) == (1, 0)
        assert (row["num_rows"], row["size"], row["partition_num"]) == (s.num_rows, s.size_bytes, s.partition_num)
        assert (row["dimensions"] is None) == ("dimensions" not in s.payload)
        assert (row["last_compaction_state"] is None) == ("compactedFrom" not in s.payload)


def run(status: RunStatus, *groups: GroupStatus, error: str | None = None) -> RunOutline:
    return RunOutline("wiki", f"run-{status.value}", status, T0, T0 + timedelta(seconds=9),
                      T0 + timedelta(seconds=1), T0 + timedelta(seconds=5) if status is RunStatus.PUBLISHED else None,
                      None, error, tuple(GroupOutline(i, g, 10, T0 + timedelta(seconds=3))
                                         for i, g in enumerate(groups)))


def test_sys_tasks_are_runs_and_their_task_groups_in_druids_statuses():
    rows = task_rows([
        run(RunStatus.PUBLISHED, GroupStatus.PUBLISHED, GroupStatus.EMPTY),
        run(RunStatus.RUNNING, GroupStatus.PENDING, GroupStatus.PUBLISHED),
        run(RunStatus.PLANNED, GroupStatus.PENDING),
        run(RunStatus.EXPIRED, GroupStatus.PENDING, error="past its deadline")])
    got = [(r["task_id"], r["group_id"], r["type"], r["status"], r["runner_status"], r["duration"], r["error_msg"])
           for r in rows]
    assert got == [
        ("run-PUBLISHED", "run-PUBLISHED", "ingest_run", "SUCCESS", "NONE", 4000, None),
        ("run-PUBLISHED/group=0", "run-PUBLISHED", "index_kafka", "SUCCESS", "NONE", 2000, None),  # EMPTY: no task
        ("run-RUNNING", "run-RUNNING", "ingest_run", "RUNNING", "RUNNING", -1, None),
        ("run-RUNNING/group=0", "run-RUNNING", "index_kafka", "RUNNING", "RUNNING", -1, None),
        ("run-RUNNING/group=1", "run-RUNNING", "index_kafka", "SUCCESS", "NONE", 2000, None),
        ("run-PLANNED", "run-PLANNED", "ingest_run", "RUNNING", "PENDING", -1, None),
        ("run-PLANNED/group=0", "run-PLANNED", "index_kafka", "RUNNING", "PENDING", -1, None),
        ("run-EXPIRED", "run-EXPIRED", "ingest_run", "FAILED", "NONE", 8000, "past its deadline"),
        ("run-EXPIRED/group=0", "run-EXPIRED", "index_kafka", "FAILED", "NONE", 8000, "past its deadline")]
    assert {(r["created_time"], r["location"], r["host"], r["plaintext_port"], r["tls_port"]) for r in rows} == {
        ("2026-11-22T00:00:00.000Z", None, None, -1, -1)}
