"""`ingest db clean`: the store's history kept to a retention (`store.retention`), beside Airflow's own
`airflow db clean` for Airflow's tables (docs/metadata-store.md)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from typing import Any, Callable

from ingest_core.core.spec import DatasourceSpec
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.retention import DEFAULT_DAYS, DEFAULT_KEEP_RUNS, Cleaned, Retention, clean_history
from ingest_core.supervisor.planning import spec_for


def add_db_clean_parser(db: Any, run: Callable[[argparse.Namespace], int]) -> None:
    p = db.add_parser("clean", help="delete runs, task reports and audit rows past a retention (never offsets, "
                                    "published ranges or segment records)")
    p.add_argument("datasources", nargs="*", metavar="DATASOURCE", help="only these (default: every one)")
    p.add_argument("--days", type=int, default=DEFAULT_DAYS,
                   help=f"keep what changed in the last DAYS days (default {DEFAULT_DAYS})")
    p.add_argument("--keep-runs", type=int, default=DEFAULT_KEEP_RUNS,
                   help=f"always keep each datasource's last N runs (default {DEFAULT_KEEP_RUNS})")
    p.add_argument("--dry-run", action="store_true", help="count what would go; delete nothing")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--json", action="store_true", help="the counts per datasource as JSON")
    p.add_argument("--dags-folder", help="the specs: where each datasource's job output is (default: "
                                         "$AIRFLOW__CORE__DAGS_FOLDER, else ./dags)")
    p.add_argument("--actor", help="who does this, for the audit log")
    p.set_defaults(func=run)


def run_db_clean(args: argparse.Namespace, store: MetadataStore, specs: dict[str, DatasourceSpec],
                 actor: str) -> int:
    try:
        retention = Retention(args.days, args.keep_runs)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    known = [r["name"] for r in store.datasources.all()]
    names = args.datasources or known
    for name in names:
        store.datasources.require(name)  # a typo: exit 2 with a did-you-mean, before anything is deleted
    if not args.dry_run and not args.yes:
        what = (f"delete the history of {len(names)} datasource(s) older than {retention.days} days (keeping "
                f"each one's last {retention.keep_runs} runs)")
        if not sys.stdin.isatty():
            print(f"refusing to {what} without confirmation: pass --yes (or --dry-run to count)", file=sys.stderr)
            return 1
        if input(f"{what}? [y/N] ").strip().lower() not in ("y", "yes"):
            return 1
    now = datetime.now(timezone.utc)
    results = {name: clean_history(store, name, spec_for(store, name, specs), retention, now,
                                   dry_run=args.dry_run, actor=actor) for name in names}
    if args.json:
        print(json.dumps({name: c.to_json() for name, c in results.items()}, indent=2))
        return 0
    verb = "would delete" if args.dry_run else "deleted"
    for name, cleaned in results.items():
        print(f"{name}: {verb} {_described(cleaned)}")
    return 0


def _described(c: Cleaned) -> str:
    return (f"{c.runs} runs, {c.task_groups} task groups, {c.task_reports} task reports, {c.audit_rows} audit "
            f"rows, {c.orphan_folders} job output folders nothing was published from")
