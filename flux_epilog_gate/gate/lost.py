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

#: Jobs the hold log names that have no eventlog, named one log line
#: each at most, per load; the others are counted in one more line.
UNKNOWN_LOGGED = 20

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

    def __init__(self, context, jobs, holdlog, stats):
        self.context = context
        self.jobs = jobs
        self.holdlog = holdlog
        self.stats = stats
        # check_unseen's eventlog reads not answered yet, and the jobs
        # with no eventlog met so far, of which the first UNKNOWN_LOGGED
        # are named (a log of many purged jobs must not flood the log).
        self._reading = 0
        self._unknown = 0

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
        unseen = [
            (jobid, descriptions)
            for jobid, entries in logged.items()
            if jobid not in seen and (descriptions := pending_in_log(entries))
        ]
        # Counted before any is read: an answer may come at once.
        self._reading += len(unseen)
        for jobid, descriptions in unseen:
            self.context.port.read_eventlog(
                jobid,
                lambda events, error, jobid=jobid, d=descriptions: self.ended(
                    jobid, d, events, error
                ),
            )

    def ended(self, jobid, descriptions, events, error):
        """The eventlog of a job that the hold log names with pending epilog
        holds ``descriptions`` but that is not active: report the holds it
        lost."""
        self._reading = max(self._reading - 1, 0)
        try:
            self._check_ended(jobid, descriptions, events, error)
        finally:
            if self._reading == 0:
                self._count_unknown()

    def _check_ended(self, jobid, descriptions, events, error):
        if error is not None:
            if getattr(error, "errno", None) == errno.ENOENT:
                self._unknown_job(jobid, descriptions)
            else:
                self.context.port.log(
                    syslog.LOG_ERR,
                    f"job {f58(jobid)}: eventlog lookup: {error}: its holds "
                    f"{', '.join(descriptions)} were not checked",
                )
            return
        # The job-manager's word, not the eventlog's: the clean it posts
        # as it restarts may not be committed yet.
        try:
            state, _ = self.context.port.job_info(jobid)
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
                self._lost(Hold(jobid, description, userid, self.context.port.now()))

    def _unknown_job(self, jobid, descriptions):
        self._unknown += 1
        if self._unknown > UNKNOWN_LOGGED:
            return
        self.context.port.log(
            syslog.LOG_WARNING,
            f"job {f58(jobid)} is named in the hold log but has no "
            "eventlog (purged, or not replayed after a crash): what "
            f"became of its holds {', '.join(descriptions)} is not known",
        )

    def _count_unknown(self):
        """Every eventlog read has answered: say how many jobs with no
        eventlog were not named."""
        if self._unknown > UNKNOWN_LOGGED:
            self.context.port.log(
                syslog.LOG_WARNING,
                f"{self._unknown - UNKNOWN_LOGGED} more jobs ({self._unknown} in "
                "all) are named in the hold log but have no eventlog: what "
                "became of their holds is not known",
            )
        self._unknown = 0

    def beyond_limit(self, hold, limit):
        """The hold log gives ``hold``'s job more than ``limit`` holds,
        which no gate makes: ``hold``, past the limit, is dropped (the
        job-manager counts at most 255 open prolog and epilog actions of
        a job, every plugin's together, and fails the job's next step
        past that), and reported lost."""
        self._lost(
            hold,
            f"the hold log gives the job more than {limit} holds, the most "
            "a job can have: it was dropped as the log was read",
        )

    def _lost(self, hold, why=WHY):
        self.stats["lost"] += 1
        self.context.port.log(
            syslog.LOG_ERR,
            f"hold {hold.description} of job {f58(hold.id)} was lost: {why}",
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
