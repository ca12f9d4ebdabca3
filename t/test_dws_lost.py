"""A rabbit job that flux-core drops as a new job-manager replays the KVS
(its eventlog checkpointed with ``submit`` alone) never reaches its
epilog: dws.so tells the service as flux-coral2's C plugin ends a
workflow, with one ``dws.teardown`` for the job, so nothing stays
stranded; and not again at the next load."""

from conftest import restart
from dwsfake import DW
from jobs import (
    damage,
    described,
    dmesg,
    submit,
    wait_event,
    wait_inactive,
    wait_until,
)

from flux_epilog_gate.gate.lostrecord import KEY
from flux_epilog_gate.jobid import f58
from flux_epilog_gate.paths import plugin_path

#: The dws plugin, loaded at run time where the gate alone is configured.
PLUGIN = plugin_path("dws")


def test_a_dropped_rabbit_job_gets_one_teardown(rabbit_instance, dws):
    inst = rabbit_instance()
    h = inst.handle()
    service = dws(inst, "--create-hang")
    jobid = submit(h, duration=0.1, **DW)
    wait_event(h, jobid, "dependency-add", match=described("dws-create"))
    service.wait(lambda: service.requests("dws.create"))
    damage(inst, jobid, "submit-only")

    restart(inst, "module", dependents=True)
    assert dmesg(inst, f"{f58(jobid)} not replayed")
    service.wait(lambda: service.requests("dws.teardown"))
    assert service.requests("dws.teardown") == [{"jobid": jobid}]
    # The teardown is sent as the first lost hold is told: the job-manager
    # may still be logging the others when the service has it.
    wait_until(lambda: dmesg(inst, f"{f58(jobid)}: dws-create was lost: tearing"))
    for description in ("dws-create", "dws-setup", "dws-epilog"):
        line = f"hold {description} of job {f58(jobid)} was lost"
        wait_until(lambda line=line: dmesg(inst, line))
    # Delivered: the record of lost holds keeps none, and the next load
    # sends nothing.
    wait_until(lambda: inst.flux("kvs", "get", KEY).stdout == "")
    restart(inst, "module", dependents=True)
    wait_inactive(h, submit(h, duration=0.1))
    assert service.requests("dws.teardown") == [{"jobid": jobid}]


def test_a_rabbit_job_dropped_while_dws_is_not_loaded_is_torn_down_at_its_load(
    new_instance, dws
):
    """The gate (epilog-gate.so) reports the loss; dws.so, loaded later,
    finds it in the record of lost holds."""
    inst = new_instance(cores=8, plugin=plugin_path())
    inst.flux("jobtap", "load", PLUGIN)
    h = inst.handle()
    service = dws(inst, "--create-hang")
    jobid = submit(h, duration=0.1, **DW)
    wait_event(h, jobid, "dependency-add", match=described("dws-create"))
    service.wait(lambda: service.requests("dws.create"))
    damage(inst, jobid, "submit-only")

    restart(inst, "module", dependents=True)
    wait_until(lambda: dmesg(inst, f"hold dws-epilog of job {f58(jobid)} was lost"))
    assert service.requests("dws.teardown") == []
    inst.flux("jobtap", "load", PLUGIN)
    service.wait(lambda: service.requests("dws.teardown"))
    assert service.requests("dws.teardown") == [{"jobid": jobid}]
    wait_until(lambda: inst.flux("kvs", "get", KEY).stdout == "")
