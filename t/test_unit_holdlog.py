"""Unit tests of the hold log (flux_epilog_gate.holdlog) and of recovery
from it, no broker: the KVS is the FakePort's dict."""

import syslog

import pytest
from fakeport import KVS

from flux_epilog_gate import holdlog
from flux_epilog_gate.gate import CLEANUP, SCHED, Gate
from flux_epilog_gate.holdlog import FLUSH_DELAY, KEY, MARKER, parse
from flux_epilog_gate.holds import ACTIVE, CANCEL_EVENT, HOLD_EVENT, PENDING, Hold

JOB = 4242
USER = 1000


@pytest.fixture
def gate(port):
    return Gate(port)


def hold_pending(port, gate, jobid, description="bb", timeout=None):
    if jobid not in port.jobs:
        port.add_job(jobid, SCHED, USER)
    return gate.hold(jobid, description, timeout)[0]


def test_parse_groups_entries_by_job_without_the_id():
    hold = Hold(JOB, "bb", USER, 10.0, 30.0)
    text = holdlog.hold_entry(hold) + holdlog.cancel_entry(hold, 11.0)
    assert parse(text) == (
        {
            JOB: [
                (10.0, HOLD_EVENT, {"description": "bb", "timeout": 30.0}),
                (11.0, CANCEL_EVENT, {"description": "bb"}),
            ]
        },
        0,
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
    assert skipped == 1 and list(jobs) == [JOB]


def test_holds_of_one_flush_delay_are_written_in_one_append(port, gate):
    for jobid in range(1, 51):
        hold_pending(port, gate, jobid)
    assert port.commits == []
    port.advance(FLUSH_DELAY)
    ((key, text, append),) = port.commits
    assert key == KEY and append
    assert sorted(parse(text)[0]) == list(range(1, 51))


def test_hold_active_before_the_flush_is_written_too(port, gate):
    # The log must name every job with holds: a load recovers only those.
    port.add_job(JOB, CLEANUP, USER)
    hold, _ = gate.hold(JOB, "bb", 30.0)
    assert hold.state == ACTIVE
    port.advance(FLUSH_DELAY)
    assert parse(port.kvs[KEY])[0] == {
        JOB: [(hold.t_hold, HOLD_EVENT, {"description": "bb", "timeout": 30.0})]
    }


def test_hold_gone_before_the_flush_is_not_written(port, gate):
    port.add_job(JOB, CLEANUP, USER)
    gate.hold(JOB, "bb")
    gate.release(JOB, "bb")
    hold_pending(port, gate, JOB + 1)
    gate.release(JOB + 1, "bb")
    port.advance(FLUSH_DELAY)
    assert port.commits == [] and gate.record.commits == 0


def test_log_is_replaced_by_a_snapshot_of_current_holds_every_max_appends(port, gate):
    kept = hold_pending(port, gate, 1, timeout=5.0)
    for jobid in range(2, holdlog.MAX_APPENDS + 2):
        hold_pending(port, gate, jobid)
        port.advance(FLUSH_DELAY)
        gate.release(jobid, "bb")
    assert all(append for _, _, append in port.commits)
    hold_pending(port, gate, 9999)
    port.advance(FLUSH_DELAY)
    _, text, append = port.commits[-1]
    assert not append
    jobs, _ = parse(port.kvs[KEY])
    assert sorted(jobs) == [1, 9999]
    assert jobs[1] == [(kept.t_hold, HOLD_EVENT, {"description": "bb", "timeout": 5.0})]


def test_no_snapshot_while_a_job_is_being_recovered(port, gate):
    port.add_job(7, SCHED, USER)
    gate.begin_recovery(7, USER)
    gate.record.appends = holdlog.MAX_APPENDS
    hold_pending(port, gate, JOB)
    port.advance(FLUSH_DELAY)
    assert port.commits[-1][2] is True


def test_failed_commit_is_logged(port, gate):
    port.fail(KVS)
    hold_pending(port, gate, JOB)
    port.advance(FLUSH_DELAY)
    assert any(
        level == syslog.LOG_ERR and KEY in text for level, text in port.logs
    ), port.logs


def test_suspend_writes_what_is_queued_at_once(port, gate):
    hold_pending(port, gate, JOB)
    gate.suspend()
    assert JOB in parse(port.kvs[KEY])[0]


def test_pending_hold_is_recovered_from_the_log_alone(port, gate):
    hold = hold_pending(port, gate, JOB, timeout=9.0)
    port.advance(FLUSH_DELAY)
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
    assert again.logged


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


def test_unmarked_epilog_start_is_not_the_recovery_placeholder(port):
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
