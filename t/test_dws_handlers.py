"""The ends of a rabbit job's holds that nothing but the dws plugin's
handlers decide, under a real instance and the fake DWS service
(t/dws_service.py):

- a job whose own jobspec is hostile (nested a thousand levels deep
  under ``attributes.user``) is held and ended like any other: the
  plugin reads only the parts of the jobspec it needs;
- a dws exception (the epilog timeout's, a cancel in the prolog) and the
  end of its hold survive a SIGKILL of the broker as they were: the
  restart raises the same exception, never the gate's own;
- a job cancelled in its ``dws-setup`` prolog while dws.so is removed
  has that prolog ended with status 1 when dws.so is back, before
  ``dws.post_run`` is sent, and goes inactive.
"""

import os

import flux.job
import pytest
from conftest import restart
from dwsfake import DW, contexts
from jobs import (
    GATE_SYNCS_ONLY,
    described,
    eventlog,
    named,
    submit,
    wait_event,
    wait_inactive,
)

from flux_epilog_gate.paths import plugin_path

#: How deep the hostile attribute nests (Python's recursion limit is
#: 1000: a decoder called from deep in the job-manager's stack fails well
#: short of it).
DEPTH = 980


def deep_jobspec():
    """A rabbit job's jobspec (JSON text) with ``attributes.user.deep``
    an array nested :data:`DEPTH` levels deep."""
    spec = flux.job.JobspecV1.from_command(["true"])
    spec.setattr("system.exec.test.run_duration", "0.1s")
    for key, value in DW.items():
        spec.setattr(key, value)
    spec.setattr("user.deep", "DEEP")
    return spec.dumps().replace('"DEEP"', "[" * DEPTH + "]" * DEPTH)


def test_a_deep_jobspec_is_held_and_ended_as_any_rabbit_job(new_instance, dws):
    """Cancelled while its storage is being created (flux-core's own
    scheduler cannot take such a job: it never gets that far)."""
    inst = new_instance(cores=8, plugin=plugin_path("dws"))
    h = inst.handle()
    fake = dws(inst, "--create-hang")
    jobid = flux.job.submit(h, deep_jobspec())
    wait_event(h, jobid, "dependency-add", match=described("dws-create"))
    flux.job.cancel(h, jobid)
    wait_inactive(h, jobid, timeout=30)
    events = eventlog(h, jobid)
    assert [e.context["type"] for e in named(events, "exception")] == ["cancel"]
    assert contexts(events, "epilog-finish", "dws-epilog")[0]["status"] == 0
    assert [r["jobid"] for r in fake.requests("dws.create")] == [jobid]
    assert [r["jobid"] for r in fake.requests("dws.post_run")] == [jobid]


def _epilog_timed_out(inst, h, fake):
    """A rabbit job whose dws-epilog timed out: its exception and the end
    of its hold posted, the end recorded in the hold log."""
    jobid = submit(h, duration=0.1, **DW)
    wait_event(h, jobid, "epilog-start", match=described("dws-epilog"), timeout=30)
    # The job's events so far are checkpointed; from here on only the
    # gate's own synced record is.
    inst.flux("kvs", "put", "--sync", "test.checkpoint=1")
    wait_event(h, jobid, "epilog-finish", match=described("dws-epilog"), timeout=30)
    return jobid, "dws-epilog-timeout"


def _cancelled_in_prolog(inst, h, fake):
    """A rabbit job cancelled during its dws-setup prolog: its exception
    and the end of the prolog posted, the end recorded."""
    jobid = submit(h, duration=0.1, **DW)
    wait_event(h, jobid, "prolog-start", match=described("dws-setup"), timeout=30)
    inst.flux("kvs", "put", "--sync", "test.checkpoint=1")
    flux.job.cancel(h, jobid)
    wait_event(h, jobid, "prolog-finish", match=described("dws-setup"), timeout=30)
    return jobid, "cancel"


@pytest.mark.parametrize(
    "ended", [_epilog_timed_out, _cancelled_in_prolog], ids=["epilog-timeout", "cancel"]
)
def test_a_dws_exception_survives_a_sigkill_as_it_was(new_instance, dws, ended):
    """Killed once the end of the hold is recorded, before the job-manager
    checkpointed the exception and the end: the restart ends the hold with
    the same exception, and the gate raises none of its own."""
    inst = new_instance(
        cores=8,
        plugin=plugin_path("dws"),
        plugin_conf={"epilog-timeout": 2.0},
        config=GATE_SYNCS_ONLY,
    )
    h = inst.handle()
    hang = ["--post-run-hang"] if ended is _epilog_timed_out else ["--setup-hang"]
    # Nothing ends the epilog before the kill.
    fake = dws(inst, "--post-run-hang", *hang)
    jobid, kind = ended(inst, h, fake)
    fake.stop()
    h = restart(inst, "sigkill")
    dws(inst)
    wait_inactive(h, jobid, timeout=30)
    events = eventlog(h, jobid)
    types = [e.context["type"] for e in named(events, "exception")]
    # Once, and the gate's own (types epilog, prolog) never.  (A post_run
    # sent again after the restart may fail before the new service is up:
    # its dws-epilog exception is the service's.)
    assert types[0] == kind and types.count(kind) == 1, types
    assert not {"epilog", "prolog"} & set(types), types
    assert len(named(events, "epilog-finish", "dws-epilog")) == 1, "; ".join(
        f"{e.name} {e.context}" for e in events
    )
    if kind == "cancel":
        assert contexts(events, "prolog-finish", "dws-setup")[0]["status"] == 1
        assert not named(events, "start")
        assert not named(events, "dws_environment")


@pytest.mark.parametrize("beside", [False, True], ids=["alone", "beside-gate"])
def test_a_cancel_while_dws_is_removed_ends_the_prolog_at_its_load(
    new_instance, dws, beside
):
    dws_so = plugin_path("dws")
    plugins = [(plugin_path(), {})] if beside else []
    inst = new_instance(cores=8, plugin=dws_so, plugins=plugins)
    h = inst.handle()
    fake = dws(inst, "--setup-hang")
    jobid = submit(h, duration=0.1, **DW)
    wait_event(h, jobid, "prolog-start", match=described("dws-setup"), timeout=30)
    inst.flux("jobtap", "remove", os.path.basename(dws_so))
    flux.job.cancel(h, jobid)
    wait_event(h, jobid, "exception")
    inst.flux("jobtap", "load", dws_so)
    wait_inactive(h, jobid, timeout=30)
    events = eventlog(h, jobid)
    assert contexts(events, "prolog-finish", "dws-setup")[0]["status"] == 1
    assert not named(events, "dws_environment")
    assert not named(events, "start")
    assert [e.context["type"] for e in named(events, "exception")] == ["cancel"]
    # dws.post_run went out once, after the prolog had ended.
    entries = fake.entries()
    topics = [e.get("topic") for e in entries]
    assert topics.count("dws.post_run") == 1, entries
    finished = named(events, "prolog-finish", "dws-setup")[0].timestamp
    started = named(events, "epilog-start", "dws-epilog")[0].timestamp
    assert finished <= started
    assert fake.requests("dws.post_run")[0]["jobid"] == int(jobid)
