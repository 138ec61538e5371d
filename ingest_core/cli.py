"""The `ingest` command line: a thin shell over the spine.

  ingest validate SPEC...            check spec files; exit 1 with every problem listed
  ingest db upgrade                  create or upgrade the metadata store schema
  ingest plan SPEC --run-id ID       plan (or show the persisted plan of) one run
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from .errors import IngestError, SpecError
from .metadata import MetadataStore
from .periods import parse_datetime
from .settings import Settings
from .spec import find_spec_files, load_spec


def _store(args: argparse.Namespace) -> MetadataStore:
    return MetadataStore(args.metadata_url or Settings.from_env().metadata_url)


def cmd_validate(args: argparse.Namespace) -> int:
    paths: list[Path] = []
    for raw in args.specs:
        p = Path(raw)
        paths.extend(find_spec_files(p) if p.is_dir() else [p])
    failed = 0
    for path in paths:
        try:
            spec = load_spec(path)
        except SpecError as exc:
            failed += 1
            print(f"ERROR {exc}", file=sys.stderr)
            continue
        print(f"OK    {path}: datasource {spec.datasource!r}")
        for warning in spec.warnings:
            print(f"  warning: {warning}")
    if not paths:
        print("no spec files given", file=sys.stderr)
        return 2
    return 1 if failed else 0


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    store = _store(args)
    before = store.current_schema_version()
    applied = store.upgrade()
    if applied:
        print(f"{store.safe_url}: schema upgraded from version {before} to {applied[-1]}")
    else:
        print(f"{store.safe_url}: schema is up to date (version {before})")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from .supervisor import PlanOptions, Supervisor

    spec = load_spec(args.spec)
    store = _store(args)
    store.check_schema()
    supervisor = Supervisor(spec, store)
    supervisor.register()
    options = PlanOptions(end_time=parse_datetime(args.end_time) if args.end_time else None,
                          max_records=args.max_records)
    record = supervisor.plan(args.run_id, options)
    if args.json:
        print(json.dumps(record.plan.to_json(), indent=2))
        return 0
    plan = record.plan
    print(f"run {plan.run_id} of {plan.datasource}: {record.status.value}, {plan.records} records, "
          f"{len(plan.groups)} task groups ({plan.assignment})")
    for g in plan.groups:
        print(f"  group {g.group_id}: {g.records} records in {len(g.splits)} splits")
        for p in g.partitions:
            print(f"    {p.tp}: [{p.start}, {p.end}) from {p.start_source.value}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ingest", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--metadata-url", help="SQLAlchemy URL of the metadata store (default: $INGEST_METADATA_URL)")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", help="check datasource spec files (or folders of them)")
    p.add_argument("specs", nargs="+")
    p.set_defaults(func=cmd_validate)

    db = sub.add_parser("db", help="metadata store schema").add_subparsers(dest="db_command", required=True)
    p = db.add_parser("upgrade", help="create or upgrade the schema")
    p.set_defaults(func=cmd_db_upgrade)

    p = sub.add_parser("plan", help="plan one run (or show its persisted plan)")
    p.add_argument("spec")
    p.add_argument("--run-id", required=True)
    p.add_argument("--end-time", help="cap end offsets at the offsets at this ISO-8601 time")
    p.add_argument("--max-records", type=int, help="cap the run at this many records")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plan)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except IngestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
