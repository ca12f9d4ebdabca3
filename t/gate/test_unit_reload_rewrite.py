"""Unit tests of the rewrite of the hold log at a reload
(flux_epilog_gate.gate.holdlog.HoldLog.rewrite): the gate a reload takes
over writes the whole log again from its holds, whatever another hand
left at the key meanwhile; no broker, the job-manager is a FakePort."""

import pytest

from flux_epilog_gate.gate import CLEANUP, SCHED
from flux_epilog_gate.gate.holdlog import KEY

from .unitgate import JOB, JOB2, USER, at_point, held_job, replayed

JOB3 = JOB2 + 1

#: What another hand leaves at the key while no plugin is loaded.
TAMPERED = {"unlinked": None, "rewritten": "another hand's text\n"}


def reload(port, gate, seen):
    """The plugin removed and loaded again: the gate suspended, attached
    to the port, its jobs ``seen`` retracked (by state), resumed."""
    gate.suspend()
    gate.attach(port)
    for jobid, state in seen.items():
        gate.retrack(jobid, state)
    gate.resume(set(seen))


@pytest.mark.parametrize("tampered", sorted(TAMPERED))
def test_a_reload_writes_every_hold_again_whatever_the_key_holds(port, gate, tampered):
    at_point(port, gate, "bb")
    held_job(port, gate, "later", jobid=JOB2)
    value = TAMPERED[tampered]
    if value is None:
        del port.kvs[KEY]
    else:
        port.kvs[KEY] = value
    before = len(port.commits)
    reload(port, gate, {JOB: CLEANUP, JOB2: SCHED})
    # One commit, a put: the log is the gate's holds alone.
    assert len(port.commits) == before + 1
    key, _, append = port.commits[-1]
    assert (key, append) == (KEY, False)
    assert replayed(port.kvs[KEY]) == {(JOB, "bb"), (JOB2, "later")}


def test_a_reload_over_an_untouched_log_costs_one_snapshot(port, gate):
    held_job(port, gate, "bb")
    before = gate.holdlog.commits
    reload(port, gate, {JOB: SCHED})
    assert gate.holdlog.commits == before + 1
    assert replayed(port.kvs[KEY]) == {(JOB, "bb")}
    # The next record is an append again.
    held_job(port, gate, "more", jobid=JOB2)
    assert port.commits[-1][2] is True


def test_a_job_gone_during_the_reload_is_left_out(port, gate):
    held_job(port, gate, "bb")
    held_job(port, gate, "gone", jobid=JOB2)
    reload(port, gate, {JOB: SCHED})
    # Written once the jobs are retracked: the snapshot has no entry of
    # the job that went inactive meanwhile.
    key, text, append = port.commits[-1]
    assert (key, append) == (KEY, False)
    assert replayed(text) == {(JOB, "bb")}


def test_a_rewrite_waits_for_a_job_being_recovered(port, gate):
    """A job still recovered at the reload: no snapshot can be made yet;
    the first commit once every hold is known is one."""
    held_job(port, gate, "kept", jobid=JOB2)
    port.add_job(JOB, CLEANUP, USER)
    gate.begin_recovery(JOB, USER)
    del port.kvs[KEY]
    reload(port, gate, {JOB: CLEANUP, JOB2: SCHED})
    assert replayed(port.kvs.get(KEY, "")) == set()
    assert gate.holdlog.compaction.forced
    gate.end_recovery(JOB, [])
    held_job(port, gate, "after", jobid=JOB3)
    key, _, append = port.commits[-1]
    assert (key, append) == (KEY, False)
    assert replayed(port.kvs[KEY]) == {(JOB2, "kept"), (JOB3, "after")}
    assert not gate.holdlog.compaction.forced


def test_a_rewrite_waiting_for_a_recovery_goes_out_when_it_ends_alone(port, gate):
    """No record follows the end of the recovery: the rewrite goes out
    by itself a moment later (a crash could not wait for the next)."""
    held_job(port, gate, "kept", jobid=JOB2)
    port.add_job(JOB, CLEANUP, USER)
    gate.begin_recovery(JOB, USER)
    port.add_job(JOB3, SCHED, USER)
    gate.begin_recovery(JOB3, USER)
    del port.kvs[KEY]
    reload(port, gate, {JOB: CLEANUP, JOB2: SCHED, JOB3: SCHED})
    gate.end_recovery(JOB, [])
    port.advance(1.0)
    # Still one job being recovered: no hold written, looked at again.
    assert replayed(port.kvs.get(KEY, "")) == set()
    assert gate.holdlog.compaction.forced
    assert len(port.armed_timers()) == 1
    gate.end_recovery(JOB3, [])
    assert replayed(port.kvs.get(KEY, "")) == set()
    port.advance(1.0)
    key, _, append = port.commits[-1]
    assert (key, append) == (KEY, False)
    assert replayed(port.kvs[KEY]) == {(JOB2, "kept")}
    assert not gate.holdlog.compaction.forced and port.armed_timers() == []
