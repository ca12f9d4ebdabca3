"""The host of a job-manager's gate (plugin/host.py) as a model: any
sequence of loads and removes of epilog-gate.so and dws.so keeps one
driver, the member of the highest rank, and hands the gate over instead
of dropping it (no instance needed; t/test_dws_gate.py does it live)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from flux_epilog_gate.plugin import host as hostmod


class Member:
    """A committed plugin instance as the host sees it."""

    def __init__(self, name, rank, log):
        self.name = name
        self.drive_rank = rank
        self.log = log

    def hand_over(self):
        self.log.append(("hand_over", self.name))

    def __repr__(self):
        return self.name


class Jobtap:
    def __init__(self, jmid):
        self.jmid = jmid
        self.marks = self

    def jobmanager_id(self):
        return self.jmid

    def log(self, level, text):
        pass


RANKS = {"epilog-gate": 1, "dws": 0}
STEP = st.tuples(
    st.sampled_from(["load", "remove", "module-reload"]),
    st.sampled_from(sorted(RANKS)),
)


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(STEP, max_size=12))
def test_the_driver_is_the_highest_ranked_member_and_the_gate_is_kept(steps):
    hostmod._hosts.clear()
    jmid = 1
    host = hostmod.host_of(Jobtap(jmid))
    host.gate = gate = object()
    log = []
    loaded = {}
    for action, name in steps:
        if action == "module-reload":
            # A new job-manager: a new host, no gate; the old members go.
            jmid += 1
            loaded = {}
            host = hostmod.host_of(Jobtap(jmid))
            assert host.gate is None and host.driver is None
            host.gate = gate = object()
            continue
        if action == "load" and name not in loaded:
            member = loaded[name] = Member(name, RANKS[name], log)
            before = host.driver
            drives = host.join(member)
            assert drives == (before is None or member.drive_rank > before.drive_rank)
            if drives and before is not None:
                assert log[-1] == ("hand_over", before.name)
        elif action == "remove" and name in loaded:
            member = loaded.pop(name)
            was_driver = host.driver is member
            successor = host.leave(member)
            if was_driver and loaded:
                assert successor is host.driver and successor in loaded.values()
            else:
                assert successor is None
        # One driver, the highest ranked loaded plugin; the gate is kept.
        if loaded:
            best = max(RANKS[n] for n in loaded)
            assert host.driver is not None and host.driver.drive_rank == best
        else:
            assert host.driver is None
        assert host.gate is gate
        assert hostmod.host_of(Jobtap(jmid)) is host
        assert list(hostmod._hosts) == [jmid]
