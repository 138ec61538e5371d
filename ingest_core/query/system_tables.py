"""Druid's `sys` schema: `sys.segments`, `sys.tasks` and `sys.supervisors` with Druid's columns and types (its
docs/querying/sql-metadata-tables.md: VARCHAR, and BIGINT for numbers and for booleans as 1/0), of the datasources
the caller may read, registered on a query's DuckDB when its tree names them (`tree.QueryTree.system`).

What each row means here:
- a segment is a used segment record (published, marked used), overshadowed ones too, as Druid lists them; it is
  available (and active, with one replica) while visible in the timeline (`core.timeline`): queries read it from
  deep storage. Nothing is served in real time (`is_realtime` 0);
- a task is a task group that reads Kafka (`index_kafka`, id `<run>/group=<n>`, as `ingest status`'s active tasks
  name it), and the run it belongs to (`ingest_run`, id the run id: its groups' `group_id`);
- a supervisor is a datasource, its state and health judged as `ingest status` judges them (`service.status`),
  given by the caller (`supervisors`): query/ does not judge health.

Row builders are pure; `register_system_tables` reads the store.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa

from ingest_core.core.periods import format_datetime
from ingest_core.core.states import GroupStatus, RunStatus
from ingest_core.core.timeline import visible_segments
from ingest_core.query.errors import SqlError
from ingest_core.query.tree import SYSTEM_TABLES
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.records import RunOutline, SegmentRecord


def _schema(*columns: str, longs: tuple[str, ...]) -> pa.Schema:
    return pa.schema([(c, pa.int64() if c in longs else pa.string()) for c in columns])


SEGMENTS = _schema("segment_id", "datasource", "start", "end", "size", "version", "partition_num", "num_replicas",
                   "num_rows", "is_active", "is_published", "is_available", "is_realtime", "is_overshadowed",
                   "shard_spec", "dimensions", "metrics", "last_compaction_state", "replication_factor",
                   longs=("size", "partition_num", "num_replicas", "num_rows", "is_active", "is_published",
                          "is_available", "is_realtime", "is_overshadowed", "replication_factor"))
TASKS = _schema("task_id", "group_id", "type", "datasource", "created_time", "queue_insertion_time", "status",
                "runner_status", "duration", "location", "host", "plaintext_port", "tls_port", "error_msg",
                longs=("duration", "plaintext_port", "tls_port"))
SUPERVISORS = _schema("supervisor_id", "state", "detailed_state", "healthy", "type", "source", "suspended", "spec",
                      longs=("healthy", "suspended"))
SCHEMAS = {"segments": SEGMENTS, "tasks": TASKS, "supervisors": SUPERVISORS}  # the sys tables, by name

RUN_TASK, GROUP_TASK = "ingest_run", "index_kafka"  # sys.tasks' `type` of a run and of a task group
NO_PORT = -1  # Druid's port of a task that has no location (TaskLocation.unknown())
NOT_FINISHED = -1  # Druid's duration of a task still running


@dataclass(frozen=True)
class SupervisorRow:
    """A datasource's supervisor as `sys.supervisors` lists it."""

    supervisor_id: str
    state: str
    detailed_state: str
    healthy: bool
    source: str  # the topic, or the topicPattern
    suspended: bool
    spec: dict | None  # the last spec the store registered (redacted as it keeps it); None: none yet

    def to_row(self) -> dict:
        return {"supervisor_id": self.supervisor_id, "state": self.state, "detailed_state": self.detailed_state,
                "healthy": int(self.healthy), "type": "kafka", "source": self.source,
                "suspended": int(self.suspended), "spec": None if self.spec is None else json.dumps(self.spec)}


Supervisors = Callable[[Sequence[str]], Sequence[SupervisorRow]]  # the supervisors of these datasources


def segment_rows(records: Sequence[SegmentRecord]) -> list[dict]:
    """`sys.segments` rows of one datasource's segment records: the used ones, overshadowed or not."""
    used = [s for s in records if s.used]
    visible = {s.id for s in visible_segments(used)}
    rows = []
    for s in used:
        active = int(s.id in visible)
        payload = s.payload or {}
        compacted = payload.get("compactedFrom")
        rows.append({
            "segment_id": s.id, "datasource": s.datasource, "start": format_datetime(s.interval_start),
            "end": format_datetime(s.interval_end), "size": s.size_bytes, "version": s.version,
            "partition_num": s.partition_num, "num_replicas": active, "num_rows": s.num_rows, "is_active": active,
            "is_published": 1, "is_available": active, "is_realtime": 0, "is_overshadowed": 1 - active,
            # appended partitions, as Druid's streaming ingestion numbers them (no fixed core set)
            "shard_spec": json.dumps({"type": "numbered", "partitionNum": s.partition_num, "partitions": 0}),
            "dimensions": _json_list(payload.get("dimensions")), "metrics": _json_list(payload.get("metrics")),
            "last_compaction_state": None if compacted is None else json.dumps(
                {"task": s.run_id, "compactedFrom": compacted}),
            "replication_factor": active})
    return rows


def _json_list(values: Sequence[str] | None) -> str | None:
    return None if values is None else json.dumps(list(values))


def task_rows(runs: Sequence[RunOutline]) -> list[dict]:
    """`sys.tasks` rows: each run, then its task groups that read something (an EMPTY group runs no job)."""
    rows = []
    for run in runs:
        started = run.running_since or run.created_at
        status, runner = _task_status(run.status)
        end = None if status == "RUNNING" else (run.published_at or run.expired_at or run.updated_at)
        rows.append(_task(run, run.run_id, RUN_TASK, status, runner, _duration(started, end),
                          run.error if status == "FAILED" else None))
        for g in run.groups:
            if g.status is GroupStatus.EMPTY:
                continue
            if g.status is GroupStatus.PUBLISHED:
                g_status, g_runner, g_end = "SUCCESS", "NONE", g.updated_at
            elif g.status is GroupStatus.FAILED or status != "RUNNING":  # its run ended without publishing it
                g_status, g_runner, g_end = "FAILED", "NONE", g.updated_at if g.status is GroupStatus.FAILED else end
            else:
                g_status, g_runner, g_end = status, runner, None
            rows.append(_task(run, f"{run.run_id}/group={g.group_id}", GROUP_TASK, g_status, g_runner,
                              _duration(started, g_end), run.error if g_status == "FAILED" else None))
    return rows


def _task_status(status: RunStatus) -> tuple[str, str]:
    """Druid's task status and runner status of a run's."""
    if status is RunStatus.PUBLISHED:
        return "SUCCESS", "NONE"
    if status is RunStatus.RUNNING:
        return "RUNNING", "RUNNING"
    if status is RunStatus.PLANNED:
        return "RUNNING", "PENDING"
    return "FAILED", "NONE"  # FAILED, EXPIRED, SUPERSEDED


def _duration(start: datetime, end: datetime | None) -> int:
    return NOT_FINISHED if end is None else max(0, round((end - start).total_seconds() * 1000))


def _task(run: RunOutline, task_id: str, kind: str, status: str, runner: str, duration: int,
          error: str | None) -> dict:
    created = format_datetime(run.created_at)
    return {"task_id": task_id, "group_id": run.run_id, "type": kind, "datasource": run.datasource,
            "created_time": created, "queue_insertion_time": created, "status": status, "runner_status": runner,
            "duration": duration, "location": None, "host": None, "plaintext_port": NO_PORT, "tls_port": NO_PORT,
            "error_msg": error}


def register_system_tables(con, store: MetadataStore, tables: Collection[str], names: Sequence[str],
                           supervisors: Supervisors | None) -> None:
    """The sys tables in `tables` (`SCHEMAS`' names), of the datasources `names` (those the caller may read)."""
    for table in tables:
        if table == "segments":
            rows = [r for name in names for r in segment_rows(store.segment_records.of(name, used_only=True))]
        elif table == "tasks":
            rows = task_rows(store.runs.outlines(names))
        else:
            if supervisors is None:
                raise SqlError("sys.supervisors is answered by `ingest query` and the SQL API, which judge each "
                               "supervisor's health; this call was given no `supervisors`")
            rows = [s.to_row() for s in supervisors(names)]
        con.register(SYSTEM_TABLES[table], pa.Table.from_pylist(rows, schema=SCHEMAS[table]))
