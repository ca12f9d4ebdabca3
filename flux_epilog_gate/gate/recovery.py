"""Recovery: a new job-manager (after a restart) or a first load rebuilds
a job's holds from the hold log and the job's eventlog, merged in time
order, and carries on where the previous one left off.

While the eventlog is being read, each point keeps the job with an
action of its own (see :meth:`HoldPoint.recovering
<flux_epilog_gate.gate.points.HoldPoint.recovering>`): the epilog point
its clean, the prolog point its start.
"""

import syslog

from ..jobid import f58
from .config import MAX_HOLDS_LIMIT
from .holds import (
    ACTIVE,
    CANCEL_EVENT,
    HOLD_EVENT,
    RELEASE_EVENT,
    Hold,
    Reason,
)
from .jobs import JobRecovery
from .points import hold_from_entry
from .states import CLEANUP, INACTIVE, RUN

#: Events that tell where a job is on its way to the epilog point.
PROGRESS_EVENTS = frozenset(
    ("alloc", "start", "finish", "free", "prolog-start", "prolog-finish")
)


class Recovery:
    """Rebuilds jobs' holds from the hold log and their eventlogs.

    Owns each job's ``recovery`` (a
    :class:`~flux_epilog_gate.gate.jobs.JobRecovery`, whose ``active`` and
    ``keeps`` are its own, the rest the points').  Calls the jobs, the hold points
    (each keeps the job while it is recovered, replays its own events
    and carries its holds on), the lifecycle (timers; finishing what a
    crash left released; a job that went inactive), the watchers, the
    losses (a hold the log gives a job past the most it can have) and
    the port's ``job_info`` and ``log``.  Called by the loader, through
    the gate's ``begin_recovery``, ``end_recovery`` and
    ``abandon_recovery``.
    """

    def __init__(
        self,
        context,
        jobs,
        holdlog,
        lifecycle,
        watchers,
        losses,
        epilog,
        prolog,
        depend,
    ):
        self.context = context
        self.jobs = jobs
        self.holdlog = holdlog
        self.lifecycle = lifecycle
        self.watchers = watchers
        self.losses = losses
        self.epilog = epilog
        self.prolog = prolog
        self.depend = depend
        #: The point whose events an eventlog entry is, by event name.
        self._by_event = {
            name: point for point in (epilog, prolog, depend) for name in point.events
        }

    def begin(self, jobid, userid, keep=True):
        """A job whose holds will be known once its eventlog is read;
        ``keep``: it may have pending holds (the hold log names it), so
        the points keep it back meanwhile."""
        job = self.jobs.get(jobid) or self.jobs.track(jobid, userid)
        if job.recovery is None:
            job.recovery = JobRecovery(keep)
        else:
            # What the points' recovery actions left open stays theirs.
            job.recovery.active = True
            job.recovery.keeps = keep
        for point in (self.epilog, self.prolog, self.depend):
            point.recovering(job)

    def end(self, jobid, events):
        """Rebuild a job's holds from its eventlog ``events`` (a list of
        ``(timestamp, name, context)``) and carry on where it left off."""
        job = self.jobs.get(jobid)
        if job is None or not job.recovering:
            return
        try:
            self._end(job, events)
        finally:
            self.holdlog.recovered()

    def _end(self, job, events):
        jobid = job.id
        try:
            state, _ = self.context.port.job_info(jobid)
        except OSError:
            state = INACTIVE
        seen, unfinished = self._rebuild(job, events)
        exceptions = [context for _, name, context in events if name == "exception"]
        raised = {(c.get("type"), c.get("note")) for c in exceptions}
        fatal = any(c.get("severity") == 0 for c in exceptions)
        if state in (RUN, CLEANUP) and seen:
            self.jobs.replayed_progress[jobid] = seen
        if state == INACTIVE:
            self.lifecycle.on_inactive(jobid)
            return
        self._carry_on(job, state, unfinished, raised, fatal)

    def _rebuild(self, job, events):
        """Replace the job's holds by those ``events`` leave, keeping what
        this job-manager did meanwhile; return what :meth:`_replay` does."""
        # What this job-manager did while the eventlog was being read is
        # not necessarily in ``events``: keep it (its holds, and the epilog
        # point's recovery action, which the replay may see closed by a
        # previous job-manager).
        recovery = job.recovery
        epilog_posted, held_meanwhile = recovery.epilog, job.holds
        job.holds = {}
        seen, unfinished, dropped = self._replay(job, events)
        for timestamp, description in dropped:
            if description not in job.holds:
                hold = Hold(job.id, description, job.userid, timestamp)
                self.losses.beyond_limit(hold, MAX_HOLDS_LIMIT)
        recovery.epilog = recovery.epilog or epilog_posted
        for description, hold in held_meanwhile.items():
            if description not in job.holds:
                job.holds[description] = hold
                self.jobs.gone.discard(job.id, description)
        # Kept until the points end their recovery actions.
        recovery.active = False
        return seen, unfinished

    def abandon(self, jobid):
        """Recovering a job failed: carry on with what is known of it, and
        let it go on (its recovery actions end)."""
        job = self.jobs.get(jobid)
        if job is None or not job.recovering:
            return
        job.recovery.active = False
        try:
            self._abandon(job)
        finally:
            self.holdlog.recovered()

    def _abandon(self, job):
        jobid = job.id
        try:
            state, _ = self.context.port.job_info(jobid)
        except OSError:
            self.lifecycle.on_inactive(jobid)
            return
        try:
            self._carry_on(job, state, [])
        except Exception as exc:  # noqa: BLE001 - the job must go on
            self.context.port.log(
                syslog.LOG_ERR,
                f"{f58(jobid)}: carrying on after recovery: "
                f"{type(exc).__name__}: {exc}",
            )
            self.epilog.end_recovery(job)
            self.prolog.end_recovery(job)
            if not job.holds:
                self.jobs.untrack(job)

    def _carry_on(self, job, state, unfinished, raised=(), fatal=False):
        """The job's holds are known again: take each where it left off
        (``raised``: the ``(type, note)`` of the exceptions its eventlog
        has, ``fatal``: whether one is fatal; see
        :meth:`Lifecycle.finish_released
        <flux_epilog_gate.gate.lifecycle.Lifecycle.finish_released>`)."""
        # No watcher can have been told of these: the job's holds were
        # unknown until now.
        found = [hold for hold in job.holds.values() if hold.state == ACTIVE]
        self.prolog.recovered(job, state)
        self.depend.recovered(job, state)
        for hold in job.holds.values():
            if hold.state == ACTIVE:
                self.lifecycle.arm(hold)
        for hold in found:
            if job.holds.get(hold.description) is hold and hold.state == ACTIVE:
                self.watchers.notify(hold)
        self.epilog.recovered(job, state)
        # After the pending holds became active: these finishes may let
        # the job go on to clean.
        for hold, status, exception in unfinished:
            self.lifecycle.finish_released(job, hold, status, exception, raised, fatal)
        self.epilog.end_recovery(job)
        if not job.holds:
            self.jobs.untrack(job)

    def _replay(self, job, events):
        """Replay a job's log entries and eventlog, merged in time order;
        return the progress events seen, the released holds whose
        ``epilog-finish`` is missing, with their status, and the holds
        left out as past :data:`MAX_HOLDS_LIMIT` (``(timestamp,
        description)``), as the gate that recorded them would have
        refused them."""
        seen = set()
        # Released holds awaiting their epilog-finish, by description.
        released = {}
        dropped = {}
        for timestamp, name, context in events:
            description = context.get("description")
            point = self._by_event.get(name)
            if point is not None:
                point.replay(job, timestamp, name, context, released)
            elif name == HOLD_EVENT and description not in job.holds:
                if len(job.holds) < MAX_HOLDS_LIMIT:
                    hold_from_entry(job, timestamp, context)
                else:
                    dropped.setdefault(description, timestamp)
            elif name in (CANCEL_EVENT, RELEASE_EVENT):
                dropped.pop(description, None)
                self._ended(job, name, description, context, released)
            if name in PROGRESS_EVENTS:
                seen.add(name)
        dropped = [(t, description) for description, t in dropped.items()]
        return seen, list(released.values()), dropped

    def _ended(self, job, name, description, context, released):
        """A cancel or release entry of the hold ``description``."""
        hold = job.holds.pop(description, None)
        if name == CANCEL_EVENT or hold is None:
            return
        self.jobs.gone.add(job.id, description, Reason.RELEASED)
        # A hold never started needs no end.
        if hold.state == ACTIVE:
            released[description] = (
                hold,
                context.get("status", 0),
                context.get("exception"),
            )
