"""The gate on every path a job can take to clean, proved by eventlogs."""

import time

import flux.job
import pytest
from flux.job import JobspecV1
from jobs import (
    described,
    eventlog,
    named,
    names,
    set_urgency,
    settle,
    submit,
    submit_cores,
    wait_alloc_pending,
    wait_event,
    wait_inactive,
)

from flux_epilog_gate import EpilogGate

pytestmark = pytest.mark.usefixtures("no_leftover_holds")


def cancel_held(handle, gate, *descriptions):
    """A job cancelled while pending that carries holds ``descriptions``,
    all of them active (epilog-start posted)."""
    jobid = submit(handle, urgency=0)
    for description in descriptions:
        gate.hold(jobid, description)
    flux.job.cancel(handle, jobid)
    for description in descriptions:
        wait_event(handle, jobid, "epilog-start", match=described(description))
    return jobid


def test_cancel_while_pending_is_held_until_release(handle, gate):
    jobid = submit(handle, urgency=0)
    gate.hold(jobid, "bb")
    flux.job.cancel(handle, jobid)
    wait_event(handle, jobid, "epilog-start")
    assert "clean" not in names(settle(handle, jobid, "clean"))
    assert gate.release(jobid, "bb") == {"released": True}
    wait_inactive(handle, jobid)
    events = names(eventlog(handle, jobid))
    assert events.index("epilog-finish") < events.index("clean")


def test_exception_during_alloc_activates_hold_on_cleanup(handle, gate):
    blocker = submit_cores(handle, 64, duration=60)
    wait_event(handle, blocker, "alloc")
    try:
        jobid = submit_cores(handle, 64)
        wait_alloc_pending(handle)
        gate.hold(jobid, "bb")
        flux.job.job_raise(handle, jobid, "test", 0, "fail during alloc")
        wait_event(handle, jobid, "epilog-start")
        events = names(settle(handle, jobid, "clean"))
        assert "alloc" not in events and "clean" not in events
        assert events.index("exception") < events.index("epilog-start")
        gate.release(jobid, "bb")
        wait_inactive(handle, jobid)
    finally:
        flux.job.cancel(handle, blocker)
        wait_inactive(handle, blocker)


def test_cancel_while_running_activates_hold_after_finish(handle, gate):
    jobid = submit(handle, duration=60)
    wait_event(handle, jobid, "start")
    assert gate.hold(jobid, "bb")["state"] == "pending"
    flux.job.cancel(handle, jobid)
    wait_event(handle, jobid, "epilog-start")
    events = names(settle(handle, jobid, "clean"))
    assert events.index("finish") < events.index("epilog-start")
    assert "free" not in events and "clean" not in events
    gate.release(jobid, "bb")
    wait_inactive(handle, jobid)
    events = names(eventlog(handle, jobid))
    assert events.index("epilog-finish") < events.index("free")


def test_hold_placed_in_cleanup_before_finish_activates_after_it(
    new_instance, tmp_path
):
    # Its processes ignore SIGTERM: the job waits in CLEANUP for its finish
    # until the kill timeout, and a hold placed then must wait for it too.
    # (An instance of its own: the session's has fake cores, no real tasks.)
    handle = new_instance().handle()
    gate = EpilogGate(handle)
    ready = tmp_path / "ready"
    command = f"trap '' TERM; touch {ready}; sleep 60"
    jobid = flux.job.submit(handle, JobspecV1.from_command(["sh", "-c", command]))
    deadline = time.time() + 30
    while not ready.exists():
        assert time.time() < deadline, "the job's shell never started"
        time.sleep(0.05)
    flux.job.cancel(handle, jobid)
    wait_event(handle, jobid, "exception")
    assert gate.hold(jobid, "bb")["state"] == "pending"
    assert "finish" not in names(eventlog(handle, jobid))
    wait_event(handle, jobid, "epilog-start", timeout=60)
    events = names(settle(handle, jobid, "clean"))
    assert events.index("finish") < events.index("epilog-start")
    assert "clean" not in events
    gate.release(jobid, "bb")
    wait_inactive(handle, jobid)


def test_normal_job_activates_hold_on_finish(handle, gate):
    jobid = submit(handle, urgency=0, duration=0.1)
    gate.hold(jobid, "teardown")
    set_urgency(handle, jobid, 16)
    wait_event(handle, jobid, "epilog-start")
    events = names(settle(handle, jobid, "clean"))
    assert events.index("finish") < events.index("epilog-start")
    assert "free" not in events and "clean" not in events
    gate.release(jobid, "teardown")
    wait_inactive(handle, jobid)


def test_two_holds_each_get_epilog_events_and_clean_waits_for_last(handle, gate):
    jobid = cancel_held(handle, gate, "bb", "unmount")
    gate.release(jobid, "bb")
    wait_event(handle, jobid, "epilog-finish", match=described("bb"))
    assert "clean" not in names(settle(handle, jobid, "clean"))
    gate.release(jobid, "unmount")
    wait_inactive(handle, jobid)
    events = eventlog(handle, jobid)
    for description in ("bb", "unmount"):
        assert len(named(events, "epilog-start", description)) == 1
        assert len(named(events, "epilog-finish", description)) == 1
    assert names(events)[-1] == "clean"


def test_releasing_pending_hold_cancels_it_without_epilog_events(handle, gate):
    jobid = submit(handle, urgency=0)
    gate.hold(jobid, "bb")
    assert gate.release(jobid, "bb") == {"released": True}
    assert gate.list(jobid) == []
    flux.job.cancel(handle, jobid)
    wait_inactive(handle, jobid)  # nothing holds it any more
    events = eventlog(handle, jobid)
    assert not named(events, "epilog-start") and not named(events, "epilog-finish")


def test_hold_after_epilog_point_is_active_at_once(handle, gate):
    jobid = cancel_held(handle, gate, "bb")
    assert gate.hold(jobid, "late")["state"] == "active"
    wait_event(handle, jobid, "epilog-start", match=described("late"))
    gate.release(jobid, "bb")
    wait_event(handle, jobid, "epilog-finish", match=described("bb"))
    assert "clean" not in names(settle(handle, jobid, "clean"))
    gate.release(jobid, "late")
    wait_inactive(handle, jobid)


def test_holding_twice_answers_existing_hold_with_one_event(handle, gate):
    jobid = submit(handle, urgency=0)
    first = gate.hold(jobid, "bb")
    assert gate.hold(jobid, "bb") == first
    assert len(gate.list(jobid)) == 1
    flux.job.cancel(handle, jobid)
    wait_event(handle, jobid, "epilog-start")  # committed after any hold event
    events = eventlog(handle, jobid)
    assert len(named(events, "epilog-start", "bb")) == 1
    gate.release(jobid, "bb")
    wait_inactive(handle, jobid)
