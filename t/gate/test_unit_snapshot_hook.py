"""Unit tests of the hold log's ``on_snapshot`` hook (the plugin freezes
the gate's objects there, see plugin/gcpolicy.py), and of what that
freeze relies on: the gate's records leave no cyclic garbage.  No
broker: the KVS is the FakePort's dict."""

import errno
import gc
import syslog

import pytest

from flux_epilog_gate.gate import CLEANUP, SCHED, Gate, holdlog
from flux_epilog_gate.gate.config import Config

from .unitgate import USER

CHUNK = 400


def hold(port, gate, jobid, answers=None):
    port.add_job(jobid, SCHED, USER)
    done = None if answers is None else (lambda h, error: answers.append(error))
    gate.hold(jobid, "bb", done=done)


def run(port, limit=1000):
    """Answer every commit and lookup, in order, until none is left."""
    port.answer_all(limit)


@pytest.fixture
def told(port):
    """A gate whose hold log records each call of its hook."""
    gate = Gate(port)
    calls = []
    gate.on_snapshot(lambda: calls.append(gate.holdlog.appends))
    return gate, calls


def test_appends_do_not_call_the_hook(port, told):
    gate, calls = told
    for jobid in range(1, 20):
        hold(port, gate, jobid)
    assert calls == []


def test_a_snapshot_in_one_commit_calls_the_hook_once_it_is_answered(port, told):
    gate, calls = told
    hold(port, gate, 1)
    gate.holdlog.compaction.appends = holdlog.MAX_APPENDS
    port.defer_commits = True
    answers = []
    hold(port, gate, 2, answers)
    assert calls == []
    run(port)
    assert calls == [0] and answers == [None]


def test_a_snapshot_in_parts_calls_the_hook_once_swapped_in(port, told):
    gate, calls = told
    gate.reconfigure(Config(snapshot_chunk=CHUNK))
    for jobid in range(1, 41):
        hold(port, gate, jobid)
    gate.holdlog.compaction.appends = holdlog.MAX_APPENDS
    port.defer_commits = True
    hold(port, gate, 100)
    parts = 0
    while port.pending_commits or port.pending_lookups:
        assert calls == []
        if port.pending_commits:
            port.complete_commit()
            parts += 1
        else:
            port.complete_lookup()
    assert parts > 5 and calls == [0]
    assert gate.holdlog.snapshots.in_parts is None


def test_a_failed_snapshot_does_not_call_the_hook(port, told):
    gate, calls = told
    hold(port, gate, 1)
    gate.holdlog.compaction.appends = holdlog.MAX_APPENDS
    port.defer_commits = True
    answers = []
    hold(port, gate, 2, answers)
    port.complete_commit(errno.EIO)
    assert calls == [] and answers[0].errno == errno.EIO


def test_a_failing_hook_is_logged_and_the_answers_still_go(port):
    gate = Gate(port)

    def broken():
        raise RuntimeError("no")

    gate.on_snapshot(broken)
    hold(port, gate, 1)
    gate.holdlog.compaction.appends = holdlog.MAX_APPENDS
    answers = []
    hold(port, gate, 2, answers)
    hold(port, gate, 3, answers)
    assert answers == [None, None]
    assert any(
        level == syslog.LOG_ERR and "after a snapshot: no" in text
        for level, text in port.logs
    )


@pytest.fixture
def no_collector():
    """The cyclic collector off (what the test's setup left collected),
    and back on after the test."""
    gc.disable()
    gc.collect()
    yield
    gc.enable()


def test_holds_requests_and_snapshots_leave_no_cyclic_garbage(port, no_collector):
    """Frozen objects are freed by reference counting only: the gate's
    records of holds, jobs and requests must form no cycles."""
    gate = Gate(port)
    answers = []
    jobs = range(1, 401)
    gc.collect()
    for jobid in jobs:
        hold(port, gate, jobid, answers)
        gate.hold(jobid, "dw", done=lambda h, error: answers.append(error))
    for jobid in jobs:
        gate.release(jobid, "bb", 0, done=lambda r, error: answers.append(error))
    for jobid in jobs[:200]:
        port.set_state(jobid, CLEANUP)
        gate.on_cleanup(jobid)
        gate.release(jobid, "dw", 1, done=lambda r, error: answers.append(error))
    for jobid in jobs:
        gate.on_inactive(jobid)
    # Past MAX_APPENDS commits: snapshots were written too.
    assert gate.holdlog.commits > holdlog.MAX_APPENDS
    assert len(answers) == 4 * len(jobs) - 200
    assert not gate.jobs
    assert gc.collect() == 0
