"""Hold points: where a hold keeps its job, each an object of one shape.

A hold keeps its job at one of three points: before its clean
(:class:`~flux_epilog_gate.gate.epilog.EpilogPoint`), before its start
(:class:`~flux_epilog_gate.gate.prolog.PrologPoint`) or in DEPEND
(:class:`~flux_epilog_gate.gate.depend.DependPoint`).  Each is a
:class:`HoldPoint`, and the rest of the gate reaches a point only
through this protocol, so the three read side by side:

=====================================  =====================================
method or attribute                    who calls it: what it does
=====================================  =====================================
``check(job, jobid, state)``           requests: refuse (GateError) a new
                                       hold that comes too late
``place(job, hold, state)``            requests: a new hold, active at once
                                       or pending until the point
``record(hold, callback)``             requests: put a new hold in the hold
                                       log
``activate(job, hold)``                the point itself: post the start
                                       event, then
                                       :meth:`Lifecycle.activated`
``finish(job, hold, status, reason,    the lifecycle: post what ends an
note, raised)``                        active hold (already off its job):
                                       a release, a timeout
                                       (``TIMEOUT_STATUS``), a shutdown
``on_cleanup(job)``                    the gate: the job entered CLEANUP
``recovering(job)``                    recovery: the job's holds are being
                                       read back: keep it at this point
                                       meanwhile
``replay(job, timestamp, name,         recovery: one of :attr:`events` (or
context, released)``                   the point's own recovery action)
                                       read from the job's eventlog
``recovered(job, state)``              recovery and reload: the job's holds
                                       are known again and it is in
                                       ``state``: carry them on from there
``end_recovery(job)``                  recovery: end the point's own
                                       recovery action
``ends_at_shutdown``                   shutdown: whether
                                       ``shutdown-action=finish`` ends the
                                       point's active holds
=====================================  =====================================

A timeout is the same at every point: the hold's timer
(:class:`~flux_epilog_gate.gate.timeouts.Timeouts`, armed by the
lifecycle when the hold becomes active) finishes it with
``TIMEOUT_STATUS`` and :attr:`Reason.TIMED_OUT`, and the point's
``finish`` posts what a failure posts there.
"""

from .holds import ACTIVE, EPILOG, POINTS, Hold, Reason


class HoldPoint:
    """A place where holds keep their job: the protocol (see module
    docstring) and what every point shares.

    Each point is made with the port, the jobs
    (:class:`~flux_epilog_gate.gate.jobs.JobTable`), the lifecycle
    (:class:`~flux_epilog_gate.gate.lifecycle.Lifecycle`, which makes
    its holds active and ends them) and the hold log.
    """

    #: The point's name (a :class:`~flux_epilog_gate.gate.holds.Point`).
    name = None
    #: The job events the point posts, marked as the gate's.
    events = frozenset()
    #: Whether ``shutdown-action=finish`` ends its active holds.
    ends_at_shutdown = True
    #: What the point's holds are called in job exceptions.
    label = "hold"

    def __init__(self, context, jobs, lifecycle, holdlog):
        self.context = context
        self.jobs = jobs
        self.lifecycle = lifecycle
        self.holdlog = holdlog

    def check(self, job, jobid, state):
        """Raise GateError if a new hold on ``jobid`` (in ``state``, its
        record ``job`` or None) comes too late for this point."""

    def place(self, job, hold, state):
        """A new hold on ``job``: make it active now, or leave it pending."""
        raise NotImplementedError

    def record(self, hold, callback):
        """Record new ``hold`` in the hold log; ``callback(error)`` once
        durable."""
        self.holdlog.hold(hold, callback)

    def activate(self, job, hold):
        """Post the start event of ``hold``; raise GateError if it cannot
        be posted."""
        raise NotImplementedError

    def finish(self, job, hold, status, reason, note=None, raised=False):
        """Post what ends active ``hold`` (already off ``job``); ``note``
        replaces the usual note of the job exception a failure raises;
        with ``raised``, the releaser raised that exception itself."""
        raise NotImplementedError

    def on_cleanup(self, job):
        """The job entered CLEANUP."""

    def recovering(self, job):
        """``job``'s holds are being read back from its eventlog."""

    def replay(self, job, timestamp, name, context, released):
        """One of :attr:`events` from a recovering job's eventlog;
        ``released`` maps released holds (by description) whose end is
        not seen yet to ``(hold, status, exception)``."""

    def recovered(self, job, state):
        """``job``'s holds are known again and it is in ``state``."""

    def end_recovery(self, job):
        """End the point's own action that kept ``job`` while its holds
        were read back."""

    def failure_note(self, hold, status, reason):
        """The note of the job exception a failed or timed-out hold raises."""
        what = f"epilog-gate: {self.label} {hold.description}"
        if reason == Reason.TIMED_OUT:
            # Say how long it really was active: a hold that expired while
            # the instance was down ends later than its timeout.
            active = max(hold.timeout, self.context.port.now() - hold.t_start)
            return f"{what} timed out after {active:.1f}s (timeout {hold.timeout:g}s)"
        return f"{what} {reason} with status {status}"


def hold_from_entry(job, timestamp, context, point=None):
    """The hold a recorded entry (or a marked start event) names, made if
    ``job`` lacks it; ``point`` None: the entry's, else epilog."""
    description = context["description"]
    if point is None:
        point = context.get("point", EPILOG)
        point = point if point in POINTS else EPILOG
    if description not in job.holds:
        job.holds[description] = Hold(
            job.id,
            description,
            job.userid,
            timestamp,
            context.get("timeout"),
            point,
        )
    return job.holds[description]


def replay_start(job, timestamp, context, point=None):
    """A marked start event (``epilog-start``, ``prolog-start``,
    ``dependency-add``): its hold was active from ``timestamp``."""
    # A hold that became active before its pending record was written
    # is known from its marked start alone.
    hold = hold_from_entry(job, timestamp, context, point)
    hold.state = ACTIVE
    hold.t_start = timestamp
    return hold
