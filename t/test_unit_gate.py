"""Unit tests of the gate logic (flux_epilog_gate.gate.Gate), no broker:
the job-manager is a FakePort driven by each test."""

import errno

import pytest

from flux_epilog_gate.config import Config
from flux_epilog_gate.errors import GateError
from flux_epilog_gate.gate import CLEANUP, INACTIVE, RUN, SCHED, Gate
from flux_epilog_gate.holdlog import KEY, MARKER, parse
from flux_epilog_gate.holds import (
    ACTIVE,
    CANCEL_EVENT,
    HOLD_EVENT,
    PENDING,
    RECOVERY_DESCRIPTION,
    RELEASE_EVENT,
    TIMEOUT_STATUS,
)
from flux_epilog_gate.jobid import f58

JOB = 4242
JOB2 = 4343
USER = 1000
OTHER = 2000


@pytest.fixture
def gate(port):
    return Gate(port)


def held_job(port, gate, *descriptions, jobid=JOB, userid=USER, timeout=None):
    """A job waiting in SCHED with pending holds ``descriptions``."""
    port.add_job(jobid, SCHED, userid)
    for description in descriptions:
        gate.hold(jobid, description, timeout)
    return jobid


def at_point(port, gate, *descriptions, jobid=JOB, userid=USER, timeout=None):
    """A never-allocated job that entered CLEANUP: holds ``descriptions``
    are active."""
    held_job(port, gate, *descriptions, jobid=jobid, userid=userid, timeout=timeout)
    port.set_state(jobid, CLEANUP)
    gate.on_cleanup(jobid)
    return jobid


def started_job_in_cleanup(port, gate, *descriptions, jobid=JOB):
    """A job that got resources and started, held while running, then an
    exception put it in CLEANUP: its processes may still run (no finish)."""
    port.add_job(jobid, RUN, USER, happened={"alloc", "start"})
    for description in descriptions:
        gate.hold(jobid, description)
    port.set_state(jobid, CLEANUP)
    gate.on_cleanup(jobid)
    return jobid


def state_of(gate, jobid, description):
    return gate.jobs[jobid].holds[description].state


def epilog_starts(port, jobid=JOB):
    return [c["description"] for c in port.posted_by_gate(jobid, "epilog-start")]


def ev(timestamp, name, **context):
    """An eventlog entry as end_recovery() takes it."""
    return (timestamp, name, context)


def marked(timestamp, name, **context):
    """An epilog event the gate posted: marked as its own."""
    return ev(timestamp, name, **context, **{MARKER: True})


# Registration


def logged(port):
    """What the hold log holds, by job (see holdlog.parse)."""
    return parse(port.kvs.get(KEY, ""))[0]


def test_hold_on_waiting_job_is_pending_and_posts_nothing(port, gate):
    port.add_job(JOB, SCHED, USER)
    hold, created = gate.hold(JOB, "bb")
    assert created
    assert hold.state == PENDING
    assert port.events[JOB] == []


def test_pending_hold_is_recorded_in_the_hold_log_with_a_sync(port, gate):
    port.add_job(JOB, SCHED, USER)
    gate.hold(JOB, "bb")
    assert logged(port) == {JOB: [(port.clock, HOLD_EVENT, {"description": "bb"})]}
    assert port.synced == [True]


def test_hold_log_records_the_timeout_for_recovery(port, gate):
    port.add_job(JOB, SCHED, USER)
    gate.hold(JOB, "bb", 30.0)
    ((_, _, context),) = logged(port)[JOB]
    assert context == {"description": "bb", "timeout": 30.0}


def test_hold_starts_tracking_the_job_with_its_events(port, gate):
    held_job(port, gate, "bb")
    assert port.tracked == {JOB: True}


def test_hold_records_userid_and_time_of_the_job(port, gate):
    port.add_job(JOB, SCHED, OTHER)
    hold, _ = gate.hold(JOB, "bb")
    assert (hold.userid, hold.t_hold) == (OTHER, port.clock)


def test_holding_the_same_description_twice_answers_the_existing_hold(port, gate):
    port.add_job(JOB, SCHED, USER)
    first, _ = gate.hold(JOB, "bb")
    second, created = gate.hold(JOB, "bb", 99.0)
    assert second is first and not created
    assert len(logged(port)[JOB]) == 1
    assert second.timeout is None


def test_job_may_carry_several_holds(port, gate):
    held_job(port, gate, "bb", "umount", "license")
    assert sorted(h["description"] for h in gate.list(JOB)) == [
        "bb",
        "license",
        "umount",
    ]


def test_hold_beyond_max_holds_is_refused_with_enospc(port):
    gate = Gate(port, Config(max_holds=2))
    held_job(port, gate, "a", "b")
    with pytest.raises(GateError) as info:
        gate.hold(JOB, "c")
    assert info.value.errnum == errno.ENOSPC
    assert "max-holds=2" in info.value.message


def test_refused_hold_beyond_max_holds_changes_nothing(port):
    gate = Gate(port, Config(max_holds=1))
    held_job(port, gate, "a")
    with pytest.raises(GateError):
        gate.hold(JOB, "b")
    assert [d for _, _, d in logged(port)[JOB]] == [{"description": "a"}]
    assert [h["description"] for h in gate.list(JOB)] == ["a"]


def test_repeated_hold_at_max_holds_answers_the_existing_hold(port):
    gate = Gate(port, Config(max_holds=1))
    held_job(port, gate, "a")
    hold, created = gate.hold(JOB, "a")
    assert (hold.description, created) == ("a", False)


def test_hold_on_unknown_job_is_refused_with_enoent(port, gate):
    with pytest.raises(GateError) as info:
        gate.hold(JOB, "bb")
    assert info.value.errnum == errno.ENOENT
    assert f58(JOB) in info.value.message


def test_hold_on_inactive_job_is_refused_with_enoent(port, gate):
    port.add_job(JOB, INACTIVE, USER)
    with pytest.raises(GateError) as info:
        gate.hold(JOB, "bb")
    assert info.value.errnum == errno.ENOENT
    assert "inactive" in info.value.message
    assert port.events[JOB] == []


def test_hold_whose_epilog_start_cannot_be_posted_fails_and_leaves_no_hold(port, gate):
    port.add_job(JOB, CLEANUP, USER)
    port.fail("epilog-start", errno.ENOMEM)
    with pytest.raises(GateError) as info:
        gate.hold(JOB, "bb")
    assert info.value.errnum == errno.ENOMEM
    assert gate.list() == [] and port.tracked == {}
    assert logged(port) == {}


def test_hold_without_timeout_takes_the_configured_default(port):
    gate = Gate(port, Config(timeout=600.0))
    port.add_job(JOB, SCHED, USER)
    hold, _ = gate.hold(JOB, "bb")
    assert hold.timeout == 600.0


def test_hold_timeout_overrides_the_configured_default(port):
    gate = Gate(port, Config(timeout=600.0))
    port.add_job(JOB, SCHED, USER)
    hold, _ = gate.hold(JOB, "bb", 5.0)
    assert hold.timeout == 5.0


def test_new_default_timeout_applies_only_to_holds_registered_after_it(port, gate):
    held_job(port, gate, "before")
    gate.reconfigure(Config(timeout=60.0))
    gate.hold(JOB, "after")
    timeouts = {h["description"]: h.get("timeout") for h in gate.list(JOB)}
    assert timeouts == {"before": None, "after": 60.0}


# The epilog point


def test_hold_stays_pending_while_job_runs(port, gate):
    port.add_job(JOB, RUN, USER, happened={"alloc", "start"})
    hold, _ = gate.hold(JOB, "bb")
    assert hold.state == PENDING
    assert epilog_starts(port) == []


def test_never_allocated_job_activates_holds_on_entry_to_cleanup(port, gate):
    held_job(port, gate, "bb")
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    assert state_of(gate, JOB, "bb") == ACTIVE
    assert port.events[JOB][-1] == ("epilog-start", {"description": "bb"})


def test_activation_records_t_start(port, gate):
    held_job(port, gate, "bb")
    port.advance(5)
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    assert gate.list(JOB)[0]["t_start"] == port.clock


def test_every_pending_hold_of_a_job_activates_at_its_point(port, gate):
    at_point(port, gate, "bb", "umount", "license")
    assert sorted(epilog_starts(port)) == ["bb", "license", "umount"]
    assert {h["state"] for h in gate.list(JOB)} == {ACTIVE}


def test_started_job_does_not_activate_holds_on_entry_to_cleanup(port, gate):
    started_job_in_cleanup(port, gate, "bb")
    assert state_of(gate, JOB, "bb") == PENDING
    assert epilog_starts(port) == []


def test_started_job_activates_holds_on_its_finish_event(port, gate):
    started_job_in_cleanup(port, gate, "bb")
    port.happen(JOB, "finish")
    gate.on_event(JOB, "finish", CLEANUP)
    assert state_of(gate, JOB, "bb") == ACTIVE
    assert epilog_starts(port) == ["bb"]


def test_started_job_ignores_events_other_than_finish_and_free(port, gate):
    started_job_in_cleanup(port, gate, "bb")
    port.happen(JOB, "exception")
    gate.on_event(JOB, "exception", CLEANUP)
    assert state_of(gate, JOB, "bb") == PENDING


def test_finished_job_activates_holds_on_entry_to_cleanup(port, gate):
    port.add_job(JOB, RUN, USER, happened={"alloc", "start"})
    gate.hold(JOB, "bb")
    port.happen(JOB, "finish")
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    assert state_of(gate, JOB, "bb") == ACTIVE


def test_prolog_still_open_at_cleanup_activates_holds_at_once(port, gate):
    port.add_job(JOB, RUN, USER, happened={"alloc", "prolog-start"})
    gate.hold(JOB, "bb")
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    assert state_of(gate, JOB, "bb") == ACTIVE


def test_finished_prolog_without_start_waits_at_cleanup(port, gate):
    happened = {"alloc", "prolog-start", "prolog-finish"}
    port.add_job(JOB, RUN, USER, happened=happened)
    gate.hold(JOB, "bb")
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    assert state_of(gate, JOB, "bb") == PENDING


def test_allocated_job_that_never_started_activates_holds_on_free(port, gate):
    port.add_job(JOB, SCHED, USER, happened={"alloc"})
    gate.hold(JOB, "bb")
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    assert state_of(gate, JOB, "bb") == PENDING
    port.happen(JOB, "free")
    gate.on_event(JOB, "free", CLEANUP)
    assert state_of(gate, JOB, "bb") == ACTIVE


def test_point_is_reached_only_once(port, gate):
    started_job_in_cleanup(port, gate, "bb")
    port.happen(JOB, "finish")
    gate.on_event(JOB, "finish", CLEANUP)
    port.happen(JOB, "free")
    gate.on_event(JOB, "free", CLEANUP)
    gate.on_cleanup(JOB)
    assert epilog_starts(port) == ["bb"]


def test_callbacks_for_jobs_without_holds_do_nothing(port, gate):
    port.add_job(JOB, CLEANUP, USER)
    gate.on_cleanup(JOB)
    gate.on_event(JOB, "finish", CLEANUP)
    gate.on_inactive(JOB)
    assert port.events == {} and gate.jobs == {}


def test_hold_registered_past_the_point_activates_at_once(port, gate):
    port.add_job(JOB, CLEANUP, USER)
    hold, _ = gate.hold(JOB, "bb")
    assert hold.state == ACTIVE
    assert port.names(JOB) == ["epilog-start"]


def test_hold_active_at_once_is_recorded_in_the_log_too(port, gate):
    port.add_job(JOB, CLEANUP, USER)
    assert gate.hold(JOB, "bb", 30.0)[0].state == ACTIVE
    assert logged(port) == {
        JOB: [(port.clock, HOLD_EVENT, {"description": "bb", "timeout": 30.0})]
    }
    assert port.posted_by_gate(JOB, "epilog-start") == [
        {"description": "bb", "timeout": 30.0}
    ]


def test_hold_registered_after_finish_activates_at_once(port, gate):
    port.add_job(JOB, CLEANUP, USER, happened={"alloc", "start", "finish"})
    hold, _ = gate.hold(JOB, "bb")
    assert hold.state == ACTIVE


def test_hold_registered_in_cleanup_before_finish_stays_pending(port, gate):
    port.add_job(JOB, CLEANUP, USER, happened={"alloc", "start"})
    hold, _ = gate.hold(JOB, "bb")
    assert hold.state == PENDING


def test_hold_added_to_a_job_already_at_its_point_activates_at_once(port, gate):
    at_point(port, gate, "bb")
    hold, _ = gate.hold(JOB, "umount")
    assert hold.state == ACTIVE
    assert epilog_starts(port) == ["bb", "umount"]


def test_active_holds_keep_the_epilog_open_until_released(port, gate):
    at_point(port, gate, "bb", "umount")
    gate.release(JOB, "bb")
    assert port.outstanding(JOB) == ["umount"]


# Release


def test_release_of_active_hold_posts_epilog_finish_with_status_zero(port, gate):
    at_point(port, gate, "bb")
    assert gate.release(JOB, "bb") == (True, None)
    assert port.events[JOB][-1] == (
        "epilog-finish",
        {"description": "bb", "status": 0},
    )
    assert port.outstanding(JOB) == []


def test_release_of_active_hold_posts_the_given_status(port, gate):
    at_point(port, gate, "bb")
    gate.release(JOB, "bb", 3)
    assert port.posted_by_gate(JOB, "epilog-finish") == [
        {"description": "bb", "status": 3}
    ]


def test_release_with_status_zero_raises_no_exception(port, gate):
    at_point(port, gate, "bb")
    gate.release(JOB, "bb", 0)
    assert port.notes(JOB) == []


def test_nonzero_release_raises_exception_before_epilog_finish(port, gate):
    at_point(port, gate, "bb")
    gate.release(JOB, "bb", 3)
    assert port.names(JOB)[-2:] == ["exception", "epilog-finish"]


def test_nonzero_release_exception_names_the_hold_and_status(port, gate):
    at_point(port, gate, "bb")
    gate.release(JOB, "bb", 3)
    (note,) = port.notes(JOB)
    assert "bb" in note and "status 3" in note


def test_failed_exception_is_logged_and_epilog_finish_still_posted(port, gate):
    at_point(port, gate, "bb")
    port.fail("exception")
    gate.release(JOB, "bb", 3)
    assert port.posted_by_gate(JOB, "epilog-finish") == [
        {"description": "bb", "status": 3}
    ]
    assert any(f58(JOB) in text for _, text in port.logs)


def test_release_of_pending_hold_cancels_it_without_epilog_events(port, gate):
    held_job(port, gate, "bb")
    assert gate.release(JOB, "bb") == (True, None)
    assert port.names(JOB) == []


def test_release_of_recorded_pending_hold_records_the_cancellation(port, gate):
    held_job(port, gate, "bb")
    gate.release(JOB, "bb")
    assert [name for _, name, _ in logged(port)[JOB]] == [HOLD_EVENT, CANCEL_EVENT]


def test_release_of_active_hold_records_the_release_with_its_status(port, gate):
    at_point(port, gate, "bb")
    gate.release(JOB, "bb", 3)
    assert logged(port)[JOB][1:] == [
        (port.clock, RELEASE_EVENT, {"description": "bb", "status": 3})
    ]


def test_hold_that_times_out_gets_no_release_record(port, gate):
    at_point(port, gate, "bb", timeout=5.0)
    port.advance(5.0)
    assert port.posted_by_gate(JOB, "epilog-finish")
    assert [name for _, name, _ in logged(port)[JOB]] == [HOLD_EVENT]


def test_release_of_pending_hold_with_status_raises_no_exception(port, gate):
    held_job(port, gate, "bb")
    gate.release(JOB, "bb", 7)
    assert port.notes(JOB) == []


def test_cancelled_hold_no_longer_activates(port, gate):
    held_job(port, gate, "bb", "umount")
    gate.release(JOB, "bb")
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    assert epilog_starts(port) == ["umount"]


def test_release_of_the_last_hold_stops_tracking_the_job(port, gate):
    at_point(port, gate, "bb", "umount")
    gate.release(JOB, "bb")
    assert JOB in port.tracked
    gate.release(JOB, "umount")
    assert port.tracked == {} and gate.jobs == {}


def test_release_counts_in_stats(port, gate):
    at_point(port, gate, "ok", "bad")
    held_job(port, gate, "early", jobid=JOB2)
    gate.release(JOB, "ok")
    gate.release(JOB, "bad", 1)
    gate.release(JOB2, "early")
    assert gate.stats == {
        "held": 3,
        "activated": 2,
        "released": 2,
        "cancelled": 1,
        "failed": 1,
        "timedout": 0,
    }


def test_late_release_of_released_hold_answers_false_released(port, gate):
    at_point(port, gate, "bb")
    gate.release(JOB, "bb")
    assert gate.release(JOB, "bb") == (False, "released")


def test_late_release_of_cancelled_hold_answers_false(port, gate):
    held_job(port, gate, "bb")
    gate.release(JOB, "bb")
    released, reason = gate.release(JOB, "bb")
    assert released is False and reason


def test_late_release_posts_nothing(port, gate):
    at_point(port, gate, "bb")
    gate.release(JOB, "bb")
    before = list(port.events[JOB])
    gate.release(JOB, "bb", 5)
    assert port.events[JOB] == before


def test_release_after_job_went_inactive_answers_job_is_inactive(port, gate):
    at_point(port, gate, "bb")
    port.set_state(JOB, INACTIVE)
    gate.on_inactive(JOB)
    assert gate.release(JOB, "bb") == (False, "job is inactive")


def test_release_on_inactive_job_never_held_answers_job_is_inactive(port, gate):
    port.add_job(JOB, INACTIVE, USER)
    assert gate.release(JOB, "bb") == (False, "job is inactive")


def test_release_on_unknown_job_is_refused_with_enoent(port, gate):
    with pytest.raises(GateError) as info:
        gate.release(JOB, "bb")
    assert info.value.errnum == errno.ENOENT
    assert "unknown job" in info.value.message


def test_release_of_unknown_description_is_enoent_naming_the_holds(port, gate):
    held_job(port, gate, "umount", "bb")
    with pytest.raises(GateError) as info:
        gate.release(JOB, "license")
    assert info.value.errnum == errno.ENOENT
    assert "license" in info.value.message
    assert "it holds: bb, umount" in info.value.message


def test_release_on_job_without_holds_is_enoent_saying_so(port, gate):
    port.add_job(JOB, RUN, USER)
    with pytest.raises(GateError) as info:
        gate.release(JOB, "bb")
    assert info.value.errnum == errno.ENOENT
    assert "no holds" in info.value.message


def test_refused_release_changes_nothing(port, gate):
    held_job(port, gate, "bb")
    with pytest.raises(GateError):
        gate.release(JOB, "other")
    assert port.names(JOB) == []
    assert state_of(gate, JOB, "bb") == PENDING


def test_gone_log_forgets_the_oldest_holds_beyond_gone_limit(port):
    gate = Gate(port, Config(gone_limit=1))
    at_point(port, gate, "first", "second")
    gate.release(JOB, "first")
    gate.release(JOB, "second")
    assert gate.release(JOB, "second") == (False, "released")
    with pytest.raises(GateError) as info:
        gate.release(JOB, "first")
    assert info.value.errnum == errno.ENOENT


def test_lowering_gone_limit_trims_the_gone_log(port, gate):
    at_point(port, gate, "a", "b", "c")
    for description in ("a", "b", "c"):
        gate.release(JOB, description)
    gate.reconfigure(Config(gone_limit=1))
    assert len(gate.gone) == 1


def test_hold_again_after_release_makes_a_new_hold(port, gate):
    at_point(port, gate, "bb")
    gate.release(JOB, "bb")
    hold, created = gate.hold(JOB, "bb")
    assert created and hold.state == ACTIVE
    assert gate.release(JOB, "bb") == (True, None)


# List


def test_list_entry_of_pending_hold_has_the_documented_fields(port, gate):
    held_job(port, gate, "bb")
    assert gate.list() == [
        {
            "id": JOB,
            "description": "bb",
            "state": PENDING,
            "userid": USER,
            "t_hold": port.clock,
            "point": "epilog",
        }
    ]


def test_list_entry_of_active_hold_has_t_start_and_timeout(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    (entry,) = gate.list()
    assert entry["state"] == ACTIVE
    assert entry["t_start"] == port.clock and entry["timeout"] == 30.0


def test_list_without_id_shows_every_job(port, gate):
    held_job(port, gate, "a", jobid=JOB)
    held_job(port, gate, "b", jobid=JOB2)
    assert sorted((h["id"], h["description"]) for h in gate.list()) == [
        (JOB, "a"),
        (JOB2, "b"),
    ]


def test_list_with_id_shows_only_that_job(port, gate):
    held_job(port, gate, "a", jobid=JOB)
    held_job(port, gate, "b", jobid=JOB2)
    assert [h["description"] for h in gate.list(JOB2)] == ["b"]


def test_list_of_job_without_holds_is_empty(port, gate):
    held_job(port, gate, "a")
    port.add_job(JOB2, RUN, USER)
    assert gate.list(JOB2) == []


def test_list_with_userid_shows_only_that_users_jobs(port, gate):
    held_job(port, gate, "mine", jobid=JOB, userid=USER)
    held_job(port, gate, "theirs", jobid=JOB2, userid=OTHER)
    assert [h["description"] for h in gate.list(userid=OTHER)] == ["theirs"]


def test_list_with_id_of_another_users_job_is_empty(port, gate):
    held_job(port, gate, "theirs", jobid=JOB2, userid=OTHER)
    assert gate.list(JOB2, userid=USER) == []


def test_released_hold_is_no_longer_listed(port, gate):
    at_point(port, gate, "bb", "umount")
    gate.release(JOB, "bb")
    assert [h["description"] for h in gate.list()] == ["umount"]


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


# Timeouts


def test_timeout_timer_is_not_armed_while_the_hold_is_pending(port, gate):
    held_job(port, gate, "bb", timeout=30.0)
    assert port.armed_timers() == []


def test_timeout_timer_is_armed_on_activation_for_the_full_timeout(port, gate):
    held_job(port, gate, "bb", timeout=30.0)
    port.advance(100)
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    (timer,) = port.armed_timers()
    assert timer.delay == 30.0


def test_hold_without_timeout_arms_no_timer(port, gate):
    at_point(port, gate, "bb")
    assert port.armed_timers() == []


def test_hold_does_not_expire_before_its_timeout(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    port.advance(29.9)
    assert state_of(gate, JOB, "bb") == ACTIVE


def test_expired_hold_posts_epilog_finish_with_the_timeout_status(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    port.advance(30)
    assert port.posted_by_gate(JOB, "epilog-finish") == [
        {"description": "bb", "status": TIMEOUT_STATUS}
    ]
    assert gate.list() == []


def test_timeout_status_is_nonzero(port, gate):
    assert TIMEOUT_STATUS != 0


def test_expired_hold_raises_exception_naming_the_hold_before_finish(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    port.advance(30)
    (note,) = port.notes(JOB)
    assert "bb" in note and "timed out" in note
    assert port.names(JOB)[-2:] == ["exception", "epilog-finish"]


def test_expiry_counts_as_timed_out_and_failed(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    port.advance(30)
    assert (gate.stats["timedout"], gate.stats["failed"]) == (1, 1)
    assert gate.stats["released"] == 0


def test_late_release_after_timeout_answers_timed_out(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    port.advance(30)
    assert gate.release(JOB, "bb") == (False, "timed out")


def test_release_before_timeout_stops_the_timer(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    gate.release(JOB, "bb")
    assert port.armed_timers() == []
    port.advance(60)
    assert port.notes(JOB) == []


def test_job_going_inactive_stops_its_hold_timers(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    gate.on_inactive(JOB)
    assert port.armed_timers() == []


def test_expire_of_a_hold_that_is_gone_does_nothing(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    old = gate.jobs[JOB].holds["bb"]
    gate.release(JOB, "bb")
    gate.hold(JOB, "bb", 30.0)
    before = list(port.events[JOB])
    gate.expire(old)
    assert port.events[JOB] == before
    assert state_of(gate, JOB, "bb") == ACTIVE


def test_each_hold_times_out_on_its_own(port, gate):
    port.add_job(JOB, CLEANUP, USER)
    gate.hold(JOB, "short", 10.0)
    gate.hold(JOB, "long", 50.0)
    port.advance(10)
    assert [h["description"] for h in gate.list()] == ["long"]


# Recovery (a new job-manager rebuilds the holds from the eventlog)


def recover(port, gate, state, events, happened=(), jobid=JOB, userid=USER):
    """A job restored by a restarted job-manager in ``state``, whose
    eventlog holds ``events``; ``happened``: events posted since restart."""
    port.add_job(jobid, state, userid, happened=happened)
    gate.begin_recovery(jobid, userid)
    gate.end_recovery(jobid, events)


def test_recovery_rebuilds_a_pending_hold(port, gate):
    events = [ev(100.0, "submit"), ev(101.0, HOLD_EVENT, description="bb")]
    recover(port, gate, SCHED, events)
    (entry,) = gate.list()
    assert (entry["description"], entry["state"]) == ("bb", PENDING)
    assert entry["t_hold"] == 101.0 and entry["userid"] == USER


def test_recovery_rebuilds_an_active_hold_with_its_t_start(port, gate):
    events = [
        ev(100.0, "submit"),
        ev(101.0, HOLD_EVENT, description="bb"),
        ev(102.0, "exception", type="cancel", severity=0),
        marked(103.0, "epilog-start", description="bb"),
    ]
    recover(port, gate, CLEANUP, events)
    (entry,) = gate.list()
    assert (entry["state"], entry["t_start"]) == (ACTIVE, 103.0)
    assert epilog_starts(port) == []


#: Eventlog of a job whose hold "bb" was released and "umount" is active.
BB_FINISHED_UMOUNT_ACTIVE = [
    ev(101.0, HOLD_EVENT, description="bb"),
    ev(102.0, HOLD_EVENT, description="umount"),
    marked(103.0, "epilog-start", description="bb"),
    marked(103.0, "epilog-start", description="umount"),
    marked(104.0, "epilog-finish", description="bb", status=0),
]


def test_recovery_drops_a_cancelled_hold(port, gate):
    events = [
        ev(101.0, HOLD_EVENT, description="bb"),
        ev(102.0, HOLD_EVENT, description="umount"),
        ev(103.0, CANCEL_EVENT, description="bb"),
    ]
    recover(port, gate, SCHED, events)
    assert [h["description"] for h in gate.list()] == ["umount"]


def test_recovery_drops_a_finished_hold(port, gate):
    recover(port, gate, CLEANUP, BB_FINISHED_UMOUNT_ACTIVE)
    assert [h["description"] for h in gate.list()] == ["umount"]


def test_late_release_of_hold_finished_before_restart_answers_false(port, gate):
    recover(port, gate, CLEANUP, BB_FINISHED_UMOUNT_ACTIVE)
    assert gate.release(JOB, "bb") == (False, "released")


def test_recovered_active_hold_is_releasable(port, gate):
    events = [
        ev(101.0, HOLD_EVENT, description="bb"),
        marked(103.0, "epilog-start", description="bb"),
    ]
    recover(port, gate, CLEANUP, events)
    assert gate.release(JOB, "bb") == (True, None)
    assert port.posted_by_gate(JOB, "epilog-finish") == [
        {"description": "bb", "status": 0}
    ]


def test_recovery_rearms_timer_with_the_remaining_time(port, gate):
    t_start = port.clock - 30.0
    events = [
        ev(t_start - 10, HOLD_EVENT, description="bb", timeout=100.0),
        marked(t_start, "epilog-start", description="bb"),
    ]
    recover(port, gate, CLEANUP, events)
    (timer,) = port.armed_timers()
    assert timer.delay == pytest.approx(70.0)


def test_recovered_hold_past_its_timeout_expires_at_once(port, gate):
    t_start = port.clock - 500.0
    events = [
        ev(t_start - 10, HOLD_EVENT, description="bb", timeout=100.0),
        marked(t_start, "epilog-start", description="bb"),
    ]
    recover(port, gate, CLEANUP, events)
    (timer,) = port.armed_timers()
    assert timer.delay == 0.0
    port.advance(0)
    assert gate.release(JOB, "bb") == (False, "timed out")


def test_recovery_does_not_arm_timers_of_pending_holds(port, gate):
    events = [ev(101.0, HOLD_EVENT, description="bb", timeout=100.0)]
    recover(port, gate, SCHED, events)
    assert port.armed_timers() == []


def test_recovery_activates_pending_hold_of_job_already_past_its_point(port, gate):
    # Restarted job-manager: nothing posted since, the eventlog tells it all.
    events = [
        ev(100.0, "alloc"),
        ev(101.0, HOLD_EVENT, description="bb"),
        ev(102.0, "start"),
        ev(103.0, "finish", status=0),
    ]
    recover(port, gate, CLEANUP, events)
    assert state_of(gate, JOB, "bb") == ACTIVE
    assert epilog_starts(port) == ["bb"]


def test_recovery_keeps_hold_pending_while_started_job_may_still_run(port, gate):
    events = [
        ev(100.0, "alloc"),
        ev(101.0, HOLD_EVENT, description="bb"),
        ev(102.0, "start"),
        ev(103.0, "exception", type="cancel", severity=0),
    ]
    recover(port, gate, CLEANUP, events)
    assert state_of(gate, JOB, "bb") == PENDING


def test_recovered_started_job_activates_holds_on_finish(port, gate):
    events = [
        ev(100.0, "alloc"),
        ev(101.0, HOLD_EVENT, description="bb"),
        ev(102.0, "start"),
    ]
    recover(port, gate, CLEANUP, events)
    port.happen(JOB, "finish")
    gate.on_event(JOB, "finish", CLEANUP)
    assert state_of(gate, JOB, "bb") == ACTIVE


def test_hold_registered_after_recovery_uses_the_eventlog_history(port, gate):
    events = [
        ev(100.0, "alloc"),
        ev(101.0, HOLD_EVENT, description="bb"),
        ev(102.0, "start"),
    ]
    recover(port, gate, RUN, events)
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    hold, _ = gate.hold(JOB, "umount")
    assert hold.state == PENDING


def test_recovered_job_keeps_being_tracked_with_its_events(port, gate):
    recover(port, gate, SCHED, [ev(101.0, HOLD_EVENT, description="bb")])
    assert port.tracked == {JOB: True}


def test_recovered_job_without_holds_is_untracked(port, gate):
    recover(port, gate, SCHED, [ev(100.0, "submit")])
    assert gate.jobs == {} and port.tracked == {}


def test_recovered_running_job_without_holds_keeps_only_inactive_tracking(port, gate):
    recover(port, gate, RUN, [ev(100.0, "alloc"), ev(101.0, "start")])
    assert gate.jobs == {}
    assert port.tracked == {JOB: False}


def test_recovery_of_job_that_went_inactive_remembers_its_holds(port, gate):
    port.add_job(JOB, CLEANUP, USER)
    gate.begin_recovery(JOB, USER)
    port.forget_job(JOB)
    gate.end_recovery(JOB, [ev(101.0, HOLD_EVENT, description="bb")])
    assert gate.jobs == {}
    assert gate.release(JOB, "bb") == (False, "job is inactive")


def test_end_recovery_without_begin_does_nothing(port, gate):
    port.add_job(JOB, CLEANUP, USER)
    gate.end_recovery(JOB, [ev(101.0, HOLD_EVENT, description="bb")])
    assert gate.jobs == {} and port.events == {}


def test_cleanup_during_recovery_posts_the_placeholder_epilog_start(port, gate):
    port.add_job(JOB, RUN, USER)
    gate.begin_recovery(JOB, USER)
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    assert port.events[JOB] == [("epilog-start", {"description": RECOVERY_DESCRIPTION})]


def test_placeholder_is_posted_once_however_many_callbacks(port, gate):
    port.add_job(JOB, RUN, USER)
    gate.begin_recovery(JOB, USER)
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    gate.on_event(JOB, "finish", CLEANUP)
    gate.on_event(JOB, "free", CLEANUP)
    assert epilog_starts(port) == [RECOVERY_DESCRIPTION]


def test_placeholder_is_finished_after_the_recovered_holds_activate(port, gate):
    port.add_job(JOB, SCHED, USER)
    gate.begin_recovery(JOB, USER)
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    gate.end_recovery(JOB, [ev(101.0, HOLD_EVENT, description="bb")])
    assert port.events[JOB] == [
        ("epilog-start", {"description": RECOVERY_DESCRIPTION}),
        ("epilog-start", {"description": "bb"}),
        ("epilog-finish", {"description": RECOVERY_DESCRIPTION, "status": 0}),
    ]
    assert port.outstanding(JOB) == ["bb"]


def test_placeholder_is_finished_when_recovery_finds_no_holds(port, gate):
    port.add_job(JOB, SCHED, USER)
    gate.begin_recovery(JOB, USER)
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    gate.end_recovery(JOB, [ev(100.0, "submit")])
    assert port.outstanding(JOB) == []
    assert gate.jobs == {}


def test_placeholder_left_open_by_a_previous_run_is_finished(port, gate):
    events = [
        ev(101.0, HOLD_EVENT, description="bb"),
        marked(102.0, "epilog-start", description=RECOVERY_DESCRIPTION),
        marked(103.0, "epilog-start", description="bb"),
    ]
    recover(port, gate, CLEANUP, events)
    assert port.posted_by_gate(JOB, "epilog-finish") == [
        {"description": RECOVERY_DESCRIPTION, "status": 0}
    ]


def test_placeholder_closed_by_a_previous_run_is_not_finished_again(port, gate):
    events = [
        ev(101.0, HOLD_EVENT, description="bb"),
        marked(102.0, "epilog-start", description=RECOVERY_DESCRIPTION),
        marked(103.0, "epilog-start", description="bb"),
        marked(103.0, "epilog-finish", description=RECOVERY_DESCRIPTION, status=0),
    ]
    recover(port, gate, CLEANUP, events)
    assert port.posted_by_gate(JOB, "epilog-finish") == []


def test_hold_registered_during_recovery_waits_for_its_end(port, gate):
    port.add_job(JOB, CLEANUP, USER)
    gate.begin_recovery(JOB, USER)
    hold, _ = gate.hold(JOB, "umount")
    assert hold.state == PENDING
    gate.end_recovery(JOB, [ev(101.0, HOLD_EVENT, description="bb")])
    assert {h["description"]: h["state"] for h in gate.list()} == {
        "bb": ACTIVE,
        "umount": ACTIVE,
    }


def test_release_during_recovery_keeps_the_job_tracked(port, gate):
    port.add_job(JOB, SCHED, USER)
    gate.begin_recovery(JOB, USER)
    gate.hold(JOB, "umount")
    gate.release(JOB, "umount")
    assert JOB in gate.jobs and gate.jobs[JOB].recovering


def test_recovered_job_going_inactive_forgets_its_history(port, gate):
    recover(port, gate, RUN, [ev(100.0, "alloc"), ev(101.0, "start")])
    assert JOB in gate.replayed_progress
    gate.on_inactive(JOB)
    assert JOB not in gate.replayed_progress


# Reload into the same job-manager (suspend, retrack, resume)


def test_suspend_stops_every_timer(port, gate):
    at_point(port, gate, "a", "b", timeout=30.0)
    gate.suspend()
    assert port.armed_timers() == []


def test_suspended_gate_does_not_expire_holds(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    gate.suspend()
    port.advance(60)
    assert state_of(gate, JOB, "bb") == ACTIVE


def test_retrack_tracks_a_held_job_again(port, gate):
    held_job(port, gate, "bb")
    gate.suspend()
    port.tracked.clear()
    gate.retrack(JOB, SCHED)
    assert port.tracked == {JOB: True}


def test_retrack_of_a_job_without_holds_does_not_track_it(port, gate):
    port.add_job(JOB, RUN, USER)
    gate.retrack(JOB, RUN)
    assert port.tracked == {}


def test_retrack_activates_holds_of_job_that_passed_its_point_meanwhile(port, gate):
    held_job(port, gate, "bb")
    gate.suspend()
    port.set_state(JOB, CLEANUP)
    gate.retrack(JOB, CLEANUP)
    assert state_of(gate, JOB, "bb") == ACTIVE


def test_retrack_leaves_holds_pending_before_the_point(port, gate):
    started_job_in_cleanup(port, gate, "bb")
    gate.suspend()
    gate.retrack(JOB, CLEANUP)
    assert state_of(gate, JOB, "bb") == PENDING


def test_resume_rearms_timers_with_the_remaining_time(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    gate.suspend()
    port.advance(10)
    gate.retrack(JOB, CLEANUP)
    gate.resume({JOB})
    (timer,) = port.armed_timers()
    assert timer.delay == pytest.approx(20.0)


def test_resumed_timer_still_expires_the_hold(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    gate.suspend()
    port.advance(10)
    gate.resume({JOB})
    port.advance(20)
    assert gate.release(JOB, "bb") == (False, "timed out")


def test_resume_treats_jobs_not_seen_as_inactive(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    gate.suspend()
    gate.resume(set())
    assert gate.jobs == {}
    assert gate.release(JOB, "bb") == (False, "job is inactive")
    assert port.armed_timers() == []


def test_resume_forgets_history_of_jobs_not_seen(port, gate):
    recover(port, gate, RUN, [ev(100.0, "alloc"), ev(101.0, "start")])
    gate.suspend()
    gate.resume(set())
    assert gate.replayed_progress == {}


def test_holds_survive_suspend_and_resume(port, gate):
    at_point(port, gate, "bb")
    held_job(port, gate, "later", jobid=JOB2)
    gate.suspend()
    gate.retrack(JOB, CLEANUP)
    gate.retrack(JOB2, SCHED)
    gate.resume({JOB, JOB2})
    assert sorted((h["id"], h["state"]) for h in gate.list()) == [
        (JOB, ACTIVE),
        (JOB2, PENDING),
    ]


# Additions: unknown job in list, rules, annotations, reload while recovering


def test_list_of_unknown_job_is_enoent(port, gate):
    with pytest.raises(GateError) as exc:
        gate.list(JOB)
    assert exc.value.errnum == errno.ENOENT


def test_rule_holds_a_job_whose_jobspec_has_the_attribute(port):
    config = Config.from_sources(
        {"rules": [{"attribute": "system.bb", "description": "bb", "timeout": 60}]}
    )
    gate = Gate(port, config)
    port.add_job(JOB, SCHED, USER)
    gate.apply_rules(JOB, {"system": {"bb": {"size": 1}}})
    hold = gate.jobs[JOB].holds["bb"]
    assert (hold.state, hold.timeout) == (PENDING, 60.0)


def test_rule_leaves_a_job_without_the_attribute_alone(port):
    config = Config.from_sources(
        {"rules": [{"attribute": "system.bb", "description": "bb"}]}
    )
    gate = Gate(port, config)
    port.add_job(JOB, SCHED, USER)
    gate.apply_rules(JOB, {"system": {"duration": 0}})
    assert JOB not in gate.jobs and port.names(JOB) == []


def test_rule_with_equals_matches_only_that_value(port):
    config = Config.from_sources(
        {"rules": [{"attribute": "user.tier", "equals": "gold", "description": "x"}]}
    )
    gate = Gate(port, config)
    port.add_job(JOB, SCHED, USER)
    port.add_job(JOB2, SCHED, USER)
    gate.apply_rules(JOB, {"user": {"tier": "silver"}})
    gate.apply_rules(JOB2, {"user": {"tier": "gold"}})
    assert JOB not in gate.jobs and "x" in gate.jobs[JOB2].holds


def annotations(port, jobid=JOB):
    """The annotations the gate set on a job, in order."""
    return [c["epilog_gate"] for name, c in port.events[jobid] if name == "memo"]


def test_annotation_names_the_active_holds_at_the_epilog_point(port):
    gate = Gate(port, Config(annotate=True))
    held_job(port, gate, "umount", "bb")
    assert annotations(port) == []
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    assert annotations(port) == ["bb,umount"]


def test_annotation_follows_each_release_and_is_removed_before_the_last_finish(
    port,
):
    gate = Gate(port, Config(annotate=True))
    at_point(port, gate, "bb", "umount", "license")
    gate.release(JOB, "umount")
    gate.release(JOB, "bb", status=1)
    assert annotations(port) == ["bb,license,umount", "bb,license", "license"]
    gate.release(JOB, "license")
    assert annotations(port)[-1] is None
    # removed before the epilog-finish that lets the job go to clean
    assert port.names(JOB)[-2:] == ["memo", "epilog-finish"]


def test_annotation_follows_a_timeout_and_a_hold_added_at_the_point(port):
    gate = Gate(port, Config(annotate=True))
    at_point(port, gate, "bb", timeout=5.0)
    gate.hold(JOB, "late")
    port.advance(5)
    assert annotations(port) == ["bb", "bb,late", "late"]


def test_cancelled_pending_hold_changes_no_annotation(port):
    gate = Gate(port, Config(annotate=True))
    held_job(port, gate, "bb")
    gate.release(JOB, "bb")
    assert annotations(port) == []


def test_failed_annotation_is_logged_and_the_hold_goes_on(port):
    gate = Gate(port, Config(annotate=True))
    held_job(port, gate, "bb")
    port.fail("memo")
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    assert state_of(gate, JOB, "bb") == ACTIVE
    assert any("annotation" in text for _, text in port.logs)


def test_no_annotation_by_default(port, gate):
    at_point(port, gate, "bb")
    gate.release(JOB, "bb")
    assert annotations(port) == []


def test_retrack_of_a_job_still_recovering_asks_for_its_eventlog(port, gate):
    port.add_job(JOB, RUN, USER)
    gate.begin_recovery(JOB, USER)
    gate.suspend()
    assert gate.retrack(JOB, RUN) is True


def test_hold_that_expired_while_down_says_how_long_it_was_active(port, gate):
    # Active 6.3 s when the gate is back, with a timeout of 3 s: the note
    # gives the real time, not the timeout.
    started = port.now() - 6.3
    marked = {"description": "bb", "timeout": 3.0, MARKER: True}
    recover(port, gate, CLEANUP, [ev(started, "epilog-start", **marked)])
    port.advance(0)
    (note,) = port.notes(JOB)
    assert "timed out after 6.3s (timeout 3s)" in note


def test_hold_that_expires_on_time_says_its_timeout(port, gate):
    at_point(port, gate, "bb", timeout=30.0)
    port.advance(30)
    (note,) = port.notes(JOB)
    assert "timed out after 30.0s (timeout 30s)" in note
