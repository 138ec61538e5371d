"""Metadata stores as the releases before Alembic left them: each hand-rolled schema version (1-8) with its tables,
its markers and rows in every table (checked once against the old releases' own code, run from git)."""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa

from ingest_core.core.planner import Plan
from ingest_core.store.engines import make_engine
from ingest_core.store.schema import meta

T0 = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
VERSION_TABLE = "ingest_alembic_version"  # the store's own: Airflow's `alembic_version` may share the database
LEGACY_TABLE = "ingest_schema_version"  # the hand-rolled marker of releases before Alembic
HEAD = "0008"

# What each hand-rolled version added (the MIGRATIONS list of the releases before Alembic). Release N's code created
# a new store with its own tables, so a store of version N holds the tables of version 8 without what came after
# N. (No revision after 0008 has changed the tables yet: one that does takes its part out here.)
ADDED = {2: ["ingest_published_ranges"], 3: ["ingest_runs.running_since", "ingest_runs.deadline_at",
                                             "ingest_runs.expired_at"],
         4: ["ingest_dead_letter_files"], 5: ["ingest_offsets.topic_id"], 6: ["ingest_segments.used_status_last_updated"],
         7: [], 8: ["ingest_runs.published_records", "ingest_runs.published_rows", "ingest_runs.published_segments",
                    "ingest_runs.published_bytes"]}
FIGURES = {"published_records": 20, "published_rows": 12, "published_segments": 2, "published_bytes": 1200}


def wipe(conn: sa.Connection) -> None:
    meta.drop_all(conn)
    conn.execute(sa.text(f"DROP TABLE IF EXISTS {VERSION_TABLE}"))


def legacy_rows(version: int) -> dict[str, list[dict]]:
    """Rows of every table as release `version` wrote them (the flags and FAILED+expired_at before 7, no published
    figures before 8), non-ASCII text and JSON among them."""
    states = version >= 7
    at = {"created_at": T0, "updated_at": T0}

    def run(run_id, seq, status, records, **more):
        return {"datasource": "wiki", "run_id": run_id, "seq": seq, "status": status, "records": records,
                "plan": Plan("wiki", run_id, T0, (), "modulo").to_json(), **at, **more}

    return {
        "ingest_datasources": [
            {"name": "wiki", "state": "SUSPENDED" if states else "RUNNING", "spec_version": 1, "commit_version": 3,
             "detailed_state": "SUSPENDED" if states else "RUNNING", "suspended": True, "terminated": False, **at},
            {"name": "gone", "state": "TERMINATED" if states else "IDLE", "spec_version": 0, "commit_version": 0,
             "detailed_state": "TERMINATED" if states else "IDLE", "suspended": True, "terminated": True, **at},
            {"name": "live", "state": "RUNNING", "detailed_state": "RUNNING", "spec_version": 0, "commit_version": 1,
             "suspended": False, "terminated": False, **at}],
        "ingest_specs": [{"datasource": "wiki", "version": 1, "fingerprint": "f" * 64, "created_at": T0,
                          "spec": {"type": "kafka", "dataSource": "wiki", "note": "Zürich ✓"}, "source": "type: kafka"}],
        "ingest_offsets": [{"datasource": "wiki", "topic": "edits", "partition": 0, "offset": 40, "run_id": "done",
                            "updated_at": T0}],
        "ingest_runs": [
            run("old", 1, "RUNNING", 0),
            run("done", 2, "PUBLISHED", 30, published_at=T0, **(FIGURES if version >= 8 else {})),
            run("lapsed", 3, "EXPIRED" if states else "FAILED", 5, error="past its deadline", deadline_at=T0,
                expired_at=T0)],
        "ingest_task_groups": [{"datasource": "wiki", "run_id": "done", "group_id": g, "status": status,
                                "records": records, "updated_at": T0}
                               for g, status, records in ((0, "PUBLISHED", 20), (1, "FAILED", 10))],
        "ingest_segments": [
            {"id": f"seg{i}", "datasource": "wiki", "interval_start": T0, "interval_end": T0, "version": "v",
             "partition_num": i, "location": f"file:///s{i}", "num_rows": rows, "size_bytes": 100 * rows,
             "used": i == 0, "run_id": "done", "group_id": 0, "start_offsets": {"edits:0": 10},
             "end_offsets": {"edits:0": 40}, "created_at": T0, "payload": {"columns": ["ts", "a"]}}
            for i, rows in ((0, 7), (1, 5))],
        "ingest_task_reports": [{"datasource": "wiki", "run_id": "done", "group_id": 0, "replica": 1,
                                 "report": {"state": "SUCCESS"}, "created_at": T0}],
        "ingest_audit_log": [{"datasource": "wiki", "action": "suspend", "actor": "ops", "details": {"why": "ü"},
                              "created_at": T0}],
        "ingest_published_ranges": [{"datasource": "wiki", "topic": "edits", "partition": 0, "start_offset": 10,
                                     "end_offset": 40, "run_id": "done", "backfill": False, "updated_at": T0}],
        "ingest_dead_letter_files": [{"datasource": "wiki", "location": "file:///dl/0.parquet", "run_id": "done",
                                      "group_id": 0, "replica": 1, "records": 2, "size_bytes": 512, "publish_seq": 1,
                                      "created_at": T0}],
    }


def make_legacy_store(url: str, version: int) -> None:
    """A store as the code of hand-rolled version `version` left it: its tables, its markers 1..version, its rows."""
    engine = make_engine(url)
    with engine.begin() as conn:
        wipe(conn)
        meta.create_all(conn)
        for later in range(version + 1, 9):
            for name in ADDED[later]:
                table, _, column = name.partition(".")
                conn.execute(sa.text(f"ALTER TABLE {table} DROP COLUMN {column}" if column else f"DROP TABLE {table}"))
        conn.execute(sa.text(f"INSERT INTO {LEGACY_TABLE} (id, version, upgraded_at) VALUES (:v, :v, :t)"),
                     [{"v": v, "t": T0} for v in range(1, version + 1)])
        inspector = sa.inspect(conn)
        for name, rows in legacy_rows(version).items():
            if inspector.has_table(name):
                present = {c["name"] for c in inspector.get_columns(name)}
                for row in rows:  # one by one: an executemany takes its columns from the first row
                    conn.execute(meta.tables[name].insert().values({k: v for k, v in row.items() if k in present}))
    engine.dispose()
