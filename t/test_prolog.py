"""Prolog holds: a hold that keeps a job's start back, proved by eventlogs
of a real job-manager."""

import errno
import os

import flux.job
import pytest
from conftest import discard
from jobs import (
    described,
    eventlog,
    named,
    names,
    query,
    set_urgency,
    settle,
    submit,
    wait_event,
    wait_inactive,
    wait_until,
)

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holdlog import MARKER

pytestmark = pytest.mark.usefixtures("no_leftover_holds")

PROLOG = "prolog"


def prolog_held(handle, gate, *descriptions, duration=0.1, timeout=None):
    """A job whose start is held by active prolog holds ``descriptions``."""
    jobid = submit(handle, duration=duration, urgency=0)
    for description in descriptions:
        gate.hold(jobid, description, timeout=timeout, point=PROLOG)
    set_urgency(handle, jobid, 16)
    for description in descriptions:
        wait_event(handle, jobid, "prolog-start", match=described(description))
    return jobid


def next_answer(future, timeout=10.0):
    answer = future.wait_for(timeout).get()
    future.reset()
    return answer


# Activation and release


def test_prolog_hold_is_pending_until_the_job_enters_run(handle, gate):
    jobid = submit(handle, duration=0.1, urgency=0)
    answer = gate.hold(jobid, "setup", point=PROLOG)
    assert answer["state"] == "pending"
    (entry,) = gate.list(jobid)
    assert entry["point"] == PROLOG and entry["state"] == "pending"
    assert "prolog-start" not in names(eventlog(handle, jobid))
    gate.release(jobid, "setup")


def test_prolog_hold_keeps_the_start_back_until_released(handle, gate):
    jobid = prolog_held(handle, gate, "setup")
    (start,) = named(settle(handle, jobid, "start"), "prolog-start")
    assert start.context[MARKER] is True
    assert "start" not in names(eventlog(handle, jobid))
    events = names(eventlog(handle, jobid))
    assert events.index("alloc") < events.index("prolog-start")
    (entry,) = gate.list(jobid)
    assert entry["state"] == "active" and entry["point"] == PROLOG
    assert gate.release(jobid, "setup") == {"released": True}
    wait_event(handle, jobid, "start")
    wait_inactive(handle, jobid)
    events = eventlog(handle, jobid)
    (finish,) = named(events, "prolog-finish")
    assert finish.context == {"description": "setup", "status": 0, MARKER: True}
    order = names(events)
    assert order.index("prolog-finish") < order.index("start")
    assert "exception" not in order


def test_job_starts_only_when_its_last_prolog_hold_is_released(handle, gate):
    jobid = prolog_held(handle, gate, "one", "two")
    gate.release(jobid, "one")
    wait_event(handle, jobid, "prolog-finish", match=described("one"))
    assert "start" not in names(settle(handle, jobid, "start"))
    gate.release(jobid, "two")
    wait_event(handle, jobid, "start")
    wait_inactive(handle, jobid)


def test_prolog_hold_added_while_the_start_is_held_is_active_at_once(handle, gate):
    jobid = prolog_held(handle, gate, "first")
    assert gate.hold(jobid, "second", point=PROLOG)["state"] == "active"
    wait_event(handle, jobid, "prolog-start", match=described("second"))
    gate.release(jobid, "first")
    assert "start" not in names(settle(handle, jobid, "start"))
    gate.release(jobid, "second")
    wait_event(handle, jobid, "start")
    wait_inactive(handle, jobid)


def test_prolog_and_epilog_holds_of_one_job(handle, gate):
    jobid = submit(handle, duration=0.1, urgency=0)
    gate.hold(jobid, "bb-setup", point=PROLOG)
    gate.hold(jobid, "bb")
    set_urgency(handle, jobid, 16)
    wait_event(handle, jobid, "prolog-start", match=described("bb-setup"))
    gate.release(jobid, "bb-setup")
    wait_event(handle, jobid, "epilog-start", match=described("bb"))
    events = names(settle(handle, jobid, "clean"))
    assert events.index("start") < events.index("finish")
    assert events.index("finish") < events.index("epilog-start")
    assert "clean" not in events
    gate.release(jobid, "bb")
    wait_inactive(handle, jobid)


# Refused: too late


def test_prolog_hold_on_a_started_job_is_refused(handle, gate):
    jobid = submit(handle, duration=60)
    wait_event(handle, jobid, "start")
    with pytest.raises(OSError) as info:
        gate.hold(jobid, "late", point=PROLOG)
    assert info.value.errno == errno.EINVAL
    assert "too late" in info.value.strerror and "RUN" in info.value.strerror
    assert gate.list(jobid) == []
    flux.job.cancel(handle, jobid)
    wait_inactive(handle, jobid)
    assert "prolog-start" not in names(eventlog(handle, jobid))


def test_prolog_hold_on_a_job_in_cleanup_is_refused(handle, gate):
    jobid = submit(handle, urgency=0)
    gate.hold(jobid, "bb")
    flux.job.cancel(handle, jobid)
    wait_event(handle, jobid, "epilog-start")
    with pytest.raises(OSError) as info:
        gate.hold(jobid, "late", point=PROLOG)
    assert info.value.errno == errno.EINVAL
    assert "CLEANUP" in info.value.strerror and "never start" in info.value.strerror
    assert [h["description"] for h in gate.list(jobid)] == ["bb"]
    gate.release(jobid, "bb")
    wait_inactive(handle, jobid)
    assert "prolog-start" not in names(eventlog(handle, jobid))


def test_prolog_hold_on_an_inactive_job_is_refused(handle, gate):
    jobid = submit(handle, duration=0.01)
    wait_inactive(handle, jobid)
    with pytest.raises(OSError) as info:
        gate.hold(jobid, "late", point=PROLOG)
    assert info.value.errno == errno.ENOENT


def test_same_description_at_the_other_point_is_refused(handle, gate):
    jobid = submit(handle, urgency=0)
    gate.hold(jobid, "bb")
    with pytest.raises(OSError) as info:
        gate.hold(jobid, "bb", point=PROLOG)
    assert info.value.errno == errno.EEXIST
    assert "epilog point" in info.value.strerror
    (entry,) = gate.list(jobid)
    assert entry["point"] == "epilog"
    flux.job.cancel(handle, jobid)
    gate.release(jobid, "bb")
    wait_inactive(handle, jobid)


@pytest.mark.parametrize(
    "point,errnum",
    [
        ("setup", errno.EINVAL),
        ("", errno.EINVAL),
        (1, errno.EPROTO),
        ([], errno.EPROTO),
    ],
)
def test_bad_point_is_refused_and_changes_nothing(handle, gate, point, errnum):
    jobid = submit(handle, urgency=0)
    with pytest.raises(OSError) as info:
        handle.rpc(
            "job-manager.epilog-gate.hold",
            {"id": int(jobid), "description": "bb", "point": point},
        ).get()
    assert info.value.errno == errnum
    assert "point" in info.value.strerror
    assert gate.list(jobid) == []
    flux.job.cancel(handle, jobid)
    wait_inactive(handle, jobid)


# Outcomes


def test_failed_prolog_hold_raises_a_fatal_exception_and_the_job_never_starts(
    handle, gate
):
    jobid = submit(handle, duration=0.1, urgency=0)
    gate.hold(jobid, "setup", point=PROLOG)
    gate.hold(jobid, "bb")
    set_urgency(handle, jobid, 16)
    wait_event(handle, jobid, "prolog-start", match=described("setup"))
    gate.release(jobid, "setup", status=3)
    wait_event(handle, jobid, "epilog-start", match=described("bb"))
    events = settle(handle, jobid, "clean")
    (exc,) = named(events, "exception")
    assert exc.context["severity"] == 0 and exc.context["type"] == "prolog"
    assert "setup" in exc.context["note"] and "status 3" in exc.context["note"]
    order = names(events)
    assert order.index("exception") < order.index("prolog-finish")
    assert "start" not in order and "clean" not in order
    (finish,) = named(events, "prolog-finish")
    assert finish.context["status"] == 3
    gate.release(jobid, "bb")
    wait_inactive(handle, jobid)
    assert "start" not in names(eventlog(handle, jobid))


def test_prolog_hold_timeout_fails_the_job(handle, gate):
    jobid = prolog_held(handle, gate, "setup", timeout=0.5)
    finish = wait_event(handle, jobid, "prolog-finish", match=described("setup"))
    assert finish.context["status"] == 124
    wait_inactive(handle, jobid)
    events = eventlog(handle, jobid)
    (exc,) = named(events, "exception")
    assert exc.context["severity"] == 0 and "timed out" in exc.context["note"]
    assert "start" not in names(events)


def test_cancel_while_prolog_active_keeps_holding_until_release(handle, gate):
    jobid = submit(handle, duration=0.1, urgency=0)
    gate.hold(jobid, "setup", point=PROLOG)
    gate.hold(jobid, "bb")
    set_urgency(handle, jobid, 16)
    wait_event(handle, jobid, "prolog-start", match=described("setup"))
    future = EpilogGate(handle).watch_async(points=[PROLOG])
    first = next_answer(future)
    assert (first["id"], first["point"], "aborted" in first) == (jobid, PROLOG, False)
    flux.job.cancel(handle, jobid)
    aborted = next_answer(future)
    assert aborted["id"] == jobid and aborted["description"] == "setup"
    assert aborted["aborted"] is True and aborted["ran"] is False
    # The epilog hold of a job that never started is active at once.
    wait_event(handle, jobid, "epilog-start", match=described("bb"))
    events = names(settle(handle, jobid, "clean"))
    assert "clean" not in events and "start" not in events
    assert {h["description"]: h["state"] for h in gate.list(jobid)} == {
        "setup": "active",
        "bb": "active",
    }
    gate.release(jobid, "setup")
    wait_event(handle, jobid, "prolog-finish", match=described("setup"))
    assert "clean" not in names(settle(handle, jobid, "clean"))
    gate.release(jobid, "bb")
    wait_inactive(handle, jobid)
    assert "start" not in names(eventlog(handle, jobid))


def test_watch_first_sends_an_aborted_prolog_hold_as_aborted(handle, gate):
    jobid = prolog_held(handle, gate, "setup")
    flux.job.cancel(handle, jobid)
    wait_event(handle, jobid, "exception")
    future = EpilogGate(handle).watch_async(["setup"])
    answer = next_answer(future)
    assert answer["id"] == jobid and answer["aborted"] is True
    gate.release(jobid, "setup")
    wait_inactive(handle, jobid)


def test_cancel_while_prolog_pending_drops_it_with_no_events(handle, gate):
    jobid = submit(handle, urgency=0)
    gate.hold(jobid, "setup", point=PROLOG)
    flux.job.cancel(handle, jobid)
    wait_inactive(handle, jobid)
    events = names(eventlog(handle, jobid))
    assert not [e for e in events if e.startswith(("prolog-", "epilog-"))]
    answer = gate.release(jobid, "setup")
    assert answer["released"] is False


def test_a_pending_prolog_hold_dropped_at_a_cancel_is_recorded_cancelled(
    instance, handle, gate
):
    """Once the job-manager has sent the cancel to the KVS (the gate waits
    its event batch out), the hold log says the hold is cancelled: until
    then a crash that undoes the cancel finds the hold again."""
    jobid = submit(handle, urgency=0)
    gate.hold(jobid, "setup", point=PROLOG)
    flux.job.cancel(handle, jobid)
    wait_inactive(handle, jobid)

    def cancelled():
        log = instance.flux("kvs", "get", "--raw", "epilog-gate.holds").stdout
        return any(
            '"epilog_gate.cancel"' in line and f'"id":{int(jobid)},' in line
            for line in log.splitlines()
        )

    wait_until(cancelled)


# Watch, list, query


def test_watch_filters_by_point_and_says_which(handle, gate):
    future = EpilogGate(handle).watch_async(["w-pro", "w-epi"], points=[PROLOG])
    jobid = submit(handle, duration=0.1, urgency=0)
    gate.hold(jobid, "w-pro", point=PROLOG)
    gate.hold(jobid, "w-epi")
    set_urgency(handle, jobid, 16)
    answer = next_answer(future)
    assert answer == {
        "id": jobid,
        "description": "w-pro",
        "userid": os.getuid(),
        "ran": False,
        "point": PROLOG,
    }
    gate.release(jobid, "w-pro")
    wait_event(handle, jobid, "epilog-start", match=described("w-epi"))
    everything = EpilogGate(handle).watch_async(["w-epi"])
    assert next_answer(everything)["point"] == "epilog"
    with pytest.raises(TimeoutError):
        future.wait_for(0.5)
    gate.release(jobid, "w-epi")
    wait_inactive(handle, jobid)


def test_watch_refuses_a_bad_point(handle):
    future = handle.rpc(
        "job-manager.epilog-gate.watch",
        {"points": ["later"]},
        flags=flux.constants.FLUX_RPC_STREAMING,
    )
    with pytest.raises(OSError) as info:
        future.get()
    assert info.value.errno == errno.EINVAL and "later" in info.value.strerror


def test_jobtap_query_shows_the_point(instance, handle, gate):
    jobid = submit(handle, urgency=0)
    gate.hold(jobid, "q-setup", point=PROLOG)
    holds = [h for h in query(instance)["holds"] if h["id"] == jobid]
    assert [(h["description"], h["point"]) for h in holds] == [("q-setup", PROLOG)]
    flux.job.cancel(handle, jobid)
    wait_inactive(handle, jobid)


# Rules

PROLOG_RULES = """
[[epilog-gate.rules]]
attribute = "system.bb"
description = "bb-setup"
point = "prolog"

[[epilog-gate.rules]]
attribute = "system.bb"
description = "bb"
"""


@pytest.fixture(scope="module")
def ruled(plugin):
    """An instance of the module's with PROLOG_RULES (each test uses jobs
    of its own; a refused reload leaves the rules in force)."""
    from flux_epilog_gate.testing import Instance

    inst = Instance(cores=64, plugin=plugin, config=PROLOG_RULES)
    inst.start()
    yield inst
    discard(inst)


def test_rules_may_declare_prolog_holds(ruled):
    inst = ruled
    handle = inst.handle()
    gate = EpilogGate(handle)
    jobid = submit(handle, duration=0.1, **{"system.bb": "1g"})
    wait_event(handle, jobid, "prolog-start", match=described("bb-setup"))
    assert "start" not in names(settle(handle, jobid, "start"))
    assert {h["description"]: h["point"] for h in gate.list(jobid)} == {
        "bb-setup": PROLOG,
        "bb": "epilog",
    }
    rule, _ = query(inst)["config"]["rules"]
    assert rule["point"] == PROLOG
    gate.release(jobid, "bb-setup")
    wait_event(handle, jobid, "epilog-start", match=described("bb"))
    gate.release(jobid, "bb")
    wait_inactive(handle, jobid)
    assert names(eventlog(handle, jobid)).index("prolog-finish") < names(
        eventlog(handle, jobid)
    ).index("start")


def test_rule_with_a_bad_point_fails_the_config_reload(ruled):
    inst = ruled
    before = query(inst)["config"]["rules"]
    inst.config = PROLOG_RULES.replace('point = "prolog"', 'point = "later"')
    inst.write_config()
    try:
        result = inst.flux("config", "reload", check=False)
    finally:
        inst.config = PROLOG_RULES
        inst.write_config()
    assert result.returncode != 0
    assert "rules[0].point" in result.stderr
    assert query(inst)["config"]["rules"] == before


# The example service


def test_example_service_sets_up_before_start_and_tears_down_before_clean(
    ruled, tmp_path
):
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    inst = ruled
    handle = inst.handle()
    service = subprocess.Popen(
        [
            sys.executable,
            os.path.join(repo, "examples", "bb_service.py"),
            "--root",
            str(tmp_path),
            "--count",
            "1",
        ],
        env=inst.env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert service.stdout.readline().strip() == "bb: ready"
        jobid = submit(handle, duration=0.2, **{"system.bb": 1})
        wait_inactive(handle, jobid)
        service.wait(timeout=20)
        output = service.stdout.read()
    finally:
        service.kill()
    assert f"bb: created {tmp_path}/{jobid.f58}" in output
    events = eventlog(handle, jobid)
    (setup,) = named(events, "prolog-finish", "bb-setup")
    (teardown,) = named(events, "epilog-finish", "bb")
    assert setup.context["status"] == 0 and teardown.context["status"] == 0
    order = names(events)
    assert order.index("prolog-start") < order.index("prolog-finish")
    assert order.index("prolog-finish") < order.index("start")
    assert order.index("epilog-finish") < order.index("clean")
    assert list(tmp_path.iterdir()) == []


# Alongside perilog.so's own prolog

PERILOG = """
[job-manager]
plugins = [ {{ load = "perilog.so" }}, {{ load = "{plugin}" }} ]

[job-manager.prolog]
command = [ "sh", "-c", "sleep {seconds}" ]
"""


@pytest.mark.parametrize("seconds", [0, 2])
def test_job_starts_after_both_perilog_prolog_and_prolog_hold(
    new_instance, plugin, seconds
):
    """The job-manager counts prolog actions without names: whichever of
    perilog.so's prolog and the gate's prolog hold finishes last starts
    the job, and neither is taken for the other."""
    inst = new_instance(
        plugin=None, config=PERILOG.format(plugin=plugin, seconds=seconds)
    )
    handle = inst.handle()
    gate = EpilogGate(handle)
    jobid = submit(handle, duration=0.1, urgency=0)
    gate.hold(jobid, "setup", point=PROLOG)
    set_urgency(handle, jobid, 16)
    wait_event(handle, jobid, "prolog-start", match=described("setup"))
    if seconds == 0:
        # perilog.so's prolog is done; the gate's still holds the start.
        perilog = described("job-manager.prolog")
        wait_event(handle, jobid, "prolog-finish", match=perilog)
        assert "start" not in names(settle(handle, jobid, "start"))
        gate.release(jobid, "setup")
    else:
        # The gate's is released first; perilog.so's still holds it.
        gate.release(jobid, "setup")
        wait_event(handle, jobid, "prolog-finish", match=described("setup"))
        events = settle(handle, jobid, "start")
        assert not named(events, "prolog-finish", "job-manager.prolog")
        assert "start" not in names(events)
    wait_event(handle, jobid, "start", timeout=30)
    wait_inactive(handle, jobid, timeout=30)
    order = names(eventlog(handle, jobid))
    assert order.count("prolog-start") == 2 and order.count("prolog-finish") == 2
    last = max(i for i, name in enumerate(order) if name == "prolog-finish")
    assert last < order.index("start")
    assert "exception" not in order
    assert gate.list() == []
