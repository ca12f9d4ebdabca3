"""The hold log's compaction policy (holdlog.py, "Snapshots"), no broker:
a model of holds coming and going, at random, on the FakePort.

Checked after every step: the log replays to the gate's holds; once the
log is left idle (the release entries snapshots keep have expired), its
key and segments together take at most the larger of MAX_BYTES and about
twice what the live holds' entries take, however many holds it once
held; and the bytes every snapshot wrote stay paid for by the records
appended (amortized).  The limits are small, so that snapshots (whole
and in parts) and segments come and go within a few dozen holds; and
segments many, so that the snapshot made after MAX_SEGMENTS of them
(paid for by the appends it saves, not by bytes) is not what is
measured.
"""

from fakeport import FakePort
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from flux_epilog_gate.gate import CLEANUP, SCHED, Gate, holdlog
from flux_epilog_gate.gate.config import Config
from flux_epilog_gate.gate.holdlog import KEY, SIDE_KEY, hold_entry

from .unitgate import USER, gate_holds, replayed

#: MAX_BYTES, MAX_APPENDS, SEGMENT_FLOOR, MAX_SEGMENTS of the model.
LIMITS = (4000, 16, 1000, 100)
LIMIT_NAMES = ("MAX_BYTES", "MAX_APPENDS", "SEGMENT_FLOOR", "MAX_SEGMENTS")
#: Bytes of a snapshot part.
CHUNK = 1500
#: Jobs of the model (ids of one length: entries of one size).
JOBS = tuple(range(1000, 1008))
#: Holds of one job at most (max-holds, as configured by default).
MAX_HOLDS = 64
#: "About twice": a cancel entry is 0.85 of a hold's, and the policy
#: reckons an entry as the last snapshot measured one.
RATIO = 2.5


def log_bytes(port):
    """What the log takes in the KVS: its key and its segments."""
    return len(port.hold_log())


def written(port):
    """``(appended, snapshots)``: bytes of records appended to the log's
    key, and bytes written by snapshots (whole, or parts and swaps)."""
    appended = snapshots = 0
    for key, text, append in port.commits:
        if key == KEY and append:
            appended += len(text)
        elif key == KEY:
            snapshots += len(text)
    for ops in port.txns:
        for op, key, value in ops:
            if op == "append" and key == KEY:
                appended += len(value)
            elif op in ("put", "append") and key == SIDE_KEY:
                snapshots += len(value)
            elif op == "put" and key == KEY and not _rotation(ops):
                snapshots += len(value)
            elif op == "put" and key == KEY:
                appended += len(value)
    return appended, snapshots


def _rotation(ops):
    """True if transaction ``ops`` makes the key a segment (its put is the
    batch of records)."""
    return any(op == "put_treeobj" and key != KEY for op, key, _ in ops)


class CompactionMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.saved = tuple(getattr(holdlog, name) for name in LIMIT_NAMES)
        for name, value in zip(LIMIT_NAMES, LIMITS):
            setattr(holdlog, name, value)
        self.port = FakePort()
        self.gate = Gate(self.port, Config(snapshot_chunk=CHUNK))
        for jobid in JOBS:
            self.port.add_job(jobid, SCHED, USER)
        self.next = {jobid: 0 for jobid in JOBS}
        self.peak = 0

    def teardown(self):
        for name, value in zip(LIMIT_NAMES, self.saved):
            setattr(holdlog, name, value)

    def live_bytes(self):
        return sum(
            len(hold_entry(hold))
            for job in self.gate.jobs.values()
            for hold in job.holds.values()
        )

    @rule(jobid=st.sampled_from(JOBS), count=st.integers(1, 40))
    def hold(self, jobid, count):
        if self.port.jobs[jobid].state != SCHED:
            return
        job = self.gate.jobs.get(jobid)
        count = min(count, MAX_HOLDS - (len(job.holds) if job else 0))
        for _ in range(count):
            self.gate.hold(jobid, f"d{self.next[jobid]:04d}")
            self.next[jobid] += 1
        self.peak = max(self.peak, self.live_bytes())

    @rule()
    def fill(self):
        """Every job waiting holds all it can."""
        for jobid in JOBS:
            self.hold(jobid, MAX_HOLDS)

    @rule()
    def drain(self):
        """Every hold is released."""
        for jobid in JOBS:
            self.release(jobid, 1.0)

    @rule(jobid=st.sampled_from(JOBS), share=st.floats(0.1, 1.0))
    def release(self, jobid, share):
        """Release a share of the job's holds (pending: cancel entries;
        active: release entries, kept by snapshots for a while)."""
        job = self.gate.jobs.get(jobid)
        if job is None:
            return
        descriptions = sorted(job.holds)
        for description in descriptions[: max(1, int(len(descriptions) * share))]:
            self.gate.release(jobid, description, 0, done=lambda *args: None)

    @rule(jobid=st.sampled_from(JOBS))
    def cleanup(self, jobid):
        """The job reaches its epilog: its holds become active."""
        if self.port.jobs[jobid].state == SCHED and jobid in self.gate.jobs:
            self.port.set_state(jobid, CLEANUP)
            self.gate.on_cleanup(jobid)

    @rule(seconds=st.sampled_from((0.001, 0.5, 3.0)))
    def advance(self, seconds):
        self.port.advance(seconds)

    @rule()
    def idle(self):
        """Nothing comes for a while: the release entries expire, and the
        log is within its bound."""
        self.port.advance(holdlog.RELEASE_GRACE + 1.0)
        live = self.live_bytes()
        bound = max(holdlog.MAX_BYTES, RATIO * live)
        assert log_bytes(self.port) <= bound, (log_bytes(self.port), live, self.peak)

    @invariant()
    def the_log_is_the_holds(self):
        assert replayed(self.port.hold_log()) == gate_holds(self.gate)

    @invariant()
    def snapshots_are_paid_for(self):
        appended, snapshots = written(self.port)
        assert snapshots <= 3 * appended + holdlog.MAX_BYTES, (appended, snapshots)


CompactionMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_compaction = CompactionMachine.TestCase
