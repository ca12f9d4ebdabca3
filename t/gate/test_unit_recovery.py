"""Unit tests of recovery (flux_epilog_gate.gate.recovery): a new
job-manager rebuilds the holds from the eventlog; no broker, the
job-manager is a FakePort."""

import sys

import pytest

from flux_epilog_gate.gate import CLEANUP, RUN, SCHED
from flux_epilog_gate.gate.holds import (
    ACTIVE,
    CANCEL_EVENT,
    EPILOG,
    HOLD_EVENT,
    PENDING,
    PROLOG,
    RECOVERY_DESCRIPTION,
    Reason,
)
from flux_epilog_gate.gate.jobs import Job

from .unitgate import (
    JOB,
    USER,
    epilog_starts,
    ev,
    marked,
    recover,
    state_of,
)

# Recovery (a new job-manager rebuilds the holds from the eventlog)


def test_recovery_rebuilds_a_pending_hold(port, gate):
    events = [ev(100.0, "submit"), ev(101.0, HOLD_EVENT, description="bb")]
    recover(port, gate, SCHED, events)
    (entry,) = gate.list()
    assert (entry["description"], entry["state"]) == ("bb", PENDING)
    assert entry["t_hold"] == 101.0 and entry["userid"] == USER


def test_recovery_rebuilds_an_active_hold_with_its_t_start(port, gate):
    events = [
        ev(100.0, "submit"),
        ev(101.0, HOLD_EVENT, description="bb"),
        ev(102.0, "exception", type="cancel", severity=0),
        marked(103.0, "epilog-start", description="bb"),
    ]
    recover(port, gate, CLEANUP, events)
    (entry,) = gate.list()
    assert (entry["state"], entry["t_start"]) == (ACTIVE, 103.0)
    assert epilog_starts(port) == []


#: Eventlog of a job whose hold "bb" was released and "umount" is active.
BB_FINISHED_UMOUNT_ACTIVE = [
    ev(101.0, HOLD_EVENT, description="bb"),
    ev(102.0, HOLD_EVENT, description="umount"),
    marked(103.0, "epilog-start", description="bb"),
    marked(103.0, "epilog-start", description="umount"),
    marked(104.0, "epilog-finish", description="bb", status=0),
]


def test_recovery_drops_a_cancelled_hold(port, gate):
    events = [
        ev(101.0, HOLD_EVENT, description="bb"),
        ev(102.0, HOLD_EVENT, description="umount"),
        ev(103.0, CANCEL_EVENT, description="bb"),
    ]
    recover(port, gate, SCHED, events)
    assert [h["description"] for h in gate.list()] == ["umount"]


def test_recovery_drops_a_finished_hold(port, gate):
    recover(port, gate, CLEANUP, BB_FINISHED_UMOUNT_ACTIVE)
    assert [h["description"] for h in gate.list()] == ["umount"]


def test_late_release_of_hold_finished_before_restart_answers_false(port, gate):
    recover(port, gate, CLEANUP, BB_FINISHED_UMOUNT_ACTIVE)
    assert gate.release(JOB, "bb") == (False, "released")


def test_recovered_active_hold_is_releasable(port, gate):
    events = [
        ev(101.0, HOLD_EVENT, description="bb"),
        marked(103.0, "epilog-start", description="bb"),
    ]
    recover(port, gate, CLEANUP, events)
    assert gate.release(JOB, "bb") == (True, None)
    assert port.posted_by_gate(JOB, "epilog-finish") == [
        {"description": "bb", "status": 0}
    ]


def test_recovery_rearms_timer_with_the_remaining_time(port, gate):
    t_start = port.clock - 30.0
    events = [
        ev(t_start - 10, HOLD_EVENT, description="bb", timeout=100.0),
        marked(t_start, "epilog-start", description="bb"),
    ]
    recover(port, gate, CLEANUP, events)
    (timer,) = port.armed_timers()
    assert timer.delay == pytest.approx(70.0)


def test_recovered_hold_past_its_timeout_expires_at_once(port, gate):
    t_start = port.clock - 500.0
    events = [
        ev(t_start - 10, HOLD_EVENT, description="bb", timeout=100.0),
        marked(t_start, "epilog-start", description="bb"),
    ]
    recover(port, gate, CLEANUP, events)
    (timer,) = port.armed_timers()
    assert timer.delay == 0.0
    port.advance(0)
    assert gate.release(JOB, "bb") == (False, "timed out")


def test_recovery_does_not_arm_timers_of_pending_holds(port, gate):
    events = [ev(101.0, HOLD_EVENT, description="bb", timeout=100.0)]
    recover(port, gate, SCHED, events)
    assert port.armed_timers() == []


def test_recovery_activates_pending_hold_of_job_already_past_its_point(port, gate):
    # Restarted job-manager: nothing posted since, the eventlog tells it all.
    events = [
        ev(100.0, "alloc"),
        ev(101.0, HOLD_EVENT, description="bb"),
        ev(102.0, "start"),
        ev(103.0, "finish", status=0),
    ]
    recover(port, gate, CLEANUP, events)
    assert state_of(gate, JOB, "bb") == ACTIVE
    assert epilog_starts(port) == ["bb"]


def test_recovery_keeps_hold_pending_while_started_job_may_still_run(port, gate):
    events = [
        ev(100.0, "alloc"),
        ev(101.0, HOLD_EVENT, description="bb"),
        ev(102.0, "start"),
        ev(103.0, "exception", type="cancel", severity=0),
    ]
    recover(port, gate, CLEANUP, events)
    assert state_of(gate, JOB, "bb") == PENDING


def test_recovered_started_job_activates_holds_on_finish(port, gate):
    events = [
        ev(100.0, "alloc"),
        ev(101.0, HOLD_EVENT, description="bb"),
        ev(102.0, "start"),
    ]
    recover(port, gate, CLEANUP, events)
    port.happen(JOB, "finish")
    gate.on_event(JOB, "finish", CLEANUP)
    assert state_of(gate, JOB, "bb") == ACTIVE


def test_hold_registered_after_recovery_uses_the_eventlog_history(port, gate):
    events = [
        ev(100.0, "alloc"),
        ev(101.0, HOLD_EVENT, description="bb"),
        ev(102.0, "start"),
    ]
    recover(port, gate, RUN, events)
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    hold, _ = gate.hold(JOB, "umount")
    assert hold.state == PENDING


def test_recovered_job_keeps_being_tracked_without_its_events(port, gate):
    recover(port, gate, SCHED, [ev(101.0, HOLD_EVENT, description="bb")])
    assert port.tracked == {JOB: False}


def test_recovered_job_in_cleanup_short_of_its_point_gets_its_events(port, gate):
    events = [ev(100.0, "alloc"), ev(101.0, HOLD_EVENT, description="bb")]
    recover(port, gate, CLEANUP, events + [ev(102.0, "start")])
    assert state_of(gate, JOB, "bb") == PENDING
    assert port.tracked == {JOB: True}


def test_recovered_job_at_its_point_does_not_get_its_events(port, gate):
    recover(port, gate, CLEANUP, [ev(101.0, HOLD_EVENT, description="bb")])
    assert state_of(gate, JOB, "bb") == ACTIVE
    assert port.tracked == {JOB: False}


def test_recovered_job_without_holds_is_untracked(port, gate):
    recover(port, gate, SCHED, [ev(100.0, "submit")])
    assert gate.jobs == {} and port.tracked == {}


def test_recovered_running_job_without_holds_keeps_only_inactive_tracking(port, gate):
    recover(port, gate, RUN, [ev(100.0, "alloc"), ev(101.0, "start")])
    assert gate.jobs == {}
    assert port.tracked == {JOB: False}


def test_recovery_of_job_that_went_inactive_remembers_its_holds(port, gate):
    port.add_job(JOB, CLEANUP, USER)
    gate.begin_recovery(JOB, USER)
    port.forget_job(JOB)
    gate.end_recovery(JOB, [ev(101.0, HOLD_EVENT, description="bb")])
    assert gate.jobs == {}
    # Pending when its job went inactive: lost (see test_unit_lost.py).
    assert gate.release(JOB, "bb") == (False, Reason.LOST)
    assert gate.stats["lost"] == 1


def test_end_recovery_without_begin_does_nothing(port, gate):
    port.add_job(JOB, CLEANUP, USER)
    gate.end_recovery(JOB, [ev(101.0, HOLD_EVENT, description="bb")])
    assert gate.jobs == {} and port.events == {}


def test_cleanup_during_recovery_posts_the_recovery_epilog_start(port, gate):
    port.add_job(JOB, RUN, USER)
    gate.begin_recovery(JOB, USER)
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    assert port.events[JOB] == [("epilog-start", {"description": RECOVERY_DESCRIPTION})]


def test_recovery_epilog_is_posted_once_however_many_callbacks(port, gate):
    port.add_job(JOB, RUN, USER)
    gate.begin_recovery(JOB, USER)
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    gate.on_event(JOB, "finish", CLEANUP)
    gate.on_event(JOB, "free", CLEANUP)
    assert epilog_starts(port) == [RECOVERY_DESCRIPTION]


def test_recovery_epilog_is_finished_after_the_recovered_holds_activate(port, gate):
    port.add_job(JOB, SCHED, USER)
    gate.begin_recovery(JOB, USER)
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    gate.end_recovery(JOB, [ev(101.0, HOLD_EVENT, description="bb")])
    assert port.events[JOB] == [
        ("epilog-start", {"description": RECOVERY_DESCRIPTION}),
        ("epilog-start", {"description": "bb"}),
        ("epilog-finish", {"description": RECOVERY_DESCRIPTION, "status": 0}),
    ]
    assert port.outstanding(JOB) == ["bb"]


def test_recovery_epilog_is_finished_when_recovery_finds_no_holds(port, gate):
    port.add_job(JOB, SCHED, USER)
    gate.begin_recovery(JOB, USER)
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    gate.end_recovery(JOB, [ev(100.0, "submit")])
    assert port.outstanding(JOB) == []
    assert gate.jobs == {}


def test_recovery_epilog_left_open_by_a_previous_run_is_finished(port, gate):
    events = [
        ev(101.0, HOLD_EVENT, description="bb"),
        marked(102.0, "epilog-start", description=RECOVERY_DESCRIPTION),
        marked(103.0, "epilog-start", description="bb"),
    ]
    recover(port, gate, CLEANUP, events)
    assert port.posted_by_gate(JOB, "epilog-finish") == [
        {"description": RECOVERY_DESCRIPTION, "status": 0}
    ]


def test_recovery_epilog_closed_by_a_previous_run_is_not_finished_again(port, gate):
    events = [
        ev(101.0, HOLD_EVENT, description="bb"),
        marked(102.0, "epilog-start", description=RECOVERY_DESCRIPTION),
        marked(103.0, "epilog-start", description="bb"),
        marked(103.0, "epilog-finish", description=RECOVERY_DESCRIPTION, status=0),
    ]
    recover(port, gate, CLEANUP, events)
    assert port.posted_by_gate(JOB, "epilog-finish") == []


def test_hold_registered_during_recovery_waits_for_its_end(port, gate):
    port.add_job(JOB, CLEANUP, USER)
    gate.begin_recovery(JOB, USER)
    hold, _ = gate.hold(JOB, "umount")
    assert hold.state == PENDING
    gate.end_recovery(JOB, [ev(101.0, HOLD_EVENT, description="bb")])
    assert {h["description"]: h["state"] for h in gate.list()} == {
        "bb": ACTIVE,
        "umount": ACTIVE,
    }


def test_release_during_recovery_keeps_the_job_tracked(port, gate):
    port.add_job(JOB, SCHED, USER)
    gate.begin_recovery(JOB, USER)
    gate.hold(JOB, "umount")
    gate.release(JOB, "umount")
    assert JOB in gate.jobs and gate.jobs[JOB].recovering


def test_recovered_job_going_inactive_forgets_its_replayed_progress(port, gate):
    recover(port, gate, RUN, [ev(100.0, "alloc"), ev(101.0, "start")])
    assert JOB in gate.replayed_progress
    gate.on_inactive(JOB)
    assert JOB not in gate.replayed_progress


# What a job's record keeps of its recovery


class _SevenSlots:
    __slots__ = ("a", "b", "c", "d", "e", "f", "g")


def test_a_held_job_record_costs_no_more_than_seven_slots():
    # Its recovery's state lives apart, in the rare job being recovered.
    assert sys.getsizeof(Job(JOB, USER)) <= sys.getsizeof(_SevenSlots())
    assert Job(JOB, USER).recovery is None


@pytest.mark.parametrize(
    ("state", "callback", "point"),
    [(RUN, "on_run", PROLOG), (CLEANUP, "on_cleanup", EPILOG)],
)
def test_a_recovered_job_keeps_nothing_of_its_recovery(
    port, gate, state, callback, point
):
    port.add_job(JOB, SCHED, USER)
    gate.begin_recovery(JOB, USER)
    assert gate.jobs[JOB].recovery is not None
    port.set_state(JOB, state)
    if state == RUN:
        port.happen(JOB, "alloc")
    getattr(gate, callback)(JOB)
    hold = {"description": "s", "point": point}
    gate.end_recovery(JOB, [ev(1.0, HOLD_EVENT, **hold)])
    # Its recovery action ended, the job still held: its record is as
    # one never recovered.
    open_actions = port.prologs_open if point == PROLOG else port.outstanding
    assert open_actions(JOB) == ["s"]
    assert gate.jobs[JOB].recovery is None and not gate.jobs[JOB].recovering
