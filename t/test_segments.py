"""The hold log's segments under a real job-manager (holdlog.py,
"Segments").

Some 2,600 pending holds make a log whose snapshot is larger than
SEGMENT_FLOOR; then commits one at a time fill its key, which is made a
segment (``epilog-gate.holds-segments.N.log``) instead of being
snapshotted every MAX_APPENDS appends.  Checked: a SIGKILL and a
restart recover every hold from the segments and the key, the load
makes the key the segment after the last it found, the next snapshot
(by bytes, or asked for) removes every segment.
"""

import errno

import flux.job
import flux.kvs
import pytest
from conftest import restart
from flux.job import JobspecV1
from jobs import GATE_SYNCS_ONLY, get_raw, hold_log, query, replayed, segments

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holdlog import MAX_APPENDS, SEGMENTS, parse

#: Jobs of each set, and holds of each job (max-holds at its maximum).
JOBS = 13
HOLDS = 200


@pytest.fixture
def inst(new_instance):
    return new_instance(config=GATE_SYNCS_ONLY, plugin_conf={"max-holds": HOLDS})


def waiting_jobs(handle, count):
    spec = JobspecV1.from_command(["true"]).dumps()
    futures = [flux.job.submit_async(handle, spec, urgency=0) for _ in range(count)]
    return [int(f.get_id()) for f in futures]


def requests(gate, calls, window=500):
    """Each ``(method, jobid, description)`` of ``calls``, ``window`` in
    flight; their answers."""
    answers = []
    for start in range(0, len(calls), window):
        futures = [
            getattr(gate, f"{method}_async")(jobid, description)
            for method, jobid, description in calls[start : start + window]
        ]
        answers.extend(future.get() for future in futures)
    return answers


def holds_on(jobids):
    return {(jobid, f"d{k}") for jobid in jobids for k in range(HOLDS)}


def listed(gate):
    return {(h["id"], h["description"]) for h in gate.list()}


def segment(inst):
    return query(inst)["counters"]["log_segment"]


def logged(inst):
    """The holds the log leaves, replayed as recovery does."""
    return replayed(parse(hold_log(inst))[0])


def into_segments(inst, gate, handle):
    """Jobs with 2,600 holds (``first``), then a spare job held and
    released one request at a time until the log has a segment."""
    first = waiting_jobs(handle, JOBS)
    spare = waiting_jobs(handle, 1)[0]
    requests(gate, [("hold", j, d) for j, d in sorted(holds_on(first))])
    for _ in range(3 * MAX_APPENDS // 32):
        if segment(inst) >= 1:
            break
        for _ in range(16):
            gate.hold(spare, "churn")
            gate.release(spare, "churn")
    assert segment(inst) >= 1 and flux.kvs.exists(handle, SEGMENTS)
    return first, spare


def test_a_large_log_goes_on_in_segments_and_the_next_snapshot_removes_them(inst):
    handle = inst.handle()
    gate = EpilogGate(handle)
    first, spare = into_segments(inst, gate, handle)
    assert [n for n, _ in segments(inst)] == list(range(1, segment(inst) + 1))
    assert logged(inst) == listed(gate) == holds_on(first)
    last = segment(inst)

    handle = restart(inst, "sigkill")
    gate = EpilogGate(handle)
    assert listed(gate) == holds_on(first)
    # The load makes the log's key the segment after the last it found.
    assert segment(inst) == last
    gate.hold(spare, "after")
    assert [n for n, _ in segments(inst)][-1] == last + 1
    assert (spare, "after") in logged(inst)

    # As many bytes again as the snapshot: the next snapshot removes them.
    second = waiting_jobs(handle, JOBS)
    requests(gate, [("release", j, d) for j, d in sorted(holds_on(first))])
    requests(gate, [("hold", j, d) for j, d in sorted(holds_on(second))])
    gate.release(spare, "after")
    assert segment(inst) == 0 and not flux.kvs.exists(handle, SEGMENTS)
    assert logged(inst) == listed(gate) == holds_on(second)

    handle = restart(inst, "sigkill")
    gate = EpilogGate(handle)
    assert listed(gate) == holds_on(second)
    requests(gate, [("release", j, d) for j, d in sorted(holds_on(second))])


def test_a_snapshot_request_removes_the_segments_and_answers_the_size(inst):
    handle = inst.handle()
    gate = EpilogGate(handle)
    first, spare = into_segments(inst, gate, handle)
    answer = gate.snapshot()
    assert segment(inst) == 0 and not flux.kvs.exists(handle, SEGMENTS)
    assert answer["bytes"] == len(get_raw(inst))
    assert logged(inst) == holds_on(first)
    # The next commit appends to the log's key again.
    gate.hold(spare, "next")
    assert segments(inst) == [] and (spare, "next") in logged(inst)
    handle = restart(inst, "sigkill")
    gate = EpilogGate(handle)
    assert listed(gate) == holds_on(first) | {(spare, "next")}


@pytest.mark.parametrize("payload", [[], {"id": 1}, {"bytes": 0}])
def test_a_malformed_snapshot_request_is_refused(inst, payload):
    handle = inst.handle()
    EpilogGate(handle).hold(waiting_jobs(handle, 1)[0], "kept")
    before = query(inst)["counters"]
    with pytest.raises(OSError) as info:
        handle.rpc("job-manager.epilog-gate.snapshot", payload).get()
    assert info.value.errno == errno.EPROTO and "snapshot" in str(info.value)
    # Nothing written: the log is as it was.
    after = query(inst)["counters"]
    assert after["log_commits"] == before["log_commits"]
    assert after["holds"] == before["holds"] == 1
