"""The gate counts only its own epilog events, live and on replay: a hold
may share its description with another plugin's epilog (perilog.so's
``job-manager.epilog``) and the two coexist exactly."""

import pytest
from jobs import (
    described,
    eventlog,
    named,
    names,
    settle,
    submit,
    wait_event,
    wait_inactive,
)

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holdlog import MARKER

#: perilog.so's epilog action.
PERILOG = "job-manager.epilog"


def perilog_config(plugin, command):
    """flux-core's perilog.so with an epilog command, and the gate."""
    words = ", ".join(f'"{word}"' for word in command)
    return (
        "[job-manager]\n"
        f'plugins = [ {{ load = "perilog.so" }}, {{ load = "{plugin}" }} ]\n'
        "[job-manager.epilog]\n"
        f"command = [ {words} ]\n"
    )


def marked(events):
    return [event for event in events if event.context.get(MARKER)]


def test_hold_named_like_perilogs_epilog_survives_its_end_and_a_restart(
    new_instance, plugin
):
    inst = new_instance(plugin=None, config=perilog_config(plugin, ["true"]))
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    jobid = submit(handle, duration=0.2)
    gate.hold(jobid, PERILOG)
    # perilog's epilog starts with the gate's hold on finish, and ends.
    wait_event(handle, jobid, "epilog-finish", match=described(PERILOG), timeout=30)
    events = settle(handle, jobid, "clean")
    assert "clean" not in names(events)
    starts = named(events, "epilog-start", PERILOG)
    assert len(starts) == 2 and len(marked(starts)) == 1
    assert marked(named(events, "epilog-finish", PERILOG)) == []
    assert [h["state"] for h in gate.list(jobid)] == ["active"]

    inst.stop()
    inst.start()
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    (hold,) = gate.list(jobid)
    assert (hold["description"], hold["state"]) == (PERILOG, "active")
    assert hold["t_start"] == pytest.approx(marked(starts)[0].timestamp, abs=0.01)
    assert "clean" not in names(settle(handle, jobid, "clean"))
    assert gate.release(jobid, PERILOG) == {"released": True}
    wait_inactive(handle, jobid)
    finishes = named(eventlog(handle, jobid), "epilog-finish", PERILOG)
    assert len(finishes) == 2 and len(marked(finishes)) == 1
    assert marked(finishes)[0].context["status"] == 0
