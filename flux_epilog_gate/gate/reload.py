"""Reload into the same job-manager: the gate outlives its plugin
instance (see :meth:`~flux_epilog_gate.gate.Gate.attach`); the old one
suspends it, the new one retracks each job and resumes it."""

from .holds import ACTIVE


class Reload:
    """Part of :class:`~flux_epilog_gate.gate.Gate`: going from one plugin
    instance to the next."""

    def suspend(self):
        """The plugin is going away: send what is queued (its requests
        are answered as not confirmed), stop every timer."""
        self.depend.flush()
        self.holdlog.suspend()
        for job in self.jobs.values():
            for hold in job.holds.values():
                self._stop_timer(hold)

    def retrack(self, jobid, state):
        """job.new for a job the gate already knows, after a reload.

        Return True if the job's eventlog must be read (again): the
        previous plugin instance was still recovering it."""
        job = self.jobs.get(jobid)
        if job is None:
            if jobid in self.replayed_progress:
                self.port.track(jobid, events=False)
            return False
        self.port.track(jobid)
        if job.recovering:
            # This plugin instance must be told of the job's entry to RUN
            # too, to keep its start back until the eventlog is read.
            self.prolog.recovering(job)
            return True
        self.prolog.recovered(job, state)
        self.depend.recovered(job, state)
        if not job.at_point and self._past_point(job, state):
            self._reach_point(job)
        return False

    def resume(self, seen):
        """After a reload: jobs not ``seen`` went inactive meanwhile; the
        others' timeouts carry on from when their holds became active."""
        for jobid in [jobid for jobid in self.jobs if jobid not in seen]:
            self.on_inactive(jobid)
        for jobid in [jobid for jobid in self.replayed_progress if jobid not in seen]:
            del self.replayed_progress[jobid]
        for job in self.jobs.values():
            for hold in job.holds.values():
                if hold.state == ACTIVE:
                    self._arm_timer(hold)
