"""Reload into the same job-manager: the gate outlives its plugin
instance (see :meth:`~flux_epilog_gate.gate.Gate.attach`); the old one
suspends it, the new one retracks each job and resumes it."""

from .holds import ACTIVE


class Reload:
    """Going from one plugin instance to the next.

    Owns nothing of its own.  Calls the jobs, the hold log, the timeouts,
    the lifecycle (timers start again; a job that went inactive
    meanwhile), the hold points (each carries its holds on; the
    dependency point sends the records it holds back) and the port's
    ``track``.  Called by the plugin (``suspend``, at unload) and by the
    loader (``retrack``, ``resume``), through the gate.
    """

    def __init__(
        self, context, jobs, holdlog, timeouts, lifecycle, epilog, prolog, depend
    ):
        self.context = context
        self.jobs = jobs
        self.holdlog = holdlog
        self.timeouts = timeouts
        self.lifecycle = lifecycle
        self.epilog = epilog
        self.prolog = prolog
        self.depend = depend

    def suspend(self):
        """The plugin is going away: send what is queued (its requests
        are answered as not confirmed), stop every timer."""
        self.depend.flush()
        self.prolog.flush()
        self.holdlog.suspend()
        for job in self.jobs.values():
            for hold in job.holds.values():
                self.timeouts.stop(hold)

    def retrack(self, jobid, state):
        """job.new for a job the gate already knows, after a reload.

        Return True if the job's eventlog must be read (again): the
        previous plugin instance was still recovering it."""
        job = self.jobs.get(jobid)
        if job is None:
            if jobid in self.jobs.replayed_progress:
                self.context.port.track(jobid)
            return False
        # Its events too if the epilog point waits on them (recovered()).
        self.context.port.track(jobid)
        if job.recovering:
            # This plugin instance's points keep the job too (the prolog
            # point must be told of its entry to RUN) until the eventlog
            # is read.
            for point in (self.epilog, self.prolog, self.depend):
                point.recovering(job)
            return True
        self.epilog.expect(job, state)
        self.prolog.recovered(job, state)
        self.depend.recovered(job, state)
        if not job.at_point:
            # (A job at its epilog point has no pending epilog hold.)
            self.epilog.recovered(job, state)
        return False

    def resume(self, seen):
        """After a reload: jobs not ``seen`` went inactive meanwhile; the
        others' timeouts carry on from when their holds became active;
        the hold log is written again whole from the holds that are left
        (see :meth:`HoldLog.rewrite
        <flux_epilog_gate.gate.holdlog.HoldLog.rewrite>`)."""
        for jobid in [jobid for jobid in self.jobs if jobid not in seen]:
            self.lifecycle.on_inactive(jobid)
        progress = self.jobs.replayed_progress
        for jobid in [jobid for jobid in progress if jobid not in seen]:
            del progress[jobid]
        for job in self.jobs.values():
            for hold in job.holds.values():
                if hold.state == ACTIVE:
                    self.lifecycle.arm(hold)
        self.holdlog.rewrite()
