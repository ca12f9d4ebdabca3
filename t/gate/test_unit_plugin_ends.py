"""Unit tests of how holds that a plugin of the gate (an in-process
listener, such as dws.so) drives end, whatever becomes of the plugin:

- a listener that raises on a hold's activation ends that hold (status
  1, a job exception naming the cause, a line at level error);
- the job exception a releaser raised is recorded with the end, and a
  recovery that finds neither in the eventlog raises it again rather
  than the gate's own;
- prolog holds the gate was told end with their job's abort do, whoever
  drives the gate.
No broker: the job-manager is a FakePort."""

import syslog

import pytest

from flux_epilog_gate.gate import CLEANUP, RUN, SCHED
from flux_epilog_gate.gate.holds import EPILOG, HOLD_EVENT, PROLOG, RELEASE_EVENT
from flux_epilog_gate.gate.logparse import parse_entry, raised_exception

from .unitgate import JOB, USER, ev, logged, marked, recover

#: What dws.so raises at its epilog timeout.
TIMEOUT = {"type": "dws-epilog-timeout", "severity": 0, "note": "DWS epilog timed out"}


class Failing:
    """A listener that fails on every activation (as dws.so did, decoding
    a jobspec nested deeper than Python goes)."""

    def activated(self, hold):
        raise RecursionError("maximum recursion depth exceeded")

    def exception(self, jobid, context):
        pass

    def inactive(self, jobid):
        pass


def exceptions(port, jobid=JOB):
    return [c for name, c in port.events[jobid] if name == "exception"]


def finishes(port, name, jobid=JOB):
    return [c for n, c in port.events[jobid] if n == name]


@pytest.mark.parametrize("point", [EPILOG, PROLOG])
def test_a_listener_that_fails_on_an_activation_ends_the_hold(port, gate, point):
    gate.listeners.append(Failing())
    port.add_job(JOB, SCHED, USER)
    gate.hold(JOB, "dws", point=point)
    if point == PROLOG:
        port.set_state(JOB, RUN)
        gate.on_run(JOB)
    else:
        port.set_state(JOB, CLEANUP)
        gate.on_cleanup(JOB)
    assert JOB not in gate.jobs or "dws" not in gate.jobs[JOB].holds
    (finish,) = finishes(port, f"{point}-finish")
    assert finish["status"] == 1
    (exc,) = exceptions(port)
    assert exc["note"] == (
        "epilog-gate: " + ("prolog hold" if point == PROLOG else "hold") + " dws "
        "ended: Failing failed: RecursionError: maximum recursion depth exceeded"
    )
    assert any(
        level == syslog.LOG_ERR and "dws ended with status 1" in text
        for level, text in port.logs
    )
    assert gate.release(JOB, "dws")[1] == "its activation's handler failed"


def test_a_releasers_exception_is_recorded_with_the_end(port, gate):
    port.add_job(JOB, CLEANUP, USER)
    gate.hold(JOB, "dws-epilog")
    gate.release(JOB, "dws-epilog", 1, raised=dict(TIMEOUT))
    releases = [c for t, n, c in logged(port)[JOB] if n == RELEASE_EVENT]
    assert releases == [
        {"description": "dws-epilog", "status": 1, "exception": TIMEOUT}
    ]
    # The releaser's exception only: the gate raises none.
    assert exceptions(port) == []


def _released_before_a_crash(port, gate, events_kept):
    """A job whose dws-epilog was active, then released with the timeout's
    exception; the crash kept ``events_kept`` of what followed."""
    events = [
        ev(100.0, "submit"),
        ev(101.0, HOLD_EVENT, description="dws-epilog"),
        ev(102.0, "finish"),
        marked(103.0, "epilog-start", description="dws-epilog"),
        *events_kept,
        ev(105.0, RELEASE_EVENT, description="dws-epilog", status=1, exception=TIMEOUT),
    ]
    recover(port, gate, CLEANUP, events)


def test_recovery_raises_the_recorded_exception_the_crash_lost(port, gate):
    _released_before_a_crash(port, gate, [])
    assert exceptions(port) == [TIMEOUT]
    assert [c["status"] for c in finishes(port, "epilog-finish")] == [1]


def test_recovery_raises_nothing_more_if_the_exception_was_kept(port, gate):
    kept = ev(104.0, "exception", **TIMEOUT)
    _released_before_a_crash(port, gate, [kept])
    assert exceptions(port) == []
    assert [c["status"] for c in finishes(port, "epilog-finish")] == [1]


def test_a_release_recorded_without_an_exception_gets_the_gates(port, gate):
    """As before: a release whose failure raised nothing of the releaser's."""
    events = [
        ev(101.0, HOLD_EVENT, description="bb"),
        marked(103.0, "epilog-start", description="bb"),
        ev(105.0, RELEASE_EVENT, description="bb", status=1),
    ]
    recover(port, gate, CLEANUP, events)
    (exc,) = exceptions(port)
    assert exc["note"] == "epilog-gate: hold bb released with status 1"


@pytest.mark.parametrize(
    "value",
    [None, "x", {}, {"type": "", "severity": 0, "note": ""}, {"type": "t", "note": 1}],
)
def test_a_recorded_exception_of_another_shape_is_left_out(value):
    line = (
        '{"timestamp":1.0,"name":"epilog_gate.release","context":{"id":7,'
        f'"description":"d","status":1,"exception":{_json(value)}}}}}'
    ).encode()
    jobid, (_, _, context) = parse_entry(line)
    assert jobid == 7 and context == {"description": "d", "status": 1}
    assert raised_exception(value) is None


def _json(value):
    import json

    return json.dumps(value)


@pytest.mark.parametrize("recovering", [False, True], ids=["cleanup", "recovery"])
def test_a_prolog_hold_told_to_end_at_abort_ends_with_status_1(port, gate, recovering):
    gate.end_when_aborted("dws-setup")
    if recovering:
        events = [
            ev(101.0, HOLD_EVENT, description="dws-setup", point=PROLOG),
            ev(102.0, "alloc"),
            marked(103.0, "prolog-start", description="dws-setup"),
            ev(104.0, "exception", type="cancel", severity=0),
        ]
        recover(port, gate, CLEANUP, events)
    else:
        _aborted_in_prolog(port, gate, "dws-setup")
    assert [c["status"] for c in finishes(port, "prolog-finish")] == [1]
    # The job's fatal exception is its own.
    assert exceptions(port) == []


@pytest.mark.parametrize(
    "context, recorded",
    [
        ({"type": "cancel", "severity": 0, "note": "by user"}, True),
        ({"severity": 0, "note": "no type"}, False),
        (None, False),
    ],
    ids=["fatal", "untyped", "another-event"],
)
def test_a_prolog_hold_ended_at_abort_records_the_jobs_exception(
    port, gate, context, recorded
):
    """The job's fatal exception, read from what its entry to CLEANUP
    came with, is recorded with the end (a crash that loses it has it
    raised again, as a releaser's); without one, none is."""
    gate.end_when_aborted("dws-setup")
    _aborted_in_prolog(port, gate, "dws-setup", context)
    releases = [c for t, n, c in logged(port)[JOB] if n == RELEASE_EVENT]
    expected = {"description": "dws-setup", "status": 1}
    if recorded:
        expected["exception"] = {"type": "cancel", "severity": 0, "note": "by user"}
    assert releases == [expected]
    assert exceptions(port) == []


def test_other_prolog_holds_stay_until_released(port, gate):
    gate.end_when_aborted("dws-setup")
    _aborted_in_prolog(port, gate, "bb-setup")
    assert finishes(port, "prolog-finish") == []
    assert gate.jobs[JOB].holds["bb-setup"].aborted


def test_a_hold_active_as_it_is_placed_ends_on_the_next_turn(port, gate):
    """Past the point already: the listener fails before the hold is on its
    job, which the request still answers as held."""
    gate.listeners.append(Failing())
    port.add_job(JOB, CLEANUP, USER)
    hold, created = gate.hold(JOB, "dws")
    assert created and gate.jobs[JOB].holds["dws"] is hold
    port.advance(0.0)
    assert JOB not in gate.jobs or "dws" not in gate.jobs[JOB].holds
    assert [c["status"] for c in finishes(port, "epilog-finish")] == [1]


def test_a_failed_prolog_hold_of_a_job_with_its_fatal_exception_gets_none_more(
    port, gate
):
    """Ended at its job's abort, the end lost by a crash with the
    prolog-finish but not the job's cancel: it never starts either way."""
    events = [
        ev(101.0, HOLD_EVENT, description="dws-setup", point=PROLOG),
        ev(102.0, "alloc"),
        marked(103.0, "prolog-start", description="dws-setup"),
        ev(104.0, "exception", type="cancel", severity=0),
        ev(105.0, RELEASE_EVENT, description="dws-setup", status=1),
    ]
    recover(port, gate, CLEANUP, events)
    assert [c["status"] for c in finishes(port, "prolog-finish")] == [1]
    assert exceptions(port) == []


def _aborted_in_prolog(port, gate, description, context=None):
    """A job held at its start by ``description``, entered RUN (the hold
    active), then CLEANUP (``context``: what its entry came with)."""
    port.add_job(JOB, SCHED, USER)
    gate.hold(JOB, description, point=PROLOG)
    port.set_state(JOB, RUN)
    gate.on_run(JOB)
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB, context)
