"""A datasource's recent runs as figures, oldest first: what the UI's charts draw (`provider/plugins/charts.py`).

`run_points` is pure (runs -> points); `collect_run_history` does the reading: one query for the runs. Everything
comes from `ingest_runs`: the plan, and the figures each publish recorded (`RunRecord.published`), which
compaction and kill never change (counting the segments that still exist would read as data loss).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ingest_core.core.states import RunStatus

from ingest_core.store.metadata import MetadataStore

from ingest_core.store.records import RunRecord
from ingest_core.store.records import PublishedFigures

RUNS_CHARTED = 10  # the runs the status report lists (`collect_status`'s runs_limit): the table under the charts


@dataclass(frozen=True)
class RunPoint:
    """One run's figures. `lag`: records from the run's start offsets to the ends it planned, i.e. the lag at
    planning when the run read up to the latest offsets (the plan keeps no latest offsets); when endTime or
    maxRecordsPerRun capped the run (`lag_capped`) the lag then was larger. None for a backfill: its range
    lies behind the main line, it is not lag. `records`: Kafka offsets planned (an estimate of records:
    compaction and transaction markers leave gaps). `rows`, `segments`, `bytes`: what the run published, as
    its publish recorded them (rows after rollup; 0 when it published nothing). `duration_s`: planning to
    publish; None until it published."""

    run_id: str
    status: RunStatus
    planned_at: datetime
    lag: int | None
    lag_capped: bool
    records: int
    rows: int
    segments: int
    duration_s: float | None
    bytes: int = 0


def run_points(runs: Sequence[RunRecord]) -> list[RunPoint]:
    """`runs` in any order. Oldest (first planned) first."""
    out = []
    for run in sorted(runs, key=lambda r: r.seq):
        figures = run.published or PublishedFigures(0, 0, 0, 0)
        done = run.published_at if run.status is RunStatus.PUBLISHED else None
        out.append(RunPoint(
            run.run_id, run.status, run.created_at, None if run.plan.is_backfill else run.plan.records,
            any(run.plan.caps.values()), run.plan.records, figures.rows, figures.segments,
            max(0.0, (done - run.created_at).total_seconds()) if done else None, figures.bytes))
    return out


def collect_run_history(store: MetadataStore, name: str, limit: int = RUNS_CHARTED) -> list[RunPoint]:
    return run_points(store.runs.recent(name, limit=limit))
