"""A model-based test of hold log snapshots written in parts (hypothesis'
stateful testing), through the FakePort: random interleavings of holds,
releases (pending: cancel; active: release), jobs reaching their epilog
point, snapshots coming due, each commit and lookup answered or failed,
and the plugin unloaded and loaded again (what it had sent is carried
out, its answers never come).

After every step, the hold log as the fake KVS holds it, replayed as
recovery does, followed by the records not known to be durable (in
flight, queued, or not confirmed at an unload), gives exactly the
gate's holds; on its own it has every hold whose record was
acknowledged.  At the end, once every commit is answered, one more
snapshot leaves the log alone equal to the gate's holds and no side key.
"""

import errno
import sys

from fakeport import OPS
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from flux_epilog_gate.errors import GateError
from flux_epilog_gate.gate import CLEANUP, SCHED, Gate, holdlog
from flux_epilog_gate.gate.config import Config
from flux_epilog_gate.gate.holdlog import SEGMENTS, SIDE_KEY

from .unitgate import gate_holds, replayed

JOBS = st.integers(min_value=1, max_value=8)
DESCRIPTIONS = st.sampled_from(["a", "b"])
USER = 1000

#: holdlog.py's MAX_APPENDS, SEGMENT_FLOOR and MAX_SEGMENTS for the run:
#: a snapshot of three holds or more is followed by segments of four
#: appends, three of them at most, so that segments come and go amid the
#: parts of snapshots.
LIMITS = (4, 300, 3)


class SnapshotMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        from fakeport import FakePort

        self.limits = (holdlog.MAX_APPENDS, holdlog.SEGMENT_FLOOR, holdlog.MAX_SEGMENTS)
        holdlog.MAX_APPENDS, holdlog.SEGMENT_FLOOR, holdlog.MAX_SEGMENTS = LIMITS
        self.port = FakePort()
        # A part is an entry or two: snapshots of a few holds have parts.
        self.gate = Gate(self.port, Config(snapshot_chunk=150))
        #: Holds whose record was acknowledged: hold object -> key.
        self.acknowledged = {}
        #: Snapshots asked for (the snapshot request), and their answers.
        self.asked = 0
        self.asked_answers = []
        # Jobs 1 to 8, each with a hold already recorded.
        for jobid in range(1, 9):
            self.port.add_job(jobid, SCHED, USER)
            self.hold(jobid, "p")
        self.port.defer_commits = True
        # The first commit starts a snapshot.
        self.snapshot_due()

    # Requests and the jobs

    def tick(self):
        """Time moves between two requests, as a wall clock does (two
        entries of one hold at one time would be replayed in log order)."""
        self.port.clock += 0.001

    @rule(jobid=JOBS, description=DESCRIPTIONS)
    def hold(self, jobid, description):
        self.tick()

        def done(hold, error):
            if error is None:
                self.acknowledged[hold] = (jobid, description)

        try:
            self.gate.hold(jobid, description, done=done)
        except GateError:
            pass

    @rule(jobid=JOBS, description=DESCRIPTIONS, status=st.sampled_from([0, 1]))
    def release(self, jobid, description, status):
        self.tick()
        try:
            self.gate.release(jobid, description, status, done=lambda *args: None)
        except GateError:
            pass

    @rule(jobid=JOBS)
    def reach_epilog_point(self, jobid):
        self.tick()
        if self.port.jobs[jobid].state != CLEANUP:
            self.port.set_state(jobid, CLEANUP)
            self.gate.on_cleanup(jobid)

    @rule(seconds=st.sampled_from([0.0, 0.5, 3.0]))
    def advance(self, seconds):
        self.port.advance(seconds)

    @rule()
    def snapshot_due(self):
        self.gate.holdlog.compaction.appends = holdlog.MAX_APPENDS

    @rule()
    def ask_snapshot(self):
        """The snapshot request: answered once, whatever comes."""
        self.asked += 1
        asked = self.asked
        self.gate.snapshot(
            lambda size, error: self.asked_answers.append((asked, error))
        )

    @invariant()
    def a_snapshot_asked_for_is_answered_at_most_once(self):
        asked = [k for k, _ in self.asked_answers]
        assert len(set(asked)) == len(asked)

    # The KVS

    @precondition(lambda self: self.port.pending_commits)
    @rule(fail=st.sampled_from([None, None, None, errno.EIO, errno.ENOSYS]))
    def answer_commit(self, fail):
        key, ops, _, _ = self.port.pending_commits[0]
        if key == OPS:
            kind = "swap" if ops[0][0] == "put_treeobj" else "part"
            event(f"{kind} {'failed' if fail else 'written'}")
        self.port.complete_commit(fail)

    @precondition(lambda self: self.port.pending_commits or self.port.pending_lookups)
    @rule(steps=st.integers(min_value=1, max_value=12))
    def answer_several(self, steps):
        """Up to ``steps`` commits and lookups answered, in order, none
        failed: a snapshot gets on."""
        for _ in range(steps):
            if self.port.pending_commits:
                self.answer_commit(None)
            elif self.port.pending_lookups:
                self.answer_lookup(None)

    @precondition(lambda self: self.port.pending_lookups)
    @rule(fail=st.sampled_from([None, None, errno.EIO]))
    def answer_lookup(self, fail):
        event(f"lookup {'failed' if fail else 'answered'}")
        self.port.complete_lookup(fail)

    # The plugin

    @rule()
    def reload(self):
        """The plugin is removed (what it sent is carried out, but never
        answered to it) and loaded again."""
        if self.gate.holdlog.snapshots.in_parts is not None:
            event("reload during a snapshot")
        if self.gate.holdlog.segment:
            event("reload with segments")
        self.gate.suspend()
        self.port.orphan()
        self.gate.attach(self.port)

    # What must hold after every step

    def undurable(self):
        log = self.gate.holdlog
        return log.handover.unconfirmed + log.commit.sent + log.commit.queued

    @invariant()
    def the_log_and_what_is_not_durable_yet_are_the_holds(self):
        text = self.port.hold_log() + "".join(self.undurable())
        assert replayed(text) == gate_holds(self.gate)

    @invariant()
    def every_acknowledged_hold_is_in_the_log(self):
        logged = replayed(self.port.hold_log())
        for hold, key in self.acknowledged.items():
            job = self.gate.jobs.get(key[0])
            if job is not None and job.holds.get(key[1]) is hold:
                assert key in logged, key

    def teardown(self):
        port, gate = self.port, self.gate
        holdlog.MAX_APPENDS, holdlog.SEGMENT_FLOOR, holdlog.MAX_SEGMENTS = self.limits
        # Everything answered, no failure.
        drain(port)
        assert len(self.asked_answers) == self.asked
        if any(error is None for _, error in self.asked_answers):
            event("a snapshot asked for was made")
        assert replayed(port.hold_log()) == gate_holds(gate)
        # One more snapshot, to its end: the side key goes, and so do
        # the segments.
        gate.holdlog.compaction.appends = holdlog.MAX_APPENDS
        port.add_job(99, SCHED, USER)
        self.tick()
        gate.hold(99, "end")
        drain(port)
        assert gate.holdlog.snapshots.in_parts is None
        assert SIDE_KEY not in port.kvs
        assert port.kvs_dir(SEGMENTS) is None
        assert replayed(port.hold_log()) == gate_holds(gate)


def drain(port, limit=10000):
    """Answer everything, letting a hold log's retry come due (time moves
    on only while nothing is in flight)."""
    for _ in range(limit):
        port.answer_all(limit)
        if not port.armed_timers():
            return
        port.advance(holdlog.RETRY_DELAY)
    raise AssertionError("retries never stop")


SnapshotMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_snapshots_in_parts = SnapshotMachine.TestCase


def test_a_reload_while_the_swap_is_in_flight_loses_no_hold(monkeypatch):
    """The previous instance's swap is still on its way when the next
    one's first batch comes: that batch must not make the key it looks
    up (the log before the swap) a segment, over the swapped log."""
    # The machine's steps, called here rather than by hypothesis.
    monkeypatch.setattr(sys.modules[__name__], "event", lambda text: None)
    machine = SnapshotMachine()
    steps = [
        ("hold", {"jobid": 1, "description": "a"}),
        ("ask_snapshot", {}),
        ("answer_lookup", {"fail": None}),
        ("hold", {"jobid": 2, "description": "a"}),
        ("answer_commit", {"fail": None}),
        ("release", {"jobid": 1, "description": "a", "status": 0}),
        ("release", {"jobid": 1, "description": "a", "status": 0}),
        ("answer_several", {"steps": 6}),
        # The snapshot's swap is sent, not answered, when the plugin goes.
        ("hold", {"jobid": 1, "description": "a"}),
        ("reload", {}),
        # A lookup the next instance sent, if any, is answered before
        # the swap is carried out.
        ("answer_lookup_if_any", {}),
        ("answer_several", {"steps": 3}),
    ]
    try:
        for name, args in steps:
            if name == "answer_lookup_if_any":
                if machine.port.pending_lookups:
                    machine.answer_lookup(None)
            else:
                getattr(machine, name)(**args)
            machine.the_log_and_what_is_not_durable_yet_are_the_holds()
            machine.every_acknowledged_hold_is_in_the_log()
    finally:
        machine.teardown()
