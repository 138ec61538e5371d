"""The state tables (`core.states`): every stored supervisor state answers every event, illegal moves are refused
with what to do instead, and a run's status moves only along `RUN_TABLE`. No database."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest_core.core.states import (
    LIVE,
    RUN_TABLE,
    TABLE,
    DetailedState,
    Event,
    IllegalMoveError,
    RunEvent,
    RunStatus,
    State,
    effective_state,
    move,
    move_run,
    refusal,
)

STORED = (*LIVE, State.SUSPENDED, State.TERMINATED)  # the basic states a datasource row holds
OFFSET_MOVES = (Event.RESET, Event.RESET_TO_LATEST, Event.SET_OFFSETS, Event.SKIP)


def test_every_stored_state_answers_every_event():
    assert set(TABLE) == {(s, e) for s in STORED for e in Event}


def test_a_terminated_datasource_takes_no_offset_move_and_no_suspend_and_says_what_to_do():
    for event in (*OFFSET_MOVES, Event.SUSPEND):
        with pytest.raises(IllegalMoveError, match="refused, nothing was changed: the datasource is terminated; "
                                                   "`ingest resume door` restarts it"):
            move((State.TERMINATED, DetailedState.TERMINATED), event, "door")
    assert refusal(State.TERMINATED, Event.SET_OFFSETS, "door").endswith("then move its offsets")
    # what it does take: resume (back to RUNNING), terminate again (nothing changes), a group sync
    assert move((State.TERMINATED, DetailedState.TERMINATED), Event.RESUME) == (State.RUNNING, DetailedState.RUNNING)
    for event in (Event.TERMINATE, Event.SYNC_GROUP):
        assert move((State.TERMINATED, DetailedState.TERMINATED), event) == (State.TERMINATED,
                                                                             DetailedState.TERMINATED)


def test_a_suspended_datasource_moves_its_offsets_but_plans_no_loop():
    suspended = (State.SUSPENDED, DetailedState.SUSPENDED)
    for event in OFFSET_MOVES:
        assert move(suspended, event) == suspended
    assert refusal(State.SUSPENDED, Event.LOOP, "ds") == "datasource ds is suspended: `ingest resume ds` resumes it"
    assert refusal(State.TERMINATED, Event.LOOP, "ds").startswith("datasource ds is terminated")
    assert all(refusal(s, Event.LOOP) is None for s in LIVE)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(STORED), st.lists(st.sampled_from(list(Event)), max_size=30))
def test_any_sequence_of_events_keeps_a_stored_state_and_only_resume_leaves_terminated(start, events):
    state = (start, DetailedState(start.value))
    for event in events:
        before = state
        try:
            state = move(state, event)
        except IllegalMoveError:
            assert refusal(before[0], event) is not None  # refused: nothing changed
            continue
        assert state[0] in STORED and state[1] in DetailedState
        if before[0] is State.TERMINATED and event is not Event.RESUME:
            assert state == before  # a run still in flight publishes, but nothing else moves a terminated one
        if before[0] is State.SUSPENDED and event not in (Event.RESUME, Event.TERMINATE):
            assert state == before
        if event in OFFSET_MOVES or event is Event.SYNC_GROUP:
            assert state == before  # the offset actions never move the state


def test_loop_steps_from_a_live_state_are_druids():
    pending = (State.PENDING, DetailedState.PENDING)
    assert move(pending, Event.CONNECTING) == (State.RUNNING, DetailedState.CONNECTING_TO_STREAM)
    assert move((State.RUNNING, DetailedState.RUNNING), Event.PUBLISHED_NOTHING) == (State.IDLE, DetailedState.IDLE)
    assert move((State.IDLE, DetailedState.IDLE), Event.PUBLISHED) == (State.RUNNING, DetailedState.RUNNING)
    assert move((State.IDLE, DetailedState.IDLE), Event.RESUME) == (State.IDLE, DetailedState.IDLE)


def test_health_never_hides_suspended_or_terminated():
    for state in (State.SUSPENDED, State.TERMINATED):
        shown = effective_state((state, DetailedState(state.value)), supervisor_ok=False, tasks_ok=False,
                                last_loop_error="LOST_CONTACT_WITH_STREAM")
        assert shown == (state, state.value)
    assert effective_state((State.RUNNING, DetailedState.RUNNING), supervisor_ok=False, tasks_ok=True,
                           last_loop_error=None) == (State.UNHEALTHY_SUPERVISOR, "UNHEALTHY_SUPERVISOR")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(list(RunEvent)), max_size=20))
def test_a_run_moves_only_along_the_run_table_and_stays_final(events):
    status = RunStatus.PLANNED
    for event in events:
        sources, to = RUN_TABLE[event]
        if status in sources:
            assert move_run(status, event) is to
            status = to
        else:
            with pytest.raises(IllegalMoveError):
                move_run(status, event, "r1")
    if status.is_final:
        assert all(status not in sources for sources, _ in RUN_TABLE.values())


def test_the_run_table_in_words():
    assert [s for s in RunStatus if s.is_final] == [RunStatus.PUBLISHED, RunStatus.SUPERSEDED, RunStatus.EXPIRED]
    assert move_run(RunStatus.FAILED, RunEvent.START) is RunStatus.RUNNING  # a retry
    assert move_run(RunStatus.FAILED, RunEvent.PUBLISH) is RunStatus.PUBLISHED  # a retried publish
    with pytest.raises(IllegalMoveError, match="run r1 is EXPIRED: it does not take start \\(it is final\\)"):
        move_run(RunStatus.EXPIRED, RunEvent.START, "r1")
    with pytest.raises(IllegalMoveError):
        move_run(RunStatus.FAILED, RunEvent.EXPIRE)  # only a run in flight expires
    assert RunStatus.EXPIRED.failed and RunStatus.FAILED.failed and not RunStatus.SUPERSEDED.failed


def test_the_documented_table_is_the_table():
    """docs/supervisor.md shows the supervisor's state table; it must say what the code does."""
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "supervisor.md").read_text()
    states = [State.PENDING, State.RUNNING, State.IDLE, State.SUSPENDED, State.TERMINATED]

    def cell(state: State, event: Event) -> str:
        to = TABLE[state, event]
        if to is None:
            return "stays"
        if not isinstance(to, tuple):
            return "**refused**"
        return to[0].value if to[1].value == to[0].value else f"{to[0].value}/{to[1].value}"

    for event in Event:
        row = f"| `{event.value}` | " + " | ".join(cell(s, event) for s in states) + " |"
        assert row in text, row
    for event, (sources, to) in RUN_TABLE.items():
        assert f"| {', '.join(s.value for s in RunStatus if s in sources)} | {to.value} |" in text, event
