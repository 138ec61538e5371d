"""The `ingest` command line: a thin shell over the spine.

  ingest validate SPEC...            check spec files; exit 1 with every problem listed, warnings shown
                                     (--connect: also the schema registries they name; --strict: unknown
                                     fields are errors, not warnings)
  ingest convert SPEC                print the spec in today's form: Druid's deprecated dataSchema.parser
                                     rewritten as ioConfig.inputFormat, timestampSpec and dimensionsSpec
  ingest db upgrade                  create or upgrade the metadata store schema (Alembic revisions)
  ingest db clean [DATASOURCE...]    delete runs, task reports and audit rows past a retention (--days 30,
                                     --keep-runs 100, --dry-run); never offsets, published ranges or segments
  ingest plan SPEC --run-id ID       plan (or show the persisted plan of) one run
  ingest status [DATASOURCE]         state, health, offsets, lag, errors and recent runs (--json: Druid's shape)
  ingest health [DATASOURCE]         exit 0 when healthy, 1 when not
  ingest segments DATASOURCE         the visible segments (--all: also unused ones)
  ingest dead-letters DATASOURCE     the published runs' dead letters (--run ID, --limit N, --json)
  ingest query "SELECT ..."          SQL over the visible segments of the datasources it names (--json, --csv)
  ingest suspend | resume | terminate DATASOURCE
  ingest reset DATASOURCE            hard reset: forget the committed offsets (asks for confirmation;
                                     re-reading published records needs --confirm-duplicates N, skipping
                                     records --confirm-skip N or --yes)
  ingest reset DATASOURCE --to-latest [--backfill]   jump to the latest offsets [and backfill the gap]
  ingest set-offsets DATASOURCE TOPIC[:PARTITION]=OFFSET|earliest|latest... [--force] [--confirm-duplicates N]
                                     [--confirm-skip N]
  ingest skip DATASOURCE             move past exactly the ranges that failed (asks for confirmation; lost, audited)
  ingest iceberg-sync DATASOURCE     bring its Iceberg table (microbatch.iceberg) level with what is published
  ingest sync-group DATASOURCE       make the Kafka consumer group show the committed offsets again
  ingest cleanup DATASOURCE [--yes]  job output of final runs that nothing was published from (--yes: remove it)

The command line is the operator's tool: it reads and acts on every datasource with the metadata store's
credentials (--metadata-url); Airflow's DAG permissions apply to the UI plugin's pages and API, not here.
Actions are audited with the name in --actor (default: $INGEST_ACTOR, else the login name). The DAG folder
(--dags-folder, default: $AIRFLOW__CORE__DAGS_FOLDER, else ./dags) gives the specs for broker queries.
"""

from __future__ import annotations

import argparse
import codecs
import functools
import getpass
import json
import logging
import os
import sys
from pathlib import Path

import yaml

from ingest_core.core.errors import (
    DependencyUnavailableError,
    IngestError,
    MetadataStoreError,
    MetadataUrlError,
    OffsetSyntaxError,
    RunNotFoundError,
    SpecError,
    UnknownDatasourceError,
    shown,
)
from ingest_core.core.legacy_parser import convert_parser
from ingest_core.core.periods import format_datetime, parse_datetime
from ingest_core.core.settings import HOME_VAR, METADATA_URL_VAR, Settings, strict_specs
from ingest_core.core.spec import DatasourceSpec, find_spec_files, load_spec, read_spec_document, read_spec_file
from ingest_core.kafka.config import LIBRDKAFKA_LOGGER
from ingest_core.kafka.properties import load_checked_spec
from ingest_core.query.results import TABLE, ResultFormat, write_result
from ingest_core.service.cli_actions import ACTION_COMMANDS, add_action_parsers
from ingest_core.service.cli_parsing import UsageParser, add_global_options, not_text
from ingest_core.service.dag_control import AirflowCliDags
from ingest_core.service.dead_letters import dead_letters
from ingest_core.service.history_clean import add_db_clean_parser, run_db_clean
from ingest_core.service.registry_check import check_spec_registries
from ingest_core.service.status import collect_statuses, segment_health, specs_in
from ingest_core.store import iceberg
from ingest_core.store.cleanup import find_orphans, remove_orphans
from ingest_core.store.engines import checked_url
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.reader import DatasourceReader
from ingest_core.store.segment_schema import recorded_types
from ingest_core.supervisor.actions import DatasourceActions
from ingest_core.supervisor.planning import PlanOptions, Supervisor, spec_for

def _store(args: argparse.Namespace) -> MetadataStore:
    """The metadata store; with a DATASOURCE argument, one that knows it (every command alike: exit code 2 and a
    did-you-mean otherwise)."""
    url = args.metadata_url or Settings.from_env().metadata_url
    if args.func is not cmd_db_upgrade:
        _require_sqlite_file(url, args.metadata_url)
    store = MetadataStore(url)
    if getattr(args, "datasource", None):
        store.check_schema()
        store.datasources.require(args.datasource)
    return store


def _require_sqlite_file(url: str, flag: str | None) -> None:
    """A SQLite store that is not there is a wrong path (a typo, another INGEST_HOME), not one to create: say
    where the path came from. Only `ingest db upgrade` creates one."""
    parsed = checked_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return
    path = Path(parsed.database).resolve()
    if path.is_file():
        return
    if path.is_dir():
        what = f"{path} is a folder, not a SQLite database file"
    else:
        missing = next(p for p in [path, *path.parents] if p.parent.exists())
        what = f"{'the file' if missing == path else 'the folder'} {missing} does not exist"
    if flag:
        origin = "from --metadata-url"
    elif os.environ.get(METADATA_URL_VAR):
        origin = f"from {METADATA_URL_VAR}"
    else:
        home = f"INGEST_HOME={os.environ[HOME_VAR]!r}" if os.environ.get(HOME_VAR) else "INGEST_HOME unset: ./.ingest-home"
        origin = f"the default $INGEST_HOME/metadata.db, {home}"
    raise MetadataStoreError(
        f"no metadata store at {path}: {what} ({origin}). Point INGEST_HOME, INGEST_METADATA_URL or --metadata-url "
        f"at the store (`make demo`'s: INGEST_HOME=demo-data), or create a new one there with `ingest db upgrade`")


def cmd_validate(args: argparse.Namespace) -> int:
    """Each file on its own, as the DAG factory loads it (folders: what .airflowignore does not list); a file
    that is not a spec is that file's error, never a traceback."""
    paths: list[Path] = []
    for raw in args.specs:
        p = Path(raw)
        paths.extend(find_spec_files(p) if p.is_dir() else [p])
    failed = 0
    seen: dict[str, Path] = {}
    for path in paths:
        try:
            spec = load_checked_spec(path, strict=args.strict or strict_specs())
        except SpecError as exc:
            failed += 1
            print(f"ERROR {exc}", file=sys.stderr)
            continue
        except Exception as exc:  # a bug here must not hide the other files' results
            failed += 1
            print(f"ERROR {path}: could not be checked ({type(exc).__name__}: {exc}); please report this",
                  file=sys.stderr)
            continue
        if spec.datasource in seen:
            failed += 1
            print(f"ERROR {path}: spec.dataSchema.dataSource: {spec.datasource!r} is already defined by "
                  f"{seen[spec.datasource]}: each datasource has one spec", file=sys.stderr)
            continue
        seen[spec.datasource] = path
        warnings = list(spec.warnings)
        if args.connect:
            registries = check_spec_registries(spec)
            warnings += registries.warnings
            if registries.errors:
                failed += 1
                for error in registries.errors:
                    print(f"ERROR {path}: {error}", file=sys.stderr)
                continue
        print(f"OK    {path}: datasource {spec.datasource!r}")
        for warning in warnings:
            print(f"  warning: {warning}")
    if not paths:
        print("no spec files given", file=sys.stderr)
        return 2
    return 1 if failed else 0


def cmd_convert(args: argparse.Namespace) -> int:
    """The spec file as written, its `dataSchema.parser` replaced by today's fields, as YAML or JSON like the file:
    checked first, so what it prints loads (YAML comments are not kept)."""


    path = Path(args.spec)
    try:
        load_checked_spec(path)
    except SpecError as exc:
        print(f"ERROR {exc}", file=sys.stderr)
        return 1
    _, text = read_spec_file(path)
    raw = read_spec_document(text, str(path))  # as the spec was read above: JSON as JSON, YAML's merge keys
    conversion = convert_parser(raw)
    if conversion is None or conversion.warning is None:
        print(f"{path}: no dataSchema.parser to convert: the spec is already in today's form", file=sys.stderr)
    for note in conversion.notes if conversion is not None else ():
        print(f"note: {note}", file=sys.stderr)
    converted = conversion.raw if conversion is not None else raw
    if path.suffix == ".json":
        print(json.dumps(converted, indent=2, ensure_ascii=False))
    else:
        print(yaml.safe_dump(converted, sort_keys=False, allow_unicode=True, width=120), end="")
    return 0


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    store = _store(args)
    done = store.upgrade()
    if not done.applied:
        print(f"{store.safe_url}: schema is up to date (revision {done.after})")
    elif done.before is None:
        print(f"{store.safe_url}: schema created at revision {done.after} ({len(done.applied)} revisions)")
    else:
        print(f"{store.safe_url}: schema upgraded from revision {done.before} to {done.after} "
              f"({', '.join(done.applied)})")
    return 0


def cmd_db_clean(args: argparse.Namespace) -> int:
    store = _store(args)
    store.check_schema()
    return run_db_clean(args, store, specs_in(_dags_folder(args)), _actor(args))


def cmd_plan(args: argparse.Namespace) -> int:

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


def _dags_folder(args: argparse.Namespace) -> str:
    return args.dags_folder or os.environ.get("AIRFLOW__CORE__DAGS_FOLDER") or "dags"


def _actor(args: argparse.Namespace) -> str:
    return args.actor or os.environ.get("INGEST_ACTOR") or getpass.getuser()


def _names(args: argparse.Namespace, store: MetadataStore) -> list[str]:
    return [args.datasource] if args.datasource else [r["name"] for r in store.datasources.all()]


def _statuses(args: argparse.Namespace, store: MetadataStore) -> list:

    return collect_statuses(store, _names(args, store), specs_in(_dags_folder(args)))


def cmd_status(args: argparse.Namespace) -> int:
    try:
        store = _store(args)
        store.check_schema()
        reports = _statuses(args, store)
    except DependencyUnavailableError as exc:  # the metadata store: nothing to report but which and why
        if not args.json:
            raise
        print(json.dumps({"error": str(exc), "unavailableDependencies": [{**exc.to_json(), "message": str(exc)}]},
                         indent=2))
        return 1
    if args.json:
        out = [r.to_json() for r in reports]
        print(json.dumps(out[0] if args.datasource else out, indent=2))
        return 0
    if not reports:
        print("no datasources yet: a datasource appears with its DAG's first run")
    if not args.datasource:
        print(f"{'DATASOURCE':24} {'STATE':22} {'HEALTHY':8} {'LAG':>12} {'LAST PUBLISH':24}")
        for r in reports:
            published = next((x.published_at for x in r.recent_runs if x.published_at), None)
            lag = "?" if r.aggregate_lag is None else f"{r.aggregate_lag:,}"
            down = ", ".join(sorted({str((e.dependency or {}).get("dependency")) for e in r.unavailable}))
            print(f"{r.datasource:24} {r.state:22} {str(r.healthy).lower():8} {lag:>12} "
                  f"{format_datetime(published) if published else '-':24}" + (f" {down} unavailable" if down else ""))
        return 0
    r = reports[0]
    print(f"datasource {r.datasource} (stream {r.stream}): {r.state} / {r.detailed_state}, "
          f"{'healthy' if r.healthy else 'UNHEALTHY'}")
    lag = r.lag or {}
    print(f"  aggregate lag: {'unknown' if r.aggregate_lag is None else f'{r.aggregate_lag:,}'}")
    for e in r.unavailable:  # named first: it is why the lag (or the runs' progress) is unknown
        dep = e.dependency or {}
        answer = (f"refused {dep['refused']}" if dep.get("refused") else "did not answer"
                  + (f" within {dep['deadlineSeconds']:g}s" if dep.get("deadlineSeconds") else ""))
        print(f"  UNAVAILABLE: {dep.get('dependency')} at {dep.get('endpoint')} {answer}")
    if r.segments is not None:
        print(f"  segments: {r.segments.describe()}")
    if r.new_columns is not None:
        print(f"  new columns: {r.new_columns.describe()}")
    if r.spec_warnings:
        print("  spec warnings (`ingest validate` the spec file):")
        for warning in r.spec_warnings:
            print(f"    {warning}")
    print(f"  {'PARTITION':28} {'COMMITTED':>12} {'LATEST':>12} {'LAG':>10}")
    for tp in sorted(set(r.committed) | set(r.latest or {})):
        latest = (r.latest or {}).get(tp)
        print(f"  {str(tp):28} {r.committed.get(tp, '-'):>12} {'?' if latest is None else latest:>12} "
              f"{lag.get(tp, '?'):>10}")
    for run_id, groups in r.active.items():
        for g in groups:
            print(f"  in flight: {run_id} group {g.group_id}: {g.records:,} of {g.planned:,} records read, "
                  f"{g.records_per_s:,.0f}/s, lag {g.remaining:,}, splits {g.splits_done}/{g.splits} done")
    if r.recent_errors:
        print("  recent errors:")
        for e in r.recent_errors:
            print(f"    {format_datetime(e.timestamp)} {e.title}: {e.message}")
            if e.failure is not None:
                print(f"      records: {e.failure.describe_records()}")
    for tp, n in sorted(r.skipped.items()):
        print(f"  skipped (lost): {tp}: {n:,} records (`ingest skip`)")
    if r.lost:
        print(f"  LOST RECORDS: {r.lost_records:,} in all (read nowhere; `recent errors` says which and why)")
        for tp, n in sorted(r.lost.items()):
            print(f"    {tp}: {n:,}")
    print("  recent runs:")
    for run in r.recent_runs:
        stats = ", ".join(f"{k} {v}" for k, v in sorted(run.row_stats.items())) or "no row stats"
        print(f"    {run.run_id}: {run.status}, {run.records} records ({stats})"
              + (f" - {run.error}" if run.error else ""))
    return 0


def cmd_health(args: argparse.Namespace) -> int:
    store = _store(args)
    store.check_schema()
    unhealthy = 0
    for r in _statuses(args, store):
        unhealthy += not r.healthy
        print(f"{r.datasource}: {'healthy' if r.healthy else 'UNHEALTHY'} ({r.state} / {r.detailed_state})")
        failed = next((e for e in r.recent_errors if e.failure is not None), None)
        if failed is not None:  # the latest failed task group: which records, and why
            print(f"  last failure: {failed.title}: {failed.message}\n  records: {failed.failure.describe_records()}")
    return 1 if unhealthy else 0


def cmd_segments(args: argparse.Namespace) -> int:

    store = _store(args)
    store.check_schema()
    segs = store.segment_records.of(args.datasource, used_only=not args.all)
    if args.json:
        print(json.dumps([{"id": s.id, "interval": f"{format_datetime(s.interval_start)}/"
                                                    f"{format_datetime(s.interval_end)}",
                           "version": s.version, "partitionNum": s.partition_num, "rows": s.num_rows,
                           "bytes": s.size_bytes, "used": s.used, "runId": s.run_id, "location": s.location,
                           "types": recorded_types(s)}
                          for s in segs], indent=2))
        return 0
    for s in segs:
        print(f"{s.id}  rows {s.num_rows:,}  {s.size_bytes:,} B  {'used' if s.used else 'unused'}  {s.location}")
    print(f"{len(segs)} segments, {sum(s.num_rows for s in segs):,} rows")

    health = segment_health(store, args.datasource, spec_for(store, args.datasource, specs_in(_dags_folder(args))))
    print(f"\n{'VISIBLE, PER INTERVAL':49} {'SEGMENTS':>8} {'ROWS':>12} {'AVG BYTES':>12}")
    for i in health.intervals:
        interval = f"{format_datetime(i.interval_start)}/{format_datetime(i.interval_end)}"
        print(f"{interval:49} {i.segments:>8} {i.rows:>12,} {i.average_bytes:>12,}")
    print(health.describe())
    try:
        schema = DatasourceReader(store, args.datasource).schema()
    except (OSError, ValueError) as exc:  # a segment recorded before types were, its file gone or not Parquet
        print(f"\nSCHEMA: not shown: a segment's file could not be read ({exc})")
        return 0
    if schema:
        print(f"\n{'SCHEMA (merged over the visible segments)':49} TYPE")
        for column, t in schema.items():
            print(f"{column:49} {t}")
    return 0


def cmd_dead_letters(args: argparse.Namespace) -> int:

    store = _store(args)
    store.check_schema()
    views, total = dead_letters(store, args.datasource, args.run, None if args.limit <= 0 else args.limit)
    if args.json:
        print(json.dumps([v.to_json() for v in views], indent=2))
        return 0
    for v in views:
        print(v.line())
    shown = f"the last {len(views)} of {total}" if len(views) < total else f"{total}"
    print(f"{shown} dead letters" + (f" of run {args.run}" if args.run else "")
          + (" (--limit 0 shows all)" if len(views) < total else ""))
    return 0


def cmd_query(args: argparse.Namespace) -> int:
    # DuckDB, Arrow and sqlglot: only queries need them
    from ingest_core.service.sql_worker import DirectFork, SqlJob, SqlWorker

    store = _store(args)
    store.check_schema()
    zone = args.time_zone
    output = (ResultFormat("object", time_zone=zone) if args.json else
              ResultFormat("csv", header=True, time_zone=zone) if args.csv else ResultFormat(TABLE, time_zone=zone))
    # in a process of its own, as the REST API's: the time limit stops Python's work (sketch functions) too
    job = SqlJob(store.url, _dags_folder(args), args.sql,
                 functools.partial(write_result, fmt=output), time_zone=zone,
                 timeout_s=None if args.timeout <= 0 else args.timeout,
                 max_rows=None if args.max_rows <= 0 else args.max_rows)
    text, last = codecs.getincrementaldecoder("utf-8")(), "\n"
    with SqlWorker(DirectFork()).run(job) as result:
        for chunk in result.chunks:
            print(text.decode(chunk), end="")
            last = chr(chunk[-1]) if chunk else last
    print(text.decode(b"", final=True), end="" if last == "\n" else "\n")  # Druid's object and array end without one
    if result.truncated:
        print(f"(stopped at --max-rows {args.max_rows}: the query has more rows)", file=sys.stderr)
    return 0


def _store_and_spec(args: argparse.Namespace) -> tuple[MetadataStore, DatasourceSpec | None]:
    """The store (schema checked) and the spec of `args.datasource`: the DAG folder's, else the last one the
    store registered (None: neither)."""
    store = _store(args)
    store.check_schema()
    store.datasources.require(args.datasource)
    return store, spec_for(store, args.datasource, specs_in(_dags_folder(args)))


def cmd_iceberg_sync(args: argparse.Namespace) -> int:

    store, spec = _store_and_spec(args)
    if spec is None or not spec.microbatch.iceberg_on:
        raise IngestError(f"datasource {args.datasource!r} has no Iceberg table: set microbatch.iceberg in its spec")
    done = iceberg.sync(store, spec)
    if done.snapshot_id is None:
        print(f"{done.table}: nothing published yet, no table")
    else:
        print(f"{done.table}: {done.added} files added, {done.removed} removed; snapshot {done.snapshot_id} "
              f"(commit version {done.commit_version})" + ("" if done.changed else ": already level"))
    return 0


def cmd_cleanup(args: argparse.Namespace) -> int:

    store, spec = _store_and_spec(args)
    if spec is None:  # its deep storage is in the spec
        raise IngestError(f"no spec for datasource {args.datasource!r} in {_dags_folder(args)} or the metadata store")
    orphans = find_orphans(store, spec)
    for o in orphans:
        print(f"{'remove' if args.yes else 'would remove'} {o.uri} (run {o.run_id})")
    if args.yes:
        remove_orphans(store, args.datasource, orphans, _actor(args))
        print(f"removed {len(orphans)} attempt folders that nothing was published from")
    else:
        print(f"{len(orphans)} attempt folders of final runs hold nothing published"
              + ("; --yes removes them" if orphans else ""))
    return 0


def cmd_action(args: argparse.Namespace) -> int:

    store = _store(args)
    store.check_schema()
    specs = specs_in(_dags_folder(args))  # the consumer group each spec names follows the offsets
    actions = DatasourceActions(store, None if args.no_airflow else AirflowCliDags(), _actor(args), specs)
    command = ACTION_COMMANDS[args.command]
    spec = spec_for(store, args.datasource, specs) if command.spec else None
    if command.spec and spec is None:
        raise IngestError(f"no spec for datasource {args.datasource!r} in {_dags_folder(args)} or the metadata store")
    result = command.run(actions, args, spec)
    if result is None:
        return 1
    print(result)
    for warning in result.warnings:
        print(f"WARNING: {warning}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = UsageParser(prog="ingest", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", help="check datasource spec files (or folders of them)")
    p.add_argument("specs", nargs="+")
    p.add_argument("--connect", action="store_true",
                   help="also check that the schema registries the specs' decoders name answer and hold the "
                        "subjects of their topics")
    p.add_argument("--strict", action="store_true",
                   help="unknown fields are errors (as DAG parsing with INGEST_STRICT_SPECS=true); without it "
                        "they are warnings, as Druid ignores them")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("convert", help="print a spec in today's form (Druid's deprecated parser rewritten)")
    p.add_argument("spec")
    p.set_defaults(func=cmd_convert)

    db = sub.add_parser("db", help="metadata store schema").add_subparsers(dest="db_command", required=True)
    p = db.add_parser("upgrade", help="create or upgrade the schema")
    p.set_defaults(func=cmd_db_upgrade)
    add_db_clean_parser(db, cmd_db_clean)

    p = sub.add_parser("plan", help="plan one run (or show its persisted plan)")
    p.add_argument("spec")
    p.add_argument("--run-id", required=True)
    p.add_argument("--end-time", help="cap end offsets at the offsets at this ISO-8601 time")
    p.add_argument("--max-records", type=int, help="cap the run at this many records")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plan)

    for command, func, help_text in (("status", cmd_status, "status report of one or every datasource"),
                                     ("health", cmd_health, "exit 0 when healthy, 1 when not")):
        p = sub.add_parser(command, help=help_text)
        p.add_argument("datasource", nargs="?")
        p.add_argument("--dags-folder")
        if command == "status":
            p.add_argument("--json", action="store_true")
        p.set_defaults(func=func)

    p = sub.add_parser("segments", help="the segments of a datasource")
    p.add_argument("datasource")
    p.add_argument("--all", action="store_true", help="also unused (overshadowed or dropped) segments")
    p.add_argument("--json", action="store_true")
    p.add_argument("--dags-folder", help="the specs (their compaction section: what is left to compact)")
    p.set_defaults(func=cmd_segments)

    p = sub.add_parser("dead-letters", help="the dead letters of a datasource's published runs")
    p.add_argument("datasource")
    p.add_argument("--run", help="only this run's")
    p.add_argument("--limit", type=int, default=100, help="the last N (default 100; 0: all)")
    p.add_argument("--json", action="store_true", help="with the exact key and value bytes in base64")
    p.set_defaults(func=cmd_dead_letters)

    add_action_parsers(sub, cmd_action)

    p = sub.add_parser("query", help="SQL over the visible segments of datasources (DuckDB)")
    p.add_argument("sql", help="one SELECT; each datasource it names is a table, __time a timestamp (UTC)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="a JSON array of objects (Druid's resultFormat object)")
    out.add_argument("--csv", action="store_true", help="Druid's resultFormat csv, with the header row")
    p.add_argument("--max-rows", type=int, default=10_000, help="stop after N rows (default 10,000; 0: no limit)")
    p.add_argument("--timeout", type=float, default=300, help="stop the query after S seconds (default 300; 0: none)")
    p.add_argument("--time-zone", default="UTC", metavar="ZONE",
                   help="Druid's sqlTimeZone: the time functions' default zone, how TIMESTAMP literals read and "
                        "timestamps print (an IANA name; default UTC)")
    p.add_argument("--dags-folder", help="the specs: their deep storage's settings (default: "
                                         "$AIRFLOW__CORE__DAGS_FOLDER, else ./dags)")
    p.set_defaults(func=cmd_query)

    p = sub.add_parser("iceberg-sync", help="bring a datasource's Iceberg table level with what is published")
    p.add_argument("datasource")
    p.add_argument("--dags-folder")
    p.set_defaults(func=cmd_iceberg_sync)

    p = sub.add_parser("cleanup", help="remove job output of final runs that nothing was published from")
    p.add_argument("datasource")
    p.add_argument("-y", "--yes", action="store_true", help="remove (default: only list what would go)")
    p.add_argument("--dags-folder")
    p.add_argument("--actor", help="who does this, for the audit log")
    p.set_defaults(func=cmd_cleanup)
    add_global_options(parser)
    return parser


# exit codes: 1 an error (broker, store, a refused action), 2 a usage error (argparse's own, a malformed
# metadata URL or TOPIC:PARTITION=OFFSET, an unknown datasource or run), 141 the reader of stdout went away (128 +
# SIGPIPE, as a shell reports a Unix tool that SIGPIPE ended)
USAGE_ERRORS = (MetadataUrlError, UnknownDatasourceError, RunNotFoundError, OffsetSyntaxError)
EXIT_BROKEN_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    undecodable = not_text(argv)
    if undecodable is not None:
        print(f"error: the argument {shown(undecodable)} is not text in the terminal's encoding "
              f"({sys.getfilesystemencoding()}): give it as UTF-8 text", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # librdkafka logs each failed reconnect; the error this prints says it once
    LIBRDKAFKA_LOGGER.setLevel(logging.INFO if args.verbose else logging.CRITICAL)
    try:
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except BrokenPipeError:  # `ingest status | head`: stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's flush at exit must not fail
        return EXIT_BROKEN_PIPE
    except IngestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, USAGE_ERRORS) else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
