"""Unit tests of records made together (Gate.together, HoldLog.together)
and of a hold given its job's state and owner, no broker."""

import errno

import pytest

from flux_epilog_gate.errors import GateError
from flux_epilog_gate.gate import DEPEND, SCHED
from flux_epilog_gate.gate.holdlog import parse

from .unitgate import USER


def holds_of(text):
    return {
        (jobid, context["description"])
        for jobid, entries in parse(text)[0].items()
        for _, _, context in entries
    }


@pytest.mark.parametrize("in_flight", [False, True])
def test_holds_made_together_go_in_one_commit(port, gate, in_flight):
    port.defer_commits = True
    for jobid in (1, 2):
        port.add_job(jobid, SCHED, USER)
    if in_flight:
        gate.hold(1, "first")
    answers = []
    with gate.together():
        for description in ("a", "b", "c"):
            gate.hold(2, description, done=lambda hold, error: answers.append(error))
        assert len(port.pending_commits) == int(in_flight)
    while port.pending_commits:
        port.complete_commit()
    assert answers == [None, None, None]
    texts = [text for _, text, _ in port.commits]
    assert holds_of(texts[-1]) == {(2, "a"), (2, "b"), (2, "c")}
    assert len(texts) == 1 + int(in_flight)


def test_records_wait_for_the_outermost_block(port, gate):
    port.defer_commits = True
    port.add_job(1, SCHED, USER)
    with gate.together():
        gate.hold(1, "a")
        with gate.together():
            gate.hold(1, "b")
        assert port.pending_commits == []
        gate.hold(1, "c")
    assert len(port.pending_commits) == 1
    port.complete_commit()
    assert holds_of(port.commits[0][1]) == {(1, "a"), (1, "b"), (1, "c")}


def test_a_refused_hold_in_a_block_leaves_the_others_recorded(port, gate):
    port.defer_commits = True
    port.add_job(1, SCHED, USER)
    with pytest.raises(GateError):
        with gate.together():
            gate.hold(1, "a")
            gate.hold(1, "b", point="depend")
    port.complete_commit()
    assert holds_of(port.commits[0][1]) == {(1, "a")}


def test_a_hold_given_its_jobs_state_and_owner_looks_nothing_up(port, gate):
    hold, created = gate.hold(7, "a", point="depend", known=(DEPEND, USER))
    assert created and hold.userid == USER
    with pytest.raises(GateError) as exc:
        gate.hold(8, "a", point="depend")
    assert exc.value.errnum == errno.ENOENT
