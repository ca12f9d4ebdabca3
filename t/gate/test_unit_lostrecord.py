"""Unit tests of lost holds reaching their service
(flux_epilog_gate.gate.lostrecord, the losses of a dropped job, and the
watchers of lost holds): no broker, the job-manager is a FakePort."""

import errno
import json
import syslog

from hypothesis import given
from hypothesis import strategies as st

from flux_epilog_gate.gate import INACTIVE, Gate, lostrecord
from flux_epilog_gate.gate.holds import HOLD_EVENT, Reason
from flux_epilog_gate.gate.lost import LOST_FOUND
from flux_epilog_gate.jobid import f58

from .unitgate import JOB, JOB2, USER, at_point, ev, held_job, logged


def drop(port, gate, jobid=JOB, *descriptions, where="eventlog"):
    """The hold log names ``jobid`` with ``descriptions`` (epilog, and
    ``setup`` at the prolog); a new job-manager did not replay it: its
    eventlog is in job-lost+found (``where``: "eventlog", "jobspec" alone,
    or nowhere)."""
    port.purged.add(jobid)
    key = f"{LOST_FOUND}.{f58(jobid)}"
    if where == "eventlog":
        submit = {"timestamp": 1.0, "name": "submit", "context": {"userid": USER}}
        port.kvs[f"{key}.eventlog"] = json.dumps(submit) + "\n"
    elif where == "jobspec":
        port.kvs[f"{key}.jobspec"] = "{}"
    entries = [ev(1.0, HOLD_EVENT, description=d) for d in descriptions]
    entries.append(ev(1.0, HOLD_EVENT, description="setup", point="prolog"))
    gate.losses.check_unseen({jobid: entries}, seen=set())


def errors(port):
    return [text for level, text in port.logs if level == syslog.LOG_ERR]


def test_every_hold_of_a_dropped_job_is_lost(port, gate):
    drop(port, gate, JOB, "bb")
    assert gate.stats["lost"] == 2
    for description in ("bb", "setup"):
        (line,) = [t for t in errors(port) if f"hold {description} " in t]
        assert f"{LOST_FOUND}.{f58(JOB)}" in line and "did not replay" in line
        assert gate.release(JOB, description) == (False, Reason.LOST_DROPPED)
    entries = {e["description"]: e for e in gate.lost_record.entries()}
    assert entries["setup"]["point"] == "prolog" and entries["bb"]["userid"] == USER
    # Recorded as cancelled once the record of them is durable.
    names = [(name, c["description"]) for _, name, c in logged(port)[JOB]]
    assert ("epilog_gate.cancel", "setup") in names


def test_a_dropped_job_without_an_eventlog_has_no_known_owner(port, gate):
    drop(port, gate, JOB, "bb", where="jobspec")
    assert gate.stats["lost"] == 2
    assert {e["userid"] for e in gate.lost_record.entries()} == {None}


def test_a_purged_job_is_not_reported_lost(port, gate):
    drop(port, gate, JOB, "bb", where=None)
    assert gate.stats["lost"] == 0 and len(gate.lost_record) == 0
    ((level, text),) = port.logs
    assert level == syslog.LOG_WARNING and "bb, setup" in text


def test_the_hold_log_cancels_a_lost_hold_only_once_its_record_is_durable(port):
    gate = Gate(port)
    port.defer_commits = True
    drop(port, gate, JOB, "bb")
    key, _, _, _ = port.pending_commits[0]
    assert key == lostrecord.KEY and len(port.pending_commits) == 1
    port.complete_commit(errno.EIO)
    assert len(port.pending_commits) == 0
    port.advance(lostrecord.RETRY)
    port.answer_all()
    assert port.kvs[lostrecord.KEY].count("\n") == 2
    names = [name for _, name, _ in logged(port)[JOB]]
    assert names.count("epilog_gate.cancel") == 2


def test_the_record_is_bounded_in_count(port, gate, monkeypatch):
    monkeypatch.setattr(lostrecord, "MAX_KEPT", 3)
    drop(port, gate, JOB, "a", "b")
    drop(port, gate, JOB2, "c")
    assert [(e["id"], e["description"]) for e in gate.lost_record.entries()] == [
        (JOB, "setup"),
        (JOB2, "c"),
        (JOB2, "setup"),
    ]
    assert sum("dropped undelivered" in t for t in errors(port)) == 2


def test_a_new_gate_keeps_the_record_it_finds(port, gate):
    drop(port, gate, JOB, "bb")
    again = Gate(port)
    again.lost_record.found(port.kvs_get(lostrecord.KEY))
    assert again.lost_record.entries() == gate.lost_record.entries()


@given(st.binary(max_size=400) | st.text(max_size=400).map(str.encode))
def test_any_value_of_the_record_loads(data):
    entries, bad = lostrecord.parse(data)
    assert all(lostrecord._is_entry(e) for e in entries)
    assert len(entries) + len(bad) <= data.count(b"\n") + 1


# Watchers of lost holds


def test_a_watcher_of_lost_holds_gets_each_first_then_as_lost(port, gate):
    at_point(port, gate, "bb", jobid=JOB2)
    drop(port, gate, JOB, "bb")
    gate.watch("lost", lost=True)
    gate.watch("plain")
    received = port.sent["lost"]
    assert [(a["id"], a["description"], a.get("lost")) for a in received] == [
        (JOB, "bb", True),
        (JOB, "setup", True),
        (JOB2, "bb", None),
    ]
    assert [a["id"] for a in port.sent["plain"]] == [JOB2]
    # Lost while watched: sent at once.
    held_job(port, gate, "late", jobid=JOB + 1)
    port.set_state(JOB + 1, INACTIVE)
    gate.on_inactive(JOB + 1)
    assert received[-1]["description"] == "late" and received[-1]["lost"]
    assert all(not a.get("lost") for a in port.sent["plain"])


def test_a_lost_hold_acknowledged_is_sent_to_no_later_watcher(port, gate):
    drop(port, gate, JOB, "bb")
    gate.watch("first", descriptions=["bb"], lost=True)
    gate.watch("second", lost=True)
    gate.acknowledge(lambda sink: sink == "first", 1)
    assert [e["description"] for e in gate.lost_record.entries()] == ["setup"]
    gate.watch("third", lost=True)
    assert [a["description"] for a in port.sent["third"]] == ["setup"]
    # The stream that got both, and ended unacknowledged, took nothing.
    gate.unwatch(lambda sink: sink in ("second", "third"))
    gate.watch("fourth", lost=True)
    assert [a["description"] for a in port.sent["fourth"]] == ["setup"]


def test_a_listener_is_told_of_each_lost_hold(port, gate):
    told = []

    class Listener:
        def lost(self, hold):
            told.append((hold.id, hold.description, hold.point))

    gate.listeners.append(Listener())
    drop(port, gate, JOB, "bb")
    assert sorted(told) == [(JOB, "bb", "epilog"), (JOB, "setup", "prolog")]
