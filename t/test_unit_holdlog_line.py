"""The hold log's lines and the entries of a ``list`` answer are written
out directly when json would write them the same way: whatever the
values, the text is json's."""

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from flux_epilog_gate.gate import holdlog, holds, listing

VALUES = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.from_regex(r"[A-Za-z0-9._-]{0,20}", fullmatch=True),
    st.booleans(),
    st.none(),
)
KEYS = st.sampled_from(["id", "description", "timeout", "point", "status"])


def json_line(timestamp, name, context):
    entry = {"timestamp": timestamp, "name": name, "context": context}
    return json.dumps(entry, separators=(",", ":")) + "\n"


@settings(max_examples=300, deadline=None)
@given(
    timestamp=st.one_of(st.floats(allow_nan=True), st.integers()),
    name=st.sampled_from(["hold", "release", "cancel"]),
    context=st.dictionaries(KEYS, VALUES, max_size=5),
)
def test_a_line_is_what_json_writes(timestamp, name, context):
    assert holdlog._line(timestamp, name, context) == json_line(
        timestamp, name, context
    )


def test_the_lines_of_a_hold_and_its_release_are_jsons():
    context = {"id": 123456789, "description": "bb-teardown_1.x", "timeout": 600.0}
    line = holdlog._line(1764612345.25, "hold", context)
    assert line == json_line(1764612345.25, "hold", context)
    assert json.loads(line)["context"] == context


@settings(max_examples=300, deadline=None)
@given(
    jobid=st.integers(min_value=0, max_value=2**64 - 1),
    description=st.one_of(st.text(max_size=20), st.from_regex(r"[a-z0-9._-]{1,20}")),
    state=st.sampled_from(list(holds.HoldState) + ["pending", "active"]),
    point=st.sampled_from(list(holds.Point) + list(holds.POINTS)),
    userid=st.integers(min_value=0, max_value=2**32 - 1),
    t_hold=st.floats(allow_nan=True, allow_infinity=True),
    t_start=st.one_of(st.none(), st.floats(allow_nan=False)),
    timeout=st.one_of(st.none(), st.floats(allow_nan=True), st.integers()),
)
def test_a_list_entry_is_what_json_writes(
    jobid, description, state, point, userid, t_hold, t_start, timeout
):
    hold = holds.Hold(jobid, description, userid, t_hold, timeout, point)
    hold.state = state
    hold.t_start = t_start
    assert listing.entry(hold) == json.dumps(hold.to_dict(), separators=(",", ":"))


def hold_context(hold):
    """The context json writes of a hold's entry (holdlog.py's docstring)."""
    context = {"id": hold.id, "description": hold.description}
    if hold.timeout is not None:
        context["timeout"] = hold.timeout
    if hold.point != holds.EPILOG:
        context["point"] = hold.point
    return context


@settings(max_examples=300, deadline=None)
@given(
    jobid=st.one_of(st.integers(min_value=0, max_value=2**64 - 1), st.booleans()),
    description=st.one_of(
        st.text(max_size=20), st.from_regex(r"[A-Za-z0-9._-]{1,20}", fullmatch=True)
    ),
    point=st.sampled_from(list(holds.Point) + list(holds.POINTS)),
    t_hold=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers()),
    timeout=st.one_of(st.none(), st.floats(allow_nan=True), st.integers()),
)
def test_a_hold_entry_is_what_json_writes(jobid, description, point, t_hold, timeout):
    hold = holds.Hold(jobid, description, 1000, t_hold, timeout, point)
    assert holdlog.hold_entry(hold) == json_line(
        t_hold, holds.HOLD_EVENT, hold_context(hold)
    )


@settings(max_examples=300, deadline=None)
@given(
    jobid=st.one_of(st.integers(min_value=0, max_value=2**64 - 1), st.booleans()),
    description=st.one_of(
        st.text(max_size=20), st.from_regex(r"[A-Za-z0-9._-]{1,20}", fullmatch=True)
    ),
    status=st.one_of(st.integers(min_value=-(2**40), max_value=2**40), st.booleans()),
    timestamp=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers()),
)
def test_a_release_entry_is_what_json_writes(jobid, description, status, timestamp):
    hold = holds.Hold(jobid, description, 1000, 0.0)
    context = {"id": jobid, "description": description, "status": status}
    assert holdlog.release_entry(hold, status, timestamp) == json_line(
        timestamp, holds.RELEASE_EVENT, context
    )


def test_a_description_is_judged_the_same_once_known():
    for text in ("bench", "bb-teardown_1.x", 'a"b', "é", ""):
        first = holds._VERBATIM[text]
        assert first == (holds._VERBATIM_RE(text) is not None)
        assert holds._VERBATIM[text] == first
        assert holds._VERBATIM(text) == first


@settings(max_examples=200, deadline=None)
@given(
    jobid=st.integers(min_value=0, max_value=2**64 - 1),
    description=st.from_regex(r"[A-Za-z0-9._-]{1,20}", fullmatch=True),
    point=st.sampled_from(list(holds.POINTS)),
    t_hold=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers()),
    timeout=st.one_of(st.none(), st.floats(allow_nan=False)),
)
def test_a_hold_keeps_its_times_text_and_writes_the_same_line_again(
    jobid, description, point, t_hold, timeout
):
    hold = holds.Hold(jobid, description, 1000, t_hold, timeout, point)
    first = holdlog.hold_entry(hold)
    assert not hasattr(hold, "entry")
    if type(t_hold) is float and math.isfinite(t_hold):
        assert hold.t_text == json.dumps(t_hold)
    else:
        assert hold.t_text is None
    assert holdlog.hold_entry(hold) == first


@settings(max_examples=500, deadline=None)
@given(
    now=st.one_of(
        st.floats(min_value=-1e15, max_value=1e15),
        st.floats(min_value=1e9, max_value=2.0**32),
        st.integers(min_value=0, max_value=2**32 * 10**6).map(lambda us: us / 1e6),
    )
)
def test_a_stamp_is_the_time_to_the_microsecond_and_the_text_json_writes(now):
    t, text = holds.stamp(now)
    assert t == round(now * 1e6) / 1e6
    assert abs(t - now) <= 0.5e-6 + abs(now) * 2**-52
    assert text == json.dumps(t)
    assert holds.stamp(t) == (t, text)


@settings(max_examples=300, deadline=None)
@given(
    jobid=st.integers(min_value=0, max_value=2**64 - 1),
    description=st.one_of(
        st.text(max_size=20), st.from_regex(r"[A-Za-z0-9._-]{1,20}", fullmatch=True)
    ),
    point=st.sampled_from(list(holds.POINTS)),
    now=st.floats(min_value=0, max_value=2.0**33),
    status=st.integers(min_value=-(2**31), max_value=2**31),
)
def test_stamped_hold_and_release_lines_are_what_json_writes(
    jobid, description, point, now, status
):
    t_hold, t_text = holds.stamp(now)
    hold = holds.Hold(jobid, description, 1000, t_hold, None, point, t_text)
    assert holdlog.hold_entry(hold) == json_line(
        t_hold, holds.HOLD_EVENT, hold_context(hold)
    )
    context = {"id": jobid, "description": description, "status": status}
    assert holdlog.release_entry(hold, status, t_hold, t_text) == json_line(
        t_hold, holds.RELEASE_EVENT, context
    )
