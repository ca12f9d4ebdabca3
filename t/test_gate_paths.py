"""The gate on every path a job can take to clean, proved by eventlogs."""

import flux.job
from jobs import eventlog, names, set_urgency, settle, submit, wait_event, wait_inactive


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
