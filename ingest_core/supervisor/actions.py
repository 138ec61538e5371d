"""Operator actions on a datasource, Druid's supervisor API: suspend, resume, terminate, reset, set offsets,
and skip (the exact ranges that failed).

Each action changes the metadata store in one transaction under the datasource's lock (the same lock every
publish takes, so an action and a publish never interleave) and writes an audit record naming who did it.
Actions that move offsets (reset, set offsets) are moves of the main line (`store.main_line`, as a publish is)
that also supersede the runs in flight: their publish would compare-and-swap against offsets that are gone,
and no later run may continue from their planned ends.
Suspend, resume and terminate also pause or unpause the datasource's Airflow DAG through a `DagControl`;
`reset --to-latest --backfill` triggers its backfill run there.
A move forward past offsets nothing published loses them: it is audited (`records_lost`, `core.loss`) in the same
transaction. After each action that moves the offsets, the Kafka consumer group the spec names follows them
(`kafka.consumer_group.sync_group`); one that cannot is a warning, never a failed action.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import ContextManager, Iterable, Mapping, Protocol

from ingest_core.core import json_input
from ingest_core.core.errors import IngestError, shown
from ingest_core.core.json_input import JsonInputError, JsonTooDeepError
from ingest_core.core.loss import (
    LossCause,
    LostRange,
    RecordsLost,
    moved_past,
    read_by_partition,
    subtract,
)
from ingest_core.core.offsets import (
    EARLIEST_OFFSET,
    LATEST_OFFSET,
    KnownOffset,
    MoveEffect,
    OffsetRange,
    OffsetRequest,
    PublishedRange,
    StartOffset,
    StartSource,
    TopicPartition,
    check_duplicates_confirmed,
    check_skip_confirmed,
    clamp_to_log,
    move_effect,
    offsets_to_json,
    request_problem,
    recreated_topics,
    resolve_offset_requests,
    resolve_start_offsets,
)
from ingest_core.core.periods import format_datetime
from ingest_core.core.planner import plan_run
from ingest_core.core.spec import DatasourceSpec
from ingest_core.core.states import Event, State, Stored, move
from ingest_core.kafka.consumer_group import sync_group
from ingest_core.kafka.offset_reader import KafkaOffsetReader
from ingest_core.store.audit import RESET, SKIP, cleared_by_last_reset
from ingest_core.store.main_line import MainLine
from ingest_core.core.states import GroupStatus
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.schema import utcnow
from ingest_core.store.records import run_succeeded
from ingest_core.supervisor.planning import plan_request, spec_for

log = logging.getLogger(__name__)


class DagControl(Protocol):
    def set_paused(self, dag_id: str, paused: bool) -> None: ...

    def trigger(self, dag_id: str, run_id: str) -> None: ...


@dataclass(frozen=True)
class ActionResult:
    action: str
    datasource: str
    details: dict
    warnings: tuple[str, ...] = ()  # what the operator must know (e.g. records lost): the CLI prints them loudly

    def __str__(self) -> str:
        return f"{self.action} {self.datasource}: {self.details}"


class DatasourceActions:
    """`specs`: the DAG folder's, by datasource (else the last spec the store registered): they name the Kafka
    consumer group that the offset actions keep in step (`group_timeout_s` for the broker to answer)."""

    def __init__(self, store: MetadataStore, dags: DagControl | None, actor: str,
                 specs: Mapping[str, DatasourceSpec] | None = None, group_timeout_s: float | None = None):
        self.store, self.dags, self.actor = store, dags, actor
        self.specs, self.group_timeout_s = dict(specs or {}), group_timeout_s

    def _require(self, name: str) -> dict:
        return self.store.datasources.require(name)

    def _taken(self, name: str, event: Event) -> Stored:
        """The datasource's state, when it takes `event` (`core.states.TABLE`; else `IllegalMoveError`, before
        anything is asked or changed). A terminated supervisor has no offsets to move, for one (and a move would
        re-create the consumer group `terminate` deleted)."""
        self._require(name)
        state = self.store.datasources.state(name)
        move(state, event, name)
        return state

    def _pause(self, name: str, paused: bool) -> None:
        if self.dags is not None:
            self.dags.set_paused(name, paused)

    def _switch(self, name: str, event: Event, paused: bool) -> ActionResult:
        """Move the state by `event` (the table refuses what the state does not take) and pause or unpause."""
        before = self._taken(name, event)
        with self.store.session() as conn:
            after = self.store.datasources.set_state(name, event, conn=conn)
            self.store.audit_log.write(name, event.value, {"previousState": before[0].value,
                                                 "wasTerminated": before[0] is State.TERMINATED},
                             self.actor, conn=conn)
        self._pause(name, paused)
        return ActionResult(event.value, name, {"state": after[0].value})

    def suspend(self, name: str) -> ActionResult:
        return self._switch(name, Event.SUSPEND, True)

    def resume(self, name: str) -> ActionResult:
        """Resumes a suspended datasource, or restarts a terminated one (Druid: submitting its spec again);
        its committed offsets are kept either way."""
        return self._followed(self._switch(name, Event.RESUME, False))

    def terminate(self, name: str) -> ActionResult:
        """A tombstone: the DAG stops scheduling and no run plans again. Runs in flight may still publish. The
        consumer group is deleted (nothing consumes for it any more: its lag would alert forever); the committed
        offsets stay in the store, and `resume` mirrors them again."""
        return self._followed(self._switch(name, Event.TERMINATE, True), delete=True)

    def sync_group(self, name: str) -> ActionResult:
        """`ingest sync-group`: the consumer group made to show the committed offsets again (deleted when none
        are committed, or the datasource is terminated), after an action could not reach the broker."""
        state = self._taken(name, Event.SYNC_GROUP)
        return self._followed(ActionResult("sync-group", name, {}), delete=state[0] is State.TERMINATED)

    def _followed(self, result: ActionResult, delete: bool = False) -> ActionResult:
        """`result` with what became of the consumer group: it follows the committed offsets (`delete`: it goes).
        A group that cannot be updated is a warning naming the command that re-syncs it, never a failed action:
        the metadata store holds the offsets."""
        name, fix = result.datasource, f"`ingest sync-group {result.datasource}`"
        spec = spec_for(self.store, name, self.specs)
        if spec is None:
            return replace(result, warnings=result.warnings + (
                f"no spec for {name!r} here (DAG folder or metadata store): its Kafka consumer group was not "
                f"updated; {fix} with --dags-folder updates it",))
        committed = {} if delete else {tp: k.offset for tp, k in self.store.offsets.committed(name).items()}
        done = sync_group(spec, committed, self.group_timeout_s)
        if done.group is None:  # mirrorOffsets: false
            return result
        details = {"group": done.group, "synced": done.ok, "deleted": done.ok and done.offsets is None}
        if done.offsets:
            details["offsets"] = offsets_to_json(done.offsets)
        warnings = ()
        if not done.ok:
            details["error"] = done.error
            warnings = (f"Kafka consumer group {done.group!r} was not updated ({done.error}); the {result.action} "
                        f"itself is done (the metadata store holds the offsets), but Kafka's lag tools show the "
                        f"group's older offsets until {fix} (or the next publish) updates it",)
            log.warning("%s of %s: %s", result.action, name, warnings[0])
        return replace(result, details={**result.details, "consumerGroup": details},
                       warnings=result.warnings + warnings)

    def _lost(self, line: MainLine, event: RecordsLost) -> tuple[dict, tuple[str, ...]]:
        """Audit `event` in the move's transaction; its details and the operator's warning."""
        if not self.store.audit_log.write_loss(line.name, event, self.actor, conn=line.conn):
            return {}, ()
        return ({"lostRecords": event.records, "lostRanges": [r.to_json() for r in event.ranges]},
                (f"{event.describe()}: these records are lost (audited; counted in `ingest status`)",))

    def _main_line(self, name: str) -> ContextManager[MainLine]:
        """The transaction of an operator's move: the planning lock, then the datasource row's."""
        return MainLine.locked(self.store, name, planning_lock=True)

    def _spec(self, name: str, spec: DatasourceSpec | None) -> DatasourceSpec:
        spec = spec or spec_for(self.store, name, self.specs)
        if spec is None:
            raise IngestError(f"datasource {name!r} has no spec registered in the metadata store and none was given "
                              "(--dags-folder): its broker is needed to check the offsets; nothing was changed")
        return spec

    @staticmethod
    def _broker(spec: DatasourceSpec, topics: Iterable[str], reader: KafkaOffsetReader | None) -> "BrokerView":
        """What the broker has of `topics` now (those that exist): partitions, log start and end, topic ids.
        `reader`: the caller's (left open); else one of our own, closed once it has answered."""
        own = reader is None
        reader = reader or KafkaOffsetReader.for_spec(spec)
        try:
            counts = reader.topics()
            present = sorted(set(topics) & set(counts))
            tps = [TopicPartition(t, p) for t in present for p in range(counts[t])]
            snap = reader.snapshot(tps)
            return BrokerView(counts, snap.earliest, snap.latest, reader.topic_ids(present))
        finally:
            if own:
                reader.close()

    def reset(self, name: str, spec: DatasourceSpec | None = None, *, reader: KafkaOffsetReader | None = None,
              confirm_duplicates: int | None = None, confirm_skip: int | bool | None = None) -> ActionResult:
        """Druid's hard reset: forget the committed offsets; the next run starts from earliest or latest
        (useEarliestOffset). From earliest it ingests again what was published: it runs only when that number of
        duplicates is confirmed (`confirm_duplicates`); from latest the records in between are skipped (counted
        when the next run publishes): it runs only when the skip is confirmed (`confirm_skip`:
        `offsets.check_skip_confirmed`)."""
        self._taken(name, Event.RESET)
        spec = self._spec(name, spec)
        stored = set(self.store.offsets.committed(name)) | {c.tp for c in self.store.offsets.claims(name)}
        view = self._broker(spec, {tp.topic for tp in stored}, reader)
        with self._main_line(name) as line:
            before, claims = line.committed(), self.store.offsets.claims(name, conn=line.conn)
            to = view.earliest if spec.io_config.use_earliest_offset else view.latest
            effect = move_effect({tp: to[tp] for tp in set(before) | {c.tp for c in claims} if tp in to}, before,
                                 view.earliest, view.latest, view.topic_ids, claims)
            what = (f"reset of {name!r} (the next run starts from the "
                    f"{'earliest' if spec.io_config.use_earliest_offset else 'latest'} offsets)")
            check_duplicates_confirmed(what, effect, confirm_duplicates)
            check_skip_confirmed(what, effect, confirm_skip)
            # the next run may start from earliest: every claim is released
            move = line.move(None, by=f"reset by {self.actor}", reason="the datasource's offsets were reset")
            details = {"clearedOffsets": offsets_to_json({tp: k.offset for tp, k in before.items()}),
                       "supersededRuns": move.superseded, "releasedRanges": _ranges(move.released),
                       **_effect_json(effect)}
            self.store.audit_log.write(name, RESET, details, self.actor, conn=line.conn)
        # what the next run skips is counted when it publishes (the publisher compares with clearedOffsets)
        return self._followed(ActionResult("reset", name, details, _effect_warnings("reset", name, effect)))

    def reset_to_latest(self, name: str, spec: DatasourceSpec, *, backfill: bool,
                        reader: KafkaOffsetReader | None = None) -> ActionResult:
        """The main line jumps to the latest offsets. With `backfill`, the skipped range (from where the next
        run would have started to the new offsets) becomes one bounded backfill run, planned in the same
        transaction and triggered in Airflow. Runs in flight are superseded: their ranges are in the backfill,
        and their publish is refused. A publish that got in first (it holds the same lock) simply moves the
        backfill's start. So every offset is ingested once: Druid's own reset-to-latest admits duplicates.
        `reader`: the caller's (it stays open); else one of its own, closed once it has answered."""
        self._taken(name, Event.RESET_TO_LATEST)
        view = self._stream(spec, reader)
        now = utcnow()
        with self._main_line(name) as line:
            jump = jump_to_latest(spec, line.committed(), view)
            # releases only a re-created topic's claims, in practice
            move = line.move(jump.target, by=f"reset-to-latest by {self.actor}",
                             reason="the datasource was reset to the latest offsets", topic_ids=view.topic_ids)
            plan = None
            if backfill and jump.skipped:
                plan = plan_run(plan_request(
                    spec, f"reset_backfill__{format_datetime(now)}", now,
                    starts={tp: StartOffset(start, StartSource.BACKFILL) for tp, (start, _) in jump.skipped.items()},
                    latest={tp: end for tp, (_, end) in jump.skipped.items()}))
                self.store.runs.insert(plan, conn=line.conn)
            loss, lost_warnings = self._lost(line, RecordsLost(LossCause.RESET_TO_LATEST, jump.lost(
                read_by_partition(self.store.offsets.claims(name, conn=line.conn)), backfilled=plan is not None)))
            details = {**jump.to_json(), "backfillRun": plan.run_id if plan else None,
                       "supersededRuns": move.superseded, "releasedRanges": _ranges(move.released), **loss}
            self.store.audit_log.write(name, "reset_to_latest", details, self.actor, conn=line.conn)
        warnings = jump.warnings(backfill, plan is not None) + lost_warnings
        for warning in warnings:
            log.warning("reset --to-latest of %s: %s", name, warning)
        if plan is not None and self.dags is not None:
            self.dags.trigger(name, plan.run_id)
        return self._followed(ActionResult("reset --to-latest" + (" --backfill" if backfill else ""), name, details,
                                           warnings))

    @staticmethod
    def _stream(spec: DatasourceSpec, reader: KafkaOffsetReader | None) -> "BrokerView":
        """What the broker has of the datasource's stream now: its partitions' log start and end, topic ids.
        `reader`: the caller's (left open); else one of our own, closed once it has answered."""
        io = spec.io_config
        own = reader is None
        reader = reader or KafkaOffsetReader.for_spec(spec)
        try:
            tps = reader.partitions(topic=io.topic, pattern=io.topic_pattern)
            snap = reader.snapshot(tps)
            return BrokerView({}, snap.earliest, snap.latest, reader.topic_ids(tp.topic for tp in tps))
        finally:
            if own:
                reader.close()

    def set_offsets(self, name: str, new: Mapping[TopicPartition, int] | Iterable[OffsetRequest],
                    spec: DatasourceSpec | None = None, *, reader: KafkaOffsetReader | None = None,
                    force: bool = False, confirm_duplicates: int | None = None,
                    confirm_skip: int | bool | None = None) -> ActionResult:
        """Druid's resetOffsets: the next run of these partitions starts at the given offsets (or their log start
        / end: "earliest" / "latest"; a request without a partition means each of its topic's). Checked against
        the broker first (`offsets.resolve_offset_requests`): an offset past the log end or below the log start,
        an unknown topic or partition, a topic the datasource does not read are refused unless `force` (audited:
        `forced`; an offset outside the log is set to the log's nearer end instead, `clamped`, as Kafka's
        `kafka-consumer-groups --reset-offsets` does); a negative offset always. Moving back over published records
        ingests them again: it runs only when their number is confirmed (`confirm_duplicates`); moving forward past
        records nothing ingested skips them: it runs only when the skip is confirmed (`confirm_skip`). The topic
        ids are recorded with the offsets, so this is also how a re-created topic is taken up again
        (`TopicRecreatedError`)."""
        self._taken(name, Event.SET_OFFSETS)
        requests = [OffsetRequest(tp.topic, tp.partition, off) for tp, off in new.items()] if isinstance(
            new, Mapping) else list(new)
        if not requests:
            raise IngestError("no offsets given: use TOPIC:PARTITION=OFFSET")
        malformed = [f"{r}: {problem}" for r in requests if (problem := request_problem(r))]
        if malformed:  # before the broker is asked about them: no Kafka log has such a topic or offset
            raise IngestError(f"set-offsets of {name!r} refused, nothing was changed: " + "; ".join(malformed) + ".")
        spec = self._spec(name, spec)
        view = self._broker(spec, {r.topic for r in requests}, reader)
        target, problems = resolve_offset_requests(name, requests, broker_partitions=view.partitions,
                                                   in_spec=spec.io_config.reads_topic, earliest=view.earliest,
                                                   latest=view.latest, clamp=force)
        refused = [p for p in problems if not (force and p.forcible)]
        if refused:
            hint = (" `--force` (REST: \"force\": true) sets them anyway, audited (an offset outside the log: to the "
                    "log's nearer end, as Kafka's kafka-consumer-groups --reset-offsets does)."
                    if all(p.forcible for p in refused) else "")
            raise IngestError(f"set-offsets of {name!r} refused, nothing was changed: "
                              + "; ".join(p.message for p in refused) + "." + hint)
        with self._main_line(name) as line:
            before = line.committed()
            effect = move_effect(target, before, view.earliest, view.latest, view.topic_ids,
                                 self.store.offsets.claims(name, conn=line.conn))
            check_duplicates_confirmed(f"set-offsets of {name!r}", effect, confirm_duplicates)
            check_skip_confirmed(f"set-offsets of {name!r}", effect, confirm_skip)
            recreated = recreated_topics({tp: k for tp, k in before.items() if tp in target}, view.topic_ids)
            # forward past offsets nothing published: lost, from where the main line stood (or stood before a hard
            # reset cleared it; a re-created topic's old offsets describe another log: from its new log start)
            stood = {**cleared_by_last_reset(self.store.audit_log.records(name, action=RESET, limit=1, conn=line.conn)),
                     **{tp: k.offset for tp, k in before.items()}}
            stood.update({tp: view.earliest[tp] for tp in target if tp.topic in recreated and tp in view.earliest})
            # what was published counts as read, though not what was published from a re-created topic's old log
            claims = [c for c in self.store.offsets.claims(name, conn=line.conn) if c.tp.topic not in recreated]
            lost = moved_past(stood, target, read_by_partition(claims), log_end=view.latest)
            # the claims at and above them are released: the operator asked to read them again
            move = line.move(target, by=f"set-offsets by {self.actor}",
                             reason="the datasource's offsets were set by an operator", topic_ids=view.topic_ids)
            loss, loss_warnings = self._lost(line, RecordsLost(LossCause.SET_OFFSETS, tuple(lost)))
            details = {"requested": [str(r) for r in requests],
                       "before": offsets_to_json({tp: before[tp].offset for tp in target if tp in before}),
                       "after": offsets_to_json(target), "supersededRuns": move.superseded,
                       "releasedRanges": _ranges(move.released), **_effect_json(effect), **loss}
            if recreated:
                details["topicIds"] = {t: {"from": old, "to": now} for t, (old, now) in recreated.items()}
            if any(p.clamp is None for p in problems):
                details["forced"] = [p.message for p in problems if p.clamp is None]
            if any(p.clamp for p in problems):
                details["clamped"] = [p.clamp.to_json() for p in problems if p.clamp]
            self.store.audit_log.write(name, "set_offsets", details, self.actor, conn=line.conn)
        # skipped records are the loss warnings; the effect's own are the confirmed re-reads
        warnings = loss_warnings + _effect_warnings("set-offsets", name, replace(effect, skipped=())) + tuple(
            f"{'clamped' if p.clamp else 'forced'}: {p.message}" for p in problems)
        for warning in warnings:
            log.warning("set-offsets of %s: %s", name, warning)
        return self._followed(ActionResult("set-offsets", name, details, warnings))


    def failed_ranges(self, name: str) -> list["FailedRange"]:
        """What `skip` would skip now (see `skippable`), read outside any lock: for the operator to confirm."""
        self._taken(name, Event.SKIP)
        return skippable(failed_group_ranges(self.store, name), self.store.offsets.committed(name))

    def skip(self, name: str, expect: list["FailedRange"] | None = None) -> ActionResult:
        """Move the committed offsets past exactly the ranges that failed (the failed runs' planned [start, end)
        of their failed groups, where the main line still stands at their start), as set-offsets does: under
        the lock, superseding the runs in flight. The records skipped are lost: audited (`skippedRanges`) and
        counted in status (`skippedRecords`). `expect`: the ranges the operator confirmed; anything else (a
        run published or failed since) refuses, so nothing is skipped that was not shown."""
        self._taken(name, Event.SKIP)
        failed = failed_group_ranges(self.store, name)
        with self._main_line(name) as line:
            ranges = skippable(failed, line.committed())
            if not ranges:
                raise IngestError(f"datasource {name!r} has nothing to skip: no failed run's range starts where its "
                                  "committed offsets stand (`ingest status` shows the recent errors)")
            if expect is not None and sorted(expect) != sorted(ranges):
                raise IngestError(f"the failed ranges of {name!r} changed since they were shown (now: "
                                  f"{', '.join(map(str, ranges))}); nothing was skipped: run `ingest skip` again")
            move = line.move({f.range.tp: f.range.end for f in ranges}, by=f"skip by {self.actor}",
                             reason="an operator skipped the failed ranges (`ingest skip`)")
            self._lost(line, RecordsLost(LossCause.SKIP, tuple(LostRange(f.range.tp, f.range.start, f.range.end)
                                                               for f in ranges)))
            details = {"skippedRanges": [{**f.range.to_json(), "runId": f.run_id} for f in ranges],
                       "skippedRecords": sum(f.range.size for f in ranges), "supersededRuns": move.superseded,
                       "releasedRanges": _ranges(move.released)}
            self.store.audit_log.write(name, SKIP, details, self.actor, conn=line.conn)
        warnings = tuple(f"{f}: skipped, these records are lost (audited)" for f in ranges)
        for warning in warnings:
            log.warning("skip of %s: %s", name, warning)
        return self._followed(ActionResult("skip", name, details, warnings))


@dataclass(frozen=True)
class BrokerView:
    """What the broker has of some topics now: partition counts (every topic), log start and end and topic ids
    (the topics asked about)."""

    partitions: dict[str, int]
    earliest: dict[TopicPartition, int]
    latest: dict[TopicPartition, int]
    topic_ids: dict[str, str]


@dataclass(frozen=True)
class LatestJump:
    """Where `reset --to-latest` moves the main line, decided from the committed offsets and the broker's view
    (pure). Offsets that left the log (retention, a re-created topic) stop every run: getting past them is what
    this reset is for, so they are moved into the log (`below`, `beyond`), and what that loses is reported."""

    target: dict[TopicPartition, int]
    skipped: dict[TopicPartition, tuple[int, int]]  # [where the main line stood, target) per partition
    below: tuple  # `offsets.clamp_to_log` moves: committed below the log start (removed before ingestion)
    beyond: tuple  # committed beyond the log end (the topic was re-created?)
    recreated: dict[str, tuple[str | None, str]]  # topic -> (old id, new id)

    def lost(self, read: Mapping[TopicPartition, list], backfilled: bool) -> tuple[LostRange, ...]:
        """What nothing will read: the removed ranges, and (no backfill reads them) what the main line jumps."""
        out = [r for m in self.below for r in subtract(m.tp, m.from_offset, m.earliest, read.get(m.tp, ()))]
        if not backfilled:
            out += [r for tp, (s, e) in sorted(self.skipped.items()) for r in subtract(tp, s, e, read.get(tp, ()))]
        return tuple(sorted(out))

    def to_json(self) -> dict:
        out = {"from": offsets_to_json({tp: s for tp, (s, _) in self.skipped.items()}),
               "to": offsets_to_json(self.target), "skippedRecords": sum(e - s for s, e in self.skipped.values()),
               "removedBeforeIngestion": _ranges_json((m.tp, [m.from_offset, m.earliest]) for m in self.below),
               "removedRecords": sum(m.earliest - m.from_offset for m in self.below),
               "beyondLogEnd": _ranges_json((m.tp, [m.from_offset, m.latest]) for m in self.beyond)}
        if self.recreated:
            out["topicIds"] = {t: {"from": old, "to": now} for t, (old, now) in self.recreated.items()}
        return out

    def warnings(self, backfill: bool, backfilled: bool) -> tuple[str, ...]:
        out = [f"partition {m.tp}: records {m.from_offset}..{m.earliest - 1} ({m.earliest - m.from_offset} "
               f"records) were removed (retention or delete_records) before they were ingested: they are lost"
               + (f"; the backfill starts at {m.earliest}" if backfilled and m.tp in self.skipped else "")
               for m in self.below]
        out += [f"partition {m.tp}: committed offset {m.from_offset} is beyond the log end offset {m.latest} "
                f"(the topic was re-created?): it described another log, of which nothing is backfilled; the "
                f"main line continues from {m.latest}" for m in self.beyond]
        out += [f"topic {t!r} was deleted and re-created (topic id {old} -> {now}): its committed offsets "
                f"described the old log; the new log is skipped from its start" + (" and backfilled" if backfilled
                                                                                    else "")
                for t, (old, now) in sorted(self.recreated.items())]
        if backfill and not backfilled:
            out.append("nothing to backfill: no records are left in the log between where the main line stood "
                       "and the latest offsets")
        return tuple(out)


def jump_to_latest(spec: DatasourceSpec, before: Mapping[TopicPartition, KnownOffset],
                   view: "BrokerView") -> LatestJump:
    """`reset --to-latest`'s move from the committed offsets `before` to the latest ones of `view`."""
    io, tps = spec.io_config, sorted(view.latest)
    # a topic deleted and re-created: its offsets describe the old log; the new one is read from its start
    recreated = recreated_topics(before, view.topic_ids)
    committed, moved = clamp_to_log({tp: k for tp, k in before.items() if tp.topic not in recreated},
                                    view.earliest, view.latest)
    # where the main line stands, ignoring runs in flight (the move supersedes them)
    starts = resolve_start_offsets(tps, datasource=spec.datasource, inflight={}, committed=committed,
                                   earliest=view.earliest, latest=view.latest, use_earliest=io.use_earliest_offset,
                                   reset_automatically=spec.tuning_config.reset_offset_automatically).starts
    starts.update({tp: StartOffset(view.earliest[tp], StartSource.NEW_PARTITION) for tp in tps
                   if tp.topic in recreated})
    target = {tp: max(view.latest[tp], starts[tp].offset) for tp in tps}
    skipped = {tp: (starts[tp].offset, target[tp]) for tp in tps if starts[tp].offset < target[tp]}
    return LatestJump(target, skipped, tuple(m for m in moved if m.from_offset < m.earliest),
                      tuple(m for m in moved if m.from_offset > m.latest), recreated)


def _effect_json(effect: MoveEffect) -> dict:
    """An offset move's duplicates and skips, for its audit record."""
    return {"duplicateRecords": effect.duplicates, "rereadRanges": [r.to_json() for r in effect.reread],
            "skippedRecords": effect.skipped_records, "skippedRanges": [r.to_json() for r in effect.skipped]}


def _effect_warnings(action: str, name: str, effect: MoveEffect) -> tuple[str, ...]:
    out = [f"{action} of {name}: partition {r.tp} offsets [{r.start}, {r.end}) ({r.size} records) were published "
           f"already and will be ingested again (confirmed)" for r in effect.reread]
    out += [f"{action} of {name}: partition {r.tp} offsets [{r.start}, {r.end}) ({r.size} records) are skipped: "
            f"never ingested (audited)" for r in effect.skipped]
    return tuple(out)


@dataclass(frozen=True, order=True)
class FailedRange:
    """One partition's planned range in a task group that failed."""

    range: OffsetRange
    run_id: str
    first_start: bool = False  # planned as a first start (nothing committed): skippable while nothing is

    def __str__(self) -> str:
        r = self.range
        return f"partition {r.tp} offsets [{r.start}, {r.end}) ({r.size} records) of run {self.run_id}"


def failed_group_ranges(store: MetadataStore, name: str, limit: int = 50) -> list[FailedRange]:
    """The ranges of the task groups that failed in the recent runs that failed (newest run first): the groups
    whose failure reports were kept, else (an expired run, a report never kept) every group it did not publish."""
    out = []
    for run in store.runs.recent(name, limit=limit):
        if run_succeeded(run) is not False:
            continue
        reported = {r.group_id for r in store.reports.of(name, run.run_id) if not r.succeeded}
        statuses = store.runs.group_statuses(name, run.run_id)
        for group in run.plan.groups:
            if group.is_empty or statuses.get(group.group_id) in (GroupStatus.PUBLISHED, GroupStatus.EMPTY):
                continue
            if reported and group.group_id not in reported:
                continue
            out += [FailedRange(p.range, run.run_id, p.expected_commit is None) for p in group.partitions if p.size]
    return out


def skippable(failed: list[FailedRange], committed: Mapping[TopicPartition, KnownOffset]) -> list[FailedRange]:
    """Per partition, the newest failed range that starts where the main line stands: skipping it moves the
    committed offset to its end, past exactly what failed. A range the main line has moved past (published,
    reset, skipped) is not offered."""
    chosen: dict[TopicPartition, FailedRange] = {}
    for f in failed:  # newest first
        at = committed.get(f.range.tp)
        starts_here = f.range.start == at.offset if at is not None else f.first_start
        if starts_here and f.range.tp not in chosen:
            chosen[f.range.tp] = f
    return sorted(chosen.values())


def _ranges(claims: list[PublishedRange]) -> list[dict]:
    return [{"topic": c.tp.topic, "partition": c.tp.partition, "start": c.start, "end": c.end, "runId": c.run_id}
            for c in claims]


def _ranges_json(items) -> dict[str, dict[str, list[int]]]:
    out: dict[str, dict[str, list[int]]] = {}
    for tp, value in items:
        out.setdefault(tp.topic, {})[str(tp.partition)] = value
    return out


RESET_OFFSETS_BODY = ('expected {"type": "kafka", "partitions": {"type": "end", "stream": TOPIC, "partitionOffsetMap": '
                      '{"0": OFFSET}}} (OFFSET: a number, "earliest" or "latest"), optionally "force": true, '
                      '"confirmDuplicates": N, "confirmSkip": N')


def druid_json_object(raw: bytes) -> dict:
    """A REST body as a JSON object, refusing a key given twice (JSON parsers keep the last one silently: one
    partition given two offsets must not pick one)."""
    def unique(pairs: list[tuple[str, object]]) -> dict:
        seen: dict = {}
        for key, value in pairs:
            if key in seen:
                raise IngestError(f"{shown(key)} is given twice in the body ({shown(seen[key])}, {shown(value)}): "
                                  "give it once; nothing was changed")
            seen[key] = value
        return seen

    try:
        body = json_input.loads(raw, object_pairs_hook=unique)
    except JsonTooDeepError as exc:
        raise IngestError(f"{exc}: {RESET_OFFSETS_BODY}") from None
    except JsonInputError:  # not JSON, or not UTF-8
        body = None
    if not isinstance(body, dict):
        raise IngestError(f"the body is not a JSON object: {RESET_OFFSETS_BODY}")
    return body


def druid_offset_requests(body: dict) -> list[OffsetRequest]:
    """Druid's resetOffsets `partitions` as offset requests; their values are checked by `set_offsets`
    (`offsets.request_problem`: a `stream` that is not a topic name, an offset past the 64-bit range)."""
    try:
        partitions = body["partitions"]
        return [OffsetRequest(partitions["stream"], _partition(p), _offset_value(o))
                for p, o in partitions["partitionOffsetMap"].items()]
    except (KeyError, TypeError, ValueError, AttributeError):
        raise IngestError(RESET_OFFSETS_BODY) from None


def _partition(key: str) -> int:
    """A partition as the CLI reads one: ASCII digits only (`int` also takes '٣', ' 3', '1_0' and '+1')."""
    if not (key.isascii() and key.isdigit()):
        raise ValueError(key)
    return int(key)


def _offset_value(value: object) -> int | str:
    if isinstance(value, str) and value in (EARLIEST_OFFSET, LATEST_OFFSET):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(value)
    return value
