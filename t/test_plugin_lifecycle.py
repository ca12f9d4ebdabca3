"""Outcomes of a release, the jobtap query, and the plugin's life in the
job-manager: remove and load, bad options, faults contained."""

import errno

import flux.job
import pytest
from conftest import restart
from jobs import (
    dmesg,
    eventlog,
    named,
    names,
    query,
    set_urgency,
    settle,
    submit,
    wait_event,
    wait_inactive,
)

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.testing import Instance

pytestmark = pytest.mark.usefixtures("no_leftover_holds")


def runs_jobs(handle):
    """The instance still runs a job to completion."""
    jobid = submit(handle)
    wait_inactive(handle, jobid)
    return True


def test_failed_release_posts_status_and_raises_nonfatal_exception(handle, gate):
    jobid = submit(handle, urgency=0, duration=0.1)
    gate.hold(jobid, "bb")
    set_urgency(handle, jobid, 16)
    wait_event(handle, jobid, "epilog-start")
    gate.release(jobid, "bb", status=3)
    wait_inactive(handle, jobid)
    events = eventlog(handle, jobid)
    (finish,) = named(events, "epilog-finish", "bb")
    assert finish.context["status"] == 3
    (exception,) = named(events, "exception")
    assert exception.context["type"] == "epilog"
    assert exception.context["severity"] == 1
    assert "bb" in exception.context["note"] and "3" in exception.context["note"]
    assert names(events).index("epilog-finish") < names(events).index("clean")


def test_jobtap_query_shows_config_counters_and_holds(instance, handle, gate):
    held = query(instance)["counters"]["held"]
    jobid = submit(handle, urgency=0)
    gate.hold(jobid, "bb", timeout=600)
    answer = query(instance)
    assert answer["config"]["max-holds"] > 0 and "timeout" in answer["config"]
    assert answer["counters"]["held"] == held + 1
    assert answer["counters"]["holds"] == len(answer["holds"]) >= 1
    (hold,) = [h for h in answer["holds"] if h["id"] == jobid]
    assert hold["description"] == "bb" and hold["state"] == "pending"
    assert hold["timeout"] == 600
    flux.job.cancel(handle, jobid)


def test_reload_keeps_active_hold_blocking_clean(new_instance, plugin):
    inst = new_instance()
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    jobid = submit(handle, urgency=0)
    gate.hold(jobid, "bb")
    flux.job.cancel(handle, jobid)
    wait_event(handle, jobid, "epilog-start")
    restart(inst, "jobtap", plugin)
    assert [(h["description"], h["state"]) for h in gate.list(jobid)] == [
        ("bb", "active")
    ]
    assert "clean" not in names(settle(handle, jobid, "clean"))
    assert gate.release(jobid, "bb") == {"released": True}
    wait_inactive(handle, jobid)


def test_reload_keeps_pending_hold_and_activates_it(new_instance, plugin):
    inst = new_instance()
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    jobid = submit(handle, urgency=0)
    gate.hold(jobid, "bb")
    restart(inst, "jobtap", plugin)
    assert [(h["description"], h["state"]) for h in gate.list(jobid)] == [
        ("bb", "pending")
    ]
    flux.job.cancel(handle, jobid)
    wait_event(handle, jobid, "epilog-start")
    assert "clean" not in names(settle(handle, jobid, "clean"))
    gate.release(jobid, "bb")
    wait_inactive(handle, jobid)


@pytest.fixture(scope="module")
def bare():
    """An instance without the plugin, for loads that must fail."""
    with Instance(cores=64) as inst:
        yield inst


@pytest.mark.parametrize(
    "option, key",
    [("timeout=-5", "timeout"), ("bogus=1", "bogus"), ("max-holds=0", "max-holds")],
)
def test_load_with_bad_option_fails_naming_key(bare, plugin, option, key):
    result = bare.flux("jobtap", "load", plugin, option, check=False)
    if result.returncode == 0:
        bare.flux("jobtap", "remove", "epilog-gate.so")
    assert result.returncode != 0
    assert f"epilog-gate: {key}" in result.stderr
    assert "epilog-gate" not in bare.flux("jobtap", "list").stdout
    assert runs_jobs(bare.handle())


def load_faulty(new_instance, plugin, where):
    inst = new_instance(plugin=None)
    inst.flux("jobtap", "load", plugin, f"debug-fault={where}")
    return inst


def test_fault_in_request_is_logged_and_answered_with_error(new_instance, plugin):
    inst = load_faulty(new_instance, plugin, "request")
    with pytest.raises(OSError) as info:
        EpilogGate(inst.handle()).list()
    assert info.value.errno == errno.EIO and "dmesg" in info.value.strerror
    assert dmesg(inst, "debug-fault=request: injected failure")
    assert runs_jobs(inst.handle())


def test_fault_in_query_is_logged_and_answered_with_error(new_instance, plugin):
    inst = load_faulty(new_instance, plugin, "query")
    result = inst.flux("jobtap", "query", "epilog-gate.so", check=False)
    assert result.returncode != 0 and "query" in result.stderr
    assert dmesg(inst, "debug-fault=query: injected failure")
    assert runs_jobs(inst.handle())


def test_fault_in_job_callback_is_logged_and_job_proceeds(new_instance, plugin):
    inst = load_faulty(new_instance, plugin, "job")
    handle = inst.handle()
    jobid = submit(handle, urgency=0)
    EpilogGate(handle).hold(jobid, "bb")
    flux.job.cancel(handle, jobid)
    wait_inactive(handle, jobid)
    assert dmesg(inst, "debug-fault=job: injected failure")
    assert runs_jobs(handle)
