"""A load that fails or is refused leaves the loaded gate, or the gate a
removed instance left behind, and every hold exactly as they were.

Each test holds two jobs, one pending and one active, makes a load fail in
one way, and then proves that the holds still work: both are listed, the
pending hold's job, cancelled, waits for its release, the active hold's
job stays in CLEANUP until it is released.
"""

import flux.job
import pytest
from jobs import (
    described,
    dmesg,
    eventlog,
    names,
    set_urgency,
    settle,
    submit,
    wait_event,
    wait_inactive,
)

from flux_epilog_gate import EpilogGate

#: A config table the gate refuses (its load fails on conf.update).
BAD_CONFIG = "[epilog-gate]\ntimeout = -5\n"

#: Ways to make a second load fail, with the options given to it.
#: ``debug-fault`` is the plugin's test-only fault switch: ``init`` fails
#: Python's start-up of the instance, ``plugin-init`` fails the end of
#: ``flux_plugin_init`` once Python has made the instance.
FAILED_LOADS = {
    "duplicate": [],
    "bad option": ["timeout=-5"],
    "python start-up failure": ["debug-fault=init"],
    "plugin-init failure": ["debug-fault=plugin-init"],
}


def hold_two(inst):
    """A job with a pending hold and a job with an active hold."""
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    pend = submit(handle, urgency=0)
    gate.hold(pend, "p-hold")
    act = submit(handle, urgency=0)
    gate.hold(act, "a-hold", timeout=3600)
    flux.job.cancel(handle, act)
    wait_event(handle, act, "epilog-start", match=described("a-hold"))
    return pend, act


def assert_holds_intact(inst, pend, act):
    """Both holds are as they were and still hold their jobs' clean."""
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    listed = {(h["id"], h["description"]): h for h in gate.list()}
    assert {k: h["state"] for k, h in listed.items()} == {
        (pend, "p-hold"): "pending",
        (act, "a-hold"): "active",
    }
    assert listed[(act, "a-hold")]["timeout"] == 3600
    # The pending hold still gates its job: cancelled, it waits.
    flux.job.cancel(handle, pend)
    wait_event(handle, pend, "epilog-start", match=described("p-hold"))
    assert "clean" not in names(settle(handle, pend, "clean"))
    assert "clean" not in names(eventlog(handle, act))
    assert gate.release(act, "a-hold") == {"released": True}
    wait_inactive(handle, act)
    assert gate.release(pend, "p-hold") == {"released": True}
    wait_inactive(handle, pend)
    assert gate.list() == []
    assert not dmesg(inst, "callback returned error")


def assert_failed_where_asked(inst, options):
    """A debug-fault load failed at the fault, not for another reason."""
    for option in options:
        if option.startswith("debug-fault="):
            assert dmesg(inst, f"{option}: injected failure"), option


def loaded_once(inst):
    listed = inst.flux("jobtap", "list").stdout.split()
    return [name for name in listed if "epilog-gate" in name] == ["epilog-gate.so"]


@pytest.mark.parametrize("kind", list(FAILED_LOADS))
def test_failed_load_leaves_loaded_gate_and_holds_alone(kind, new_instance, plugin):
    inst = new_instance()
    pend, act = hold_two(inst)
    result = inst.flux("jobtap", "load", plugin, *FAILED_LOADS[kind], check=False)
    assert result.returncode != 0
    if kind == "duplicate":
        assert "already loaded" in result.stderr
    assert_failed_where_asked(inst, FAILED_LOADS[kind])
    assert loaded_once(inst)
    assert_holds_intact(inst, pend, act)


def fail_load(inst, plugin, kind):
    """A load of ``kind`` that fails (no gate is loaded)."""
    if kind == "bad config":
        inst.config = BAD_CONFIG
        inst.write_config()
        inst.flux("config", "reload")
        result = inst.flux("jobtap", "load", plugin, check=False)
        assert "epilog-gate: timeout" in result.stderr
        inst.config = ""
        inst.write_config()
        inst.flux("config", "reload")
    else:
        result = inst.flux("jobtap", "load", plugin, *FAILED_LOADS[kind], check=False)
        assert_failed_where_asked(inst, FAILED_LOADS[kind])
    assert result.returncode != 0
    assert "epilog-gate" not in inst.flux("jobtap", "list").stdout


@pytest.mark.parametrize(
    "kind",
    ["bad option", "bad config", "python start-up failure", "plugin-init failure"],
)
def test_failed_load_after_remove_leaves_holds_for_the_next(kind, new_instance, plugin):
    inst = new_instance(plugin=None)
    inst.flux("jobtap", "load", plugin)
    pend, act = hold_two(inst)
    inst.flux("jobtap", "remove", "epilog-gate.so")
    fail_load(inst, plugin, kind)
    inst.flux("jobtap", "load", plugin)
    assert loaded_once(inst)
    assert_holds_intact(inst, pend, act)


def test_failed_loads_in_a_row_then_remove_and_load(new_instance, plugin):
    """Refused loads while loaded, then a reload: nothing was replaced."""
    inst = new_instance(plugin=None)
    inst.flux("jobtap", "load", plugin)
    pend, act = hold_two(inst)
    for options in FAILED_LOADS.values():
        assert inst.flux("jobtap", "load", plugin, *options, check=False).returncode
    inst.flux("jobtap", "remove", "epilog-gate.so")
    inst.flux("jobtap", "load", plugin)
    assert_holds_intact(inst, pend, act)


def test_failed_loads_leave_an_active_prolog_hold_keeping_the_start(
    new_instance, plugin
):
    inst = new_instance()
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    jobid = submit(handle, duration=0.1, urgency=0)
    gate.hold(jobid, "setup", point="prolog")
    set_urgency(handle, jobid, 16)
    wait_event(handle, jobid, "prolog-start", match=described("setup"))
    for options in FAILED_LOADS.values():
        assert inst.flux("jobtap", "load", plugin, *options, check=False).returncode
    assert loaded_once(inst)
    assert "start" not in names(settle(handle, jobid, "start"))
    (listed,) = gate.list(jobid)
    assert (listed["point"], listed["state"]) == ("prolog", "active")
    assert gate.release(jobid, "setup") == {"released": True}
    wait_event(handle, jobid, "start")
    wait_inactive(handle, jobid)
    assert not dmesg(inst, "callback returned error")
