"""The pattern of a plugin's handler of its job topics
(flux_epilog_gate.jobtap.pattern), matched by the C library's fnmatch(),
as flux-core matches it.

It must match every job.state.* and job.event.* topic the plugin
declares, no other jobtap topic (a handler of job.validate or
job.dependency.* would take part in deciding them), and no job.state.*
topic whose first letter none of the plugin's topics shares: flux-core
calls such a state for every job only because some handler matches it.
"""

import ctypes
import ctypes.util

from hypothesis import example, given
from hypothesis import strategies as st

from flux_epilog_gate.dws.plugin import Dws
from flux_epilog_gate.jobtap.pattern import STATES, job_pattern
from flux_epilog_gate.plugin import EpilogGatePlugin

LIBC = ctypes.CDLL(ctypes.util.find_library("c"))
LIBC.fnmatch.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int)

#: The runtime's buffer for the pattern (runtime.c: job_pattern).
PATTERN_MAX = 31

#: flux-core's jobtap topics that are not job.state.* or job.event.*.
OTHER_TOPICS = (
    "job.create",
    "job.new",
    "job.destroy",
    "job.validate",
    "job.update",
    "job.update.attributes.system.duration",
    "job.dependency.after",
    "job.dependency.afterok",
    "job.dependency.singleton",
    "job.dependency.begin-time",
    "job.dependency.dws",
    "job.priority.get",
    "job.inactive-add",
    "job.inactive-remove",
    "conf.update",
    "plugin.query",
)

EVENT_NAMES = st.text(
    alphabet=st.sampled_from("abcdefghijklmnopqrstuvwxyz-_"), min_size=1, max_size=20
)
TOPICS = st.one_of(
    st.sampled_from(STATES).map(lambda s: f"job.state.{s}"),
    EVENT_NAMES.map(lambda e: f"job.event.{e}"),
)


def matches(pattern, topic):
    return LIBC.fnmatch(pattern.encode(), topic.encode(), 0) == 0


@given(st.lists(TOPICS, max_size=8), EVENT_NAMES)
@example(["job.state.depend", "job.state.cleanup"], "start")
@example([], "x")
def test_the_pattern_matches_the_plugins_topics_and_no_state_it_needs_not(
    declared, event
):
    pattern = job_pattern(["job.new", *declared])
    assert len(pattern) <= PATTERN_MAX
    for topic in declared:
        assert matches(pattern, topic), (pattern, topic)
    for topic in OTHER_TOPICS:
        assert not matches(pattern, topic), (pattern, topic)
    firsts = {topic[len("job.state.")] for topic in declared}
    for state in STATES:
        called = matches(pattern, f"job.state.{state}")
        assert called == (state[0] in firsts), (pattern, state)
    if event[0] in firsts:
        assert matches(pattern, f"job.event.{event}")


def test_the_gate_and_dws_leave_out_sched_and_priority():
    for cls in (EpilogGatePlugin, Dws):
        cls._collect()
        pattern = job_pattern(topic for topic, *_ in cls._job_topics)
        for state in ("depend", "run", "cleanup", "inactive"):
            assert matches(pattern, f"job.state.{state}"), (cls, pattern)
        for state in ("sched", "priority"):
            assert not matches(pattern, f"job.state.{state}"), (cls, pattern)
        for event in ("exception", "finish", "free"):
            assert matches(pattern, f"job.event.{event}"), (cls, pattern)
