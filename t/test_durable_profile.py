"""The durable workload of bench/instructions.py counts what it says: a
synced ``hold`` per job, on every broker thread, under callgrind in a
real instance.

The figures of the performance table's durable row come from it; this
checks the harness (threads named, commits counted, the gate's Python
found), not a speed.
"""

import tempfile

import pytest
from conftest import callgrind_counter

#: Under callgrind: run by make check-slow.
pytestmark = pytest.mark.slow

HOLDS = 60


def test_the_durable_workload_counts_every_thread_a_synced_hold_costs():
    instructions = callgrind_counter()
    with tempfile.TemporaryDirectory(prefix="durable-profile-") as tmp:
        gate = instructions.measure("gate", HOLDS, tmp, "durable")
        native = instructions.measure("native-synced", HOLDS, tmp, "durable")
    for result in (gate, native):
        threads = result["threads_per_job"]
        # A synced record is written by the KVS and flushed by the
        # content store: each shows up under its own name.
        for name in ("job-manager", "kvs", "content", "content-sqlite"):
            assert threads.get(name, 0) > 0, (name, threads)
        assert threads["job-manager"] == result["instructions_per_job"]
        assert result["all_threads_per_job"] == sum(threads.values())
        # Every hold was answered only once a commit carried it.
        assert 1 <= result["holds_per_commit"] <= HOLDS
    assert gate["python_per_job"] > 0
    assert native["python_per_job"] == 0
