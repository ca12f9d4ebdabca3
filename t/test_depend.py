"""Dependency holds: a hold that keeps a job in DEPEND, proved by eventlogs
of a real job-manager."""

import errno

import flux.job
import pytest
from jobs import (
    described,
    eventlog,
    in_depend,
    named,
    names,
    query,
    settle,
    submit,
    wait_event,
    wait_inactive,
)

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holdlog import MARKER

pytestmark = pytest.mark.usefixtures("no_leftover_holds")

DEPEND = "depend"


def end_other_dependency(handle, holder):
    flux.job.cancel(handle, holder)
    wait_inactive(handle, holder)


def assert_in_depend(handle, jobid, seconds=0.5):
    """The job is still in DEPEND: no ``depend`` event."""
    events = settle(handle, jobid, "depend", seconds=seconds)
    assert "depend" not in names(events), names(events)


def marked_dependency_events(handle, jobid, description):
    events = eventlog(handle, jobid)
    return [
        (e.name, e.context)
        for e in events
        if e.name.startswith("dependency-")
        and e.context.get("description") == description
    ]


def test_depend_hold_keeps_the_job_in_depend_until_released(handle, gate):
    jobid, holder = in_depend(handle)
    answer = gate.hold(jobid, "stage-in", point=DEPEND)
    assert answer == {"id": jobid, "description": "stage-in", "state": "active"}
    end_other_dependency(handle, holder)
    assert_in_depend(handle, jobid)
    (hold,) = gate.list(jobid)
    assert (hold["point"], hold["state"]) == (DEPEND, "active")

    assert gate.release(jobid, "stage-in") == {"released": True}
    wait_event(handle, jobid, "depend")
    wait_inactive(handle, jobid)
    events = eventlog(handle, jobid)
    assert "start" in names(events)
    assert marked_dependency_events(handle, jobid, "stage-in") == [
        ("dependency-add", {"description": "stage-in", MARKER: True}),
        ("dependency-remove", {"description": "stage-in", MARKER: True}),
    ]
    order = names(events)
    assert order.index("dependency-remove") < order.index("depend")


def test_depend_hold_from_a_rule_is_active_from_submission(new_instance):
    inst = new_instance(config=RULES)
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    jobid = submit(handle, duration=0.1, **{"system.bb": "1g"})
    add = wait_event(handle, jobid, "dependency-add", match=described("bb-create"))
    assert add.context[MARKER] is True
    assert_in_depend(handle, jobid)
    assert {h["description"]: (h["point"], h["state"]) for h in gate.list()} == {
        "bb-create": (DEPEND, "active"),
        "bb": ("epilog", "pending"),
    }
    rule = query(inst)["config"]["rules"][0]
    assert rule["point"] == DEPEND
    gate.release(jobid, "bb-create")
    wait_event(handle, jobid, "epilog-start", match=described("bb"))
    gate.release(jobid, "bb")
    wait_inactive(handle, jobid)
    order = names(eventlog(handle, jobid))
    assert order.index("dependency-remove") < order.index("depend")
    assert order.index("depend") < order.index("start")
    # A job the rule does not match never enters DEPEND's wait.
    other = submit(handle, duration=0.1)
    wait_inactive(handle, other)
    assert "dependency-add" not in names(eventlog(handle, other))


RULES = """
[[epilog-gate.rules]]
attribute = "system.bb"
description = "bb-create"
point = "depend"

[[epilog-gate.rules]]
attribute = "system.bb"
description = "bb"
"""


def test_failed_release_fails_the_job_and_its_epilog_holds_still_hold(handle, gate):
    jobid, holder = in_depend(handle)
    gate.hold(jobid, "stage-in", point=DEPEND)
    gate.hold(jobid, "teardown")
    end_other_dependency(handle, holder)
    assert gate.release(jobid, "stage-in", status=3) == {"released": True}
    exc = wait_event(handle, jobid, "exception")
    assert exc.context["severity"] == 0
    assert exc.context["type"] == "dependency"
    assert "stage-in" in exc.context["note"] and "status 3" in exc.context["note"]
    wait_event(handle, jobid, "epilog-start", match=described("teardown"))
    assert "clean" not in names(settle(handle, jobid, "clean", seconds=0.3))
    gate.release(jobid, "teardown")
    wait_inactive(handle, jobid)
    events = names(eventlog(handle, jobid))
    assert "alloc" not in events and "start" not in events
    assert "depend" not in events


def test_timeout_fails_the_job(handle, gate):
    jobid, holder = in_depend(handle)
    gate.hold(jobid, "stage-in", timeout=1.0, point=DEPEND)
    add = wait_event(handle, jobid, "dependency-add", match=described("stage-in"))
    assert add.context["timeout"] == 1.0
    end_other_dependency(handle, holder)
    exc = wait_event(handle, jobid, "exception", timeout=20)
    assert exc.context["severity"] == 0
    assert "dependency hold stage-in timed out" in exc.context["note"]
    assert exc.timestamp - add.timestamp >= 1.0 - 0.05
    wait_inactive(handle, jobid)
    assert "start" not in names(eventlog(handle, jobid))
    assert gate.release(jobid, "stage-in") == {
        "released": False,
        "reason": "timed out",
    }


@pytest.mark.parametrize("urgency", [0, 16])
def test_hold_after_depend_is_refused_and_changes_nothing(handle, gate, urgency):
    jobid = submit(handle, duration=30, urgency=urgency)
    wait_event(handle, jobid, "alloc" if urgency else "priority")
    with pytest.raises(OSError) as info:
        gate.hold(jobid, "stage-in", point=DEPEND)
    assert info.value.errno == errno.EINVAL
    text = str(info.value)
    assert "too late for a dependency hold" in text
    assert ("RUN" if urgency else "SCHED") in text
    assert "only in NEW and DEPEND" in text
    assert gate.list(jobid) == []
    assert "dependency-add" not in names(eventlog(handle, jobid))
    flux.job.cancel(handle, jobid)
    wait_inactive(handle, jobid)


def test_cancel_in_depend_drops_the_hold_and_tells_watchers(instance, handle, gate):
    jobid, holder = in_depend(handle)
    gate.hold(jobid, "stage-in", point=DEPEND)
    gate.hold(jobid, "teardown")
    # A client of its own: its watcher goes away with it.
    watch = EpilogGate(instance.handle()).watch_async(points=[DEPEND])
    first = watch.get()
    assert (first["id"], first["description"], first["point"]) == (
        jobid,
        "stage-in",
        DEPEND,
    )
    assert "aborted" not in first
    watch.reset()
    flux.job.cancel(handle, jobid)
    aborted = watch.get()
    assert (aborted["id"], aborted["description"]) == (jobid, "stage-in")
    assert aborted["aborted"] is True and aborted["ran"] is False
    wait_event(handle, jobid, "epilog-start", match=described("teardown"))
    assert [h["description"] for h in gate.list(jobid)] == ["teardown"]
    assert gate.release(jobid, "stage-in") == {
        "released": False,
        "reason": "job ended before it started",
    }
    gate.release(jobid, "teardown")
    wait_inactive(handle, jobid)
    end_other_dependency(handle, holder)


def test_same_description_at_another_point_is_refused(handle, gate):
    jobid, holder = in_depend(handle)
    gate.hold(jobid, "stage", point=DEPEND)
    with pytest.raises(OSError) as info:
        gate.hold(jobid, "stage")
    assert info.value.errno == errno.EEXIST and "depend point" in str(info.value)
    assert gate.hold(jobid, "stage", point=DEPEND)["state"] == "active"
    assert len(named(eventlog(handle, jobid), "dependency-add", "stage")) == 1
    gate.release(jobid, "stage")
    end_other_dependency(handle, holder)
    wait_inactive(handle, jobid)
