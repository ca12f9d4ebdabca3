"""Unit tests of lost holds (flux_epilog_gate.gate.lost): a pending epilog
hold whose job went inactive without it is reported, counted, answered and
recorded, once; no broker, the job-manager is a FakePort."""

import errno
import syslog

from flux_epilog_gate.gate import CLEANUP, INACTIVE, RUN, SCHED
from flux_epilog_gate.gate.holdlog import KEY, parse
from flux_epilog_gate.gate.holds import (
    CANCEL_EVENT,
    HOLD_EVENT,
    RELEASE_EVENT,
    Reason,
)
from flux_epilog_gate.gate.lost import pending_in_log
from flux_epilog_gate.jobid import f58

from .unitgate import JOB, JOB2, USER, at_point, ev, held_job, marked


def lost_lines(port, level=syslog.LOG_ERR):
    return [text for lev, text in port.logs if "was lost" in text and lev == level]


def logged_entries(port, jobid=JOB):
    return [(name, c["description"]) for _, name, c in parse(port.kvs[KEY])[0][jobid]]


# A job the gate tracks goes inactive


def test_pending_epilog_hold_of_an_inactive_job_is_lost_loudly(port, gate):
    held_job(port, gate, "bb", "umount")
    port.set_state(JOB, INACTIVE)
    gate.on_inactive(JOB)
    lines = lost_lines(port)
    assert len(lines) == 2
    assert f"hold bb of job {f58(JOB)} was lost" in lines[0]
    assert gate.stats["lost"] == 2
    assert gate.release(JOB, "bb") == (False, Reason.LOST)
    # Recorded as cancelled: the hold log no longer names it as held.
    assert ("epilog_gate.cancel", "bb") in logged_entries(port)
    assert pending_in_log(parse(port.kvs[KEY])[0][JOB]) == []


def test_active_hold_of_an_inactive_job_is_not_lost(port, gate):
    at_point(port, gate, "bb")
    gate.on_inactive(JOB)
    assert lost_lines(port) == [] and gate.stats["lost"] == 0
    assert gate.release(JOB, "bb") == (False, Reason.JOB_INACTIVE)


def test_pending_prolog_hold_of_an_inactive_job_is_not_lost(port, gate):
    port.add_job(JOB, SCHED, USER)
    gate.hold(JOB, "setup", None, "prolog")
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    gate.on_inactive(JOB)
    assert lost_lines(port) == [] and gate.stats["lost"] == 0


# Jobs the hold log names that are no longer active at a load


def test_pending_in_log_is_what_the_log_leaves_held_at_the_epilog():
    entries = [
        ev(1.0, HOLD_EVENT, description="bb"),
        ev(1.0, HOLD_EVENT, description="cc"),
        ev(1.0, HOLD_EVENT, description="dd"),
        ev(1.0, HOLD_EVENT, description="setup", point="prolog"),
        ev(2.0, CANCEL_EVENT, description="cc"),
        ev(3.0, RELEASE_EVENT, description="dd", status=0),
    ]
    assert pending_in_log(entries) == ["bb"]


def unseen(port, gate, jobid, *descriptions):
    port.defer_eventlogs = True
    logged = {jobid: [ev(1.0, HOLD_EVENT, description=d) for d in descriptions]}
    gate.losses.check_unseen(logged, seen=set())


def answer(port, events, error=None):
    jobid, callback = port.pending_eventlogs.pop(0)
    callback(None if error else events, error)
    return jobid


def test_a_job_whose_clean_is_not_yet_in_its_eventlog_is_reported(port, gate):
    """The job-manager says the job is inactive (it posted clean as it
    restarted) before its eventlog shows it."""
    unseen(port, gate, JOB, "bb")
    port.add_job(JOB, INACTIVE, USER)
    answer(port, [ev(1.0, "submit"), ev(2.0, "start"), ev(3.0, "exception")])
    assert len(lost_lines(port)) == 1 and gate.stats["lost"] == 1


def test_job_gone_inactive_before_the_load_loses_its_pending_holds(port, gate):
    unseen(port, gate, JOB, "bb", "timed")
    events = [
        ev(1.0, "submit", userid=USER),
        ev(2.0, "start"),
        marked(3.0, "epilog-start", description="timed"),
        marked(9.0, "epilog-finish", description="timed", status=124),
        ev(10.0, "clean"),
    ]
    assert answer(port, events) == JOB
    (line,) = lost_lines(port)
    assert f"hold bb of job {f58(JOB)} was lost" in line
    assert gate.stats["lost"] == 1
    assert gate.release(JOB, "bb") == (False, Reason.LOST)
    assert ("epilog_gate.cancel", "bb") in logged_entries(port)


def test_another_plugins_epilog_start_does_not_make_a_hold_started(port, gate):
    unseen(port, gate, JOB, "bb")
    answer(port, [ev(2.0, "epilog-start", description="bb"), ev(10.0, "clean")])
    assert len(lost_lines(port)) == 1


def test_jobs_seen_or_without_pending_epilog_holds_are_not_read(port, gate):
    logged = {
        JOB: [ev(1.0, HOLD_EVENT, description="bb")],
        JOB2: [
            ev(1.0, HOLD_EVENT, description="bb"),
            ev(2.0, CANCEL_EVENT, description="bb"),
        ],
    }
    port.defer_eventlogs = True
    gate.losses.check_unseen(logged, seen={JOB})
    assert port.pending_eventlogs == []


def test_a_job_not_inactive_is_not_reported(port, gate):
    unseen(port, gate, JOB, "bb")
    port.add_job(JOB, RUN, USER)
    answer(port, [ev(1.0, "submit"), ev(2.0, "start")])
    assert port.logs == [] and gate.stats["lost"] == 0


def test_a_purged_job_is_a_warning_not_a_loss(port, gate):
    unseen(port, gate, JOB, "bb")
    answer(port, None, OSError(errno.ENOENT, "No such file or directory"))
    ((level, text),) = port.logs
    assert level == syslog.LOG_WARNING and "is not known" in text
    assert gate.stats["lost"] == 0


def test_a_failed_lookup_is_an_error_not_a_loss(port, gate):
    unseen(port, gate, JOB, "bb")
    answer(port, None, OSError(errno.EIO, "Input/output error"))
    ((level, text),) = port.logs
    assert level == syslog.LOG_ERR and "not checked" in text
    assert gate.stats["lost"] == 0


def test_a_job_the_gate_holds_again_is_not_reported(port, gate):
    unseen(port, gate, JOB, "bb")
    port.add_job(JOB, RUN, USER)
    gate.hold(JOB, "bb")
    answer(port, [ev(10.0, "clean")])
    assert lost_lines(port) == []


def test_a_job_going_inactive_while_recovered_reports_its_lost_holds(port, gate):
    port.add_job(JOB, CLEANUP, USER)
    gate.begin_recovery(JOB, USER)
    port.set_state(JOB, INACTIVE)
    gate.on_inactive(JOB)
    gate.end_recovery(JOB, [ev(1.0, HOLD_EVENT, description="bb")])
    assert len(lost_lines(port)) == 1 and gate.jobs == {}
    assert gate.release(JOB, "bb") == (False, Reason.LOST)
