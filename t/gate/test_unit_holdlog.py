"""Unit tests of the hold log (flux_epilog_gate.gate.holdlog) and of recovery
from it, no broker: the KVS is the FakePort's dict."""

import errno
import syslog

import pytest
from fakeport import KVS

from flux_epilog_gate.gate import CLEANUP, SCHED, Gate, holdlog
from flux_epilog_gate.gate.holdlog import KEY, MARKER, RELEASE_GRACE, parse
from flux_epilog_gate.gate.holds import (
    ACTIVE,
    CANCEL_EVENT,
    HOLD_EVENT,
    PENDING,
    RELEASE_EVENT,
    Hold,
)

from .unitgate import JOB, USER, logged, replayed


def hold_pending(port, gate, jobid, description="bb", timeout=None):
    if jobid not in port.jobs:
        port.add_job(jobid, SCHED, USER)
    return gate.hold(jobid, description, timeout)[0]


def test_parse_groups_entries_by_job_without_the_id():
    hold = Hold(JOB, "bb", USER, 10.0, 30.0)
    text = (
        holdlog.hold_entry(hold)
        + holdlog.cancel_entry(hold, 11.0)
        + holdlog.release_entry(hold, 2, 12.0)
    )
    assert parse(text) == (
        {
            JOB: [
                (10.0, HOLD_EVENT, {"description": "bb", "timeout": 30.0}),
                (11.0, CANCEL_EVENT, {"description": "bb"}),
                (12.0, RELEASE_EVENT, {"description": "bb", "status": 2}),
            ]
        },
        [],
    )


@pytest.mark.parametrize(
    "line",
    [
        "not json",
        '{"timestamp": 1, "name": "epilog_gate.hold"}',
        '{"timestamp": 1, "name": "other", "context": {"id": 1}}',
        '{"timestamp": 1, "name": "epilog_gate.hold", "context": {"id": "x"}}',
        '{"timestamp": "t", "name": "epilog_gate.hold", "context": {"id": 1}}',
    ],
)
def test_parse_skips_and_counts_entries_it_cannot_understand(line):
    good = holdlog.hold_entry(Hold(JOB, "bb", USER, 10.0))
    jobs, skipped = parse(line + "\n" + good)
    assert len(skipped) == 1 and list(jobs) == [JOB]


def test_holds_made_while_a_commit_is_in_flight_share_the_next_one(port, gate):
    port.defer_commits = True
    hold_pending(port, gate, 1)
    for jobid in range(2, 51):
        hold_pending(port, gate, jobid)
    assert len(port.pending_commits) == 1
    port.complete_commit()
    assert len(port.pending_commits) == 1
    port.complete_commit()
    first, second = port.commits
    assert all(key == KEY and append for key, _, append in port.commits)
    assert sorted(parse(first[1])[0]) == [1]
    assert sorted(parse(second[1])[0]) == list(range(2, 51))
    assert port.synced == [True, True] and gate.holdlog.commits == 2


def test_done_is_called_when_the_batch_of_the_record_is_committed(port, gate):
    port.defer_commits = True
    answers = []
    for jobid in (1, 2, 3):
        port.add_job(jobid, SCHED, USER)
        gate.hold(
            jobid, "bb", done=lambda hold, error: answers.append((hold.id, error))
        )
    assert answers == []
    port.complete_commit()
    assert answers == [(1, None)]
    port.complete_commit()
    assert answers == [(1, None), (2, None), (3, None)]


def test_an_unrecorded_log_answers_at_once_and_commits_nothing(port, gate):
    """The benchmark's build (HoldLog.unrecorded): holds, the release of
    an active one and of a pending one are answered at once, as if
    durable, and the log is never written."""
    port.defer_commits = True
    gate.holdlog.unrecorded()
    answers = []
    port.add_job(JOB, SCHED, USER)
    gate.hold(JOB, "bb", done=lambda hold, error: answers.append(("bb", error)))
    gate.hold(JOB, "cc", done=lambda hold, error: answers.append(("cc", error)))
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    gate.release(JOB, "bb", done=lambda result, error: answers.append(result))
    port.add_job(JOB + 1, SCHED, USER)
    gate.hold(JOB + 1, "bb")
    gate.release(JOB + 1, "bb", done=lambda result, error: answers.append(result))
    assert answers == [("bb", None), ("cc", None), (True, None), (True, None)]
    assert port.pending_commits == [] and port.commits == []
    assert gate.holdlog.commits == 0 and KEY not in port.kvs


def test_duplicate_hold_and_released_false_wait_for_what_is_queued(port, gate):
    port.defer_commits = True
    port.add_job(JOB, SCHED, USER)
    answers = []
    gate.hold(JOB, "bb", done=lambda hold, error: answers.append("first"))
    gate.hold(JOB, "bb", done=lambda hold, error: answers.append("again"))
    assert answers == []
    port.complete_commit()
    assert answers == ["first", "again"]
    gate.release(JOB, "bb", done=lambda result, error: answers.append(result))
    gate.release(JOB, "bb", done=lambda result, error: answers.append(result))
    assert answers == ["first", "again"]
    port.complete_commit()
    assert answers[2:] == [(True, None), (False, "released")]
    # Nothing queued or in flight: answered at once.
    gate.release(JOB, "bb", done=lambda result, error: answers.append(result))
    assert answers[4:] == [(False, "released")] and port.pending_commits == []


def test_failed_commit_withdraws_the_holds_it_carried_and_answers_the_error(port, gate):
    port.defer_commits = True
    port.add_job(1, SCHED, USER)
    port.add_job(2, CLEANUP, USER)
    answers = []
    gate.hold(1, "bb", done=lambda hold, error: answers.append(error))
    gate.hold(2, "bb", done=lambda hold, error: answers.append(error))
    port.complete_commit()
    port.complete_commit(errno.ENOSPC)
    assert answers[0] is None and answers[1].errno == errno.ENOSPC
    assert KEY in answers[1].strerror
    # The first hold stays; the second, active at once, is finished.
    assert [h["id"] for h in gate.list()] == [1]
    assert port.posted_by_gate(2, "epilog-finish") == [
        {"description": "bb", "status": 0}
    ]
    assert any(level == syslog.LOG_ERR and KEY in text for level, text in port.logs)
    # Its records are written with the next commit, withdrawal included.
    hold_pending(port, gate, 3)
    port.complete_commit()
    names = [(jobid, name) for jobid, e in logged(port).items() for _, name, _ in e]
    assert (2, HOLD_EVENT) in names and (2, RELEASE_EVENT) in names


def test_failed_commit_of_a_release_answers_the_error(port, gate):
    port.add_job(JOB, CLEANUP, USER)
    gate.hold(JOB, "bb")
    port.fail(KVS, errno.EIO)
    answers = []
    gate.release(JOB, "bb", done=lambda result, error: answers.append(error))
    assert answers[0].errno == errno.EIO


def test_without_a_backing_store_the_log_is_written_without_sync(port, gate):
    port.defer_commits = True
    answers = []
    port.add_job(JOB, SCHED, USER)
    gate.hold(JOB, "bb", done=lambda hold, error: answers.append(error))
    port.complete_commit(errno.ENOSYS)
    assert answers == [] and port.synced == [True, False]
    port.complete_commit()
    assert answers == [None] and JOB in logged(port)
    assert any("cannot sync" in text for _, text in port.logs)


def test_suspend_answers_waiting_requests_and_resume_writes_them_again(port, gate):
    port.defer_commits = True
    answers = []
    for jobid in (1, 2):
        port.add_job(jobid, SCHED, USER)
        gate.hold(jobid, "bb", done=lambda hold, error: answers.append(error))
    gate.suspend()
    assert [error.errno for error in answers] == [errno.EAGAIN, errno.EAGAIN]
    assert "send it again" in answers[0].strerror
    # Not withdrawn: the commit in flight may succeed.
    assert sorted(h["id"] for h in gate.list()) == [1, 2]
    # The queued record was sent at once, not awaited.
    assert len(port.pending_commits) == 2
    port.pending_commits.clear()
    gate.attach(port)
    port.complete_commit()
    assert sorted(logged(port)) == [1, 2]


def fail_a_record_written_again(port, gate):
    """A hold whose record an unload left unconfirmed; the load after it
    writes the record again, and that commit fails.  Its request was
    answered at the unload: no new record follows."""
    port.defer_commits = True
    port.add_job(1, SCHED, USER)
    gate.hold(1, "bb", done=lambda hold, error: None)
    gate.suspend()
    port.pending_commits.clear()
    gate.attach(port)
    port.complete_commit(errno.EIO)


def test_records_left_by_a_failed_commit_are_sent_again_without_new_traffic(port, gate):
    fail_a_record_written_again(port, gate)
    assert port.pending_commits == []
    port.advance(holdlog.RETRY_DELAY)
    port.complete_commit()
    assert sorted(logged(port)) == [1]


def test_a_suspended_log_sends_nothing_again(port, gate):
    fail_a_record_written_again(port, gate)
    gate.suspend()
    port.pending_commits.clear()
    port.advance(holdlog.RETRY_DELAY)
    assert port.pending_commits == []


def test_nothing_but_records_are_written(port, gate):
    port.add_job(JOB, CLEANUP, USER)
    gate.hold(JOB, "bb")
    assert gate.holdlog.commits == 1


def test_log_is_replaced_by_a_snapshot_of_current_holds_every_max_appends(port, gate):
    kept = hold_pending(port, gate, 1, timeout=5.0)
    # A hold and its cancellation: two appends each.
    for jobid in range(2, holdlog.MAX_APPENDS // 2 + 1):
        hold_pending(port, gate, jobid)
        gate.release(jobid, "bb")
    hold_pending(port, gate, 9998)
    assert len(port.commits) == holdlog.MAX_APPENDS
    assert all(append for _, _, append in port.commits)
    hold_pending(port, gate, 9999)
    _, text, append = port.commits[-1]
    assert not append
    jobs, _ = parse(port.kvs[KEY])
    assert sorted(jobs) == [1, 9998, 9999]
    assert jobs[1] == [(kept.t_hold, HOLD_EVENT, {"description": "bb", "timeout": 5.0})]


def test_snapshot_keeps_recent_releases_of_active_holds(port, gate):
    for jobid in (1, 2):
        port.add_job(jobid, CLEANUP, USER)
        gate.hold(jobid, "bb")
        port.advance(RELEASE_GRACE)
        gate.release(jobid, "bb", jobid)
    port.advance(RELEASE_GRACE / 2)
    gate.holdlog.compaction.appends = holdlog.MAX_APPENDS
    hold_pending(port, gate, 9999)
    _, text, append = port.commits[-1]
    assert not append
    jobs, _ = parse(text)
    # Job 1's epilog-finish is long committed; job 2's may not be yet.
    assert sorted(jobs) == [2, 9999]
    assert jobs[2] == [
        (
            pytest.approx(port.clock - RELEASE_GRACE / 2),
            RELEASE_EVENT,
            {"description": "bb", "status": 2},
        )
    ]


def test_no_snapshot_while_a_job_is_being_recovered(port, gate):
    port.add_job(7, SCHED, USER)
    gate.begin_recovery(7, USER)
    gate.holdlog.compaction.appends = holdlog.MAX_APPENDS
    hold_pending(port, gate, JOB)
    assert port.commits[-1][2] is True


def test_failed_commit_is_logged(port, gate):
    port.fail(KVS)
    hold_pending(port, gate, JOB)
    assert any(
        level == syslog.LOG_ERR and KEY in text for level, text in port.logs
    ), port.logs


def test_suspend_writes_what_is_queued_at_once(port, gate):
    port.defer_commits = True
    hold_pending(port, gate, 1)
    hold_pending(port, gate, JOB)
    gate.suspend()
    port.complete_commit()
    port.complete_commit()
    assert sorted(parse(port.kvs[KEY])[0]) == [1, JOB]


def test_suspend_sends_the_records_in_flight_again_with_the_queued(port, gate):
    port.defer_commits = True
    hold_pending(port, gate, 1)
    hold_pending(port, gate, JOB)
    gate.suspend()
    # The commit in flight fails once the plugin is gone: nobody learns
    # of it, but the last commit carries its record too.
    port.complete_commit(errno.EIO)
    port.complete_commit()
    assert sorted(parse(port.kvs[KEY])[0]) == [1, JOB]


def test_a_record_sent_twice_at_suspend_is_recovered_once(port, gate):
    port.defer_commits = True
    hold = hold_pending(port, gate, JOB, timeout=9.0)
    gate.suspend()
    port.complete_commit()
    port.complete_commit()
    (entries,) = parse(port.kvs[KEY])[0].values()
    assert len(entries) == 2
    fresh = Gate(port)
    fresh.begin_recovery(JOB, USER)
    fresh.end_recovery(JOB, entries)
    (again,) = fresh.jobs[JOB].holds.values()
    assert (again.state, again.t_hold) == (PENDING, hold.t_hold)


def test_pending_hold_is_recovered_from_the_log_alone(port, gate):
    hold = hold_pending(port, gate, JOB, timeout=9.0)
    (entries,) = parse(port.kvs[KEY])[0].values()
    fresh = Gate(port)
    fresh.begin_recovery(JOB, USER)
    fresh.end_recovery(JOB, entries)
    (again,) = fresh.jobs[JOB].holds.values()
    assert (again.state, again.t_hold, again.timeout) == (
        PENDING,
        hold.t_hold,
        9.0,
    )


def test_active_hold_is_recovered_from_its_marked_epilog_start_alone(port):
    port.add_job(JOB, CLEANUP, USER)
    gate = Gate(port)
    gate.begin_recovery(JOB, USER)
    start = (50.0, "epilog-start", {"description": "bb", MARKER: True, "timeout": 3.0})
    gate.end_recovery(JOB, [start])
    (hold,) = gate.jobs[JOB].holds.values()
    assert (hold.state, hold.t_start, hold.timeout) == (ACTIVE, 50.0, 3.0)


def test_unmarked_epilog_start_of_another_plugin_is_not_a_hold(port):
    port.add_job(JOB, CLEANUP, USER)
    gate = Gate(port)
    gate.begin_recovery(JOB, USER)
    gate.end_recovery(JOB, [(50.0, "epilog-start", {"description": "other"})])
    assert JOB not in gate.jobs


def test_unmarked_epilog_finish_of_another_plugin_does_not_end_a_hold(port):
    port.add_job(JOB, CLEANUP, USER)
    gate = Gate(port)
    gate.begin_recovery(JOB, USER)
    events = [
        (40.0, HOLD_EVENT, {"description": "job-manager.epilog"}),
        (50.0, "epilog-start", {"description": "job-manager.epilog"}),
        (50.0, "epilog-start", {"description": "job-manager.epilog", MARKER: True}),
        (60.0, "epilog-finish", {"description": "job-manager.epilog", "status": 0}),
    ]
    gate.end_recovery(JOB, events)
    (hold,) = gate.jobs[JOB].holds.values()
    assert (hold.state, hold.t_start) == (ACTIVE, 50.0)


def test_unmarked_epilog_start_is_not_the_recovery_epilog(port):
    port.add_job(JOB, CLEANUP, USER)
    gate = Gate(port)
    gate.begin_recovery(JOB, USER)
    events = [(50.0, "epilog-start", {"description": "epilog-gate:recovery"})]
    gate.end_recovery(JOB, events)
    assert port.posted_by_gate(JOB, "epilog-finish") == []


def test_hold_released_after_activation_is_not_recovered(port):
    port.add_job(JOB, CLEANUP, USER)
    gate = Gate(port)
    gate.begin_recovery(JOB, USER)
    events = [
        (40.0, HOLD_EVENT, {"description": "bb"}),
        (50.0, "epilog-start", {"description": "bb", MARKER: True}),
        (60.0, "epilog-finish", {"description": "bb", "status": 0, MARKER: True}),
    ]
    gate.end_recovery(JOB, events)
    assert JOB not in gate.jobs


def replay(port, events, state=CLEANUP):
    port.add_job(JOB, state, USER)
    gate = Gate(port)
    gate.begin_recovery(JOB, USER)
    gate.end_recovery(JOB, events)
    return gate


START = (50.0, "epilog-start", {"description": "bb", MARKER: True})


def test_release_whose_epilog_finish_was_lost_is_finished_on_replay(port):
    release = (60.0, RELEASE_EVENT, {"description": "bb", "status": 3})
    gate = replay(port, [(40.0, HOLD_EVENT, {"description": "bb"}), START, release])
    assert JOB not in gate.jobs
    assert port.posted_by_gate(JOB, "epilog-finish") == [
        {"description": "bb", "status": 3}
    ]
    assert len(port.notes(JOB)) == 1 and "bb" in port.notes(JOB)[0]
    assert gate.release(JOB, "bb") == (False, "released")
    # Recorded again, for the snapshots of the next seconds.
    assert RELEASE_EVENT in port.kvs[KEY]


def test_release_with_its_epilog_finish_is_not_finished_again(port):
    finish = (60.0, "epilog-finish", {"description": "bb", "status": 0, MARKER: True})
    release = (60.1, RELEASE_EVENT, {"description": "bb", "status": 0})
    for events in ([START, finish, release], [START, release, finish]):
        gate = replay(port, events)
        assert JOB not in gate.jobs
        assert port.posted_by_gate(JOB, "epilog-finish") == []


def test_release_of_a_hold_whose_epilog_start_was_lost_drops_it(port):
    hold = (40.0, HOLD_EVENT, {"description": "bb"})
    release = (60.0, RELEASE_EVENT, {"description": "bb", "status": 0})
    gate = replay(port, [hold, release])
    assert JOB not in gate.jobs and port.events[JOB] == []


def test_hold_held_again_after_a_replayed_release_is_kept(port):
    release = (60.0, RELEASE_EVENT, {"description": "bb", "status": 0})
    again = (70.0, HOLD_EVENT, {"description": "bb"})
    gate = replay(port, [START, release, again])
    (hold,) = gate.jobs[JOB].holds.values()
    # The second hold is at the job's epilog point: active, and the first
    # one's finish posted after its start.
    assert hold.state == ACTIVE and hold.t_hold == 70.0
    assert port.names(JOB) == ["epilog-start", "epilog-finish"]


@pytest.mark.parametrize(
    "errnum", [errno.EISDIR, errno.EOPNOTSUPP, errno.ENOTDIR, errno.ELOOP]
)
def test_an_append_to_a_key_that_is_not_a_value_is_retried_as_a_snapshot(
    port, gate, errnum
):
    port.defer_commits = True
    hold = hold_pending(port, gate, 1)
    answers = []
    gate.holdlog.barrier(answers.append)
    _, text, append, callback = port.pending_commits.pop()
    assert append
    callback(OSError(errnum, "not a value"))
    _, text, append, callback = port.pending_commits.pop()
    assert not append and holdlog.hold_entry(hold) in text
    assert answers == []
    callback(None)
    assert answers == [None]
    assert (
        syslog.LOG_ERR,
        f"{KEY} is not a value (not a value): replacing it "
        "with a snapshot of the current holds",
    ) in port.logs


def test_a_failed_repair_answers_the_error_and_is_tried_again_later(port, gate):
    port.defer_commits = True
    hold_pending(port, gate, 1)
    answers = []
    gate.holdlog.barrier(answers.append)
    for _ in range(2):
        port.pending_commits.pop()[3](OSError(errno.EISDIR, "Is a directory"))
    assert [a.errno for a in answers] == [errno.EISDIR]
    assert port.pending_commits == []
    hold_pending(port, gate, 2)
    _, _, append, callback = port.pending_commits.pop()
    callback(OSError(errno.EISDIR, "Is a directory"))
    assert not port.pending_commits.pop()[2]


@pytest.mark.parametrize("errnum", [errno.EIO, errno.ENOSPC, errno.EPERM])
def test_other_append_errors_are_answered_without_a_snapshot(port, gate, errnum):
    port.defer_commits = True
    hold_pending(port, gate, 1)
    answers = []
    gate.holdlog.barrier(answers.append)
    port.pending_commits.pop()[3](OSError(errnum, "failed"))
    assert [a.errno for a in answers] == [errnum]
    assert port.pending_commits == []


@pytest.mark.parametrize("fraction", [0.0000004, 0.0000006, 0.0000005, 0.999_9996])
def test_a_hold_cancelled_within_its_microsecond_replays_as_gone(port, gate, fraction):
    # Every line's time is rounded alike: a cancellation stamped with the
    # raw clock could sort before the rounded time of its hold.
    port.clock = 1_700_000_000 + fraction
    hold_pending(port, gate, JOB)
    gate.release(JOB, "bb")
    port.answer_all()
    assert replayed(port.kvs[KEY]) == set()
