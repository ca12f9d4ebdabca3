"""Unit tests of prolog holds (flux_epilog_gate.gate.prolog), no broker: the
job-manager is a FakePort driven by each test."""

import errno

import pytest

from flux_epilog_gate.errors import GateError
from flux_epilog_gate.gate import CLEANUP, RUN, SCHED
from flux_epilog_gate.gate.holdlog import MARKER
from flux_epilog_gate.gate.holds import (
    ACTIVE,
    HOLD_EVENT,
    PENDING,
    PROLOG,
    RECOVERY_DESCRIPTION,
    TIMEOUT_STATUS,
)

from .unitgate import JOB, USER, ev, logged, recover


def logged_entries(port):
    return [entry for entries in logged(port).values() for entry in entries]


def prolog_job(port, gate, *descriptions, timeout=None):
    """A job in SCHED with pending prolog holds ``descriptions``."""
    port.add_job(JOB, SCHED, USER)
    for description in descriptions:
        gate.hold(JOB, description, timeout, PROLOG)
    return JOB


def running(port, gate, *descriptions, timeout=None):
    """The job entered RUN: its prolog holds are active."""
    prolog_job(port, gate, *descriptions, timeout=timeout)
    port.set_state(JOB, RUN)
    port.happen(JOB, "alloc")
    gate.on_run(JOB)
    return JOB


def cancel(port, gate):
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)


def test_prolog_hold_asks_for_the_jobs_entry_to_run(port, gate):
    prolog_job(port, gate, "setup")
    assert JOB in port.run_wanted and JOB in port.tracked
    assert port.events[JOB] == []


def test_epilog_hold_does_not_ask_for_run(port, gate):
    port.add_job(JOB, SCHED, USER)
    gate.hold(JOB, "bb")
    assert JOB not in port.run_wanted


def test_entry_to_run_posts_marked_prolog_start_with_timeout(port, gate):
    running(port, gate, "setup", timeout=30.0)
    assert port.posted_by_gate(JOB, "prolog-start") == [
        {"description": "setup", MARKER: True, "timeout": 30.0}
    ]
    assert gate.jobs[JOB].holds["setup"].state == ACTIVE


def test_release_posts_prolog_finish(port, gate):
    running(port, gate, "setup")
    assert gate.release(JOB, "setup", 0) == (True, None)
    assert port.prologs_open(JOB) == []
    assert port.notes(JOB) == []


def test_failed_release_raises_fatal_exception_before_prolog_finish(port, gate):
    running(port, gate, "setup")
    gate.release(JOB, "setup", 2)
    assert port.names(JOB) == ["prolog-start", "exception", "prolog-finish"]
    (context,) = port.posted_by_gate(JOB, "exception")
    assert context["severity"] == 0 and "setup" in context["note"]
    assert gate.stats["failed"] == 1


def test_timeout_finishes_with_124_and_fails_the_job(port, gate):
    running(port, gate, "setup", timeout=5.0)
    port.advance(5.0)
    (finish,) = port.posted_by_gate(JOB, "prolog-finish")
    assert finish["status"] == TIMEOUT_STATUS
    assert "timed out after 5.0s (timeout 5s)" in port.notes(JOB)[0]


def test_epilog_holds_become_active_when_a_failed_prolog_puts_the_job_in_cleanup(
    port, gate
):
    running(port, gate, "setup")
    gate.hold(JOB, "bb")

    # The exception the gate raises makes the job enter CLEANUP at once.
    def raise_fatal(jobid, note):
        port.events[jobid].append(("exception", {"note": note, "severity": 0}))
        cancel(port, gate)

    port.raise_fatal = raise_fatal
    gate.release(JOB, "setup", 1)
    assert port.names(JOB) == [
        "prolog-start",
        "exception",
        "epilog-start",
        "prolog-finish",
    ]


def test_cancel_drops_pending_prolog_holds_with_no_events(port, gate):
    prolog_job(port, gate, "setup")
    cancel(port, gate)
    assert port.events[JOB] == []
    assert gate.release(JOB, "setup") == (False, "job ended before it started")
    assert JOB not in gate.jobs


def test_cancel_does_not_record_the_drop_ahead_of_its_exception(port, gate):
    """The synced record would be checkpointed before the job-manager's
    unsynced exception event: a crash would bring the job back to SCHED
    with its hold dropped.  The log keeps the hold until a load finds the
    job in CLEANUP, or a snapshot forgets it."""
    prolog_job(port, gate, "setup")
    cancel(port, gate)
    assert [name for _, name, _ in logged_entries(port)] == [HOLD_EVENT]
    assert gate.holdlog.holds() == []


def test_cancel_aborts_active_prolog_holds_and_tells_watchers(port, gate):
    gate.watch("w", points=[PROLOG])
    running(port, gate, "setup")
    gate.hold(JOB, "bb")
    cancel(port, gate)
    first, second = port.sent["w"]
    assert "aborted" not in first and second["aborted"] is True
    assert port.posted_by_gate(JOB, "epilog-start") == [{"description": "bb"}]
    assert gate.jobs[JOB].holds["setup"].state == ACTIVE


def test_watch_points_filter(port, gate):
    gate.watch("epi", points=["epilog"])
    running(port, gate, "setup")
    assert port.sent["epi"] == []


@pytest.mark.parametrize("state", [RUN, CLEANUP])
def test_too_late_is_refused_and_changes_nothing(port, gate, state):
    port.add_job(JOB, state, USER, happened={"alloc"})
    with pytest.raises(GateError) as info:
        gate.hold(JOB, "setup", None, PROLOG)
    assert info.value.errnum == errno.EINVAL
    assert "too late" in info.value.message
    assert gate.jobs == {} and port.tracked == {} and port.events[JOB] == []


def test_prolog_hold_while_the_gate_holds_the_start_is_active_at_once(port, gate):
    running(port, gate, "one")
    hold, _ = gate.hold(JOB, "two", None, PROLOG)
    assert hold.state == ACTIVE
    assert port.prologs_open(JOB) == ["one", "two"]


def test_other_point_same_description_is_eexist(port, gate):
    prolog_job(port, gate, "bb")
    with pytest.raises(GateError) as info:
        gate.hold(JOB, "bb")
    assert info.value.errnum == errno.EEXIST


def test_hold_log_records_the_point(port, gate):
    prolog_job(port, gate, "setup")
    _, text, _ = port.commits[-1]
    assert '"point":"prolog"' in text


# Recovery


def test_recovery_rebuilds_a_pending_prolog_hold(port, gate):
    recover(port, gate, SCHED, [ev(1.0, HOLD_EVENT, description="s", point=PROLOG)])
    (entry,) = gate.list()
    assert (entry["state"], entry["point"]) == (PENDING, PROLOG)
    assert JOB in port.run_wanted


def test_recovery_rebuilds_an_active_prolog_hold_from_its_marked_start(port, gate):
    events = [ev(2.0, "prolog-start", description="s", **{MARKER: True})]
    recover(port, gate, RUN, events, happened={"alloc"})
    (entry,) = gate.list()
    assert (entry["state"], entry["point"], entry["t_start"]) == (ACTIVE, PROLOG, 2.0)
    assert gate.jobs[JOB].start_held
    gate.release(JOB, "s")
    assert port.names(JOB) == ["prolog-finish"]


def test_recovery_ignores_another_plugins_prolog_of_the_same_name(port, gate):
    events = [ev(2.0, "prolog-start", description="s")]
    recover(port, gate, RUN, events, happened={"alloc"})
    assert gate.list() == []


def test_recovery_drops_a_finished_prolog_hold(port, gate):
    events = [
        ev(1.0, HOLD_EVENT, description="s", point=PROLOG),
        ev(2.0, "prolog-start", description="s", **{MARKER: True}),
        ev(3.0, "prolog-finish", description="s", status=0, **{MARKER: True}),
    ]
    recover(port, gate, RUN, events, happened={"alloc"})
    assert gate.list() == []


def test_job_entering_run_while_recovering_is_held_until_its_holds_are_known(
    port, gate
):
    port.add_job(JOB, SCHED, USER)
    gate.begin_recovery(JOB, USER)
    port.set_state(JOB, RUN)
    gate.on_run(JOB)
    assert port.prologs_open(JOB) == [RECOVERY_DESCRIPTION]
    gate.end_recovery(JOB, [ev(1.0, HOLD_EVENT, description="s", point=PROLOG)])
    # The recovered hold is active before the recovery prolog is finished.
    assert port.names(JOB) == ["prolog-start", "prolog-start", "prolog-finish"]
    assert port.prologs_open(JOB) == ["s"]


def test_recovery_prolog_without_holds_is_finished(port, gate):
    port.add_job(JOB, SCHED, USER)
    gate.begin_recovery(JOB, USER)
    port.set_state(JOB, RUN)
    gate.on_run(JOB)
    gate.end_recovery(JOB, [])
    assert port.prologs_open(JOB) == []
    assert JOB not in gate.jobs


def test_a_prolog_start_that_fails_fails_the_job_rather_than_let_it_start(port, gate):
    prolog_job(port, gate, "setup")
    port.fail("prolog-start", errno.EOVERFLOW)
    port.set_state(JOB, RUN)
    gate.on_run(JOB)
    (note,) = port.notes(JOB)
    assert "setup" in note and "could not hold the start" in note
    assert gate.list() == []
    assert any("prolog-start" in text for _, text in port.logs)


def test_prolog_hold_on_a_recovering_job_in_run_is_refused(port, gate):
    port.add_job(JOB, RUN, USER, happened={"alloc"})
    gate.begin_recovery(JOB, USER)
    with pytest.raises(GateError) as info:
        gate.hold(JOB, "setup", None, PROLOG)
    assert info.value.errnum == errno.EINVAL
