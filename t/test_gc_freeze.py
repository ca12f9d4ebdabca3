"""The gate's long-lived objects leave the cyclic collector's full
collections (plugin/gcpolicy.py), under a real job-manager: the plugin
freezes them once its load is ready and after each hold-log snapshot,
and its query counts the freezes and the frozen objects."""

import time

from jobs import query, submit, submit_many

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
    held = submit_many(handle, HELD, urgency=0)
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
    assert after["gc_collections_frozen"] >= before["gc_collections_frozen"] >= 0


def test_a_reloaded_plugin_freezes_again_once_ready(new_instance, plugin):
    inst = new_instance()
    gate = EpilogGate(inst.handle())
    gate.list()
    before = counters(inst)["gc_freezes"]
    inst.flux("jobtap", "remove", "epilog-gate.so")
    inst.flux("jobtap", "load", plugin)
    # Once ready, and once after the snapshot the reload writes the log
    # again with (in either order).
    after = freezes_after(inst, before + 1)
    assert after["gc_freezes"] == before + 2


def test_a_full_collection_of_the_interpreters_own_freezes_its_survivors():
    """Run apart (the collector is the interpreter's): the survivors of a
    full collection the interpreter makes by itself are frozen as it
    ends, and what was cyclic garbage then is collected, not frozen."""
    import subprocess
    import sys

    code = """
import gc, weakref
from flux_epilog_gate.plugin.gcpolicy import Freezer

freezer = Freezer()
freezer.install()
freezer.install()
assert gc.callbacks.count(freezer._collected) == 1

class Node:
    pass

cycle = Node()
cycle.me = cycle
dead = weakref.ref(cycle)
del cycle
kept = [Node() for _ in range(1000)]
before = gc.get_freeze_count()
made = []
for _ in range(10_000_000):
    made.append([])
    if freezer.collections:
        break
assert freezer.collections == 1, "no full collection of its own"
assert dead() is None, "cyclic garbage was frozen"
assert gc.get_freeze_count() >= before + len(kept) + len(made) - 1000
assert freezer.freezes == 0
freezer.freeze()
assert (freezer.freezes, freezer.collections) == (1, 1)
print("frozen", gc.get_freeze_count() - before, "after", len(made))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("frozen"), done.stdout
