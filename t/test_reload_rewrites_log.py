"""The hold log unlinked or rewritten by another hand while the plugin is
removed: the gate that the next load takes over writes the whole log
again from its holds, so a restart of the instance afterwards (stopped,
or SIGKILLed) lists every hold again.

The gate kept its holds in memory across the reload but only appended
its next records to whatever value was there: the holds recorded only
in the value that was unlinked or replaced were gone from the KVS, and
the next restart lost them without a word.

Two instances: one whose rewrite fits one commit, one whose
``snapshot-chunk`` (1 KiB, its minimum) makes it a snapshot in parts."""

import itertools
import time

import pytest
from conftest import restart
from jobs import query, recorded, submit_many

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holdlog import KEY, SEGMENTS, segment_key
from flux_epilog_gate.gate.holds import HOLD_EVENT
from flux_epilog_gate.testing import Instance

#: Held jobs per variant, and the plugin's options, by instance: the
#: rewrite in one commit, or in parts (some 40 entries of 95 bytes).
SIZES = {
    "whole": (5, {}),
    "parts": (40, {"snapshot-chunk": 1024}),
}

NUMBERS = itertools.count()


@pytest.fixture(scope="module", params=sorted(SIZES))
def inst(plugin, request):
    held, conf = SIZES[request.param]
    with Instance(cores=8, plugin=plugin, plugin_conf=conf) as inst:
        inst.held = held
        yield inst


def tamper(inst, how):
    """Another hand's write to the hold log: unlinked, or other content
    put in its place."""
    if how == "unlink":
        inst.flux("kvs", "unlink", KEY)
    else:
        inst.flux("kvs", "put", "--raw", f"{KEY}=-", input="another hand's text\n")


def reload_over(inst, how):
    """Remove the plugin, tamper with the log (``how``), load the plugin
    again; return a new handle."""
    handle = inst.handle()
    handle.rpc("job-manager.jobtap", {"remove": "epilog-gate.so"}).get()
    tamper(inst, how)
    load = {"load": inst.plugin}
    if inst.plugin_conf:
        load["conf"] = inst.plugin_conf
    handle.rpc("job-manager.jobtap", load).get()
    return inst.handle()


def commits(inst):
    """The commits the gate has sent to the KVS."""
    return query(inst)["counters"]["log_commits"]


def logged_holds(inst):
    """``(id, description)`` of every hold record the log holds."""
    return {
        (jobid, context["description"])
        for jobid, entries in recorded(inst).items()
        for _, name, context in entries
        if name == HOLD_EVENT
    }


def wait_logged(inst, expected, limit=30):
    """Wait until the log records every hold of ``expected`` (a snapshot
    in parts is swapped in after the commit that answered the last
    request); True if it does within ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while not expected <= logged_holds(inst):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.parametrize("down", ["instance", "sigkill"])
@pytest.mark.parametrize("how", ["unlink", "put"])
def test_holds_survive_a_restart_after_a_reload_over_a_tampered_log(inst, how, down):
    handle = inst.handle()
    description = f"kept-{next(NUMBERS)}"
    jobids = submit_many(handle, inst.held + 1, urgency=0)
    *held, barrier = jobids
    gate = EpilogGate(handle)
    for jobid in held:
        gate.hold(jobid, description)
    before = commits(inst)
    gate = EpilogGate(reload_over(inst, how))
    # Answered once its record is durable: after the reload's rewrite, or
    # (in parts) once it is under way (the KVS applies the job-manager's
    # commits in order).
    gate.hold(barrier, description)
    expected = {(jobid, description) for jobid in jobids}
    assert wait_logged(inst, expected)
    # The rewrite and the barrier's record: one commit, or one each (the
    # record may go with the rewrite); in parts, two parts or more and
    # the swap.
    spent = commits(inst) - before
    assert spent in ((1, 2) if inst.held < 10 else range(3, 20)), spent
    handle = restart(inst, down)
    gate = EpilogGate(handle)
    listed = {(h["id"], h["description"]) for h in gate.list()}
    assert expected <= listed
    for jobid in jobids:
        assert gate.release(jobid, description) == {"released": True}


def test_a_snapshot_that_waited_for_the_recovery_goes_out_without_traffic(
    new_instance,
):
    """A segment the load cannot read (a directory at its key) makes its
    first write a snapshot, which waits for the jobs' eventlogs to be
    read: it then goes out by itself, with no request to carry it (the
    segments it replaces are removed)."""
    inst = new_instance()
    handle = inst.handle()
    jobids = submit_many(handle, 5, urgency=0)
    gate = EpilogGate(handle)
    for jobid in jobids:
        gate.hold(jobid, "kept")
    inst.flux("kvs", "put", f"{segment_key(1)}.junk=1")
    handle = restart(inst, "module")
    expected = {(jobid, "kept") for jobid in jobids}
    # Answered once every job's holds are known; no record is made.
    assert {(h["id"], h["description"]) for h in EpilogGate(handle).list()} == expected
    deadline = time.monotonic() + 15
    while inst.flux("kvs", "dir", SEGMENTS, check=False).returncode == 0:
        assert time.monotonic() < deadline, "the snapshot never went out"
        time.sleep(0.1)
    assert logged_holds(inst) == expected
