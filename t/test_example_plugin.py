"""The example plugin (examples/runlimit.py), built on the jobtap runtime
with its build helper and loaded into a real instance: jobs that run past
the limit end with a run-limit exception, others are left alone."""

import json
import os
import subprocess
import sys

import pytest
from jobs import eventlog, submit, wait_event, wait_inactive

EXAMPLES = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"
)


@pytest.fixture(scope="module")
def runlimit(tmp_path_factory):
    """run-limit.so, built from examples/ the way the README says."""
    outdir = tmp_path_factory.mktemp("runlimit")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "flux_epilog_gate.jobtap.build",
            "run-limit",
            "runlimit:RunLimit",
            str(outdir),
            EXAMPLES,
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    path = proc.stdout.strip().splitlines()[-1]
    assert os.path.basename(path) == "run-limit.so" and os.path.exists(path)
    return path


def query(inst):
    return json.loads(inst.flux("jobtap", "query", "run-limit.so").stdout)


def exceptions(handle, jobid):
    return [e for e in eventlog(handle, jobid) if e.name == "exception"]


def test_job_past_the_limit_ends_with_a_run_limit_exception(new_instance, runlimit):
    inst = new_instance(plugin=runlimit, plugin_conf={"limit": "1s"})
    handle = inst.handle()
    long_job = submit(handle, duration=60)
    short_job = submit(handle, duration=0.1)
    start = wait_event(handle, long_job, "start").timestamp
    exception = wait_event(handle, long_job, "exception")
    assert exception.context["type"] == "run-limit"
    assert exception.context["severity"] == 0
    assert "run-limit of 1s" in exception.context["note"]
    # The timer is armed on entry to RUN, just before "start" is posted.
    assert 0.9 <= exception.timestamp - start < 5.0
    wait_inactive(handle, long_job)
    wait_inactive(handle, short_job)
    assert exceptions(handle, short_job) == []
    counters = query(inst)
    assert counters["limit"] == 1.0
    assert counters["started"] == 2 and counters["ended"] == 1
    assert counters["running"] == 0


def test_deadlines_lists_the_running_jobs(new_instance, runlimit):
    inst = new_instance(plugin=runlimit, plugin_conf={"limit": "1h"})
    handle = inst.handle()
    job = submit(handle, duration=60)
    started = wait_event(handle, job, "start").timestamp
    answer = handle.rpc("job-manager.run-limit.deadlines", {}).get()
    assert [entry["id"] for entry in answer["jobs"]] == [job]
    assert abs(answer["jobs"][0]["deadline"] - (started + 3600)) < 5
    assert exceptions(handle, job) == []


def test_bad_limit_fails_the_load_and_names_it(new_instance, runlimit):
    inst = new_instance(plugin=None)
    proc = inst.flux("jobtap", "load", runlimit, "limit=soon", check=False)
    assert proc.returncode != 0
    assert "run-limit: limit: 'soon'" in proc.stderr
    listed = inst.flux("jobtap", "list").stdout
    assert "run-limit" not in listed


def test_without_a_limit_no_job_is_touched(new_instance, runlimit):
    inst = new_instance(plugin=runlimit)
    handle = inst.handle()
    job = submit(handle, duration=1.5)
    wait_inactive(handle, job)
    assert exceptions(handle, job) == []
    assert query(inst)["started"] == 0
