"""A hold's life after its point: it becomes active, then ends.

A hold ends by a release, a timeout, a withdrawal (its record could not
be committed), the shutdown, or its job going inactive.  An active one
that ends has its point post what ends it (``epilog-finish``,
``prolog-finish``, ``dependency-remove``, after a job exception if it
failed); a pending one is only cancelled.  Whatever ends it, this is
where the hold leaves its job, its timer stops, the gate remembers why
it is gone, the counters count it and the hold log records it.
"""

import syslog

from ..jobid import f58
from .holds import (
    ACTIVE,
    GONE,
    LISTENER_FAILED_STATUS,
    PENDING,
    PROLOG,
    TIMED_OUT,
    TIMEOUT_STATUS,
    Reason,
)


class Lifecycle:
    """Makes holds active and ends them.

    Owns the transitions of a hold's ``state``.  Calls the jobs
    (:class:`~flux_epilog_gate.gate.jobs.JobTable`), the timeouts, the
    watchers, the annotations, the counters, the hold log, the losses
    and, to post what ends an active hold, its point (``points``, by
    name: the points call this object back to make their holds
    active, so the gate hands it their mapping once they are made).
    Tells the in-process listeners of each activation.  Called by the
    points, the requests (release, withdrawal), the timeouts (expiry),
    recovery, reload and the shutdown (through the gate's
    :meth:`~flux_epilog_gate.gate.Gate.end`).
    """

    def __init__(
        self,
        context,
        jobs,
        holdlog,
        timeouts,
        watchers,
        annotations,
        stats,
        losses,
        listeners,
        points,
    ):
        self.context = context
        self.jobs = jobs
        self.holdlog = holdlog
        self.timeouts = timeouts
        self.watchers = watchers
        self.annotations = annotations
        self.stats = stats
        self.losses = losses
        self.listeners = listeners
        #: The hold points by name (:class:`~flux_epilog_gate.gate.points.HoldPoint`).
        self.points = points

    # Becoming active

    def activated(self, hold):
        """``hold`` is active now: its point posted its start event."""
        hold.state = ACTIVE
        hold.t_start = self.context.port.now()
        self.stats["activated"] += 1
        if hold.timeout is not None:
            self.arm(hold)
        self.watchers.notify(hold)
        if self.context.shutdown is not None:
            self.context.shutdown.activated(hold)
        if self.listeners:
            failed = self.listeners.tell("activated", hold)
            if failed:
                self._listener_failed(hold, *failed[0])

    def _listener_failed(self, hold, listener, exc, again=True):
        """A listener raised on ``hold``'s activation: what it was to start
        will never end the hold, so end it now (status 1, a job exception
        naming the cause, a line at level error)."""
        job = self.jobs.get(hold.id)
        if job is None or hold.state != ACTIVE:
            return
        if job.holds.get(hold.description) is not hold:
            if again:
                # Made active as it was placed: ended once it is on its job.
                self.context.port.timer(
                    0.0, lambda: self._listener_failed(hold, listener, exc, False)
                )
            return
        cause = f"{type(listener).__name__} failed: {type(exc).__name__}: {exc}"
        label = self.points[hold.point].label
        self.context.port.log(
            syslog.LOG_ERR,
            f"{f58(hold.id)}: {label} {hold.description} ended with status "
            f"{LISTENER_FAILED_STATUS}: {cause}",
        )
        note = f"epilog-gate: {label} {hold.description} ended: {cause}"
        self.finish(
            job, hold, LISTENER_FAILED_STATUS, Reason.LISTENER_FAILED, note=note
        )

    def arm(self, hold):
        """Start active ``hold``'s timeout, counted from its activation."""
        self.timeouts.arm(hold, self.expire)

    def expire(self, hold):
        """A hold's timeout expired."""
        job = self.jobs.get(hold.id)
        if job is None or job.holds.get(hold.description) is not hold:
            return
        hold.timer = None
        self.finish(job, hold, TIMEOUT_STATUS, Reason.TIMED_OUT)

    # Ending

    def finish(self, job, hold, status, reason, done=None, note=None, raised=False):
        """End ``hold`` of ``job`` for ``reason``; ``done(error)`` once its
        record is durable; ``note`` replaces the job exception's usual
        note; with ``raised``, a failure's exception is the releaser's:
        given as ``{type, severity, note}``, it is recorded with the end,
        so that a crash that loses it has it raised again (see
        :meth:`finish_released`)."""
        # Forget the hold before posting: its end may let the job go
        # inactive synchronously, calling back into on_inactive().
        del job.holds[hold.description]
        was, hold.state = hold.state, GONE
        if hold.timer is not None:
            self.timeouts.stop(hold)
        self.jobs.gone.add(job.id, hold.description, reason)
        if not job.holds and (job.recovery is None or not job.recovery.active):
            self.jobs.untrack(job)
        if was == PENDING:
            self.stats["cancelled"] += 1
            self.holdlog.cancel(hold, done)
            return
        self.stats.finished(reason, status)
        # Before the finish, which may end the job.  (Tested here: the
        # call costs more than the test, and most sites do not annotate.)
        if self.context.config.annotate:
            self.annotations.update(job)
        self.points[hold.point].finish(job, hold, status, reason, note, raised)
        # A timeout needs no record: after a crash it expires again.
        if reason != TIMED_OUT:
            exception = raised if isinstance(raised, dict) else None
            self.holdlog.release(hold, status, done, exception)

    def end(self, hold, status, reason, note):
        """Finish an active hold on the gate's own account (at shutdown),
        with a job exception whose ``note`` names it."""
        job = self.jobs.get(hold.id)
        if job is None or job.holds.get(hold.description) is not hold:
            return
        self.finish(job, hold, status, reason, note=note)

    def withdraw(self, hold):
        """Undo a hold whose record could not be committed (if it is still
        there): its request is answered with an error."""
        job = self.jobs.get(hold.id)
        if job is None or job.holds.get(hold.description) is not hold:
            return
        self.context.port.log(
            syslog.LOG_ERR,
            f"{f58(hold.id)}: hold {hold.description} withdrawn: "
            "its record could not be committed",
        )
        self.finish(job, hold, 0, Reason.WITHDRAWN)

    def drop(self, job, hold, reason, record=True):
        """Take ``hold`` off ``job`` with nothing posted: its job will
        never reach its point (or has left it).  Recorded as cancelled
        unless ``record`` is false."""
        del job.holds[hold.description]
        was, hold.state = hold.state, GONE
        self.timeouts.stop(hold)
        self.jobs.gone.add(job.id, hold.description, reason)
        self.stats["cancelled"] += 1
        if record:
            self.holdlog.cancel(hold)
        if was == ACTIVE:
            self.annotations.update(job)
        if not job.holds and (job.recovery is None or not job.recovery.active):
            self.jobs.untrack(job)

    def finish_released(
        self, job, hold, status, exception=None, raised=(), fatal=False
    ):
        """Post the end (and exception) of an acknowledged release that a
        crash kept out of the job's eventlog (``hold`` is off the job).
        ``exception``: the one its releaser raised with it, as recorded
        (``{type, severity, note}``), raised again unless ``raised``, the
        ``(type, note)`` of the job's exceptions in its eventlog, has it:
        the hold ends as it did, never with the gate's own exception.
        ``fatal``: the eventlog has a fatal exception, which stands for
        a failed prolog hold's (its job will never start)."""
        self.context.port.log(
            syslog.LOG_INFO,
            f"{f58(job.id)}: finishing hold {hold.description}, released "
            "before the restart",
        )
        hold.state = GONE
        self.stats.finished(Reason.RELEASED, status)
        own = exception or False
        if exception is not None and status != 0:
            if (exception["type"], exception["note"]) not in raised:
                self._raise_again(job, exception)
        elif status != 0 and hold.point == PROLOG and fatal:
            own = True
        point = self.points[hold.point]
        point.finish(job, hold, status, Reason.RELEASED, raised=own)
        # Recorded again, so that snapshots keep it while this end is not
        # yet checkpointed.
        self.holdlog.release(hold, status, exception=exception)

    def _raise_again(self, job, exception):
        """Raise the recorded ``exception`` of a release that a crash lost
        with it."""
        try:
            self.context.port.raise_job_exception(
                job.id, exception["type"], exception["severity"], exception["note"]
            )
        except OSError as exc:
            self.context.port.log(
                syslog.LOG_ERR,
                f"{f58(job.id)}: raising {exception['type']} again: {exc}",
            )

    def on_inactive(self, jobid):
        """The job is inactive: whatever it still holds is gone."""
        job = self.jobs.get(jobid)
        if job is not None and job.recovery is not None and job.recovery.active:
            # Its holds are not known yet: end_recovery() finds the job
            # inactive and reports what it lost.
            return
        self.jobs.forget(jobid)
        if job is None:
            return
        lost = self.losses.inactive(job)
        for hold in job.holds.values():
            hold.state = GONE
            self.timeouts.stop(hold)
            if hold not in lost:
                self.jobs.gone.add(jobid, hold.description, Reason.JOB_INACTIVE)
