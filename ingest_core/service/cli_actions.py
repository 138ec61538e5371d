"""The operator actions' commands (`ingest reset`, `set-offsets`, `skip`, `suspend`, ...): their arguments,
their confirmations, and the supervisor's action each one calls (`supervisor.actions.DatasourceActions`)."""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable

from ingest_core.core.errors import IngestError, OffsetSyntaxError, shown
from ingest_core.core.offsets import EARLIEST_OFFSET, LATEST_OFFSET, OffsetRequest
from ingest_core.core.spec import DatasourceSpec
from ingest_core.supervisor.actions import ActionResult, DatasourceActions


def _confirm(args: argparse.Namespace, what: str) -> bool:
    if args.yes:
        return True
    if not sys.stdin.isatty():
        print(f"refusing to {what} without confirmation: pass --yes", file=sys.stderr)
        return False
    answer = input(f"{what}? Type the datasource name to confirm: ")
    return answer.strip() == args.datasource


def _reset(actions: DatasourceActions, args: argparse.Namespace, spec: DatasourceSpec | None) -> ActionResult | None:
    name = args.datasource
    if args.to_latest:
        what = "ingest the skipped range as a backfill run" if args.backfill else "skip the records in between"
        if not _confirm(args, f"move {name} to the latest offsets and {what}"):
            return None
        return actions.reset_to_latest(name, spec, backfill=args.backfill)
    if args.backfill:
        raise IngestError("--backfill goes with --to-latest")
    # --confirm-duplicates / --confirm-skip are the confirmation: the action refuses unless each is the number
    # it would re-read / skip
    if _counted(args) is None and not _confirm(
            args, f"reset the committed offsets of {name} (the next run starts from earliest or latest by "
                  f"useEarliestOffset)"):
        return None
    return actions.reset(name, spec, confirm_duplicates=args.confirm_duplicates, confirm_skip=_skip_confirmed(args))


def _counted(args: argparse.Namespace) -> int | None:
    """A number the operator confirmed (--confirm-duplicates or --confirm-skip): it stands for the prompt."""
    return args.confirm_duplicates if args.confirm_duplicates is not None else args.confirm_skip


def _skip_confirmed(args: argparse.Namespace) -> int | bool | None:
    """What confirms a skip (`offsets.check_skip_confirmed`): the number given, else --yes; a name typed at the
    prompt is not enough (it confirms the command, not the records it loses)."""
    return args.confirm_skip if args.confirm_skip is not None else (True if args.yes else None)


def _set_offsets(actions: DatasourceActions, args: argparse.Namespace,
                 spec: DatasourceSpec | None) -> ActionResult | None:
    new = parse_offset_assignments(args.offsets)
    if _counted(args) is None and not _confirm(
            args, f"set the offsets of {args.datasource} to {', '.join(args.offsets)}"):
        return None
    return actions.set_offsets(args.datasource, new, spec, force=args.force,
                               confirm_duplicates=args.confirm_duplicates, confirm_skip=_skip_confirmed(args))


def _skip(actions: DatasourceActions, args: argparse.Namespace, spec: DatasourceSpec | None) -> ActionResult | None:
    name = args.datasource
    ranges = actions.failed_ranges(name)
    for failed in ranges:
        print(f"would skip {failed}")
    if not ranges:
        raise IngestError(f"datasource {name!r} has nothing to skip: no failed run's range starts where its "
                          "committed offsets stand (`ingest status` shows the recent errors)")
    if not _confirm(args, f"skip these {sum(f.range.size for f in ranges)} records of {name} (they are lost)"):
        return None
    return actions.skip(name, expect=ranges)


def _terminate(actions: DatasourceActions, args: argparse.Namespace,
               spec: DatasourceSpec | None) -> ActionResult | None:
    if not _confirm(args, f"terminate {args.datasource} (its DAG stops scheduling)"):
        return None
    return actions.terminate(args.datasource)


def _sync_group(actions: DatasourceActions, args: argparse.Namespace,
                spec: DatasourceSpec | None) -> ActionResult | None:
    result = actions.sync_group(args.datasource)
    if result.warnings:  # it is the command that re-syncs: failing to is its error
        raise IngestError("; ".join(result.warnings))
    return result


@dataclass(frozen=True)
class ActionCommand:
    """An operator action's command: its help, and the adapter that confirms and calls the supervisor's action
    (None: not confirmed). `spec`: it needs the datasource's spec (its broker)."""
    help: str
    run: Callable[[DatasourceActions, argparse.Namespace, DatasourceSpec | None], ActionResult | None]
    spec: bool = False


ACTION_COMMANDS: dict[str, ActionCommand] = {
    "suspend": ActionCommand("pause the DAG and record SUSPENDED", lambda a, args, _: a.suspend(args.datasource)),
    "resume": ActionCommand("unpause the DAG (also restarts a terminated datasource)",
                            lambda a, args, _: a.resume(args.datasource)),
    "terminate": ActionCommand("tombstone: the DAG stops scheduling", _terminate),
    "reset": ActionCommand("hard reset: forget the committed offsets", _reset, spec=True),
    "set-offsets": ActionCommand("set the committed offsets of chosen partitions", _set_offsets, spec=True),
    "skip": ActionCommand("move the committed offsets past exactly the ranges that failed", _skip),
    "sync-group": ActionCommand("make the Kafka consumer group show the committed offsets again", _sync_group),
}


def _count(text: str) -> int:
    """A count the operator confirms: ASCII digits only (int() also takes '²'-like digits, '1_0' and spaces)."""
    if not re.fullmatch(r"[0-9]+", text):
        raise argparse.ArgumentTypeError(f"expected a whole number such as 120 (the number the refusal named), "
                                         f"got {shown(text)}")
    return int(text)


def add_action_parsers(sub: Any, run: Callable[[argparse.Namespace], int]) -> None:
    """One subcommand per action, each calling `run` (the CLI's `cmd_action`)."""
    for command, action in ACTION_COMMANDS.items():
        p = sub.add_parser(command, help=action.help)
        p.add_argument("datasource")
        if command == "set-offsets":
            p.add_argument("offsets", nargs="+", metavar="TOPIC:PARTITION=OFFSET",
                           help="also TOPIC:PARTITION=earliest|latest, or TOPIC=earliest|latest for every partition")
            p.add_argument("--force", action="store_true",
                           help="set offsets the broker check refuses (an unknown or another datasource's topic; "
                                "past the log end or below the log start: to the log's nearer end, as Kafka's "
                                "kafka-consumer-groups --reset-offsets does); audited")
        if command in ("reset", "set-offsets"):
            p.add_argument("--confirm-duplicates", type=_count, metavar="N",
                           help="run although it ingests N published records again (N as the refusal counted)")
            p.add_argument("--confirm-skip", type=_count, metavar="N",
                           help="run although it skips N records nothing ingested, which are then lost (N as the "
                                "refusal counted; --yes: whatever it skips)")
        if command in ("reset", "set-offsets", "terminate", "skip"):
            p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
        if command == "reset":
            p.add_argument("--to-latest", action="store_true", help="jump the committed offsets to the latest")
            p.add_argument("--backfill", action="store_true",
                           help="with --to-latest: ingest the skipped range as one bounded backfill run")
        p.add_argument("--dags-folder", help="the specs (default: $AIRFLOW__CORE__DAGS_FOLDER, else ./dags)")
        p.add_argument("--actor", help="who does this, for the audit log")
        p.add_argument("--no-airflow", action="store_true", help="only the metadata store: leave the DAG alone")
        p.set_defaults(func=run)


# a topic (no ':' or '=' in a Kafka topic name), an optional partition, and an offset, in ASCII digits (int() and
# str.isdigit() also take '²' or '٣'); a negative number parses, for the action to say why it cannot be
OFFSET_ASSIGNMENT = re.compile(r"(?P<topic>[^:=]+)(?::(?P<partition>-?[0-9]+))?=(?P<offset>-?[0-9]+|"
                               f"{EARLIEST_OFFSET}|{LATEST_OFFSET})")


def parse_offset_assignments(items: list[str]) -> list[OffsetRequest]:
    """`topic:partition=offset`, `topic:partition=earliest|latest`, or `topic=...` for every partition of the
    topic. Only the syntax is checked here; the values are checked against the broker by `set_offsets`."""
    out: list[OffsetRequest] = []
    for item in items:
        m = OFFSET_ASSIGNMENT.fullmatch(item)
        if m is None:
            raise OffsetSyntaxError(
                f"{shown(item)} is not TOPIC:PARTITION=OFFSET (e.g. wikipedia:0=1200, in digits 0-9), "
                f"TOPIC:PARTITION=earliest|latest, or TOPIC=earliest|latest (every partition of the topic)")
        partition, value = m["partition"], m["offset"]
        out.append(OffsetRequest(m["topic"], None if partition is None else int(partition),
                                 value if value in (EARLIEST_OFFSET, LATEST_OFFSET) else int(value)))
    return out
