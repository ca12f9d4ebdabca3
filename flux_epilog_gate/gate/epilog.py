"""The epilog point: holds that keep a job's *clean* back.

An epilog hold is pending until the job reaches its epilog point, the
moment none of its processes can still run (see
``doc/man7/flux-epilog-gate.rst``, "The epilog point"); there the gate
posts ``epilog-start description=D`` (marked as the gate's, with the
hold's timeout), and the job-manager does not post ``clean`` while an
epilog action is open.  Releasing it posts ``epilog-finish
description=D status=S``; a non-zero status or a timeout raises a
non-fatal job exception naming the hold first.

Recovery.  While a job's holds are being recovered, the gate keeps it
from clean with its own epilog action
(:data:`~flux_epilog_gate.gate.holds.RECOVERY_DESCRIPTION`), posted
when the job enters CLEANUP and finished by :meth:`EpilogPoint.end_recovery`
once its holds are carried on.

Shutdown.  ``shutdown-action=finish`` ends active epilog holds; a
pending one on a job the stopping instance ends is made active first
(:mod:`flux_epilog_gate.gate.shutdown` calls :meth:`EpilogPoint.reach`).
"""

import syslog

from ..errors import GateError
from ..jobid import f58
from .holdlog import MARKER
from .holds import EPILOG, PENDING, RECOVERY_DESCRIPTION, Reason
from .points import HoldPoint, replay_start
from .states import CLEANUP

#: The epilog events the gate posts, marked as its own (holdlog.MARKER).
EPILOG_EVENTS = frozenset(("epilog-start", "epilog-finish"))


class EpilogPoint(HoldPoint):
    """The epilog point (see module docstring and
    :class:`~flux_epilog_gate.gate.points.HoldPoint`).

    Owns each job's ``at_point`` and its recovery's ``epilog``.  Also calls
    the annotations (a job's active holds change when it reaches its
    point) and the jobs' progress events; tells the shutdown of a held
    job that enters CLEANUP short of its point.  Called by the gate's
    job-manager callbacks (``on_cleanup``, ``on_event``), the requests,
    the lifecycle (``finish``), recovery, reload and the shutdown.
    """

    name = EPILOG
    events = EPILOG_EVENTS
    ends_at_shutdown = True

    def __init__(self, context, jobs, lifecycle, holdlog, annotations):
        super().__init__(context, jobs, lifecycle, holdlog)
        self.annotations = annotations

    # Requests

    def place(self, job, hold, state):
        """A new epilog hold: active at once past the point, else pending."""
        recovery = job.recovery
        # past_point() is false outside CLEANUP, where most holds are
        # placed: tested here, the call costs more than the test.
        if (recovery is None or not recovery.active) and (
            job.at_point or (state == CLEANUP and self.past_point(job, state))
        ):
            self.activate(job, hold)
            job.at_point = True
        elif state == CLEANUP:
            self._wait_for_point(job)

    def activate(self, job, hold):
        self._post_start(hold.id, hold.description, hold.timeout)
        self.lifecycle.activated(hold)

    def finish(self, job, hold, status, reason, note=None, raised=False):
        if status != 0 and not raised:
            self._raise(job.id, hold, status, reason, note)
        # _post_finish(), written out: this ends every epilog hold.
        try:
            self.context.port.epilog_finish(job.id, hold.description, status)
        except OSError as exc:
            self._finish_failed(job.id, hold.description, exc)

    # Job-manager callbacks

    def on_cleanup(self, job):
        self._advance(job, CLEANUP)
        if not job.at_point:
            self._await_point(job)
            if self.context.shutdown is not None:
                self.context.shutdown.entered_cleanup(job.id)

    def on_event(self, job, name, state):
        """An event was posted to the job."""
        if name in ("finish", "free") and state == CLEANUP:
            self._advance(job, state)

    def reach(self, job):
        """Take the job as at its epilog point now, whatever it went
        through (at shutdown, which ends its processes)."""
        if job.at_point or (job.recovery is not None and job.recovery.active):
            return
        try:
            self._reach_point(job)
        except GateError as exc:
            self.context.port.log(syslog.LOG_ERR, f"{f58(job.id)}: {exc.message}")

    def past_point(self, job, state):
        """True if the job is in CLEANUP and none of its processes can still
        be running (see flux-epilog-gate(7), "The epilog point")."""
        if state != CLEANUP:
            return False
        if job.start_held:
            # The gate's own prolog action kept the start request back.
            return True
        posted = self.jobs.posted
        if not posted(job, "alloc"):
            return True
        if posted(job, "finish") or posted(job, "free"):
            return True
        if posted(job, "start"):
            return False
        # A prolog still open (in CLEANUP) means no start was ever
        # requested.  One closed since may have closed before CLEANUP began,
        # and a start request gone out then: wait for finish, or free as the
        # last resort (the order of the two is not known afterwards).
        return posted(job, "prolog-start") and not posted(job, "prolog-finish")

    # Recovery and reload

    def replay(self, job, timestamp, name, context, released):
        if not context.get(MARKER):
            # Only the gate's own: another plugin's epilog may have the
            # same description (perilog.so's job-manager.epilog).
            return
        description = context["description"]
        if description == RECOVERY_DESCRIPTION:
            job.recovery.epilog = name == "epilog-start"
        elif name == "epilog-start":
            replay_start(job, timestamp, context)
        elif description in released:
            # The finish of a released hold (the oldest start).
            del released[description]
        elif description in job.holds:
            del job.holds[description]
            self.jobs.gone.add(job.id, description, Reason.RELEASED)

    def recovered(self, job, state):
        """Past the point, the job's pending epilog holds become active
        (also those held while it was being recovered)."""
        if self.past_point(job, state):
            self._reach_point(job)
        elif state == CLEANUP:
            self._await_point(job)

    def expect(self, job, state):
        """Before the prolog point carries a reloaded job's holds on: if
        it is in CLEANUP short of its point with epilog holds, have its
        events sent now.  An aborted prolog hold that ends then (see
        ``PrologPoint.ends_aborted``) may take the job past its point at
        once, to ``free`` and on to ``clean`` before this point's
        ``recovered`` is called."""
        if state == CLEANUP and not job.at_point:
            self._await_point(job)

    def end_recovery(self, job):
        """End the gate's own epilog action of a job whose holds are
        known again (or could not be)."""
        recovery = job.recovery
        if recovery is not None and recovery.epilog:
            recovery.epilog = False
            self._post_finish(job.id, RECOVERY_DESCRIPTION, 0)
        job.recovery_over()

    # Internals

    def _advance(self, job, state):
        recovery = job.recovery
        if recovery is not None and recovery.active:
            if recovery.keeps:
                self._hold_for_recovery(job)
        elif not job.at_point and self.past_point(job, state):
            self._reach_point(job)

    def _reach_point(self, job):
        job.at_point = True
        for hold in list(job.holds.values()):
            # A pending prolog hold is the prolog point's (dropped when the
            # job enters CLEANUP), a dependency hold the dependency point's:
            # never an epilog.
            if hold.state == PENDING and hold.point == EPILOG:
                self.activate(job, hold)
        # Tested here: the call costs more than the test.
        if self.context.config.annotate:
            self.annotations.update(job)

    def _await_point(self, job):
        """From a callback: the job is in CLEANUP short of its point.  If
        it has epilog holds, have its events sent (a job whose last hold
        just went is untracked, and must not be tracked again; a hold
        placed later asks for them itself, in place())."""
        if not any(hold.point == EPILOG for hold in job.holds.values()):
            return
        try:
            self._wait_for_point(job)
        except GateError as exc:
            self.context.port.log(syslog.LOG_ERR, f"{f58(job.id)}: {exc.message}")

    def _wait_for_point(self, job):
        """The job is in CLEANUP short of its epilog point: its ``finish``
        or ``free`` event takes it there, so have its events sent (the
        gate asks for them only now: each event of a job whose events are
        sent costs the job-manager a call, and most jobs reach CLEANUP
        at their point, or with their events no longer needed)."""
        try:
            self.context.port.track(job.id, events=True)
        except OSError as exc:
            raise GateError.from_oserror(
                exc, f"asking for the events of job {f58(job.id)}"
            ) from None

    def _hold_for_recovery(self, job):
        # Still reading the eventlog: keep clean from being posted until
        # we know which holds this job has.
        if not job.recovery.epilog:
            self._post_start(job.id, RECOVERY_DESCRIPTION)
            job.recovery.epilog = True

    def _post_start(self, jobid, description, timeout=None):
        try:
            self.context.port.epilog_start(jobid, description, timeout)
        except OSError as exc:
            raise GateError.from_oserror(
                exc, f"posting epilog-start to job {f58(jobid)}"
            ) from None

    def _post_finish(self, jobid, description, status):
        try:
            self.context.port.epilog_finish(jobid, description, status)
        except OSError as exc:
            self._finish_failed(jobid, description, exc)

    def _finish_failed(self, jobid, description, exc):
        self.context.port.log(
            syslog.LOG_ERR, f"{f58(jobid)}: epilog-finish {description}: {exc}"
        )

    def _raise(self, jobid, hold, status, reason, note=None):
        if note is None:
            note = self.failure_note(hold, status, reason)
        try:
            self.context.port.raise_exception(jobid, note)
        except OSError as exc:
            self.context.port.log(
                syslog.LOG_ERR, f"{f58(jobid)}: raising exception: {exc}"
            )
