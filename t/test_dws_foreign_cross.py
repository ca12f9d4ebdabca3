"""A ``prolog-remove`` sent several times for a ``dws-setup`` prolog that
another plugin started (as flux-coral2's dws-jobtap.so does before the
swap to dws.so) finishes it once.

dws.so tells such a prolog open from the job's eventlog, read from the
KVS, which shows a finish only once it is committed: requests whose
reads crossed each finished it, and the job-manager, which counts a
job's open prolog actions and not their names, took the second finish
off another action's count: the job started while a prolog hold of the
gate still kept it back.  A stand-in for dws-jobtap.so
(t/data/foreignprolog.py) starts the prolog, on a real instance."""

import pytest
from dwsfake import DW, FakeDws, build_foreign_prolog
from jobs import (
    described,
    eventlog,
    named,
    set_urgency,
    settle,
    submit,
    wait_event,
)

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.paths import plugin_path
from flux_epilog_gate.testing import Instance


@pytest.fixture(scope="module")
def foreign(tmp_path_factory):
    """foreign-prolog.so, built on the jobtap runtime."""
    return build_foreign_prolog(tmp_path_factory.mktemp("foreign"))


@pytest.fixture(scope="module")
def swapped(foreign, tmp_path_factory):
    """An instance whose rabbit jobs ``jobs`` are in RUN with the foreign
    ``dws-setup`` prolog open and the gate's prolog hold ``other``
    active, once dws.so replaced the foreign plugin."""
    with Instance(cores=8, plugin=plugin_path(), plugins=[(foreign, {})]) as inst:
        service = FakeDws(inst, str(tmp_path_factory.mktemp("dws")), "--setup-hang")
        h = inst.handle()
        gate = EpilogGate(h)
        jobs = [submit(h, duration=0.1, urgency=0, **DW) for _ in range(2)]
        for jobid in jobs:
            gate.hold(jobid, "other", point="prolog")
            set_urgency(h, jobid, 16)
            wait_event(h, jobid, "prolog-start", match=described("dws-setup"))
            wait_event(h, jobid, "prolog-start", match=described("other"))
        h.rpc("job-manager.jobtap", {"remove": "foreign-prolog.so"}).get()
        h.rpc("job-manager.jobtap", {"load": plugin_path("dws")}).get()
        yield inst, h, gate, jobs
        service.stop()


def prolog_remove(h, jobid):
    return h.rpc("job-manager.dws.prolog-remove", {"id": jobid, "variables": {}})


def answers(futures):
    """Each future's answer, or its error's errno."""
    got = []
    for future in futures:
        try:
            got.append(future.get())
        except OSError as exc:
            got.append(exc.errno)
    return got


def finished_once_and_still_held(h, gate, jobid):
    finish = wait_event(h, jobid, "prolog-finish", match=described("dws-setup"))
    # A second finish, and the start it let through, would follow at once.
    events = settle(h, jobid, "start", since=finish.timestamp)
    assert len(named(events, "prolog-finish", "dws-setup")) == 1
    assert len(named(events, "dws_environment")) == 1
    assert not named(events, "start")
    assert [(x["description"], x["state"]) for x in gate.list(jobid)] == [
        ("other", "active")
    ]
    # The job waits on the gate's hold alone.
    gate.release(jobid, "other")
    wait_event(h, jobid, "start")


def test_crossing_requests_finish_a_foreign_prolog_once(swapped):
    inst, h, gate, jobs = swapped
    jobid = jobs[0]
    futures = [prolog_remove(h, jobid) for _ in range(3)]
    assert answers(futures) == [None] * 3
    finished_once_and_still_held(h, gate, jobid)


def test_a_request_sent_again_finishes_a_foreign_prolog_once(swapped):
    inst, h, gate, jobs = swapped
    jobid = jobs[1]
    for _ in range(3):
        assert prolog_remove(h, jobid).get() is None
    finished_once_and_still_held(h, gate, jobid)
    # Once the job started, a late request changes nothing either.
    assert prolog_remove(h, jobid).get() is None
    assert len(named(eventlog(h, jobid), "prolog-finish", "dws-setup")) == 1
