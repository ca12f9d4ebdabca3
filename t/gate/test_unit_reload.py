"""Unit tests of a reload into the same job-manager
(flux_epilog_gate.gate.reload): suspend, retrack, resume; no broker, the
job-manager is a FakePort."""

import pytest

from flux_epilog_gate.gate import CLEANUP, RUN, SCHED
from flux_epilog_gate.gate.holds import (
    ACTIVE,
    PENDING,
)

from .unitgate import (
    JOB,
    JOB2,
    USER,
    at_point,
    ev,
    held_job,
    recover,
    started_job_in_cleanup,
    state_of,
)

# Reload into the same job-manager (suspend, retrack, resume)


def test_suspend_stops_every_timer(port, gate):
    at_point(port, gate, "a", "b", timeout=30.0)
    gate.suspend()
    assert port.armed_timers() == []


def test_suspended_gate_does_not_expire_holds(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    gate.suspend()
    port.advance(60)
    assert state_of(gate, JOB, "bb") == ACTIVE


def test_retrack_tracks_a_held_job_again(port, gate):
    held_job(port, gate, "bb")
    gate.suspend()
    port.tracked.clear()
    gate.retrack(JOB, SCHED)
    assert port.tracked == {JOB: False}


def test_retrack_of_a_job_short_of_its_point_in_cleanup_gets_its_events(port, gate):
    started_job_in_cleanup(port, gate, "bb")
    gate.suspend()
    port.tracked.clear()
    gate.retrack(JOB, CLEANUP)
    assert state_of(gate, JOB, "bb") == PENDING
    assert port.tracked == {JOB: True}


def test_retrack_of_a_job_without_holds_does_not_track_it(port, gate):
    port.add_job(JOB, RUN, USER)
    gate.retrack(JOB, RUN)
    assert port.tracked == {}


def test_retrack_activates_holds_of_job_that_passed_its_point_meanwhile(port, gate):
    held_job(port, gate, "bb")
    gate.suspend()
    port.set_state(JOB, CLEANUP)
    gate.retrack(JOB, CLEANUP)
    assert state_of(gate, JOB, "bb") == ACTIVE


def test_retrack_leaves_holds_pending_before_the_point(port, gate):
    started_job_in_cleanup(port, gate, "bb")
    gate.suspend()
    gate.retrack(JOB, CLEANUP)
    assert state_of(gate, JOB, "bb") == PENDING


def test_resume_rearms_timers_with_the_remaining_time(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    gate.suspend()
    port.advance(10)
    gate.retrack(JOB, CLEANUP)
    gate.resume({JOB})
    (timer,) = port.armed_timers()
    assert timer.delay == pytest.approx(20.0)


def test_resumed_timer_still_expires_the_hold(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    gate.suspend()
    port.advance(10)
    gate.resume({JOB})
    port.advance(20)
    assert gate.release(JOB, "bb") == (False, "timed out")


def test_resume_treats_jobs_not_seen_as_inactive(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    gate.suspend()
    gate.resume(set())
    assert gate.jobs == {}
    assert gate.release(JOB, "bb") == (False, "job is inactive")
    assert port.armed_timers() == []


def test_resume_forgets_replayed_progress_of_jobs_not_seen(port, gate):
    recover(port, gate, RUN, [ev(100.0, "alloc"), ev(101.0, "start")])
    gate.suspend()
    gate.resume(set())
    assert gate.replayed_progress == {}


def test_holds_survive_suspend_and_resume(port, gate):
    at_point(port, gate, "bb")
    held_job(port, gate, "later", jobid=JOB2)
    gate.suspend()
    gate.retrack(JOB, CLEANUP)
    gate.retrack(JOB2, SCHED)
    gate.resume({JOB, JOB2})
    assert sorted((h["id"], h["state"]) for h in gate.list()) == [
        (JOB, ACTIVE),
        (JOB2, PENDING),
    ]


def test_retrack_of_a_job_still_recovering_asks_for_its_eventlog(port, gate):
    port.add_job(JOB, RUN, USER)
    gate.begin_recovery(JOB, USER)
    gate.suspend()
    assert gate.retrack(JOB, RUN) is True
