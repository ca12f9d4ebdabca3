"""Holds survive the plugin being removed and loaded again, a reload of
the job-manager and a restart of the instance from its state directory,
at each point: an active hold still keeps its job where it is (an
epilog hold its ``clean``, a prolog hold its start, a dependency hold
its job in DEPEND), its release lets the job go on, pending holds
become active when their job gets there, and a timeout resumes on the
clock that started when its hold became active (not when the gate came
back).
"""

import errno
import time

import flux.job
import pytest
from conftest import LEAD, SLACK, TIMEOUTS
from jobs import (
    assert_in_depend,
    described,
    end_others,
    eventlog,
    held_in_depend,
    named,
    names,
    set_urgency,
    settle,
    submit,
    wait_event,
    wait_inactive,
)

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holdlog import KEY, MARKER

#: A pending hold with its own timeout: the clock must not run until the
#: job reaches its epilog point, however long that takes.
PENDING_TIMEOUT = 1.5


class Point:
    """One point's scenario around a restart of the gate (``r``, a
    :class:`conftest.Restarter`): :meth:`hold` sets up its holds, one of
    them active with ``timeout``; ``expected`` is what the gate lists,
    before and after the restart: ``(id, description) -> (state,
    point)``.  :meth:`check_held` checks what the recovered holds still
    do, :meth:`fired` waits for the timeout, :meth:`check_rest` what
    remains."""

    #: Whether the job-manager's neighbours are reloaded with it.
    dependents = False

    def __init__(self, r, timeout):
        self.r = r
        self.timeout = timeout
        self.expected = {}

    @property
    def handle(self):
        return self.r.handle

    @property
    def gate(self):
        return self.r.gate

    def jobs(self):
        return {jobid for jobid, _ in self.expected}


class Epilog(Point):
    """A job held in PRIORITY with two pending holds, one with a timeout;
    a job at its epilog point with an active hold and no timeout; one
    whose active hold's timeout spans the restart."""

    def hold(self):
        handle, gate = self.handle, self.gate
        self.pend = pend = submit(handle, urgency=0)
        gate.hold(pend, "p-plain")
        gate.hold(pend, "p-timed", timeout=PENDING_TIMEOUT)
        self.act = act = submit(handle, urgency=0)
        gate.hold(act, "a-plain")
        flux.job.cancel(handle, act)
        wait_event(handle, act, "epilog-start", match=described("a-plain"))
        self.timed = timed = submit(handle, urgency=0)
        gate.hold(timed, "t-timed", timeout=self.timeout)
        flux.job.cancel(handle, timed)
        started = wait_event(handle, timed, "epilog-start", match=described("t-timed"))
        self.expected = {
            (pend, "p-plain"): ("pending", "epilog"),
            (pend, "p-timed"): ("pending", "epilog"),
            (act, "a-plain"): ("active", "epilog"),
            (timed, "t-timed"): ("active", "epilog"),
        }
        return started

    def check_held(self, restarted):
        handle, gate, pend, act = self.handle, self.gate, self.pend, self.act
        # Still blocking clean: nothing finished the active holds.
        events = settle(handle, act, "clean", seconds=0.5, since=restarted)
        assert "clean" not in names(events) and "epilog-finish" not in names(events)

        # A new hold on a recovered job that has not reached its epilog
        # point is pending, and can be cancelled without a trace.
        assert gate.hold(pend, "p-late")["state"] == "pending"
        assert gate.release(pend, "p-late") == {"released": True}
        assert len(named(eventlog(handle, pend), "epilog-start", "p-late")) == 0

        # Releasable.
        assert gate.release(act, "a-plain") == {"released": True}
        wait_inactive(handle, act)
        events = eventlog(handle, act)
        assert names(events).index("epilog-finish") < names(events).index("clean")
        assert gate.release(act, "a-plain")["released"] is False

        # Pending holds still become active on the exception path (clean
        # is held), and a pending hold's timeout runs only from then on.
        assert len(named(eventlog(handle, pend), "epilog-start", "p-timed")) == 0
        flux.job.cancel(handle, pend)
        start_p = wait_event(handle, pend, "epilog-start", match=described("p-plain"))
        start_t = wait_event(handle, pend, "epilog-start", match=described("p-timed"))
        finish_t = wait_event(handle, pend, "epilog-finish", match=described("p-timed"))
        assert finish_t.context["status"] == 124
        assert finish_t.timestamp - start_t.timestamp >= PENDING_TIMEOUT - 0.05
        events = settle(handle, pend, "clean", seconds=0.3, since=finish_t.timestamp)
        assert "clean" not in names(events)
        assert [h["description"] for h in gate.list(pend)] == ["p-plain"]
        assert gate.release(pend, "p-plain") == {"released": True}
        clean = wait_inactive(handle, pend)
        assert start_p.timestamp < clean.timestamp

    def fired(self):
        finish = wait_event(
            self.handle,
            self.timed,
            "epilog-finish",
            match=described("t-timed"),
            timeout=self.timeout + 20,
        )
        assert finish.context["status"] == 124
        return finish

    def check_rest(self):
        handle, timed = self.handle, self.timed
        wait_inactive(handle, timed)
        timed_events = eventlog(handle, timed)
        notes = [
            e.context["note"]
            for e in timed_events
            if e.name == "exception" and e.context.get("type") != "cancel"
        ]
        assert len(notes) == 1 and "t-timed" in notes[0]
        assert len(named(timed_events, "epilog-start", "t-timed")) == 1
        assert len(named(timed_events, "epilog-finish", "t-timed")) == 1
        # Active holds are told by their epilog-start, marked as the
        # gate's; pending ones were in the hold log.
        for jobid, description in (
            (self.pend, "p-plain"),
            (self.act, "a-plain"),
            (timed, "t-timed"),
        ):
            (start,) = named(eventlog(handle, jobid), "epilog-start", description)
            assert start.context[MARKER] is True, start.context
        log = self.r.inst.flux("kvs", "get", KEY).stdout
        for description in ("p-plain", "p-timed"):
            assert f'"description":"{description}"' in log, log


class Prolog(Point):
    """A job held in PRIORITY with a prolog and an epilog hold; a job in
    RUN whose start the gate holds; one whose active prolog hold's
    timeout spans the restart."""

    # A new job-manager has no scheduler and no exec service until they
    # say hello again: they are reloaded with it.
    dependents = True

    def hold(self):
        handle, gate = self.handle, self.gate
        self.pend = pend = submit(handle, duration=0.1, urgency=0)
        gate.hold(pend, "p-setup", point="prolog")
        gate.hold(pend, "p-teardown")
        self.act = act = submit(handle, duration=0.1, urgency=0)
        gate.hold(act, "a-setup", point="prolog")
        set_urgency(handle, act, 16)
        wait_event(handle, act, "prolog-start", match=described("a-setup"))
        self.timed = timed = submit(handle, duration=0.1, urgency=0)
        gate.hold(timed, "t-setup", point="prolog", timeout=self.timeout)
        set_urgency(handle, timed, 16)
        started = wait_event(handle, timed, "prolog-start", match=described("t-setup"))
        self.expected = {
            (pend, "p-setup"): ("pending", "prolog"),
            (pend, "p-teardown"): ("pending", "epilog"),
            (act, "a-setup"): ("active", "prolog"),
            (timed, "t-setup"): ("active", "prolog"),
        }
        return started

    def check_held(self, restarted):
        handle, gate, pend, act = self.handle, self.gate, self.pend, self.act
        # The active prolog hold still keeps the job from starting.
        events = settle(handle, act, "start", seconds=0.5, since=restarted)
        assert "start" not in names(events)
        assert gate.release(act, "a-setup") == {"released": True}
        wait_event(handle, act, "start", timeout=30)
        wait_inactive(handle, act, timeout=30)
        (finish,) = named(eventlog(handle, act), "prolog-finish")
        assert finish.context[MARKER] is True and finish.context["status"] == 0

        # The pending prolog hold becomes active when its job enters RUN.
        set_urgency(handle, pend, 16)
        start = wait_event(
            handle, pend, "prolog-start", match=described("p-setup"), timeout=30
        )
        events = settle(handle, pend, "start", seconds=0.5, since=start.timestamp)
        assert "start" not in names(events)
        gate.release(pend, "p-setup")
        wait_event(
            handle, pend, "epilog-start", match=described("p-teardown"), timeout=30
        )
        order = names(eventlog(handle, pend))
        assert order.index("prolog-finish") < order.index("start")
        assert order.index("finish") < order.index("epilog-start")
        gate.release(pend, "p-teardown")
        wait_inactive(handle, pend, timeout=30)

    def fired(self):
        # The timeout fails the job.
        finish = wait_event(
            self.handle,
            self.timed,
            "prolog-finish",
            match=described("t-setup"),
            timeout=self.timeout + 20,
        )
        assert finish.context["status"] == 124
        return finish

    def check_rest(self):
        handle, timed = self.handle, self.timed
        wait_inactive(handle, timed, timeout=30)
        events = eventlog(handle, timed)
        assert "start" not in names(events)
        (exc,) = [e for e in named(events, "exception") if e.context["severity"] == 0]
        assert "t-setup" in exc.context["note"] and "timed out" in exc.context["note"]
        # The pending prolog hold was recorded with its point.
        log = self.r.inst.flux("kvs", "get", KEY).stdout
        assert '"description":"p-setup","point":"prolog"' in log, log


class Depend(Point):
    """A job in DEPEND with an active dependency hold and a pending
    epilog hold; one whose active dependency hold's timeout spans the
    restart.  Each job also depends on a job held in PRIORITY, ended
    after the restart (flux-core's dependency-after fails, at a
    restart, a dependency on a job that went inactive meanwhile)."""

    dependents = True

    def hold(self):
        handle, gate = self.handle, self.gate
        self.act, self.act_holder, _ = held_in_depend(handle, gate, "a-create")
        gate.hold(self.act, "a-teardown")
        self.timed, self.timed_holder, started = held_in_depend(
            handle, gate, "t-create", timeout=self.timeout
        )
        self.expected = {
            (self.act, "a-create"): ("active", "depend"),
            (self.act, "a-teardown"): ("pending", "epilog"),
            (self.timed, "t-create"): ("active", "depend"),
        }
        return started

    def check_held(self, restarted):
        handle, gate, act = self.handle, self.gate, self.act
        # Still in DEPEND; the release lets it run.
        end_others(handle, self.act_holder, self.timed_holder)
        assert_in_depend(handle, act)
        assert gate.release(act, "a-create") == {"released": True}
        wait_event(handle, act, "start", timeout=30)
        wait_event(handle, act, "epilog-start", match=described("a-teardown"))
        gate.release(act, "a-teardown")
        wait_inactive(handle, act, timeout=30)
        (remove,) = named(eventlog(handle, act), "dependency-remove", "a-create")
        assert remove.context[MARKER] is True

    def fired(self):
        # The timeout fails the job.
        exc = wait_event(
            self.handle, self.timed, "exception", timeout=self.timeout + 20
        )
        assert exc.context["severity"] == 0 and exc.context["type"] == "dependency"
        assert "t-create" in exc.context["note"] and "timed out" in exc.context["note"]
        return exc

    def check_rest(self):
        wait_inactive(self.handle, self.timed, timeout=30)
        assert "alloc" not in names(eventlog(self.handle, self.timed))
        log = self.r.inst.flux("kvs", "get", KEY).stdout
        assert '"description":"a-create","point":"depend"' in log, log


POINTS = {"epilog": Epilog, "prolog": Prolog, "depend": Depend}


def listed(gate):
    """The holds the gate lists: ``(id, description) -> hold``."""
    return {(h["id"], h["description"]): h for h in gate.list()}


def states(holds):
    return {key: (h["state"], h["point"]) for key, h in holds.items()}


@pytest.mark.parametrize("kind", ["jobtap", "module", "instance"])
@pytest.mark.parametrize("point", list(POINTS))
def test_holds_survive_restart(point, kind, restarter):
    timeout = TIMEOUTS[kind]
    case = POINTS[point](restarter(kind), timeout)
    started = case.hold()
    before = listed(case.gate)
    assert states(before) == case.expected

    time.sleep(max(0.0, started.timestamp + LEAD - time.time()))
    case.r.restart(dependents=case.dependents)
    restarted = time.time()
    assert (
        restarted < started.timestamp + timeout - 1.0
    ), "the restart took too long to tell a resumed clock from a new one"

    # Listed with their states and times, as before.
    after = listed(case.gate)
    assert states(after) == case.expected
    for key, hold in before.items():
        for field in ("userid", "timeout"):
            assert after[key].get(field) == hold.get(field), (key, field)
        assert after[key]["t_hold"] == pytest.approx(hold["t_hold"], abs=0.1)
        if "t_start" in hold:
            assert after[key]["t_start"] == pytest.approx(hold["t_start"], abs=0.1)
    assert all(case.gate.list(jobid) for jobid in case.jobs())

    # What the recovered holds still do, while the timeout runs.
    case.check_held(restarted)

    # The timeout resumes on the original clock.
    fired = case.fired()
    took = fired.timestamp - started.timestamp
    assert timeout - 0.05 <= took, took
    assert fired.timestamp <= max(started.timestamp + timeout, restarted) + SLACK, (
        f"fired {took:.2f}s after activation, "
        f"{fired.timestamp - restarted:.2f}s after the restart"
    )
    case.check_rest()
    assert case.gate.list() == []


def test_hold_on_running_job_survives_plugin_reload(restarter):
    """A pending hold on a job that runs while the plugin is removed and
    loaded again becomes active on the job's finish, and holds its clean.

    (Only a plugin reload: flux-core's test execution does not reattach
    running jobs across a job-manager reload or an instance restart, with
    or without the gate.)"""
    r = restarter("jobtap")
    handle, gate = r.handle, r.gate
    # Long enough to outlast the reload (a few hundredths of a second, a
    # few tenths on a loaded machine).
    jobid = submit(handle, duration=3)
    gate.hold(jobid, "run-hold")
    wait_event(handle, jobid, "start")
    r.restart()
    handle, gate = r.handle, r.gate
    assert "finish" not in names(eventlog(handle, jobid)), "the job ended too soon"
    assert [h["state"] for h in gate.list(jobid)] == ["pending"]
    start = wait_event(
        handle, jobid, "epilog-start", match=described("run-hold"), timeout=30
    )
    events = settle(handle, jobid, "clean", seconds=0.5, since=start.timestamp)
    assert names(events).index("finish") < names(events).index("epilog-start")
    assert "clean" not in names(events)
    assert [h["state"] for h in gate.list(jobid)] == ["active"]
    assert gate.release(jobid, "run-hold") == {"released": True}
    clean = wait_inactive(handle, jobid)
    assert start.timestamp < clean.timestamp


def test_prolog_hold_pending_while_the_plugin_is_removed_is_gone(restarter):
    """A job that enters RUN while the plugin is not loaded is not held:
    its pending prolog hold is answered as gone once the plugin is back."""
    r = restarter("jobtap")
    handle, gate = r.handle, r.gate
    jobid = submit(handle, duration=0.1, urgency=0)
    gate.hold(jobid, "setup", point="prolog")
    r.inst.flux("jobtap", "remove", "epilog-gate.so")
    set_urgency(handle, jobid, 16)
    wait_inactive(handle, jobid)
    r.inst.flux("jobtap", "load", r.plugin)
    assert gate.list() == []
    answer = gate.release(jobid, "setup")
    assert answer["released"] is False
    assert "prolog-start" not in names(eventlog(handle, jobid))


def test_restart_twice_keeps_state(restarter):
    """Two instance restarts in a row: the recovered state is itself
    durable (nothing is lost by recovering from recovered state)."""
    r = restarter("instance")
    handle, gate = r.handle, r.gate
    pend = submit(handle, urgency=0)
    act = submit(handle, urgency=0)
    gate.hold(pend, "two-p")
    gate.hold(act, "two-a")
    flux.job.cancel(handle, act)
    wait_event(handle, act, "epilog-start", match=described("two-a"))
    for _ in range(2):
        r.restart()
        states = {(h["id"], h["description"]): h["state"] for h in r.gate.list()}
        assert states == {(pend, "two-p"): "pending", (act, "two-a"): "active"}
    handle, gate = r.handle, r.gate
    assert "clean" not in names(eventlog(handle, act))
    assert gate.release(act, "two-a") == {"released": True}
    wait_inactive(handle, act)
    flux.job.cancel(handle, pend)
    wait_event(handle, pend, "epilog-start", match=described("two-p"))
    assert gate.release(pend, "two-p") == {"released": True}
    wait_inactive(handle, pend)
    # One epilog-start and one epilog-finish each, despite two recoveries.
    for jobid, description in ((pend, "two-p"), (act, "two-a")):
        assert len(named(eventlog(handle, jobid), "epilog-start", description)) == 1
        assert len(named(eventlog(handle, jobid), "epilog-finish", description)) == 1


@pytest.mark.parametrize("kind", ["jobtap", "module", "instance"])
def test_new_hold_on_recovered_job_past_epilog_point(kind, restarter):
    """After a restart, a hold registered on a job already past its epilog
    point (waiting on a recovered hold) becomes active at once."""
    r = restarter(kind)
    handle, gate = r.handle, r.gate
    jobid = submit(handle, urgency=0)
    gate.hold(jobid, "first")
    flux.job.cancel(handle, jobid)
    wait_event(handle, jobid, "epilog-start", match=described("first"))
    r.restart()
    handle, gate = r.handle, r.gate
    try:
        assert gate.hold(jobid, "late")["state"] == "active"
        wait_event(handle, jobid, "epilog-start", match=described("late"))
        assert gate.release(jobid, "first") == {"released": True}
        assert "clean" not in names(settle(handle, jobid, "clean", seconds=0.3))
        assert gate.release(jobid, "late") == {"released": True}
        wait_inactive(handle, jobid)
    finally:
        # Let the job go, whatever happened above.
        try:
            gate.release(jobid, "first")
        except OSError:
            pass


@pytest.mark.parametrize("kind", ["jobtap", "module", "instance"])
def test_watch_stream_across_restart(kind, restarter):
    """A cleanup service watching across a restart either keeps receiving
    activations, or sees its stream end with an error (and a new watch is
    sent the holds that became active meanwhile): it is never left
    waiting on a stream that will not deliver."""
    r = restarter(kind)
    handle, gate = r.handle, r.gate
    watch_handle = r.inst.handle()
    stream = EpilogGate(watch_handle).watch_async(["w-hold"])
    jobid = submit(handle, urgency=0)
    gate.hold(jobid, "w-hold")
    r.restart()
    handle, gate = r.handle, r.gate
    flux.job.cancel(handle, jobid)
    wait_event(handle, jobid, "epilog-start", match=described("w-hold"))
    try:
        stream.wait_for(5)
        activation = stream.get()
    except OSError as exc:
        assert exc.errno != errno.ETIMEDOUT, "the watch stream was left hanging"
        # The stream ended: watch again, and get what became active.
        again = EpilogGate(r.inst.handle()).watch_async(["w-hold"])
        again.wait_for(5)
        activation = again.get()
    assert activation["id"] == jobid and activation["description"] == "w-hold"
    assert gate.release(jobid, "w-hold") == {"released": True}
    wait_inactive(handle, jobid)
