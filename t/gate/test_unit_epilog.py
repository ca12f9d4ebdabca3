"""Unit tests of the epilog point (flux_epilog_gate.gate.epilog) and the
annotation of held jobs; no broker, the job-manager is a FakePort."""

from flux_epilog_gate.gate import CLEANUP, RUN, SCHED, Gate
from flux_epilog_gate.gate.config import Config
from flux_epilog_gate.gate.holds import (
    ACTIVE,
    HOLD_EVENT,
    PENDING,
)

from .unitgate import (
    JOB,
    USER,
    annotations,
    at_point,
    epilog_starts,
    held_job,
    logged,
    started_job_in_cleanup,
    state_of,
)

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


def test_job_in_cleanup_short_of_its_point_gets_its_events(port, gate):
    started_job_in_cleanup(port, gate, "bb")
    assert port.tracked == {JOB: True}


def test_job_at_its_point_on_entry_to_cleanup_never_gets_its_events(port, gate):
    port.add_job(JOB, RUN, USER, happened={"alloc", "start", "finish"})
    gate.hold(JOB, "bb")
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    assert state_of(gate, JOB, "bb") == ACTIVE
    assert port.tracked == {JOB: False}


def test_hold_placed_in_cleanup_short_of_the_point_gets_the_events(port, gate):
    port.add_job(JOB, CLEANUP, USER, happened={"alloc", "start"})
    gate.hold(JOB, "bb")
    assert state_of(gate, JOB, "bb") == PENDING
    assert port.tracked == {JOB: True}


def test_job_whose_last_hold_cleanup_drops_is_not_tracked_again(port, gate):
    port.add_job(JOB, SCHED, USER)
    gate.hold(JOB, "setup", point="prolog")
    port.happen(JOB, "alloc")
    port.set_state(JOB, CLEANUP)
    gate.on_cleanup(JOB)
    assert gate.jobs == {} and port.tracked == {}


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


# Annotations


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
