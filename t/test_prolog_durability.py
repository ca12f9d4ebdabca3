"""Prolog holds survive the plugin being removed and loaded again, a reload
of the job-manager and a restart of the instance: an active prolog hold
still keeps its job from starting, its release then starts it, and its
timeout resumes on the clock that started when it became active."""

import time

import pytest
from conftest import LEAD, SLACK, TIMEOUTS
from jobs import (
    described,
    eventlog,
    named,
    names,
    set_urgency,
    settle,
    submit,
    wait_event,
    wait_inactive,
)

from flux_epilog_gate.gate.holdlog import KEY, MARKER

PROLOG = "prolog"


@pytest.mark.parametrize("kind", ["jobtap", "module", "instance"])
def test_prolog_holds_survive_restart(kind, restarter):
    r = restarter(kind)
    handle, gate = r.handle, r.gate
    timeout = TIMEOUTS[kind]

    # Pending: a job held in PRIORITY with a prolog and an epilog hold.
    pend = submit(handle, duration=0.1, urgency=0)
    gate.hold(pend, "p-setup", point=PROLOG)
    gate.hold(pend, "p-teardown")
    # Active: a job in RUN whose start the gate holds.
    act = submit(handle, duration=0.1, urgency=0)
    gate.hold(act, "a-setup", point=PROLOG)
    set_urgency(handle, act, 16)
    wait_event(handle, act, "prolog-start", match=described("a-setup"))
    # Active with a timeout that spans the restart.
    timed = submit(handle, duration=0.1, urgency=0)
    gate.hold(timed, "t-setup", point=PROLOG, timeout=timeout)
    set_urgency(handle, timed, 16)
    started = wait_event(handle, timed, "prolog-start", match=described("t-setup"))
    before = {(h["id"], h["description"]): h for h in gate.list()}

    time.sleep(max(0.0, started.timestamp + LEAD - time.time()))
    # A new job-manager has no scheduler and no exec service until they
    # say hello again: they are reloaded with it.
    r.restart(dependents=True)
    restarted = time.time()
    handle, gate = r.handle, r.gate
    assert restarted < started.timestamp + timeout - 1.0, "restart took too long"

    after = {(h["id"], h["description"]): h for h in gate.list()}
    assert {k: (h["state"], h["point"]) for k, h in after.items()} == {
        (pend, "p-setup"): ("pending", PROLOG),
        (pend, "p-teardown"): ("pending", "epilog"),
        (act, "a-setup"): ("active", PROLOG),
        (timed, "t-setup"): ("active", PROLOG),
    }
    for key, hold in before.items():
        assert after[key].get("timeout") == hold.get("timeout"), key
        if "t_start" in hold:
            assert after[key]["t_start"] == pytest.approx(hold["t_start"], abs=0.1)

    # The active prolog hold still keeps the job from starting.
    assert "start" not in names(settle(handle, act, "start", seconds=0.5))
    assert gate.release(act, "a-setup") == {"released": True}
    wait_event(handle, act, "start", timeout=30)
    wait_inactive(handle, act, timeout=30)
    (finish,) = named(eventlog(handle, act), "prolog-finish")
    assert finish.context[MARKER] is True and finish.context["status"] == 0

    # The timeout resumes on the original clock and fails the job.
    finish = wait_event(
        handle, timed, "prolog-finish", match=described("t-setup"), timeout=timeout + 20
    )
    assert finish.context["status"] == 124
    assert finish.timestamp - started.timestamp >= timeout - 0.05
    assert finish.timestamp <= max(started.timestamp + timeout, restarted) + SLACK
    wait_inactive(handle, timed, timeout=30)
    events = eventlog(handle, timed)
    assert "start" not in names(events)
    (exc,) = [e for e in named(events, "exception") if e.context["severity"] == 0]
    assert "t-setup" in exc.context["note"] and "timed out" in exc.context["note"]

    # The pending prolog hold becomes active when its job enters RUN.
    set_urgency(handle, pend, 16)
    wait_event(handle, pend, "prolog-start", match=described("p-setup"), timeout=30)
    assert "start" not in names(settle(handle, pend, "start", seconds=0.5))
    gate.release(pend, "p-setup")
    wait_event(handle, pend, "epilog-start", match=described("p-teardown"), timeout=30)
    order = names(eventlog(handle, pend))
    assert order.index("prolog-finish") < order.index("start")
    assert order.index("finish") < order.index("epilog-start")
    gate.release(pend, "p-teardown")
    wait_inactive(handle, pend, timeout=30)
    assert gate.list() == []
    # The pending prolog hold was recorded with its point.
    log = r.inst.flux("kvs", "get", KEY).stdout
    assert '"description":"p-setup","point":"prolog"' in log, log


def test_prolog_hold_pending_while_the_plugin_is_removed_is_gone(restarter):
    """A job that enters RUN while the plugin is not loaded is not held:
    its pending prolog hold is answered as gone once the plugin is back."""
    r = restarter("jobtap")
    handle, gate = r.handle, r.gate
    jobid = submit(handle, duration=0.1, urgency=0)
    gate.hold(jobid, "setup", point=PROLOG)
    r.inst.flux("jobtap", "remove", "epilog-gate.so")
    set_urgency(handle, jobid, 16)
    wait_inactive(handle, jobid)
    r.inst.flux("jobtap", "load", r.plugin)
    assert gate.list() == []
    answer = gate.release(jobid, "setup")
    assert answer["released"] is False
    assert "prolog-start" not in names(eventlog(handle, jobid))
