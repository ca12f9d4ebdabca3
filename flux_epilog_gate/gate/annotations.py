"""The job's ``epilog_gate`` user annotation: the descriptions of its
active holds, what its clean (or start, or dependency) waits on, when
``annotate`` is configured."""

import syslog

from ..jobid import f58
from .holds import ACTIVE


class Annotations:
    """Keeps each held job's annotation naming its active holds.

    Owns each job's ``annotation`` (what was last set).  Calls the
    port's ``annotate`` and ``log``.  Called by the requests, the epilog
    point and the lifecycle whenever a job's active holds change.
    """

    def __init__(self, context):
        self.context = context

    def update(self, job):
        """Set the job's annotation to its active holds, if it changed."""
        if not self.context.config.annotate:
            return
        active = sorted(d for d, h in job.holds.items() if h.state == ACTIVE)
        text = ",".join(active) or None
        if text == job.annotation:
            return
        job.annotation = text
        try:
            self.context.port.annotate(job.id, text)
        except OSError as exc:
            self.context.port.log(syslog.LOG_ERR, f"{f58(job.id)}: annotation: {exc}")
