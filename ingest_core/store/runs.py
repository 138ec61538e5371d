"""The runs of a datasource and their task groups: each run's persisted plan, its status (PLANNED, RUNNING,
PUBLISHED, FAILED, SUPERSEDED, EXPIRED), its deadline (completionTimeout), and each group's status. A run's
status moves only as `core.states.RUN_TABLE` allows: each update is guarded by the event's from-statuses."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ingest_core.core.errors import RunNotFoundError
from ingest_core.core.offsets import KnownOffset, TopicPartition
from ingest_core.core.planner import Plan
from ingest_core.core.states import RUN_TABLE, GroupStatus, RunEvent, RunStatus
from ingest_core.store.audit import AuditLog
from ingest_core.store.database import Database
from ingest_core.store.datasources import Datasources
from ingest_core.store.records import GroupOutline, PublishedFigures, RunOutline, RunRecord
from ingest_core.store.schema import as_utc, runs, task_groups, utcnow

RUN_EXPIRED = "run_expired"  # the audit action of a run that outlived its deadline

_IN_FLIGHT = [s.value for s in RunStatus if s.in_flight]


class Runs:
    def __init__(self, db: Database):
        self.db, self.datasources, self.audit_log = db, Datasources(db), AuditLog(db)

    def insert(self, plan: Plan, *, deadline_at: datetime | None = None,
               conn: Connection | None = None) -> tuple[RunRecord, bool]:
        """Persist a plan: (record, True). If the run id already has one (a concurrent planner won), that
        one is returned instead: (record, False). With `conn`, inside the caller's transaction. `deadline_at`:
        when it expires if its jobs never start."""
        if conn is not None:
            return self._insert(plan, deadline_at, conn=conn)
        try:
            with self.db.session() as c:
                return self._insert(plan, deadline_at, conn=c)
        except sa.exc.IntegrityError:
            return self.require(plan.datasource, plan.run_id), False

    def _insert(self, plan: Plan, deadline_at: datetime | None, *, conn: Connection) -> tuple[RunRecord, bool]:
        self.datasources.lock(plan.datasource, conn=conn)
        existing = self.get(plan.datasource, plan.run_id, conn=conn)
        if existing is not None:
            return existing, False
        seq = int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(runs.c.seq), 0))
                               .where(runs.c.datasource == plan.datasource)).scalar()) + 1
        now = utcnow()
        conn.execute(runs.insert().values(
            datasource=plan.datasource, run_id=plan.run_id, seq=seq, status=RunStatus.PLANNED.value,
            plan=plan.to_json(), records=plan.records, created_at=plan.created_at, updated_at=now,
            deadline_at=deadline_at))
        conn.execute(task_groups.insert(), [
            {"datasource": plan.datasource, "run_id": plan.run_id, "group_id": g.group_id,
             "records": g.records, "updated_at": now,
             "status": (GroupStatus.EMPTY if g.is_empty else GroupStatus.PENDING).value}
            for g in plan.groups])
        return RunRecord(plan.datasource, plan.run_id, seq, RunStatus.PLANNED, plan, plan.created_at,
                         None, None, None, deadline_at=deadline_at), True

    def replace_plan(self, plan: Plan, *, deadline_at: datetime, conn: Connection) -> RunRecord:
        """A run in flight planned again (`Supervisor.replan`, inside its locked transaction): its new plan, its
        task groups reset, and a new deadline (its jobs start again). Returns its record."""
        now = utcnow()
        key = (runs.c.datasource == plan.datasource) & (runs.c.run_id == plan.run_id)
        conn.execute(runs.update().where(key & _takes(RunEvent.REPLAN)).values(
            plan=plan.to_json(), records=plan.records, status=RUN_TABLE[RunEvent.REPLAN][1].value, running_since=now,
            deadline_at=deadline_at, updated_at=now))
        conn.execute(task_groups.delete().where((task_groups.c.datasource == plan.datasource)
                                                & (task_groups.c.run_id == plan.run_id)))
        conn.execute(task_groups.insert(), [
            {"datasource": plan.datasource, "run_id": plan.run_id, "group_id": g.group_id, "records": g.records,
             "updated_at": now, "status": (GroupStatus.EMPTY if g.is_empty else GroupStatus.PENDING).value}
            for g in plan.groups])
        return self.require(plan.datasource, plan.run_id, conn=conn)

    def get(self, name: str, run_id: str, *, conn: Connection | None = None) -> RunRecord | None:
        with self.db.within(conn) as c:
            row = c.execute(sa.select(runs).where((runs.c.datasource == name) & (runs.c.run_id == run_id))
                            ).mappings().first()
        return _run_record(row) if row else None

    def require(self, name: str, run_id: str, *, conn: Connection | None = None) -> RunRecord:
        record = self.get(name, run_id, conn=conn)
        if record is None:
            raise RunNotFoundError(f"datasource {name!r} has no planned run {run_id!r}")
        return record

    def recent(self, name: str, limit: int | None = 20) -> list[RunRecord]:
        """Newest first; `limit` None: all of them."""
        query = sa.select(runs).where(runs.c.datasource == name).order_by(runs.c.seq.desc())
        with self.db.session() as conn:
            rows = conn.execute(query if limit is None else query.limit(limit)).mappings().all()
            return [_run_record(r) for r in rows]

    def outlines(self, names: Sequence[str]) -> list[RunOutline]:
        """Every run of the datasources `names`, without its plan, with its task groups; by datasource, then in
        planning order."""
        if not names:
            return []
        columns = [runs.c[c] for c in ("datasource", "run_id", "seq", "status", "created_at", "updated_at",
                                       "running_since", "published_at", "expired_at", "error")]
        with self.db.session() as conn:
            rows = conn.execute(sa.select(*columns).where(runs.c.datasource.in_(list(names)))
                                .order_by(runs.c.datasource, runs.c.seq)).mappings().all()
            groups: dict[tuple[str, str], list[GroupOutline]] = {}
            for g in conn.execute(sa.select(task_groups).where(task_groups.c.datasource.in_(list(names)))
                                  .order_by(task_groups.c.group_id)).mappings():
                groups.setdefault((g["datasource"], g["run_id"]), []).append(GroupOutline(
                    int(g["group_id"]), GroupStatus(g["status"]), int(g["records"]), as_utc(g["updated_at"])))
        return [RunOutline(r["datasource"], r["run_id"], RunStatus(r["status"]), as_utc(r["created_at"]),
                           as_utc(r["updated_at"]), as_utc(r["running_since"]), as_utc(r["published_at"]),
                           as_utc(r["expired_at"]), r["error"], tuple(groups.get((r["datasource"], r["run_id"]), ())))
                for r in rows]

    def statuses(self, name: str, run_ids: Sequence[str] | None = None) -> dict[str, RunStatus]:
        """Each run's status (all, or those of `run_ids` that exist), without reading their plans."""
        query = sa.select(runs.c.run_id, runs.c.status).where(runs.c.datasource == name)
        if run_ids is not None:
            query = query.where(runs.c.run_id.in_(list(run_ids)))
        with self.db.session() as conn:
            return {run_id: RunStatus(status) for run_id, status in conn.execute(query)}

    def last_active(self, name: str) -> datetime | None:
        """When the stream last had something new for the datasource (Druid's idle clock): the planning of its
        latest run that found records, else of its first run (the first look at the stream); None: no run yet."""
        with self.db.session() as conn:
            ours = runs.c.datasource == name
            at = conn.execute(sa.select(sa.func.max(runs.c.created_at)).where(ours & (runs.c.records > 0))).scalar()
            if at is None:
                at = conn.execute(sa.select(sa.func.min(runs.c.created_at)).where(ours)).scalar()
        return as_utc(at) if at is not None else None

    def in_flight(self, name: str, *, conn: Connection | None = None, only: list[str] | None = None
                  ) -> list[RunRecord]:
        """PLANNED or RUNNING, in planning order (`only`: of these run ids)."""
        where = (runs.c.datasource == name) & runs.c.status.in_(_IN_FLIGHT)
        if only is not None:
            if not only:
                return []
            where &= runs.c.run_id.in_(only)
        with self.db.within(conn) as c:
            rows = c.execute(sa.select(runs).where(where).order_by(runs.c.seq)).mappings().all()
        return [_run_record(r) for r in rows]

    def _in_flight_ids(self, name: str, conn: Connection, where: sa.ColumnElement[bool]) -> list[str]:
        """The ids of the runs in flight that `where` holds for, read without their plans (13 MB each at 100,000
        partitions)."""
        return list(conn.execute(sa.select(runs.c.run_id).where(
            (runs.c.datasource == name) & runs.c.status.in_(_IN_FLIGHT) & where)).scalars())

    def inflight_end_offsets(self, name: str) -> dict[TopicPartition, KnownOffset]:
        """Planned end offsets of runs that have not published yet; the latest-planned run wins per partition."""
        out: dict[TopicPartition, KnownOffset] = {}
        for run in self.in_flight(name):
            if run.plan.is_backfill:  # its range lies behind the main line: nothing continues from it
                continue
            for tp, end in run.plan.end_offsets().items():
                out[tp] = KnownOffset(end, run.run_id, run.plan.topic_ids.get(tp.topic))
        return out

    # ------------------------------------------------------------------------------------------ status

    def start(self, name: str, run_id: str, timeout: timedelta | None, now: datetime | None = None) -> bool:
        """START (PLANNED, or FAILED retried -> RUNNING): its jobs start `now` and it must publish within `timeout`
        (completionTimeout; None: no deadline). An expired run stays expired. True when it changed."""
        now = now or utcnow()
        return self.move(name, run_id, RunEvent.START, running_since=now,
                         deadline_at=now + timeout if timeout is not None else None)

    def move(self, name: str, run_id: str, event: RunEvent, *, error: str | None = None,
             superseded_by: str | None = None, conn: Connection | None = None, **values: Any) -> bool:
        """The run's status after `event`, only from the statuses that take it (`core.states.RUN_TABLE`; from
        any other the run is left as it is). `values`: other columns to set with it. True when it moved."""
        to = RUN_TABLE[event][1]
        values.update(status=to.value, updated_at=utcnow())
        if error is not None:
            values["error"] = error
        if superseded_by is not None:
            values["superseded_by"] = superseded_by
        if to is RunStatus.PUBLISHED:
            values["published_at"] = utcnow()
        where = (runs.c.datasource == name) & (runs.c.run_id == run_id) & _takes(event)
        with self.db.within(conn) as c:
            return c.execute(runs.update().where(where).values(**values)).rowcount == 1

    def supersede_inflight(self, name: str, by: str, reason: str, *, conn: Connection) -> list[str]:
        """Mark every in-flight run of the main line superseded (their publish is then refused, and no run
        continues from their planned ends); returns their ids. Backfills in flight go on: their ranges lie
        behind the main line."""
        ids = [run_id for run_id, plan in conn.execute(sa.select(runs.c.run_id, runs.c.plan).where(
            (runs.c.datasource == name) & runs.c.status.in_(_IN_FLIGHT))) if not Plan.from_json(plan).is_backfill]
        if ids:
            conn.execute(runs.update().where((runs.c.datasource == name) & runs.c.run_id.in_(ids)
                                             & _takes(RunEvent.SUPERSEDE)).values(
                status=RUN_TABLE[RunEvent.SUPERSEDE][1].value, superseded_by=by, error=reason, updated_at=utcnow()))
        return ids

    # ------------------------------------------------------------------------------------------ deadlines

    def set_missing_deadlines(self, name: str, deadline: datetime) -> list[str]:
        """Runs in flight from before schema v3 have no deadline: give them one, so they cannot hang the line
        either. Backfills keep none (see `start`). Returns their ids."""
        with self.db.session() as conn:
            ids = [r.run_id for r in self.in_flight(name, conn=conn, only=self._in_flight_ids(
                name, conn, runs.c.deadline_at.is_(None)))
                   if not r.plan.is_backfill]
            if ids:
                conn.execute(runs.update().where((runs.c.datasource == name) & runs.c.run_id.in_(ids)
                                                 & runs.c.deadline_at.is_(None)).values(deadline_at=deadline))
        return ids

    def expire_overdue(self, name: str, now: datetime, by: str) -> list[str]:
        """Expire the runs in flight past their deadline: EXPIRED (failed for good), with the reason and an audit record
        (`by`: who noticed). Nothing continues from their planned ends any more and their publish is refused,
        so the next run plans from the committed offsets. Returns their ids."""
        # `RunRecord.past_deadline`, in SQL; in UTC, as SQLite keeps date-times as text without their zone
        past = runs.c.deadline_at.is_not(None) & (runs.c.deadline_at <= as_utc(now))
        with self.db.session() as conn:  # a cheap read first: usually none is past
            if not self._in_flight_ids(name, conn, past):
                return []
        expired = []
        with self.db.session() as conn:
            self.datasources.lock(name, conn=conn)  # the lock a publish takes: a run publishes or expires, not both
            for run in self.in_flight(name, conn=conn, only=self._in_flight_ids(name, conn, past)):
                reason = run.expiry_reason(now)
                self.move(name, run.run_id, RunEvent.EXPIRE, error=reason, expired_at=now, conn=conn)
                self.audit_log.write(name, RUN_EXPIRED, {"runId": run.run_id, "status": run.status.value,
                                                         "runningSince": run.running_since,
                                                         "deadline": run.deadline_at, "detectedBy": by,
                                                         "reason": reason}, conn=conn)
                expired.append(run.run_id)
        return expired

    # ------------------------------------------------------------------------------------------ task groups

    def set_group_status(self, name: str, run_id: str, group_id: int, status: GroupStatus, *,
                         conn: Connection) -> None:
        conn.execute(task_groups.update().where(
            (task_groups.c.datasource == name) & (task_groups.c.run_id == run_id) & (task_groups.c.group_id == group_id)
        ).values(status=status.value, updated_at=utcnow()))

    def group_statuses(self, name: str, run_id: str, *, conn: Connection | None = None) -> dict[int, GroupStatus]:
        with self.db.within(conn) as c:
            rows = c.execute(sa.select(task_groups.c.group_id, task_groups.c.status).where(
                (task_groups.c.datasource == name) & (task_groups.c.run_id == run_id))).all()
        return {int(g): GroupStatus(s) for g, s in rows}


def published_columns(figures: PublishedFigures) -> dict[str, int]:
    """A publish's figures as the run row's columns (set with its move to PUBLISHED)."""
    return {f"published_{name}": value for name, value in figures.to_json().items()}


def _takes(event: RunEvent) -> sa.ColumnElement[bool]:
    """The SQL guard of a run's move: its status is one of those `event` is taken from."""
    return runs.c.status.in_(sorted(s.value for s in RUN_TABLE[event][0]))


def _run_record(row: Mapping[str, Any]) -> RunRecord:
    return RunRecord(
        datasource=row["datasource"], run_id=row["run_id"], seq=int(row["seq"]), status=RunStatus(row["status"]),
        plan=Plan.from_json(row["plan"]), created_at=as_utc(row["created_at"]),
        published_at=as_utc(row["published_at"]), superseded_by=row["superseded_by"], error=row["error"],
        running_since=as_utc(row["running_since"]), deadline_at=as_utc(row["deadline_at"]),
        expired_at=as_utc(row["expired_at"]),
        published=None if row["published_rows"] is None else PublishedFigures(
            int(row["published_records"]), int(row["published_rows"]), int(row["published_segments"]),
            int(row["published_bytes"])),
    )
