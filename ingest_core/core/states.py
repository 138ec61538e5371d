"""A datasource's supervisor states, in Druid's vocabulary, and the one place that moves between them.

Stored transitions (`transition`), written by the loop's steps and by operator actions:

    PENDING --first loop--> RUNNING/CONNECTING_TO_STREAM --planned--> RUNNING
    RUNNING --published nothing--> IDLE --published rows--> RUNNING
    RUNNING --nothing new, not yet idle (idleConfig)--> RUNNING
    any --suspend--> SUSPENDED --resume--> RUNNING;  any --terminate--> TERMINATED --resume--> RUNNING

Derived states (`effective_state`), never stored: `status` shows UNHEALTHY_SUPERVISOR (detailed
UNABLE_TO_CONNECT_TO_STREAM before any loop succeeded, else LOST_CONTACT_WITH_STREAM or the error's own) when
loops fail `unhealthinessThreshold` times in a row, and UNHEALTHY_TASKS when runs do; TERMINATED and SUSPENDED
win over both. Druid's STOPPING has no counterpart: nothing here shuts down (an Airflow run is one loop, and
suspending takes effect before the next one).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum


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
    """What moves a datasource's stored state."""

    CONNECTING = "connecting"  # the first loop asks the broker for partitions
    PLANNED = "planned"  # a loop planned a run
    PUBLISHED = "published"  # a run published rows
    PUBLISHED_NOTHING = "published_nothing"  # a run had nothing to read: the datasource is idle
    NOTHING_NEW = "nothing_new"  # a run had nothing to read, but idleConfig does not make it idle (yet)
    SUSPEND = "suspend"
    RESUME = "resume"
    TERMINATE = "terminate"


_TRANSITIONS: dict[Event, tuple[State, DetailedState]] = {
    Event.CONNECTING: (State.RUNNING, DetailedState.CONNECTING_TO_STREAM),
    Event.PLANNED: (State.RUNNING, DetailedState.RUNNING),
    Event.PUBLISHED: (State.RUNNING, DetailedState.RUNNING),
    Event.PUBLISHED_NOTHING: (State.IDLE, DetailedState.IDLE),
    Event.NOTHING_NEW: (State.RUNNING, DetailedState.RUNNING),
    Event.SUSPEND: (State.SUSPENDED, DetailedState.SUSPENDED),
    Event.RESUME: (State.RUNNING, DetailedState.RUNNING),
    Event.TERMINATE: (State.TERMINATED, DetailedState.TERMINATED),
}

# the detailed states of a datasource that has not yet completed a loop
FIRST_LOOP_STATES = (DetailedState.PENDING, DetailedState.CONNECTING_TO_STREAM)

LOOP_ERROR = "loop_error"  # the audit action of a failed loop (a plan step that raised)


def transition(event: Event) -> tuple[State, DetailedState]:
    """The stored (state, detailed state) after `event`."""
    return _TRANSITIONS[event]


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


def effective_state(stored: tuple[str, str] | None, *, suspended: bool, terminated: bool, supervisor_ok: bool,
                    tasks_ok: bool, last_loop_error: str | None) -> tuple[State, str]:
    """What `status` shows: the stored state unless a flag or the health rules override it."""
    if terminated:
        return State.TERMINATED, DetailedState.TERMINATED.value
    if suspended:
        return State.SUSPENDED, DetailedState.SUSPENDED.value
    if not supervisor_ok:
        return State.UNHEALTHY_SUPERVISOR, last_loop_error or DetailedState.UNHEALTHY_SUPERVISOR.value
    if not tasks_ok:
        return State.UNHEALTHY_TASKS, DetailedState.UNHEALTHY_TASKS.value
    if stored is None:
        return State.PENDING, DetailedState.PENDING.value
    return State(stored[0]), stored[1]
