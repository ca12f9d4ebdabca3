"""The gate's long-lived objects leave the cyclic collector's full
collections (plugin/gcpolicy.py), under a real job-manager: the plugin
freezes them once its load is ready and after each hold-log snapshot,
and its query counts the freezes and the frozen objects."""

import time

from jobs import query, submit

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holdlog import MAX_APPENDS

#: Jobs held before the snapshot: their objects are frozen by it.
HELD = 200


def counters(inst):
    return query(inst)["counters"]


def freezes_after(inst, count, limit=60):
    """The query's counters once it has counted more than ``count``
    freezes (a snapshot completes after its commit is answered)."""
    deadline = time.monotonic() + limit
    while True:
        now = counters(inst)
        if now["gc_freezes"] > count or time.monotonic() > deadline:
            return now
        time.sleep(0.1)


def test_a_ready_load_and_each_snapshot_freeze_the_gates_objects(new_instance):
    inst = new_instance()
    handle = inst.handle()
    gate = EpilogGate(handle)
    gate.list()  # answered once the load is ready
    ready = counters(inst)
    assert ready["gc_freezes"] >= 1 and ready["gc_frozen"] > 0
    held = [submit(handle, urgency=0) for _ in range(HELD)]
    for jobid in held:
        gate.hold(jobid, "bb")
    spare = submit(handle, urgency=0)
    before = counters(inst)
    assert before["gc_freezes"] == ready["gc_freezes"]
    # One commit each: the log reaches MAX_APPENDS and is snapshotted.
    for _ in range(MAX_APPENDS // 2 + 1):
        gate.hold(spare, "churn")
        gate.release(spare, "churn")
    after = freezes_after(inst, before["gc_freezes"])
    assert after["gc_freezes"] == before["gc_freezes"] + 1
    # The objects of the 200 holds were frozen with it (3 or so each).
    assert after["gc_frozen"] >= before["gc_frozen"] + HELD
    assert after["holds"] == HELD


def test_a_reloaded_plugin_freezes_again_once_ready(new_instance, plugin):
    inst = new_instance()
    gate = EpilogGate(inst.handle())
    gate.list()
    before = counters(inst)["gc_freezes"]
    inst.flux("jobtap", "remove", "epilog-gate.so")
    inst.flux("jobtap", "load", plugin)
    after = freezes_after(inst, before)
    assert after["gc_freezes"] == before + 1
