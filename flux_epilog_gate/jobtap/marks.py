"""Which jobs' calls reach a plugin's Python, and which job-manager this
is: the runtime's job marks, wanted and forwarded topics."""

import errno


class Marks:
    """The jobs and topics one plugin instance is sent
    (:attr:`Jobtap.marks <flux_epilog_gate.jobtap.facade.Jobtap.marks>`)."""

    def __init__(self, jobtap):
        self.jobtap = jobtap

    def mark(self, jobid, events=False):
        """Send the job's calls of the plugin's job topics to Python; with
        ``events``, subscribe to its job.event.* calls too."""
        jobtap = self.jobtap
        jobtap.check(jobtap.lib.runtime_mark(jobtap.p, jobid, 1 if events else 0))

    def unmark(self, jobid):
        """Stop sending the job's calls (and events) to Python."""
        jobtap = self.jobtap
        jobtap.lib.runtime_unmark(jobtap.p, jobid)

    def unsubscribe(self, jobid):
        """Stop sending the job's job.event.* calls (its other calls
        still come while it is marked)."""
        jobtap = self.jobtap
        jobtap.lib.runtime_unsubscribe(jobtap.p, jobid)

    def subscribe(self, jobid):
        """Send the job's job.event.* calls (and its other calls of the
        plugin's topics) to Python: :meth:`mark` with events."""
        self.mark(jobid, events=True)

    def watch_exceptions(self, jobid):
        """Mark the job and send its ``job.event.exception`` calls, with no
        subscription to its events: from the instance's ``job-exception``
        events (each exception a request or a plugin raises), a little
        after the exception was posted, with its ``type`` and
        ``severity`` but no ``note``.  Once a job has had a subscriber
        the job-manager packs its arguments for every later event of it,
        asked for or not: a plugin that needs only a job's exceptions
        costs it nothing per event this way.  A job that has had an
        exception already is subscribed instead (its ``job-exception``
        may still be on its way); an event for a job with no exception
        in its eventlog is not the job-manager's, and is dropped.  Until
        the job is unmarked."""
        jobtap = self.jobtap
        jobtap.check(jobtap.lib.runtime_watch_exceptions(jobtap.p, jobid))

    def want(self, jobid, topic):
        """Also send the marked job's calls of topic ``topic``, declared
        ``wanted=True``."""
        jobtap = self.jobtap
        jobtap.check(jobtap.lib.runtime_want(jobtap.p, jobid, jobtap.topics[topic]))

    def forward(self, topic, on=True):
        """Send ``topic`` (declared ``every_job=True``) for every job, or
        (declared ``switched=True``) for marked jobs; or stop."""
        jobtap = self.jobtap
        jobtap.check(
            jobtap.lib.runtime_forward(jobtap.p, jobtap.topics[topic], int(on))
        )

    def seen_jobmanager(self):
        """True if an earlier instance of this plugin ran in this same
        job-manager (the next call answers True)."""
        jobtap = self.jobtap
        return bool(jobtap.lib.runtime_seen_jobmanager(jobtap.p))

    def jobmanager_id(self):
        """A number naming this job-manager: the same for every plugin on
        the runtime loaded into it, another for each new job-manager (a
        module reload makes one in the same process).  OSError if none
        could be made."""
        jobtap = self.jobtap
        value = jobtap.lib.runtime_jobmanager_id(jobtap.p)
        if value == 0:
            raise OSError(errno.ENOMEM, "no job-manager id")
        return value
