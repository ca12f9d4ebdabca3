"""Shutdown never waits on holds without end, and never drops one silently.

Real instances that run flux-core's job cleanup step at shutdown (which
waits until no job is in RUN or CLEANUP): the end of ``flux start CMD``,
``flux shutdown``, and the end of a ``flux batch`` script.  At
``shutdown-timeout`` each hold still outstanding is kept for the restart
("keep": the instance that restarts from its state directory has it back,
listed, releasable, sent to watchers, its timeout running on) or finished
with status 143 and a job exception naming it ("finish").
"""

import errno
import json
import os
import subprocess
import sys
import time

import flux.job
import pytest
from flux.eventlog import EventLogEvent
from flux.job import JobspecV1
from jobs import dmesg, eventlog, named, query, submit, wait_event, wait_inactive

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.shutdown import SHUTDOWN_STATUS
from flux_epilog_gate.jobid import f58
from flux_epilog_gate.testing import flux_command

#: The bound the tests configure, and how much later than the bound the
#: instance may stop on a loaded machine (without the gate's bound it
#: never does).
BOUND = 2.0
SLACK = 20.0
#: Exit status of an instance whose cleanup step was aborted (flux-core
#: runat: the aborted "flux queue idle" dies of SIGHUP, 128 + 1).
ABORTED = 129

#: Commands for the scripts: hold a job (DESC) cancelled while pending,
#: wait until the hold is active, and append the job id to OUT/jobs.
HELD = """
id=$(flux submit --urgency=0 true)
flux-epilog-gate hold -q $id {desc} {opts}
flux cancel $id
flux job wait-event -t 30 $id epilog-start >/dev/null
echo $id >>{out}/jobs
"""
#: Copy the eventlog of job $id to EVENTS as it grows, after the script
#: (and the instance with it) has gone: what the instance's shutdown does
#: to the job.
FOLLOW = """
flux job eventlog --format=json --follow $id >{events} &
sleep 0.2
"""


def _env():
    """The environment of an instance that runs its job cleanup step."""
    env = dict(os.environ)
    env.pop("FLUX_DISABLE_JOB_CLEANUP", None)
    env.pop("FLUX_URI", None)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    return env


def _gate_config(path, plugin, **conf):
    """Write an instance config that loads the plugin with ``conf`` (its
    values are numbers or strings, which JSON writes as TOML does)."""
    text = ", ".join(f"{key} = {json.dumps(value)}" for key, value in conf.items())
    with open(path, "w") as f:
        f.write(f'[job-manager]\nplugins = [ {{ load = "{plugin}", ')
        f.write(f"conf = {{ {text} }} }} ]\n")


def _flux_start(tmp_path, plugin, script, statedir=None, **conf):
    """Run ``flux start sh -ec SCRIPT`` with the plugin; return the process
    and how long the instance took to stop after the script ended."""
    confdir = tmp_path / "conf"
    confdir.mkdir(exist_ok=True)
    _gate_config(confdir / "gate.toml", plugin, **conf)
    cmd = [flux_command(), "start", f"--config-path={confdir}"]
    if statedir is not None:
        cmd.append(f"-Sstatedir={statedir}")
    ended = tmp_path / "ended"
    script += f"\ndate +%s.%N >{ended}\n"
    proc = subprocess.run(
        [*cmd, "sh", "-ec", script],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    stopped = time.time()
    assert ended.exists(), proc.stderr
    return proc, stopped - float(ended.read_text())


def _jobs(tmp_path):
    return [flux.job.JobID(line) for line in (tmp_path / "jobs").read_text().split()]


def _one_line(text, fragment):
    found = [line for line in text.splitlines() if fragment in line]
    assert len(found) == 1, (fragment, text)
    return found[0]


def _finished_by_shutdown(events, description):
    """The job's eventlog shows the hold finished by shutdown, with an
    exception naming it, before clean."""
    (finish,) = named(events, "epilog-finish", description)
    assert finish.context["status"] == SHUTDOWN_STATUS
    notes = [e.context["note"] for e in named(events, "exception")]
    assert any(f"hold {description}" in n and "shutdown-timeout" in n for n in notes)
    assert events[-1].name == "clean"


# The end of flux start CMD


def test_end_of_flux_start_keeps_holds_for_the_restart(tmp_path, plugin, new_instance):
    statedir = tmp_path / "state"
    statedir.mkdir()
    out = tmp_path
    script = (
        HELD.format(desc="bb", opts="", out=out)
        + HELD.format(desc="timed", opts="--timeout 12", out=out)
        + "queued=$(flux submit --urgency=0 true)\n"
        + "flux-epilog-gate hold -q $queued license\n"
        + f"echo $queued >>{out}/jobs\n"
    )
    # auto: an instance with a persistent statedir that is not a job.
    proc, took = _flux_start(
        tmp_path, plugin, script, statedir=statedir, **{"shutdown-timeout": BOUND}
    )
    active, timed, queued = _jobs(tmp_path)
    assert proc.returncode == ABORTED, proc.stderr
    assert BOUND <= took < BOUND + SLACK
    _one_line(proc.stderr, f"kept hold bb of job {f58(active)} (active)")
    _one_line(proc.stderr, f"kept hold timed of job {f58(timed)} (active)")

    inst = new_instance(cores=None, statedir=str(statedir))
    handle = inst.handle()
    gate = EpilogGate(handle)
    held = {(h["id"], h["description"]): h["state"] for h in gate.list()}
    assert held == {
        (active, "bb"): "active",
        (timed, "timed"): "active",
        (queued, "license"): "pending",
    }
    stream = gate.watch(["bb", "timed"])
    assert {next(stream)["id"], next(stream)["id"]} == {active, timed}
    assert named(eventlog(handle, active), "clean") == []
    assert gate.release(active, "bb")["released"] is True
    wait_inactive(handle, active)
    # The hold's clock ran on from when it became active.
    finish = wait_event(handle, timed, "epilog-finish", timeout=30)
    (start,) = named(eventlog(handle, timed), "epilog-start", "timed")
    assert finish.context["status"] == 124
    assert abs(finish.timestamp - start.timestamp - 12) < 3


def test_end_of_flux_start_without_statedir_finishes_holds(tmp_path, plugin):
    events = tmp_path / "events"
    script = HELD.format(desc="bb", opts="", out=tmp_path) + FOLLOW.format(
        events=events
    )
    # auto: without a persistent statedir the instance never restarts.
    proc, took = _flux_start(tmp_path, plugin, script, **{"shutdown-timeout": BOUND})
    (job,) = _jobs(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert BOUND <= took < BOUND + SLACK
    _one_line(proc.stderr, "shutdown-action=finish for 1 hold")
    _one_line(proc.stderr, f"finished hold bb of job {f58(job)} with status 143")
    _finished_by_shutdown(_followed(events), "bb")


def _followed(path):
    """The events a FOLLOW command wrote."""
    return [EventLogEvent(line) for line in path.read_text().splitlines() if line]


# flux shutdown


def test_flux_shutdown_names_each_hold_once_and_keeps_them(new_instance):
    inst = new_instance(job_cleanup=True, plugin_conf={"shutdown-timeout": 4.0})
    handle = inst.handle()
    gate = EpilogGate(handle)
    active = submit(handle, urgency=0)
    gate.hold(active, "bb")
    flux.job.cancel(handle, active)
    wait_event(handle, active, "epilog-start")
    queued = submit(handle, urgency=0)

    started = time.time()
    shutdown = subprocess.Popen(
        [flux_command(), "shutdown"],
        env=inst.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.time() + 3.0
        while not _waits(inst, "bb"):
            assert time.time() < deadline, inst.flux("dmesg").stdout
            time.sleep(0.1)
        # A hold registered while the shutdown waits is accepted, and kept.
        gate.hold(queued, "license")
        time.sleep(0.5)
        assert len(_waits(inst, "bb")) == 1
        output, _ = shutdown.communicate(timeout=4.0 + SLACK)
    finally:
        shutdown.kill()
    inst.proc.wait(timeout=SLACK)
    assert time.time() - started < 4.0 + SLACK
    _one_line(output, f"shutdown waits on hold bb of job {f58(active)}")
    _one_line(output, f"kept hold bb of job {f58(active)} (active)")

    inst.start()
    handle = inst.handle()
    gate = EpilogGate(handle)
    held = {(h["id"], h["description"]): h["state"] for h in gate.list()}
    assert held == {(active, "bb"): "active", (queued, "license"): "pending"}
    assert gate.release(active, "bb")["released"] is True
    wait_inactive(handle, active)


def _waits(inst, description):
    return dmesg(inst, f"shutdown waits on hold {description} ")


def _shutdown_finishes_and_restart(inst, job, description):
    """``flux shutdown`` ends within the bound, the hold of ``job`` finished
    with status 143; the instance is started again: no hold is left.
    Returns a handle on it."""
    started = time.time()
    done = inst.flux("shutdown", "--quiet", timeout=BOUND + SLACK, check=False)
    inst.proc.wait(timeout=SLACK)
    assert BOUND <= time.time() - started < BOUND + SLACK
    assert done.returncode == 0, done.stderr
    _one_line(
        done.stderr, f"finished hold {description} of job {f58(job)} with status 143"
    )
    inst.start()
    handle = inst.handle()
    assert EpilogGate(handle).list() == []
    return handle


def test_flux_shutdown_finish_ends_holds_with_status_and_exception(new_instance):
    conf = {"shutdown-timeout": BOUND, "shutdown-action": "finish"}
    inst = new_instance(job_cleanup=True, plugin_conf=conf)
    handle = inst.handle()
    gate = EpilogGate(handle)
    job = submit(handle, urgency=0)
    gate.hold(job, "bb")
    flux.job.cancel(handle, job)
    wait_event(handle, job, "epilog-start")

    handle = _shutdown_finishes_and_restart(inst, job, "bb")
    _finished_by_shutdown(eventlog(handle, job), "bb")


# flux batch


def test_batch_script_exit_finishes_holds_of_the_sub_instance(
    tmp_path, plugin, new_instance
):
    outer = new_instance(plugin=None, cores=None, job_cleanup=True)
    _gate_config(tmp_path / "gate.toml", plugin, **{"shutdown-timeout": BOUND})
    events = tmp_path / "events"
    script = tmp_path / "batch.sh"
    script.write_text(
        "#!/bin/sh\nset -e\n"
        + HELD.format(desc="bb", opts="", out=tmp_path)
        + FOLLOW.format(events=events)
        + f"date +%s.%N >{tmp_path}/ended\n"
    )
    env = _env()
    env["FLUX_URI"] = outer.uri
    submitted = subprocess.run(
        [
            flux_command(),
            "batch",
            "-N1",
            f"--conf={tmp_path / 'gate.toml'}",
            f"--output={tmp_path / 'out'}",
            str(script),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    batch = flux.job.JobID(submitted.stdout.strip())
    outer_handle = outer.handle()
    wait_inactive(outer_handle, batch, timeout=60 + SLACK)
    stopped = time.time()
    assert BOUND <= stopped - float((tmp_path / "ended").read_text()) < BOUND + SLACK
    (finish,) = named(eventlog(outer_handle, batch), "finish")
    assert finish.context["status"] == 0
    (job,) = _jobs(tmp_path)
    output = (tmp_path / "out").read_text()
    _one_line(output, "shutdown-action=finish for 1 hold")
    _one_line(output, f"finished hold bb of job {f58(job)} with status 143")
    _finished_by_shutdown(_followed(events), "bb")


# After the bound


def _stuck_job(handle, gate):
    """A running job with a pending hold that ignores the SIGTERM of its
    cancel: its processes run on until the exec system kills them
    (kill-timeout, 5 s), well after a bound of 1 s."""
    spec = JobspecV1.from_command(["sh", "-c", "trap '' TERM; sleep 60"])
    stuck = flux.job.submit(handle, spec)
    wait_event(handle, stuck, "start")
    gate.hold(stuck, "umount")
    return stuck


def _wait_log(inst, text):
    deadline = time.time() + SLACK
    while not dmesg(inst, text):
        assert time.time() < deadline, inst.flux("dmesg").stdout
        time.sleep(0.1)


def test_after_the_bound_holds_are_refused_and_running_jobs_holds_finished(
    new_instance,
):
    conf = {"shutdown-timeout": 1.0, "shutdown-action": "finish"}
    inst = new_instance(job_cleanup=True, plugin_conf=conf)
    handle = inst.handle()
    gate = EpilogGate(handle)
    stuck = _stuck_job(handle, gate)
    queued = submit(handle, urgency=0)

    shutdown = subprocess.Popen(
        [flux_command(), "shutdown", "--quiet"],
        env=inst.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_log(inst, "shutdown-timeout (1s) expired")
        # The job's processes still run, and keep the shutdown waiting.
        assert named(eventlog(handle, stuck), "finish") == []
        with pytest.raises(OSError) as info:
            gate.hold(queued, "late")
        assert info.value.errno == errno.ESHUTDOWN
        assert "shutting down" in str(info.value)
        shutdown.wait(timeout=10 + SLACK)
    finally:
        shutdown.kill()
    inst.proc.wait(timeout=SLACK)

    inst.start()
    handle = inst.handle()
    assert EpilogGate(handle).list() == []
    events = eventlog(handle, stuck)
    # Made active at the bound, as the shutdown ends the job's processes,
    # and finished.
    _finished_by_shutdown(events, "umount")
    (start,) = named(events, "epilog-start", "umount")
    (finish,) = named(events, "finish")
    assert start.timestamp < finish.timestamp, [(e.timestamp, e.name) for e in events]


def test_keep_holds_of_a_job_whose_processes_outlive_the_bound(new_instance):
    conf = {"shutdown-timeout": 1.0, "shutdown-action": "keep"}
    inst = new_instance(job_cleanup=True, plugin_conf=conf)
    handle = inst.handle()
    gate = EpilogGate(handle)
    stuck = _stuck_job(handle, gate)
    inst.flux("shutdown", "--quiet", timeout=SLACK, check=False)
    inst.proc.wait(timeout=SLACK)

    # Restarted, flux-core would let the job go inactive at once had the
    # hold stayed pending; it is active and holds the job.
    inst.start()
    handle = inst.handle()
    gate = EpilogGate(handle)
    assert [(h["id"], h["state"]) for h in gate.list()] == [(stuck, "active")]
    assert named(eventlog(handle, stuck), "clean") == []
    assert gate.release(stuck, "umount")["released"] is True
    wait_inactive(handle, stuck)


# Configuration


def test_shutdown_options_are_checked_at_load_and_shown_by_query(new_instance, plugin):
    inst = new_instance(plugin=None)
    bad = inst.flux("jobtap", "load", plugin, "shutdown-action=drop", check=False)
    assert bad.returncode != 0
    assert "shutdown-action: 'drop' is not one of 'auto', 'keep', 'finish'" in (
        bad.stderr
    )
    bad = inst.flux("jobtap", "load", plugin, "shutdown-timeout=soon", check=False)
    assert bad.returncode != 0 and "shutdown-timeout: 'soon'" in bad.stderr
    assert "epilog-gate" not in inst.flux("jobtap", "list").stdout
    inst.flux("jobtap", "load", plugin, "shutdown-timeout=1m", "shutdown-action=keep")
    config = query(inst)["config"]
    assert (config["shutdown-timeout"], config["shutdown-action"]) == (60.0, "keep")


def test_flux_shutdown_finish_ends_an_active_prolog_hold(new_instance):
    conf = {"shutdown-timeout": BOUND, "shutdown-action": "finish"}
    inst = new_instance(job_cleanup=True, plugin_conf=conf)
    handle = inst.handle()
    gate = EpilogGate(handle)
    job = submit(handle, urgency=0)
    gate.hold(job, "setup", point="prolog")
    handle.rpc("job-manager.urgency", {"id": int(job), "urgency": 16}).get()
    wait_event(handle, job, "prolog-start")

    handle = _shutdown_finishes_and_restart(inst, job, "setup")
    events = eventlog(handle, job)
    (finish,) = named(events, "prolog-finish", "setup")
    assert finish.context["status"] == SHUTDOWN_STATUS
    assert "start" not in [event.name for event in events]
