"""Text appended to the hold log by another hand while the plugin is
removed, its last line unended: the gate that the next load takes over
ends that line before its next record.

A load that finds such a value ends it (gate/handover.py), but the gate
a plugin reload hands over kept appending as if the value were its own:
its next record ran into the stranger's line, and the restart that read
that line skipped the record with it: an acknowledged hold was gone.
On a real instance: hypothesis appends the text, the plugin is loaded
again, and the records made then must parse as entries of the log the
way a restart reads it; the last example also restarts the instance."""

import itertools

import pytest
from conftest import restart
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis_settings import bounded
from jobs import recorded, submit

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holdlog import KEY
from flux_epilog_gate.gate.holds import HOLD_EVENT
from flux_epilog_gate.testing import Instance

NUMBERS = itertools.count()


@pytest.fixture(scope="module")
def inst(plugin):
    with Instance(cores=8, plugin=plugin) as inst:
        inst.jobid = submit(inst.handle(), urgency=0)
        yield inst


def reload_over(inst, tail):
    """Remove the plugin, append ``tail`` to the hold log, load the
    plugin again; return a new handle."""
    handle = inst.handle()
    handle.rpc("job-manager.jobtap", {"remove": "epilog-gate.so"}).get()
    inst.flux("kvs", "put", "--append", "--raw", f"{KEY}=-", input=tail)
    handle.rpc("job-manager.jobtap", {"load": inst.plugin}).get()
    return inst.handle()


def held(inst, jobid):
    """The descriptions of the hold records of ``jobid`` the log holds."""
    return {
        context["description"]
        for _, name, context in recorded(inst).get(jobid, [])
        if name == HOLD_EVENT
    }


@bounded(12)
@given(tail=st.text(min_size=1, max_size=80).filter(lambda t: not t.endswith("\n")))
@example(tail="garbage")
@example(tail='{"timestamp":1.0,"name":"epilog_gate.hold","context":{"id":1,')
def test_a_record_after_a_reload_never_runs_into_a_strangers_line(inst, tail):
    description = f"after-{next(NUMBERS)}"
    gate = EpilogGate(reload_over(inst, tail))
    gate.hold(inst.jobid, description)
    assert description in held(inst, inst.jobid)
    # Keep the job under max-holds, the log's record of it made too.
    gate.release(inst.jobid, description)


def test_a_hold_made_after_a_reload_over_an_unended_line_survives_a_restart(inst):
    EpilogGate(reload_over(inst, "garbage")).hold(inst.jobid, "kept")
    handle = restart(inst, "instance")
    listed = [h["description"] for h in EpilogGate(handle).list(inst.jobid)]
    assert listed == ["kept"]
