"""Unit tests of dependency holds (flux_epilog_gate.gate.depend), no broker:
the job-manager is a FakePort driven by each test."""

import errno

import pytest

from flux_epilog_gate.errors import GateError
from flux_epilog_gate.gate import CLEANUP, DEPEND, NEW, PRIORITY, RUN, SCHED, Gate
from flux_epilog_gate.gate.config import Config
from flux_epilog_gate.gate.depend import BATCH_WAIT
from flux_epilog_gate.gate.holdlog import KEY, MARKER
from flux_epilog_gate.gate.holds import ACTIVE, HOLD_EVENT, RELEASE_EVENT
from flux_epilog_gate.gate.shutdown import BROKER_CLEANUP, BROKER_RUN

from .unitgate import JOB, USER, ev, logged, marked, recover

POINT = "depend"


def depending(port, gate, *descriptions, timeout=None, state=DEPEND):
    """A job in DEPEND with dependency holds ``descriptions``."""
    port.add_job(JOB, state, USER)
    for description in descriptions:
        gate.hold(JOB, description, timeout, POINT)
    return JOB


def cancel(port, gate):
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)


@pytest.mark.parametrize("state", [NEW, DEPEND])
def test_hold_posts_a_marked_dependency_add_at_once(port, gate, state):
    depending(port, gate, "create", timeout=30.0, state=state)
    assert port.posted_by_gate(JOB, "dependency-add") == [
        {"description": "create", MARKER: True, "timeout": 30.0}
    ]
    (hold,) = gate.list(JOB)
    assert (hold["state"], hold["point"], hold["t_start"]) == (
        ACTIVE,
        POINT,
        port.clock,
    )
    assert port.dependencies_open(JOB) == ["create"]


@pytest.mark.parametrize("state", [PRIORITY, SCHED, RUN, CLEANUP])
def test_hold_past_depend_is_refused_and_changes_nothing(port, gate, state):
    port.add_job(JOB, state, USER)
    with pytest.raises(GateError) as info:
        gate.hold(JOB, "create", None, POINT)
    assert info.value.errnum == errno.EINVAL
    assert "too late for a dependency hold" in info.value.message
    assert state.name in info.value.message
    assert port.events[JOB] == [] and JOB not in port.tracked
    assert gate.list() == [] and port.commits == []


def test_record_waits_for_the_job_managers_event_batch(port, gate):
    answers = []
    port.add_job(JOB, DEPEND, USER)
    gate.hold(JOB, "create", None, POINT, done=lambda h, e: answers.append(e))
    assert port.commits == [] and answers == []
    port.advance(BATCH_WAIT)
    assert answers == [None]
    assert logged(port)[JOB][0][1] == HOLD_EVENT
    assert logged(port)[JOB][0][2]["point"] == POINT


def test_release_before_the_record_records_the_hold_first(port, gate):
    depending(port, gate, "create")
    assert gate.release(JOB, "create") == (True, None)
    assert [entry[1] for entry in logged(port)[JOB]] == [HOLD_EVENT, RELEASE_EVENT]
    port.advance(BATCH_WAIT)
    assert len(logged(port)[JOB]) == 2
    assert port.armed_timers() == []


def test_release_posts_a_marked_dependency_remove(port, gate):
    depending(port, gate, "create", "other")
    gate.release(JOB, "create")
    assert port.posted_by_gate(JOB, "dependency-remove") == [
        {"description": "create", MARKER: True}
    ]
    assert port.dependencies_open(JOB) == ["other"]
    assert port.notes(JOB) == []


def test_failed_release_raises_a_fatal_exception_and_removes_nothing(port, gate):
    depending(port, gate, "create")
    gate.hold(JOB, "teardown")
    gate.release(JOB, "create", status=2)
    (exc,) = port.posted_by_gate(JOB, "exception")
    assert exc["severity"] == 0 and exc["type"] == "dependency"
    assert "dependency hold create released with status 2" in exc["note"]
    assert port.posted_by_gate(JOB, "dependency-remove") == []
    assert gate.stats["failed"] == 1
    # The exception puts the job in CLEANUP: its epilog hold holds clean.
    cancel(port, gate)
    assert port.outstanding(JOB) == ["teardown"]


def test_timeout_fails_the_job(port, gate):
    depending(port, gate, "create", timeout=5.0)
    port.advance(4.9)
    assert port.notes(JOB) == []
    port.advance(0.2)
    (note,) = port.notes(JOB)
    assert "dependency hold create timed out after 5.0s" in note
    assert gate.release(JOB, "create") == (False, "timed out")
    assert gate.stats["timedout"] == 1


def test_job_leaving_depend_drops_its_holds_and_tells_watchers(port, gate):
    depending(port, gate, "create")
    gate.hold(JOB, "teardown")
    gate.watch("sink", points=[POINT])
    cancel(port, gate)
    first, aborted = port.sent["sink"]
    assert first["description"] == aborted["description"] == "create"
    assert aborted["aborted"] is True and "aborted" not in first
    assert [h["description"] for h in gate.list(JOB)] == ["teardown"]
    assert port.outstanding(JOB) == ["teardown"]
    assert gate.release(JOB, "create") == (False, "job ended before it started")
    # Nothing is posted to a job out of DEPEND.
    assert port.posted_by_gate(JOB, "dependency-remove") == []


def test_a_finish_after_the_job_left_depend_posts_nothing(port, gate):
    depending(port, gate, "create")
    port.set_state(JOB, CLEANUP)
    gate.release(JOB, "create", status=1)
    assert port.notes(JOB) == []
    assert port.posted_by_gate(JOB, "dependency-remove") == []


def test_same_description_at_another_point_is_refused(port, gate):
    depending(port, gate, "create")
    with pytest.raises(GateError) as info:
        gate.hold(JOB, "create", None, "prolog")
    assert info.value.errnum == errno.EEXIST and "depend point" in info.value.message
    hold, created = gate.hold(JOB, "create", None, POINT)
    assert not created and len(port.posted_by_gate(JOB, "dependency-add")) == 1


def test_rules_may_hold_at_the_depend_point(port):
    config = Config.from_sources(
        {},
        {
            "rules": [
                {"attribute": "system.bb", "description": "bb-create", "point": POINT}
            ]
        },
    )
    gate = Gate(port, config)
    port.add_job(JOB, DEPEND, USER)
    gate.apply_rules(JOB, {"system": {"bb": "1g"}})
    assert port.dependencies_open(JOB) == ["bb-create"]


# Recovery


def test_marked_dependency_add_alone_is_an_active_hold(port, gate):
    added = port.clock - 5.0
    recover(
        port,
        gate,
        DEPEND,
        [marked(added, "dependency-add", description="create", timeout=30.0)],
    )
    (hold,) = gate.list(JOB)
    assert (hold["state"], hold["point"], hold["t_start"], hold["timeout"]) == (
        ACTIVE,
        POINT,
        added,
        30.0,
    )
    # Its timeout resumes from when it became active.
    assert [t.deadline for t in port.armed_timers()] == [added + 30.0]
    # Nothing posted again: the job-manager kept the dependency.
    assert port.events[JOB] == []


def test_another_plugins_dependency_is_not_a_hold(port, gate):
    recover(port, gate, DEPEND, [ev(10.0, "dependency-add", description="create")])
    assert gate.list() == []


def test_released_hold_whose_remove_was_lost_is_removed(port, gate):
    recover(
        port,
        gate,
        DEPEND,
        [
            ev(9.0, HOLD_EVENT, description="create", point=POINT),
            marked(10.0, "dependency-add", description="create"),
            ev(11.0, RELEASE_EVENT, description="create", status=0),
        ],
    )
    assert gate.list() == []
    assert port.posted_by_gate(JOB, "dependency-remove") == [
        {"description": "create", MARKER: True}
    ]


def test_released_hold_with_its_remove_is_gone(port, gate):
    recover(
        port,
        gate,
        PRIORITY,
        [
            ev(9.0, HOLD_EVENT, description="create", point=POINT),
            marked(10.0, "dependency-add", description="create"),
            marked(10.5, "dependency-remove", description="create"),
            ev(11.0, RELEASE_EVENT, description="create", status=0),
        ],
    )
    assert gate.list() == [] and port.events[JOB] == []


def test_failed_release_whose_exception_was_lost_raises_it(port, gate):
    recover(
        port,
        gate,
        DEPEND,
        [
            ev(9.0, HOLD_EVENT, description="create", point=POINT),
            marked(10.0, "dependency-add", description="create"),
            ev(11.0, RELEASE_EVENT, description="create", status=3),
        ],
    )
    (note,) = port.notes(JOB)
    assert "create" in note and "status 3" in note
    assert port.posted_by_gate(JOB, "dependency-remove") == []


def test_recorded_hold_whose_add_was_lost_is_added_again(port, gate):
    recover(
        port, gate, DEPEND, [ev(9.0, HOLD_EVENT, description="create", point=POINT)]
    )
    assert port.dependencies_open(JOB) == ["create"]
    assert gate.list(JOB)[0]["state"] == ACTIVE


@pytest.mark.parametrize(
    "state, reason",
    [
        (PRIORITY, "job left DEPEND while epilog-gate was not loaded"),
        (CLEANUP, "job ended before it started"),
    ],
)
def test_hold_of_a_job_out_of_depend_is_gone_on_recovery(port, gate, state, reason):
    recover(
        port,
        gate,
        state,
        [
            ev(9.0, HOLD_EVENT, description="create", point=POINT),
            marked(10.0, "dependency-add", description="create"),
        ],
    )
    assert gate.list() == [] and port.events[JOB] == []
    assert gate.release(JOB, "create") == (False, reason)
    assert JOB not in port.tracked


def test_reload_carries_holds_on_and_drops_those_of_jobs_gone_on(port, gate):
    depending(port, gate, "create", timeout=10.0)
    port.advance(BATCH_WAIT)
    gate.suspend()
    assert port.armed_timers() == []
    port.advance(3.0)
    gate.attach(port)
    assert gate.retrack(JOB, DEPEND) is False
    gate.resume({JOB})
    assert [t.deadline - port.clock for t in port.armed_timers()] == [
        pytest.approx(10.0 - 3.0 - BATCH_WAIT)
    ]
    port.set_state(JOB, CLEANUP)
    gate.retrack(JOB, CLEANUP)
    assert gate.list() == []


def test_unload_records_the_holds_still_waiting(port, gate):
    depending(port, gate, "create")
    gate.suspend()
    assert JOB in logged(port)


# Shutdown


def test_shutdown_finish_leaves_dependency_holds_alone(port):
    gate = Gate(port, Config(shutdown_timeout=5.0, shutdown_action="finish"))
    shutdown = gate.watch_shutdown(port)
    shutdown.on_broker_state(BROKER_RUN)
    depending(port, gate, "create")
    # A job the shutdown waits on.
    port.add_job(JOB + 1, SCHED, USER)
    gate.hold(JOB + 1, "bb")
    port.set_state(JOB + 1, CLEANUP)
    gate.on_cleanup(JOB + 1)
    shutdown.on_broker_state(BROKER_CLEANUP)
    port.advance(5.1)
    assert port.outstanding(JOB + 1) == []
    assert port.dependencies_open(JOB) == ["create"] and port.notes(JOB) == []
    assert gate.list(JOB)[0]["state"] == ACTIVE
    assert KEY in port.kvs


def test_repeated_hold_is_answered_once_the_first_is_recorded(port, gate):
    answers = []
    port.add_job(JOB, DEPEND, USER)
    gate.hold(JOB, "create", None, POINT, done=lambda h, e: answers.append(1))
    gate.hold(JOB, "create", None, POINT, done=lambda h, e: answers.append(2))
    assert answers == [] and port.commits == []
    port.advance(BATCH_WAIT)
    assert answers == [1, 2]


def test_release_records_only_its_own_hold_early(port, gate):
    port.add_job(JOB, DEPEND, USER)
    port.add_job(JOB + 1, DEPEND, USER)
    gate.hold(JOB, "create", None, POINT)
    gate.hold(JOB + 1, "create", None, POINT)
    gate.release(JOB, "create")
    assert JOB in logged(port) and JOB + 1 not in logged(port)
    port.advance(BATCH_WAIT)
    assert JOB + 1 in logged(port)
