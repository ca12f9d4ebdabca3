"""A rabbit job held in its prolog (``dws-setup``) or its epilog
(``dws-epilog``) when the dws plugin is removed and loaded, the
job-manager reloaded, the instance restarted, or the broker SIGKILLed
and restarted: the service's later prolog-remove/epilog-remove still
finishes the hold, a cancel during the prolog still ends it with status
1 and runs the epilog, and the epilog timeout still fires."""

import os

import flux.job
import pytest
import test_dws
from jobs import described, eventlog, named, submit, wait_event, wait_inactive
from test_dws import DW, contexts

from flux_epilog_gate.paths import plugin_path

dws, rabbit_instance = test_dws.dws, test_dws.rabbit_instance

#: The plugin under test: the installed dws.so, unless DWS_PLUGIN names
#: another build of it (to measure flux-coral2's dws-jobtap.so the same way).
PLUGIN = os.environ.get("DWS_PLUGIN") or plugin_path("dws")


@pytest.fixture
def dws_so():
    return PLUGIN


KINDS = ["jobtap", "module", "instance", "sigkill"]


def disrupt(kind, inst, service, start_service, *options):
    """Do ``kind`` to the instance; return a handle and the service to use
    after it (a new one where the instance restarted)."""
    if kind == "jobtap":
        inst.flux("jobtap", "remove", os.path.basename(PLUGIN))
        inst.flux("jobtap", "load", PLUGIN, *options)
        return inst.handle(), service
    if kind == "module":
        inst.flux("module", "reload", "job-manager")
        inst.flux("module", "reload", "sched-simple")
        inst.flux("module", "reload", "job-exec")
        return inst.handle(), service
    service.stop()
    if kind == "instance":
        inst.stop()
    else:
        inst.flux("kvs", "put", "--sync", "test.checkpoint=1")
        inst.kill()
    inst.start()
    handle = inst.handle()
    return handle, start_service(inst, "--setup-hang", "--post-run-hang")


def in_prolog(rabbit_instance, dws, **conf):
    inst = rabbit_instance(**conf)
    h = inst.handle()
    service = dws(inst, "--setup-hang", "--post-run-hang")
    jobid = submit(h, duration=0.1, **DW)
    wait_event(h, jobid, "prolog-start", match=described("dws-setup"))
    return inst, service, jobid


def in_epilog(rabbit_instance, dws, **conf):
    inst = rabbit_instance(**conf)
    h = inst.handle()
    service = dws(inst, "--post-run-hang")
    jobid = submit(h, duration=0.1, **DW)
    wait_event(h, jobid, "epilog-start", match=described("dws-epilog"), timeout=30)
    return inst, service, jobid


def end_epilog(h, jobid):
    """What the service sends once the storage is torn down."""
    h.rpc("job-manager.dws.epilog-remove", {"id": jobid}).get()


@pytest.mark.parametrize("kind", KINDS)
def test_prolog_remove_after_disruption_starts_the_job(kind, rabbit_instance, dws):
    inst, service, jobid = in_prolog(rabbit_instance, dws)
    h, service = disrupt(kind, inst, service, dws)
    h.rpc(
        "job-manager.dws.prolog-remove", {"id": jobid, "variables": {}, "rabbits": {}}
    ).get()
    wait_event(h, jobid, "epilog-start", match=described("dws-epilog"), timeout=30)
    end_epilog(h, jobid)
    wait_inactive(h, jobid, timeout=30)
    events = eventlog(h, jobid)
    assert contexts(events, "prolog-finish", "dws-setup")[0]["status"] == 0
    assert named(events, "start")
    assert contexts(events, "epilog-finish", "dws-epilog")[0]["status"] == 0


@pytest.mark.parametrize("kind", KINDS)
def test_cancel_in_prolog_after_disruption_ends_it(kind, rabbit_instance, dws):
    inst, service, jobid = in_prolog(rabbit_instance, dws)
    h, service = disrupt(kind, inst, service, dws)
    flux.job.cancel(h, jobid)
    wait_event(h, jobid, "prolog-finish", match=described("dws-setup"), timeout=15)
    wait_event(h, jobid, "epilog-start", match=described("dws-epilog"), timeout=15)
    end_epilog(h, jobid)
    wait_inactive(h, jobid, timeout=30)
    events = eventlog(h, jobid)
    assert contexts(events, "prolog-finish", "dws-setup")[0]["status"] == 1
    assert not named(events, "start")


@pytest.mark.parametrize("kind", KINDS)
def test_epilog_remove_after_disruption_ends_the_job(kind, rabbit_instance, dws):
    inst, service, jobid = in_epilog(rabbit_instance, dws)
    h, service = disrupt(kind, inst, service, dws)
    end_epilog(h, jobid)
    wait_inactive(h, jobid, timeout=30)
    events = eventlog(h, jobid)
    assert contexts(events, "epilog-finish", "dws-epilog")[0]["status"] == 0


@pytest.mark.parametrize("kind", KINDS)
def test_epilog_timeout_fires_after_disruption(kind, rabbit_instance, dws):
    timeout = 12.0
    inst, service, jobid = in_epilog(
        rabbit_instance, dws, **{"epilog-timeout": timeout}
    )
    options = () if kind != "jobtap" else (f"epilog-timeout={timeout}",)
    h, service = disrupt(kind, inst, service, dws, *options)
    wait_inactive(h, jobid, timeout=timeout + 30)
    events = eventlog(h, jobid)
    (exc,) = [e.context for e in named(events, "exception")]
    assert exc["type"] == "dws-epilog-timeout"
    assert contexts(events, "epilog-finish", "dws-epilog")[0]["status"] == 1
    start = named(events, "epilog-start", "dws-epilog")[0].timestamp
    assert named(events, "exception")[0].timestamp >= start + timeout - 0.5
