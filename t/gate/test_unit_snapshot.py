"""Unit tests of hold log snapshots written in parts (holdlog.py,
"Snapshots in parts"), no broker: the KVS is the FakePort's dict.

A snapshot larger than the hold log's ``chunk`` is written to SIDE_KEY a
part per commit, each part with that round's batch appended to KEY, then
swapped in by one transaction.  Whatever happens in between, KEY must
stay a complete log: read back as recovery reads it, it gives the gate's
holds.
"""

import errno
import json
import syslog

import pytest
from fakeport import KVS, LOOKUP, OPS

from flux_epilog_gate.gate import CLEANUP, SCHED, Gate, holdlog
from flux_epilog_gate.gate.config import Config
from flux_epilog_gate.gate.holdlog import KEY, SIDE_KEY, parse
from flux_epilog_gate.gate.holds import RELEASE_EVENT

from .unitgate import USER, gate_holds, replayed

#: Bytes of a part in these tests: a few hold entries.
CHUNK = 400


def logged(port):
    return replayed(port.hold_log())


@pytest.fixture
def big(port):
    """A gate with 40 pending holds (some 4 KB of log) whose next commit
    starts a snapshot in parts; commits wait for the test."""
    gate = Gate(port, Config(snapshot_chunk=CHUNK))
    for jobid in range(1, 41):
        port.add_job(jobid, SCHED, USER)
        gate.hold(jobid, "bb")
    assert logged(port) == gate_holds(gate)
    gate.holdlog.compaction.appends = holdlog.MAX_APPENDS
    port.defer_commits = True
    return gate


def hold(port, gate, jobid, answers=None, state=SCHED):
    port.add_job(jobid, state, USER)
    done = None if answers is None else (lambda h, error: answers.append(error))
    return gate.hold(jobid, "bb", done=done)[0]


def ops_of(entry):
    key, ops, _, _ = entry
    assert key == OPS
    return [(op, key) for op, key, _ in ops]


def run(port, limit=1000):
    """Answer every commit and lookup, in order, until none is left."""
    port.answer_all(limit)


def test_a_large_snapshot_is_written_in_parts_then_swapped_in(port, big):
    gate = big
    hold(port, gate, 100)
    (first,) = port.pending_commits
    # The first part replaces whatever is at the side key; the round's
    # batch goes to the log in the same transaction.
    assert ops_of(first) == [("put", SIDE_KEY), ("append", KEY)]
    parts = 0
    while port.pending_commits:
        entry = port.pending_commits[0]
        assert ops_of(entry)[0] == ("put" if parts == 0 else "append", SIDE_KEY)
        # No part is larger than the chunk and one entry.
        assert len(entry[1][0][2]) < CHUNK + 200
        port.complete_commit()
        parts += 1
    assert parts > 5
    # Every part written: the side key's tree object is looked up.
    (lookup,) = port.pending_lookups
    assert lookup[0] == SIDE_KEY
    side = port.kvs[SIDE_KEY]
    assert replayed(side) == gate_holds(gate)
    port.complete_lookup()
    (swap,) = port.pending_commits
    assert ops_of(swap)[0] == ("put_treeobj", KEY)
    assert ops_of(swap)[-1] == ("unlink", SIDE_KEY)
    assert swap[2] is True  # synced
    port.complete_commit()
    assert SIDE_KEY not in port.kvs
    assert port.kvs[KEY] == side
    assert logged(port) == gate_holds(gate)
    assert gate.holdlog.snapshots.in_parts is None and gate.holdlog.appends == 0
    assert gate.holdlog.size == len(side)


def test_only_parts_that_carry_records_are_synced(port, big):
    gate = big
    hold(port, gate, 100)
    port.complete_commit()
    port.complete_commit()
    hold(port, gate, 101)
    port.complete_commit()
    assert port.synced[-4:] == [True, False, False, True]


def test_answers_keep_flowing_while_a_snapshot_is_written(port, big):
    gate = big
    hold(port, gate, 100)
    port.complete_commit()
    answers = []
    hold(port, gate, 101, answers)
    # Behind the part in flight; answered with the next one, long before
    # the snapshot is done.
    port.complete_commit()
    assert answers == []
    (entry,) = port.pending_commits
    assert ops_of(entry) == [("append", SIDE_KEY), ("append", KEY)]
    port.complete_commit()
    assert answers == [None]
    assert gate.holdlog.snapshots.in_parts is not None
    assert (101, "bb") in logged(port)
    run(port)
    assert logged(port) == gate_holds(gate) and SIDE_KEY not in port.kvs


def test_records_made_during_the_snapshot_are_in_the_swapped_log(port, big):
    gate = big
    hold(port, gate, 100)
    port.complete_commit()
    # A hold taken before its job's entries are read, one after; a hold
    # released; one released and held again.
    hold(port, gate, 101)
    gate.release(1, "bb")
    gate.release(40, "bb")
    gate.release(2, "bb")
    hold(port, gate, 2)
    port.complete_commit()
    hold(port, gate, 102)
    gate.release(39, "bb")
    run(port)
    assert gate.holdlog.snapshots.in_parts is None
    assert logged(port) == gate_holds(gate)
    held = gate_holds(gate)
    assert {(101, "bb"), (102, "bb"), (2, "bb")} <= held
    assert not {(1, "bb"), (40, "bb"), (39, "bb")} & held


def test_a_small_snapshot_is_one_commit_as_before(port):
    gate = Gate(port)
    for jobid in range(1, 4):
        hold(port, gate, jobid)
    gate.holdlog.compaction.appends = holdlog.MAX_APPENDS
    hold(port, gate, 4)
    _, text, append = port.commits[-1]
    assert not append and port.txns == []
    assert replayed(text) == gate_holds(gate)


def test_records_after_the_last_part_wait_for_the_swap_and_go_with_it(port, big):
    gate = big
    hold(port, gate, 100)
    while not port.pending_lookups:
        port.complete_commit()
    answers = []
    hold(port, gate, 101, answers)
    # No commit while the parts are looked up.
    assert port.pending_commits == [] and answers == []
    port.complete_lookup()
    (swap,) = port.pending_commits
    port.complete_commit()
    assert answers == [None]
    assert (101, "bb") in logged(port)
    assert logged(port) == gate_holds(gate)


def test_barrier_does_not_wait_for_a_part_that_carries_no_record(port, big):
    gate = big
    hold(port, gate, 100)
    port.complete_commit()
    assert port.pending_commits and gate.holdlog.commit.sent == []
    answers = []
    gate.holdlog.barrier(answers.append)
    assert answers == [None]


@pytest.mark.parametrize("step", [0, 3])
def test_a_failed_part_gives_the_snapshot_up_and_the_log_stays_whole(port, big, step):
    gate = big
    answers = []
    hold(port, gate, 100, answers)
    for _ in range(step):
        port.complete_commit()
    hold(port, gate, 101, answers)
    failed = port.txns[:]
    port.complete_commit(errno.EIO)
    assert port.txns == failed
    assert any(
        level == syslog.LOG_ERR and "snapshot given up" in text
        for level, text in port.logs
    )
    # With step 0 the failed round carried hold 100: withdrawn.
    assert (100, "bb") in gate_holds(gate) or answers[0].errno == errno.EIO
    # The records queued start the next snapshot; the log is whole.
    run(port)
    assert logged(port) == gate_holds(gate)
    assert SIDE_KEY not in port.kvs


def test_the_next_snapshot_starts_over_with_a_put(port, big):
    gate = big
    hold(port, gate, 100)
    port.complete_commit()
    port.complete_commit()
    port.complete_commit(errno.EIO)
    stale = port.kvs[SIDE_KEY]
    assert stale
    txns = len(port.txns)
    hold(port, gate, 101)
    run(port)
    firsts = [ops[0] for ops in port.txns[txns:] if ops[0][1] == SIDE_KEY]
    assert firsts[0][0] == "put"
    assert logged(port) == gate_holds(gate) and SIDE_KEY not in port.kvs


@pytest.mark.parametrize("failure", ["lookup", "swap"])
def test_a_failed_lookup_or_swap_gives_the_snapshot_up(port, big, failure):
    gate = big
    answers = []
    hold(port, gate, 100)
    while not port.pending_lookups:
        port.complete_commit()
    hold(port, gate, 101, answers)
    first = gate.holdlog.snapshots.in_parts
    if failure == "lookup":
        port.complete_lookup(errno.EIO)
        # The queued hold starts the next snapshot.
        (entry,) = port.pending_commits
        assert ops_of(entry) == [("put", SIDE_KEY), ("append", KEY)]
        port.complete_commit()
        assert answers == [None]
    else:
        port.complete_lookup()
        port.complete_commit(errno.EIO)
        # The hold's record failed: withdrawn, as for any failed commit.
        assert answers[0].errno == errno.EIO
        assert (101, "bb") not in gate_holds(gate)
        assert SIDE_KEY in port.kvs
    assert gate.holdlog.snapshots.in_parts is not first
    assert any("snapshot given up" in text for _, text in port.logs)
    run(port)
    assert logged(port) == gate_holds(gate)
    hold(port, gate, 102)
    run(port)
    assert logged(port) == gate_holds(gate) and SIDE_KEY not in port.kvs


def test_a_side_key_that_is_no_value_is_not_swapped_in(port, big):
    gate = big
    hold(port, gate, 100)
    while not port.pending_lookups:
        port.complete_commit()
    key, callback = port.pending_lookups.pop()
    callback(json.dumps({"ver": 1, "type": "dir", "data": {}}), None)
    assert gate.holdlog.snapshots.in_parts is None
    assert any("not a value" in text for _, text in port.logs)
    assert logged(port) == gate_holds(gate)


def test_a_stale_side_key_is_replaced_and_removed(port, big):
    gate = big
    port.kvs[SIDE_KEY] = "junk that is no entry\n" * 50
    hold(port, gate, 100)
    run(port)
    assert SIDE_KEY not in port.kvs
    assert parse(port.kvs[KEY])[1] == []
    assert logged(port) == gate_holds(gate)


def test_without_a_backing_store_a_part_is_sent_again_without_sync(port, big):
    gate = big
    answers = []
    hold(port, gate, 100)
    port.complete_commit()
    hold(port, gate, 101, answers)
    port.complete_commit()
    (entry,) = port.pending_commits
    assert entry[2] is True
    port.complete_commit(errno.ENOSYS)
    (again,) = port.pending_commits
    assert again[1] == entry[1] and again[2] is False
    port.complete_commit()
    assert answers == [None] and gate.holdlog.snapshots.in_parts is not None
    run(port)
    assert logged(port) == gate_holds(gate)


def test_a_job_being_recovered_stops_the_snapshot(port, big):
    gate = big
    hold(port, gate, 100)
    port.complete_commit()
    port.add_job(200, SCHED, USER)
    gate.begin_recovery(200, USER)
    assert gate.holdlog.snapshots.in_parts is None
    # While it recovers, no snapshot starts: records are appended.
    hold(port, gate, 101)
    run(port)
    assert gate.holdlog.snapshots.in_parts is None
    # Snapshots started meanwhile are given up when they reach the job.
    assert all(op != "put_treeobj" for ops in port.txns for op, _, _ in ops)
    assert (101, "bb") in logged(port)
    assert logged(port) == gate_holds(gate)
    gate.end_recovery(200, [])
    hold(port, gate, 102)
    run(port)
    assert logged(port) == gate_holds(gate) and SIDE_KEY not in port.kvs


def test_unload_gives_the_snapshot_up_and_the_next_instance_writes_one(port, big):
    gate = big
    answers = []
    hold(port, gate, 100)
    port.complete_commit()
    hold(port, gate, 101, answers)
    gate.suspend()
    port.orphan()
    assert gate.holdlog.snapshots.in_parts is None
    assert [error.errno for error in answers] == [errno.EAGAIN]
    run(port)
    gate.attach(port)
    run(port)
    assert logged(port) == gate_holds(gate)
    hold(port, gate, 102)
    run(port)
    assert logged(port) == gate_holds(gate) and SIDE_KEY not in port.kvs


def test_active_holds_and_recent_releases_are_kept(port, big):
    gate = big
    for jobid in (300, 301):
        hold(port, gate, jobid, state=CLEANUP)
    port.defer_commits = False
    for jobid in (300, 301):
        gate.on_cleanup(jobid)
    gate.release(301, "bb", 3)
    port.defer_commits = True
    gate.holdlog.compaction.appends = holdlog.MAX_APPENDS
    hold(port, gate, 100)
    run(port)
    jobs, _ = parse(port.kvs[KEY])
    assert (300, "bb") in logged(port)
    assert [name for _, name, _ in jobs[301]][-1] == RELEASE_EVENT
    assert logged(port) == gate_holds(gate)


def test_a_failing_kvs_never_loops(port, big):
    gate = big
    port.defer_commits = False
    port.fail(KVS, errno.EIO)
    hold(port, gate, 100)
    assert (
        gate.holdlog.snapshots.in_parts is None
        and gate.holdlog.commit.in_flight is None
    )


def test_a_failing_lookup_never_loops(port, big):
    gate = big
    port.defer_commits = False
    port.fail(LOOKUP, errno.EIO)
    hold(port, gate, 100)
    assert (
        gate.holdlog.snapshots.in_parts is None
        and gate.holdlog.commit.in_flight is None
    )
    assert logged(port) == gate_holds(gate)
