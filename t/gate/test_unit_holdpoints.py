"""Unit tests of the three hold points side by side
(flux_epilog_gate.gate.points and its epilog, prolog and depend points);
no broker, the FakePort plays the job-manager."""

import errno

import pytest

from flux_epilog_gate.errors import GateError
from flux_epilog_gate.gate import CLEANUP, DEPEND, NEW, PRIORITY, RUN, SCHED
from flux_epilog_gate.gate.holds import POINTS, TIMEOUT_STATUS, Reason
from flux_epilog_gate.gate.points import HoldPoint

from .unitgate import JOB, USER

#: Where a new hold comes too late, by point: the states its check refuses.
TOO_LATE = {
    "epilog": set(),
    "prolog": {RUN, CLEANUP},
    "depend": {PRIORITY, SCHED, RUN, CLEANUP},
}


def test_the_gate_has_one_point_of_one_shape_per_point_name(gate):
    assert sorted(gate.points) == sorted(POINTS)
    for name, point in gate.points.items():
        assert isinstance(point, HoldPoint)
        assert point.name == name


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("state", [NEW, DEPEND, PRIORITY, SCHED, RUN, CLEANUP])
def test_each_point_refuses_the_holds_that_come_too_late(port, gate, point, state):
    port.add_job(JOB, state, USER)
    if state in TOO_LATE[point]:
        with pytest.raises(GateError) as info:
            gate.hold(JOB, "h", point=point)
        assert info.value.errnum == errno.EINVAL
        assert "too late" in info.value.message
        assert JOB not in gate.jobs
    else:
        hold, created = gate.hold(JOB, "h", point=point)
        assert created and hold.point == point


@pytest.mark.parametrize(
    "point, label",
    [("epilog", "hold"), ("prolog", "prolog hold"), ("depend", "dependency hold")],
)
def test_each_point_names_its_holds_in_failure_notes(port, gate, point, label):
    port.add_job(JOB, NEW, USER)
    hold, _ = gate.hold(JOB, "h", timeout=5.0, point=point)
    hold.t_start = port.now()
    note = gate.points[point].failure_note(hold, 3, Reason.RELEASED)
    assert note == f"epilog-gate: {label} h released with status 3"
    note = gate.points[point].failure_note(hold, TIMEOUT_STATUS, Reason.TIMED_OUT)
    assert note.startswith(f"epilog-gate: {label} h timed out after 5.0s")


def test_only_the_dependency_point_is_left_alone_by_the_shutdown(gate):
    assert {name for name, p in gate.points.items() if not p.ends_at_shutdown} == {
        "depend"
    }
