"""The gate's memory of holds that are gone (gate/jobs.py, GoneLog), model
based: whatever the adds, discards and limits, it remembers the newest
``limit`` holds that went, each with its last reason, and forgets the
oldest first."""

from hypothesis import given, settings
from hypothesis import strategies as st

from flux_epilog_gate.gate.jobs import GoneLog

KEYS = st.tuples(st.integers(1, 4), st.sampled_from(["a", "b", "c"]))
STEPS = st.one_of(
    st.tuples(st.just("add"), KEYS, st.sampled_from(["released", "timed out"])),
    st.tuples(st.just("discard"), KEYS),
    st.tuples(st.just("limit"), st.integers(0, 6)),
)


class Model:
    """What GoneLog should remember: keys oldest first, with reasons."""

    def __init__(self, limit):
        self.limit = limit
        self.order = []
        self.reasons = {}

    def add(self, key, reason):
        if key in self.reasons:
            self.order.remove(key)
        self.order.append(key)
        self.reasons[key] = reason
        self.trim()

    def discard(self, key):
        if key in self.reasons:
            self.order.remove(key)
            del self.reasons[key]

    def set_limit(self, limit):
        self.limit = limit
        self.trim()

    def trim(self):
        while len(self.order) > self.limit:
            del self.reasons[self.order.pop(0)]


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(0, 6), steps=st.lists(STEPS, max_size=60))
def test_gone_log_remembers_the_newest_holds_with_their_last_reason(limit, steps):
    gone, model = GoneLog(limit), Model(limit)
    for kind, *args in steps:
        if kind == "add":
            (jobid, description), reason = args
            gone.add(jobid, description, reason)
            model.add((jobid, description), reason)
        elif kind == "discard":
            ((jobid, description),) = args
            gone.discard(jobid, description)
            model.discard((jobid, description))
        else:
            # As Gate.reconfigure() changes it.
            gone.resize(args[0])
            model.set_limit(args[0])
        assert len(gone) == len(model.order) <= model.limit
        for jobid in range(1, 5):
            for description in "abc":
                key = (jobid, description)
                assert gone.get(*key) == model.reasons.get(key)
    # As many new holds as the limit push out every one before them.
    for n in range(model.limit):
        gone.add(100 + n, "z", "released")
    assert all(gone.get(*key) is None for key in model.order)
