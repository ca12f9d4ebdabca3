"""A first load into an instance with running jobs: jobs that cannot have
holds never see the gate; the jobs the hold log names are still recovered
by a restart."""

import time

import flux.job
from jobs import eventlog, hold_log, query, submit, wait_event, wait_inactive

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holdlog import KEY, MARKER

#: Running jobs at the load, and how far apart their finishes are: the
#: load lands in the middle of a stream of jobs reaching CLEANUP.
JOBS = 40
SPACING = 0.02


def gate_events(events):
    """Events of the gate in an eventlog: any epilog action (nothing else
    posts one in these instances) or a mention of the gate."""
    return [
        event
        for event in events
        if event.name.startswith("epilog-") or "epilog_gate" in str(event.context)
    ]


def test_first_load_among_running_jobs_leaves_them_alone(new_instance, plugin):
    inst = new_instance(plugin=None)
    handle = inst.handle()
    duration = 1.5
    jobs = [submit(handle, duration=duration + i * SPACING) for i in range(JOBS)]
    started = max(wait_event(handle, job, "start").timestamp for job in jobs)
    # Load once the first jobs have finished, while the others go on
    # finishing one every SPACING seconds.
    time.sleep(max(0.0, started + duration + JOBS * SPACING / 3 - time.time()))
    inst.flux("jobtap", "load", plugin)
    assert query(inst)["counters"]["jobs"] == 0
    for job in jobs:
        wait_inactive(handle, job, timeout=30)
    for job in jobs:
        assert gate_events(eventlog(handle, job)) == [], job
    counters = query(inst)["counters"]
    assert (counters["jobs"], counters["held"]) == (0, 0)


def wait_logged(inst, jobid, timeout=5.0):
    """Wait until the hold log names the job."""
    deadline = time.time() + timeout
    while f'"id":{int(jobid)},' not in hold_log(inst):
        assert time.time() < deadline, f"{jobid} not in {KEY}"
        time.sleep(0.02)


def test_restart_after_a_first_load_recovers_the_held_jobs(new_instance, plugin):
    inst = new_instance(plugin=None)
    inst.flux("jobtap", "load", plugin)
    inst.plugin = plugin  # loaded from the config from the restart on
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    bystander = submit(handle, urgency=0)
    pend = submit(handle, urgency=0)
    gate.hold(pend, "p-hold")
    held = submit(handle, urgency=0)
    gate.hold(held, "a-hold")
    flux.job.cancel(handle, held)
    wait_event(handle, held, "epilog-start")
    for jobid in (pend, held):
        wait_logged(inst, jobid)

    inst.stop()
    inst.start()
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    states = {(h["id"], h["description"]): h["state"] for h in gate.list()}
    assert states == {(pend, "p-hold"): "pending", (held, "a-hold"): "active"}
    assert gate.release(held, "a-hold") == {"released": True}
    wait_inactive(handle, held)
    flux.job.cancel(handle, pend)
    wait_event(handle, pend, "epilog-start")
    assert gate.release(pend, "p-hold") == {"released": True}
    wait_inactive(handle, pend)
    flux.job.cancel(handle, bystander)
    wait_inactive(handle, bystander)
    assert gate_events(eventlog(handle, bystander)) == []


def test_a_first_load_reads_no_job_the_gate_cannot_hold(new_instance, plugin, tmp_path):
    """The gate never ran in this instance: a job in CLEANUP (kept there
    by perilog.so's epilog) cannot have a hold of it, so the first load
    neither reads its eventlog nor tracks it.  Each read is slowed, so one
    would still show in the counters when the load answers."""
    go = tmp_path / "go"
    wait = f"while ! test -e {go}; do sleep 0.05; done"
    inst = new_instance(
        plugin=None,
        config=(
            '[job-manager]\nplugins = [ { load = "perilog.so" } ]\n'
            f'[job-manager.epilog]\ncommand = [ "sh", "-c", "{wait}" ]\n'
        ),
    )
    handle = inst.handle()
    job = submit(handle)
    wait_event(handle, job, "epilog-start")
    inst.flux("jobtap", "load", plugin, "debug-fault=slow-recovery")
    counters = query(inst)["counters"]
    assert (counters["jobs"], counters["held"]) == (0, 0)
    go.touch()
    wait_inactive(handle, job)
    assert [e for e in eventlog(handle, job) if MARKER in e.context] == []
    assert query(inst)["counters"]["jobs"] == 0
