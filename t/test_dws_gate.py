"""A rabbit job's holds are the gate's: ``flux-epilog-gate list`` shows
``dws-create``/``dws-setup``/``dws-epilog`` with their points, the hold
log records them, and dws.so shares one gate with epilog-gate.so in
either load order, across a reload of either or both, a restart and a
SIGKILL; dws.so alone serves ``list`` for the client.  Real instances,
t/dws_service.py as the service."""

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import TIMEOUTS, discard
from dwsfake import DW, FakeDws, contexts, listed
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jobs import described, eventlog, named, submit, wait_event, wait_inactive

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.paths import plugin_path
from flux_epilog_gate.testing import Instance

GATE = plugin_path()
DWS = plugin_path("dws")
CLI = os.path.join(os.path.dirname(sys.executable), "flux-epilog-gate")
#: The plugins of each setup, in load order.
SETUPS = {
    "dws-alone": [DWS],
    "gate-then-dws": [GATE, DWS],
    "dws-then-gate": [DWS, GATE],
}


@pytest.fixture
def instance(new_instance):
    def make(paths):
        first, *rest = paths
        return new_instance(cores=8, plugin=first, plugins=[(p, {}) for p in rest])

    return make


def listed_by_column(inst):
    """As :func:`listed`, of every hold, from the client's answer by
    column, checked against the table the command prints of it."""
    by_column = EpilogGate(inst.handle()).list_columns()
    table = subprocess.run(
        [CLI, "list", "-n"], env=inst.env, capture_output=True, text=True
    )
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()]
    assert [row[1:4] for row in rows] == [
        list(values)
        for values in zip(
            by_column["description"], by_column["state"], by_column["point"]
        )
    ]
    return {
        description: (point, state)
        for description, point, state in zip(
            by_column["description"], by_column["point"], by_column["state"]
        )
    }


def logged(inst):
    """Descriptions the hold log has a hold entry for."""
    proc = inst.flux("kvs", "get", "epilog-gate.holds", check=False)
    entries = [json.loads(line) for line in proc.stdout.splitlines() if line]
    return {
        e["context"]["description"]
        for e in entries
        if e.get("name") == "epilog_gate.hold"
    }


def remove(inst, path):
    inst.flux("jobtap", "remove", os.path.basename(path))


def load(inst, path):
    inst.flux("jobtap", "load", path)


#: The service answers nothing by itself: the test sends its requests.
HANG = ("--create-hang", "--setup-hang", "--post-run-hang")

IN_DEPEND = {
    "dws-create": ("depend", "active"),
    "dws-setup": ("prolog", "pending"),
    "dws-epilog": ("epilog", "pending"),
}
IN_PROLOG = {"dws-setup": ("prolog", "active"), "dws-epilog": ("epilog", "pending")}
IN_EPILOG = {"dws-epilog": ("epilog", "active")}


def in_depend(inst, dws):
    h = inst.handle()
    service = dws(inst, *HANG)
    jobid = submit(h, duration=0.1, **DW)
    wait_event(h, jobid, "dependency-add", match=described("dws-create"))
    service.wait(lambda: service.requests("dws.create"))
    return h, service, jobid


def created(service, jobid):
    """The service's one dws.create request for the job."""
    (create,) = [r for r in service.requests("dws.create") if r["jobid"] == jobid]
    return create


def finish(h, service, jobid, stage="depend", inst=None):
    """What the service sends from ``stage`` on; the job must end clean
    (with ``inst``, ``list`` shows its holds at each step)."""
    if stage == "depend":
        create = created(service, jobid)
        h.rpc(
            "job-manager.dws.resource-update",
            {"id": jobid, "resources": create["resources"], "exclude": None},
        ).get()
        stage = "prolog"
    if stage == "prolog":
        wait_event(h, jobid, "prolog-start", match=described("dws-setup"))
        h.rpc("job-manager.dws.prolog-remove", {"id": jobid, "variables": {}}).get()
    wait_event(h, jobid, "epilog-start", match=described("dws-epilog"), timeout=30)
    if inst is not None:
        assert listed(inst, jobid) == IN_EPILOG
    h.rpc("job-manager.dws.epilog-remove", {"id": jobid}).get()
    wait_inactive(h, jobid, timeout=30)
    events = eventlog(h, jobid)
    assert not named(events, "exception"), [(e.name, e.context) for e in events]
    assert named(events, "start")
    assert contexts(events, "prolog-finish", "dws-setup")[0]["status"] == 0
    assert contexts(events, "epilog-finish", "dws-epilog")[0]["status"] == 0
    return events


@pytest.mark.parametrize("setup", SETUPS)
def test_list_shows_a_rabbit_jobs_holds_with_their_points(setup, instance, dws):
    inst = instance(SETUPS[setup])
    h, service, jobid = in_depend(inst, dws)
    assert listed(inst, jobid) == IN_DEPEND
    assert logged(inst) >= set(IN_DEPEND)
    assert listed_by_column(inst) == IN_DEPEND
    expected = advance(h, service, jobid, "prolog")
    assert listed(inst, jobid) == expected
    finish(h, service, jobid, "prolog", inst)
    assert listed(inst) == {}


def test_a_rabbit_jobs_three_holds_are_placed_at_one_time(instance, dws):
    """Placed together in the job's DEPEND callback, the three holds
    share one time (one stamp, and their records one commit)."""
    inst = instance(SETUPS["dws-alone"])
    h, service, jobid = in_depend(inst, dws)
    holds = EpilogGate(h).list(jobid)
    assert sorted(x["description"] for x in holds) == sorted(IN_DEPEND)
    assert len({x["t_hold"] for x in holds}) == 1, holds
    finish(h, service, jobid)


@pytest.mark.parametrize(
    "steps",
    [
        ("dws",),
        ("gate",),
        ("gate", "dws"),
        ("dws", "gate"),
    ],
    ids=lambda steps: "reload-" + "-".join(steps),
)
def test_reloads_of_either_plugin_keep_the_holds(steps, instance, dws):
    inst = instance(SETUPS["gate-then-dws"])
    h, service, jobid = in_depend(inst, dws)
    paths = {"gate": GATE, "dws": DWS}
    for count, name in enumerate(steps, 1):
        remove(inst, paths[name])
        if count < 2:
            assert listed(inst, jobid) == IN_DEPEND
    for name in steps:
        load(inst, paths[name])
        assert listed(inst, jobid) == IN_DEPEND
    finish(h, service, jobid)
    # The service was asked to create the workflow once.
    assert len(service.requests("dws.create")) == 1


def advance(h, service, jobid, stage):
    """Take a job held in DEPEND on to ``stage``: held in its prolog or
    its epilog (the service's requests sent by hand)."""
    if stage == "depend":
        return IN_DEPEND
    create = created(service, jobid)
    h.rpc(
        "job-manager.dws.resource-update",
        {"id": jobid, "resources": create["resources"], "exclude": None},
    ).get()
    wait_event(h, jobid, "prolog-start", match=described("dws-setup"))
    if stage == "prolog":
        return IN_PROLOG
    h.rpc("job-manager.dws.prolog-remove", {"id": jobid, "variables": {}}).get()
    wait_event(h, jobid, "epilog-start", match=described("dws-epilog"), timeout=30)
    return IN_EPILOG


#: Where a rabbit job waits, and what the service was asked before it.
STAGES = {
    "depend": ("dws.create",),
    "prolog": ("dws.create", "dws.setup"),
    "epilog": ("dws.create", "dws.setup", "dws.post_run"),
}


@pytest.mark.parametrize("kind", ["restart", "sigkill"])
@pytest.mark.parametrize("setup", ["dws-alone", "gate-then-dws"])
def test_holds_are_recovered_after_a_restart(kind, setup, instance, dws):
    """One restart for a job waiting at each stage: each is listed as
    before, ends clean once the service does its part, and the service is
    asked nothing again that it was asked before."""
    inst = instance(SETUPS[setup])
    h = inst.handle()
    service = dws(inst, *HANG)
    jobs, expected, creates = {}, {}, {}
    for stage in STAGES:
        jobid = jobs[stage] = submit(h, duration=0.1, **DW)
        wait_event(h, jobid, "dependency-add", match=described("dws-create"))
        service.wait(
            lambda j=jobid: j in [r["jobid"] for r in service.requests("dws.create")]
        )
        creates[stage] = created(service, jobid)
        expected[stage] = advance(h, service, jobid, stage)
    for stage, jobid in jobs.items():
        assert listed(inst, jobid) == expected[stage], stage
    service.stop()
    if kind == "restart":
        inst.stop()
    else:
        inst.flux("kvs", "put", "--sync", "test.checkpoint=1")
        inst.kill()
    inst.start()
    h = inst.handle()
    for stage, jobid in jobs.items():
        assert listed(inst, jobid) == expected[stage], stage
    service = dws(inst, *HANG)
    h.rpc(
        "job-manager.dws.resource-update",
        {
            "id": jobs["depend"],
            "resources": creates["depend"]["resources"],
            "exclude": None,
        },
    ).get()
    for stage, jobid in jobs.items():
        finish(h, service, jobid, "epilog" if stage == "epilog" else "prolog", inst)
    # Nothing is asked again of the service that it was asked before.
    for stage, jobid in jobs.items():
        for topic in STAGES[stage]:
            asked = [r for r in service.requests(topic) if r["jobid"] == jobid]
            assert asked == [], (stage, topic)


def test_the_gate_alone_never_sees_a_rabbit_job(instance):
    # Without dws.so a dw job is a plain job to the gate.
    inst = instance([GATE])
    h = inst.handle()
    jobid = submit(h, duration=0.1, **DW)
    wait_inactive(h, jobid)
    assert "dependency-add" not in [e.name for e in eventlog(h, jobid)]
    assert listed(inst) == {}
    with pytest.raises(OSError):
        h.rpc("job-manager.dws.list", {}).get()


@pytest.fixture(scope="module")
def both_loaded():
    """An instance with both plugins loaded from its config, for every
    example of a property (each ends with both loaded, its job ended)."""
    inst = Instance(cores=8, plugin=GATE, plugins=[(DWS, {})])
    inst.start()
    yield inst
    discard(inst)


#: One step of a site's: remove or load one of the two plugins.
STEP = st.tuples(st.sampled_from(["remove", "load"]), st.sampled_from(["gate", "dws"]))


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(steps=st.lists(STEP, min_size=1, max_size=5))
def test_any_sequence_of_loads_and_removes_keeps_the_holds(
    steps, both_loaded, tmp_path_factory
):
    # The gate outlives every load and remove: whichever plugins are
    # loaded, the job's holds are the same, and once both are back the
    # service finishes the job (and both are loaded for the next example).
    tmp = tmp_path_factory.mktemp("dws")
    inst = both_loaded
    service = FakeDws(inst, str(tmp), *HANG)
    paths = {"gate": GATE, "dws": DWS}
    loaded = {"gate", "dws"}
    try:
        h, _, jobid = in_depend(inst, lambda *a: service)
        for action, name in steps:
            if (action == "load") == (name in loaded):
                continue
            (load if action == "load" else remove)(inst, paths[name])
            loaded ^= {name}
            if loaded:
                assert listed(inst, jobid) == IN_DEPEND, (action, name)
        for name in {"gate", "dws"} - loaded:
            load(inst, paths[name])
            loaded.add(name)
        finish(h, service, jobid)
        assert len(service.requests("dws.create")) == 1
    finally:
        service.stop()
        # Whatever failed, the next example finds both loaded.
        for name in {"gate", "dws"} - loaded:
            load(inst, paths[name])


def test_epilog_timeout_fires_after_a_restart_that_hands_the_gate_over(dws):
    # dws.so loads first and begins the gate's recovery; epilog-gate.so,
    # loaded next, takes the gate over before it is complete: dws still
    # takes the epilog timeouts over once the gate's view is complete.
    # Long enough to outlast the restart, with room for a busy machine.
    timeout = TIMEOUTS["instance"]
    inst = Instance(
        cores=8,
        plugin=DWS,
        plugin_conf={"epilog-timeout": timeout},
        plugins=[(GATE, {})],
    )
    inst.start()
    try:
        h, service, jobid = in_depend(inst, dws)
        advance(h, service, jobid, "epilog")
        service.stop()
        inst.stop()
        inst.start()
        h = inst.handle()
        (start,) = named(eventlog(h, jobid), "epilog-start", "dws-epilog")
        assert time.time() < start.timestamp + timeout - 1.0, "restart took too long"
        wait_inactive(h, jobid, timeout=timeout + 30)
        events = eventlog(h, jobid)
        (exc,) = [e.context for e in named(events, "exception")]
        assert exc["type"] == "dws-epilog-timeout"
        assert contexts(events, "epilog-finish", "dws-epilog")[0]["status"] == 1
    finally:
        inst.stop()
        inst.cleanup()


def test_a_hold_active_while_dws_was_removed_is_started_at_its_load(instance, dws):
    # epilog-gate.so drove the gate on its own: the job reached its epilog
    # point and dws-epilog became active.  Loaded again, dws.so asks the
    # service for it, as it would have then.
    inst = instance(SETUPS["gate-then-dws"])
    h = inst.handle()
    service = dws(inst, *HANG)
    jobid = submit(h, duration=3, **DW)
    wait_event(h, jobid, "dependency-add", match=described("dws-create"))
    service.wait(lambda: service.requests("dws.create"))
    advance(h, service, jobid, "prolog")
    h.rpc("job-manager.dws.prolog-remove", {"id": jobid, "variables": {}}).get()
    wait_event(h, jobid, "start")
    remove(inst, DWS)
    wait_event(h, jobid, "epilog-start", match=described("dws-epilog"), timeout=30)
    assert listed(inst, jobid) == IN_EPILOG
    assert service.requests("dws.post_run") == []
    load(inst, DWS)
    service.wait(lambda: service.requests("dws.post_run"))
    assert service.requests("dws.post_run") == [{"jobid": jobid, "run_started": True}]
    h.rpc("job-manager.dws.epilog-remove", {"id": jobid}).get()
    wait_inactive(h, jobid, timeout=30)
    events = eventlog(h, jobid)
    assert contexts(events, "epilog-finish", "dws-epilog")[0]["status"] == 0
