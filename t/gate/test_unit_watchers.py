"""Unit tests of watchers (flux_epilog_gate.gate.watchers); no broker, the
job-manager is a FakePort."""

from flux_epilog_gate.gate import CLEANUP

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
    assert gate.watchers == []


def test_dead_watcher_does_not_keep_live_ones_from_their_responses(port, gate):
    gate.watch("dead")
    gate.watch("live")
    port.kill("dead")
    at_point(port, gate, "bb")
    assert len(port.sent["live"]) == 1
    assert [w.sink for w in gate.watchers] == ["live"]


def test_watcher_dead_during_its_first_responses_is_not_added(port, gate):
    at_point(port, gate, "bb")
    port.kill("w")
    gate.watch("w")
    assert gate.watchers == []


def test_unwatch_drops_matching_watchers_and_counts_them(port, gate):
    gate.watch("a1")
    gate.watch("a2")
    gate.watch("b")
    assert gate.unwatch(lambda sink: sink.startswith("a")) == 2
    assert [w.sink for w in gate.watchers] == ["b"]


def test_unwatched_sink_receives_no_more_activations(port, gate):
    gate.watch("w")
    gate.unwatch(lambda sink: sink == "w")
    at_point(port, gate, "bb")
    assert port.sent["w"] == []
