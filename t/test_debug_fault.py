"""``debug-fault`` is a switch of the tests, given to the load they
test: never taken from the instance's ``[epilog-gate]`` table, where it
made the gate of a real instance fail (holds acknowledged, then a
cancelled job gone inactive unheld)."""

import flux.job
import pytest
from conftest import reload_config
from jobs import held_in_cleanup, query, submit, wait_event

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.config import FAULTS, Config, ConfigError

TABLE = '[epilog-gate]\ndebug-fault = "job"\n'


@pytest.mark.parametrize("fault", FAULTS)
def test_the_table_refuses_it_naming_it(fault):
    with pytest.raises(ConfigError, match=r"^debug-fault: .* load option"):
        Config.from_sources(None, {"debug-fault": fault})
    with pytest.raises(ConfigError, match=r"^debug-fault: "):
        Config.from_sources({"debug-fault": fault}, {"debug-fault": fault})
    assert Config.from_sources({"debug-fault": fault}).fault == fault


def test_an_unknown_table_key_lists_the_keys_without_it():
    with pytest.raises(ConfigError) as info:
        Config.from_sources(None, {"debugfault": "job"})
    assert "debug-fault" not in str(info.value)


@pytest.fixture(scope="module")
def inst(plugin):
    from flux_epilog_gate.testing import Instance

    with Instance(cores=8, plugin=plugin) as inst:
        yield inst


def test_a_config_reload_with_it_is_refused_and_changes_nothing(inst):
    result = reload_config(inst, TABLE)
    assert result.returncode != 0
    assert "debug-fault: a switch of the tests" in result.stderr
    answer = query(inst)
    assert answer["config"]["debug-fault"] is None and answer["config_error"] is None
    jobid = held_in_cleanup(inst, "bb")
    EpilogGate(inst.handle()).release(jobid, "bb")
    wait_event(inst.handle(), jobid, "clean")


def test_an_instance_with_it_in_its_table_starts_without_it(new_instance):
    inst = new_instance(config=TABLE)
    answer = query(inst)
    assert answer["config"]["debug-fault"] is None
    assert answer["config_error"].startswith("debug-fault: a switch of the tests")
    # The job's calls are the gate's: the cancelled job waits in CLEANUP
    # on its hold until it is released.
    handle = inst.handle()
    jobid = submit(handle, urgency=0)
    EpilogGate(handle).hold(jobid, "bb")
    flux.job.cancel(handle, jobid)
    wait_event(handle, jobid, "epilog-start")
    assert [h["state"] for h in EpilogGate(handle).list(jobid)] == ["active"]
    EpilogGate(handle).release(jobid, "bb")
    wait_event(handle, jobid, "clean")
