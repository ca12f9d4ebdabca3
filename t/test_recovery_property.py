"""Any hold log, under a real job-manager (issue 17, "Reading the hold log
is total"): a few generated logs, valid hold entries mixed with every kind
of line that is not an entry, are each written to the KVS and read by a
reloaded job-manager; the load never fails and every valid hold comes
back.  t/gate/test_unit_loader.py runs many more through the FakePort."""

import subprocess

import pytest
from conftest import restart
from hypothesis import given, settings
from hypothesis import strategies as st
from jobs import dmesg, submit
from logstrategies import hold_logs

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holdlog import KEY
from flux_epilog_gate.testing import Instance, flux_command

#: Loads, each a module reload of a few seconds: the test stays under a
#: minute.
EXAMPLES = 5


@pytest.fixture(scope="module")
def held(plugin):
    """An instance and a few jobs that never run, to be held."""
    inst = Instance(cores=8, plugin=plugin, env={"FLUX_DISABLE_JOB_CLEANUP": "1"})
    inst.start()
    try:
        handle = inst.handle()
        yield inst, [int(submit(handle, urgency=0)) for _ in range(3)]
    finally:
        inst.stop()
        inst.cleanup()


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.data())
def test_any_hold_log_loads_with_every_valid_hold(held, data):
    inst, jobids = held
    log, holds = data.draw(hold_logs(jobids, max_holds=8, max_junk=12))
    subprocess.run(
        [flux_command(), "kvs", "put", "--raw", f"{KEY}=-"],
        env=inst.env,
        input=log,
        check=True,
        timeout=60,
    )
    restart(inst, "module")
    listed = {(h["id"], h["description"]): h for h in EpilogGate(inst.handle()).list()}
    # The jobs are past DEPEND: a dependency hold of theirs is over.
    kept = {k: c for k, c in holds.items() if c.get("point") != "depend"}
    assert set(listed) == set(kept)
    for key, context in kept.items():
        assert listed[key]["state"] == "pending"
        assert listed[key].get("timeout") == context.get("timeout")
        assert listed[key]["point"] == context.get("point", "epilog")
    assert "epilog-gate" in inst.flux("jobtap", "list").stdout
    assert dmesg(inst, "Traceback") == []
