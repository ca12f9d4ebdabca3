"""The epilog point: the moment none of a job's processes can still run
(see README, "The epilog point"), where its pending epilog holds become
active by posting ``epilog-start``; and the job's annotation naming its
active holds."""

import syslog

from ..errors import GateError
from ..jobid import f58
from .holds import ACTIVE, EPILOG, PENDING
from .states import CLEANUP


class EpilogPoint:
    """Part of :class:`~flux_epilog_gate.gate.Gate`: the job-manager
    callbacks that tell where a job is, and what its epilog point does."""

    def on_run(self, jobid):
        """The job entered RUN (only for jobs with prolog holds)."""
        job = self.jobs.get(jobid)
        if job:
            self.prolog.on_run(job)

    def on_cleanup(self, jobid):
        """The job entered CLEANUP."""
        job = self.jobs.get(jobid)
        if job:
            if not job.recovering:
                self.prolog.on_cleanup(job)
                self.depend.on_cleanup(job)
            self._advance(job, CLEANUP)
            if self.shutdown is not None and not job.at_point:
                self.shutdown.entered_cleanup(jobid)

    def on_event(self, jobid, name, state):
        """An event was posted to a tracked job."""
        job = self.jobs.get(jobid)
        if job and name in ("finish", "free") and state == CLEANUP:
            self._advance(job, state)

    def reach_point(self, jobid):
        """Take the job as at its epilog point now, whatever it went
        through (at shutdown, which ends its processes)."""
        job = self.jobs.get(jobid)
        if job is None or job.at_point or job.recovering:
            return
        try:
            self._reach_point(job)
        except GateError as exc:
            self.port.log(syslog.LOG_ERR, f"{f58(jobid)}: {exc.message}")

    def _past_point(self, job, state):
        """True if the job is in CLEANUP and none of its processes can still
        be running (see README, "The epilog point")."""
        if state != CLEANUP:
            return False
        if job.start_held:
            # The gate's own prolog action kept the start request back.
            return True
        if not self._posted(job, "alloc"):
            return True
        if self._posted(job, "finish") or self._posted(job, "free"):
            return True
        if self._posted(job, "start"):
            return False
        # A prolog still open when CLEANUP began means no start was ever
        # requested; otherwise wait for finish, or free as the last resort.
        return self._posted(job, "prolog-start") and not self._posted(
            job, "prolog-finish"
        )

    def _advance(self, job, state):
        if job.recovering:
            self._hold_for_recovery(job)
        elif not job.at_point and self._past_point(job, state):
            self._reach_point(job)

    def _reach_point(self, job):
        job.at_point = True
        for hold in list(job.holds.values()):
            # A pending prolog hold is the prolog side's (dropped when the
            # job enters CLEANUP), a dependency hold the dependency side's:
            # never an epilog.
            if hold.state == PENDING and hold.point == EPILOG:
                self._activate(hold)
        self._annotate(job)

    def _activate(self, hold):
        self._epilog_start(hold.id, hold.description, hold.timeout)
        self._activated(hold)

    def _activated(self, hold):
        """``hold`` is active now (its epilog-start or prolog-start is
        posted)."""
        hold.state = ACTIVE
        hold.t_start = self.port.now()
        self.stats["activated"] += 1
        self._arm_timer(hold)
        self._notify(hold)
        if self.shutdown is not None:
            self.shutdown.activated(hold)
        self.tell("activated", hold)

    def _epilog_start(self, jobid, description, timeout=None):
        try:
            self.port.epilog_start(jobid, description, timeout)
        except OSError as exc:
            raise GateError.from_oserror(
                exc, f"posting epilog-start to job {f58(jobid)}"
            ) from None

    def _annotate(self, job):
        """Keep the job's annotation naming its active holds, what its
        clean waits on (if annotations are on)."""
        if not self.config.annotate:
            return
        active = sorted(d for d, h in job.holds.items() if h.state == ACTIVE)
        text = ",".join(active) or None
        if text == job.annotation:
            return
        job.annotation = text
        try:
            self.port.annotate(job.id, text)
        except OSError as exc:
            self.port.log(syslog.LOG_ERR, f"{f58(job.id)}: annotation: {exc}")
