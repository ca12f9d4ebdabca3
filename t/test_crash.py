"""An acknowledged hold or release survives a crash of the instance.

Each test makes the state before the requests durable (a synced KVS put
checkpoints it), sends N requests at once, waits for every answer, and
at once SIGKILLs the whole instance.  ``[kvs] checkpoint-period`` is far
longer than a test, so only the syncs of the requests themselves can have
checkpointed what they did.  The instance is then started again on the
same state directory, and every acknowledged request must have taken
effect: held jobs still wait for their holds; released ones go inactive
without further help; cancelled holds are gone and hold nothing.
"""

import time

import flux.job
import pytest
from conftest import restart
from crashes import CONFIG, N, all_answered, checkpoint
from jobs import (
    described,
    eventlog,
    named,
    names,
    query,
    recorded,
    settle,
    submit,
    submit_many,
    wait_event,
    wait_inactive,
)

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holdlog import KEY, MAX_APPENDS, parse


@pytest.fixture
def inst(new_instance):
    return new_instance(config=CONFIG)


def wait_recorded(inst, jobids, timeout=10.0):
    """Wait until the hold log names every job of ``jobids`` (whenever the
    gate writes it)."""
    deadline = time.monotonic() + timeout
    while True:
        now = recorded(inst)
        if all(jobid in now for jobid in jobids):
            return
        assert time.monotonic() < deadline, "holds not recorded"
        time.sleep(0.05)


def cancelled_at_point(handle, gate, jobids, description):
    """Cancel held jobs and wait until their holds are active."""
    for jobid in jobids:
        flux.job.cancel(handle, jobid)
    for jobid in jobids:
        wait_event(handle, jobid, "epilog-start", match=described(description))


def test_acknowledged_holds_survive_sigkill(inst):
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    pending = submit_many(handle, N, urgency=0)
    # Jobs cancelled before any hold: in CLEANUP, held by their hold only.
    waiting = submit_many(handle, N, urgency=0)
    first = [gate.hold_async(jobid, "keep") for jobid in waiting]
    all_answered(first)
    cancelled_at_point(handle, gate, waiting, "keep")
    checkpoint(inst)

    answers = all_answered(
        [gate.hold_async(jobid, "bb", timeout=3600) for jobid in pending]
        + [gate.hold_async(jobid, "late") for jobid in waiting]
    )
    assert {a["state"] for a in answers[:N]} == {"pending"}
    assert {a["state"] for a in answers[N:]} == {"active"}
    handle = restart(inst, "sigkill")
    gate = EpilogGate(handle)

    held = {(h["id"], h["description"]): h for h in gate.list()}
    for jobid in pending:
        assert held[(jobid, "bb")]["state"] == "pending"
        assert held[(jobid, "bb")]["timeout"] == 3600
    for jobid in waiting:
        assert held[(jobid, "late")]["state"] == "active"
    # The late holds keep their jobs from clean once "keep" is released.
    for jobid in waiting:
        assert gate.release(jobid, "keep") == {"released": True}
    last = settle(handle, waiting[-1], "clean", seconds=0.5)
    assert "clean" not in names(last)
    for jobid in waiting:
        assert len(named(eventlog(handle, jobid), "epilog-start", "late")) == 1
        assert gate.release(jobid, "late") == {"released": True}
        wait_inactive(handle, jobid)
    # The pending holds still become active on the exception path.
    cancelled_at_point(handle, gate, pending, "bb")
    assert "clean" not in names(settle(handle, pending[-1], "clean", seconds=0.3))
    for jobid in pending:
        assert gate.release(jobid, "bb") == {"released": True}
        wait_inactive(handle, jobid)


def test_acknowledged_releases_of_active_holds_survive_sigkill(inst):
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    jobids = submit_many(handle, N, urgency=0)
    all_answered([gate.hold_async(jobid, "bb") for jobid in jobids])
    cancelled_at_point(handle, gate, jobids, "bb")
    checkpoint(inst)

    statuses = {jobid: i % 3 for i, jobid in enumerate(jobids)}
    answers = all_answered(
        [gate.release_async(jobid, "bb", status=statuses[jobid]) for jobid in jobids]
    )
    assert answers == [{"released": True}] * N
    handle = restart(inst, "sigkill")
    gate = EpilogGate(handle)

    # Nobody releases them again: each goes on to clean by itself.
    for jobid in jobids:
        wait_inactive(handle, jobid)
        events = eventlog(handle, jobid)
        (finish,) = named(events, "epilog-finish", "bb")
        assert finish.context["status"] == statuses[jobid]
        raised = [
            e for e in named(events, "exception") if e.context.get("type") == "epilog"
        ]
        assert len(raised) == (1 if statuses[jobid] else 0), raised
    assert gate.list() == []
    assert gate.release(jobids[0], "bb")["released"] is False


def test_acknowledged_cancels_of_pending_holds_survive_sigkill(inst):
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    jobids = submit_many(handle, N, urgency=0)
    all_answered([gate.hold_async(jobid, "bb") for jobid in jobids])
    wait_recorded(inst, jobids)
    checkpoint(inst)

    answers = all_answered([gate.release_async(jobid, "bb") for jobid in jobids])
    assert answers == [{"released": True}] * N
    handle = restart(inst, "sigkill")
    gate = EpilogGate(handle)

    assert gate.list() == []
    # The jobs survived, still waiting.
    assert all("clean" not in names(eventlog(handle, jobid)) for jobid in jobids)
    for jobid in jobids:
        flux.job.cancel(handle, jobid)
    for jobid in jobids:
        wait_inactive(handle, jobid)
        assert named(eventlog(handle, jobid), "epilog-start") == []


def test_acknowledged_requests_survive_sigkill_across_a_snapshot(inst):
    """Enough synced writes that the hold log is replaced by a snapshot
    after releases of active holds: the snapshot keeps what a restart
    needs, and drops what it does not."""
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    active = [submit(handle, urgency=0) for _ in range(10)]
    all_answered([gate.hold_async(jobid, "a") for jobid in active])
    cancelled_at_point(handle, gate, active, "a")
    pending = submit_many(handle, MAX_APPENDS // 2 + 40, urgency=0)
    checkpoint(inst, pending)
    # One request at a time: a synced write each, MAX_APPENDS and more.
    for jobid in pending:
        gate.hold(jobid, "b")
    for jobid in active:
        assert gate.release(jobid, "a") == {"released": True}
    cancelled, kept = pending[: len(pending) // 2], pending[len(pending) // 2 :]
    for jobid in cancelled:
        assert gate.release(jobid, "b") == {"released": True}
    assert query(inst)["counters"]["log_commits"] > MAX_APPENDS
    handle = restart(inst, "sigkill")
    gate = EpilogGate(handle)

    assert sorted((h["id"], h["description"]) for h in gate.list()) == sorted(
        (jobid, "b") for jobid in kept
    )
    for jobid in active:
        wait_inactive(handle, jobid)
        assert len(named(eventlog(handle, jobid), "epilog-finish", "a")) == 1
    # The snapshot left out the holds cancelled before it.
    logged = parse(inst.flux("kvs", "get", KEY).stdout)[0]
    assert cancelled[0] not in logged and all(jobid in logged for jobid in kept)
