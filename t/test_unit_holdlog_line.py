"""The hold log's lines are written out directly when json would write
them the same way: whatever the values, the line is json's."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from flux_epilog_gate.gate import holdlog

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
