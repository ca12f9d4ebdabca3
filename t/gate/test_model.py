"""A model-based test of the gate through its port (hypothesis' stateful
testing): random sequences of hold, release (status 0 or not), job
progress and cancel, watch, list, hold-log snapshots, plugin reload,
job-manager restart and crash, against a fake instance (modeljm.py) and
the plugin's load path (modeldriver.py), checked against a model of what
was acknowledged:

- every load succeeds;
- no acknowledged hold is lost: it is listed, and its job does not post
  ``clean`` (epilog point) or get its start request (prolog point) until
  a release was sent for it or its timeout may have expired;
- one finish per start: no gate epilog/prolog action is started twice or
  finished when not started;
- every watcher sees every activation once per stream;
- every acknowledged hold of a job that the restart drops (its eventlog
  checkpointed with ``submit`` alone) is reported lost: kept in the
  record of lost holds until a watcher that asks for lost holds
  acknowledges it, sent once to each such watcher, and never again
  once acknowledged (unless a crash undid the record's update);
- once everything is released and every job cancelled, every job goes
  inactive (nothing hangs).

A request not answered when the instance goes away may or may not have
taken effect: the model holds the gate only to what it acknowledged.

GATE_MODEL_EXAMPLES sets the number of runs (for a soak); the default
keeps ``make check`` fast.
"""

import math
import os
import syslog
from collections import Counter

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)
from hypothesis_settings import running, stateful

from flux_epilog_gate.errors import GateError
from flux_epilog_gate.gate import CLEANUP, INACTIVE, RUN, SCHED, holdlog
from flux_epilog_gate.gate.holdlog import MARKER
from flux_epilog_gate.gate.holds import EPILOG, PROLOG, RECOVERY_DESCRIPTION
from flux_epilog_gate.gate.lost import WHY
from flux_epilog_gate.jobid import f58

from .modeldriver import Carried, Driver
from .modeljm import Clock, FakeJobManager, FakeKVS, Sink

#: Descriptions the requests use, with the timeout of their holds.
TIMEOUTS = {"a": None, "b": None, "t": 5.0}

#: Description of the holds that fill the log up to a snapshot.
CHURN = "churn"

#: Appends between snapshots of the hold log, for the run (holdlog.py's
#: MAX_APPENDS): small, so that snapshots come amid ordinary traffic.
SNAPSHOT_EVERY = 8

#: Bytes of a snapshot past which the log goes on in a new segment, and
#: segments between snapshots (holdlog.py's SEGMENT_FLOOR, MAX_SEGMENTS):
#: a snapshot of two holds or more is followed by segments.
SEGMENT_FLOOR = 200
SEGMENTS = 3

#: Seconds the job-manager batches the events posted before it sends
#: them to the KVS (flux-core's event batch timeout).
EVENT_BATCH = 0.01

MAX_JOBS = 3
USER = 1000
#: A soak (GATE_MODEL_EXAMPLES set) draws new sequences each run; the
#: default run always draws the same ones, so that make check is stable.
SOAK = "GATE_MODEL_EXAMPLES" in os.environ
EXAMPLES = int(os.environ.get("GATE_MODEL_EXAMPLES", "200"))
STEPS = int(os.environ.get("GATE_MODEL_STEPS", "50"))

JOB = st.integers(min_value=0, max_value=MAX_JOBS - 1)
POINT = st.sampled_from([EPILOG, PROLOG])


class Key:
    """What was asked of one (job, description)."""

    def __init__(self):
        #: Sequence number of the last release sent (0: none).
        self.last_release = 0
        #: When the first hold request since the last release was sent.
        self.live_since = None


class Kept:
    """An acknowledged hold that no release has been sent for."""

    def __init__(self, point, deadline):
        self.point = point
        self.deadline = deadline


class Pairing:
    """The gate's perilog actions in a job's eventlog: those left open,
    ``{(kind, description): count}``, and what is wrong with their
    pairing (a second start before the finish, a finish with no start)."""

    def __init__(self):
        self.open = Counter()
        self.wrong = []
        self.seen = 0

    def feed(self, entries):
        for _, name, context in entries:
            self.seen += 1
            kind, _, what = name.partition("-")
            if kind not in ("epilog", "prolog") or not context.get(MARKER):
                continue
            key = (kind, context["description"])
            if what == "start":
                if self.open[key] and key[1] != RECOVERY_DESCRIPTION:
                    self.wrong.append(f"second {name} {key[1]} before its finish")
                self.open[key] += 1
            elif what == "finish":
                if not self.open[key]:
                    self.wrong.append(f"{name} {key[1]} with no start")
                else:
                    self.open[key] -= 1

    def opened(self):
        return [key for key, count in self.open.items() if count > 0]


def _pairing(job):
    """The job's :class:`Pairing`, up to date with its eventlog."""
    pairing = getattr(job, "pairing", None)
    if pairing is None:
        pairing = job.pairing = Pairing()
    pairing.feed(job.eventlog[pairing.seen :])
    return pairing


class GateModel(RuleBasedStateMachine):
    """The instance, the plugin and a model of what it acknowledged."""

    def __init__(self):
        super().__init__()
        self.clock = Clock()
        self.kvs = FakeKVS()
        self.jm = FakeJobManager(self.kvs, self.clock, self)
        self.jobids = []
        self.next_id = 100
        self.seq = 0
        self.keys = {}
        self.kept = {}
        self.start_requested = set()
        self.facts = []
        self.sinks = []
        self.violations = []
        # Pending holds a restart lost to the platform limit (see _replay).
        self.platform_losses = set()
        # Acknowledged holds of jobs a restart dropped: each must be
        # reported lost.
        self.lost_expected = set()
        # Lost holds a watcher acknowledged, with the crash count then.
        self.lost_acked = {}
        self.crashes = 0
        self.replaying = False
        self.driver = None
        self.limits = (holdlog.MAX_APPENDS, holdlog.SEGMENT_FLOOR, holdlog.MAX_SEGMENTS)
        holdlog.MAX_APPENDS, holdlog.SEGMENT_FLOOR, holdlog.MAX_SEGMENTS = (
            SNAPSHOT_EVERY,
            SEGMENT_FLOOR,
            SEGMENTS,
        )
        self._load(Carried())

    def teardown(self):
        holdlog.MAX_APPENDS, holdlog.SEGMENT_FLOOR, holdlog.MAX_SEGMENTS = self.limits

    # Observing the job-manager (called by FakeJobManager)

    def event(self, job, entry, old):
        _, name, context = entry
        description = context.get("description")
        if (
            name in ("epilog-start", "prolog-start")
            and context.get(MARKER)
            and description != RECOVERY_DESCRIPTION
        ):
            point = EPILOG if name == "epilog-start" else PROLOG
            self.facts.append(((job.id, description, point, False), True))
        if job.state == CLEANUP and old != CLEANUP:
            opened = _pairing(job).opened()
            for kind, description in opened:
                if kind == "prolog" and description != RECOVERY_DESCRIPTION:
                    fact = (job.id, description, PROLOG, True)
                    self.facts.append((fact, self._certain(job.id, description)))
        if name == "clean":
            for (jobid, description), kept in list(self.kept.items()):
                if jobid != job.id or kept.point != EPILOG or not self._binding(kept):
                    continue
                if self.replaying:
                    self.platform_losses.add((jobid, description))
                    del self.kept[(jobid, description)]
                else:
                    self.violations.append(
                        f"job {jobid} posted clean while acknowledged hold "
                        f"{description} keeps it"
                    )

    def dropped(self, jobid):
        """The restarting job-manager dropped the job (its eventlog
        replays to NEW): its acknowledged holds will never end well, and
        must be reported lost."""
        for key in [key for key in self.kept if key[0] == jobid]:
            self.lost_expected.add(key)
            del self.kept[key]

    def start_request(self, job):
        self.start_requested.add(job.id)
        for (jobid, description), kept in self.kept.items():
            if jobid == job.id and kept.point == PROLOG and self._binding(kept):
                self.violations.append(
                    f"job {jobid} was sent its start request while acknowledged "
                    f"prolog hold {description} keeps it"
                )

    def _binding(self, kept):
        return self.clock.now < kept.deadline

    def _certain(self, jobid, description):
        """True if the model knows the hold is still wanted: no release
        sent since its last hold, no timeout that may have expired."""
        kept = self.kept.get((jobid, description))
        return kept is not None and self._binding(kept)

    # The plugin

    def _load(self, carried):
        self.driver = Driver(self.jm, carried, self.violations)
        try:
            self.driver.commit()
            if self.driver.load.first:
                # The first load's mark of the KVS, sent before any job
                # exists: the KVS has applied it by the first step.
                self.jm.kvs.apply_next()
            self.driver.announce()
            # The load timer (0 s) fires on the next turn of the reactor.
            self.advance(0.0)
        except Exception as exc:
            raise AssertionError(f"load failed: {type(exc).__name__}: {exc}") from exc

    def _end_streams(self, why):
        for sink in self.sinks:
            if sink.open:
                sink.end(why)

    @rule(how=st.sampled_from(["reload", "restart", "crash"]))
    def go_down(self, how):
        """The plugin or the instance goes away and comes back."""
        getattr(self, how)()

    def reload(self):
        """flux jobtap remove, then load: the gate is carried over."""
        self.driver.unload()
        self._load(self.driver.state)

    def restart(self):
        """flux module reload job-manager: what is queued is committed, a
        new job-manager rebuilds its jobs from the KVS."""
        self.driver.unload()
        self._end_streams("restart")
        self.jm.flush()
        self.kvs.apply_all()
        self._restarted(self._replay())

    def _replay(self):
        """A new job-manager rebuilds its jobs from the KVS.  A job left in
        CLEANUP with no perilog action open is freed and cleaned then,
        before any plugin sees it (flux-core restart.c): its pending
        holds are lost, a platform limit the load reports (see
        test_a_restart_reports_the_hold_of_a_job_cancelled_before_its_epilog_point).
        A hold that should have been active keeps its action open, and
        epilog_holds_are_active_past_the_point checked that before."""
        self.replaying = True
        try:
            return FakeJobManager.restart(self.kvs, self.clock, self)
        finally:
            self.replaying = False

    def _restarted(self, jm):
        self.jm = jm
        # A job that the crash sent back before RUN will be started anew.
        for job in jm.jobs.values():
            if job.state < RUN:
                self.start_requested.discard(job.id)
        self._load(Carried())

    def crash(self):
        """SIGKILL of the broker, then a restart on its state: back to the
        last checkpoint; unanswered requests stay unanswered."""
        self.driver.port.close()
        self._end_streams("crash")
        self.kvs.crash()
        self.crashes += 1
        self._restarted(self._replay())

    # Jobs

    def _job(self, index):
        if not self.jobids:
            return None
        return self.jm.jobs.get(self.jobids[index % len(self.jobids)])

    @precondition(lambda self: len(self.jobids) < MAX_JOBS)
    @rule()
    def submit(self):
        jobid = self.next_id
        self.next_id += 1
        self.jobids.append(jobid)
        self.jm.submit(jobid, USER)

    @precondition(lambda self: self.jobids)
    @rule(
        index=JOB, what=st.sampled_from(["alloc", "exec_start", "exec_end", "cancel"])
    )
    def progress(self, index, what):
        """Job ``index`` among those ``what`` applies to moves on."""
        applies = getattr(self, f"_{what}_applies")
        jobs = [job for job in self.jm.active() if applies(job)]
        if jobs:
            getattr(self, what)(self.jobids.index(jobs[index % len(jobs)].id))

    @staticmethod
    def _alloc_applies(job):
        return job.state == SCHED

    @staticmethod
    def _exec_start_applies(job):
        return job.state == RUN and job.start_pending and not job.started

    @staticmethod
    def _exec_end_applies(job):
        return job.start_pending and (job.started or job.state == CLEANUP)

    @staticmethod
    def _cancel_applies(job):
        return job.state not in (CLEANUP, INACTIVE)

    def alloc(self, index):
        job = self._job(index)
        if job is not None and self._alloc_applies(job):
            self.jm.post(job, "alloc")

    def exec_start(self, index):
        job = self._job(index)
        if job is not None and self._exec_start_applies(job):
            self.jm.exec_start(job)

    def exec_end(self, index):
        job = self._job(index)
        if job is not None and self._exec_end_applies(job):
            self.jm.exec_end(job)

    def cancel(self, index):
        job = self._job(index)
        if job is not None and self._cancel_applies(job):
            self.jm.post(job, "exception", {"type": "cancel", "severity": 0})

    # Requests

    def _key(self, jobid, description):
        return self.keys.setdefault((jobid, description), Key())

    def _hold(self, jobid, description, point):
        self.seq += 1
        seq = self.seq
        key = self._key(jobid, description)
        if key.live_since is None:
            key.live_since = self.clock.now
        timeout = TIMEOUTS.get(description)

        def answer(hold, error):
            if error is not None or seq < key.last_release:
                return
            if point == PROLOG and jobid in self.start_requested:
                self.violations.append(
                    f"prolog hold {description} acknowledged on job {jobid}, "
                    "whose start request was sent"
                )
            deadline = math.inf if timeout is None else key.live_since + timeout
            self.kept[(jobid, description)] = Kept(point, deadline)

        self.driver.hold(jobid, description, timeout, point, answer)

    def _release(self, jobid, description, status):
        self.seq += 1
        key = self._key(jobid, description)
        key.last_release = self.seq
        key.live_since = None
        self.kept.pop((jobid, description), None)
        self.driver.release(jobid, description, status, lambda result, error: None)

    @precondition(lambda self: self.jobids)
    @rule(index=JOB, description=st.sampled_from(sorted(TIMEOUTS)), point=POINT)
    def hold(self, index, description, point):
        self._hold(self.jobids[index % len(self.jobids)], description, point)

    @precondition(lambda self: self.jobids)
    @rule(
        index=JOB,
        description=st.sampled_from(sorted(TIMEOUTS)),
        status=st.sampled_from([0, 0, 1]),
    )
    def release(self, index, description, status):
        self._release(self.jobids[index % len(self.jobids)], description, status)

    @precondition(lambda self: self.jobids and self.driver.ready)
    @rule(index=JOB)
    def churn(self, index):
        """Holds and releases until the log is replaced by a snapshot:
        the last release's commit is one."""
        jobid = self.jobids[index % len(self.jobids)]
        log = self.driver.gate.holdlog
        for _ in range(holdlog.MAX_APPENDS + 1):
            self._hold(jobid, CHURN, EPILOG)
            self.kvs.apply_all()
            last = log.appends >= holdlog.MAX_APPENDS
            self._release(jobid, CHURN, 0)
            self.kvs.apply_all()
            if last:
                break

    @rule()
    def list_holds(self):
        self.driver.list(self._check_list)

    def _check_list(self, holds):
        listed = {(h["id"], h["description"], h["point"]) for h in holds}
        for (jobid, description), kept in self.kept.items():
            job = self.jm.jobs.get(jobid)
            if not self._binding(kept) or job is None or job.state == INACTIVE:
                continue
            if kept.point == PROLOG and job.state == CLEANUP:
                continue
            if (jobid, description, kept.point) not in listed:
                self.violations.append(
                    f"list lacks acknowledged hold {description} of job {jobid} "
                    f"(listed: {sorted(listed)})"
                )

    @rule(lost=st.booleans())
    def watch(self, lost=False):
        sink = Sink(len(self.sinks))
        sink.expected = Counter()
        sink.maybe = Counter()
        sink.facts_from = None
        sink.lost = lost
        self.sinks.append(sink)
        self.driver.watch(sink, lambda: self._watching(sink), lost)

    @precondition(lambda self: any(s.open and s.lost for s in self.sinks))
    @rule()
    def acknowledge_lost(self):
        """Each open watcher of lost holds acknowledges what it read."""
        for sink in self.sinks:
            if not (sink.open and sink.lost and self.driver.ready):
                continue
            try:
                self.driver.gate.acknowledge(
                    lambda s, k=sink: s is k, len(sink.received)
                )
            except GateError:
                continue
            for payload in sink.received:
                if payload.get("lost"):
                    key = (payload["id"], payload["description"])
                    self.lost_acked.setdefault(key, self.crashes)

    def _watching(self, sink):
        """The watch starts: it is owed every hold active now, and every
        activation from now on."""
        for job in self.jm.active():
            for kind, description in _pairing(job).opened():
                if description == RECOVERY_DESCRIPTION:
                    continue
                point = EPILOG if kind == "epilog" else PROLOG
                aborted = point == PROLOG and job.state == CLEANUP
                key = (job.id, description, point, aborted)
                if self._certain(job.id, description) or self._unreleased(
                    job.id, description
                ):
                    sink.expected[key] += 1
                else:
                    sink.maybe[key] += 1
        sink.facts_from = len(self.facts)

    def _unreleased(self, jobid, description):
        """No release was ever sent for the hold, and it has no timeout."""
        key = self.keys.get((jobid, description))
        return (key is None or not key.last_release) and TIMEOUTS.get(
            description
        ) is None

    @precondition(lambda self: any(sink.open for sink in self.sinks))
    @rule(which=st.integers(min_value=0, max_value=20))
    def unwatch(self, which):
        sinks = [sink for sink in self.sinks if sink.open]
        sink = sinks[which % len(sinks)]
        self.driver.disconnect(sink)
        sink.end("disconnected")

    # The reactor: what arrives, in any order

    @rule()
    def flush_events(self):
        self.jm.flush()

    def kvs_apply_all(self):
        self.kvs.apply_all()

    @precondition(lambda self: self.kvs.queue)
    @rule(every=st.booleans())
    def kvs_apply(self, every=False):
        """The KVS applies the oldest commit sent, or every one."""
        if every:
            self.kvs.apply_all()
        else:
            self.kvs.apply_next()

    @precondition(lambda self: not self.kvs.failing)
    @rule()
    def kvs_fails_next(self):
        self.kvs.failing = 1

    @precondition(lambda self: self.jm.reads)
    @rule(which=st.integers(min_value=0, max_value=20))
    def answer_read(self, which):
        self.jm.answer_read(which % len(self.jm.reads))

    @rule(seconds=st.sampled_from([0.0, 0.5, 2.5]))
    def advance(self, seconds):
        target = self.clock.now + seconds
        if seconds >= EVENT_BATCH:
            # The job-manager's event batch timer has fired meanwhile: the
            # gate's own timers that wait for it (BATCH_WAIT) are longer.
            self.jm.flush()
        port = self.driver.port
        while True:
            due = [t for t in port.timers if t.armed and t.deadline <= target]
            if not due:
                break
            timer = min(due, key=lambda t: t.deadline)
            self.clock.now = max(self.clock.now, timer.deadline)
            timer.armed = False
            timer.callback()
            port = self.driver.port
        self.clock.now = target

    # Nothing hangs

    @rule()
    def settle(self):
        """Release every hold, cancel every job and let everything
        arrive: every job must go inactive."""
        for job in self.jm.active():
            if job.state != CLEANUP:
                self.jm.post(job, "exception", {"type": "cancel", "severity": 0})
        for _ in range(100):
            before = self._progress()
            while self.jm.reads:
                self.jm.answer_read(0)
            self.advance(0.0)
            self.jm.flush()
            self.kvs.failing = 0
            self.kvs.apply_all()
            for job in self.jm.active():
                if job.start_pending:
                    self.jm.exec_end(job)
            listed = []
            self.driver.list(listed.extend)
            for hold in listed:
                self._release(hold["id"], hold["description"], 0)
            if self._progress() == before:
                break
        stuck = {
            job.id: (job.state, job.perilog, dict(_pairing(job).open))
            for job in self.jm.active()
        }
        assert not stuck, f"jobs that never go inactive: {stuck}"
        self.lost_holds_reported()

    def _progress(self):
        return (
            sum(len(job.eventlog) for job in self.jm.jobs.values()),
            len(self.kvs.queue),
            len(self.jm.reads),
            self.driver.ready,
            len(self.kept),
        )

    # Invariants

    def check_all(self):
        """Every invariant, now (for the examples below)."""
        self.nothing_went_wrong()
        self.lost_holds_reported()
        self.acknowledged_epilog_holds_keep_their_jobs()
        self.one_finish_per_start()
        self.watchers_see_every_activation_once()
        self.epilog_holds_are_active_past_the_point()

    @invariant()
    def nothing_went_wrong(self):
        assert not self.violations, self.violations

    @invariant()
    def acknowledged_epilog_holds_keep_their_jobs(self):
        for (jobid, description), kept in self.kept.items():
            if kept.point != EPILOG or not self._binding(kept):
                continue
            job = self.jm.jobs.get(jobid)
            assert job is not None and job.state != INACTIVE, (
                f"job {jobid} is gone while acknowledged hold {description} " "keeps it"
            )

    @invariant()
    def epilog_holds_are_active_past_the_point(self):
        """A job in CLEANUP that got its ``finish`` or ``free`` is at its
        epilog point: each acknowledged epilog hold of it is active (its
        ``epilog-start`` is open), once the gate knows the job's holds."""
        if self.driver is None or not self.driver.ready:
            return
        records = self.driver.gate.jobs
        for (jobid, description), kept in self.kept.items():
            job = self.jm.jobs.get(jobid)
            if (
                kept.point != EPILOG
                or not self._binding(kept)
                or job is None
                or job.state != CLEANUP
                or (jobid in records and records[jobid].recovering)
                or not any(name in ("finish", "free") for _, name, _ in job.eventlog)
            ):
                continue
            assert ("epilog", description) in _pairing(job).opened(), (
                f"job {jobid} is past its epilog point, but acknowledged "
                f"hold {description} is not active"
            )

    @invariant()
    def lost_holds_come_once(self):
        """A watcher of lost holds gets each once, and none that was
        acknowledged before, unless a crash came between."""
        for sink in self.sinks:
            seen = Counter(
                (a["id"], a["description"]) for a in sink.received if a.get("lost")
            )
            twice = [key for key, n in seen.items() if n > 1]
            assert not twice, f"watcher {sink.number}: lost holds sent twice: {twice}"
            if not sink.lost:
                assert not seen, f"watcher {sink.number} did not ask for lost holds"

    @invariant()
    def lost_holds_reported(self):
        """Once the load has read every eventlog it asked for: every hold
        of a dropped job is kept in the record of lost holds, or a
        watcher acknowledged it."""
        if self.driver is None or not self.driver.ready or self.jm.reads:
            return
        record = self.driver.gate.lost_record
        missing = sorted(
            key
            for key in self.lost_expected
            if key not in record and key not in self.lost_acked
        )
        assert not missing, f"holds of dropped jobs never reported lost: {missing}"

    @invariant()
    def one_finish_per_start(self):
        for job in self.jm.jobs.values():
            wrong = _pairing(job).wrong
            assert not wrong, f"job {job.id}: {wrong}"

    @invariant()
    def watchers_see_every_activation_once(self):
        for sink in self.sinks:
            if not sink.open or sink.facts_from is None:
                continue
            expected = Counter(sink.expected)
            maybe = Counter(sink.maybe)
            for fact, certain in self.facts[sink.facts_from :]:
                (expected if certain else maybe)[fact] += 1
            received = Counter(
                (a["id"], a["description"], a["point"], a.get("aborted", False))
                for a in sink.received
                if not a.get("lost")
            )
            for key in set(expected) | set(maybe) | set(received):
                assert expected[key] <= received[key] <= expected[key] + maybe[key], (
                    f"watcher {sink.number}: {key} received {received[key]} "
                    f"times, expected {expected[key]} (+{maybe[key]} maybe)"
                )


TestGateModel = stateful(GateModel, EXAMPLES, STEPS, SOAK)


# Sequences the machine found, kept as examples.


@pytest.fixture
def model():
    yield from running(GateModel)


def run_steps(model, *steps):
    """Run ``(rule, args...)`` steps, checking every invariant after each."""
    for name, *args in steps:
        getattr(model, name)(*args)
        model.check_all()


def test_a_snapshot_that_keeps_nothing_then_a_crash_still_loads(model):
    """Issue 17 item 1: a snapshot with no hold left writes an empty value,
    which the KVS reads back as NULL; the load after a crash failed."""
    run_steps(model, ("advance", 0.0), ("submit",), ("churn", 0))
    assert holdlog.parse(model.kvs.checkpoint[holdlog.KEY]) == ({}, [])
    run_steps(model, ("crash",), ("advance", 0.0))
    assert model.driver.ready


def test_a_watch_during_recovery_gets_the_holds_already_active(model):
    """Issue 17 item 4: a watcher that came while the gate was reading
    eventlogs never got the holds already active."""
    run_steps(
        model,
        ("advance", 0.0),
        ("submit",),
        ("hold", 0, "a", EPILOG),
        ("kvs_apply",),
        ("cancel", 0),
        ("restart",),
        ("watch",),
        ("list_holds",),
        ("answer_read", 0),
        ("advance", 0.0),
    )
    (sink,) = model.sinks
    assert [a["description"] for a in sink.received] == ["a"]


def test_a_restart_reports_the_hold_of_a_job_cancelled_before_its_epilog_point(
    model,
):
    """A platform limit, reported: a restarted job-manager frees and cleans
    a job left in CLEANUP with no perilog action open (its processes had
    not ended) before any plugin sees its job.new (flux-core restart.c,
    restart_map_cb), so its pending hold cannot be kept.  The load then
    reports it: a line at level error naming it, and the ``lost``
    counter."""
    run_steps(
        model,
        ("advance", 0.0),
        ("submit",),
        ("hold", 0, "a", EPILOG),
        ("kvs_apply",),
        ("alloc", 0),
        ("cancel", 0),
    )
    jobid = model.jobids[0]
    model.restart()
    while model.jm.reads:
        model.jm.answer_read(0)
    # Told apart from a violation: the job was cleaned by the restart
    # itself, before the plugin was loaded.
    assert model.violations == []
    assert model.platform_losses == {(jobid, "a")}
    assert model.driver.gate.stats["lost"] == 1
    assert [
        text
        for level, text in model.driver.port.logs
        if level == syslog.LOG_ERR and "was lost" in text
    ] == [f"hold a of job {f58(jobid)} was lost: {WHY}"]


def test_a_crash_that_undoes_a_cancel_keeps_the_prolog_hold(model):
    run_steps(
        model,
        ("submit",),
        ("hold", 0, "a", PROLOG),
        ("kvs_apply", True),
        ("cancel", 0),
        ("kvs_apply", True),
        ("crash",),
        ("answer_read", 0),
        ("list_holds",),
    )


def test_a_hold_whose_record_failed_at_unload_does_not_hang_its_job(model):
    run_steps(
        model,
        ("submit",),
        ("kvs_fails_next",),
        ("hold", 0, "a", EPILOG),
        ("cancel", 0),
        ("restart",),
        ("settle",),
    )


def test_a_hold_asked_again_is_not_acknowledged_once_withdrawn(model):
    run_steps(
        model,
        ("kvs_fails_next",),
        ("submit",),
        ("hold", 0, "b", EPILOG),
        ("hold", 0, "a", EPILOG),
        ("hold", 0, "b", EPILOG),
        ("kvs_apply", True),
        ("list_holds",),
    )


def test_a_job_that_runs_during_recovery_gets_one_recovery_finish(model):
    run_steps(
        model,
        ("submit",),
        ("hold", 0, "a", EPILOG),
        ("kvs_apply", True),
        ("restart",),
        ("alloc", 0),
        ("flush_events",),
        ("kvs_apply", False),
        ("settle",),
    )


def test_a_crash_that_undoes_a_cancel_during_recovery_keeps_the_prolog_hold(model):
    run_steps(
        model,
        ("submit",),
        # The job's validate goes with the hold's checkpoint: the crash
        # does not drop the job.
        ("flush_events",),
        ("hold", 0, "a", PROLOG),
        ("settle",),
        ("crash",),
        ("settle",),
        ("crash",),
        ("list_holds",),
        ("answer_read", 0),
    )


def test_a_reload_during_recovery_keeps_the_start_of_a_prolog_held_job_back(model):
    run_steps(
        model,
        ("submit",),
        ("submit",),
        ("hold", 1, "a", PROLOG),
        ("churn", 0),
        ("go_down", "restart"),
        ("go_down", "reload"),
        ("progress", 1, "alloc"),
    )


@pytest.mark.parametrize(
    "point, step",
    [(PROLOG, ("progress", 0, "alloc")), (EPILOG, ("cancel", 0))],
    ids=["prolog-in-run", "epilog-in-cleanup"],
)
def test_a_hold_started_whose_record_failed_ends_after_restart(model, point, step):
    """The commit in flight with the hold's record fails after the plugin
    went away, and the hold was made active meanwhile.  The load reads no
    job in RUN that the log does not name, so the record must reach the
    log (the plugin's last commit carries it again), or a prolog hold's
    job never starts, nor, cancelled, goes inactive."""
    run_steps(
        model,
        ("kvs_fails_next",),
        ("submit",),
        ("hold", 0, "a", point),
        step,
        ("restart",),
        ("watch",),
        ("settle",),
    )


def test_a_job_dropped_at_a_crash_has_its_holds_reported_lost_once(model):
    """The hold's synced commit checkpoints the job's ``submit`` and not
    yet its ``validate``: the restart after a crash drops the job
    (flux-core moves it to job-lost+found).  Each of its holds is lost:
    logged at level error by name, counted, kept for a watcher of lost
    holds, sent to it once, and not again once acknowledged."""
    run_steps(
        model,
        ("submit",),
        ("hold", 0, "a", EPILOG),
        ("hold", 0, "b", PROLOG),
        ("kvs_apply", True),
        ("crash",),
    )
    jobid = model.jobids[0]
    assert model.lost_expected == {(jobid, "a"), (jobid, "b")}
    run_steps(model, ("watch", True), ("answer_read", 0))
    assert model.driver.gate.stats["lost"] == 2
    errors = [t for level, t in model.driver.port.logs if level == syslog.LOG_ERR]
    for description in ("a", "b"):
        assert any(
            f"hold {description} of job {f58(jobid)} was lost" in t for t in errors
        )
    (sink,) = model.sinks
    assert sorted((a["description"], a["point"]) for a in sink.received) == [
        ("a", EPILOG),
        ("b", PROLOG),
    ]
    assert all(a["lost"] and a["reason"].startswith("lost: ") for a in sink.received)
    run_steps(model, ("acknowledge_lost",), ("kvs_apply", True), ("crash",))
    run_steps(model, ("watch", True), ("settle",))
    assert model.sinks[1].received == []
    assert len(model.driver.gate.lost_record) == 0


#: Job 0 held, a snapshot, then a crash that drops the job (its events
#: were never sent): the next load checks its eventlog.
DROPPED_AT_A_CRASH = (
    ("submit",),
    ("hold", 0, "a", EPILOG),
    ("churn", 0),
    ("crash",),
)


def test_a_lost_hold_acknowledged_while_its_job_is_checked_again_comes_once(model):
    """A crash drops the job; the next load finds its hold lost, and the
    module reload after it reads both the record of lost holds and the
    hold log (whose cancel waited on that record).  A watcher that
    acknowledges the hold from the record before the eventlog read of
    the second load answers was sent it again."""
    run_steps(
        model,
        *DROPPED_AT_A_CRASH,
        ("answer_read", 0),
        ("restart",),
        ("watch", True),
        ("acknowledge_lost",),
        ("settle",),
    )
    (sink,) = model.sinks
    assert [(a["id"], a["description"]) for a in sink.received] == [
        (model.jobids[0], "a")
    ]


def test_a_snapshot_while_a_dropped_job_is_checked_keeps_its_holds(model):
    """A snapshot made while the load still reads the eventlog of a job
    the log names but the job-manager dropped wrote none of its holds:
    a restart then never reported them lost."""
    run_steps(
        model,
        ("submit",),
        ("hold", 0, "a", EPILOG),
        ("submit",),
        ("churn", 0),
        ("crash",),
        ("submit",),
        ("churn", 2),
        ("restart",),
        ("settle",),
    )
    assert (model.jobids[0], "a") in model.lost_acked or (
        (model.jobids[0], "a") in model.driver.gate.lost_record
    )


def test_a_reload_while_a_dropped_job_is_checked_reads_it_again(model):
    """The eventlog reads of the jobs the log names but the job-manager
    dropped are answered to the plugin instance that made them: after a
    reload nothing ever reported their holds lost."""
    run_steps(
        model,
        *DROPPED_AT_A_CRASH,
        ("reload",),
        ("answer_read", 0),
        ("settle",),
    )
    assert (model.jobids[0], "a") in model.driver.gate.lost_record


def test_a_snapshot_before_a_dropped_prolog_holds_cancel_is_recorded_keeps_it(model):
    """A pending prolog hold is dropped as its job is cancelled, with no
    record until the job-manager has sent the cancel to the KVS.  A
    snapshot meanwhile left it out of the log: a crash that then undid
    the job's events (it is dropped, its eventlog had ``submit`` alone)
    never reported the hold lost."""
    run_steps(
        model,
        ("submit",),
        ("hold", 0, "a", PROLOG),
        ("hold", 0, "b", EPILOG),
        ("progress", 0, "cancel"),
        ("churn", 0),
        ("crash",),
        ("settle",),
    )
    jobid = model.jobids[0]
    assert {(jobid, "a"), (jobid, "b")} <= model.lost_expected
    assert (jobid, "a") in model.driver.gate.lost_record
