"""The gate's record of each job it holds, what it remembers of holds
that are gone, and which jobs the job-manager sends it callbacks for."""

from collections import OrderedDict

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
        "recovery_keeps",
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
        self.recovering = False
        # While recovering, the points keep the job back with recovery
        # actions of their own: False for a job the hold log does not
        # name, whose active holds the job-manager keeps by itself.
        self.recovery_keeps = True
        # The epilog point's (epilog.py): the job is at its epilog point;
        # the gate's own epilog action that keeps the job from clean while
        # its holds are being recovered is posted and not yet finished.
        self.at_point = False
        self.recovery_epilog = False
        # The annotations' (annotations.py): what the job's annotation is.
        self.annotation = NOT_ANNOTATED
        # The prolog point's (prolog.py): one of the gate's prolog actions
        # keeps the job's start back; while recovering, when this
        # job-manager posted its own recovery prolog action (or None), and
        # how many the eventlog leaves open.
        self.start_held = False
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


class JobTable(dict):
    """The gate's record of each job with holds, by id (a dict of
    :class:`Job`), and which jobs the job-manager sends it callbacks for.

    Owns the :class:`Job` records, the :class:`GoneLog` (``gone``) and
    the progress events read from the eventlogs of recovered jobs
    (``replayed_progress``: the port only knows of events posted since
    this job-manager started).  Calls the port's ``track``, ``untrack``
    and ``posted``.  Every part of the gate reads it; the requests, the
    lifecycle and recovery add and remove jobs.
    """

    def __init__(self, port, gone_limit):
        super().__init__()
        self.port = port
        self.gone = GoneLog(gone_limit)
        #: Progress events (recovery.PROGRESS_EVENTS) read from the
        #: eventlogs of recovered jobs, by id.
        self.replayed_progress = {}

    def track(self, jobid, userid):
        """A new record for ``jobid``, whose callbacks the gate now gets."""
        job = Job(jobid, userid)
        self[jobid] = job
        self.port.track(jobid)
        return job

    def untrack(self, job):
        """Forget ``job`` (it has no holds left) and its callbacks."""
        if self.get(job.id) is job:
            del self[job.id]
            self.port.untrack(job.id)
            if job.id in self.replayed_progress:
                # keep on_inactive() coming, so the progress is dropped
                self.port.track(job.id, events=False)

    def forget(self, jobid):
        """The job is inactive: drop its record (returned, or None) and
        its replayed progress."""
        self.replayed_progress.pop(jobid, None)
        return self.pop(jobid, None)

    def posted(self, job, name):
        """True if event ``name`` is in the job's eventlog: posted since
        this job-manager started, or read from the eventlog on recovery."""
        return name in self.replayed_progress.get(job.id, ()) or self.port.posted(
            job.id, name
        )

    def holds(self):
        """Every hold of every job, or None while some job's holds are
        still being recovered (what the hold log's snapshots are made of)."""
        if any(job.recovering for job in self.values()):
            return None
        return [hold for job in self.values() for hold in job.holds.values()]
