"""The hold log under a real job-manager: every hold is recorded in the KVS
key epilog-gate.holds before it is answered, the holds of many requests
in flight share one synced write, and holds that become active at once
are recorded too."""

import errno
import re
import time

import flux.job
import pytest
from jobs import (
    dmesg,
    eventlog,
    get_raw,
    held_waiting,
    named,
    query,
    recorded,
    submit,
    submit_many,
    wait_event,
    wait_inactive,
)

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holdlog import MARKER
from flux_epilog_gate.gate.holds import HOLD_EVENT


@pytest.fixture
def inst(new_instance):
    return new_instance()


def test_pending_holds_registered_together_share_a_few_writes(inst):
    handle = inst.handle()
    gate = EpilogGate(handle)
    jobids = submit_many(handle, 40, urgency=0)
    before = query(inst)["counters"]["log_commits"]
    # Pipelined: all in flight at once.
    futures = [gate.hold_async(jobid, "bb", timeout=60) for jobid in jobids]
    for future in futures:
        assert future.get()["state"] == "pending"
    # Answered only once recorded.
    jobs = recorded(inst)
    for jobid in jobids:
        assert jobs[jobid] == [
            (
                pytest.approx(jobs[jobid][0][0]),
                HOLD_EVENT,
                {"description": "bb", "timeout": 60},
            )
        ]
    writes = query(inst)["counters"]["log_commits"] - before
    # One synced write at a time: the holds that arrive while one is in
    # flight share the next.
    assert 1 <= writes < len(jobids), writes
    for jobid in jobids:
        flux.job.cancel(handle, jobid)
        gate.release(jobid, "bb")
        wait_inactive(handle, jobid)


def test_hold_on_job_past_its_epilog_point_is_recorded_too(inst):
    handle = inst.handle()
    gate = EpilogGate(handle)
    holder = submit(handle, urgency=0)
    gate.hold(holder, "first")
    flux.job.cancel(handle, holder)
    wait_event(handle, holder, "epilog-start")
    assert gate.hold(holder, "late", timeout=30)["state"] == "active"
    start = wait_event(
        handle,
        holder,
        "epilog-start",
        match=lambda context: context["description"] == "late",
    )
    assert start.context[MARKER] is True and start.context["timeout"] == 30
    assert [
        (name, context)
        for _, name, context in recorded(inst)[holder]
        if context["description"] == "late"
    ] == [(HOLD_EVENT, {"description": "late", "timeout": 30})]
    gate.release(holder, "first")
    gate.release(holder, "late")
    wait_inactive(handle, holder)
    assert len(named(eventlog(handle, holder), "epilog-finish")) == 2


def test_requests_in_flight_when_the_plugin_is_removed_are_all_answered(
    new_instance, plugin
):
    """Every request is answered, acknowledged or with an error that says
    to send it again; every acknowledged hold is still there once the
    plugin is loaded again, and recorded."""
    inst = new_instance(plugin=None)
    inst.flux("jobtap", "load", plugin)
    handle = inst.handle()
    gate = EpilogGate(handle)
    jobids = submit_many(handle, 200, urgency=0)
    futures = [gate.hold_async(jobid, "bb") for jobid in jobids]
    # Right behind the holds on the same connection: it reaches the
    # job-manager while their records are still being committed.
    handle.rpc("job-manager.jobtap", {"remove": "epilog-gate.so"}).get()
    acknowledged, refused = [], []
    for jobid, future in zip(jobids, futures):
        try:
            future.get()
            acknowledged.append(jobid)
        except OSError as exc:
            # EAGAIN: waiting for its record at the unload; ENOSYS: sent
            # after the service was gone.
            assert exc.errno in (errno.EAGAIN, errno.ENOSYS), exc
            refused.append(jobid)
    inst.flux("jobtap", "load", plugin)
    gate = EpilogGate(inst.handle())
    listed = {hold["id"] for hold in gate.list()}
    assert set(acknowledged) <= listed
    # Sent again, each is answered from the gate that took over.
    for jobid in refused:
        assert gate.hold(jobid, "bb")["state"] == "pending"
    jobs = recorded(inst)
    assert all(jobid in jobs for jobid in jobids)
    assert dmesg(inst, "uncaught") == [] and inst.alive()


def test_records_queued_when_the_plugin_is_removed_are_sent_at_once(
    new_instance, plugin
):
    """The unload sends the records still queued behind the commit in
    flight: every hold the plugin took in (acknowledged, or answered
    EAGAIN as it went away) is in the log with no next load."""
    inst = new_instance(plugin=None)
    inst.flux("jobtap", "load", plugin)
    handle = inst.handle()
    gate = EpilogGate(handle)
    jobids = submit_many(handle, 200, urgency=0)
    futures = [gate.hold_async(jobid, "bb") for jobid in jobids]
    handle.rpc("job-manager.jobtap", {"remove": "epilog-gate.so"}).get()
    taken = []
    for jobid, future in zip(jobids, futures):
        try:
            future.get()
            taken.append(jobid)
        except OSError as exc:
            assert exc.errno in (errno.EAGAIN, errno.ENOSYS), exc
            if exc.errno == errno.EAGAIN:
                taken.append(jobid)
    assert taken
    deadline = time.time() + 30
    # The log is read once a round (a command each time), not once a job.
    missing = set(taken)
    while missing:
        missing -= set(recorded(inst))
        assert time.time() < deadline, sorted(missing)
        time.sleep(0.2)
    assert dmesg(inst, "recording holds in") == [] and inst.alive()


def test_without_a_backing_store_holds_are_recorded_without_sync(inst):
    """A sync needs the content backing store: without one the gate says
    so once, and records (and answers) holds all the same."""
    inst.flux("module", "remove", "content-sqlite")
    handle = inst.handle()
    gate = EpilogGate(handle)
    jobids = [submit(handle, urgency=0) for _ in range(3)]
    for jobid in jobids:
        assert gate.hold(jobid, "bb")["state"] == "pending"
    assert len(dmesg(inst, "cannot sync")) == 1
    assert all(jobid in recorded(inst) for jobid in jobids)
    for jobid in jobids:
        assert gate.release(jobid, "bb") == {"released": True}


def test_every_line_carries_its_time_to_the_microsecond_as_json_writes_it(inst):
    handle = inst.handle()
    gate = EpilogGate(handle)
    jobids = held_waiting(handle, gate, 6)
    # A cancel line (a pending hold released) and a release line.
    gate.release(jobids[0], "bb")
    flux.job.cancel(handle, jobids[1])
    wait_event(handle, jobids[1], "epilog-start")
    gate.release(jobids[1], "bb")
    stamps = re.findall(r'"timestamp":([^,]+),', get_raw(inst).decode())
    # Six holds, a cancel, a release, and the log's format first.
    assert len(stamps) == 9, stamps
    for text in stamps:
        t = float(text)
        assert text == repr(t)
        assert round(t * 1e6) / 1e6 == t, text
    listed = {hold["id"]: hold["t_hold"] for hold in gate.list()}
    for jobid in jobids[2:]:
        assert round(listed[jobid] * 1e6) / 1e6 == listed[jobid]
        assert recorded(inst)[jobid][0][0] == listed[jobid]
    for jobid in jobids[2:]:
        flux.job.cancel(handle, jobid)
        gate.release(jobid, "bb")
        wait_inactive(handle, jobid)
