"""Unit tests of watchers (flux_epilog_gate.gate.watchers); no broker, the
job-manager is a FakePort."""

import errno

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flux_epilog_gate.errors import GateError
from flux_epilog_gate.gate import CLEANUP, RUN, SCHED, Gate, watchers
from flux_epilog_gate.gate.config import Config
from flux_epilog_gate.gate.watchers import WINDOW

from .unitgate import (
    JOB,
    JOB2,
    OTHER,
    USER,
    at_point,
    held_job,
    started_job_in_cleanup,
)

# Watch


def test_watch_first_sends_every_hold_already_active(port, gate):
    at_point(port, gate, "bb")
    held_job(port, gate, "pending", jobid=JOB2)
    gate.watch("w")
    assert port.sent["w"] == [
        {
            "id": JOB,
            "description": "bb",
            "userid": USER,
            "ran": False,
            "point": "epilog",
        }
    ]


def test_watch_sends_each_later_activation(port, gate):
    gate.watch("w")
    at_point(port, gate, "bb", "umount")
    assert sorted(p["description"] for p in port.sent["w"]) == ["bb", "umount"]


def test_watch_says_the_job_ran_when_it_started(port, gate):
    gate.watch("w")
    started_job_in_cleanup(port, gate, "bb")
    port.happen(JOB, "finish")
    gate.on_event(JOB, "finish", CLEANUP)
    assert port.sent["w"] == [
        {
            "id": JOB,
            "description": "bb",
            "userid": USER,
            "ran": True,
            "point": "epilog",
        }
    ]


def test_watch_does_not_send_pending_holds(port, gate):
    gate.watch("w")
    held_job(port, gate, "bb")
    assert port.sent["w"] == []


def test_watch_with_descriptions_sends_only_those(port, gate):
    gate.watch("w", descriptions={"bb"})
    at_point(port, gate, "bb", "umount")
    assert [p["description"] for p in port.sent["w"]] == ["bb"]


def test_watch_with_descriptions_filters_the_first_responses_too(port, gate):
    at_point(port, gate, "bb", "umount")
    gate.watch("w", descriptions={"umount"})
    assert [p["description"] for p in port.sent["w"]] == ["umount"]


def test_watch_with_userid_sends_only_that_users_jobs(port, gate):
    gate.watch("w", userid=OTHER)
    at_point(port, gate, "mine", jobid=JOB, userid=USER)
    at_point(port, gate, "theirs", jobid=JOB2, userid=OTHER)
    assert [p["description"] for p in port.sent["w"]] == ["theirs"]


def test_every_watcher_gets_each_activation(port, gate):
    gate.watch("w1")
    gate.watch("w2")
    at_point(port, gate, "bb")
    assert port.sent["w1"] == port.sent["w2"] and len(port.sent["w1"]) == 1


def test_dead_watcher_is_dropped_at_the_next_activation(port, gate):
    gate.watch("w")
    port.kill("w")
    at_point(port, gate, "bb")
    assert gate.watchers.streams == []


def test_dead_watcher_does_not_keep_live_ones_from_their_responses(port, gate):
    gate.watch("dead")
    gate.watch("live")
    port.kill("dead")
    at_point(port, gate, "bb")
    assert len(port.sent["live"]) == 1
    assert [w.sink for w in gate.watchers.streams] == ["live"]


def test_watcher_dead_during_its_first_responses_is_not_added(port, gate):
    at_point(port, gate, "bb")
    port.kill("w")
    gate.watch("w")
    assert gate.watchers.streams == []


def test_unwatch_drops_matching_watchers_and_counts_them(port, gate):
    gate.watch("a1")
    gate.watch("a2")
    gate.watch("b")
    assert gate.unwatch(lambda sink: sink.startswith("a")) == 2
    assert [w.sink for w in gate.watchers.streams] == ["b"]


def test_unwatched_sink_receives_no_more_activations(port, gate):
    gate.watch("w")
    gate.unwatch(lambda sink: sink == "w")
    at_point(port, gate, "bb")
    assert port.sent["w"] == []


# Flow control: what a watcher that does not read costs (watch-backlog)


def bounded(port, **conf):
    return Gate(port, Config(**conf))


def activate(port, gate, count, jobid=JOB):
    """``count`` holds of one job become active."""
    return at_point(port, gate, *(f"h{n}" for n in range(count)), jobid=jobid)


def descriptions(port, sink):
    return [payload["description"] for payload in port.sent[sink]]


def its(gate, sink):
    return lambda other: other == sink


# Flow control


def test_a_watcher_that_acknowledges_gets_everything(port):
    gate = bounded(port, watch_backlog=3)
    gate.watch("w")
    for jobid in range(1, 11):
        at_point(port, gate, "h", jobid=jobid)
        if jobid % 3 == 0:
            assert gate.watchers.streams[0].unacknowledged == 3
            gate.acknowledge(its(gate, "w"), len(port.sent["w"]))
    assert [p["id"] for p in port.sent["w"]] == list(range(1, 11))
    assert "w" not in port.ended and len(gate.watchers.streams) == 1


def test_a_watcher_that_does_not_read_is_ended_past_the_bound(port):
    gate = bounded(port, watch_backlog=3)
    gate.watch("stopped")
    gate.watch("reader")
    for jobid in range(1, 8):
        at_point(port, gate, "h", jobid=jobid)
        gate.acknowledge(its(gate, "reader"), len(port.sent["reader"]))
    errnum, text = port.ended["stopped"]
    assert errnum == errno.ENOBUFS
    assert "watch-backlog=3" in text and "fell behind" in text
    # At most the bound was sent to it; nothing of it is kept.
    assert len(port.sent["stopped"]) == 3
    assert [w.sink for w in gate.watchers.streams] == ["reader"]
    assert gate.counters()["behind"] == 1
    assert len(port.sent["reader"]) == 7 and "reader" not in port.ended
    assert any("fell behind" in text for _, text in port.logs)


def test_a_burst_larger_than_the_bound_ends_a_watcher_that_cannot_ack(port):
    gate = bounded(port, watch_backlog=3)
    gate.watch("w")
    activate(port, gate, 4)
    assert port.ended["w"][0] == errno.ENOBUFS and not gate.watchers.streams


def test_holds_active_before_the_watch_do_not_count_against_the_bound(port):
    gate = bounded(port, watch_backlog=2)
    activate(port, gate, 9)
    gate.watch("w")
    assert len(port.sent["w"]) == 2 and "w" not in port.ended
    while len(port.sent["w"]) < 9:
        gate.acknowledge(its(gate, "w"), len(port.sent["w"]))
    assert sorted(descriptions(port, "w")) == sorted(f"h{n}" for n in range(9))


def test_a_hold_released_before_its_turn_is_not_sent(port):
    gate = bounded(port, watch_backlog=1)
    activate(port, gate, 3)
    gate.watch("w")
    first = port.sent["w"][0]["description"]
    gone = next(d for d in ("h0", "h1", "h2") if d != first)
    gate.release(JOB, gone)
    for _ in range(3):
        gate.acknowledge(its(gate, "w"), len(port.sent["w"]))
    assert gone not in descriptions(port, "w")
    assert len(port.sent["w"]) == 2


def test_ack_of_an_unknown_stream_or_of_more_than_sent_is_refused(port):
    gate = bounded(port, watch_backlog=5)
    gate.watch("w")
    activate(port, gate, 2)
    with pytest.raises(GateError) as exc:
        gate.acknowledge(its(gate, "nobody"), 1)
    assert exc.value.errnum == errno.ENOENT
    with pytest.raises(GateError) as exc:
        gate.acknowledge(its(gate, "w"), 3)
    assert exc.value.errnum == errno.EINVAL and "2 activations sent" in str(
        exc.value.message
    )
    gate.acknowledge(its(gate, "w"), 2)
    # An older acknowledgement arriving late changes nothing.
    gate.acknowledge(its(gate, "w"), 1)
    assert gate.watchers.streams[0].acked == 2


@settings(max_examples=60, deadline=None)
@given(
    bound=st.integers(1, 6),
    steps=st.lists(
        st.one_of(st.just("activate"), st.just("ack"), st.just("release")),
        max_size=60,
    ),
)
def test_flow_control_never_exceeds_the_bound_and_loses_nothing(bound, steps):
    """Random activations, acknowledgements and releases: the stream never
    has more than the bound unacknowledged, and a reader that acknowledged
    everything it got was sent each activation exactly once, unless it
    fell behind by more than the bound (then it is ended, told why)."""
    from fakeport import FakePort

    port = FakePort()
    gate = bounded(port, watch_backlog=bound)
    gate.watch("w")
    made = 0
    for step in steps:
        if step == "activate":
            jobid = 1000 + made
            at_point(port, gate, "h", jobid=jobid)
            made += 1
        elif step == "ack" and gate.watchers.streams:
            gate.acknowledge(its(gate, "w"), len(port.sent["w"]))
        elif step == "release" and gate.jobs:
            jobid = next(iter(gate.jobs))
            gate.release(jobid, "h")
        if gate.watchers.streams:
            watcher = gate.watchers.streams[0]
            assert watcher.unacknowledged <= bound
            assert watcher.behind <= bound
    ids = [payload["id"] for payload in port.sent["w"]]
    assert len(ids) == len(set(ids))
    if "w" in port.ended:
        assert port.ended["w"][0] == errno.ENOBUFS
        assert not gate.watchers.streams
    else:
        while gate.watchers.streams and gate.watchers.streams[0].queue:
            gate.acknowledge(its(gate, "w"), len(port.sent["w"]))
        assert sorted(ids + [p["id"] for p in port.sent["w"][len(ids) :]]) == list(
            range(1000, 1000 + made)
        )


def test_a_burst_larger_than_the_window_waits_in_the_gate_for_acks(port):
    gate = bounded(port, watch_backlog=600, max_holds=101)
    gate.watch("reader")
    gate.watch("stopped")
    for jobid in range(1, 6):
        activate(port, gate, 100, jobid=jobid)
    assert len(port.sent["reader"]) == WINDOW
    while len(port.sent["reader"]) < 500:
        gate.acknowledge(its(gate, "reader"), len(port.sent["reader"]))
    assert len(port.sent["stopped"]) == WINDOW and "stopped" not in port.ended
    assert gate.watchers.streams[1].behind == 500
    activate(port, gate, 101, jobid=6)
    assert port.ended["stopped"][0] == errno.ENOBUFS
    assert [w.sink for w in gate.watchers.streams] == ["reader"]


def test_a_prolog_hold_aborted_before_its_turn_is_sent_once(port, monkeypatch):
    """The window is full when a watcher starts, and a prolog hold still
    waiting its turn is aborted: it is sent once, aborted."""
    monkeypatch.setattr(watchers, "WINDOW", 1)
    gate = bounded(port, watch_backlog=5)
    port.add_job(JOB, SCHED, USER)
    for name in ("a", "b"):
        gate.hold(JOB, name, None, "prolog")
    port.set_state(JOB, RUN)
    port.happen(JOB, "alloc")
    gate.on_run(JOB)
    gate.watch("w")
    (first,) = port.sent["w"]
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    for _ in range(3):
        gate.acknowledge(its(gate, "w"), len(port.sent["w"]))
    sent = [(p["description"], p.get("aborted", False)) for p in port.sent["w"]]
    other = "b" if first["description"] == "a" else "a"
    assert sorted(sent) == sorted(
        [(first["description"], False), (first["description"], True), (other, True)]
    )
