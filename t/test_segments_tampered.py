"""Names put under the hold log's segments (KVS
``epilog-gate.holds-segments``) by another hand: each that is not a
segment's is left out, and the segments are read as usual.

A name of more digits than Python converts to an integer (some 4,300)
failed the whole read: every segment was left out, and the pending
holds recorded only there were not known after the restart.  A unit
property of the reading, and the restart of a real instance."""

import json

import pytest
from conftest import restart
from hypothesis import given, settings
from hypothesis import strategies as st
from jobs import dmesg, submit

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holdlog import KEY
from flux_epilog_gate.gate.holds import HOLD_EVENT
from flux_epilog_gate.gate.segments import (
    SEGMENTS,
    read_segments,
    segment_key,
)


class Port:
    """What read_segments asks of the job-manager: the names under the
    segments, and each segment's value."""

    def __init__(self, names):
        self.names = names

    def kvs_dir(self, key):
        assert key == SEGMENTS
        return self.names

    def kvs_get(self, key):
        return key.encode()


NAME = st.one_of(
    st.integers(1, 10**6).map(str),
    st.text("0123456789", min_size=1, max_size=6000),
    st.text(max_size=10),
)


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(names=st.lists(NAME, unique=True, max_size=6))
def test_every_name_is_read_as_a_segment_or_left_out(names):
    segments, left = read_segments(Port(names))
    numbers = [n for n, _ in segments]
    assert numbers == sorted(numbers)
    assert all(value == segment_key(n).encode() for n, value in segments)
    assert len(segments) + len(left) == len(names)
    for n in numbers:
        # Numbers the gate could write: a 64-bit number's 20 digits at most.
        assert str(n) in names and len(str(n)) <= 20
    for key, _, records in left:
        assert not records
        name = key[len(SEGMENTS) + 1 :]
        assert name in names and name not in map(str, numbers)


@pytest.fixture
def inst(new_instance):
    return new_instance(cores=8)


def test_a_name_too_long_for_a_number_leaves_the_segments_read(inst):
    handle = inst.handle()
    jobid = submit(handle, urgency=0)
    inst.flux("jobtap", "remove", "epilog-gate.so")
    # The hold recorded in a segment alone, as after a segment is made.
    entry = {
        "timestamp": 1.7e9,
        "name": HOLD_EVENT,
        "context": {"id": jobid, "description": "in-segment"},
    }
    inst.flux("kvs", "put", "--raw", f"{segment_key(1)}=-", input=json.dumps(entry))
    inst.flux("kvs", "put", f"{KEY}=")
    long_name = "7" * 5000
    inst.flux("kvs", "put", f"{SEGMENTS}.{long_name}.log=x")
    handle = restart(inst, "instance")
    gate = EpilogGate(handle)
    assert [h["description"] for h in gate.list(jobid)] == ["in-segment"]
    assert dmesg(inst, f"{SEGMENTS}.{long_name[:20]}")
    gate.release(jobid, "in-segment")
