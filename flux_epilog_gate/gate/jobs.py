"""The gate's record of each job it holds, what it remembers of holds
that are gone, and which jobs the job-manager sends it callbacks for."""

from collections import OrderedDict

from .holds import GONE, Reason

#: The annotation of a job whose annotation the gate has not set (since
#: it was loaded).
NOT_ANNOTATED = object()


class Job:
    """The gate's record of one job that has holds (or is being recovered)."""

    __slots__ = (
        "id",
        "userid",
        "holds",
        "at_point",
        "recovering",
        "recovery_epilog",
        "annotation",
        "start_held",
        "recovery_prolog_at",
        "recovery_prologs_open",
    )

    def __init__(self, jobid, userid):
        self.id = jobid
        self.userid = userid
        self.holds = {}
        self.at_point = False
        self.recovering = False
        # The gate's own epilog action that keeps the job from clean while
        # its holds are being recovered is posted and not yet finished.
        self.recovery_epilog = False
        self.annotation = NOT_ANNOTATED
        # One of the gate's prolog actions keeps the job's start back.
        self.start_held = False
        # While recovering: when this job-manager posted its own recovery
        # prolog action (or None), and how many the eventlog leaves open.
        self.recovery_prolog_at = None
        self.recovery_prologs_open = 0


class GoneLog:
    """Bounded memory of holds that are gone, so late releases are answered
    ``released: false`` with the reason instead of an error."""

    def __init__(self, limit):
        self.limit = limit
        self._entries = OrderedDict()

    def add(self, jobid, description, reason):
        self._entries[(jobid, description)] = reason
        self._entries.move_to_end((jobid, description))
        self.trim()

    def get(self, jobid, description):
        return self._entries.get((jobid, description))

    def trim(self):
        """Forget the oldest entries beyond the limit."""
        while len(self._entries) > self.limit:
            self._entries.popitem(last=False)

    def discard(self, jobid, description):
        self._entries.pop((jobid, description), None)

    def __len__(self):
        return len(self._entries)


class Tracking:
    """Part of :class:`~flux_epilog_gate.gate.Gate`: the jobs it has a
    record of, and the job-manager callbacks it asks for them."""

    def on_inactive(self, jobid):
        """The job is inactive: whatever it still holds is gone."""
        job = self.jobs.get(jobid)
        if job is not None and job.recovering:
            # Its holds are not known yet: end_recovery() finds the job
            # inactive and reports what it lost.
            return
        self.jobs.pop(jobid, None)
        self.replayed_progress.pop(jobid, None)
        if job is None:
            return
        lost = self.losses.inactive(job)
        for hold in job.holds.values():
            hold.state = GONE
            self._stop_timer(hold)
            if hold not in lost:
                self.gone.add(jobid, hold.description, Reason.JOB_INACTIVE)

    def _track(self, jobid, userid):
        job = Job(jobid, userid)
        self.jobs[jobid] = job
        self.port.track(jobid)
        return job

    def _untrack(self, job):
        if self.jobs.get(job.id) is job:
            del self.jobs[job.id]
            self.port.untrack(job.id)
            if job.id in self.replayed_progress:
                # keep on_inactive() coming, so the progress is dropped
                self.port.track(job.id, events=False)

    def _posted(self, job, name):
        """True if event ``name`` is in the job's eventlog: posted since
        this job-manager started, or read from the eventlog on recovery."""
        return name in self.replayed_progress.get(job.id, ()) or self.port.posted(
            job.id, name
        )
