"""Hypothesis strategies for hold logs: valid hold entries mixed with every
kind of line that is not an entry (bytes that are not UTF-8 or not JSON,
JSON of any shape, entries with a field of the wrong type or out of range,
NaN and infinities, reserved descriptions, huge lines).

:func:`hold_logs` draws ``(data, holds)``: ``data`` the bytes of a log,
``holds`` the valid hold entries it holds, ``{(id, description):
context}``; every other line of ``data`` must be skipped.
"""

import json
import math

from hypothesis import strategies as st

from flux_epilog_gate.gate.holds import (
    CANCEL_EVENT,
    DESCRIPTION_MAX,
    HOLD_EVENT,
    POINTS,
    RECOVERY_DESCRIPTION,
    RELEASE_EVENT,
)

NAN = float("nan")
INF = float("inf")

descriptions = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
    min_size=1,
    max_size=DESCRIPTION_MAX,
)
timestamps = st.floats(
    min_value=1e9, max_value=2e9, allow_nan=False, allow_infinity=False
)
timeouts = st.one_of(
    st.integers(min_value=1, max_value=10**6),
    st.floats(min_value=1e-3, max_value=1e9, allow_nan=False, allow_infinity=False),
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)

#: Values no field of an entry accepts (as JSON).
NEVER = [None, [], {}, [1], {"a": 1}]

#: For each field, values it must refuse.
BAD_FIELDS = {
    "timestamp": [NAN, INF, -INF, "1", True, 10**400, 1e308, -1.0, 2.6e11] + NEVER,
    "name": ["", "epilog-start", "epilog_gate.other", 1, True] + NEVER,
    "id": [0, -1, 2**64, True, False, 1.5, "12", 10**30] + NEVER,
    "description": [
        123,
        "",
        "x" * (DESCRIPTION_MAX + 1),
        RECOVERY_DESCRIPTION,
        "a b",
        "caf\u00e9",
        "a\nb",
        True,
        1.5,
    ]
    + NEVER,
    "timeout": ["abc", "10", 0, -1, -0.5, NAN, INF, -INF, True, False, 10**400] + NEVER,
    "point": ["bogus", "", "EPILOG", 1, True] + NEVER,
    "status": ["x", "0", 1.5, True, 2**31, -(2**31) - 1, NAN, INF] + NEVER,
}


def _line(entry):
    return json.dumps(entry, separators=(",", ":")).encode()


@st.composite
def hold_entries(draw, jobids):
    """A valid hold entry on one of ``jobids``: ``(id, description,
    context, entry)``."""
    jobid = draw(st.sampled_from(jobids))
    description = draw(descriptions)
    context = {"description": description}
    if draw(st.booleans()):
        context["timeout"] = draw(timeouts)
    point = draw(st.sampled_from((None,) + POINTS))
    if point is not None:
        context["point"] = point
    entry = {
        "timestamp": draw(timestamps),
        "name": HOLD_EVENT,
        "context": dict(context, id=jobid),
    }
    return jobid, description, context, entry


@st.composite
def bad_entries(draw, jobids):
    """An entry (any name) with one field of the wrong type or out of
    range, or one required field missing: the bytes of its line."""
    jobid = draw(st.sampled_from(jobids))
    name = draw(st.sampled_from((HOLD_EVENT, CANCEL_EVENT, RELEASE_EVENT)))
    context = {"id": jobid, "description": draw(descriptions)}
    if name == RELEASE_EVENT:
        context["status"] = draw(st.integers(-(2**31), 2**31 - 1))
    if name == HOLD_EVENT and draw(st.booleans()):
        context["timeout"] = draw(timeouts)
    entry = {"timestamp": draw(timestamps), "name": name, "context": context}
    fields = ["timestamp", "name", "id", "description"]
    if name == HOLD_EVENT:
        fields += ["timeout", "point"]
    if name == RELEASE_EVENT:
        fields.append("status")
    field = draw(st.sampled_from(fields))
    where = entry if field in ("timestamp", "name") else context
    if field != "timeout" and field != "point" and draw(st.integers(0, 5)) == 0:
        del where[field]
    else:
        where[field] = draw(st.sampled_from(BAD_FIELDS[field]))
    if draw(st.integers(0, 9)) == 0:
        entry["context"] = draw(st.sampled_from(NEVER[:1] + ["x", 1, [context]]))
    return _line(entry)


def _not_utf8(line):
    return line.replace(b'"description":"', b'"description":"\xff', 1)


@st.composite
def junk_lines(draw, jobids):
    """A line that is not an entry, of any kind."""
    kind = draw(st.integers(0, 6))
    if kind == 0:
        return draw(st.binary(max_size=60)).replace(b"\n", b" ")
    if kind == 1:
        return _line(draw(json_values))
    if kind == 2:
        _, _, _, entry = draw(hold_entries(jobids))
        return _not_utf8(_line(entry))
    if kind == 3:
        # Huge: a valid entry padded far past any line the gate writes.
        _, _, _, entry = draw(hold_entries(jobids))
        entry["pad"] = "x" * draw(st.integers(4100, 6000))
        return _line(entry)
    if kind == 4:
        # Cut short.
        _, _, _, entry = draw(hold_entries(jobids))
        line = _line(entry)
        return line[: draw(st.integers(1, len(line) - 1))]
    if kind == 5:
        return draw(st.sampled_from([b"NaN", b"Infinity", b"[", b"{}", b"null"]))
    return draw(bad_entries(jobids))


@st.composite
def hold_logs(draw, jobids, max_holds=20, max_junk=20):
    """``(data, holds)``: a log of valid hold entries on ``jobids`` (one
    per ``(id, description)``) and junk lines, shuffled."""
    holds = {}
    lines = []
    for jobid, description, context, entry in draw(
        st.lists(hold_entries(jobids), max_size=max_holds)
    ):
        if (jobid, description) in holds:
            continue
        holds[(jobid, description)] = context
        lines.append(_line(entry))
    lines += draw(st.lists(junk_lines(jobids), max_size=max_junk))
    lines = draw(st.permutations(lines))
    separator = draw(st.sampled_from([b"\n", b"\r\n", b"\n\n"]))
    data = separator.join(lines) + draw(st.sampled_from([b"", b"\n"]))
    return data, holds


def is_finite(value):
    return not isinstance(value, float) or math.isfinite(value)
