"""The gate's record of each job it holds, what it remembers of holds
that are gone, and which jobs the job-manager sends it callbacks for."""

from collections import OrderedDict

#: The annotation of a job whose annotation the gate has not set (since
#: it was loaded).
NOT_ANNOTATED = object()


class JobRecovery:
    """What the gate keeps of a job for its recovery (:attr:`Job.recovery`),
    apart from the job: nearly no job is being recovered, so a job's
    record carries one slot for all of it.

    ``active``: the job's holds are being recovered (see
    :attr:`Job.recovering`).  ``keeps``: while active, the points keep
    the job back with recovery actions of their own: False for a job the
    hold log does not name, whose active holds the job-manager keeps by
    itself.  The others are the points' recovery actions, which may still
    be open for a moment once ``active`` is false, until each point ends
    its own: ``epilog`` (epilog.py), the gate's epilog action that keeps
    the job from clean is posted and not yet finished; ``prolog_at``
    (prolog.py), when this job-manager posted its own recovery prolog
    action (or None), and ``prologs_open``, how many the eventlog leaves
    open.
    """

    __slots__ = ("active", "keeps", "epilog", "prolog_at", "prologs_open")

    def __init__(self, keeps=True):
        self.active = True
        self.keeps = keeps
        self.epilog = False
        self.prolog_at = None
        self.prologs_open = 0

    def over(self):
        """True if nothing of the recovery is left: the job's record may
        drop this, being then as one never recovered."""
        return (
            not self.active
            and not self.epilog
            and self.prolog_at is None
            and self.prologs_open == 0
        )


class Job:
    """The gate's record of one job that has holds (or is being recovered).

    ``recovery`` is its :class:`JobRecovery` from when its recovery
    begins until nothing of it is left, else None (as for nearly every
    job): paths that every held job takes test ``job.recovery is not None
    and job.recovery.active`` themselves rather than call the
    :attr:`recovering` property.
    """

    __slots__ = (
        "id",
        "userid",
        "holds",
        "at_point",
        "annotation",
        "start_held",
        "recovery",
    )

    def __init__(self, jobid, userid):
        self.id = jobid
        self.userid = userid
        self.holds = {}
        # The epilog point's (epilog.py): the job is at its epilog point.
        self.at_point = False
        # The annotations' (annotations.py): what the job's annotation is.
        self.annotation = NOT_ANNOTATED
        # The prolog point's (prolog.py): one of the gate's prolog actions
        # keeps the job's start back.
        self.start_held = False
        # Recovery's (recovery.py), and the points' recovery actions.
        self.recovery = None

    @property
    def recovering(self):
        """True while the job's holds are being recovered."""
        recovery = self.recovery
        return recovery is not None and recovery.active

    def recovery_over(self):
        """Drop the job's :class:`JobRecovery` if nothing of it is left
        (the points call this once their recovery actions are ended)."""
        if self.recovery is not None and self.recovery.over():
            self.recovery = None


class GoneLog:
    """Bounded memory of holds that are gone, so late releases are answered
    ``released: false`` with the reason instead of an error."""

    def __init__(self, limit):
        self.limit = limit
        self._entries = OrderedDict()

    def add(self, jobid, description, reason):
        entries = self._entries
        key = (jobid, description)
        entries[key] = reason
        entries.move_to_end(key)
        # At most one over the limit (resize() keeps to it when the limit
        # changes): this runs for every hold that ends.
        if len(entries) > self.limit:
            entries.popitem(last=False)

    def get(self, jobid, description):
        return self._entries.get((jobid, description))

    def resize(self, limit):
        """Keep ``limit`` entries from now on: forget the oldest beyond."""
        self.limit = limit
        while len(self._entries) > self.limit:
            self._entries.popitem(last=False)

    def discard(self, jobid, description):
        # Called for every new hold, whose key is seldom here: an
        # OrderedDict's pop() with a default parses its arguments by
        # keyword, which costs more than the test.
        key = (jobid, description)
        if key in self._entries:
            del self._entries[key]

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

    def __init__(self, context):
        super().__init__()
        self.context = context
        self.gone = GoneLog(context.config.gone_limit)
        #: Progress events (recovery.PROGRESS_EVENTS) read from the
        #: eventlogs of recovered jobs, by id.
        self.replayed_progress = {}

    def track(self, jobid, userid):
        """A new record for ``jobid``, whose callbacks the gate now gets."""
        job = Job(jobid, userid)
        self[jobid] = job
        self.context.port.track(jobid)
        return job

    def untrack(self, job):
        """Forget ``job`` (it has no holds left) and its callbacks."""
        if self.get(job.id) is job:
            del self[job.id]
            self.context.port.untrack(job.id)
            if job.id in self.replayed_progress:
                # keep on_inactive() coming, so the progress is dropped
                self.context.port.track(job.id)

    def forget(self, jobid):
        """The job is inactive: drop its record (returned, or None) and
        its replayed progress."""
        self.replayed_progress.pop(jobid, None)
        return self.pop(jobid, None)

    def posted(self, job, name):
        """True if event ``name`` is in the job's eventlog: posted since
        this job-manager started, or read from the eventlog on recovery."""
        replayed = self.replayed_progress
        # Empty but after a restart: tested first, the lookup costs more.
        if replayed and name in replayed.get(job.id, ()):
            return True
        return self.context.port.posted(job.id, name)

    def holds(self):
        """Every hold of every job, or None while some job's holds are
        still being recovered (what the hold log's snapshots are made of)."""
        if self.recovering():
            return None
        return [hold for job in self.values() for hold in job.holds.values()]

    def recovering(self):
        """True if some job's holds are being recovered."""
        # Not Job.recovering: a call per job costs more than the test.
        return any(
            job.recovery is not None and job.recovery.active for job in self.values()
        )
