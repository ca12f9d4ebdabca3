"""Hold log snapshots written in parts, under a real job-manager
(holdlog.py, "Snapshots in parts").

The instances load the gate with ``snapshot-chunk`` at its minimum
(1 KiB), so that a snapshot of some 1,500 holds is written in 150 parts
to epilog-gate.holds-next before it is swapped in.  Each snapshot is
asked for (the ``snapshot`` request): whether one comes by itself after
MAX_APPENDS commits depends on how the holds before were batched (a
log that took many small commits had its snapshots already, and its
full key is made a segment), and that policy is the unit tests' (t/gate/
test_unit_compaction.py, test_unit_snapshot.py).  Checked:
the swapped log is every hold and a restart recovers them all; a SIGKILL
in the middle loses no acknowledged hold and the part-written side key
it leaves is replaced by the next snapshot; whatever is at the side key
beforehand (a directory here) is replaced and removed.
"""

import json

import flux.job
import pytest
from conftest import restart
from flux.core.inner import ffi, lib, raw
from flux.job import JobspecV1
from jobs import GATE_SYNCS_ONLY, dmesg, query, replayed

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holdlog import KEY, SIDE_KEY, parse

#: Held jobs: with a 1 KiB chunk, a snapshot of some 150 parts.
HELD = 1500
CHUNK = 1024


@pytest.fixture
def inst(new_instance):
    return new_instance(config=GATE_SYNCS_ONLY, plugin_conf={"snapshot-chunk": CHUNK})


def submit_waiting(handle, count, window=256):
    """``count`` jobs that wait in SCHED (urgency 0), submitted
    ``window`` at a time."""
    spec = JobspecV1.from_command(["true"]).dumps()
    ids = []
    while len(ids) < count:
        futures = [
            flux.job.submit_async(handle, spec, urgency=0)
            for _ in range(min(window, count - len(ids)))
        ]
        ids.extend(int(f.get_id()) for f in futures)
    return ids


def hold_all(gate, jobids, description="bb", window=500):
    """Hold every job, ``window`` requests in flight; every answer."""
    for start in range(0, len(jobids), window):
        futures = [
            gate.hold_async(jobid, description)
            for jobid in jobids[start : start + window]
        ]
        for future in futures:
            assert future.get()["state"] == "pending"


def churn(gate, jobid, commits):
    """``commits`` synced commits: a hold and its release, one at a time."""
    for _ in range(commits // 2):
        gate.hold(jobid, "churn")
        assert gate.release(jobid, "churn") == {"released": True}


def side_exists(handle):
    """True if there is anything at the side key (a directory too): its
    tree object is looked up, and the future destroyed at once (this is
    polled)."""
    future = raw.flux_kvs_lookup(
        handle.handle, ffi.NULL, lib.FLUX_KVS_TREEOBJ, SIDE_KEY.encode()
    )
    treeobj = ffi.new("const char *[1]")
    try:
        raw.flux_kvs_lookup_get_treeobj(future, treeobj)
    except FileNotFoundError:
        return False
    finally:
        raw.flux_future_destroy(future)
    return True


def log_treeobj(inst):
    return json.loads(inst.flux("kvs", "get", "--treeobj", KEY).stdout)


def listed(gate):
    return {(h["id"], h["description"]) for h in gate.list()}


def logged(inst):
    return parse(inst.flux("kvs", "get", KEY).stdout)


def test_a_snapshot_in_parts_is_the_log_and_a_restart_recovers_every_hold(inst):
    handle = inst.handle()
    gate = EpilogGate(handle)
    jobids = submit_waiting(handle, HELD + 1)
    held, spare = jobids[:-1], jobids[-1]
    hold_all(gate, held)
    churn(gate, spare, 2)
    before = query(inst)["counters"]["log_commits"]
    # Answered once the snapshot is swapped in.
    gate.snapshot()
    assert not side_exists(handle)
    treeobj = log_treeobj(inst)
    # Its parts are the log's blobs, each at most a chunk and an entry,
    # each a commit.
    parts = len(treeobj["data"])
    assert parts > HELD * 100 // CHUNK // 2, treeobj
    assert query(inst)["counters"]["log_commits"] - before >= parts
    jobs, skipped = logged(inst)
    assert skipped == [] and set(held) <= set(jobs)
    # Only the holds: the churn's cancelled holds are gone.
    assert all(len(entries) == 1 for entries in (jobs[j] for j in held))
    assert not side_exists(handle)

    handle = restart(inst, "instance")
    gate = EpilogGate(handle)
    assert listed(gate) == {(jobid, "bb") for jobid in held}
    assert dmesg(inst, "skipped") == []


def test_sigkill_in_the_middle_of_a_snapshot_loses_no_acknowledged_hold(inst):
    handle = inst.handle()
    gate = EpilogGate(handle)
    jobids = submit_waiting(handle, HELD + 1 + 50)
    held, spare, late = jobids[:HELD], jobids[HELD], jobids[HELD + 1 :]
    hold_all(gate, held)
    churn(gate, spare, 2)
    # A snapshot of some 150 parts is asked for; holds one at a time,
    # each acknowledged while its parts go on, then the broker is killed.
    snapshot = gate.snapshot_async()
    acknowledged = []
    during = 0
    for jobid in late:
        assert gate.hold(jobid, "late")["state"] == "pending"
        acknowledged.append(jobid)
        if side_exists(handle):
            during += 1
            if during == 3:
                break
    assert during == 3, "no snapshot in parts was seen"
    assert not snapshot.is_ready()
    handle = restart(inst, "sigkill")
    gate = EpilogGate(handle)

    # Killed before the swap: its part-written side key is left, ignored.
    assert side_exists(handle)
    holds = listed(gate)
    assert {(jobid, "bb") for jobid in held} <= holds
    assert {(jobid, "late") for jobid in acknowledged} <= holds
    assert dmesg(inst, "skipped") == [] and dmesg(inst, "Traceback") == []

    # The next snapshot replaces the stale side key, and removes it.
    gate.snapshot()
    assert not side_exists(handle)
    jobs, skipped = logged(inst)
    assert skipped == [] and replayed(jobs) == holds
    assert listed(EpilogGate(restart(inst, "sigkill"))) == holds


def test_a_directory_at_the_side_key_is_replaced_and_removed(inst):
    handle = inst.handle()
    gate = EpilogGate(handle)
    inst.flux("kvs", "put", f"{SIDE_KEY}.junk=1")
    jobids = submit_waiting(handle, HELD + 1)
    held, spare = jobids[:-1], jobids[-1]
    hold_all(gate, held)
    churn(gate, spare, 2)
    gate.snapshot()
    assert not side_exists(handle)
    assert len(log_treeobj(inst)["data"]) > HELD * 100 // CHUNK // 2
    jobs, skipped = logged(inst)
    assert skipped == [] and set(held) <= set(jobs)
    assert dmesg(inst, "snapshot given up") == []
