"""The DWS service's requests to the dws plugin, when they are malformed
or come at the wrong time, on real instances with t/dws_service.py:

- a ``resource-update`` whose ``resources`` or ``exclude`` the scheduler
  or job-list could not read is refused (EPROTO, naming the key), fails
  the job as flux-coral2's plugin fails it for a malformed update, and
  writes nothing to its jobspec; the instance keeps scheduling;
- a ``prolog-remove`` before the job's dws-setup prolog started, or an
  ``epilog-remove`` before its dws-epilog started, is refused (EINVAL)
  and changes nothing: the hold stays pending, the service is still
  asked for setup or post_run at the right time."""

import errno
import json
import signal

import flux.job
import pytest
from dwsfake import DW, SLOT, FakeDws, contexts, listed
from flux.job import JobspecV1
from hypothesis import given
from hypothesis import strategies as st
from hypothesis_settings import bounded
from jobs import (
    described,
    eventlog,
    named,
    names,
    submit,
    wait_event,
    wait_inactive,
    wait_until,
)

from flux_epilog_gate.testing import Instance


def in_depend(inst, service):
    """A rabbit job held in DEPEND by dws-create (the service placing its
    storage never answers: ``--create-hang``)."""
    h = inst.handle()
    jobid = submit(h, duration=0.1, **DW)
    wait_event(h, jobid, "dependency-add", match=described("dws-create"))
    service.wait(lambda: jobid in [r["jobid"] for r in service.requests("dws.create")])
    return jobid


def refused(h, topic, payload):
    """The error (OSError) the plugin answers ``payload`` with."""
    with pytest.raises(OSError) as info:
        h.rpc(f"job-manager.dws.{topic}", payload).get()
    return info.value


def still_schedules(h):
    """The scheduler is up: a plain job runs."""
    jobid = submit(h, duration=0.01)
    wait_event(h, jobid, "finish", match=lambda c: c["status"] == 0)


MALFORMED = [
    ({"resources": SLOT, "exclude": 5}, "exclude: a constraint must be an object"),
    ({"resources": 5, "exclude": None}, "resources: must be an array"),
    ({"resources": "garbage", "exclude": None}, "resources: must be an array"),
    ({"resources": [], "exclude": None}, "resources: must not be empty"),
    ({"resources": [{"type": "slot"}], "exclude": None}, "resources[0].count"),
    ({"resources": SLOT, "exclude": {}}, "exclude: a constraint must have exactly"),
    ({"resources": SLOT, "exclude": {"and": 5}}, "exclude.and: must be an array"),
    ({"resources": SLOT, "exclude": {"nope": []}}, "unknown constraint operator"),
    ({"resources": SLOT, "exclude": {"not": [{"ranks": ["x"]}]}}, "ranks[0]"),
]


@pytest.mark.parametrize("update, problem", MALFORMED)
def test_malformed_resource_update_is_refused_and_writes_no_jobspec(
    rabbit_instance, dws, update, problem
):
    inst = rabbit_instance()
    h = inst.handle()
    service = dws(inst, "--create-hang")
    jobid = in_depend(inst, service)
    error = refused(h, "resource-update", {"id": jobid, **update})
    assert error.errno == errno.EPROTO
    assert "received malformed dws.resource-update RPC" in error.strerror
    assert problem in error.strerror
    exc = wait_event(h, jobid, "exception")
    assert exc.context["type"] == "exception" and exc.context["severity"] == 0
    assert problem in exc.context["note"]
    wait_inactive(h, jobid)
    assert "jobspec-update" not in names(eventlog(h, jobid))
    still_schedules(h)


def test_constraints_that_cannot_be_combined_are_refused_and_not_written(
    rabbit_instance, dws
):
    # The job's own constraints have two operators: no scheduler can read
    # them joined to the exclusion.
    inst = rabbit_instance()
    h = inst.handle()
    service = dws(inst, "--create-hang")
    own = {"properties": ["^a"], "ranks": ["0-7"]}
    jobid = submit(h, duration=0.1, **DW, **{"system.constraints": own})
    wait_event(h, jobid, "dependency-add", match=described("dws-create"))
    service.wait(lambda: service.requests("dws.create"))
    error = refused(
        h,
        "resource-update",
        {"id": jobid, "resources": SLOT, "exclude": {"properties": ["^bad"]}},
    )
    assert error.errno == errno.EINVAL
    assert "Could not generate new constraints" in error.strerror
    assert "attributes.system.constraints.and[0]" in error.strerror
    exc = wait_event(h, jobid, "exception")
    assert exc.context["type"] == "dws"
    wait_inactive(h, jobid)
    assert "jobspec-update" not in names(eventlog(h, jobid))
    still_schedules(h)


def test_a_valid_exclude_of_every_operator_is_written_and_the_job_runs(
    rabbit_instance, dws
):
    exclude = {
        "and": [
            {"not": [{"properties": ["bad", "^good"]}]},
            {"or": [{"hostlist": ["nowhere[0-3]"]}, {"ranks": ["0-7"]}]},
        ]
    }
    inst = rabbit_instance()
    h = inst.handle()
    dws(inst, "--exclude", json.dumps(exclude))
    jobid = submit(h, duration=0.1, **DW)
    update = wait_event(h, jobid, "jobspec-update")
    assert update.context["attributes.system.constraints"] == exclude
    wait_event(h, jobid, "finish", match=lambda c: c["status"] == 0)
    wait_inactive(h, jobid)


#: Generated malformed updates: one of resources/exclude of a wrong shape.
WRONG = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=5)
    | st.lists(st.integers() | st.text(max_size=3), max_size=2)
    | st.dictionaries(st.text(max_size=5), st.integers(), max_size=2)
)
#: Those of them that are true (an exclude that is false is none), drawn
#: as such: ``WRONG.filter(bool)`` trips an assertion of hypothesis's
#: own on some seeds.
WRONG_TRUE = (
    st.just(True)
    | st.integers().filter(bool)
    | st.text(min_size=1, max_size=5)
    | st.lists(st.integers() | st.text(max_size=3), min_size=1, max_size=2)
    | st.dictionaries(st.text(max_size=5), st.integers(), min_size=1, max_size=2)
)
UPDATES = st.one_of(
    st.builds(lambda r: {"resources": r, "exclude": None}, WRONG),
    st.builds(lambda e: {"resources": SLOT, "exclude": e}, WRONG_TRUE),
)


@pytest.fixture(scope="module")
def depend_instance(dws_so):
    with Instance(cores=8, plugin=dws_so) as inst:
        yield inst


@bounded(12)
@given(update=UPDATES)
def test_any_malformed_update_is_refused_with_its_key_and_writes_nothing(
    depend_instance, tmp_path_factory, update
):
    inst = depend_instance
    h = inst.handle()
    service = FakeDws(inst, str(tmp_path_factory.mktemp("d")), "--create-hang")
    try:
        jobid = in_depend(inst, service)
        error = refused(h, "resource-update", {"id": jobid, **update})
        assert error.errno == errno.EPROTO
        key = "resources" if update["exclude"] is None else "exclude"
        assert f"RPC: {key}" in error.strerror, error.strerror
        wait_inactive(h, jobid)
        assert "jobspec-update" not in names(eventlog(h, jobid))
    finally:
        service.stop()


# Prolog and epilog requests before their time


@pytest.mark.parametrize("state", ["depend", "sched"])
def test_prolog_remove_before_the_prolog_is_refused_and_keeps_the_hold(
    rabbit_instance, dws, state
):
    inst = rabbit_instance()
    h = inst.handle()
    service = dws(inst, "--create-hang")
    jobid = in_depend(inst, service)
    if state == "sched":
        inst.flux("queue", "stop", "--all")
        (create,) = service.requests("dws.create")
        h.rpc(
            "job-manager.dws.resource-update",
            {"id": jobid, "resources": create["resources"], "exclude": None},
        ).get()
        wait_event(h, jobid, "depend")
    error = refused(h, "prolog-remove", {"id": jobid, "variables": {"X": "early"}})
    assert error.errno == errno.EINVAL
    assert "dws-setup" in error.strerror and "not active" in error.strerror
    assert listed(inst, jobid)["dws-setup"] == ("prolog", "pending")
    events = eventlog(h, jobid)
    assert "dws_environment" not in names(events) and "exception" not in names(events)
    # The job goes on as if the early request had not come.
    if state == "depend":
        (create,) = service.requests("dws.create")
        h.rpc(
            "job-manager.dws.resource-update",
            {"id": jobid, "resources": create["resources"], "exclude": None},
        ).get()
    else:
        inst.flux("queue", "start", "--all")
    wait_inactive(h, jobid)
    events = eventlog(h, jobid)
    assert [r["jobid"] for r in service.requests("dws.setup")] == [jobid]
    assert [c["status"] for c in contexts(events, "prolog-finish", "dws-setup")] == [0]
    (environment,) = named(events, "dws_environment")
    assert environment.context == {"variables": {"DW_JOB_X": "/mnt/x"}}
    assert names(events).index("prolog-finish") < names(events).index("start")


def stubborn(h, ready):
    """A rabbit job whose process ignores SIGTERM (it creates ``ready``
    once it does) and outlives its cancel until it is killed: the job is
    in CLEANUP short of its epilog point."""
    script = f"trap '' TERM; touch {ready}; sleep 300"
    spec = JobspecV1.from_command(["sh", "-c", script])
    for key, value in DW.items():
        spec.setattr(key, value)
    return flux.job.submit(h, spec)


#: The job shell is killed a minute after a cancel, not job-exec's 5 s:
#: the test decides when the job's process ends.
SLOW_KILL = """
[exec]
kill-timeout = "60s"
"""


def test_epilog_remove_before_the_epilog_is_refused_and_keeps_the_hold(
    new_instance, dws_so, dws, tmp_path
):
    inst = new_instance(cores=8, plugin=dws_so, config=SLOW_KILL)
    h = inst.handle()
    service = dws(inst)
    ready = tmp_path / "ready"
    jobid = stubborn(h, ready)
    wait_until(ready.exists)
    flux.job.cancel(h, jobid)
    wait_event(h, jobid, "exception")
    events = eventlog(h, jobid)
    assert "finish" not in names(events), "the job ended before the test"
    error = refused(h, "epilog-remove", {"id": jobid})
    assert error.errno == errno.EINVAL
    assert "dws-epilog" in error.strerror and "not active" in error.strerror
    assert listed(inst, jobid)["dws-epilog"] == ("epilog", "pending")
    assert service.requests("dws.post_run") == []
    flux.job.kill(h, jobid, signal.SIGKILL)
    wait_inactive(h, jobid)
    events = eventlog(h, jobid)
    assert names(events).index("finish") < names(events).index("epilog-start")
    assert [c["status"] for c in contexts(events, "epilog-finish", "dws-epilog")] == [0]
    assert service.requests("dws.post_run") == [{"jobid": jobid, "run_started": True}]
