"""Hold timeouts under a real flux instance.

The clock of a hold's timeout starts when the hold becomes active (its
epilog-start), never at registration; on expiry the gate posts
epilog-finish with the documented status 124 and raises a non-fatal job
exception naming the hold and the timeout; the job then goes inactive and
a late release is answered ``released: false`` with a reason.
"""

import re
import time

import flux.job
import pytest
from jobs import (
    described,
    eventlog,
    named,
    names,
    settle,
    submit,
    wait_event,
    wait_inactive,
)

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holds import TIMEOUT_STATUS


def _one(events, name, description=None):
    found = [
        e
        for e in named(events, name, description)
        if name != "exception" or e.context.get("type") != "cancel"
    ]
    assert len(found) == 1, f"expected one {name} {description or ''}: {found}"
    return found[0]


def test_timeout_status_is_documented_value():
    assert TIMEOUT_STATUS == 124


def test_timeout_clock_starts_when_hold_becomes_active(handle, gate):
    # A pending hold with a short timeout outlives its timeout while the
    # job is held in PRIORITY: the clock has not started.
    timeout = 1.5
    jobid = submit(handle, urgency=0)
    answer = gate.hold(jobid, "bb-clock", timeout=timeout)
    assert answer["state"] == "pending"
    time.sleep(timeout + 1.5)
    [entry] = gate.list(jobid)
    assert entry["state"] == "pending" and entry["timeout"] == pytest.approx(timeout)
    assert "t_start" not in entry
    events = names(eventlog(handle, jobid))
    assert "epilog-start" not in events and "epilog-finish" not in events
    assert "exception" not in events

    # Once the job reaches its epilog point the hold becomes active, and
    # only then does its timeout run.
    flux.job.cancel(handle, jobid)
    start = wait_event(handle, jobid, "epilog-start", match=described("bb-clock"))
    [entry] = gate.list(jobid)
    assert entry["state"] == "active"
    assert entry["t_start"] == pytest.approx(start.timestamp, abs=0.5)
    # Not expired at once (as it would be, had it counted from t_hold).
    events = settle(handle, jobid, "epilog-finish", seconds=timeout / 3)
    assert "epilog-finish" not in names(events)

    finish = wait_event(handle, jobid, "epilog-finish", match=described("bb-clock"))
    assert finish.context["status"] == TIMEOUT_STATUS == 124
    elapsed = finish.timestamp - start.timestamp
    assert timeout - 0.05 <= elapsed <= timeout + 3.0, elapsed
    wait_inactive(handle, jobid)
    events = eventlog(handle, jobid)
    assert names(events).index("epilog-finish") < names(events).index("clean")


def test_expiry_raises_nonfatal_exception_and_job_reaches_clean(handle, gate):
    jobid = submit(handle, duration=0.1)
    gate.hold(jobid, "bb-expire", timeout=1.5)
    start = wait_event(handle, jobid, "epilog-start", match=described("bb-expire"))
    clean = wait_inactive(handle, jobid, timeout=20)
    events = eventlog(handle, jobid)
    finish = _one(events, "epilog-finish", "bb-expire")
    assert finish.context["status"] == 124
    assert finish.timestamp - start.timestamp >= 1.5 - 0.05
    # The job ran and then finished normally before its epilog point.
    assert names(events).index("finish") < names(events).index("epilog-start")

    exception = _one(events, "exception")
    assert exception.context["severity"] > 0, "must not be a fatal exception"
    note = exception.context["note"]
    assert "bb-expire" in note, note
    assert "1.5" in note and "time" in note.lower(), note
    assert exception.timestamp <= clean.timestamp
    assert names(events)[-1] == "clean"
    assert gate.list(jobid) == []

    # A release that arrives after the timeout answers released: false.
    answer = gate.release(jobid, "bb-expire")
    assert answer["released"] is False
    assert isinstance(answer.get("reason"), str) and answer["reason"]


def test_release_after_timeout_before_clean(handle, gate):
    """A release of a timed-out hold while the job still waits for an
    other hold answers released: false (timed out), not an error."""
    jobid = submit(handle, urgency=0)
    gate.hold(jobid, "short", timeout=1.0)
    gate.hold(jobid, "long")
    flux.job.cancel(handle, jobid)
    finish = wait_event(handle, jobid, "epilog-finish", match=described("short"))
    assert finish.context["status"] == 124
    answer = gate.release(jobid, "short")
    assert answer["released"] is False
    assert "time" in answer["reason"], answer
    # The job is still held by the hold without a timeout.
    assert "clean" not in names(settle(handle, jobid, "clean"))
    assert [h["description"] for h in gate.list(jobid)] == ["long"]
    assert gate.release(jobid, "long") == {"released": True}
    wait_inactive(handle, jobid)


def test_release_before_timeout_stops_the_clock(handle, gate):
    jobid = submit(handle, urgency=0)
    gate.hold(jobid, "quick", timeout=1.0)
    flux.job.cancel(handle, jobid)
    wait_event(handle, jobid, "epilog-start", match=described("quick"))
    assert gate.release(jobid, "quick") == {"released": True}
    wait_inactive(handle, jobid)
    # Past the timeout: a clock left running would have fired by now.
    time.sleep(1.5)
    events = eventlog(handle, jobid)
    assert _one(events, "epilog-finish", "quick").context["status"] == 0
    assert not [
        e for e in events if e.name == "exception" and e.context.get("type") == "epilog"
    ]
    assert gate.release(jobid, "quick")["released"] is False


def test_default_timeout_from_load_option(new_instance, plugin):
    """``flux jobtap load epilog-gate.so timeout=1s``: holds without their
    own timeout get the plugin default, in human units; a hold's own
    timeout wins."""
    inst = new_instance(plugin=None)
    inst.flux("jobtap", "load", plugin, "timeout=1s")
    handle = inst.handle()
    gate = EpilogGate(handle)

    defaulted = submit(handle, urgency=0)
    own = submit(handle, urgency=0)
    gate.hold(defaulted, "dflt")
    gate.hold(own, "own", timeout=60)
    [entry] = gate.list(defaulted)
    assert entry["timeout"] == pytest.approx(1.0)
    [entry] = gate.list(own)
    assert entry["timeout"] == pytest.approx(60.0)

    flux.job.cancel(handle, defaulted)
    flux.job.cancel(handle, own)
    start = wait_event(handle, defaulted, "epilog-start", match=described("dflt"))
    finish = wait_event(handle, defaulted, "epilog-finish", match=described("dflt"))
    assert finish.context["status"] == 124
    assert 1.0 - 0.05 <= finish.timestamp - start.timestamp <= 4.0
    wait_inactive(handle, defaulted)
    note = _one(eventlog(handle, defaulted), "exception").context["note"]
    assert "dflt" in note

    # The hold with its own (long) timeout is still there, still active.
    events = eventlog(handle, own)
    assert "epilog-start" in names(events) and "clean" not in names(events)
    assert [h["state"] for h in gate.list(own)] == ["active"]
    assert gate.release(own, "own") == {"released": True}
    wait_inactive(handle, own)
    del handle


def test_hold_expired_while_down_says_how_long_it_was_active(new_instance):
    """An instance down past a hold's timeout: once back the hold expires,
    and its note gives the time it was really active, not the timeout."""
    # Long enough for the stop to end before it (a second on a loaded
    # machine); the instance stays down ``down`` seconds past it, more
    # than the note's precision and the tolerance below.
    timeout, down = 3.0, 2.0
    inst = new_instance(env={"FLUX_DISABLE_JOB_CLEANUP": "1"})
    handle = inst.handle()
    jobid = submit(handle, urgency=0)
    EpilogGate(handle).hold(jobid, "bb-down", timeout=timeout)
    flux.job.cancel(handle, jobid)
    start = wait_event(handle, jobid, "epilog-start", match=described("bb-down"))
    handle = None
    inst.stop()
    stopped = time.time()
    assert stopped < start.timestamp + timeout, "stopping took too long"
    time.sleep(max(0.0, start.timestamp + timeout + down - stopped))
    inst.start()
    handle = inst.handle()
    finish = wait_event(handle, jobid, "epilog-finish", match=described("bb-down"))
    assert finish.context["status"] == TIMEOUT_STATUS
    note = _one(eventlog(handle, jobid), "exception").context["note"]
    found = re.search(r"timed out after ([0-9.]+)s \(timeout 3s\)", note)
    assert found, note
    active = float(found.group(1))
    assert active >= timeout + down
    assert active == pytest.approx(finish.timestamp - start.timestamp, abs=0.5)
