"""A hold log changed by another hand between two runs of an instance:
the instance starts, the gate loads, and every hold the log's valid
records leave is kept, or reported lost by name (gate/loader.py,
gate/recovery.py)."""

import json

import flux.kvs
import pytest
from conftest import restart
from jobs import dmesg, query, set_urgency, submit, wait_event, wait_inactive

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.config import MAX_HOLDS_LIMIT
from flux_epilog_gate.gate.holdlog import KEY, SEGMENTS
from flux_epilog_gate.gate.holds import HOLD_EVENT


@pytest.fixture
def inst(new_instance):
    return new_instance(plugin_conf={"max-holds": MAX_HOLDS_LIMIT})


def listed(gate, jobid=None):
    return {(h["id"], h["description"]) for h in gate.list(jobid)}


def test_a_stray_key_beside_the_segments_costs_no_pending_hold(inst):
    handle = inst.handle()
    gate = EpilogGate(handle)
    jobid = submit(handle, urgency=0)
    gate.hold(jobid, "bb-teardown")
    inst.flux("kvs", "put", f"{SEGMENTS}.README=do not touch")

    handle = restart(inst, "instance")
    gate = EpilogGate(handle)
    assert listed(gate) == {(jobid, "bb-teardown")}
    assert query(inst)["counters"]["lost"] == 0
    assert dmesg(inst, f"{SEGMENTS}.README is left out")
    # The next commit is a snapshot, which removes what the gate never wrote.
    gate.hold(jobid, "after")
    assert not flux.kvs.exists(handle, SEGMENTS)
    handle = restart(inst, "instance")
    gate = EpilogGate(handle)
    assert listed(gate) == {(jobid, "bb-teardown"), (jobid, "after")}
    gate.release(jobid, "bb-teardown")
    gate.release(jobid, "after")


def entries(jobid, count, point):
    return "".join(
        json.dumps(
            {
                "timestamp": 1.7e9 + k,
                "name": HOLD_EVENT,
                "context": {"id": jobid, "description": f"d{k:03}", "point": point},
            }
        )
        + "\n"
        for k in range(count)
    )


def test_holds_past_the_most_a_job_can_have_are_lost_by_name_and_jobs_go_on(inst):
    """Prolog holds past the limit would overflow the job-manager's count
    of the job's open actions, which fails its alloc and stops the
    scheduler for every job: they are dropped as the log is read, each
    reported lost, and the job starts once the others are released."""
    extra = 5
    handle = inst.handle()
    jobid = submit(handle, urgency=0)
    inst.flux("jobtap", "remove", "epilog-gate.so")
    inst.flux("kvs", "put", "--raw", f"{KEY}=-", input=entries(jobid, 205, "prolog"))

    handle = restart(inst, "instance")
    gate = EpilogGate(handle)
    kept = {(jobid, f"d{k:03}") for k in range(MAX_HOLDS_LIMIT)}
    assert listed(gate, jobid) == kept
    assert query(inst)["counters"]["lost"] == extra
    for k in range(MAX_HOLDS_LIMIT, MAX_HOLDS_LIMIT + extra):
        assert dmesg(inst, f"hold d{k:03} of job")
    set_urgency(handle, jobid, 16)
    wait_event(
        handle, jobid, "prolog-start", match=lambda c: c["description"] == "d199"
    )
    # The scheduler goes on: another job runs to its end meanwhile.
    other = submit(handle)
    wait_inactive(handle, other)
    for _, description in sorted(kept):
        gate.release(jobid, description)
    wait_event(handle, jobid, "start")
    wait_inactive(handle, jobid)
