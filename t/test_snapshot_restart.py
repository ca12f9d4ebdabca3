"""A hold keeps only the text of its time (``Hold.t_text``) and snapshots
of the hold log write its line again from the hold: across a snapshot and
a reload of either kind, ``list`` must answer every hold exactly as before
(its ``t_hold`` to the last digit), and each hold's line in the log must
be the one first committed.  Real instances; holds at every point, with
and without a timeout, and enough of them for a snapshot."""

import json
import time

import pytest
from conftest import restart
from jobs import get_raw, set_urgency, submit, wait_event

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holdlog import HOLD_EVENT, MAX_APPENDS

#: Holds per job held at its epilog point, and per pending job.
PER_JOB = 45


def hold_lines(inst):
    """Each hold entry of the log, by (id, description)."""
    raw = get_raw(inst)
    lines = {}
    for line in raw.splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)
        if entry["name"] == HOLD_EVENT:
            context = entry["context"]
            lines.setdefault((context["id"], context["description"]), set()).add(line)
    return lines


def listed(gate):
    """``list``, by (id, description); waits while the gate is loading."""
    deadline = time.time() + 60
    while True:
        try:
            return {(h["id"], h["description"]): h for h in gate.list()}
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.parametrize("kind", ["kill", "jobtap"])
def test_snapshot_lines_and_t_hold_survive_a_reload_exactly(new_instance, plugin, kind):
    inst = new_instance(env={"FLUX_DISABLE_JOB_CLEANUP": "1"})
    handle = inst.handle()
    gate = EpilogGate(handle)
    held = [submit(handle, duration=4) for _ in range(3)]
    pending = [submit(handle, urgency=0) for _ in range(3)]
    prolog = [submit(handle, urgency=0) for _ in range(2)]
    deps = {"system.dependencies": [{"scheme": "afterany", "value": str(held[0])}]}
    depend = [submit(handle, **deps) for _ in range(2)]
    # One request at a time: each its own append, so snapshots happen.
    for job in held + pending:
        for k in range(PER_JOB):
            timeout = None if k % 2 else 1000 + k / 10
            gate.hold(job, f"h{k}", timeout=timeout)
    for job in prolog:
        for k in range(4):
            gate.hold(job, f"p{k}", timeout=None if k % 2 else 999.5, point="prolog")
    for job in depend:
        for k in range(4):
            gate.hold(job, f"d{k}", timeout=None if k % 2 else 3600, point="depend")
    for job in prolog:
        set_urgency(handle, job, 16)
    for job in held:
        wait_event(handle, job, "epilog-start", timeout=60)
    for job in prolog:
        wait_event(handle, job, "prolog-start", timeout=60)
    for job in pending:
        for k in range(0, PER_JOB, 5):
            gate.release(job, f"h{k}")
    # A synced record last: the job-manager's own events are checkpointed.
    sync = submit(handle, urgency=0)
    gate.hold(sync, "sync")
    gate.release(sync, "sync")
    records = 6 * PER_JOB + 16 + 3 * PER_JOB // 5 + 2
    assert records > MAX_APPENDS

    before = listed(gate)
    lines_before = hold_lines(inst)
    if kind == "kill":
        handle = restart(inst, "sigkill")
        gate = EpilogGate(handle)
    else:
        inst.flux("jobtap", "remove", "epilog-gate.so")
        inst.flux("jobtap", "load", plugin)
    after = listed(gate)

    assert set(after) == set(before)
    for key, hold in before.items():
        now = after[key]
        # t_start is the gate's clock before, the event's after a restart.
        assert now.pop("t_start", None) == pytest.approx(
            hold.pop("t_start", None), abs=0.1
        ), key
        assert now == hold, key
    # A snapshot after the reload writes each hold's line as first committed.
    for job in pending:
        for k in range(1, PER_JOB, 5):
            gate.release(job, f"h{k}")
    for k in range(MAX_APPENDS // 2 + 1):
        gate.hold(pending[0], f"s{k}")
        gate.release(pending[0], f"s{k}")
    lines_after = hold_lines(inst)
    for key, lines in lines_before.items():
        if key in lines_after and key in after:
            assert lines_after[key] & lines, key
