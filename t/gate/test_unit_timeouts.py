"""Unit tests of hold timeouts (flux_epilog_gate.gate.timeouts) and the
notes of the exceptions they raise; no broker, the job-manager is a FakePort."""

from flux_epilog_gate.gate import CLEANUP
from flux_epilog_gate.gate.holdlog import MARKER
from flux_epilog_gate.gate.holds import (
    ACTIVE,
    TIMEOUT_STATUS,
)

from .unitgate import (
    JOB,
    USER,
    at_point,
    ev,
    held_job,
    recover,
    state_of,
)

# Timeouts


def test_timeout_timer_is_not_armed_while_the_hold_is_pending(port, gate):
    held_job(port, gate, "bb", timeout=30.0)
    assert port.armed_timers() == []


def test_timeout_timer_is_armed_on_activation_for_the_full_timeout(port, gate):
    held_job(port, gate, "bb", timeout=30.0)
    port.advance(100)
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    (timer,) = port.armed_timers()
    assert timer.delay == 30.0


def test_hold_without_timeout_arms_no_timer(port, gate):
    at_point(port, gate, "bb")
    assert port.armed_timers() == []


def test_hold_does_not_expire_before_its_timeout(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    port.advance(29.9)
    assert state_of(gate, JOB, "bb") == ACTIVE


def test_expired_hold_posts_epilog_finish_with_the_timeout_status(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    port.advance(30)
    assert port.posted_by_gate(JOB, "epilog-finish") == [
        {"description": "bb", "status": TIMEOUT_STATUS}
    ]
    assert gate.list() == []


def test_timeout_status_is_nonzero(port, gate):
    assert TIMEOUT_STATUS != 0


def test_expired_hold_raises_exception_naming_the_hold_before_finish(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    port.advance(30)
    (note,) = port.notes(JOB)
    assert "bb" in note and "timed out" in note
    assert port.names(JOB)[-2:] == ["exception", "epilog-finish"]


def test_expiry_counts_as_timed_out_and_failed(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    port.advance(30)
    assert (gate.stats["timedout"], gate.stats["failed"]) == (1, 1)
    assert gate.stats["released"] == 0


def test_late_release_after_timeout_answers_timed_out(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    port.advance(30)
    assert gate.release(JOB, "bb") == (False, "timed out")


def test_release_before_timeout_stops_the_timer(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    gate.release(JOB, "bb")
    assert port.armed_timers() == []
    port.advance(60)
    assert port.notes(JOB) == []


def test_job_going_inactive_stops_its_hold_timers(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    gate.on_inactive(JOB)
    assert port.armed_timers() == []


def test_expire_of_a_hold_that_is_gone_does_nothing(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    old = gate.jobs[JOB].holds["bb"]
    gate.release(JOB, "bb")
    gate.hold(JOB, "bb", 30.0)
    before = list(port.events[JOB])
    gate.expire(old)
    assert port.events[JOB] == before
    assert state_of(gate, JOB, "bb") == ACTIVE


def test_each_hold_times_out_on_its_own(port, gate):
    port.add_job(JOB, CLEANUP, USER)
    gate.hold(JOB, "short", 10.0)
    gate.hold(JOB, "long", 50.0)
    port.advance(10)
    assert [h["description"] for h in gate.list()] == ["long"]


# The exception's note


def test_hold_that_expired_while_down_says_how_long_it_was_active(port, gate):
    # Active 6.3 s when the gate is back, with a timeout of 3 s: the note
    # gives the real time, not the timeout.
    started = port.now() - 6.3
    marked = {"description": "bb", "timeout": 3.0, MARKER: True}
    recover(port, gate, CLEANUP, [ev(started, "epilog-start", **marked)])
    port.advance(0)
    (note,) = port.notes(JOB)
    assert "timed out after 6.3s (timeout 3s)" in note


def test_hold_that_expires_on_time_says_its_timeout(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    port.advance(30)
    (note,) = port.notes(JOB)
    assert "timed out after 30.0s (timeout 30s)" in note
