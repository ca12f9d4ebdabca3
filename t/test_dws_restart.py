"""The dws plugin while a rabbit job waits in DEPEND on ``dws-create``:
the plugin removed and loaded, a job-manager reload, an instance restart
and a SIGKILL, under a real instance with t/dws_service.py."""

import os

import flux
import flux.job
import pytest
from conftest import RESTARTS, restart
from dwsfake import DW, contexts
from jobs import described, eventlog, named, submit, wait_event, wait_inactive

from flux_epilog_gate.paths import plugin_path

#: The plugin under test: the installed dws.so, unless DWS_PLUGIN names
#: another build of it (to measure flux-coral2's dws-jobtap.so the same way).
PLUGIN = os.environ.get("DWS_PLUGIN") or plugin_path("dws")


@pytest.fixture
def dws_so():
    return PLUGIN


def update(h, jobid, resources):
    """What the service sends once the job's storage is placed."""
    h.rpc(
        "job-manager.dws.resource-update",
        {"id": jobid, "resources": resources, "exclude": {"properties": ["^x"]}},
    ).get()


@pytest.mark.parametrize("kind", RESTARTS)
def test_a_job_in_depend_survives_a_disruption(kind, rabbit_instance, dws):
    # A removed plugin's load calls job.state.depend again for each job in
    # DEPEND, whose dws-create is still there; a new job-manager or
    # instance recovers it from the hold log and the eventlog.
    inst = rabbit_instance()
    h = inst.handle()
    service = dws(inst, "--create-hang")
    jobid = submit(h, duration=0.1, **DW)
    wait_event(h, jobid, "dependency-add", match=described("dws-create"))
    service.wait(lambda: service.requests("dws.create"))
    (create,) = service.requests("dws.create")
    restarted = kind in ("instance", "sigkill")
    if restarted:
        service.stop()
    if kind == "sigkill":
        inst.flux("kvs", "put", "--sync", "test.checkpoint=1")
    h = restart(inst, kind, PLUGIN, dependents=True)
    if restarted:
        service = dws(inst)
    update(h, jobid, create["resources"])
    wait_inactive(h, jobid, timeout=30)
    events = eventlog(h, jobid)
    assert not named(events, "exception"), [(e.name, e.context) for e in events]
    assert named(events, "start")
    if kind == "jobtap":
        assert len(named(events, "dependency-add", "dws-create")) == 1
    if kind == "module":
        assert named(events, "dependency-remove", "dws-create")
    if not restarted:
        # The service already has the job's workflow: no second dws.create.
        assert len(service.requests("dws.create")) == 1


def test_a_job_still_in_depend_after_its_create_survives_a_load(rabbit_instance, dws):
    # dws-create added and removed, the job kept in DEPEND by another
    # dependency: the description cannot be added again (EEXIST).
    inst = rabbit_instance()
    h = inst.handle()
    service = dws(inst)
    holder = submit(h, urgency=0)
    deps = {"system.dependencies": [{"scheme": "afterany", "value": str(holder)}]}
    jobid = submit(h, duration=0.1, **DW, **deps)
    wait_event(h, jobid, "dependency-remove", match=described("dws-create"))
    inst.flux("jobtap", "remove", os.path.basename(PLUGIN))
    inst.flux("jobtap", "load", PLUGIN)
    flux.job.cancel(h, holder)
    wait_inactive(h, jobid)
    events = eventlog(h, jobid)
    assert not named(events, "exception"), [(e.name, e.context) for e in events]
    assert named(events, "start")
    assert len(service.requests("dws.create")) == 1
    assert contexts(events, "epilog-finish", "dws-epilog")[0]["status"] == 0
