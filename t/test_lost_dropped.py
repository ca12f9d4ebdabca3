"""A held job that flux-core drops as a new job-manager replays the KVS
loses its holds, and each is reported: logged at level error by name,
counted in ``lost``, answered ``released: false`` with a reason that says
why, and (watch ``lost``) delivered once to a service that watches.

flux-core drops a job whose eventlog replays to no valid state (``job
state (NEW) is invalid after replay``: a checkpoint taken between
ingest's ``submit`` and the job-manager's ``validate``) or that has no
eventlog, and moves its KVS directory to ``job-lost+found``.  A crash
makes the first by chance; here the job's eventlog is rewritten to its
``submit`` alone (or removed) while the job-manager runs, which leaves
its memory alone, and the next job-manager replays that.
"""

import os
import subprocess
import sys

import flux.job
import pytest
from conftest import restart
from jobs import damage, described, dmesg, query, submit, wait_event, wait_until

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.jobid import f58

#: How the eventlog of the held job is damaged: what flux-core says.
DAMAGE = {
    "submit-only": "job state (NEW) is invalid after replay",
    "no-eventlog": "No such file or directory",
}


def new_job_manager(inst, how):
    """A new job-manager replays the KVS: a module reload, a restart of
    the instance, or a SIGKILL of the broker (what is checkpointed then
    kept) and a restart."""
    if how == "sigkill":
        inst.flux("kvs", "put", "--sync", "test.checkpoint=1")
    return restart(inst, how)


@pytest.mark.parametrize("how", ["module", "instance", "sigkill"])
@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_holds_of_a_job_dropped_at_restart_are_lost_loudly(new_instance, kind, how):
    inst = new_instance()
    handle = inst.handle()
    gate = EpilogGate(handle)
    dropped = submit(handle, urgency=0)
    kept = submit(handle, urgency=0)
    gate.hold(dropped, "bb")
    gate.hold(dropped, "setup", point="prolog")
    gate.hold(kept, "bb")
    damage(inst, dropped, kind)

    handle = new_job_manager(inst, how)
    gate = EpilogGate(handle)
    assert dmesg(inst, f"{f58(dropped)} not replayed"), "the job was not dropped"
    assert any(DAMAGE[kind] in line for line in dmesg(inst, "not replayed"))
    assert [(h["id"], h["description"]) for h in gate.list()] == [(kept, "bb")]
    # Reported once the eventlog reads of the load answer.
    wait_until(lambda: query(inst)["counters"]["lost"] == 2)
    for description in ("bb", "setup"):
        (line,) = dmesg(inst, f"hold {description} of job {f58(dropped)} was lost")
        assert ".err[" in line and "job-lost+found" in line, line
        answer = gate.release(dropped, description)
        assert answer["released"] is False
        assert answer["reason"].startswith("lost: "), answer
        assert "restart" in answer["reason"], answer
    assert dmesg(inst, "is not known") == []
    # Reported once: the next job-manager does not report them again.
    EpilogGate(restart(inst, "module")).list()
    assert query(inst)["counters"]["lost"] == 0
    assert len(dmesg(inst, f"hold bb of job {f58(dropped)} was lost")) == 1


#: ``flux-epilog-gate``, run from the installed package.
CLI = "import sys; from flux_epilog_gate.client.cli import main; sys.exit(main())"


def cli_watch(inst, *args):
    done = subprocess.run(
        [sys.executable, "-c", CLI, "watch", *args],
        env=inst.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def python_watch(gate, *args):
    """What ``watch(args, lost=True)`` yields first, up to an active hold
    (which comes after every lost one).  Once it returns, a request of
    ``gate`` is answered after its acknowledgements are taken (they go
    first, on the same connection)."""
    lines = []
    for hold in gate.watch(list(args), lost=True, reconnect=0):
        lines.append(hold)
        if not hold.get("lost"):
            break
    return lines


@pytest.mark.parametrize("client", ["python", "cli"])
def test_watch_lost_delivers_each_lost_hold_once(new_instance, client):
    """Lost holds wait, across job-manager restarts, for a watcher that
    asks for them; each is sent once, before the holds already active."""
    inst = new_instance()
    handle = inst.handle()
    gate = EpilogGate(handle)
    dropped = submit(handle, urgency=0)
    active = submit(handle, urgency=0)
    gate.hold(dropped, "bb")
    gate.hold(dropped, "setup", point="prolog")
    gate.hold(dropped, "other")
    gate.hold(active, "bb")
    damage(inst, dropped, "submit-only")
    new_job_manager(inst, "module")
    # Undelivered, they survive the next job-manager too.
    new_job_manager(inst, "module")
    wait_until(lambda: query(inst)["counters"]["lost_undelivered"] == 3)
    handle = inst.handle()
    flux.job.cancel(handle, active)
    wait_event(handle, active, "epilog-start", match=described("bb"))

    if client == "python":
        gate = EpilogGate(handle)
        first = python_watch(gate, "bb", "setup")
        assert [(h["id"], h["description"], h.get("lost")) for h in first] == [
            (dropped, "bb", True),
            (dropped, "setup", True),
            (active, "bb", None),
        ]
        assert first[1]["point"] == "prolog" and first[0]["userid"] == os.getuid()
        assert first[0]["reason"].startswith("lost: flux-core dropped the job")
        assert [h["id"] for h in python_watch(gate, "bb", "setup")] == [active]
        gate.list()
        assert query(inst)["counters"]["lost_undelivered"] == 1
    else:
        first = cli_watch(inst, "--lost", "--count", "3", "bb", "setup")
        assert first[0].startswith(f"{f58(dropped)} bb userid={os.getuid()} lost ")
        assert first[1].startswith(f"{f58(dropped)} setup userid=")
        assert " lost prolog: lost: flux-core dropped" in first[1]
        assert first[2].startswith(f"{f58(active)} bb ")
        again = cli_watch(inst, "--lost", "--count", "1", "bb", "setup")
        assert again == [first[2]]
        assert query(inst)["counters"]["lost_undelivered"] == 1
    # "other" was not watched: it still waits, alone, across a restart.
    new_job_manager(inst, "module")
    wait_until(lambda: query(inst)["counters"]["lost_undelivered"] == 1)
    gate = EpilogGate(inst.handle())
    other, rest = python_watch(gate)
    assert (other["description"], rest["id"]) == ("other", active)
    gate.list()
    assert query(inst)["counters"]["lost_undelivered"] == 0


def test_watch_lost_delivers_a_hold_lost_while_the_plugin_was_removed(
    new_instance, plugin
):
    """The other way a hold is lost: its job went inactive while no gate
    was loaded.  A watcher of lost holds gets it too, with its reason."""
    inst = new_instance(plugin=None)
    inst.flux("jobtap", "load", plugin)
    handle = inst.handle()
    job = submit(handle, urgency=0)
    EpilogGate(handle).hold(job, "bb")
    inst.flux("jobtap", "remove", "epilog-gate.so")
    flux.job.cancel(handle, job)
    wait_event(handle, job, "clean")
    inst.flux("jobtap", "load", plugin)

    gate = EpilogGate(inst.handle())
    future = gate.watch_async(["bb"], lost=True)
    lost = future.get()
    assert (lost["id"], lost["description"], lost["lost"]) == (job, "bb", True)
    assert (
        lost["reason"] == "lost: the job went inactive before epilog-gate could hold it"
    )
    assert lost["ran"] is False


def test_a_reload_while_the_load_checks_a_dropped_job_still_reports_its_hold(
    new_instance,
):
    """After a restart the load reads the eventlog of each job the hold
    log names that the job-manager did not replay; those reads answer
    the plugin instance that made them.  A ``flux jobtap`` reload
    before they answered left the hold never reported lost: the new
    instance reads them again."""
    slow = {"debug-fault": "slow-recovery"}
    inst = new_instance(plugin_conf=slow)
    handle = inst.handle()
    dropped = submit(handle, urgency=0)
    EpilogGate(handle).hold(dropped, "bb")
    damage(inst, dropped, "submit-only")
    restart(inst, "module")
    # The load's reads wait 3 s (slow-recovery): the reload comes first.
    restart(inst, "jobtap", options=("debug-fault=slow-recovery",))
    wait_until(lambda: query(inst)["counters"]["lost"] == 1)
    (line,) = dmesg(inst, f"hold bb of job {f58(dropped)} was lost")
    assert "job-lost+found" in line, line


def test_a_snapshot_while_the_load_checks_a_dropped_job_keeps_its_hold(
    new_instance,
):
    """A snapshot made while the load still read the eventlog of a job
    the job-manager did not replay left that job's holds out of the log:
    a restart before the reads answered never reported them lost."""
    inst = new_instance(plugin_conf={"debug-fault": "slow-recovery"})
    handle = inst.handle()
    dropped = submit(handle, urgency=0)
    EpilogGate(handle).hold(dropped, "bb")
    damage(inst, dropped, "submit-only")
    handle = restart(inst, "module")
    # The load's reads wait 3 s (slow-recovery): both come first.
    EpilogGate(handle).snapshot()
    restart(inst, "module")
    wait_until(lambda: query(inst)["counters"]["lost"] == 1)
    (line,) = dmesg(inst, f"hold bb of job {f58(dropped)} was lost")
    assert "job-lost+found" in line, line
