"""Lost holds: holds that ended without becoming active, whose job will
never reach their point.

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

A job that flux-core drops as a new job-manager replays the KVS (its
eventlog was checkpointed with ``submit`` alone, or not at all: ``job
... not replayed``) has no eventlog where the gate looks: flux-core
moved its directory to ``job-lost+found``.  Every hold the log leaves
it, at any point, is lost (:attr:`Reason.LOST_DROPPED
<flux_epilog_gate.gate.holds.Reason.LOST_DROPPED>`).  So is a hold the
log gives a job past the most it can have (:meth:`Losses.beyond_limit`).
A job with no eventlog anywhere (purged) is only a warning: whether its
holds ended cannot be told.

Each lost hold is also kept in the record of lost holds
(:mod:`flux_epilog_gate.gate.lostrecord`) until a service takes it: the
watch streams that ask for lost holds are sent it, and the in-process
listeners (the dws plugin) are told (``lost(hold)``).
"""

import errno
import json
import syslog

from ..jobid import f58
from .holdlog import MARKER
from .holds import (
    CANCEL_EVENT,
    EPILOG,
    HOLD_EVENT,
    PENDING,
    POINTS,
    RELEASE_EVENT,
    Hold,
    Reason,
)
from .logentries import hold_entry
from .lostrecord import entry_of
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

#: Where flux-core moves the KVS directory of a job that a new
#: job-manager could not replay (``job-lost+found.job.<f58>``).
LOST_FOUND = "job-lost+found.job"

#: What the log line says happened to the holds of such a job.
DROPPED = (
    "flux-core did not replay its job as the instance restarted (its "
    "eventlog was checkpointed with submit alone, or not at all): the job "
    "will never run nor reach a hold's point"
)


class Losses:
    """Reports the holds a gate could not hold (see module docstring).

    Owns nothing but the reports: each goes to the log, the ``lost``
    counter, the jobs' memory of holds that are gone, the record of lost
    holds (then the hold log), the watchers and the in-process
    listeners.  Calls the port's ``read_eventlog``, ``read_kvs``,
    ``job_info``, ``now`` and ``log``.  Called by the lifecycle (a job
    went inactive), by recovery (a hold past the limit) and by the loader
    (:meth:`check_unseen`, after a load into a new job-manager).
    """

    def __init__(self, context, jobs, holdlog, stats, record, watchers, listeners):
        self.context = context
        self.jobs = jobs
        self.holdlog = holdlog
        self.stats = stats
        self.record = record
        self.watchers = watchers
        self.listeners = listeners
        # check_unseen's eventlog reads not answered yet, and the jobs
        # with no eventlog anywhere met so far, of which the first
        # UNKNOWN_LOGGED are named (a log of many purged jobs must not
        # flood the log).
        self._reading = 0
        self._unknown = 0
        # The jobs check_unseen is reading, with their holds
        # (``{description: point}``), until what became of them is
        # known: a reload, whose new plugin instance does not get the
        # reads' answers, reads them again (recheck()).
        self._checking = {}

    def inactive(self, job):
        """``job`` went inactive: report its pending epilog holds; return
        them."""
        lost = [
            hold
            for hold in job.holds.values()
            if hold.state == PENDING and hold.point == EPILOG
        ]
        ran = self.jobs.posted(job, "start") if lost else False
        for hold in lost:
            self._lost(hold, ran=ran)
        return lost

    def check_unseen(self, logged, seen, delay=0.0):
        """After a load into a new job-manager: ``logged`` is the hold log
        by job (``{id: [(timestamp, name, context)]}``), ``seen`` the jobs
        the job-manager reported active.  Read the eventlog of each other
        job that the log leaves with a hold, and report the holds it
        lost.  ``delay``: seconds each read waits first (tests: the
        load's ``debug-fault=slow-recovery``)."""
        unseen = [
            (jobid, holds)
            for jobid, entries in logged.items()
            if jobid not in seen
            and jobid not in self._checking
            and (holds := live_holds(jobid, entries))
        ]
        # Counted before any is read: an answer may come at once.
        self._reading += len(unseen)
        checks = []
        for jobid, holds in unseen:
            live = {d: hold.point for d, hold in holds.items()}
            self._checking[jobid] = dict(live)
            # Until it is known what became of them, snapshots keep them.
            lines = {d: hold_entry(hold) for d, hold in holds.items()}
            self.holdlog.keep_unsettled(jobid, lines)
            checks.append((jobid, live))
        for jobid, live in checks:
            if delay > 0:
                self.context.port.timer(
                    delay, lambda jobid=jobid, live=live: self._read(jobid, live)
                )
            else:
                self._read(jobid, live)

    def recheck(self):
        """A new plugin instance took the gate over: read again the
        eventlogs the previous one was reading (their answers went with
        it)."""
        self._reading = len(self._checking)
        for jobid, live in list(self._checking.items()):
            self._read(jobid, dict(live))

    def _read(self, jobid, live):
        self.context.port.read_eventlog(
            jobid,
            lambda events, error: self.ended(jobid, live, events, error),
        )

    def _settled(self, jobid, description=None):
        """Job ``jobid``'s hold ``description`` (None: every one it had)
        was not lost: nothing is left to read or keep of it."""
        self._checked(jobid, description)
        self.holdlog.forget_unsettled(jobid, description)

    def _checked(self, jobid, description=None):
        """What became of job ``jobid``'s hold ``description`` (None: of
        every one it had) is known; a lost one is in the record of lost
        holds now (its entry leaves snapshots once that is durable)."""
        live = self._checking.get(jobid)
        if live is not None:
            if description is None:
                live.clear()
            else:
                live.pop(description, None)
            if not live:
                del self._checking[jobid]

    def ended(self, jobid, live, events, error):
        """The eventlog of a job that the hold log names with holds
        ``live`` (``{description: point}``) but that is not active: report
        the holds it lost."""
        if getattr(error, "errno", None) == errno.ENOENT:
            # Read on, where flux-core moves a job it does not replay.
            self._dropped(jobid, live)
            return
        self._reading = max(self._reading - 1, 0)
        try:
            self._check_ended(jobid, live, events, error)
        finally:
            self._read_one()

    def _read_one(self):
        if self._reading == 0:
            self._count_unknown()

    def _check_ended(self, jobid, live, events, error):
        pending = sorted(d for d, point in live.items() if point == EPILOG)
        if error is not None:
            self.context.port.log(
                syslog.LOG_ERR,
                f"job {f58(jobid)}: eventlog lookup: {error}: its holds "
                f"{', '.join(sorted(live))} were not checked",
            )
            return
        # The job-manager's word, not the eventlog's: the clean it posts
        # as it restarts may not be committed yet.
        try:
            state, _ = self.context.port.job_info(jobid)
        except OSError:
            state = INACTIVE
        if jobid in self.jobs:
            # Its holds are the gate's again, and in its snapshots.
            self._settled(jobid)
            return
        if state != INACTIVE:
            return
        started = {
            context.get("description")
            for _, name, context in events
            if name == "epilog-start" and context.get(MARKER)
        }
        ran = any(name == "start" for _, name, _ in events)
        userid = _userid(events)
        lost = [d for d in pending if d not in started]
        for description in list(live):
            if description not in lost:
                # It ended (a timeout), or its job never reached its point.
                self._settled(jobid, description)
        for description in lost:
            hold = Hold(jobid, description, userid, self.context.port.now())
            self._checked(jobid, description)
            self._lost(hold, ran=ran)

    # A job with no eventlog

    def _dropped(self, jobid, live):
        """The job has no eventlog: look for it in flux-core's
        ``job-lost+found``, where a new job-manager moves a job it could
        not replay (its eventlog first, for its owner)."""
        where = f"{LOST_FOUND}.{f58(jobid)}"

        def eventlog(data, error):
            if error is None:
                self._dropped_found(jobid, live, where, _userid(_events(data)))
            else:
                self.context.port.read_kvs(f"{where}.jobspec", jobspec)

        def jobspec(data, error):
            if error is None:
                self._dropped_found(jobid, live, where, None)
            else:
                self._reading = max(self._reading - 1, 0)
                self._settled(jobid)
                self._unknown_job(jobid, live)
                self._read_one()

        try:
            self.context.port.read_kvs(f"{where}.eventlog", eventlog)
        except Exception as exc:  # noqa: BLE001 - counted, and the load goes on
            self._reading = max(self._reading - 1, 0)
            self._check_ended(jobid, live, None, exc)
            self._read_one()

    def _dropped_found(self, jobid, live, where, userid):
        """flux-core dropped the job at a restart (its data is at
        ``where``): every hold the log leaves it is lost."""
        self._reading = max(self._reading - 1, 0)
        try:
            if jobid in self.jobs:
                self._settled(jobid)
                return
            why = f"{DROPPED} (its data is in {where})"
            for description, point in sorted(live.items()):
                hold = Hold(
                    jobid, description, userid, self.context.port.now(), point=point
                )
                self._checked(jobid, description)
                self._lost(hold, why, Reason.LOST_DROPPED)
        finally:
            self._read_one()

    def _unknown_job(self, jobid, live):
        self._unknown += 1
        if self._unknown > UNKNOWN_LOGGED:
            return
        self.context.port.log(
            syslog.LOG_WARNING,
            f"job {f58(jobid)} is named in the hold log but has no "
            "eventlog, nor one in job-lost+found (purged): what "
            f"became of its holds {', '.join(sorted(live))} is not known",
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
            Reason.LOST_LIMIT,
        )

    def _lost(self, hold, why=WHY, reason=Reason.LOST, ran=False):
        self.stats["lost"] += 1
        self.context.port.log(
            syslog.LOG_ERR,
            f"hold {hold.description} of job {f58(hold.id)} was lost: {why}",
        )
        self.jobs.gone.add(hold.id, hold.description, reason)
        entry = entry_of(hold, reason, ran)
        # Recorded as cancelled once the record of it is durable, so that a
        # later load does not report it again (nor never).
        if self.record.add(entry, lambda: self._recorded(hold)):
            self.watchers.lost(entry)
            if self.listeners:
                self.listeners.tell("lost", hold)

    def _recorded(self, hold):
        """The record of lost ``hold`` is durable: the hold log says it is
        cancelled, and snapshots no longer need its entry."""
        self.holdlog.forget_unsettled(hold.id, hold.description)
        self.holdlog.cancel(hold)


def _events(data):
    """The entries of an eventlog's text (bytes), as read_eventlog gives
    them; lines that are not entries are left out."""
    events = []
    for line in (data or b"").decode("utf-8", "replace").splitlines():
        try:
            event = json.loads(line)
            events.append((event["timestamp"], event["name"], event.get("context", {})))
        except (ValueError, KeyError, TypeError):
            continue
    return events


def _userid(events):
    """The owner of a job, from its eventlog's ``submit`` (None if none)."""
    return next(
        (c.get("userid") for _, name, c in events if name == "submit" and c), None
    )


def live_in_log(entries):
    """The holds the hold log ``entries`` of one job leave neither
    cancelled nor released, at any point: ``{description: point}``."""
    return {d: hold.point for d, hold in live_holds(None, entries).items()}


def live_holds(jobid, entries):
    """The holds of job ``jobid`` that the hold log ``entries`` of the job
    leave neither cancelled nor released, as their entries had them:
    ``{description: Hold}``."""
    holds = {}
    for timestamp, name, context in entries:
        description = context.get("description")
        if name == HOLD_EVENT:
            point = context.get("point", EPILOG)
            holds[description] = Hold(
                jobid,
                description,
                None,
                timestamp,
                context.get("timeout"),
                point if point in POINTS else EPILOG,
            )
        elif name in (CANCEL_EVENT, RELEASE_EVENT):
            holds.pop(description, None)
    return holds


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
