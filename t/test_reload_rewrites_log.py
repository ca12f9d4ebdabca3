"""The hold log unlinked or rewritten by another hand while the plugin is
removed: the gate that the next load takes over writes the whole log
again from its holds, so a restart of the instance afterwards (stopped,
or SIGKILLed) lists every hold again.

The gate kept its holds in memory across the reload but only appended
its next records to whatever value was there: the holds recorded only
in the value that was unlinked or replaced were gone from the KVS, and
the next restart lost them without a word."""

import itertools

import pytest
from conftest import restart
from jobs import recorded, submit_many

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holdlog import KEY
from flux_epilog_gate.gate.holds import HOLD_EVENT
from flux_epilog_gate.testing import Instance

#: Held jobs per variant.
HELD = 5

NUMBERS = itertools.count()


@pytest.fixture(scope="module")
def inst(plugin):
    with Instance(cores=8, plugin=plugin) as inst:
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
    handle.rpc("job-manager.jobtap", {"load": inst.plugin}).get()
    return inst.handle()


def logged_holds(inst):
    """``(id, description)`` of every hold record the log holds."""
    return {
        (jobid, context["description"])
        for jobid, entries in recorded(inst).items()
        for _, name, context in entries
        if name == HOLD_EVENT
    }


@pytest.mark.parametrize("down", ["instance", "sigkill"])
@pytest.mark.parametrize("how", ["unlink", "put"])
def test_holds_survive_a_restart_after_a_reload_over_a_tampered_log(inst, how, down):
    handle = inst.handle()
    description = f"kept-{next(NUMBERS)}"
    jobids = submit_many(handle, HELD + 1, urgency=0)
    *held, barrier = jobids
    gate = EpilogGate(handle)
    for jobid in held:
        gate.hold(jobid, description)
    gate = EpilogGate(reload_over(inst, how))
    # Answered once its record is durable: after the reload's rewrite
    # (the KVS applies the job-manager's commits in order).
    gate.hold(barrier, description)
    expected = {(jobid, description) for jobid in jobids}
    assert expected <= logged_holds(inst)
    handle = restart(inst, down)
    gate = EpilogGate(handle)
    listed = {(h["id"], h["description"]) for h in gate.list()}
    assert expected <= listed
    for jobid in jobids:
        assert gate.release(jobid, description) == {"released": True}
