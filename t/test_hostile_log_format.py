"""A hold or release asked of a gate that refused its hold log (a newer
format) changes nothing and says why, under a real broker.

The gate loaded over a log of a newer format takes no hold: a ``hold``
request is refused with the reason.  Refused means refused before the
hold is in force: a job in CLEANUP must not be given an ``epilog-start``
(and at once an ``epilog-finish``) for a hold that is never recorded.
A rule holds no new job.  A release is refused with the reason too, not
answered "no such hold": the hold may be in the log, and its service
must try again later.
"""

import json

import pytest
from jobs import dmesg, eventlog, held_in_cleanup, hold_log, submit, wait_event

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holdlog import KEY
from flux_epilog_gate.gate.logparse import FORMAT, FORMAT_EVENT
from flux_epilog_gate.jobid import f58

#: A rule that holds every job with the attribute ``system.hostile``.
RULE = """
[[epilog-gate.rules]]
attribute = "system.hostile"
description = "ruled"
"""


@pytest.fixture(scope="module")
def inst(plugin):
    """An instance whose job cleanup step is off, so that a job can stay
    in CLEANUP, with the gate loaded from its config."""
    from conftest import discard

    from flux_epilog_gate.testing import Instance

    made = Instance(cores=8, plugin=plugin, config=RULE)
    made.start()
    yield made
    discard(made)


def restart_over(inst, text):
    """Stop the instance, make ``text`` its hold log and start it again
    (a gate kept in the job-manager across a plugin reload would not
    read the log again)."""
    inst.flux("jobtap", "remove", "epilog-gate.so")
    inst.flux("kvs", "put", "--raw", f"{KEY}=-", input=text)
    inst.stop()
    inst.start()
    return inst.handle(), EpilogGate(inst.handle())


def test_a_hold_refused_for_the_log_posts_nothing(inst):
    # Held before it can run: a job that ran first could be gone already.
    jobid = held_in_cleanup(inst, "keep")
    newer = json.dumps(
        {"timestamp": 1.7e9, "name": FORMAT_EVENT, "context": {"version": FORMAT + 1}}
    )
    written = hold_log(inst)
    handle, gate = restart_over(inst, newer + "\n" + written)

    with pytest.raises(OSError, match=f"format {FORMAT + 1}"):
        gate.hold(jobid, "refused")
    # No rule holds a new job: its hold could not be recorded.
    ruled = submit(handle, **{"system.hostile": 1})
    wait_event(handle, ruled, "clean")
    assert "epilog-start" not in [e.name for e in eventlog(handle, ruled)]
    assert dmesg(inst, f"{f58(ruled)}: rule system.hostile: hold: {KEY} is of format")
    # Its hold is in the log this build does not read: not "no such hold".
    with pytest.raises(OSError, match=f"format {FORMAT + 1}"):
        gate.release(jobid, "keep")
    assert gate.list() == []

    # The build that reads the log finds its hold, and the job ends:
    # its whole eventlog is then known.
    handle, gate = restart_over(inst, written)
    gate.release(jobid, "keep")
    wait_event(handle, jobid, "clean")
    described = [
        e.name
        for e in eventlog(handle, jobid)
        if e.context.get("description") == "refused"
    ]
    assert described == []
    assert not dmesg(inst, "hold refused withdrawn")
