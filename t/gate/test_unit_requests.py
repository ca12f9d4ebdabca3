"""Unit tests of requests (flux_epilog_gate.gate.requests): hold, release,
list and configured rules; no broker, the job-manager is a FakePort."""

import errno

import pytest

from flux_epilog_gate.errors import GateError
from flux_epilog_gate.gate import CLEANUP, INACTIVE, RUN, SCHED, Gate
from flux_epilog_gate.gate.config import Config
from flux_epilog_gate.gate.holds import (
    ACTIVE,
    CANCEL_EVENT,
    HOLD_EVENT,
    PENDING,
    RELEASE_EVENT,
)
from flux_epilog_gate.jobid import f58

from .unitgate import (
    JOB,
    JOB2,
    OTHER,
    USER,
    at_point,
    epilog_starts,
    held_job,
    logged,
    state_of,
)

# Registration


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


def test_hold_starts_tracking_the_job_without_its_events(port, gate):
    held_job(port, gate, "bb")
    assert port.tracked == {JOB: False}


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
        "lost": 0,
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
    assert len(gate.jobs.gone) == 1


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


@pytest.mark.parametrize("held", [True, False], ids=["held", "without-holds"])
def test_list_with_id_of_another_users_job_is_an_unknown_job(port, gate, held):
    if held:
        held_job(port, gate, "theirs", jobid=JOB2, userid=OTHER)
    else:
        port.add_job(JOB2, RUN, OTHER)
    with pytest.raises(GateError) as info:
        gate.list(JOB2, userid=USER)
    assert info.value.errnum == errno.ENOENT
    assert info.value.message.startswith("unknown job ")
    assert gate.list(JOB2, userid=OTHER) == ([] if not held else gate.list(JOB2))


def test_released_hold_is_no_longer_listed(port, gate):
    at_point(port, gate, "bb", "umount")
    gate.release(JOB, "bb")
    assert [h["description"] for h in gate.list()] == ["umount"]


# Unknown jobs and rules


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


# Requests waiting for the hold log


def test_requests_past_max_pending_are_refused_and_change_nothing(port):
    gate = Gate(port, Config(max_pending=2))
    port.defer_commits = True
    answers = []
    for jobid in (1, 2, 3):
        port.add_job(jobid, SCHED, USER)
    gate.hold(1, "bb", done=lambda hold, error: answers.append(error))
    gate.hold(2, "bb", done=lambda hold, error: answers.append(error))
    with pytest.raises(GateError) as exc:
        gate.hold(3, "bb", done=lambda hold, error: answers.append(error))
    assert exc.value.errnum == errno.EAGAIN
    assert "max-pending=2" in exc.value.message
    assert 3 not in gate.jobs and gate.counters()["busy"] == 1
    with pytest.raises(GateError) as exc:
        gate.release(1, "bb", done=lambda result, error: answers.append(error))
    assert exc.value.errnum == errno.EAGAIN and "bb" in gate.jobs[1].holds
    # Rules (no request waiting) are not refused.
    gate.hold(3, "rule")
    assert "rule" in gate.jobs[3].holds
    port.complete_commit()
    port.complete_commit()
    assert answers == [None, None]
    gate.hold(3, "bb", done=lambda hold, error: answers.append(error))
    assert "bb" in gate.jobs[3].holds


def test_a_hold_asked_again_gets_the_answer_of_its_failed_first_record(port):
    """The first record fails and withdraws the hold; a repeat asked
    meanwhile must not be acknowledged by the later commit that succeeds."""
    gate = Gate(port, Config())
    port.defer_commits = True
    port.add_job(1, SCHED, USER)
    answers = []
    gate.hold(1, "bb", done=lambda hold, error: answers.append(("first", error)))
    gate.hold(1, "other", done=lambda hold, error: answers.append(("other", error)))
    gate.hold(1, "bb", done=lambda hold, error: answers.append(("again", error)))
    port.complete_commit(errno.EIO)
    port.complete_commit()
    assert "bb" not in gate.jobs[1].holds
    first = dict(answers)["first"]
    again = dict(answers)["again"]
    assert first is not None and again is first
