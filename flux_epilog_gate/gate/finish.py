"""Finishing holds: a release, a timeout, a withdrawal or the shutdown
ends a hold; an active one posts its ``epilog-finish`` (after a job
exception if it failed), a pending one is only cancelled."""

import syslog

from ..jobid import f58
from .holds import DEPEND, GONE, PENDING, PROLOG, Reason


class Finishing:
    """Part of :class:`~flux_epilog_gate.gate.Gate`: how a hold ends."""

    def end(self, hold, status, reason, note):
        """Finish an active hold on the gate's own account (at shutdown),
        with a job exception whose ``note`` names it."""
        job = self.jobs.get(hold.id)
        if job is None or job.holds.get(hold.description) is not hold:
            return
        self._finish(job, hold, status, reason, note=note)

    def failure_note(self, hold, status, reason):
        """The note of the job exception a failed or timed-out hold raises."""
        point = {PROLOG: "prolog hold", DEPEND: "dependency hold"}.get(
            hold.point, "hold"
        )
        what = f"epilog-gate: {point} {hold.description}"
        if reason == Reason.TIMED_OUT:
            # Say how long it really was active: a hold that expired while
            # the instance was down ends later than its timeout.
            active = max(hold.timeout, self.port.now() - hold.t_start)
            return f"{what} timed out after {active:.1f}s (timeout {hold.timeout:g}s)"
        return f"{what} {reason} with status {status}"

    def _finish(self, job, hold, status, reason, done=None, note=None, raised=False):
        # Forget the hold before posting: epilog-finish may let the job go
        # inactive synchronously, calling back into on_inactive().
        del job.holds[hold.description]
        was, hold.state = hold.state, GONE
        self._stop_timer(hold)
        self.gone.add(job.id, hold.description, reason)
        if not job.holds and not job.recovering:
            self._untrack(job)
        if was == PENDING:
            self.stats["cancelled"] += 1
            self.holdlog.cancel(hold, done)
            return
        self.stats.finished(reason, status)
        # Before the finish, which may end the job.
        self._annotate(job)
        self._post_end(job, hold, status, reason, note, raised)
        # A timeout needs no record: after a crash it expires again.
        if reason != Reason.TIMED_OUT:
            self.holdlog.release(hold, status, done)

    def _post_end(self, job, hold, status, reason, note=None, raised=False):
        """Post what ends an active hold (already off the job); with
        ``raised``, a failure's exception is the releaser's."""
        if hold.point == PROLOG:
            self.prolog.finish(job, hold, status, reason, note, raised)
            return
        if hold.point == DEPEND:
            self.depend.finish(job, hold, status, reason, note, raised)
            return
        if status != 0 and not raised:
            self._raise(job.id, hold, status, reason, note)
        self._post_finish(job.id, hold.description, status)

    def _raise(self, jobid, hold, status, reason, note=None):
        if note is None:
            note = self.failure_note(hold, status, reason)
        try:
            self.port.raise_exception(jobid, note)
        except OSError as exc:
            self.port.log(syslog.LOG_ERR, f"{f58(jobid)}: raising exception: {exc}")

    def _post_finish(self, jobid, description, status):
        try:
            self.port.epilog_finish(jobid, description, status)
        except OSError as exc:
            self.port.log(
                syslog.LOG_ERR, f"{f58(jobid)}: epilog-finish {description}: {exc}"
            )
