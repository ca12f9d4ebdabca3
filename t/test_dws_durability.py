"""A rabbit job held in its prolog (``dws-setup``) or its epilog
(``dws-epilog``) when the dws plugin is removed and loaded, the
job-manager reloaded, the instance restarted, or the broker SIGKILLed
and restarted: the service's later prolog-remove/epilog-remove still
finishes the hold, a cancel during the prolog still ends it with status
1 and runs the epilog, and the epilog timeout still fires.

Each disruption is made once for the jobs of three of these cases at
once; the epilog timeout, which the whole instance is configured with,
has an instance of its own."""

import os
import time

import flux.job
import pytest
from conftest import TIMEOUTS, restart
from dwsfake import DW, contexts
from jobs import described, eventlog, named, submit, wait_event, wait_inactive

from flux_epilog_gate.paths import plugin_path

#: The plugin under test: the installed dws.so, unless DWS_PLUGIN names
#: another build of it (to measure flux-coral2's dws-jobtap.so the same way).
PLUGIN = os.environ.get("DWS_PLUGIN") or plugin_path("dws")

#: The service leaves every prolog and epilog to the test.
HANG = ("--setup-hang", "--post-run-hang")


@pytest.fixture
def dws_so():
    return PLUGIN


KINDS = ["jobtap", "module", "instance", "sigkill"]


def disrupt(kind, inst, service, start_service, *options):
    """Do ``kind`` to the instance; return a handle and the service to use
    after it (a new one where the instance restarted)."""
    if kind in ("jobtap", "module"):
        return restart(inst, kind, PLUGIN, options, dependents=True), service
    service.stop()
    if kind == "sigkill":
        inst.flux("kvs", "put", "--sync", "test.checkpoint=1")
    handle = restart(inst, kind, PLUGIN)
    return handle, start_service(inst, *HANG)


def in_prolog(h):
    """A rabbit job whose ``dws-setup`` is active."""
    jobid = submit(h, duration=0.1, **DW)
    wait_event(h, jobid, "prolog-start", match=described("dws-setup"))
    return jobid


def end_prolog(h, jobid):
    """What the service sends once the storage is set up."""
    h.rpc(
        "job-manager.dws.prolog-remove", {"id": jobid, "variables": {}, "rabbits": {}}
    ).get()


def in_epilog(h):
    """A rabbit job whose ``dws-epilog`` is active (its prolog ended as
    the service ends it)."""
    jobid = in_prolog(h)
    end_prolog(h, jobid)
    wait_event(h, jobid, "epilog-start", match=described("dws-epilog"), timeout=30)
    return jobid


def end_epilog(h, jobid):
    """What the service sends once the storage is torn down."""
    h.rpc("job-manager.dws.epilog-remove", {"id": jobid}).get()


@pytest.mark.parametrize("kind", KINDS)
def test_prolog_and_epilog_holds_carry_on_after_disruption(kind, rabbit_instance, dws):
    inst = rabbit_instance()
    h = inst.handle()
    service = dws(inst, *HANG)
    started, cancelled, ended = in_prolog(h), in_prolog(h), in_epilog(h)
    h, service = disrupt(kind, inst, service, dws)

    # prolog-remove after the disruption starts the job.
    end_prolog(h, started)
    wait_event(h, started, "epilog-start", match=described("dws-epilog"), timeout=30)
    end_epilog(h, started)
    # A cancel during the prolog ends it with status 1, and runs the epilog.
    flux.job.cancel(h, cancelled)
    wait_event(h, cancelled, "prolog-finish", match=described("dws-setup"))
    wait_event(h, cancelled, "epilog-start", match=described("dws-epilog"))
    end_epilog(h, cancelled)
    # epilog-remove after the disruption ends the job.
    end_epilog(h, ended)

    for jobid in (started, cancelled, ended):
        wait_inactive(h, jobid, timeout=30)
    events = eventlog(h, started)
    assert contexts(events, "prolog-finish", "dws-setup")[0]["status"] == 0
    assert named(events, "start")
    assert contexts(events, "epilog-finish", "dws-epilog")[0]["status"] == 0
    events = eventlog(h, cancelled)
    assert contexts(events, "prolog-finish", "dws-setup")[0]["status"] == 1
    assert not named(events, "start")
    events = eventlog(h, ended)
    assert contexts(events, "epilog-finish", "dws-epilog")[0]["status"] == 0


@pytest.mark.parametrize("kind", KINDS)
def test_epilog_timeout_fires_after_disruption(kind, rabbit_instance, dws):
    # Long enough to outlast the disruption, with room for a busy machine.
    timeout = TIMEOUTS[kind]
    inst = rabbit_instance(**{"epilog-timeout": timeout})
    h = inst.handle()
    service = dws(inst, *HANG)
    jobid = in_epilog(h)
    options = () if kind != "jobtap" else (f"epilog-timeout={timeout}",)
    h, service = disrupt(kind, inst, service, dws, *options)
    disrupted = time.time()
    start = named(eventlog(h, jobid), "epilog-start", "dws-epilog")[0].timestamp
    assert disrupted < start + timeout - 1.0, "the disruption outlasted the timeout"
    wait_inactive(h, jobid, timeout=timeout + 30)
    events = eventlog(h, jobid)
    (exc,) = [e.context for e in named(events, "exception")]
    assert exc["type"] == "dws-epilog-timeout"
    assert contexts(events, "epilog-finish", "dws-epilog")[0]["status"] == 1
    assert named(events, "exception")[0].timestamp >= start + timeout - 0.5
