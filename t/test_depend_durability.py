"""Dependency holds across a SIGKILL, a failed load, the instance's
shutdown and a lost hold log: an active dependency hold still keeps its
job in DEPEND, its release then lets it run, and its timeout resumes on
the clock that started when it became active.  (Across a plugin
reload, a job-manager reload and an instance restart, with the other
points: test_durability.py.)"""

import time

import flux.job
import pytest
from conftest import LEAD, SLACK, TIMEOUTS, restart
from crashes import CONFIG, N, all_answered, checkpoint
from jobs import (
    assert_in_depend,
    end_others,
    eventlog,
    held_in_depend,
    named,
    names,
    submit,
    submit_many,
    wait_event,
    wait_inactive,
)

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holdlog import KEY
from flux_epilog_gate.jobid import f58

#: Seconds from the submission of the SIGKILL test's jobs to their
#: begin-time: the holds are answered and the instance killed before it
#: (in a second and a half on a loaded machine).
BEGIN = 4.0

#: shutdown-timeout of the shutdown test.
BOUND = 2.0

DEPEND = "depend"


def test_acknowledged_depend_holds_survive_sigkill(new_instance):
    """The answer waits until the hold's dependency-add is checkpointed:
    after a crash the job-manager alone keeps the job in DEPEND, even once
    nothing else does (its begin-time passed while the instance was
    down, so flux-core lets such a job go before any plugin is loaded)."""
    inst = new_instance(config=CONFIG)
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    begin = time.time() + BEGIN
    later = {"system.dependencies": [{"scheme": "begin-time", "value": str(begin)}]}
    jobids = submit_many(handle, N, duration=0.1, **later)
    for jobid in jobids:
        wait_event(handle, jobid, "dependency-add")
    checkpoint(inst)

    answers = all_answered(
        [gate.hold_async(jobid, "create", point=DEPEND) for jobid in jobids]
    )
    assert {a["state"] for a in answers} == {"active"}
    inst.kill()
    assert time.time() < begin, "too slow: the begin-time passed before the crash"
    time.sleep(begin + 0.5 - time.time())
    handle = restart(inst, "sigkill")
    gate = EpilogGate(handle)

    listed = {(h["id"], h["description"]): h for h in gate.list()}
    assert all(listed[(jobid, "create")]["point"] == DEPEND for jobid in jobids)
    assert_in_depend(handle, jobids[-1])
    for jobid in jobids:
        events = eventlog(handle, jobid)
        assert "depend" not in names(events)
        assert len(named(events, "dependency-add", "create")) == 1
        assert gate.release(jobid, "create") == {"released": True}
    for jobid in jobids:
        wait_inactive(handle, jobid, timeout=30)
        assert "start" in names(eventlog(handle, jobid))


def test_acknowledged_releases_of_depend_holds_survive_sigkill(new_instance):
    inst = new_instance(config=CONFIG)
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    held = [held_in_depend(handle, gate, "create")[:2] for _ in range(N)]
    jobids = [jobid for jobid, _ in held]
    checkpoint(inst)

    statuses = {jobid: i % 2 for i, jobid in enumerate(jobids)}
    answers = all_answered(
        [gate.release_async(j, "create", status=statuses[j]) for j in jobids]
    )
    assert answers == [{"released": True}] * N
    handle = restart(inst, "sigkill")
    gate = EpilogGate(handle)
    end_others(handle, *[holder for _, holder in held])

    # Nobody releases them again: each runs (status 0) or fails, by itself.
    for jobid in jobids:
        wait_inactive(handle, jobid, timeout=30)
        events = eventlog(handle, jobid)
        failed = [e for e in named(events, "exception") if e.context["severity"] == 0]
        if statuses[jobid]:
            assert "alloc" not in names(events)
            assert len(failed) == 1 and "create" in failed[0].context["note"]
        else:
            assert "start" in names(events) and failed == []
    assert gate.list() == []


def test_a_failed_load_leaves_depend_holds_alone(new_instance):
    inst = new_instance()
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    jobid, holder, _ = held_in_depend(handle, gate, "create", timeout=3600)
    end_others(handle, holder)
    before = gate.list()
    bad = inst.flux(
        "jobtap", "load", inst.plugin, "shutdown-timeout=never", check=False
    )
    assert bad.returncode != 0
    assert gate.list() == before
    assert_in_depend(handle, jobid)
    gate.release(jobid, "create")
    wait_inactive(handle, jobid, timeout=30)


def test_shutdown_finish_leaves_depend_holds_for_the_restart(new_instance):
    """A job in DEPEND holds no shutdown, and the job-manager keeps its
    dependencies across a restart: shutdown-action=finish, which ends
    the active holds of jobs the shutdown waits on, leaves its dependency
    holds alone."""
    conf = {"shutdown-timeout": BOUND, "shutdown-action": "finish"}
    inst = new_instance(job_cleanup=True, plugin_conf=conf)
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    jobid, holder, add = held_in_depend(handle, gate, "create", timeout=3600)
    # A job the shutdown waits on, so that its bound expires.
    waited = submit(handle, urgency=0)
    gate.hold(waited, "bb")
    flux.job.cancel(handle, waited)
    wait_event(handle, waited, "epilog-start")

    done = inst.flux("shutdown", "--quiet", timeout=BOUND + 60, check=False)
    inst.proc.wait(timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"finished hold bb of job {f58(waited)}" in done.stderr
    assert "hold create" not in done.stderr
    inst.start()
    handle, gate = inst.handle(), EpilogGate(inst.handle())

    (hold,) = gate.list()
    assert (hold["id"], hold["description"], hold["state"], hold["point"]) == (
        jobid,
        "create",
        "active",
        DEPEND,
    )
    assert hold["t_start"] == pytest.approx(add.timestamp, abs=0.1)
    end_others(handle, holder)
    assert_in_depend(handle, jobid)
    assert named(eventlog(handle, jobid), "exception") == []
    gate.release(jobid, "create")
    wait_inactive(handle, jobid, timeout=30)
    assert "start" in names(eventlog(handle, jobid))


def test_depend_hold_whose_record_is_lost_is_recovered_from_the_eventlog(
    new_instance,
):
    """A crash may checkpoint a hold's dependency-add without its record
    (the hold was never answered): the job is still kept in DEPEND, so
    the gate reads the eventlog of every job in DEPEND and finds the
    hold by its marked dependency-add."""
    inst = new_instance()
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    jobid, holder, add = held_in_depend(handle, gate, "create", timeout=3600)
    inst.flux("kvs", "unlink", KEY)
    restart(inst, "module", dependents=True)

    (hold,) = gate.list()
    assert (hold["id"], hold["description"], hold["state"], hold["point"]) == (
        jobid,
        "create",
        "active",
        DEPEND,
    )
    assert hold["timeout"] == 3600
    assert hold["t_start"] == pytest.approx(add.timestamp, abs=0.1)
    end_others(handle, holder)
    assert_in_depend(handle, jobid)
    assert gate.release(jobid, "create") == {"released": True}
    wait_inactive(handle, jobid, timeout=30)
    assert "start" in names(eventlog(handle, jobid))


def test_depend_hold_timeout_resumes_after_sigkill(new_instance):
    inst = new_instance(config=CONFIG)
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    timeout = TIMEOUTS["instance"]
    jobid, holder, started = held_in_depend(handle, gate, "create", timeout=timeout)
    time.sleep(max(0.0, started.timestamp + LEAD - time.time()))
    handle = restart(inst, "sigkill")
    gate = EpilogGate(handle)
    restarted = time.time()
    assert restarted < started.timestamp + timeout - 1.0, "restart took too long"
    end_others(handle, holder)

    (hold,) = gate.list()
    assert hold["t_start"] == pytest.approx(started.timestamp, abs=0.1)
    exc = wait_event(handle, jobid, "exception", timeout=timeout + 20)
    assert exc.context["severity"] == 0 and "timed out" in exc.context["note"]
    assert exc.timestamp - started.timestamp >= timeout - 0.05
    assert exc.timestamp <= max(started.timestamp + timeout, restarted) + SLACK
    wait_inactive(handle, jobid, timeout=30)
    assert "alloc" not in names(eventlog(handle, jobid))
