"""Unit tests of what the gate does while its instance shuts down
(flux_epilog_gate.gate.shutdown), no broker: the job-manager is a FakePort and
each test moves the broker's state itself."""

import errno
import syslog

import pytest
from fakeport import CANCEL

from flux_epilog_gate.errors import GateError
from flux_epilog_gate.gate import CLEANUP, RUN, SCHED, Gate
from flux_epilog_gate.gate.config import Config
from flux_epilog_gate.gate.holdlog import KEY, parse
from flux_epilog_gate.gate.holds import ACTIVE, PENDING
from flux_epilog_gate.gate.shutdown import (
    BROKER_CLEANUP,
    BROKER_RUN,
    BROKER_SHUTDOWN,
    SHUTDOWN_STATUS,
    loaded_from_config,
)
from flux_epilog_gate.jobid import f58

from .unitgate import epilog_starts

TIMEOUT = 5.0
ACTIVE_JOB = 11
RUNNING_JOB = 12
QUEUED_JOB = 13


def make(port, action="auto"):
    gate = Gate(port, Config(shutdown_timeout=TIMEOUT, shutdown_action=action))
    shutdown = gate.watch_shutdown(port)
    shutdown.on_broker_state(BROKER_RUN)
    return gate, shutdown


def jobs(port, gate):
    """An active hold (a job cancelled while pending), a pending hold on a
    running job and a pending hold on a job still in the queue."""
    port.add_job(ACTIVE_JOB, SCHED)
    gate.hold(ACTIVE_JOB, "bb")
    port.set_state(ACTIVE_JOB, CLEANUP)
    gate.on_cleanup(ACTIVE_JOB)
    port.add_job(RUNNING_JOB, RUN, happened={"alloc", "start"})
    gate.hold(RUNNING_JOB, "umount")
    port.add_job(QUEUED_JOB, SCHED)
    gate.hold(QUEUED_JOB, "license")


def end_running_job(port, gate):
    """The shutdown cancels the running job: it ends (finish)."""
    port.set_state(RUNNING_JOB, CLEANUP)
    gate.on_cleanup(RUNNING_JOB)
    port.happen(RUNNING_JOB, "finish")
    gate.on_event(RUNNING_JOB, "finish", CLEANUP)


def still_running(port, gate, jobid=RUNNING_JOB):
    """The shutdown cancelled the running job, but its processes have not
    ended yet (no finish): its hold is still pending."""
    port.set_state(jobid, CLEANUP)
    gate.on_cleanup(jobid)


def lines(port, text, level=None):
    return [
        line
        for lev, line in port.logs
        if text in line and (level is None or lev == level)
    ]


# Naming what the shutdown waits on


def test_nothing_is_logged_before_the_broker_enters_cleanup(port):
    gate, _ = make(port)
    jobs(port, gate)
    port.advance(2 * TIMEOUT)
    assert port.logs == [] and port.aborted == 0


def test_each_hold_of_a_running_or_cleanup_job_is_named_once(port):
    gate, shutdown = make(port)
    jobs(port, gate)
    shutdown.on_broker_state(BROKER_CLEANUP)
    end_running_job(port, gate)
    port.advance(TIMEOUT / 2)
    assert len(lines(port, f"waits on hold bb of job {f58(ACTIVE_JOB)}")) == 1
    assert len(lines(port, f"waits on hold umount of job {f58(RUNNING_JOB)}")) == 1
    assert lines(port, "waits on hold umount", syslog.LOG_WARNING)
    assert lines(port, "waits on 2 holds for up to 5s, then shutdown-action=keep")


def test_pending_hold_of_a_queued_job_does_not_hold_the_shutdown(port):
    gate, shutdown = make(port)
    jobs(port, gate)
    shutdown.on_broker_state(BROKER_CLEANUP)
    assert not lines(port, "license")
    assert [h.description for h in shutdown.waiting()] == ["bb", "umount"]


def test_hold_that_becomes_active_during_shutdown_is_named(port):
    gate, shutdown = make(port)
    shutdown.on_broker_state(BROKER_CLEANUP)
    port.add_job(ACTIVE_JOB, SCHED)
    gate.hold(ACTIVE_JOB, "late")
    assert not lines(port, "late")
    port.set_state(ACTIVE_JOB, CLEANUP)
    gate.on_cleanup(ACTIVE_JOB)
    assert len(lines(port, "waits on hold late")) == 1


# The bound: keep


def test_keep_aborts_the_cleanup_once_and_finishes_nothing(port):
    gate, shutdown = make(port, "keep")
    jobs(port, gate)
    shutdown.on_broker_state(BROKER_CLEANUP)
    port.advance(TIMEOUT - 0.1)
    assert port.aborted == 0
    port.advance(0.2)
    assert port.aborted == 1
    assert port.posted_by_gate(ACTIVE_JOB, "epilog-finish") == []
    assert {h["description"]: h["state"] for h in gate.list()} == {
        "bb": ACTIVE,
        "umount": ACTIVE,
        "license": PENDING,
    }
    assert len(lines(port, "kept hold bb", syslog.LOG_ERR)) == 1
    assert len(lines(port, "kept hold umount")) == 1
    port.advance(10 * TIMEOUT)
    assert port.aborted == 1


@pytest.mark.parametrize("action", ["keep", "finish"])
def test_at_the_bound_holds_of_a_job_whose_processes_run_become_active(port, action):
    # flux-core lets such a job go inactive as the instance restarts,
    # before a plugin could start an epilog: pending, the hold would be lost.
    gate, shutdown = make(port, action)
    jobs(port, gate)
    shutdown.on_broker_state(BROKER_CLEANUP)
    still_running(port, gate)
    assert [h.state for h in gate.jobs[RUNNING_JOB].holds.values()] == [PENDING]
    port.advance(TIMEOUT + 0.1)
    assert port.posted_by_gate(RUNNING_JOB, "epilog-start")[0]["description"] == (
        "umount"
    )
    assert lines(port, f"job {f58(RUNNING_JOB)} has not ended", syslog.LOG_ERR)
    if action == "keep":
        assert [h["state"] for h in gate.list(RUNNING_JOB)] == [ACTIVE]
        assert lines(port, "kept hold umount of job") == [
            f"shutdown: kept hold umount of job {f58(RUNNING_JOB)} (active) "
            "for the restart"
        ]
    else:
        assert port.outstanding(RUNNING_JOB) == []
        assert "hold umount" in port.notes(RUNNING_JOB)[0]


@pytest.mark.parametrize("action", ["keep", "finish"])
def test_at_the_bound_a_held_job_still_running_is_cancelled(port, action):
    # The cleanup step cancels it too, but had not yet: in RUN its hold
    # could not become active, and would be lost as for a job in CLEANUP.
    gate, shutdown = make(port, action)
    jobs(port, gate)
    shutdown.on_broker_state(BROKER_CLEANUP)
    port.advance(TIMEOUT + 0.1)
    assert port.names(RUNNING_JOB)[:2] == [CANCEL, "epilog-start"]
    assert lines(port, f"job {f58(RUNNING_JOB)} with holds is still running")
    assert port.jobs[QUEUED_JOB].state == SCHED and port.events[QUEUED_JOB] == []


def test_keep_leaves_holds_of_the_shutdown_in_the_hold_log(port):
    gate, shutdown = make(port, "keep")
    port.add_job(ACTIVE_JOB, CLEANUP)
    gate.hold(ACTIVE_JOB, "bb")
    port.add_job(QUEUED_JOB, SCHED)
    shutdown.on_broker_state(BROKER_CLEANUP)
    gate.hold(QUEUED_JOB, "license")
    shutdown.expire()
    entries, _ = parse(port.kvs[KEY])
    assert [e[2]["description"] for e in entries[QUEUED_JOB]] == ["license"]
    assert port.aborted == 1


def test_auto_is_keep_in_an_instance_that_restarts(port):
    gate, shutdown = make(port, "auto")
    jobs(port, gate)
    shutdown.on_broker_state(BROKER_CLEANUP)
    port.advance(TIMEOUT + 0.1)
    assert port.aborted == 1 and shutdown.action == "keep"


# The bound: finish


def test_finish_finishes_active_holds_with_the_status_and_an_exception(port):
    gate, shutdown = make(port, "finish")
    jobs(port, gate)
    shutdown.on_broker_state(BROKER_CLEANUP)
    port.advance(TIMEOUT + 0.1)
    assert port.aborted == 0
    assert port.posted_by_gate(ACTIVE_JOB, "epilog-finish") == [
        {"description": "bb", "status": SHUTDOWN_STATUS}
    ]
    (note,) = port.notes(ACTIVE_JOB)
    assert "hold bb" in note and "shutdown-timeout (5s)" in note
    assert str(SHUTDOWN_STATUS) in note
    assert gate.stats["timedout"] == 2 and gate.stats["failed"] == 2
    assert gate.release(ACTIVE_JOB, "bb") == (False, "finished by shutdown")


def test_finish_finishes_a_hold_that_becomes_active_after_the_bound(port):
    gate, shutdown = make(port, "finish")
    jobs(port, gate)
    shutdown.on_broker_state(BROKER_CLEANUP)
    port.fail(CANCEL)
    port.advance(TIMEOUT + 0.1)
    assert lines(port, f"cancelling {f58(RUNNING_JOB)}", syslog.LOG_ERR)
    assert lines(port, "hold umount of job") and port.outstanding(RUNNING_JOB) == []
    end_running_job(port, gate)
    assert port.outstanding(RUNNING_JOB) == ["umount"]
    port.advance(0)
    assert port.outstanding(RUNNING_JOB) == []
    assert port.posted_by_gate(RUNNING_JOB, "epilog-finish")[0]["status"] == (
        SHUTDOWN_STATUS
    )
    assert "hold umount" in port.notes(RUNNING_JOB)[0]


def test_finish_leaves_pending_holds_of_queued_jobs(port):
    gate, shutdown = make(port, "finish")
    jobs(port, gate)
    shutdown.on_broker_state(BROKER_CLEANUP)
    port.advance(TIMEOUT + 0.1)
    assert [h["description"] for h in gate.list(QUEUED_JOB)] == ["license"]
    assert port.events[QUEUED_JOB] == []


def test_auto_is_finish_in_an_instance_that_never_restarts(port):
    port.restart = False
    gate, shutdown = make(port, "auto")
    jobs(port, gate)
    shutdown.on_broker_state(BROKER_CLEANUP)
    port.advance(TIMEOUT + 0.1)
    assert shutdown.action == "finish" and port.aborted == 0
    assert port.outstanding(ACTIVE_JOB) == []


def test_auto_is_finish_when_the_instance_attributes_cannot_be_read(port):
    def broken():
        raise OSError(errno.EIO, "I/O error")

    port.restartable = broken
    gate, shutdown = make(port, "auto")
    shutdown.on_broker_state(BROKER_CLEANUP)
    assert shutdown.action == "finish"
    assert lines(port, "instance attributes", syslog.LOG_ERR)


def test_keep_in_an_instance_that_never_restarts_is_warned_about(port):
    port.restart = False
    _, shutdown = make(port, "keep")
    shutdown.on_broker_state(BROKER_CLEANUP)
    assert shutdown.action == "keep"
    assert lines(port, "does not restart", syslog.LOG_WARNING)


def test_finish_or_keep_where_it_fits_is_not_warned_about(port):
    for action, restart in (("keep", True), ("finish", False), ("finish", True)):
        port.restart = restart
        _, shutdown = make(port, action)
        shutdown.on_broker_state(BROKER_CLEANUP)
        assert shutdown.action == action
    assert port.logs == []


# When there is nothing to do


def test_no_holds_nothing_logged_nothing_aborted(port):
    _, shutdown = make(port, "keep")
    shutdown.on_broker_state(BROKER_CLEANUP)
    port.advance(2 * TIMEOUT)
    assert port.logs == [] and port.aborted == 0


def test_released_before_the_bound_nothing_is_done_at_the_bound(port):
    gate, shutdown = make(port, "finish")
    jobs(port, gate)
    shutdown.on_broker_state(BROKER_CLEANUP)
    gate.release(ACTIVE_JOB, "bb")
    gate.release(RUNNING_JOB, "umount")
    port.advance(2 * TIMEOUT)
    assert port.posted_by_gate(ACTIVE_JOB, "epilog-finish") == [
        {"description": "bb", "status": 0}
    ]
    assert not lines(port, "expired")


def test_broker_past_cleanup_stops_the_clock(port):
    gate, shutdown = make(port, "keep")
    jobs(port, gate)
    shutdown.on_broker_state(BROKER_CLEANUP)
    shutdown.on_broker_state(BROKER_SHUTDOWN)
    port.advance(2 * TIMEOUT)
    assert port.aborted == 0 and port.armed_timers() == []


# Holds registered during shutdown


def test_hold_during_shutdown_is_accepted_until_the_bound(port):
    gate, shutdown = make(port, "finish")
    shutdown.on_broker_state(BROKER_CLEANUP)
    port.add_job(QUEUED_JOB, SCHED)
    hold, created = gate.hold(QUEUED_JOB, "license")
    assert created and hold.state == PENDING


def test_hold_after_the_bound_is_refused_and_changes_nothing(port):
    gate, shutdown = make(port, "finish")
    shutdown.on_broker_state(BROKER_CLEANUP)
    port.advance(TIMEOUT + 0.1)
    port.add_job(QUEUED_JOB, SCHED)
    with pytest.raises(GateError) as info:
        gate.hold(QUEUED_JOB, "license")
    assert info.value.errnum == errno.ESHUTDOWN
    assert "shutting down" in info.value.message and "license" in info.value.message
    assert gate.list() == [] and QUEUED_JOB not in port.tracked


def test_a_reload_past_the_bound_refuses_holds_before_the_broker_state(port):
    """The plugin loaded again after the bound: holds are refused from the
    start, before its watch of the broker's state has said anything."""
    gate, shutdown = make(port, "finish")
    shutdown.on_broker_state(BROKER_CLEANUP)
    port.advance(TIMEOUT + 0.1)
    shutdown.stop()
    gate.watch_shutdown(port)
    port.add_job(QUEUED_JOB, SCHED)
    with pytest.raises(GateError) as info:
        gate.hold(QUEUED_JOB, "license")
    assert info.value.errnum == errno.ESHUTDOWN


def test_a_held_job_entering_cleanup_after_a_shutdown_without_cleanup(port):
    """The broker went from RUN straight past CLEANUP (no cleanup step): a
    held job that enters CLEANUP then has its holds made active."""
    gate, shutdown = make(port)
    jobs(port, gate)
    shutdown.on_broker_state(BROKER_SHUTDOWN)
    still_running(port, gate)
    assert epilog_starts(port, RUNNING_JOB) == ["umount"]
    assert lines(port, "entered CLEANUP as the instance stops", syslog.LOG_ERR)


# Reload during shutdown


def test_plugin_loaded_again_during_shutdown_keeps_the_bound(port):
    gate, shutdown = make(port, "keep")
    jobs(port, gate)
    shutdown.on_broker_state(BROKER_CLEANUP)
    port.advance(TIMEOUT - 1.0)
    shutdown.stop()
    again = gate.watch_shutdown(port)
    again.on_broker_state(BROKER_CLEANUP)
    port.advance(0.9)
    assert port.aborted == 0
    port.advance(0.2)
    assert port.aborted == 1
    assert len(lines(port, "waits on hold bb")) == 1


# The broker leaves CLEANUP with held jobs still in RUN or CLEANUP (no job
# cleanup step, or one cut short)


def test_job_left_in_cleanup_gets_its_holds_active_as_the_broker_leaves(port):
    gate, shutdown = make(port)
    jobs(port, gate)
    shutdown.on_broker_state(BROKER_CLEANUP)
    still_running(port, gate)
    assert epilog_starts(port, RUNNING_JOB) == []
    shutdown.on_broker_state(BROKER_SHUTDOWN)
    assert epilog_starts(port, RUNNING_JOB) == ["umount"]
    assert gate.jobs[RUNNING_JOB].holds["umount"].state == ACTIVE
    (line,) = lines(port, "still in CLEANUP as the instance stops", syslog.LOG_ERR)
    assert f58(RUNNING_JOB) in line
    # Nothing else moves: the queued job's hold stays pending, nothing is
    # cancelled or finished, the cleanup is not aborted.
    assert gate.jobs[QUEUED_JOB].holds["license"].state == PENDING
    assert port.posted_by_gate(RUNNING_JOB, CANCEL) == []
    assert port.posted_by_gate(ACTIVE_JOB, "epilog-finish") == []
    assert port.aborted == 0


@pytest.mark.parametrize("from_config", [True, False])
def test_job_left_running_is_named_with_what_the_restart_does(port, from_config):
    gate, shutdown = make(port)
    shutdown.configured(from_config)
    jobs(port, gate)
    shutdown.on_broker_state(BROKER_CLEANUP)
    shutdown.on_broker_state(BROKER_SHUTDOWN)
    level = syslog.LOG_WARNING if from_config else syslog.LOG_ERR
    (line,) = lines(port, f"job {f58(RUNNING_JOB)} still runs", level)
    assert "hold umount" in line
    assert ("will be lost" in line) is not from_config
    # A running job is never cancelled by leaving CLEANUP: it may be
    # reattached at the restart.
    assert port.posted_by_gate(RUNNING_JOB, CANCEL) == []
    assert gate.jobs[RUNNING_JOB].holds["umount"].state == PENDING
    assert not lines(port, "license")


def test_leaving_cleanup_after_the_bound_changes_nothing_more(port):
    gate, shutdown = make(port, "keep")
    jobs(port, gate)
    shutdown.on_broker_state(BROKER_CLEANUP)
    port.advance(TIMEOUT + 0.1)
    logged = list(port.logs)
    shutdown.on_broker_state(BROKER_SHUTDOWN)
    assert port.logs == logged


def test_a_broker_seen_first_past_cleanup_is_left_alone(port):
    gate, shutdown = make(port)
    jobs(port, gate)
    still_running(port, gate)
    shutdown.on_broker_state(BROKER_SHUTDOWN)
    assert port.logs == [] and epilog_starts(port, RUNNING_JOB) == []


@pytest.mark.parametrize(
    "conf, loaded",
    [
        ({"job-manager": {"plugins": [{"load": "epilog-gate.so"}]}}, True),
        ({"job-manager": {"plugins": [{"load": "/x/y/epilog-gate.so"}]}}, True),
        ({"job-manager": {"plugins": [{"load": "epilog-gate"}]}}, True),
        ({"job-manager": {"plugins": [{"load": "other.so"}]}}, False),
        ({"job-manager": {"plugins": [{"remove": "epilog-gate.so"}]}}, False),
        ({"job-manager": {}}, False),
        ({}, False),
        ({"job-manager": {"plugins": "epilog-gate.so"}}, False),
        ({"job-manager": {"plugins": [{"load": 3}]}}, False),
        ({"job-manager": 7}, False),
    ],
)
def test_loaded_from_config_reads_job_manager_plugins(conf, loaded):
    assert loaded_from_config(conf, "epilog-gate") is loaded


def test_job_entering_cleanup_after_the_broker_left_gets_its_holds_active(port):
    gate, shutdown = make(port)
    jobs(port, gate)
    shutdown.on_broker_state(BROKER_CLEANUP)
    shutdown.on_broker_state(BROKER_SHUTDOWN)
    still_running(port, gate)
    assert epilog_starts(port, RUNNING_JOB) == ["umount"]
    (line,) = lines(port, "entered CLEANUP as the instance stops", syslog.LOG_ERR)
    assert f58(RUNNING_JOB) in line


def test_job_entering_cleanup_before_the_broker_leaves_waits_for_its_end(port):
    gate, shutdown = make(port)
    jobs(port, gate)
    shutdown.on_broker_state(BROKER_CLEANUP)
    still_running(port, gate)
    assert epilog_starts(port, RUNNING_JOB) == []
    assert not lines(port, "as the instance stops")


def test_without_a_job_cleanup_step_nothing_waits_and_that_is_said(port):
    gate, shutdown = make(port)
    port.cleanup_step = False
    jobs(port, gate)
    shutdown.on_broker_state(BROKER_CLEANUP)
    (line,) = lines(port, "job cleanup step is disabled", syslog.LOG_WARNING)
    assert "without waiting on holds" in line
    assert not lines(port, "waits on") and port.armed_timers() == []
    port.advance(2 * TIMEOUT)
    assert port.aborted == 0 and not lines(port, "expired")
