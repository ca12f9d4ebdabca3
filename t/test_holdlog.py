"""The hold log under a real job-manager: holds are recorded in the KVS
key epilog-gate.holds, many per write, also those that become active at
once (the log names every job with holds; their epilog-start records
them too)."""

import time

import flux.job
import pytest
from jobs import eventlog, named, query, submit, wait_event, wait_inactive

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.holdlog import KEY, MARKER, parse
from flux_epilog_gate.holds import HOLD_EVENT


def logged(inst):
    done = inst.flux("kvs", "get", KEY, check=False)
    return parse(done.stdout if done.returncode == 0 else "")[0]


def wait_logged(inst, jobids, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        jobs = logged(inst)
        if all(jobid in jobs for jobid in jobids) or time.monotonic() > deadline:
            return jobs
        time.sleep(0.05)


@pytest.fixture
def inst(new_instance):
    return new_instance()


def test_pending_holds_registered_together_share_a_few_writes(inst):
    handle = inst.handle()
    gate = EpilogGate(handle)
    jobids = [submit(handle, urgency=0) for _ in range(40)]
    before = query(inst)["counters"]["log_commits"]
    for jobid in jobids:
        gate.hold(jobid, "bb", timeout=60)
    jobs = wait_logged(inst, jobids)
    for jobid in jobids:
        assert jobs[jobid] == [
            (
                pytest.approx(jobs[jobid][0][0]),
                HOLD_EVENT,
                {"description": "bb", "timeout": 60},
            )
        ]
    writes = query(inst)["counters"]["log_commits"] - before
    assert 1 <= writes < len(jobids) / 2, writes
    for jobid in jobids:
        flux.job.cancel(handle, jobid)
        gate.release(jobid, "bb")
        wait_inactive(handle, jobid)


def test_hold_on_job_past_its_epilog_point_is_in_the_log_too(inst):
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
    time.sleep(0.2)  # several flush delays
    assert [
        context
        for _, name, context in logged(inst).get(holder, [])
        if name == HOLD_EVENT and context["description"] == "late"
    ] == [{"description": "late", "timeout": 30}]
    gate.release(holder, "first")
    gate.release(holder, "late")
    wait_inactive(handle, holder)
    assert len(named(eventlog(handle, holder), "epilog-finish")) == 2
