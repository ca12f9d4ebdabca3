"""The dws plugin (flux-coral2's rabbits) under a real instance, driven by
the project's own fake DWS service (t/dws_service.py)."""

import errno
import json
import os
import subprocess
import sys

import flux.job
import pytest
from dwsfake import DW, SLOT, contexts
from jobs import (
    described,
    dmesg,
    eventlog,
    named,
    names,
    submit,
    wait_event,
    wait_inactive,
)

from flux_epilog_gate.paths import plugin_path
from flux_epilog_gate.testing import Instance


def test_path_prints_the_installed_plugin():
    out = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "flux-epilog-gate"),
            "path",
            "dws",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert os.path.isabs(out) and os.path.basename(out) == "dws.so"
    assert os.path.exists(out) and out == plugin_path("dws")
    assert plugin_path() != out and plugin_path().endswith("epilog-gate.so")


def test_rabbit_job_is_held_in_depend_prolog_and_epilog(rabbit_instance, dws):
    inst = rabbit_instance()
    h = inst.handle()
    service = dws(inst)
    jobid = submit(h, duration=0.1, **DW)
    wait_inactive(h, jobid)
    events = eventlog(h, jobid)
    order = [
        ("dependency-add", "dws-create"),
        ("jobspec-update", None),
        ("dependency-remove", "dws-create"),
        ("prolog-start", "dws-setup"),
        ("dws_environment", None),
        ("prolog-finish", "dws-setup"),
        ("start", None),
        ("finish", None),
        ("epilog-start", "dws-epilog"),
        ("epilog-finish", "dws-epilog"),
        ("clean", None),
    ]
    seen = [
        (e.name, e.context.get("description"))
        for e in events
        if (e.name, e.context.get("description")) in order or (e.name, None) in order
    ]
    assert [(n, d) for n, d in seen] == [
        (n, d if d else None) for n, d in order
    ], names(events)
    assert contexts(events, "prolog-finish", "dws-setup")[0]["status"] == 0
    assert contexts(events, "epilog-finish", "dws-epilog")[0]["status"] == 0
    assert named(events, "dws_environment")[0].context == {
        "variables": {"DW_JOB_X": "/mnt/x"}
    }
    update = named(events, "jobspec-update")[0].context
    assert update["attributes.system.constraints"] == {"properties": ["^nothing"]}
    assert "resources" in update
    # What the service was sent.
    (create,) = service.requests("dws.create")
    assert create["jobid"] == jobid and create["userid"] == os.getuid()
    assert create["failure_tolerance"] == 0
    assert create["dw_directives"] == DW["system.dw"]
    assert create["resources"] == update["resources"]
    (setup,) = service.requests("dws.setup")
    assert setup["jobid"] == jobid and "execution" in setup["R"]
    (post_run,) = service.requests("dws.post_run")
    assert post_run == {"jobid": jobid, "run_started": True}
    # The plugin's answers to the service's requests.
    for method in ("resource-update", "prolog-remove", "epilog-remove"):
        service.wait(lambda m=method: service.replies(m))
        assert "errnum" not in service.replies(method)[0]


def test_constraints_join_with_and_and_allow_rabbits_with_or(rabbit_instance, dws):
    inst = rabbit_instance()
    h = inst.handle()
    dws(inst, "--exclude", '{"not": [{"properties": ["bad"]}]}')
    old = {"properties": ["^foo"]}
    jobid = submit(
        h,
        duration=0.1,
        **DW,
        **{"system.constraints": old, "system.allow_rabbits": True},
    )
    event = wait_event(h, jobid, "jobspec-update")
    exclude = {"not": [{"properties": ["bad"]}]}
    assert event.context["attributes.system.constraints"] == {
        "or": [{"properties": ["rabbit"]}, {"and": [old, exclude]}]
    }
    wait_event(h, jobid, "finish", match=lambda c: c["status"] == 0)
    wait_inactive(h, jobid)


def test_failure_tolerance_is_sent_and_a_bad_one_refused(rabbit_instance, dws):
    inst = rabbit_instance()
    h = inst.handle()
    service = dws(inst)
    jobid = submit(h, duration=0.1, **DW, **{"system.dw_failure_tolerance": 2})
    wait_inactive(h, jobid)
    assert service.requests("dws.create")[0]["failure_tolerance"] == 2
    bad = submit(h, **DW, **{"system.dw_failure_tolerance": "two"})
    exc = wait_event(h, bad, "exception")
    assert exc.context["type"] == "dws" and "unpack args" in exc.context["note"]
    wait_inactive(h, bad)
    assert len(service.requests("dws.create")) == 1


def test_without_the_service_the_job_fails_and_goes_inactive(rabbit_instance):
    inst = rabbit_instance()
    h = inst.handle()
    jobid = submit(h, **DW)
    exc = wait_event(h, jobid, "exception")
    assert exc.context["type"] == "dws-create" and exc.context["severity"] == 0
    assert "flux-coral2-dws service loaded" in exc.context["note"]
    wait_inactive(h, jobid)
    events = eventlog(h, jobid)
    assert contexts(events, "epilog-finish", "dws-epilog")[0]["status"] == 1
    assert "start" not in names(events)


def test_failed_create_still_runs_the_epilog_of_a_job_that_never_ran(
    rabbit_instance, dws
):
    inst = rabbit_instance()
    h = inst.handle()
    service = dws(inst, "--create-fail")
    jobid = submit(h, **DW)
    exc = wait_event(h, jobid, "exception")
    assert exc.context["type"] == "dws-create"
    assert exc.context["note"] == (
        "DWS workflow interactions failed: create failed on purpose"
    )
    wait_inactive(h, jobid)
    assert service.requests("dws.post_run") == [{"jobid": jobid, "run_started": False}]
    events = eventlog(h, jobid)
    assert contexts(events, "epilog-finish", "dws-epilog")[0]["status"] == 0


def test_failed_setup_ends_the_prolog_with_status_1(rabbit_instance, dws):
    inst = rabbit_instance()
    h = inst.handle()
    dws(inst, "--setup-fail")
    jobid = submit(h, duration=0.1, **DW)
    wait_inactive(h, jobid)
    events = eventlog(h, jobid)
    assert [c["status"] for c in contexts(events, "prolog-finish", "dws-setup")] == [1]
    exc = named(events, "exception")[0].context
    assert exc["type"] == "dws-setup" and "setup failed on purpose" in exc["note"]
    assert "start" not in names(events)
    assert contexts(events, "epilog-finish", "dws-epilog")[0]["status"] == 0


def test_cancel_during_the_prolog_ends_it_and_runs_the_epilog(rabbit_instance, dws):
    inst = rabbit_instance()
    h = inst.handle()
    dws(inst, "--setup-hang")
    jobid = submit(h, duration=0.1, **DW)
    wait_event(h, jobid, "prolog-start", match=described("dws-setup"))
    flux.job.cancel(h, jobid)
    wait_inactive(h, jobid)
    events = eventlog(h, jobid)
    assert contexts(events, "prolog-finish", "dws-setup")[0]["status"] == 1
    assert contexts(events, "epilog-finish", "dws-epilog")[0]["status"] == 0


def test_a_job_cancelled_in_its_prolog_is_torn_down_only_if_cancelled_again(
    rabbit_instance, dws
):
    # The first cancel, before the epilog, is not the epilog's: dws.post_run
    # goes out as the epilog starts, and one dws.teardown, for the second.
    inst = rabbit_instance()
    h = inst.handle()
    service = dws(inst, "--setup-hang", "--post-run-hang")
    jobid = submit(h, duration=0.1, **DW)
    wait_event(h, jobid, "prolog-start", match=described("dws-setup"))
    flux.job.cancel(h, jobid)
    wait_event(h, jobid, "epilog-start", match=described("dws-epilog"))
    service.wait(lambda: service.requests("dws.post_run"))
    inst.flux("job", "raise", "--type=cancel", str(jobid), "again")
    wait_inactive(h, jobid)
    assert service.requests("dws.teardown") == [{"jobid": jobid}]


def test_exception_during_the_epilog_asks_for_teardown(rabbit_instance, dws):
    inst = rabbit_instance()
    h = inst.handle()
    service = dws(inst, "--post-run-hang")
    jobid = submit(h, duration=0.1, **DW)
    wait_event(h, jobid, "epilog-start", match=described("dws-epilog"))
    inst.flux("job", "raise", "--type=cancel", str(jobid), "stop it")
    wait_inactive(h, jobid)
    assert service.requests("dws.teardown") == [{"jobid": jobid}]
    events = eventlog(h, jobid)
    assert contexts(events, "epilog-finish", "dws-epilog")[0]["status"] == 0


def test_epilog_timeout_raises_and_aborts(rabbit_instance, dws):
    inst = rabbit_instance(**{"epilog-timeout": 0.5})
    h = inst.handle()
    service = dws(inst, "--post-run-hang")
    jobid = submit(h, duration=0.1, **DW)
    start = wait_event(h, jobid, "epilog-start", match=described("dws-epilog"))
    exc = wait_event(h, jobid, "exception")
    assert exc.context["type"] == "dws-epilog-timeout"
    assert exc.context["note"] == "DWS epilog timed out"
    assert 0.4 <= exc.timestamp - start.timestamp < 5
    wait_inactive(h, jobid)
    service.wait(lambda: service.requests("dws.abort"))
    assert service.requests("dws.abort") == [{"jobid": jobid}]
    assert service.requests("dws.teardown") == []
    events = eventlog(h, jobid)
    assert [c["status"] for c in contexts(events, "epilog-finish", "dws-epilog")] == [1]


def test_malformed_resource_update_fails_the_job(rabbit_instance, dws):
    inst = rabbit_instance()
    h = inst.handle()
    service = dws(inst, "--bad-update")
    jobid = submit(h, **DW)
    exc = wait_event(h, jobid, "exception")
    assert exc.context["type"] == "exception"
    assert "malformed dws.resource-update" in exc.context["note"]
    wait_inactive(h, jobid)
    service.wait(lambda: service.replies("resource-update"))
    assert service.replies("resource-update")[0]["errnum"] == errno.EPROTO
    assert dmesg(inst, "may be out of sync")


def test_requests_for_jobs_in_the_wrong_state_are_refused(rabbit_instance):
    inst = rabbit_instance()
    h = inst.handle()
    jobid = submit(h, duration=60)
    wait_event(h, jobid, "start")
    with pytest.raises(OSError) as info:
        h.rpc(
            "job-manager.dws.resource-update",
            {"id": jobid, "resources": SLOT, "exclude": None},
        ).get()
    assert "job not found in depend state" in str(info.value)
    with pytest.raises(OSError) as info:
        h.rpc("job-manager.dws.epilog-remove", {"id": jobid}).get()
    assert "job not found in CLEANUP state" in str(info.value)
    assert "jobspec-update" not in names(eventlog(h, jobid))
    flux.job.cancel(h, jobid)
    wait_inactive(h, jobid)


def test_load_logs_its_configuration_and_refuses_a_bad_one(dws_so):
    with Instance(cores=8) as inst:
        inst.flux("jobtap", "load", dws_so)
        assert dmesg(inst, "dws: failed to unpack config: No plugin conf set")
        assert dmesg(inst, "dws: epilog timeout = 0.000s")
        inst.flux("jobtap", "remove", "dws.so")
        proc = inst.flux("jobtap", "load", dws_so, "epilog-timeout=soon", check=False)
        assert proc.returncode != 0
        assert "dws: epilog-timeout: 'soon'" in proc.stderr
        assert "dws" not in inst.flux("jobtap", "list").stdout
        inst.flux("dmesg", "--clear")
        inst.flux("jobtap", "load", dws_so, "epilog-timeout=2.5")
        assert dmesg(inst, "dws: epilog timeout = 2.500s")
        assert not dmesg(inst, "failed to unpack config")
        query = json.loads(inst.flux("jobtap", "query", "dws.so").stdout)
        assert query["epilog-timeout"] == 2.5


def test_a_reloaded_plugin_carries_on_with_a_job_it_never_saw(rabbit_instance, dws):
    inst = rabbit_instance()
    h = inst.handle()
    dws(inst)
    inst.flux("queue", "stop", "--all")
    jobid = submit(h, duration=0.1, **DW)
    wait_event(h, jobid, "dependency-remove", match=described("dws-create"))
    inst.flux("jobtap", "remove", "dws.so")
    inst.flux("jobtap", "load", plugin_path("dws"))
    inst.flux("queue", "start", "--all")
    wait_inactive(h, jobid)
    events = eventlog(h, jobid)
    assert contexts(events, "prolog-finish", "dws-setup")[0]["status"] == 0
    assert contexts(events, "epilog-finish", "dws-epilog")[0]["status"] == 0
