"""Recovery: a new job-manager (after a restart) or a first load rebuilds
a job's holds from the hold log and the job's eventlog, merged in time
order, and carries on where the previous one left off.

While the eventlog is being read, the gate keeps the job from clean with
its own epilog action (:data:`~flux_epilog_gate.gate.holds.RECOVERY_DESCRIPTION`).
"""

import syslog

from ..jobid import f58
from .depend import DEPEND_EVENTS
from .holdlog import MARKER
from .holds import (
    ACTIVE,
    CANCEL_EVENT,
    EPILOG,
    GONE,
    HOLD_EVENT,
    POINTS,
    RECOVERY_DESCRIPTION,
    RELEASE_EVENT,
    Hold,
    Reason,
)
from .states import CLEANUP, INACTIVE, RUN

#: The epilog events the gate posts, marked as its own (holdlog.MARKER).
EPILOG_EVENTS = frozenset(("epilog-start", "epilog-finish"))

#: Events that tell where a job is on its way to the epilog point.
PROGRESS_EVENTS = frozenset(
    ("alloc", "start", "finish", "free", "prolog-start", "prolog-finish")
)


class Recovery:
    """Part of :class:`~flux_epilog_gate.gate.Gate`: rebuilding holds from
    the eventlog."""

    def begin_recovery(self, jobid, userid):
        """A job whose holds will be known once its eventlog is read."""
        job = self.jobs.get(jobid) or self._track(jobid, userid)
        job.recovering = True
        self.prolog.recovering(job)

    def end_recovery(self, jobid, events):
        """Rebuild a job's holds from its eventlog ``events`` (a list of
        ``(timestamp, name, context)``) and carry on where it left off."""
        job = self.jobs.get(jobid)
        if job is None or not job.recovering:
            return
        try:
            state, _ = self.port.job_info(jobid)
        except OSError:
            state = INACTIVE
        seen, unfinished = self._rebuild(job, events)
        if state in (RUN, CLEANUP) and seen:
            self.replayed_progress[jobid] = seen
        if state == INACTIVE:
            self.on_inactive(jobid)
            return
        self._carry_on(job, state, unfinished)

    def _rebuild(self, job, events):
        """Replace the job's holds by those ``events`` leave, keeping what
        this job-manager did meanwhile; return what :meth:`_replay` does."""
        # What this job-manager did while the eventlog was being read is
        # not necessarily in ``events``: keep it.
        epilog_posted, held_meanwhile = job.recovery_epilog, job.holds
        job.holds = {}
        seen, unfinished = self._replay(job, events)
        job.recovery_epilog = job.recovery_epilog or epilog_posted
        for description, hold in held_meanwhile.items():
            if description not in job.holds:
                job.holds[description] = hold
                self.gone.discard(job.id, description)
        job.recovering = False
        return seen, unfinished

    def abandon_recovery(self, jobid):
        """Recovering a job failed: carry on with what is known of it, and
        let it go on (its recovery actions end)."""
        job = self.jobs.get(jobid)
        if job is None or not job.recovering:
            return
        job.recovering = False
        try:
            state, _ = self.port.job_info(jobid)
        except OSError:
            self.on_inactive(jobid)
            return
        try:
            self._carry_on(job, state, [])
        except Exception as exc:  # noqa: BLE001 - the job must go on
            self.port.log(
                syslog.LOG_ERR,
                f"{f58(jobid)}: carrying on after recovery: "
                f"{type(exc).__name__}: {exc}",
            )
            if job.recovery_epilog:
                job.recovery_epilog = False
                self._post_finish(job.id, RECOVERY_DESCRIPTION, 0)
            self.prolog.abandon_recovery(job)
            if not job.holds:
                self._untrack(job)

    def _carry_on(self, job, state, unfinished):
        """The job's holds are known again: take each where it left off."""
        # No watcher can have been told of these: the job's holds were
        # unknown until now.
        found = [hold for hold in job.holds.values() if hold.state == ACTIVE]
        self.prolog.recovered(job, state)
        self.depend.recovered(job, state)
        for hold in job.holds.values():
            if hold.state == ACTIVE:
                self._arm_timer(hold)
        for hold in found:
            if job.holds.get(hold.description) is hold and hold.state == ACTIVE:
                self._notify(hold)
        if self._past_point(job, state):
            self._reach_point(job)
        # After the pending holds became active: these finishes may let
        # the job go on to clean.
        for hold, status in unfinished:
            self._finish_released(job, hold, status)
        if job.recovery_epilog:
            job.recovery_epilog = False
            self._post_finish(job.id, RECOVERY_DESCRIPTION, 0)
        if not job.holds:
            self._untrack(job)

    def _replay(self, job, events):
        """Replay a job's log entries and eventlog, merged in time order;
        return the progress events seen, and the released holds whose
        ``epilog-finish`` is missing, with their status."""
        seen = set()
        # Released holds awaiting their epilog-finish, by description.
        released = {}
        for timestamp, name, context in events:
            description = context.get("description")
            if (
                name == "prolog-finish"
                and context.get(MARKER)
                and description in released
            ):
                # The finish of a released prolog hold.
                del released[description]
            elif name in ("prolog-start", "prolog-finish"):
                self.prolog.replay(job, timestamp, name, context)
            elif name in DEPEND_EVENTS:
                self.depend.replay(job, timestamp, name, context, released)
            if name in PROGRESS_EVENTS:
                seen.add(name)
            elif name == HOLD_EVENT and description not in job.holds:
                self._hold_from_entry(job, timestamp, context)
            elif name == CANCEL_EVENT:
                job.holds.pop(description, None)
            elif name == RELEASE_EVENT and description in job.holds:
                hold = job.holds.pop(description)
                self.gone.add(job.id, description, Reason.RELEASED)
                # A hold never started needs no epilog-finish.
                if hold.state == ACTIVE:
                    released[description] = (hold, context.get("status", 0))
            elif name in EPILOG_EVENTS and context.get(MARKER):
                # Only the gate's own: another plugin's epilog may have the
                # same description (perilog.so's job-manager.epilog).
                self._replay_epilog(job, timestamp, name, context, released)
        return seen, list(released.values())

    def _replay_epilog(self, job, timestamp, name, context, released):
        description = context["description"]
        if description == RECOVERY_DESCRIPTION:
            job.recovery_epilog = name == "epilog-start"
        elif name == "epilog-start":
            self._replay_start(job, timestamp, context)
        elif description in released:
            # The finish of a released hold (the oldest start).
            del released[description]
        elif description in job.holds:
            del job.holds[description]
            self.gone.add(job.id, description, Reason.RELEASED)

    @staticmethod
    def _hold_from_entry(job, timestamp, context, point=None):
        """The hold a recorded entry names, made if the job lacks it."""
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

    def _replay_start(self, job, timestamp, context, point=None):
        """A marked ``epilog-start`` (or ``prolog-start``): its hold was
        active from ``timestamp``."""
        # A hold that became active before its pending record was written
        # is known from its marked start alone.
        hold = self._hold_from_entry(job, timestamp, context, point)
        hold.state = ACTIVE
        hold.t_start = timestamp
        return hold

    def _hold_for_recovery(self, job):
        # Still reading the eventlog: keep clean from being posted until
        # we know which holds this job has.
        if not job.recovery_epilog:
            self._epilog_start(job.id, RECOVERY_DESCRIPTION)
            job.recovery_epilog = True

    def _finish_released(self, job, hold, status):
        """Post the ``epilog-finish`` (and exception) of an acknowledged
        release that a crash kept out of the job's eventlog."""
        self.port.log(
            syslog.LOG_INFO,
            f"{f58(job.id)}: finishing hold {hold.description}, released "
            "before the restart",
        )
        hold.state = GONE
        self.stats.finished(Reason.RELEASED, status)
        self._post_end(job, hold, status, Reason.RELEASED)
        # Recorded again, so that snapshots keep it while this
        # epilog-finish is not yet checkpointed.
        self.holdlog.release(hold, status)
