"""The hold log shrinks with its holds (holdlog.py, "Snapshots"), under a
real job-manager.

8,000 pending holds (40 jobs of 200) make a log of some 850 KB; then
they are released, nine in ten, then the rest.  Checked after each
drain: the log's key and segments together take at most the larger of
MAX_BYTES and about twice what the holds left take (what the log once
held does not count), and nothing of them is left out.
"""

import time

import flux.job
import pytest
from flux.job import JobspecV1
from jobs import hold_log, replayed

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holdlog import MAX_BYTES, parse

#: Jobs, and holds of each job (max-holds at its maximum).
JOBS = 40
HOLDS = 200
#: "About twice": a cancel entry takes 0.85 of a hold's, and the policy
#: reckons an entry as the last snapshot measured one.
RATIO = 2.5
#: Seconds a snapshot in progress may take to be swapped in.
SETTLE = 60.0


@pytest.fixture
def inst(new_instance):
    return new_instance(plugin_conf={"max-holds": HOLDS})


def waiting_jobs(handle, count):
    spec = JobspecV1.from_command(["true"]).dumps()
    futures = [flux.job.submit_async(handle, spec, urgency=0) for _ in range(count)]
    return [int(f.get_id()) for f in futures]


def requests(gate, method, holds, window=500):
    """``method`` (hold or release) of each of ``holds``, ``window`` in
    flight; each must succeed."""
    for start in range(0, len(holds), window):
        futures = [
            getattr(gate, f"{method}_async")(jobid, description)
            for jobid, description in holds[start : start + window]
        ]
        for future in futures:
            future.get()


def log_bytes(inst):
    return len(hold_log(inst).encode())


def within(inst, bound):
    """Wait until the log takes ``bound`` bytes at most (a snapshot in
    parts may still be on its way); its size then."""
    deadline = time.monotonic() + SETTLE
    size = log_bytes(inst)
    while size > bound and time.monotonic() < deadline:
        time.sleep(0.2)
        size = log_bytes(inst)
    return size


def test_the_log_shrinks_with_its_holds(inst):
    handle = inst.handle()
    gate = EpilogGate(handle)
    holds = [
        (jobid, f"d{k:03d}")
        for jobid in waiting_jobs(handle, JOBS)
        for k in range(HOLDS)
    ]
    requests(gate, "hold", holds)
    peak = log_bytes(inst)
    entry = peak / len(holds)
    assert peak > 3 * MAX_BYTES

    left = holds[: len(holds) // 10]
    requests(gate, "release", holds[len(left) :])
    bound = max(MAX_BYTES, RATIO * entry * len(left))
    size = within(inst, bound)
    assert size <= bound, (size, bound, peak)
    assert replayed(parse(hold_log(inst))[0]) == set(left)

    requests(gate, "release", left)
    size = within(inst, MAX_BYTES)
    assert size <= MAX_BYTES, (size, peak)
    assert replayed(parse(hold_log(inst))[0]) == set()
