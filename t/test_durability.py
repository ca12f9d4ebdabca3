"""Holds survive the plugin being removed and loaded again, a reload of
the job-manager and a restart of the instance from its state directory.

After each of them the holds are listed with their states, still block
``clean``, can be released, and their timeouts still fire on the clock
that started when they became active (not when the gate came back).
"""

import errno
import time

import flux.job
import pytest
from conftest import LEAD, SLACK, TIMEOUTS
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
from flux_epilog_gate.gate.holdlog import KEY, MARKER

#: A pending hold with its own timeout: the clock must not run until the
#: job reaches its epilog point, however long that takes.
PENDING_TIMEOUT = 1.5


@pytest.mark.parametrize("kind", ["jobtap", "module", "instance"])
def test_holds_survive_restart(kind, restarter):
    r = restarter(kind)
    handle, gate = r.handle, r.gate
    timeout = TIMEOUTS[kind]

    # A job held in PRIORITY with two pending holds, one with a timeout.
    pend = submit(handle, urgency=0)
    gate.hold(pend, "p-plain")
    gate.hold(pend, "p-timed", timeout=PENDING_TIMEOUT)
    # A job at its epilog point with an active hold and no timeout.
    act = submit(handle, urgency=0)
    gate.hold(act, "a-plain")
    flux.job.cancel(handle, act)
    wait_event(handle, act, "epilog-start", match=described("a-plain"))
    # A job with an active hold whose timeout spans the restart.
    timed = submit(handle, urgency=0)
    gate.hold(timed, "t-timed", timeout=timeout)
    flux.job.cancel(handle, timed)
    started = wait_event(handle, timed, "epilog-start", match=described("t-timed"))

    before = {(h["id"], h["description"]): h for h in gate.list()}
    assert {k: h["state"] for k, h in before.items()} == {
        (pend, "p-plain"): "pending",
        (pend, "p-timed"): "pending",
        (act, "a-plain"): "active",
        (timed, "t-timed"): "active",
    }

    time.sleep(max(0.0, started.timestamp + LEAD - time.time()))
    r.restart()
    restarted = time.time()
    handle, gate = r.handle, r.gate
    assert (
        restarted < started.timestamp + timeout - 1.0
    ), "the restart took too long to tell a resumed clock from a new one"

    # Listed with their states and times, as before.
    after = {(h["id"], h["description"]): h for h in gate.list()}
    assert {k: h["state"] for k, h in after.items()} == {
        k: h["state"] for k, h in before.items()
    }
    for key, hold in before.items():
        for field in ("userid", "timeout"):
            assert after[key].get(field) == hold.get(field), (key, field)
        assert after[key]["t_hold"] == pytest.approx(hold["t_hold"], abs=0.1)
        if "t_start" in hold:
            assert after[key]["t_start"] == pytest.approx(hold["t_start"], abs=0.1)
    assert gate.list(pend) and gate.list(act) and gate.list(timed)

    # Still blocking clean: nothing finished the active holds.
    events = settle(handle, act, "clean", seconds=0.5)
    assert "clean" not in names(events) and "epilog-finish" not in names(events)

    # The timeout resumes on the original clock.
    finish = wait_event(
        handle, timed, "epilog-finish", match=described("t-timed"), timeout=timeout + 20
    )
    assert finish.context["status"] == 124
    fired = finish.timestamp - started.timestamp
    assert timeout - 0.05 <= fired, fired
    assert finish.timestamp <= max(started.timestamp + timeout, restarted) + SLACK, (
        f"fired {fired:.2f}s after activation, "
        f"{finish.timestamp - restarted:.2f}s after the restart"
    )
    wait_inactive(handle, timed)
    timed_events = eventlog(handle, timed)
    notes = [
        e.context["note"]
        for e in timed_events
        if e.name == "exception" and e.context.get("type") != "cancel"
    ]
    assert len(notes) == 1 and "t-timed" in notes[0]
    assert len(named(eventlog(handle, timed), "epilog-start", "t-timed")) == 1
    assert len(named(eventlog(handle, timed), "epilog-finish", "t-timed")) == 1

    # A new hold on a recovered job that has not reached its epilog point
    # is pending, and can be cancelled without a trace.
    assert gate.hold(pend, "p-late")["state"] == "pending"
    assert gate.release(pend, "p-late") == {"released": True}
    assert len(named(eventlog(handle, pend), "epilog-start", "p-late")) == 0

    # Releasable.
    assert gate.release(act, "a-plain") == {"released": True}
    wait_inactive(handle, act)
    events = eventlog(handle, act)
    assert names(events).index("epilog-finish") < names(events).index("clean")
    assert gate.release(act, "a-plain")["released"] is False

    # Pending holds still become active on the exception path (clean is
    # held), and a pending hold's timeout runs only from then on.
    assert len(named(eventlog(handle, pend), "epilog-start", "p-timed")) == 0
    flux.job.cancel(handle, pend)
    start_p = wait_event(handle, pend, "epilog-start", match=described("p-plain"))
    start_t = wait_event(handle, pend, "epilog-start", match=described("p-timed"))
    finish_t = wait_event(handle, pend, "epilog-finish", match=described("p-timed"))
    assert finish_t.context["status"] == 124
    assert finish_t.timestamp - start_t.timestamp >= PENDING_TIMEOUT - 0.05
    events = settle(handle, pend, "clean", seconds=0.3)
    assert "clean" not in names(events)
    assert [h["description"] for h in gate.list(pend)] == ["p-plain"]
    assert gate.release(pend, "p-plain") == {"released": True}
    clean = wait_inactive(handle, pend)
    assert start_p.timestamp < clean.timestamp
    assert gate.list() == []

    # Active holds are told by their epilog-start, marked as the gate's;
    # pending ones were in the hold log.
    for jobid, description in ((pend, "p-plain"), (act, "a-plain"), (timed, "t-timed")):
        (start,) = named(eventlog(handle, jobid), "epilog-start", description)
        assert start.context[MARKER] is True, start.context
    log = r.inst.flux("kvs", "get", KEY).stdout
    for description in ("p-plain", "p-timed"):
        assert f'"description":"{description}"' in log, log


def test_hold_on_running_job_survives_plugin_reload(restarter):
    """A pending hold on a job that runs while the plugin is removed and
    loaded again becomes active on the job's finish, and holds its clean.

    (Only a plugin reload: flux-core's test execution does not reattach
    running jobs across a job-manager reload or an instance restart, with
    or without the gate.)"""
    r = restarter("jobtap")
    handle, gate = r.handle, r.gate
    # Long enough to outlast the reload on a loaded machine.
    jobid = submit(handle, duration=10)
    gate.hold(jobid, "run-hold")
    wait_event(handle, jobid, "start")
    r.restart()
    handle, gate = r.handle, r.gate
    assert [h["state"] for h in gate.list(jobid)] == ["pending"]
    start = wait_event(
        handle, jobid, "epilog-start", match=described("run-hold"), timeout=30
    )
    events = settle(handle, jobid, "clean", seconds=0.5)
    assert names(events).index("finish") < names(events).index("epilog-start")
    assert "clean" not in names(events)
    assert [h["state"] for h in gate.list(jobid)] == ["active"]
    assert gate.release(jobid, "run-hold") == {"released": True}
    clean = wait_inactive(handle, jobid)
    assert start.timestamp < clean.timestamp


def test_restart_twice_keeps_state(restarter):
    """Two instance restarts in a row: the recovered state is itself
    durable (nothing is lost by recovering from recovered state)."""
    r = restarter("instance")
    handle, gate = r.handle, r.gate
    pend = submit(handle, urgency=0)
    act = submit(handle, urgency=0)
    gate.hold(pend, "two-p")
    gate.hold(act, "two-a")
    flux.job.cancel(handle, act)
    wait_event(handle, act, "epilog-start", match=described("two-a"))
    for _ in range(2):
        r.restart()
        states = {(h["id"], h["description"]): h["state"] for h in r.gate.list()}
        assert states == {(pend, "two-p"): "pending", (act, "two-a"): "active"}
    handle, gate = r.handle, r.gate
    assert "clean" not in names(eventlog(handle, act))
    assert gate.release(act, "two-a") == {"released": True}
    wait_inactive(handle, act)
    flux.job.cancel(handle, pend)
    wait_event(handle, pend, "epilog-start", match=described("two-p"))
    assert gate.release(pend, "two-p") == {"released": True}
    wait_inactive(handle, pend)
    # One epilog-start and one epilog-finish each, despite two recoveries.
    for jobid, description in ((pend, "two-p"), (act, "two-a")):
        assert len(named(eventlog(handle, jobid), "epilog-start", description)) == 1
        assert len(named(eventlog(handle, jobid), "epilog-finish", description)) == 1


@pytest.mark.parametrize("kind", ["jobtap", "module", "instance"])
def test_new_hold_on_recovered_job_past_epilog_point(kind, restarter):
    """After a restart, a hold registered on a job already past its epilog
    point (waiting on a recovered hold) becomes active at once."""
    r = restarter(kind)
    handle, gate = r.handle, r.gate
    jobid = submit(handle, urgency=0)
    gate.hold(jobid, "first")
    flux.job.cancel(handle, jobid)
    wait_event(handle, jobid, "epilog-start", match=described("first"))
    r.restart()
    handle, gate = r.handle, r.gate
    try:
        assert gate.hold(jobid, "late")["state"] == "active"
        wait_event(handle, jobid, "epilog-start", match=described("late"))
        assert gate.release(jobid, "first") == {"released": True}
        assert "clean" not in names(settle(handle, jobid, "clean", seconds=0.3))
        assert gate.release(jobid, "late") == {"released": True}
        wait_inactive(handle, jobid)
    finally:
        # Let the job go, whatever happened above.
        try:
            gate.release(jobid, "first")
        except OSError:
            pass


@pytest.mark.parametrize("kind", ["jobtap", "module", "instance"])
def test_watch_stream_across_restart(kind, restarter):
    """A cleanup service watching across a restart either keeps receiving
    activations, or sees its stream end with an error (and a new watch is
    sent the holds that became active meanwhile): it is never left
    waiting on a stream that will not deliver."""
    r = restarter(kind)
    handle, gate = r.handle, r.gate
    watch_handle = r.inst.handle()
    stream = EpilogGate(watch_handle).watch_async(["w-hold"])
    jobid = submit(handle, urgency=0)
    gate.hold(jobid, "w-hold")
    r.restart()
    handle, gate = r.handle, r.gate
    flux.job.cancel(handle, jobid)
    wait_event(handle, jobid, "epilog-start", match=described("w-hold"))
    try:
        stream.wait_for(5)
        activation = stream.get()
    except OSError as exc:
        assert exc.errno != errno.ETIMEDOUT, "the watch stream was left hanging"
        # The stream ended: watch again, and get what became active.
        again = EpilogGate(r.inst.handle()).watch_async(["w-hold"])
        again.wait_for(5)
        activation = again.get()
    assert activation["id"] == jobid and activation["description"] == "w-hold"
    assert gate.release(jobid, "w-hold") == {"released": True}
    wait_inactive(handle, jobid)
