"""Acknowledged prolog holds and their releases survive a crash too.

As in test_crash.py: the state before the requests is made durable, the
requests are sent at once, every answer is awaited, the whole instance is
SIGKILLed and started again on the same state directory.
"""

from conftest import restart
from crashes import CONFIG, N, all_answered, checkpoint
from jobs import (
    described,
    eventlog,
    named,
    names,
    set_urgency,
    settle,
    submit_many,
    wait_event,
    wait_inactive,
)

from flux_epilog_gate import EpilogGate


def test_acknowledged_prolog_holds_survive_sigkill(new_instance):
    inst = new_instance(config=CONFIG)
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    jobids = submit_many(handle, N, duration=0.1, urgency=0)
    checkpoint(inst, jobids)

    answers = all_answered(
        [gate.hold_async(jobid, "setup", point="prolog") for jobid in jobids]
    )
    assert {(a["state"]) for a in answers} == {"pending"}
    handle = restart(inst, "sigkill")
    gate = EpilogGate(handle)

    held = {(h["id"], h["description"]): h for h in gate.list()}
    assert all(held[(jobid, "setup")]["point"] == "prolog" for jobid in jobids)
    # Still keeps the start back once the job runs; its release starts it.
    jobid = jobids[0]
    set_urgency(handle, jobid, 16)
    wait_event(handle, jobid, "prolog-start", match=described("setup"))
    assert "start" not in names(settle(handle, jobid, "start", seconds=0.3))
    assert gate.release(jobid, "setup") == {"released": True}
    wait_event(handle, jobid, "start")
    wait_inactive(handle, jobid)


def test_acknowledged_releases_of_active_prolog_holds_survive_sigkill(new_instance):
    inst = new_instance(config=CONFIG)
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    jobids = submit_many(handle, N, duration=0.1, urgency=0)
    all_answered([gate.hold_async(j, "setup", point="prolog") for j in jobids])
    for jobid in jobids:
        set_urgency(handle, jobid, 16)
    for jobid in jobids:
        wait_event(handle, jobid, "prolog-start", match=described("setup"))
    checkpoint(inst)

    answers = all_answered([gate.release_async(j, "setup") for j in jobids])
    assert answers == [{"released": True}] * N
    handle = restart(inst, "sigkill")
    gate = EpilogGate(handle)

    # Nobody releases them again: each starts, runs and ends by itself,
    # with one prolog-finish of the gate's.
    for jobid in jobids:
        wait_inactive(handle, jobid, timeout=30.0)
        events = eventlog(handle, jobid)
        assert "start" in names(events)
        assert len(named(events, "prolog-finish", "setup")) == 1
    assert gate.list() == []
