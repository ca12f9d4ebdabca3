"""Unit tests of the ``point`` of hold and watch requests
(flux_epilog_gate.gate.protocol): exactly the three points of the contract are
accepted, anything else is refused with a message that names the point."""

import errno

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flux_epilog_gate.errors import GateError
from flux_epilog_gate.gate.protocol import parse_hold_point, parse_watch_points

POINTS = ("epilog", "prolog", "depend")

ANY_POINT = st.one_of(
    st.sampled_from(POINTS),
    st.sampled_from([p.upper() for p in POINTS] + [p + " " for p in POINTS]),
    st.text(max_size=12),
)


@pytest.mark.parametrize("point", POINTS)
def test_hold_accepts_each_point(point):
    assert parse_hold_point({"id": 1, "description": "x", "point": point}) == point


def test_hold_point_defaults_to_epilog():
    assert parse_hold_point({"id": 1, "description": "x"}) == "epilog"


@settings(max_examples=100, deadline=None)
@given(ANY_POINT)
def test_hold_accepts_exactly_the_points_of_the_contract(point):
    payload = {"id": 1, "description": "x", "point": point}
    if point in POINTS:
        assert parse_hold_point(payload) == point
        return
    with pytest.raises(GateError) as info:
        parse_hold_point(payload)
    assert info.value.errnum == errno.EINVAL
    assert repr(point) in info.value.message and "'depend'" in info.value.message


@settings(max_examples=100, deadline=None)
@given(st.lists(ANY_POINT, max_size=4))
def test_watch_accepts_exactly_lists_of_the_points_of_the_contract(points):
    payload = {"points": points}
    if all(point in POINTS for point in points):
        assert parse_watch_points(payload) == (frozenset(points) or None)
        return
    with pytest.raises(GateError) as info:
        parse_watch_points(payload)
    assert info.value.errnum == errno.EINVAL
