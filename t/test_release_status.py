"""Where a non-zero release status is visible, exactly as
flux-epilog-gate(7) says (EVENTS, exception): in the job's eventlog and in
the exception fields of ``flux jobs``, and nowhere in the job's result: the
job is COMPLETED, ``flux job status`` and ``{returncode}`` are the job's
own, and an ``afterok`` dependent runs."""

import subprocess
import sys

import pytest
from jobs import eventlog, submit, wait_event, wait_inactive

from flux_epilog_gate import EpilogGate

CLI = [
    sys.executable,
    "-c",
    "import sys; from flux_epilog_gate.client.cli import main; sys.exit(main())",
]
FIELDS = (
    "result",
    "success",
    "returncode",
    "exception.occurred",
    "exception.type",
    "exception.severity",
    "exception.note",
)


def flux_jobs(inst, jobid):
    """The job's FIELDS as ``flux jobs`` prints them."""
    out = inst.flux(
        "jobs", "-n", "-o", "|".join(f"{{{field}}}" for field in FIELDS), str(jobid)
    ).stdout.rstrip("\n")
    return dict(zip(FIELDS, out.split("|")))


@pytest.fixture(scope="module")
def released(plugin):
    """A job that ran, held by ``bb``, released with ``--status 3``; and
    its ``afterok`` and ``afternotok`` dependents."""
    from flux_epilog_gate.testing import Instance

    with Instance(cores=8, plugin=plugin) as inst:
        handle = inst.handle()
        jobid = submit(handle, duration=0.1)
        EpilogGate(handle).hold(jobid, "bb")
        after = {
            kind: inst.flux(
                "submit", f"--dependency={kind}:{jobid}", "true"
            ).stdout.strip()
            for kind in ("afterok", "afternotok")
        }
        wait_event(handle, jobid, "epilog-start")
        done = subprocess.run(
            CLI + ["release", "--status", "3", str(jobid), "bb"],
            env=inst.env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
        )
        assert done.returncode == 0, done.stderr
        wait_inactive(handle, jobid)
        for dependent in after.values():
            wait_inactive(handle, int(inst.flux("job", "id", dependent).stdout))
        yield inst, handle, jobid, after


def test_eventlog_shows_the_status_and_a_non_fatal_exception(released):
    _, handle, jobid, _ = released
    events = eventlog(handle, jobid)
    names = [event.name for event in events]
    assert names[-4:] == ["exception", "epilog-finish", "free", "clean"]
    exception, finish = events[-4], events[-3]
    assert exception.context["type"] == "epilog"
    assert exception.context["severity"] == 1
    assert exception.context["note"] == "epilog-gate: hold bb released with status 3"
    assert finish.context["description"] == "bb"
    assert finish.context["status"] == 3


def test_flux_jobs_shows_the_exception_not_a_failed_result(released):
    inst, _, jobid, _ = released
    assert flux_jobs(inst, jobid) == {
        "result": "COMPLETED",
        "success": "True",
        "returncode": "0",
        "exception.occurred": "True",
        "exception.type": "epilog",
        "exception.severity": "1",
        "exception.note": "epilog-gate: hold bb released with status 3",
    }


def test_flux_job_status_is_the_jobs_own(released):
    inst, _, jobid, _ = released
    assert inst.flux("job", "status", str(jobid), check=False).returncode == 0


def test_afterok_dependent_runs_and_afternotok_does_not(released):
    inst, _, _, after = released
    assert flux_jobs(inst, after["afterok"])["result"] == "COMPLETED"
    never = flux_jobs(inst, after["afternotok"])
    assert never["result"] == "FAILED"
    assert never["exception.type"] == "dependency"
