"""Unit tests of the hold log's segments (holdlog.py, "Segments"), no
broker: the KVS is the FakePort's dict, whose keys are paths.

Once the last snapshot is larger than SEGMENT_FLOOR, a log key that took
MAX_APPENDS appends is made a segment (its tree object moved there, the
batch put in its place) instead of being snapshotted; the next snapshot
(by bytes, or after MAX_SEGMENTS segments) removes them all.  The load
reads the segments in order, then the log's key.
"""

import errno
import syslog

import pytest
from fakeport import FakePort
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from logstrategies import hold_logs

from flux_epilog_gate.gate import SCHED, Gate, holdlog
from flux_epilog_gate.gate.config import Config
from flux_epilog_gate.gate.holdlog import KEY, SEGMENTS, segment_key

from .unitgate import USER, gate_holds, load, replayed

JOBS = (11, 12, 13, 14)


@pytest.fixture
def small(monkeypatch):
    """Limits small enough for a few holds: a snapshot of more than 400
    bytes (its format and four holds) is followed by segments of four
    appends, three segments at most."""
    monkeypatch.setattr(holdlog, "MAX_APPENDS", 4)
    monkeypatch.setattr(holdlog, "SEGMENT_FLOOR", 400)
    monkeypatch.setattr(holdlog, "MAX_SEGMENTS", 3)


def errors(port):
    return [text for level, text in port.logs if level == syslog.LOG_ERR]


def hold(port, gate, jobid, description="bb"):
    if jobid not in port.jobs:
        port.add_job(jobid, SCHED, USER)
    return gate.hold(jobid, description, done=lambda h, error: None)[0]


def snapshotted(port, gate):
    """A gate whose last snapshot holds five holds (over 400 bytes)."""
    for jobid in range(1, 5):
        hold(port, gate, jobid)
    gate.holdlog.compaction.appends = holdlog.MAX_APPENDS
    hold(port, gate, 5)
    assert gate.holdlog.compaction.snapshot_size > holdlog.SEGMENT_FLOOR
    assert gate.holdlog.appends == 0 and gate.holdlog.segment == 0
    return gate


def churn(port, gate, appends, jobid=50):
    """``appends`` commits of one record each: holds and cancels."""
    for k in range(appends):
        if k % 2 == 0:
            hold(port, gate, jobid, "churn")
        else:
            gate.release(jobid, "churn", 0, done=lambda *args: None)


def keys_written(port):
    return [key for key, _, _ in port.commits]


# Writing


def test_a_full_key_after_a_large_snapshot_is_made_a_segment(port, small):
    gate = snapshotted(port, Gate(port))
    before = port.kvs[KEY]
    churn(port, gate, holdlog.MAX_APPENDS + 1)
    (rotation,) = port.txns
    assert [(op, key) for op, key, _ in rotation] == [
        ("put_treeobj", segment_key(1)),
        ("put", KEY),
    ]
    assert set(keys_written(port)) == {KEY}
    assert port.kvs_dir(SEGMENTS) == ["1"]
    assert port.kvs[segment_key(1)].startswith(before)
    assert port.kvs[KEY] == rotation[1][2]
    assert replayed(port.hold_log()) == gate_holds(gate)


def test_making_a_segment_tells_the_snapshot_hook(port, small):
    """The plugin freezes the interpreter's objects then, as after a
    snapshot: the holds of that moment have outlived a key's appends."""
    gate = snapshotted(port, Gate(port))
    calls = []
    gate.on_snapshot(lambda: calls.append(gate.holdlog.segment))
    churn(port, gate, holdlog.MAX_APPENDS + 1)
    assert calls == [1]


def test_a_small_snapshot_is_not_followed_by_segments(port, small):
    gate = Gate(port)
    hold(port, gate, 1)
    gate.holdlog.compaction.appends = holdlog.MAX_APPENDS
    hold(port, gate, 2)
    churn(port, gate, holdlog.MAX_APPENDS * 3)
    assert port.kvs_dir(SEGMENTS) is None
    assert set(keys_written(port)) == {KEY}


def test_the_snapshot_after_max_segments_removes_them(port, small):
    gate = snapshotted(port, Gate(port))
    churn(port, gate, holdlog.MAX_APPENDS * (holdlog.MAX_SEGMENTS + 1))
    assert port.kvs_dir(SEGMENTS) == ["1", "2", "3"]
    txns = len(port.txns)
    churn(port, gate, 1)
    (snapshot,) = port.txns[txns:]
    assert [(op, key) for op, key, _ in snapshot] == [
        ("put", KEY),
        ("unlink", SEGMENTS),
    ]
    assert port.kvs_dir(SEGMENTS) is None
    assert replayed(port.kvs[KEY]) == gate_holds(gate)
    assert gate.holdlog.segment == 0 and not gate.holdlog.segments.present


def test_a_snapshot_by_bytes_removes_the_segments(port, small, monkeypatch):
    gate = snapshotted(port, Gate(port))
    churn(port, gate, holdlog.MAX_APPENDS + 1)
    assert port.kvs_dir(SEGMENTS) == ["1"]
    # The log as long as MAX_BYTES: the next commit is a snapshot.
    gate.holdlog.compaction.size = holdlog.MAX_BYTES
    hold(port, gate, 60)
    assert port.kvs_dir(SEGMENTS) is None
    assert replayed(port.kvs[KEY]) == gate_holds(gate)


def test_a_failed_snapshot_keeps_appending_after_the_segments(port, small):
    gate = snapshotted(port, Gate(port))
    churn(port, gate, holdlog.MAX_APPENDS * (holdlog.MAX_SEGMENTS + 1))
    port.defer_commits = True
    churn(port, gate, 1)
    port.complete_commit(errno.EIO)
    port.defer_commits = False
    port.advance(holdlog.RETRY_DELAY)
    # The records go again to the log's key, after the segments.
    assert port.commits[-1][0] == KEY
    assert port.kvs_dir(SEGMENTS) == ["1", "2", "3"]
    assert replayed(port.hold_log()) == gate_holds(gate)


def test_a_key_that_is_not_a_value_beside_segments_is_replaced(port, small):
    gate = snapshotted(port, Gate(port))
    churn(port, gate, holdlog.MAX_APPENDS + 1)
    port.kvs[KEY + ".x"] = "in the way"
    del port.kvs[KEY]
    churn(port, gate, 1, jobid=51)
    (line,) = [t for t in errors(port) if "is not a value" in t]
    assert line.startswith(KEY)
    assert port.kvs_dir(SEGMENTS) is None
    assert replayed(port.kvs[KEY]) == gate_holds(gate)


# Reading


def test_a_load_reads_the_segments_in_order_and_appends_after_them(port, small):
    gate = snapshotted(port, Gate(port))
    churn(port, gate, holdlog.MAX_APPENDS * 2 + 1)
    hold(port, gate, 70, "late")
    assert port.kvs_dir(SEGMENTS) == ["1", "2"]
    expected = gate_holds(gate)
    fresh = FakePort()
    fresh.kvs = dict(port.kvs)
    for jobid, job in port.jobs.items():
        fresh.add_job(jobid, job.state, USER)
    loading, again = load(fresh)
    assert loading.ready and gate_holds(again) == expected
    assert again.holdlog.segment == 2 and again.holdlog.segments.present
    # KEY's appends are not known: the first batch makes it segment 3.
    hold(fresh, again, 71)
    (rotation,) = fresh.txns
    assert [(op, key) for op, key, _ in rotation] == [
        ("put_treeobj", segment_key(3)),
        ("put", KEY),
    ]
    assert replayed(fresh.hold_log()) == gate_holds(again)


def test_segments_ten_and_up_come_after_nine(port):
    port.kvs[KEY] = ""
    for n, jobid in ((10, 12), (9, 11)):
        port.kvs[segment_key(n)] = (
            f'{{"timestamp":{100.0 + n},"name":"epilog_gate.hold",'
            f'"context":{{"id":{jobid},"description":"s{n}"}}}}\n'
        )
    port.kvs[segment_key(10)] += (
        '{"timestamp":110.5,"name":"epilog_gate.cancel",'
        '"context":{"id":11,"description":"s9"}}\n'
    )
    port.add_job(11, SCHED, USER)
    port.add_job(12, SCHED, USER)
    loading, gate = load(port)
    assert gate_holds(gate) == {(12, "s10")}
    assert gate.holdlog.segment == 10


def _entry(timestamp, jobid, description):
    return (
        f'{{"timestamp":{timestamp},"name":"epilog_gate.hold",'
        f'"context":{{"id":{jobid},"description":"{description}"}}}}\n'
    )


def warnings(port):
    return [text for level, text in port.logs if level == syslog.LOG_WARNING]


@pytest.mark.parametrize(
    "shape", ["a name that is no number", "a leading zero", "a value"]
)
def test_keys_the_gate_never_writes_are_left_out_and_every_hold_survives(port, shape):
    """What the gate never writes under SEGMENTS holds none of its
    records: the log is read all the same, the keys are named, and the
    next commit's snapshot removes them."""
    port.kvs[segment_key(1)] = _entry(100.0, 11, "in-a-segment")
    port.kvs[KEY] = _entry(101.0, 12, "in-the-key")
    if shape == "a value":
        port.kvs = {k: v for k, v in port.kvs.items() if k != segment_key(1)}
        port.kvs[KEY] = _entry(100.0, 11, "in-a-segment") + port.kvs[KEY]
        port.kvs[SEGMENTS] = "junk"
        named = SEGMENTS
    else:
        name = "README" if shape == "a name that is no number" else "01"
        port.kvs[f"{SEGMENTS}.{name}"] = "do not touch"
        named = f"{SEGMENTS}.{name}"
    port.add_job(11, SCHED, USER)
    port.add_job(12, SCHED, USER)
    port.add_job(13, SCHED, USER)
    loading, gate = load(port)
    assert loading.ready and loading.complete
    assert gate_holds(gate) == {(11, "in-a-segment"), (12, "in-the-key")}
    assert any(named in text and "left out" in text for text in warnings(port))
    assert not errors(port)
    hold(port, gate, 13)
    assert port.kvs_dir(SEGMENTS) is None
    assert replayed(port.kvs[KEY]) == {
        (11, "in-a-segment"),
        (12, "in-the-key"),
        (13, "bb"),
    }


def test_a_segment_that_cannot_be_read_is_named_and_the_rest_is_read(port):
    """Segment 2 is a directory: segment 1 and the key are read, and every
    job is recovered from its eventlog as well (the holds recorded only
    in segment 2 are not known)."""
    port.kvs[segment_key(1)] = _entry(100.0, 11, "in-segment-1")
    port.kvs[segment_key(2) + ".inner"] = "junk"
    port.kvs[KEY] = _entry(102.0, 12, "in-the-key")
    for jobid in (11, 12, 13):
        port.add_job(jobid, SCHED, USER)
    loading, gate = load(port)
    assert loading.ready and not loading.complete
    assert gate_holds(gate) == {(11, "in-segment-1"), (12, "in-the-key")}
    assert any(
        f"reading {segment_key(2)}" in text and "recovered from its eventlog" in text
        for text in errors(port)
    )
    hold(port, gate, 13)
    assert port.kvs_dir(SEGMENTS) is None
    assert replayed(port.kvs[KEY]) == {
        (11, "in-segment-1"),
        (12, "in-the-key"),
        (13, "bb"),
    }


def test_a_log_key_that_cannot_be_read_with_segments_is_replaced(port):
    port.kvs[KEY + ".inner"] = "a directory"
    port.kvs[segment_key(1)] = "junk\n"
    port.add_job(11, SCHED, USER)
    loading, gate = load(port)
    assert loading.log is None
    hold(port, gate, 11)
    assert port.kvs_dir(SEGMENTS) is None
    assert replayed(port.kvs[KEY]) == {(11, "bb")}


def _split(data, cuts):
    """``data`` cut after the lines whose indexes are in ``cuts``."""
    lines = data.splitlines(keepends=True)
    pieces, start = [], 0
    for cut in sorted(set(c % (len(lines) + 1) for c in cuts)) + [len(lines)]:
        pieces.append(b"".join(lines[start:cut]))
        start = cut
    return pieces


SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@SETTINGS
@given(
    hold_logs(JOBS),
    st.lists(st.integers(min_value=0, max_value=50), max_size=6),
    st.lists(
        st.integers(min_value=1, max_value=10**6), min_size=7, max_size=7, unique=True
    ),
)
def test_a_log_in_segments_loads_as_the_same_log_in_one_key(log, cuts, numbers):
    data, _ = log
    whole = FakePort()
    whole.kvs[KEY] = data
    split = FakePort()
    first, *rest = _split(data, cuts)
    split.kvs[KEY] = first
    for n, piece in zip(sorted(set(numbers))[: len(rest)], rest):
        split.kvs[segment_key(n)] = piece
    for port in (whole, split):
        for jobid in JOBS:
            port.add_job(jobid, SCHED, USER)
    _, expected = load(whole)
    loading, gate = load(split)
    assert loading.ready
    assert gate_holds(gate) == gate_holds(expected)


@SETTINGS
@given(
    hold_logs(JOBS),
    st.lists(
        st.text(min_size=1, max_size=12).filter(lambda n: "." not in n),
        min_size=1,
        max_size=4,
    ),
    st.binary(max_size=100),
)
def test_names_beside_the_segments_never_cost_the_log_a_hold(log, names, junk):
    """Whatever else is under SEGMENTS (names that are no segment's), the
    log loads as it would without it."""
    data, _ = log
    clean = FakePort()
    clean.kvs[KEY] = data
    strayed = FakePort()
    strayed.kvs[KEY] = data
    for name in names:
        if not (name.isdecimal() and name.isascii() and name[0] != "0"):
            strayed.kvs[f"{SEGMENTS}.{name}"] = junk
    for port in (clean, strayed):
        for jobid in JOBS:
            port.add_job(jobid, SCHED, USER)
    _, expected = load(clean)
    loading, gate = load(strayed)
    assert loading.ready and loading.complete
    assert gate_holds(gate) == gate_holds(expected)


@SETTINGS
@given(st.dictionaries(st.text(max_size=12), st.binary(max_size=200), max_size=6))
def test_whatever_the_segments_hold_a_load_never_fails(segments):
    port = FakePort()
    port.kvs[KEY] = ""
    for name, value in segments.items():
        port.kvs[f"{SEGMENTS}.{name}"] = value
    port.add_job(11, SCHED, USER)
    loading, gate = load(port)
    assert loading.ready
    hold(port, gate, 11)
    again = FakePort()
    again.kvs = dict(port.kvs)
    again.add_job(11, SCHED, USER)
    _, reloaded = load(again)
    assert (11, "bb") in gate_holds(reloaded)


# Snapshots asked for (the snapshot request)


def test_a_snapshot_asked_for_when_idle_goes_at_once(port, small):
    gate = snapshotted(port, Gate(port))
    churn(port, gate, holdlog.MAX_APPENDS + 1)
    assert port.kvs_dir(SEGMENTS) == ["1"]
    answers = []
    gate.snapshot(lambda size, error: answers.append((size, error)))
    assert answers == [(len(port.kvs[KEY]), None)]
    assert port.kvs_dir(SEGMENTS) is None
    assert replayed(port.kvs[KEY]) == gate_holds(gate)


def test_a_snapshot_asked_for_goes_with_the_next_commit(port, small):
    gate = snapshotted(port, Gate(port))
    port.defer_commits = True
    hold(port, gate, 60)
    answers = []
    gate.snapshot(lambda size, error: answers.append(error))
    gate.snapshot(lambda size, error: answers.append(error))
    hold(port, gate, 61)
    assert answers == []
    port.answer_all(100)
    assert answers == [None, None]
    assert replayed(port.kvs[KEY]) == gate_holds(gate)
    assert gate.holdlog.commits == 7


def asked_in_parts(port):
    """A gate whose snapshot, asked for, is in parts (eight holds, parts
    of 200 bytes); commits wait for the test.  Its answers."""
    gate = Gate(port, Config(snapshot_chunk=200))
    for jobid in range(1, 9):
        hold(port, gate, jobid)
    port.defer_commits = True
    answers = []
    gate.snapshot(lambda size, error: answers.append(error))
    return gate, answers


def test_a_snapshot_asked_for_in_parts_is_answered_after_the_swap(port):
    gate, answers = asked_in_parts(port)
    while port.pending_commits or port.pending_lookups:
        assert answers == []
        if port.pending_commits:
            port.complete_commit()
        else:
            port.complete_lookup()
    assert answers == [None] and port.txns[-1][0][0] == "put_treeobj"
    assert replayed(port.kvs[KEY]) == gate_holds(gate)


def test_a_snapshot_asked_for_during_a_recovery_is_refused(port):
    gate = Gate(port)
    hold(port, gate, 1)
    port.add_job(2, SCHED, USER)
    gate.begin_recovery(2, USER)
    answers = []
    gate.snapshot(lambda size, error: answers.append(error))
    (error,) = answers
    assert error.errno == errno.EAGAIN and "recovered" in error.strerror
    # Nothing is left waiting: the next record is an append.
    hold(port, gate, 3)
    assert port.commits[-1][2] is True


def test_a_snapshot_given_up_is_answered_with_the_reason(port):
    _, answers = asked_in_parts(port)
    port.complete_commit(errno.EIO)
    (error,) = answers
    assert error.errno == errno.EAGAIN and "given up" in error.strerror


def test_an_unload_answers_a_snapshot_asked_for(port):
    gate = Gate(port)
    hold(port, gate, 1)
    port.defer_commits = True
    hold(port, gate, 2)
    answers = []
    gate.snapshot(lambda size, error: answers.append(error))
    gate.suspend()
    (error,) = answers
    assert error.errno == errno.EAGAIN and "unloaded" in error.strerror


def test_a_full_key_that_is_not_there_is_appended_to_and_nothing_logged(port, small):
    gate = snapshotted(port, Gate(port))
    del port.kvs[KEY]
    gate.holdlog.compaction.appends = holdlog.MAX_APPENDS
    hold(port, gate, 70)
    assert port.commits[-1][0] == KEY and port.commits[-1][2] is True
    assert errors(port) == [] and port.kvs_dir(SEGMENTS) is None


def test_a_line_that_is_no_entry_is_named_by_its_key_and_line(port):
    port.kvs[segment_key(1)] = _entry(100.0, 11, "ok") + "junk\n"
    port.kvs[segment_key(2)] = "\n" + _entry(101.0, 12, "ok") + "{}\n"
    port.kvs[KEY] = "more junk\n"
    for jobid in (11, 12):
        port.add_job(jobid, SCHED, USER)
    _, gate = load(port)
    assert gate_holds(gate) == {(11, "ok"), (12, "ok")}
    logged = errors(port)
    assert [t for t in logged if t.startswith(f"{segment_key(1)}: skipped line 2")]
    assert [t for t in logged if t.startswith(f"{segment_key(2)}: skipped line 3")]
    assert [t for t in logged if t.startswith(f"{KEY}: skipped line 1")]
