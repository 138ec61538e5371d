"""The state tables: a datasource's supervisor states and a run's statuses, each move allowed only from the states
listed for it. Every caller moves through here (`move`, `move_run`); the store persists the result. Pure: no I/O.

The supervisor (Druid's vocabulary; `docs/supervisor.md` has the table):

    PENDING --first loop--> RUNNING/CONNECTING_TO_STREAM --planned--> RUNNING
    RUNNING --published nothing--> IDLE --published rows--> RUNNING
    RUNNING --nothing new, not yet idle (idleConfig)--> RUNNING
    PENDING/RUNNING/IDLE --suspend--> SUSPENDED --resume--> RUNNING
    any --terminate--> TERMINATED --resume--> RUNNING
    SUSPENDED, TERMINATED: a run still in flight may publish; its outcome leaves the state as it is.
    TERMINATED refuses suspend and every move of the offsets (reset, reset --to-latest, set-offsets, skip).

Derived states (`effective_state`), never stored: `status` shows UNHEALTHY_SUPERVISOR (detailed
UNABLE_TO_CONNECT_TO_STREAM before any loop succeeded, else LOST_CONTACT_WITH_STREAM or the error's own) when
loops fail `unhealthinessThreshold` times in a row, and UNHEALTHY_TASKS when runs do; TERMINATED and SUSPENDED
win over both. Druid's STOPPING has no counterpart: nothing here shuts down (an Airflow run is one loop, and
suspending takes effect before the next one).

A run: PLANNED -> RUNNING -> PUBLISHED, or FAILED (retried: RUNNING again, or publishes), SUPERSEDED (its starts
no longer match the committed offsets) or EXPIRED (in flight past its deadline, completionTimeout: FAILED for
good). PUBLISHED, SUPERSEDED and EXPIRED are final.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Mapping

from ingest_core.core.errors import IngestError, shown


class State(StrEnum):
    """Druid's basic supervisor states (`SupervisorStateManager.BasicState`) as this system has them."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    IDLE = "IDLE"
    SUSPENDED = "SUSPENDED"
    TERMINATED = "TERMINATED"
    UNHEALTHY_SUPERVISOR = "UNHEALTHY_SUPERVISOR"
    UNHEALTHY_TASKS = "UNHEALTHY_TASKS"


class DetailedState(StrEnum):
    """Druid's detailed states (`SeekableStreamSupervisorStateManager.SeekableStreamState` and the basic ones)."""

    PENDING = "PENDING"
    CONNECTING_TO_STREAM = "CONNECTING_TO_STREAM"
    RUNNING = "RUNNING"
    IDLE = "IDLE"
    SUSPENDED = "SUSPENDED"
    TERMINATED = "TERMINATED"
    UNABLE_TO_CONNECT_TO_STREAM = "UNABLE_TO_CONNECT_TO_STREAM"
    LOST_CONTACT_WITH_STREAM = "LOST_CONTACT_WITH_STREAM"
    UNHEALTHY_SUPERVISOR = "UNHEALTHY_SUPERVISOR"
    UNHEALTHY_TASKS = "UNHEALTHY_TASKS"


class Event(StrEnum):
    """What happens to a datasource: the loop's steps, and operators' actions (those that move offsets or sync the
    consumer group keep the state; the table says in which states they are taken at all)."""

    CONNECTING = "connecting"  # the first loop asks the broker for partitions
    PLANNED = "planned"  # a loop planned a run
    PUBLISHED = "published"  # a run published rows
    PUBLISHED_NOTHING = "published_nothing"  # a run had nothing to read: the datasource is idle
    NOTHING_NEW = "nothing_new"  # a run had nothing to read, but idleConfig does not make it idle (yet)
    SUSPEND = "suspend"
    RESUME = "resume"
    TERMINATE = "terminate"
    RESET = "reset"
    RESET_TO_LATEST = "reset --to-latest"
    SET_OFFSETS = "set-offsets"
    SKIP = "skip"
    SYNC_GROUP = "sync-group"
    LOOP = "loop"  # a loop starts: the data gate looks, the plan step plans a run

Stored = tuple[State, DetailedState]
STAY = None  # the move keeps the state


@dataclass(frozen=True)
class Refused:
    """A move the state does not take, and what the operator does instead."""

    why: str


LIVE = (State.PENDING, State.RUNNING, State.IDLE)
_LOOP = {Event.CONNECTING: (State.RUNNING, DetailedState.CONNECTING_TO_STREAM),
         Event.PLANNED: (State.RUNNING, DetailedState.RUNNING),
         Event.PUBLISHED: (State.RUNNING, DetailedState.RUNNING),
         Event.PUBLISHED_NOTHING: (State.IDLE, DetailedState.IDLE),
         Event.NOTHING_NEW: (State.RUNNING, DetailedState.RUNNING)}
_OFFSET_MOVES = (Event.RESET, Event.RESET_TO_LATEST, Event.SET_OFFSETS, Event.SKIP)
_LOOP_SUSPENDED = Refused("datasource {name} is suspended: `ingest resume {name}` resumes it")
_LOOP_TERMINATED = Refused("datasource {name} is terminated: nothing runs until `ingest resume {name}`")
_TERMINATED = Refused("the datasource is terminated; `ingest resume {name}` restarts it (its committed offsets are "
                      "kept), then {action}")

# (from-state, event) -> the stored state after it, STAY, or Refused. A pair that is not here is a bug: `move`
# raises for it too.
TABLE: Mapping[tuple[State, Event], Stored | Refused | None] = {
    **{(s, e): to for s in LIVE for e, to in _LOOP.items()},
    **{(s, e): STAY for s in (State.SUSPENDED, State.TERMINATED) for e in _LOOP},  # a run in flight still publishes
    **{(s, Event.SUSPEND): (State.SUSPENDED, DetailedState.SUSPENDED) for s in LIVE},
    (State.SUSPENDED, Event.SUSPEND): STAY,
    (State.TERMINATED, Event.SUSPEND): _TERMINATED,
    **{(s, Event.RESUME): STAY for s in LIVE},
    **{(s, Event.RESUME): (State.RUNNING, DetailedState.RUNNING) for s in (State.SUSPENDED, State.TERMINATED)},
    **{(s, Event.TERMINATE): (State.TERMINATED, DetailedState.TERMINATED) for s in (*LIVE, State.SUSPENDED)},
    (State.TERMINATED, Event.TERMINATE): STAY,
    **{(s, e): STAY for s in (*LIVE, State.SUSPENDED) for e in _OFFSET_MOVES},
    **{(State.TERMINATED, e): _TERMINATED for e in _OFFSET_MOVES},
    **{(s, Event.SYNC_GROUP): STAY for s in (*LIVE, State.SUSPENDED, State.TERMINATED)},
    **{(s, Event.LOOP): STAY for s in LIVE},
    (State.SUSPENDED, Event.LOOP): _LOOP_SUSPENDED,
    (State.TERMINATED, Event.LOOP): _LOOP_TERMINATED,
}


class IllegalMoveError(IngestError):
    """A move its from-state does not take; nothing was changed."""

    code = "INGEST_ILLEGAL_MOVE"


def stored_state(state: str | None, detailed: str | None) -> Stored:
    """A datasource row's stored state (None: no row yet, PENDING)."""
    if state is None:
        return State.PENDING, DetailedState.PENDING
    return State(state), DetailedState(detailed or state)


def move(current: Stored, event: Event, name: str = "the datasource") -> Stored:
    """The stored state after `event` from `current`; `IllegalMoveError` when `current` does not take it."""
    why = refusal(current[0], event, name)
    if why is not None:
        raise IllegalMoveError(f"{event.value} of {shown(name)} refused, nothing was changed: {why}")
    to = TABLE[current[0], event]
    return current if to is STAY else to


def refusal(state: State, event: Event, name: str = "the datasource") -> str | None:
    """Why a datasource in `state` does not take `event` (None: it does)."""
    to = TABLE.get((state, event), Refused(f"{state.value} does not take {event.value}"))
    return to.why.format(name=name, action=_verb(event)) if isinstance(to, Refused) else None


def _verb(event: Event) -> str:
    return "move its offsets" if event in _OFFSET_MOVES else f"{event.value} it"


# the detailed states of a datasource that has not yet completed a loop
FIRST_LOOP_STATES = (DetailedState.PENDING, DetailedState.CONNECTING_TO_STREAM)

LOOP_ERROR = "loop_error"  # the audit action of a failed loop (a plan step that raised)
# the audit action of a loop its data gate ended idle (nothing new by maxWait), written only while the health
# rules need successful loops after a failed one (`supervisor.gate.heals_health`)
LOOP_IDLE = "loop_idle"


def after_nothing_to_read(idle_enabled: bool | None, inactive_after: timedelta, last_active: datetime | None,
                          now: datetime) -> Event:
    """The event of a run that found nothing to read. With `ioConfig.idleConfig` (`idle_enabled` not None), Druid's
    rule (`SeekableStreamSupervisor.checkIfStreamInactiveAndTurnSupervisorIdle`): IDLE only when enabled and the
    stream has had nothing new for longer than `inactive_after` since `last_active` (the latest loop that found
    something, else the first loop); until then, and always when disabled, RUNNING. Without idleConfig this
    system's default: IDLE at once."""
    if idle_enabled is None:
        return Event.PUBLISHED_NOTHING
    if not idle_enabled or last_active is None or now - last_active <= inactive_after:
        return Event.NOTHING_NEW
    return Event.PUBLISHED_NOTHING


def loop_error_state(stream_error: bool, first_loop: bool) -> DetailedState:
    """The detailed state a failed loop reports: the stream's, when the broker could not be reached."""
    if not stream_error:
        return DetailedState.UNHEALTHY_SUPERVISOR
    return DetailedState.UNABLE_TO_CONNECT_TO_STREAM if first_loop else DetailedState.LOST_CONTACT_WITH_STREAM


def effective_state(stored: Stored, *, supervisor_ok: bool, tasks_ok: bool,
                    last_loop_error: str | None) -> tuple[State, str]:
    """What `status` shows: the stored state unless the health rules override it (never a suspended or
    terminated one's)."""
    if stored[0] in (State.TERMINATED, State.SUSPENDED):
        return stored[0], stored[1].value
    if not supervisor_ok:
        return State.UNHEALTHY_SUPERVISOR, last_loop_error or DetailedState.UNHEALTHY_SUPERVISOR.value
    if not tasks_ok:
        return State.UNHEALTHY_TASKS, DetailedState.UNHEALTHY_TASKS.value
    return stored[0], stored[1].value


class RunStatus(str, enum.Enum):
    """A run's status; `RUN_MOVES` says which it moves to from which."""

    PLANNED = "PLANNED"
    RUNNING = "RUNNING"
    PUBLISHED = "PUBLISHED"
    FAILED = "FAILED"  # may be retried and still publish
    SUPERSEDED = "SUPERSEDED"  # its start offsets no longer match the committed ones; re-plan
    EXPIRED = "EXPIRED"  # in flight past its deadline (completionTimeout): failed for good

    @property
    def in_flight(self) -> bool:
        return self in (RunStatus.PLANNED, RunStatus.RUNNING)

    @property
    def is_final(self) -> bool:
        """Nothing changes it any more: published, superseded or expired (no retry revives it)."""
        return not any(self in sources for sources, _ in RUN_TABLE.values())

    @property
    def failed(self) -> bool:
        return self in (RunStatus.FAILED, RunStatus.EXPIRED)


class RunEvent(StrEnum):
    START = "start"  # its jobs start (also a failed run's retry)
    REPLAN = "replan"  # planned again while in flight (`Supervisor.replan`)
    PUBLISH = "publish"
    FAIL = "fail"  # its tasks failed before publishing
    SUPERSEDE = "supersede"  # the committed offsets moved away from its starts
    EXPIRE = "expire"  # in flight past its deadline


# event -> (the statuses that take it, the status after it)
RUN_TABLE: Mapping[RunEvent, tuple[frozenset[RunStatus], RunStatus]] = {
    RunEvent.START: (frozenset({RunStatus.PLANNED, RunStatus.FAILED}), RunStatus.RUNNING),
    RunEvent.REPLAN: (frozenset({RunStatus.PLANNED, RunStatus.RUNNING}), RunStatus.RUNNING),
    RunEvent.PUBLISH: (frozenset({RunStatus.PLANNED, RunStatus.RUNNING, RunStatus.FAILED}), RunStatus.PUBLISHED),
    RunEvent.FAIL: (frozenset({RunStatus.PLANNED, RunStatus.RUNNING}), RunStatus.FAILED),
    RunEvent.SUPERSEDE: (frozenset({RunStatus.PLANNED, RunStatus.RUNNING, RunStatus.FAILED}), RunStatus.SUPERSEDED),
    RunEvent.EXPIRE: (frozenset({RunStatus.PLANNED, RunStatus.RUNNING}), RunStatus.EXPIRED),
}


def move_run(current: RunStatus, event: RunEvent, run_id: str = "the run") -> RunStatus:
    """The status after `event`, when `current` takes it; else `IllegalMoveError`."""
    sources, to = RUN_TABLE[event]
    if current not in sources:
        raise IllegalMoveError(f"run {run_id} is {current.value}: it does not take {event.value}"
                               + (" (it is final)" if current.is_final else ""))
    return to


class GroupStatus(str, enum.Enum):
    PENDING = "PENDING"
    PUBLISHED = "PUBLISHED"
    FAILED = "FAILED"
    EMPTY = "EMPTY"  # nothing to read; its offsets still advance when the run publishes
