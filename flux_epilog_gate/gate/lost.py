"""Lost holds: pending epilog holds whose job went inactive without them.

The gate holds a job's clean only from a job-manager callback.  A job
that reaches its epilog point while no gate is loaded goes on to clean
with its pending holds unheld: in the window of ``flux jobtap remove`` +
``load``, and as an instance restarts, before a gate loaded at run time
(``flux jobtap load``) is back.  Such a hold is lost, and it is never
lost silently: each is logged at LOG_ERR, naming the job and the hold,
counted in ``lost`` (``flux jobtap query``), answered ``released: false``
with :attr:`~flux_epilog_gate.gate.holds.Reason.LOST`, and recorded as
cancelled in the hold log, so that the next load does not report it
again.

The gate finds them where it finds the job inactive with a pending epilog
hold (:meth:`Losses.inactive`), and, after a load into a new job-manager,
among the jobs the hold log names that are no longer active
(:meth:`Losses.check_unseen`): those never reach the plugin, so their
eventlogs are read to tell a hold that was lost (no ``epilog-start`` of
the gate's) from one that ended without a record in the log (a timeout).
"""

import errno
import syslog

from ..jobid import f58
from .holdlog import MARKER
from .holds import (
    CANCEL_EVENT,
    EPILOG,
    HOLD_EVENT,
    PENDING,
    RELEASE_EVENT,
    Hold,
    Reason,
)
from .states import INACTIVE

#: What the log line says happened to a lost hold.
WHY = (
    "the job went inactive before epilog-gate could post its epilog-start "
    "(it ended while the plugin was not loaded, or was freed as the "
    "instance restarted after a crash)"
)


class Losses:
    """Reports the holds a gate could not hold (see module docstring).

    Owns nothing but the reports: each goes to the log, the ``lost``
    counter, the jobs' memory of holds that are gone and the hold log.
    Calls the port's ``read_eventlog``, ``job_info``, ``now`` and
    ``log``.  Called by the lifecycle (a job went inactive) and by the
    loader (:meth:`check_unseen`, after a load into a new job-manager).
    """

    def __init__(self, port, jobs, holdlog, stats):
        self.port = port
        self.jobs = jobs
        self.holdlog = holdlog
        self.stats = stats

    def inactive(self, job):
        """``job`` went inactive: report its pending epilog holds; return
        them."""
        lost = [
            hold
            for hold in job.holds.values()
            if hold.state == PENDING and hold.point == EPILOG
        ]
        for hold in lost:
            self._lost(hold)
        return lost

    def check_unseen(self, logged, seen):
        """After a load into a new job-manager: ``logged`` is the hold log
        by job (``{id: [(timestamp, name, context)]}``), ``seen`` the jobs
        the job-manager reported active.  Read the eventlog of each other
        job that the log leaves with a pending epilog hold, and report the
        holds it lost."""
        for jobid, entries in logged.items():
            if jobid in seen:
                continue
            descriptions = pending_in_log(entries)
            if descriptions:
                self.port.read_eventlog(
                    jobid,
                    lambda events, error, jobid=jobid, d=descriptions: self.ended(
                        jobid, d, events, error
                    ),
                )

    def ended(self, jobid, descriptions, events, error):
        """The eventlog of a job that the hold log names with pending epilog
        holds ``descriptions`` but that is not active: report the holds it
        lost."""
        if error is not None:
            if getattr(error, "errno", None) == errno.ENOENT:
                self.port.log(
                    syslog.LOG_WARNING,
                    f"job {f58(jobid)} is named in the hold log but has no "
                    "eventlog (purged, or not replayed after a crash): what "
                    f"became of its holds {', '.join(descriptions)} is not known",
                )
            else:
                self.port.log(
                    syslog.LOG_ERR,
                    f"job {f58(jobid)}: eventlog lookup: {error}: its holds "
                    f"{', '.join(descriptions)} were not checked",
                )
            return
        # The job-manager's word, not the eventlog's: the clean it posts
        # as it restarts may not be committed yet.
        try:
            state, _ = self.port.job_info(jobid)
        except OSError:
            state = INACTIVE
        if state != INACTIVE or jobid in self.jobs:
            return
        started = {
            context.get("description")
            for _, name, context in events
            if name == "epilog-start" and context.get(MARKER)
        }
        userid = next(
            (c.get("userid", 0) for _, name, c in events if name == "submit"), 0
        )
        for description in descriptions:
            if description not in started:
                self._lost(Hold(jobid, description, userid, self.port.now()))

    def _lost(self, hold):
        self.stats["lost"] += 1
        self.port.log(
            syslog.LOG_ERR,
            f"hold {hold.description} of job {f58(hold.id)} was lost: {WHY}",
        )
        # Recorded, so that a later load does not report it again.
        self.holdlog.cancel(hold)
        self.jobs.gone.add(hold.id, hold.description, Reason.LOST)


def pending_in_log(entries):
    """The descriptions of the epilog holds the hold log ``entries`` of one
    job leave neither cancelled nor released."""
    live = {}
    for _, name, context in entries:
        description = context.get("description")
        if name == HOLD_EVENT:
            live[description] = context.get("point", EPILOG)
        elif name in (CANCEL_EVENT, RELEASE_EVENT):
            live.pop(description, None)
    return sorted(d for d, point in live.items() if point == EPILOG)
