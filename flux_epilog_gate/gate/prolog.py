"""Prolog holds: holds that keep a job's *start* back instead of its clean.

A prolog hold is pending until the job enters RUN; in that job-manager
callback, before the job-manager sends the job's start request, the gate
posts ``prolog-start description=D`` (marked as the gate's, with the
hold's timeout), so the start request waits.  Releasing it posts
``prolog-finish description=D status=S`` (marked); the job-manager sends
the start request once no prolog action is left.  The job-manager counts
prolog and epilog actions in one counter and never looks at their
context, so a marked post counts exactly as ``flux_jobtap_prolog_start``
would; what that call also checks (no start request pending, not in
CLEANUP) the gate checks itself: a prolog hold is posted only from the
RUN callback, or while one of the gate's own prolog actions keeps the
start request back.

A non-zero status or a timeout first raises a fatal job exception (so the
job is in CLEANUP before its last prolog action ends and can never
start), then posts ``prolog-finish``.  A job that enters CLEANUP while a
prolog hold is active keeps it until it is released or times out; its
watchers are told (``aborted: true``) so the setup can be abandoned, and
so are the gate's listeners (a plugin of the gate may end it).  A
pending prolog hold of a job that enters CLEANUP is dropped with no
events: the job will never start.

Recovery.  While a job's holds are being recovered, the gate keeps its
start back with its own prolog action
(:data:`~flux_epilog_gate.gate.holds.RECOVERY_DESCRIPTION`), posted
if the job enters RUN meanwhile and finished once its holds are carried
on (:meth:`PrologPoint.recovered`).

Shutdown.  ``shutdown-action=finish`` ends active prolog holds (their
jobs are in RUN: they hold the shutdown).

This module is plain Python: it reaches the job-manager through the
gate's port (``prolog_start``, ``prolog_finish``, ``raise_fatal``,
``want_run``; see :mod:`flux_epilog_gate.gate`).
"""

import errno
import syslog

from ..errors import GateError
from ..jobid import f58
from .depend import AfterBatch
from .holdlog import MARKER
from .holds import (
    ACTIVE,
    PENDING,
    PROLOG,
    RECOVERY_DESCRIPTION,
    Reason,
    exception_of,
)
from .logentries import hold_entry
from .points import HoldPoint, replay_start
from .states import CLEANUP, RUN

#: The prolog events the gate posts, marked as its own.
PROLOG_EVENTS = frozenset(("prolog-start", "prolog-finish"))


def is_prolog(hold):
    return hold.point == PROLOG


def has_active_prolog(job):
    """True if one of the job's prolog holds is active."""
    # A loop, not a generator: this runs at every prolog release.
    for hold in job.holds.values():
        if hold.point == PROLOG and hold.state == ACTIVE:
            return True
    return False


class PrologPoint(HoldPoint):
    """The prolog point (see module docstring and
    :class:`~flux_epilog_gate.gate.points.HoldPoint`).

    Owns each job's ``start_held`` and its recovery's ``prolog_at`` and
    ``prologs_open``.  Also tells the watchers of a hold whose
    job will never start.  Called by the gate's job-manager callbacks
    (``on_run``, ``on_cleanup``), the requests, the lifecycle
    (``finish``), recovery and reload.
    """

    name = PROLOG
    events = PROLOG_EVENTS
    ends_at_shutdown = True
    label = "prolog hold"

    def __init__(self, context, jobs, lifecycle, holdlog, watchers):
        super().__init__(context, jobs, lifecycle, holdlog)
        self.watchers = watchers
        #: Descriptions of the prolog holds that end with status 1 when
        #: their job will never start, rather than wait for a release (a
        #: plugin of the gate's own holds, see Gate.end_when_aborted).
        self.ends_aborted = set()
        # Pending holds dropped at their job's entry to CLEANUP whose
        # cancel is not recorded yet (see _cancel_later).
        self._uncancelled = AfterBatch(context, self._cancel_all)

    # Requests

    def check(self, job, jobid, state):
        """Raise GateError if a prolog hold on ``jobid`` (in ``state``,
        its record ``job`` or None) comes too late to keep its start back."""
        if state < RUN:
            return
        if (
            state == RUN
            and job is not None
            and (
                job.start_held or (job.recovery is not None and job.recovery.prolog_at)
            )
        ):
            return
        if state == RUN:
            why = "is in RUN: its start request has been sent or may be at any moment"
        else:
            why = "is in CLEANUP: it will never start"
        raise GateError(
            errno.EINVAL, f"too late for a prolog hold: job {f58(jobid)} {why}"
        )

    def place(self, job, hold, state):
        """A new prolog hold ``hold`` on ``job``: active at once if the
        gate already keeps the job's start back, else pending until RUN."""
        if (
            state == RUN
            and job.start_held
            and (job.recovery is None or not job.recovery.active)
        ):
            self.activate(job, hold)
        else:
            self._want_run(job)

    # Job-manager callbacks

    def on_run(self, job):
        """The job entered RUN: its start request is sent right after this
        callback unless a prolog action is queued by then."""
        recovery = job.recovery
        if recovery is not None and recovery.active:
            if recovery.keeps:
                self._hold_for_recovery(job)
            return
        for hold in list(job.holds.values()):
            if hold.point == PROLOG and hold.state == PENDING:
                try:
                    self.activate(job, hold)
                except GateError as exc:
                    self._not_held(job, hold, exc)

    def on_cleanup(self, job, call=None):
        """The job entered CLEANUP (before its epilog point is looked for):
        pending prolog holds are dropped, active ones are aborted (those
        of ``ends_aborted`` end, with the job's fatal exception read from
        ``call``, see ``Gate.on_cleanup``)."""
        if job.recovery is not None and job.recovery.active:
            # recovered() does this once the holds are known.
            return
        for hold in list(job.holds.values()):
            if not is_prolog(hold):
                continue
            if hold.state == PENDING:
                # Not recorded at once: a synced record would run ahead of
                # the job-manager's unsynced exception event, and a crash
                # that undoes the exception must find the hold again.
                self._drop(job, hold, Reason.NEVER_STARTED, record=False)
                self._cancel_later(hold)
            elif hold.description in self.ends_aborted:
                self._end_aborted(job, hold, call)
            elif not hold.aborted:
                hold.aborted = True
                self.watchers.notify(hold)

    def finish(self, job, hold, status, reason, note=None, raised=False):
        """End active prolog hold ``hold`` (already off the job); ``note``
        replaces the exception's usual note; with ``raised`` the releaser
        raised the fatal exception itself."""
        if status != 0 and not raised:
            # Before prolog-finish: once the job's last prolog action is
            # finished, the start request goes out at once.
            self._raise(job, hold, status, reason, note)
        # A failed prolog hold's job never starts (a fatal exception came
        # first): its start stays the gate's, so its epilog point is its
        # entry to CLEANUP, as for a job whose prolog is still open.
        job.start_held = has_active_prolog(job) or (status != 0 and job.start_held)
        try:
            self.context.port.prolog_finish(job.id, hold.description, status)
        except OSError as exc:
            self.context.port.log(
                syslog.LOG_ERR,
                f"{f58(job.id)}: prolog-finish {hold.description}: {exc}",
            )

    # Recovery and reload

    def recovering(self, job):
        """``job``'s holds are being recovered: should it enter RUN
        meanwhile, keep its start back (see :meth:`on_run`)."""
        try:
            self.context.port.want_run(job.id)
        except OSError as exc:
            self.context.port.log(syslog.LOG_ERR, f"{f58(job.id)}: tracking: {exc}")

    def replay(self, job, timestamp, name, context, released):
        """One ``prolog-*`` entry of a recovering job's eventlog."""
        description = context.get("description")
        if name == "prolog-finish" and context.get(MARKER) and description in released:
            # The finish of a released prolog hold.
            del released[description]
            return
        if description == RECOVERY_DESCRIPTION:
            recovery = job.recovery
            if timestamp < (recovery.prolog_at or float("inf")):
                recovery.prologs_open += 1 if name == "prolog-start" else -1
            return
        if not context.get(MARKER):
            return
        if name == "prolog-start":
            replay_start(job, timestamp, context, PROLOG)
        elif name == "prolog-finish":
            hold = job.holds.get(description)
            if hold is not None and is_prolog(hold):
                del job.holds[description]
                self.jobs.gone.add(job.id, description, Reason.RELEASED)

    def recovered(self, job, state):
        """A job's holds are known again (after a restart or a reload) and
        it is in ``state``: carry its prolog holds on from there."""
        recovery = job.recovery
        job.start_held = has_active_prolog(job) or bool(
            recovery is not None and (recovery.prolog_at or recovery.prologs_open > 0)
        )
        for hold in list(job.holds.values()):
            if not is_prolog(hold):
                continue
            if hold.state == ACTIVE and state == CLEANUP:
                if hold.description in self.ends_aborted:
                    self._end_aborted(job, hold)
                else:
                    hold.aborted = True
            elif hold.state == PENDING and state == CLEANUP:
                # Not recorded, as in on_cleanup: the exception may have
                # come while the eventlog was read, and not be durable.
                self._drop(job, hold, Reason.NEVER_STARTED, record=False)
            elif hold.state == PENDING and state == RUN:
                if job.start_held:
                    self.activate(job, hold)
                else:
                    self._drop(job, hold, Reason.STARTED_UNGATED)
            elif hold.state == PENDING:
                self._want_run(job)
        self.end_recovery(job)

    def end_recovery(self, job):
        """End the gate's own prolog actions of a job whose holds are
        known again (or could not be)."""
        count = 0
        recovery = job.recovery
        if recovery is not None:
            count = max(0, recovery.prologs_open) + (1 if recovery.prolog_at else 0)
            recovery.prolog_at = None
            recovery.prologs_open = 0
            job.recovery_over()
        job.start_held = has_active_prolog(job)
        for _ in range(count):
            try:
                self.context.port.prolog_finish(job.id, RECOVERY_DESCRIPTION, 0)
            except OSError as exc:
                self.context.port.log(
                    syslog.LOG_ERR, f"{f58(job.id)}: recovery prolog-finish: {exc}"
                )

    # Internals

    def activate(self, job, hold):
        try:
            self.context.port.prolog_start(hold.id, hold.description, hold.timeout)
        except OSError as exc:
            raise GateError.from_oserror(
                exc, f"posting prolog-start to job {f58(hold.id)}"
            ) from None
        job.start_held = True
        self.lifecycle.activated(hold)

    def _not_held(self, job, hold, exc):
        # The start cannot be kept back for this hold: the job must not
        # start without its setup, so fail it (and say why).
        self.context.port.log(syslog.LOG_ERR, f"{f58(job.id)}: {exc.message}")
        self._drop(job, hold, Reason.PROLOG_START_FAILED)
        try:
            self.context.port.raise_fatal(
                job.id,
                f"epilog-gate: prolog hold {hold.description} could not hold "
                f"the start: {exc.message}",
            )
        except OSError as error:
            self.context.port.log(
                syslog.LOG_ERR, f"{f58(job.id)}: raising exception: {error}"
            )

    def _end_aborted(self, job, hold, call=None):
        """End active ``hold``, whose job entered CLEANUP before it
        started, with status 1; the job's fatal exception is its own, and
        is recorded with the end if ``call`` has it (a crash that loses
        it then has it raised again, see ``Lifecycle.finish_released``)."""
        self.context.port.log(
            syslog.LOG_INFO,
            f"{f58(job.id)}: prolog hold {hold.description} ended: "
            "the job will never start",
        )
        context = None
        if call is not None:
            context = self.context.port.cleanup_exception(call)
        raised = exception_of(context) if context is not None else True
        self.lifecycle.finish(job, hold, 1, Reason.NEVER_STARTED, raised=raised)

    def _want_run(self, job):
        try:
            self.context.port.want_run(job.id)
        except OSError as exc:
            raise GateError.from_oserror(exc, f"tracking job {f58(job.id)}") from None

    def _cancel_later(self, hold):
        """Record the cancel of pending ``hold``, dropped as its job
        entered CLEANUP, once the job-manager has sent the event that
        took it there to the KVS (:data:`~.depend.BATCH_WAIT`): the synced
        commit of the cancel then makes that event durable too.  Until
        then snapshots keep the hold's entry: one that left it out would
        lose the hold to a crash that undoes the event."""
        self.holdlog.keep_unsettled(hold.id, {hold.description: hold_entry(hold)})
        self._uncancelled.add(hold)

    def _cancel_all(self, holds):
        with self.holdlog.together():
            for hold in holds:
                self.holdlog.forget_unsettled(hold.id, hold.description)
                self.holdlog.cancel(hold)

    def flush(self):
        """Record now every cancel still waiting (the plugin goes away)."""
        self._uncancelled.flush()

    def _drop(self, job, hold, reason, record=True):
        # A pending hold: nothing was posted for it, so nothing is.
        self.lifecycle.drop(job, hold, reason, record)

    def _raise(self, job, hold, status, reason, note=None):
        if note is None:
            note = self.failure_note(hold, status, reason)
        try:
            self.context.port.raise_fatal(job.id, note)
        except OSError as exc:
            self.context.port.log(
                syslog.LOG_ERR, f"{f58(job.id)}: raising exception: {exc}"
            )

    def _hold_for_recovery(self, job):
        # Still reading the eventlog: keep the start request back until we
        # know which prolog holds this job has.
        if not job.recovery.prolog_at:
            # Read before the post: the eventlog read may return our own
            # prolog-start, and replay must see it as ours (not older).
            now = self.context.port.now()
            try:
                self.context.port.prolog_start(job.id, RECOVERY_DESCRIPTION, None)
            except OSError as exc:
                self.context.port.log(
                    syslog.LOG_ERR, f"{f58(job.id)}: recovery prolog-start: {exc}"
                )
                return
            job.recovery.prolog_at = now
