"""The plugin's kept requests (plugin/fast.py, GatePort.own_request):
a hold or release holds its request by a bare reference while its record
is committed, and exactly one answer, or a drop, gives it back.

No broker: EpilogGatePlugin drives the gate logic on a FakePort, and its
own port is a ledger of references and answers.  Whatever the requests,
refusals, commit outcomes and unloads, every reference taken is given
back exactly once, never after it was given back, and every request gets
one answer while the plugin is loaded.
"""

import errno
from collections import Counter
from types import SimpleNamespace

import pytest
from fakeport import FakePort
from hypothesis import given, settings
from hypothesis import strategies as st

from flux_epilog_gate.gate import Gate
from flux_epilog_gate.gate.config import Config
from flux_epilog_gate.gate.holds import ACTIVE, DEPEND, EPILOG, PROLOG
from flux_epilog_gate.gate.states import CLEANUP, INACTIVE, SCHED
from flux_epilog_gate.gate.states import DEPEND as DEPEND_STATE
from flux_epilog_gate.plugin import EpilogGatePlugin, driver

USER = 1000


class Ledger:
    """The plugin's jobtap and the gate's port, as far as answering
    requests goes."""

    plugin_name = "epilog-gate"

    def __init__(self):
        self.messages = self
        self.p = object()
        self.ffi = SimpleNamespace(string=lambda text: text)
        #: References taken and not given back, by request.
        self.owned = Counter()
        #: Answers sent, by request.
        self.answers = Counter()
        self.errors = []

    def load_options(self):
        return {}

    def own_request(self, msg):
        self.owned[msg] += 1
        return msg

    def drop_request(self, kept):
        self._give_back(kept)

    def answer_hold(self, kept, hold):
        self._answer(kept)
        self._give_back(kept)

    def answer_release(self, kept, released, reason=None):
        self._answer(kept)
        self._give_back(kept)

    def answer_error(self, kept, errnum, text):
        self._answer(kept)
        self._give_back(kept)

    def respond_error(self, msg, errnum, text):
        self._answer(msg)

    def keep_request(self, msg):
        # A reference Python's collector gives back: not the ledger's.
        return msg

    def _answer(self, msg):
        if self.p is None:
            self.errors.append(f"request {msg} answered after the unload")
        self.answers[msg] += 1

    def _give_back(self, kept):
        if self.owned[kept] <= 0:
            self.errors.append(f"request {kept}: a reference given back twice")
        self.owned[kept] -= 1

    def log(self, level, text):
        self.errors.append(text)

    def log_exception(self, where):
        self.errors.append(where)


class FakeLoad:
    """The plugin's load, as far as requests wait on it (gate/loader.py,
    Load.when_ready): recovering or ready, and closed by an unload."""

    def __init__(self):
        self.ready = True
        self.waiting = []

    def when_ready(self, run, refuse):
        if self.ready:
            run()
        else:
            self.waiting.append((run, refuse))

    def recovered(self):
        self.ready = True
        waiting, self.waiting = self.waiting, []
        for run, _ in waiting:
            run()

    def close(self):
        waiting, self.waiting = self.waiting, []
        for _, refuse in waiting:
            refuse()


class Harness:
    """An EpilogGatePlugin driving a gate on a FakePort with deferred
    commits; requests are numbered messages."""

    def __init__(self, max_pending=4):
        self.port = FakePort()
        self.port.defer_commits = True
        self.ledger = Ledger()
        # The ledger is the gate's port too.
        port, driver.GatePort = driver.GatePort, lambda jobtap: jobtap
        try:
            self.plugin = EpilogGatePlugin(self.ledger)
        finally:
            driver.GatePort = port
        self.plugin.gate = Gate(self.port, Config(max_pending=max_pending))
        self.plugin.load = FakeLoad()
        self.sent = 0
        self.unloaded = False

    def add_job(self, jobid, state):
        self.port.add_job(jobid, state, USER)

    def _msg(self):
        self.sent += 1
        return self.sent

    def _decoded(self):
        """A request as fastpath.c passes it: with a reference taken for
        the call to own."""
        return self.ledger.own_request(self._msg())

    def fast_hold(self, jobid, description, point=None, timeout=None):
        """As the extern gate_py_hold passes it, decoded."""
        point = EPILOG if point is None else point
        self.plugin.fast.hold(self._decoded(), jobid, description, timeout, point)

    def fast_release(self, jobid, description, status=0):
        self.plugin.fast.release(self._decoded(), jobid, description, status)

    def general_hold(self, jobid, description, point=None):
        point = EPILOG if point is None else point
        self._general(self.plugin.fast.hold_message, jobid, description, None, point)

    def general_release(self, jobid, description, status=0):
        self._general(self.plugin.fast.release_message, jobid, description, status)

    def _general(self, handle, *values):
        """The general path: a refusal is answered by the request's
        wrapper (jobtap/plugin.py), as _answers_refusals does."""
        msg = self._msg()
        try:
            handle(msg, *values)
        except Exception as exc:  # noqa: BLE001 - the wrapper's answer
            assert hasattr(exc, "errnum"), exc
            self.ledger.respond_error(msg, exc.errnum, exc.message)

    def commit(self, error=None):
        if self.port.pending_commits:
            self.port.complete_commit(error)

    def recovering(self):
        """Requests wait from now on, as while the gate recovers."""
        self.plugin.load.ready = False

    def recovered(self):
        self.plugin.load.recovered()

    def unload(self, orphan):
        """The plugin goes away; with ``orphan`` its commits in flight
        never call back, else they do, after it is gone."""
        self.plugin.load.close()
        self.plugin.gate.suspend()
        self.ledger.p = None
        self.unloaded = True
        if orphan:
            self.port.pending_commits.clear()

    def settle(self):
        if not self.unloaded:
            self.recovered()
        self.port.answer_all()
        self.port.advance(1.0)
        self.port.answer_all()

    def check(self):
        ledger = self.ledger
        assert ledger.errors == []
        given_back = {msg: n for msg, n in ledger.owned.items() if n != 0}
        assert given_back == {}, "references not given back"
        twice = {msg: n for msg, n in ledger.answers.items() if n > 1}
        assert twice == {}, "requests answered twice"
        if not self.unloaded:
            unanswered = set(range(1, self.sent + 1)) - set(ledger.answers)
            assert unanswered == set()


# Each refusal of the gate, on each path.


@pytest.fixture
def harness():
    h = Harness()
    h.add_job(1, SCHED)
    return h


REFUSED_HOLDS = [
    ("unknown job", lambda h: h.fast_hold(99, "bb")),
    ("inactive job", lambda h: (h.add_job(2, INACTIVE), h.fast_hold(2, "bb"))),
    ("depend point after DEPEND", lambda h: h.fast_hold(1, "bb", point=DEPEND)),
]


@pytest.mark.parametrize(
    "name,request_", REFUSED_HOLDS, ids=[n for n, _ in REFUSED_HOLDS]
)
def test_a_refused_fast_hold_gives_its_request_back_once(harness, name, request_):
    request_(harness)
    harness.settle()
    assert harness.plugin.gate.list() == []
    harness.check()


def test_a_fast_hold_refused_for_max_pending_gives_its_request_back():
    h = Harness(max_pending=2)
    h.add_job(1, SCHED)
    for description in ("a", "b", "c"):
        h.fast_hold(1, description)
    assert h.plugin.gate.requests.refused_busy == 1
    h.settle()
    h.check()


def test_a_fast_release_refused_for_max_pending_gives_its_request_back():
    h = Harness(max_pending=1)
    h.add_job(1, SCHED)
    h.fast_hold(1, "a")
    h.fast_release(1, "a")
    assert h.plugin.gate.requests.refused_busy == 1
    h.settle()
    h.check()


def test_a_release_of_an_unknown_job_gives_its_request_back(harness):
    harness.fast_release(99, "bb")
    harness.general_release(99, "bb")
    harness.settle()
    harness.check()


def test_a_refused_general_hold_gives_its_request_back(harness):
    harness.general_hold(99, "bb")
    harness.settle()
    harness.check()


def test_a_hold_whose_commit_fails_is_answered_with_the_error_once(harness):
    harness.fast_hold(1, "bb")
    harness.commit(errno.EIO)
    harness.settle()
    assert harness.plugin.gate.list() == []
    harness.check()


@pytest.mark.parametrize("end", ["recovered", "unload"])
def test_requests_that_wait_on_recovery_give_their_requests_back(harness, end):
    """Answered once the gate has recovered, or refused by the unload."""
    harness.recovering()
    harness.fast_hold(1, "a")
    harness.fast_release(1, "a")
    assert harness.ledger.answers == Counter()
    if end == "recovered":
        harness.recovered()
    else:
        harness.unload(orphan=False)
    harness.settle()
    assert harness.plugin.gate.list() == []
    harness.check()


def test_an_injected_request_fault_answers_and_gives_the_request_back(harness):
    """debug-fault=request makes the fast path raise before the gate has
    the request: answered once (EIO), its reference given back."""
    harness.plugin.gate.config.fault = "request"
    harness.fast_hold(1, "a")
    harness.fast_release(1, "a")
    assert harness.ledger.answers == Counter({1: 1, 2: 1})
    assert set(harness.ledger.owned.values()) == {0}
    assert harness.plugin.gate.list() == []


def test_holds_answered_after_the_unload_give_their_requests_back(harness):
    harness.fast_hold(1, "a")
    harness.fast_hold(1, "b")
    harness.unload(orphan=False)
    harness.settle()
    harness.check()


# Any sequence.

JOBS = st.integers(1, 4)
DESCRIPTIONS = st.sampled_from(["a", "b", "c"])
POINTS = st.sampled_from([None, EPILOG, PROLOG, DEPEND])
STEPS = st.one_of(
    st.tuples(st.just("fast_hold"), JOBS, DESCRIPTIONS, POINTS),
    st.tuples(st.just("general_hold"), JOBS, DESCRIPTIONS, POINTS),
    st.tuples(st.just("fast_release"), JOBS, DESCRIPTIONS, st.sampled_from([0, 1])),
    st.tuples(st.just("general_release"), JOBS, DESCRIPTIONS, st.just(0)),
    st.tuples(st.just("commit"), st.sampled_from([None, None, errno.EIO])),
    st.tuples(st.just("advance"), st.floats(0.0, 0.2)),
    st.tuples(st.just("next_state"), JOBS),
    st.tuples(st.just("recovering")),
    st.tuples(st.just("recovered")),
)


def _apply(h, step):
    kind, *args = step
    if kind == "commit":
        h.commit(*args)
    elif kind == "advance":
        h.port.advance(*args)
    elif kind == "next_state":
        _next_state(h, *args)
    else:
        getattr(h, kind)(*args)


def _next_state(h, jobid):
    """The job's next state: an exception takes it to CLEANUP, and it goes
    inactive once no active epilog hold keeps it there."""
    gate = h.plugin.gate
    state = h.port.jobs[jobid].state
    if state in (DEPEND_STATE, SCHED):
        h.port.set_state(jobid, CLEANUP)
        gate.on_cleanup(jobid)
    elif state == CLEANUP:
        job = gate.jobs.get(jobid)
        holds = job.holds.values() if job else ()
        if any(hold.point == EPILOG and hold.state == ACTIVE for hold in holds):
            return
        h.port.set_state(jobid, INACTIVE)
        gate.on_inactive(jobid)


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(STEPS, max_size=40),
    max_pending=st.integers(1, 6),
    unload=st.sampled_from([None, "orphan", "late"]),
)
def test_every_kept_request_is_given_back_exactly_once(steps, max_pending, unload):
    h = Harness(max_pending=max_pending)
    for jobid in range(1, 5):
        h.add_job(jobid, DEPEND_STATE if jobid % 2 else SCHED)
    for step in steps:
        _apply(h, step)
    if unload is not None:
        h.unload(orphan=unload == "orphan")
    h.settle()
    h.check()


def test_an_answer_due_after_the_unload_gives_its_request_back(harness):
    """The unload answers every waiting request (NotConfirmed) before the
    port closes; an answer that still came later sends nothing and gives
    its reference back."""
    plugin, ledger = harness.plugin, harness.ledger
    hold, _ = plugin.gate.hold(1, "bb")
    kept = [ledger.own_request(msg) for msg in ("h", "r", "e")]
    ledger.p = None
    plugin.fast._answer_hold(kept[0], hold, None)
    plugin.fast._answer_release(kept[1], (True, None), None)
    plugin.fast._answer_error(kept[2], "hold", OSError(errno.EIO, "I/O error"))
    assert ledger.answers == Counter()
    assert set(ledger.owned.values()) == {0}
    assert ledger.errors == []
