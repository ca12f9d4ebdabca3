"""A hold on a job the instance stops with, across the restart: held, or
said loudly to be lost, depending on how the gate is loaded.

Real instances, stopped with ``flux shutdown`` and started again on the
same state directory.  Most run without flux-core's job cleanup step
(``FLUX_DISABLE_JOB_CLEANUP``, as the test helpers set it, and as a site
that wants running jobs to survive a restart does): the instance stops
with its jobs still in RUN or CLEANUP.  What flux-core does with them at
the restart (flux-core 0.88):

- a job left in CLEANUP whose processes had not ended is freed and
  cleaned while the job-manager replays its eventlog, before any plugin
  sees it, also one loaded from the config: the gate makes its pending
  holds active as the instance stops;
- a job left in RUN that cannot be reattached (the local exec system
  cannot) gets an exception once job-exec is loaded, which comes after
  the job-manager and the plugins of its config, but before anyone can
  ``flux jobtap load``: a gate loaded from the config holds it, one
  loaded at run time finds it inactive and says so.
"""

import time

import flux.job
from conftest import restart
from flux.job import JobspecV1
from jobs import dmesg, eventlog, named, query, wait_event, wait_inactive

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.jobid import f58

#: How long a test waits for something the instance does on its own.
SLACK = 30.0


def _running(handle, tmp_path, ignore_term=False):
    """A job whose processes run (``sleep``) until killed; with
    ``ignore_term`` they ignore the SIGTERM of a cancel.  Returns once its
    shell is running."""
    ready = tmp_path / f"ready-{time.monotonic_ns()}"
    trap = "trap '' TERM; " if ignore_term else ""
    spec = JobspecV1.from_command(["sh", "-c", f"{trap}touch {ready}; sleep 300"])
    job = flux.job.submit(handle, spec)
    deadline = time.time() + SLACK
    while not ready.exists():
        assert time.time() < deadline, f"job {job} did not start"
        time.sleep(0.05)
    return job


def _shutdown(inst, keep_running=False):
    """``flux shutdown``; return what it printed (the instance's log from
    the moment it began).

    With ``keep_running``, job-exec is removed first (as a module reload
    would): running jobs stay in RUN and end only at the restart, when
    they cannot be reattached.  Otherwise a job left running may also end
    while the instance stops, when rc3 removes job-info before job-exec
    (the order is flux-core's, not fixed): the gate then holds it as it
    enters CLEANUP."""
    if keep_running:
        inst.flux("module", "remove", "job-exec")
    done = inst.flux("shutdown", timeout=SLACK + 60, check=False)
    inst.proc.wait(timeout=SLACK)
    return done.stderr


def _restart(inst, plugin, at_run_time):
    inst.start()
    if at_run_time:
        inst.flux("jobtap", "load", plugin)
    return inst.handle()


def _holds(handle):
    return {(h["id"], h["description"]): h["state"] for h in EpilogGate(handle).list()}


def _wait_log(inst, text):
    deadline = time.time() + SLACK
    while not dmesg(inst, text):
        assert time.time() < deadline, inst.flux("dmesg").stdout[-3000:]
        time.sleep(0.1)
    return dmesg(inst, text)


def _assert_held_then_released(handle, job, description):
    """The job is held by ``description`` (active), not clean; released,
    it goes inactive."""
    assert _holds(handle) == {(job, description): "active"}
    assert named(eventlog(handle, job), "clean") == []
    assert EpilogGate(handle).release(job, description)["released"] is True
    wait_inactive(handle, job, timeout=SLACK)


# No job cleanup step: the instance stops with a job in CLEANUP


def test_job_left_in_cleanup_keeps_its_pending_hold(new_instance, tmp_path):
    """Cancelled, its processes still running (they ignore SIGTERM): the
    restart would free and clean it before the plugin (here from the
    config) is called for it."""
    inst = new_instance(cores=None)
    handle = inst.handle()
    job = _running(handle, tmp_path, ignore_term=True)
    EpilogGate(handle).hold(job, "bb")
    flux.job.cancel(handle, job)
    wait_event(handle, job, "exception")

    output = _shutdown(inst)

    handle = _restart(inst, None, at_run_time=False)
    _assert_held_then_released(handle, job, "bb")
    assert f"job {f58(job)} is still in CLEANUP as the instance stops" in output


RC3_CANCEL = """
from flux.modprobe import task


@task("cancel-jobs", ranks="0", before=["job-exec", "job-info", "job-manager"])
def cancel_jobs(context):
    context.bash("flux cancel --all --quiet")
"""


def test_job_entering_cleanup_as_the_instance_stops_keeps_its_pending_hold(
    new_instance, tmp_path
):
    """A job that ends while the instance stops (here cancelled by an rc3
    task; job-exec does the same when rc3 removes job-info first): nothing
    waits for its processes, and the restart would free it before any
    plugin sees it."""
    modprobe = tmp_path / "modprobe"
    (modprobe / "rc3.d").mkdir(parents=True)
    (modprobe / "rc3.d" / "cancel.py").write_text(RC3_CANCEL)
    inst = new_instance(cores=None, env={"FLUX_MODPROBE_PATH_APPEND": str(modprobe)})
    handle = inst.handle()
    job = _running(handle, tmp_path, ignore_term=True)
    EpilogGate(handle).hold(job, "bb")

    output = _shutdown(inst)

    handle = _restart(inst, None, at_run_time=False)
    _assert_held_then_released(handle, job, "bb")
    assert f"job {f58(job)} entered CLEANUP as the instance stops" in output


def test_job_left_in_cleanup_keeps_its_hold_loaded_at_run_time(
    new_instance, plugin, tmp_path
):
    inst = new_instance(cores=None, plugin=None)
    inst.flux("jobtap", "load", plugin)
    handle = inst.handle()
    job = _running(handle, tmp_path, ignore_term=True)
    EpilogGate(handle).hold(job, "bb")
    flux.job.cancel(handle, job)
    wait_event(handle, job, "exception")
    _shutdown(inst)

    handle = _restart(inst, plugin, at_run_time=True)
    _assert_held_then_released(handle, job, "bb")


# No job cleanup step: the instance stops with a job in RUN


def test_job_left_running_is_held_by_a_gate_loaded_from_the_config(
    new_instance, tmp_path
):
    """The restart cannot reattach the job: it ends once job-exec is
    loaded, and the gate, loaded from the config before that, holds it."""
    inst = new_instance(cores=None)
    handle = inst.handle()
    job = _running(handle, tmp_path)
    EpilogGate(handle).hold(job, "bb")

    output = _shutdown(inst, keep_running=True)
    assert "job cleanup step is disabled (FLUX_DISABLE_JOB_CLEANUP)" in output
    assert "shutdown waits on" not in output
    assert (
        f"job {f58(job)} still runs as the instance stops: its pending hold bb "
        "stays pending; epilog-gate is loaded from the instance config"
    ) in output

    handle = _restart(inst, None, at_run_time=False)
    wait_event(handle, job, "epilog-start", timeout=SLACK)
    (exception,) = named(eventlog(handle, job), "exception")
    assert "reattach" in exception.context["note"]
    _assert_held_then_released(handle, job, "bb")
    assert query(inst)["counters"]["lost"] == 0


def test_job_left_running_loses_a_hold_loaded_at_run_time_loudly(
    new_instance, plugin, tmp_path
):
    """The job ends at the restart before ``flux jobtap load`` can load
    the gate: said at the shutdown, and again at the load, which counts
    the hold lost and answers its release so; said once."""
    inst = new_instance(cores=None, plugin=None)
    inst.flux("jobtap", "load", plugin)
    handle = inst.handle()
    job = _running(handle, tmp_path)
    EpilogGate(handle).hold(job, "bb")

    output = _shutdown(inst, keep_running=True)
    assert (
        f"job {f58(job)} still runs as the instance stops, and epilog-gate is "
        "not loaded from the instance config"
    ) in output
    assert "its pending hold bb will be lost" in output

    handle = _restart(inst, plugin, at_run_time=True)
    (line,) = _wait_log(inst, f"hold bb of job {f58(job)} was lost")
    assert ".err[" in line, line
    assert query(inst)["counters"]["lost"] == 1
    assert _holds(handle) == {}
    answer = EpilogGate(handle).release(job, "bb")
    assert answer["released"] is False and "lost" in answer["reason"], answer

    # Reported once: the next load into a new job-manager is quiet.
    restart(inst, "module")
    inst.flux("jobtap", "load", plugin)
    time.sleep(1.0)
    assert query(inst)["counters"]["lost"] == 0
    assert len(dmesg(inst, f"hold bb of job {f58(job)} was lost")) == 1


# The ordinary job cleanup step: running jobs are cancelled and waited on


def _ordinary_cleanup(new_instance, plugin, tmp_path, at_run_time):
    conf = {"shutdown-timeout": 2.0}
    if at_run_time:
        inst = new_instance(cores=None, plugin=None, job_cleanup=True)
        inst.flux("jobtap", "load", plugin, "shutdown-timeout=2")
    else:
        inst = new_instance(cores=None, job_cleanup=True, plugin_conf=conf)
    handle = inst.handle()
    job = _running(handle, tmp_path)
    EpilogGate(handle).hold(job, "bb")
    output = _shutdown(inst)
    assert f"kept hold bb of job {f58(job)} (active) for the restart" in output
    handle = _restart(inst, plugin, at_run_time)
    _assert_held_then_released(handle, job, "bb")


def test_ordinary_cleanup_keeps_a_running_jobs_hold_loaded_from_config(
    new_instance, plugin, tmp_path
):
    _ordinary_cleanup(new_instance, plugin, tmp_path, at_run_time=False)


def test_ordinary_cleanup_keeps_a_running_jobs_hold_loaded_at_run_time(
    new_instance, plugin, tmp_path
):
    _ordinary_cleanup(new_instance, plugin, tmp_path, at_run_time=True)


# Loaded in rc1: at run time, but before job-exec


RC1_TASK = """
from flux.modprobe import task


@task("load-epilog-gate", ranks="0", after=["job-manager"], before=["job-exec"])
def load_epilog_gate(context):
    context.bash("flux jobtap load {plugin}")
"""


def test_job_left_running_is_held_by_a_gate_loaded_in_rc1_before_job_exec(
    new_instance, plugin, tmp_path
):
    """A modprobe rc1 task that loads the gate after the job-manager and
    before job-exec has it back before a job left running can end."""
    modprobe = tmp_path / "modprobe"
    (modprobe / "rc1.d").mkdir(parents=True)
    (modprobe / "rc1.d" / "epilog_gate.py").write_text(RC1_TASK.format(plugin=plugin))
    inst = new_instance(
        cores=None, plugin=None, env={"FLUX_MODPROBE_PATH_APPEND": str(modprobe)}
    )
    assert "epilog-gate" in inst.flux("jobtap", "list").stdout
    handle = inst.handle()
    job = _running(handle, tmp_path)
    EpilogGate(handle).hold(job, "bb")
    _shutdown(inst, keep_running=True)

    handle = _restart(inst, plugin, at_run_time=False)
    wait_event(handle, job, "epilog-start", timeout=SLACK)
    _assert_held_then_released(handle, job, "bb")
    assert query(inst)["counters"]["lost"] == 0


# flux jobtap remove + load: a job that ends in between


def test_job_ending_while_the_plugin_is_removed_loses_its_hold_loudly(
    new_instance, plugin
):
    inst = new_instance(plugin=None)
    inst.flux("jobtap", "load", plugin)
    handle = inst.handle()
    job = flux.job.submit(handle, JobspecV1.from_command(["true"]), urgency=0)
    EpilogGate(handle).hold(job, "bb")
    inst.flux("jobtap", "remove", "epilog-gate.so")
    flux.job.cancel(handle, job)
    wait_inactive(handle, job, timeout=SLACK)
    inst.flux("jobtap", "load", plugin)

    (line,) = _wait_log(inst, f"hold bb of job {f58(job)} was lost")
    assert ".err[" in line, line
    assert query(inst)["counters"]["lost"] == 1
    answer = EpilogGate(handle).release(job, "bb")
    assert answer["released"] is False and "lost" in answer["reason"], answer


# A crash with a held job in CLEANUP whose processes have not ended


def test_crash_with_a_job_in_cleanup_loses_its_hold_loudly(new_instance, tmp_path):
    """Nothing runs at a SIGKILL: the restart frees and cleans the job
    while the job-manager replays its eventlog, before the gate (here from
    the config) is called for it.  The gate finds it inactive and says so."""
    inst = new_instance(cores=None)
    handle = inst.handle()
    gate = EpilogGate(handle)
    job = _running(handle, tmp_path, ignore_term=True)
    gate.hold(job, "bb")
    flux.job.cancel(handle, job)
    wait_event(handle, job, "exception")
    # An acknowledged hold is checkpointed: so is the exception before it.
    other = flux.job.submit(handle, JobspecV1.from_command(["true"]), urgency=0)
    # Its validate committed first: checkpointed with submit alone, it
    # would be dropped at the restart, and its hold lost too.
    flux.job.event_wait(handle, other, "priority")
    gate.hold(other, "x")
    restart(inst, "sigkill")
    (line,) = _wait_log(inst, f"hold bb of job {f58(job)} was lost")
    assert ".err[" in line, line
    assert query(inst)["counters"]["lost"] == 1
