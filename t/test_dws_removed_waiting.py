"""dws.so removed while its requests wait on the gate's recovery, under a
real instance with t/dws_service.py as the service.

Beside epilog-gate.so, dws.so's requests that arrive while the gate
still recovers (after a job-manager reload) wait on epilog-gate.so's
load, which outlives dws.so: removing dws.so must answer each of them
(EAGAIN, "send it again"), change nothing, and leave every rabbit job
able to end once dws.so is back."""

import errno

import pytest
from dwsfake import DW, build_foreign_prolog, contexts
from jobs import described, eventlog, named, submit, wait_event, wait_inactive

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.dws.jobs import UNLOADED_READING
from flux_epilog_gate.paths import plugin_path

GATE = plugin_path()
DWS = plugin_path("dws")
#: The service answers nothing by itself: the test sends its requests.
HANG = ("--create-hang", "--setup-hang", "--post-run-hang")
#: Seconds a request waiting on recovery may take to be answered once
#: dws.so is removed (the gate's slowed recovery takes 3 s more).
ANSWERED_WITHIN = 10.0


def created(service, jobid):
    """The ``resources`` of the service's dws.create for the job."""
    service.wait(
        lambda: [r for r in service.requests("dws.create") if r["jobid"] == jobid]
    )
    return [r for r in service.requests("dws.create") if r["jobid"] == jobid][-1][
        "resources"
    ]


def update(h, jobid, resources):
    return h.rpc(
        "job-manager.dws.resource-update",
        {"id": jobid, "resources": resources, "exclude": None},
    )


def prolog_remove(h, jobid):
    return h.rpc("job-manager.dws.prolog-remove", {"id": jobid, "variables": {}})


def epilog_remove(h, jobid):
    return h.rpc("job-manager.dws.epilog-remove", {"id": jobid})


def rabbit_jobs(h, service):
    """Three rabbit jobs held by dws-create (in DEPEND), dws-setup (its
    prolog) and dws-epilog (its epilog): ``{description: (jobid,
    resources)}``."""
    jobs = {}
    for description in ("dws-create", "dws-setup", "dws-epilog"):
        jobid = submit(h, duration=0.1, **DW)
        wait_event(h, jobid, "dependency-add", match=described("dws-create"))
        jobs[description] = (jobid, created(service, jobid))
    for description in ("dws-setup", "dws-epilog"):
        jobid, resources = jobs[description]
        update(h, jobid, resources).get()
        wait_event(h, jobid, "prolog-start", match=described("dws-setup"))
    jobid = jobs["dws-epilog"][0]
    prolog_remove(h, jobid).get()
    wait_event(h, jobid, "epilog-start", match=described("dws-epilog"), timeout=30)
    return jobs


def service_requests(h, jobs):
    """What the service sends next for each job, and a ``list``."""
    return {
        "resource-update": update(h, *jobs["dws-create"]),
        "prolog-remove": prolog_remove(h, jobs["dws-setup"][0]),
        "epilog-remove": epilog_remove(h, jobs["dws-epilog"][0]),
        "list": h.rpc("job-manager.dws.list", {}),
    }


def holds(listed):
    return {(x["id"], x["description"], x["state"]) for x in listed}


def refusal(future):
    """The error a request was answered with, or a failure if it was not
    answered in time (or succeeded)."""
    try:
        future.wait_for(ANSWERED_WITHIN)
    except OSError as exc:
        assert exc.errno != errno.ETIMEDOUT, "no answer once dws.so was removed"
        raise
    with pytest.raises(OSError) as info:
        future.get()
    return info.value.errno, info.value.strerror


def test_requests_waiting_on_recovery_are_answered_when_dws_is_removed(
    new_instance, dws
):
    inst = new_instance(
        cores=8, plugin=DWS, plugins=[(GATE, {"debug-fault": "slow-recovery"})]
    )
    h = inst.handle()
    service = dws(inst, *HANG)
    jobs = rabbit_jobs(h, service)
    before = holds(EpilogGate(h).list())

    # The new gate reads each job's eventlog 3 s late: the service's
    # requests sent now wait on epilog-gate.so's recovery.
    inst.flux("module", "reload", "job-manager")
    h = inst.handle()
    waiting = service_requests(h, jobs)
    h.rpc("job-manager.jobtap", {"remove": "dws.so"}).get()

    for method, future in waiting.items():
        assert refusal(future) == (
            errno.EAGAIN,
            f"{method}: dws was unloaded while recovering: send it again",
        ), method
    # Nothing changed: each hold is there, in its state.
    assert holds(EpilogGate(h).list()) == before

    # Sent again once dws.so is back, they take each job to its end.
    inst.flux("module", "reload", "sched-simple")
    inst.flux("module", "reload", "job-exec")
    inst.flux("jobtap", "load", DWS)
    for future in service_requests(h, jobs).values():
        future.get()
    jobid = jobs["dws-setup"][0]
    wait_event(h, jobid, "epilog-start", match=described("dws-epilog"), timeout=30)
    epilog_remove(h, jobid).get()
    jobid = jobs["dws-create"][0]
    wait_event(h, jobid, "prolog-start", match=described("dws-setup"), timeout=30)
    prolog_remove(h, jobid).get()
    wait_event(h, jobid, "epilog-start", match=described("dws-epilog"), timeout=30)
    epilog_remove(h, jobid).get()
    for jobid, _ in jobs.values():
        wait_inactive(h, jobid, timeout=30)
        events = eventlog(h, jobid)
        assert not named(events, "exception"), [(e.name, e.context) for e in events]
        assert contexts(events, "epilog-finish", "dws-epilog")[-1]["status"] == 0


# A prolog another plugin started (dws-jobtap.so before the swap): its
# prolog-remove waits on the job's eventlog, read from the KVS.

#: Rabbit jobs with the foreign prolog open: the read of the last
#: requests' eventlogs is still out when the remove that follows them is
#: handled.
FOREIGN_JOBS = 4


@pytest.fixture(scope="module")
def foreign(tmp_path_factory):
    return build_foreign_prolog(tmp_path_factory.mktemp("foreign"))


def test_prolog_removes_reading_an_eventlog_are_answered_when_dws_is_removed(
    foreign, new_instance, dws
):
    inst = new_instance(cores=8, plugin=GATE, plugins=[(foreign, {})])
    h = inst.handle()
    service = dws(inst, "--setup-hang")
    jobids = [submit(h, duration=0.1, **DW) for _ in range(FOREIGN_JOBS)]
    for jobid in jobids:
        wait_event(h, jobid, "prolog-start", match=described("dws-setup"))
    h.rpc("job-manager.jobtap", {"remove": "foreign-prolog.so"}).get()
    h.rpc("job-manager.jobtap", {"load": DWS}).get()

    # Each is handled, its read sent, before the remove right behind.
    removes = {jobid: prolog_remove(h, jobid) for jobid in jobids}
    h.rpc("job-manager.jobtap", {"remove": "dws.so"}).get()
    refused = []
    for jobid, future in removes.items():
        try:
            future.wait_for(ANSWERED_WITHIN)
        except OSError as exc:
            assert exc.errno != errno.ETIMEDOUT, "no answer once dws.so was removed"
        try:
            future.get()
        except OSError as exc:
            assert (exc.errno, exc.strerror) == (errno.EAGAIN, UNLOADED_READING)
            refused.append(jobid)
    # A refused one finished nothing; sent again, it does.
    h.rpc("job-manager.jobtap", {"load": DWS}).get()
    for jobid in refused:
        assert not named(eventlog(h, jobid), "prolog-finish", "dws-setup")
        prolog_remove(h, jobid).get()
    for jobid in jobids:
        wait_inactive(h, jobid, timeout=30)
        events = eventlog(h, jobid)
        assert len(named(events, "prolog-finish", "dws-setup")) == 1
        assert named(events, "start")
    assert service.requests("dws.setup") == []
