"""`ingest db clean`: a year of a datasource's history kept to a retention, on SQLite and PostgreSQL. What
exactly-once rests on (committed offsets, published ranges, segment records) is never touched, nor what a
datasource's figures are counted from (records lost, skips, resets)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from helpers import spec_from

from ingest_core.core.planner import Plan
from ingest_core.handover import deep_storage
from ingest_core.service.cli import main
from ingest_core.store.audit import RECORDS_LOST, RESET, SKIP
from ingest_core.store.retention import DB_CLEAN
from ingest_core.store.schema import audit_log, offsets, published_ranges, runs, segments, task_groups, task_reports
from ingest_core.supervisor.planning import Supervisor

PER_DAY = 24  # a run an hour for a year: 8,760 runs
DAYS = 365
KEPT_ACTIONS = (RECORDS_LOST, SKIP, RESET)


def _history(store, deep: str, now: datetime) -> dict:
    """A year of runs of `ds` up to `now` (the test's own: the clean's cutoff moves with the clock, so a time
    taken at the suite's start would drift), oldest first; returns which run ids the retention must keep and
    which orphan folders it must remove."""
    Supervisor(spec_from("localhost:1", "t", {"timestampSpec": {"column": "ts"}},
                         microbatch={"deepStorage": {"uri": deep}}), store).register()
    n = DAYS * PER_DAY
    run_rows, group_rows, report_rows, segment_rows, range_rows = [], [], [], [], []
    expect_kept, orphans, published_folders = set(), [], []
    last_published = max(i for i in range(n) if i % 10 != 3 and i % 10 != 7 and i < n - 3)
    for i in range(n):
        run_id = f"run-{i:06d}"
        at = now - timedelta(hours=n - i, minutes=-30)  # half an hour off the cutoff, which moves as it runs
        status = ("RUNNING" if i >= n - 3 else "SUPERSEDED" if i % 10 == 3 else "FAILED" if i % 10 == 7
                  else "PUBLISHED")
        if i == n - 4:
            status = "FAILED"  # after the last publish: it may still be retried, so it stays however old
        plan = Plan("ds", run_id, at, (), "partition % 1").to_json()
        run_rows.append({"datasource": "ds", "run_id": run_id, "seq": i, "status": status, "plan": plan,
                         "records": 10, "created_at": at, "updated_at": at})
        for g in range(2):
            group_rows.append({"datasource": "ds", "run_id": run_id, "group_id": g, "status": "PUBLISHED",
                               "records": 5, "updated_at": at})
            report_rows.append({"datasource": "ds", "run_id": run_id, "group_id": g, "replica": 0,
                                "report": {"runId": run_id}, "created_at": at})
        recent = at >= now - timedelta(days=30) or i >= n - 100
        if recent or status == "RUNNING" or i == n - 4:
            expect_kept.add(run_id)
        if status == "PUBLISHED":
            location = f"{deep_storage.group_uri(deep, 'ds', run_id, 0)}/attempt=1/segments/part-0.parquet"
            segment_rows.append({"id": f"ds_{i}", "datasource": "ds", "interval_start": at,
                                 "interval_end": at + timedelta(hours=1), "version": at.isoformat(),
                                 "partition_num": 0, "location": location, "num_rows": 10, "size_bytes": 100,
                                 "used": True, "run_id": run_id, "group_id": 0, "start_offsets": {},
                                 "end_offsets": {}, "created_at": at, "payload": {}})
            range_rows.append({"datasource": "ds", "topic": "t", "partition": 0, "start_offset": i * 10,
                               "end_offset": i * 10 + 10, "run_id": run_id, "backfill": False, "updated_at": at})
        if i in (3, 13, 7, last_published - 1, n - 4, 100):  # folders on disk: a few old and recent ones
            attempt = Path(deep_storage.group_uri(deep, "ds", run_id, 0)[len("file://"):]) / "attempt=1"
            (attempt / "segments").mkdir(parents=True)
            (attempt / "segments" / "part-0.parquet").write_bytes(b"x")
            if status == "PUBLISHED":
                published_folders.append(attempt)
            elif run_id not in expect_kept:
                orphans.append(attempt)
    audit_rows = []
    for day in range(DAYS):
        at = now - timedelta(days=DAYS - day, hours=-1)
        audit_rows.append({"datasource": "ds", "action": "run_expired" if day % 2 else "suspend", "actor": "x",
                           "details": {}, "created_at": at})
        if day % 90 == 0:
            audit_rows += [{"datasource": "ds", "action": a, "actor": "x", "details": {}, "created_at": at}
                           for a in KEPT_ACTIONS]
    with store.engine.begin() as conn:
        conn.execute(runs.insert(), run_rows)
        conn.execute(task_groups.insert(), group_rows)
        conn.execute(task_reports.insert(), report_rows)
        conn.execute(segments.insert(), segment_rows)
        conn.execute(published_ranges.insert(), range_rows)
        conn.execute(offsets.insert(), [{"datasource": "ds", "topic": "t", "partition": 0, "offset": n * 10,
                                         "run_id": run_rows[last_published]["run_id"], "updated_at": now}])
        conn.execute(audit_log.insert(), audit_rows)
    return {"kept": expect_kept, "orphans": orphans, "published": published_folders, "audit": audit_rows}


def _rows(store, table: sa.Table) -> list:
    with store.engine.connect() as conn:
        return sorted(tuple(str(v) for v in r) for r in conn.execute(sa.select(table)))


def _clean(store, tmp_path, capsys, *args: str) -> tuple[int, str, str]:
    code = main(["--metadata-url", store.url, "db", "clean", "--dags-folder", str(tmp_path / "no-specs"), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_db_clean_keeps_a_year_of_history_to_the_retention_and_never_what_exactly_once_needs(store, tmp_path,
                                                                                               capsys):
    deep = (tmp_path / "deep").as_uri()
    now = datetime.now(timezone.utc)
    history = _history(store, deep, now)
    protected = {t.name: _rows(store, t) for t in (offsets, published_ranges, segments)}
    before = {t.name: _rows(store, t) for t in (runs, task_groups, task_reports, audit_log)}

    # a dry run counts and changes nothing
    code, out, _ = _clean(store, tmp_path, capsys, "--dry-run", "--json")
    assert code == 0
    counted = json.loads(out)["ds"]
    assert {t.name: _rows(store, t) for t in (runs, task_groups, task_reports, audit_log)} == before
    assert all(folder.exists() for folder in history["orphans"] + history["published"])

    code, out, _ = _clean(store, tmp_path, capsys, "--yes", "--json", "--actor", "retention-test")
    assert code == 0
    cleaned = json.loads(out)["ds"]
    assert cleaned == counted
    with store.engine.connect() as conn:
        kept = set(conn.execute(sa.select(runs.c.run_id)).scalars())
        group_runs = set(conn.execute(sa.select(task_groups.c.run_id)).scalars())
        report_runs = set(conn.execute(sa.select(task_reports.c.run_id)).scalars())
        actions = [(a, at) for a, at in conn.execute(sa.select(audit_log.c.action, audit_log.c.created_at))]
    assert kept == history["kept"]
    assert group_runs == report_runs == kept  # a run's groups and reports go with it, and only then
    assert cleaned["runs"] == DAYS * PER_DAY - len(kept)
    assert cleaned["taskGroups"] == cleaned["taskReports"] == 2 * cleaned["runs"]
    # exactly-once's tables are as they were, row for row
    assert {t.name: _rows(store, t) for t in (offsets, published_ranges, segments)} == protected
    # the old routine audit rows went; the ones figures are counted from stayed, however old; the clean is audited
    cutoff = now - timedelta(days=30)
    old = [a for a, at in actions if (at if at.tzinfo else at.replace(tzinfo=timezone.utc)) < cutoff]
    assert set(old) == set(KEPT_ACTIONS)
    assert [a for a, _ in actions].count(RESET) == sum(1 for r in history["audit"] if r["action"] == RESET)
    (audit,) = store.audit_log.records("ds", action=DB_CLEAN)
    assert audit.actor == "retention-test" and audit.details["runs"] == cleaned["runs"]
    # the deleted runs' job output that nothing was published from went with them; published output stayed
    assert cleaned["orphanFolders"] == len(history["orphans"]) > 0
    assert not any(folder.exists() for folder in history["orphans"])
    assert all(folder.exists() for folder in history["published"])
    assert store.runs.recent("ds", limit=5)  # what status reads still reads

    # again: nothing more to do
    code, out, _ = _clean(store, tmp_path, capsys, "--yes")
    assert code == 0 and out == ("ds: deleted 0 runs, 0 task groups, 0 task reports, 0 audit rows, 0 job output "
                                 "folders nothing was published from\n")


@pytest.mark.parametrize("args, code, message", [
    (["--days", "0", "--yes"], 2, "a retention of 0 days keeps nothing: give at least 1"),
    (["--keep-runs", "-1", "--yes"], 2, "keep_runs is -1: give 0 or more"),
    (["dss", "--yes"], 2, "dss"),
    ([], 1, "refusing to delete the history of 1 datasource(s) older than 30 days"),
])
def test_db_clean_refuses_bad_input_and_an_unconfirmed_clean_changing_nothing(store, tmp_path, capsys, args, code,
                                                                               message):
    Supervisor(spec_from("localhost:1", "t", {"timestampSpec": {"column": "ts"}}), store).register()
    old = datetime.now(timezone.utc) - timedelta(days=400)
    with store.engine.begin() as conn:
        conn.execute(runs.insert(), [{"datasource": "ds", "run_id": f"r{i}", "seq": i, "status": "PUBLISHED",
                                      "plan": Plan("ds", f"r{i}", old, (), "partition % 1").to_json(), "records": 0,
                                      "created_at": old, "updated_at": old} for i in range(200)])
    before = _rows(store, runs)
    got, _, err = _clean(store, tmp_path, capsys, *args)
    assert got == code and message in err and len(err.strip().splitlines()) == 1
    assert _rows(store, runs) == before
