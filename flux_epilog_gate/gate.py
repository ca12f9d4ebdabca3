"""The gate: holds, the epilog point, releases, timeouts and watchers.

This module is plain Python.  Everything it does to the job-manager goes
through a *port*, an object with these methods (the real one is
:class:`flux_epilog_gate.jobtap.facade.Jobtap`; the unit tests use a fake):

``now()``
    current time, seconds since the epoch
``job_info(id)``
    ``(state, userid)`` of a job; raises OSError(ENOENT) for unknown jobs
``posted(id, name)``
    True if event ``name`` was posted to the job since the job-manager
    started
``epilog_start(id, description, timeout)``
    post ``epilog-start``, marked as the gate's, with the hold's timeout
    (None: none) so that the eventlog alone tells an active hold
``epilog_finish(id, description, status)``
    post ``epilog-finish``
``raise_exception(id, note)``
    raise a non-fatal job exception
``annotate(id, text)``
    set the job's ``epilog_gate`` user annotation to ``text`` (None:
    remove it)
``prolog_start(id, description, timeout)`` / ``prolog_finish(id, description, status)``
    post ``prolog-start`` / ``prolog-finish``, marked as the gate's
``raise_fatal(id, note)``
    raise a fatal job exception (a failed prolog hold)
``want_run(id)``
    also send the tracked job's entry to RUN to the gate
``track(id, events=True)`` / ``untrack(id)``
    start or stop sending the job's callbacks to the gate (with
    ``events``, also its ``finish`` and ``free`` events)
``timer(delay, callback)``
    call ``callback()`` after ``delay`` seconds; returns an object with
    ``stop()``
``kvs_commit(key, text, append, callback, sync)``
    write (or with ``append``, append) ``text`` to KVS key ``key``
    without blocking (with ``sync``, checkpointed before it answers);
    later call ``callback(error)``, with None on success
``send_activation(sink, activation)``
    send one response (a dict ``{id, description, userid, ran, point[,
    aborted]}``) to a watcher; returns False if the watcher is gone
``log(level, text)``
    log a line (syslog levels)

What the gate does at shutdown (:mod:`flux_epilog_gate.shutdown`) needs
two more, documented there.
"""

import errno
import syslog
from collections import OrderedDict

from .config import Config
from .errors import GateError
from .holdlog import MARKER, HoldLog, NotConfirmed
from .holds import (
    ACTIVE,
    CANCEL_EVENT,
    EPILOG,
    GONE,
    HOLD_EVENT,
    PENDING,
    POINTS,
    PROLOG,
    RECOVERY_DESCRIPTION,
    RELEASE_EVENT,
    SHUTDOWN_REASON,
    TIMEOUT_STATUS,
    Hold,
)
from .jobid import f58
from .prolog import Prologs

# flux_job_state_t
NEW = 1
DEPEND = 2
PRIORITY = 4
SCHED = 8
RUN = 16
CLEANUP = 32
INACTIVE = 64

#: Which counter a finished hold counts in, by the reason it finished:
#: shutdown-timeout is a timeout too.
_COUNTERS = {"timed out": "timedout", SHUTDOWN_REASON: "timedout"}

#: The epilog events the gate posts, marked as its own (holdlog.MARKER).
EPILOG_EVENTS = frozenset(("epilog-start", "epilog-finish"))

#: Events that tell where a job is on its way to the epilog point.
PROGRESS_EVENTS = frozenset(
    ("alloc", "start", "finish", "free", "prolog-start", "prolog-finish")
)


class Job:
    """The gate's record of one job that has holds (or is being recovered)."""

    __slots__ = (
        "id",
        "userid",
        "holds",
        "at_point",
        "recovering",
        "placeholder",
        "annotation",
        "start_held",
        "prolog_placeholder",
        "prolog_placeholders",
    )

    def __init__(self, jobid, userid):
        self.id = jobid
        self.userid = userid
        self.holds = {}
        self.at_point = False
        self.recovering = False
        self.placeholder = False
        self.annotation = _UNSET
        # One of the gate's prolog actions keeps the job's start back.
        self.start_held = False
        # While recovering: when this job-manager posted its recovery
        # prolog action (or None), and how many the eventlog leaves open.
        self.prolog_placeholder = None
        self.prolog_placeholders = 0


#: A job whose annotation the gate has not set (since it was loaded).
_UNSET = object()


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


class Watcher:
    """A client streaming hold activations."""

    __slots__ = ("sink", "descriptions", "userid", "points")

    def __init__(self, sink, descriptions=None, userid=None, points=None):
        self.sink = sink
        self.descriptions = frozenset(descriptions) if descriptions else None
        self.userid = userid
        self.points = frozenset(points) if points else None

    def wants(self, hold):
        return (
            (self.descriptions is None or hold.description in self.descriptions)
            and (self.userid is None or self.userid == hold.userid)
            and (self.points is None or hold.point in self.points)
        )


class Gate:
    """Holds of all jobs, driven by job-manager callbacks and requests."""

    def __init__(self, port, config=None):
        self.port = port
        self.config = config or Config()
        self.jobs = {}
        self.gone = GoneLog(self.config.gone_limit)
        self.history = {}
        self.watchers = []
        self.record = HoldLog(port, self.holds)
        self.prolog = Prologs(self)
        # What the instance's shutdown does (flux_epilog_gate.shutdown).
        self.shutdown = None
        self.stats = dict.fromkeys(
            ("held", "activated", "released", "cancelled", "failed", "timedout"),
            0,
        )

    def attach(self, port):
        """Drive another port: the plugin was loaded again."""
        self.port = port
        self.record.resume(port)

    def holds(self):
        """Every hold of every job, or None while some job's holds are
        still being recovered."""
        if any(job.recovering for job in self.jobs.values()):
            return None
        return [hold for job in self.jobs.values() for hold in job.holds.values()]

    # Requests

    def hold(self, jobid, description, timeout=None, point=EPILOG, done=None):
        """Register a hold; return ``(hold, created)``.

        Holding the same ``(jobid, description)`` again answers the
        existing hold.  ``point`` is where the hold keeps the job: its
        clean (``"epilog"``) or its start (``"prolog"``).  The hold is in
        force at once; ``done(hold, error)`` is called once its record is
        durable (``error`` None), the moment to answer the request.  If
        the record cannot be committed, a hold this call created is
        withdrawn before ``done`` is told the error.
        """
        job = self.jobs.get(jobid)
        if job and description in job.holds:
            existing = self._same_hold(job.holds[description], point)
            if done is not None:
                self.record.barrier(lambda error: done(existing, error))
            return existing, False
        if self.shutdown is not None:
            self.shutdown.check_hold(jobid, description)
        state, userid = self._job_info(jobid)
        if state == INACTIVE:
            raise GateError(errno.ENOENT, f"job {f58(jobid)} is inactive")
        if point == PROLOG:
            self.prolog.check(job, jobid, state)
        if job and len(job.holds) >= self.config.max_holds:
            raise GateError(
                errno.ENOSPC,
                f"job {f58(jobid)} already has {len(job.holds)} holds "
                f"(max-holds={self.config.max_holds})",
            )
        if timeout is None:
            timeout = self.config.timeout
        hold = Hold(jobid, description, userid, self.port.now(), timeout, point)
        tracked = job is not None
        job = job or self._track(jobid, userid)
        if point == PROLOG:
            try:
                self.prolog.place(job, hold, state)
            except GateError:
                if not tracked:
                    self._untrack(job)
                raise
        elif not job.recovering and (job.at_point or self._past_point(job, state)):
            try:
                self._activate(hold)
            except GateError:
                if not tracked:
                    self._untrack(job)
                raise
            job.at_point = True
        job.holds[description] = hold
        if hold.state == ACTIVE:
            self._annotate(job)
        self.gone.discard(jobid, description)
        self.stats["held"] += 1
        self.record.hold(
            hold, None if done is None else lambda error: self._held(hold, error, done)
        )
        return hold, True

    def _held(self, hold, error, done):
        if error is not None and not isinstance(error, NotConfirmed):
            self._withdraw(hold)
        done(hold, error)

    def _withdraw(self, hold):
        """Undo a hold whose record could not be committed (if it is still
        there): its request is answered with an error."""
        job = self.jobs.get(hold.id)
        if job is None or job.holds.get(hold.description) is not hold:
            return
        self.port.log(
            syslog.LOG_ERR,
            f"{f58(hold.id)}: hold {hold.description} withdrawn: "
            "its record could not be committed",
        )
        self._finish(job, hold, 0, "withdrawn: its record could not be committed")

    def apply_rules(self, jobid, attributes):
        """Register the holds that configured rules give a new job."""
        for rule in self.config.rules:
            if rule.matches(attributes):
                try:
                    self.hold(jobid, rule.description, rule.timeout, rule.point)
                except GateError as exc:
                    self.port.log(
                        syslog.LOG_ERR,
                        f"{f58(jobid)}: rule {rule.attribute}: {exc.message}",
                    )

    def release(self, jobid, description, status=0, done=None):
        """Release a hold; return ``(released, reason)``.

        The release takes effect at once; ``done((released, reason),
        error)`` is called once its record (if it needs one) and every
        record before it are durable.
        """
        job = self.jobs.get(jobid)
        hold = job.holds.get(description) if job else None
        if hold is None:
            result = (False, self._why_gone(jobid, description, job))
        else:
            result = (True, None)
        # Bound before anything is recorded: done() may run at once.
        recorded = None if done is None else lambda error: done(result, error)
        if hold is None:
            if recorded is not None:
                self.record.barrier(recorded)
        else:
            self._finish(job, hold, status, "released", recorded)
        return result

    def list(self, jobid=None, userid=None):
        """Return list entries of all holds, or of one job's; only those of
        ``userid``'s jobs when it is given."""
        if jobid is not None:
            if jobid not in self.jobs:
                self._job_info(jobid)  # unknown job: ENOENT
            jobs = [self.jobs[jobid]] if jobid in self.jobs else []
        else:
            jobs = self.jobs.values()
        return [
            hold.to_dict()
            for job in jobs
            if userid is None or job.userid == userid
            for hold in job.holds.values()
        ]

    def watch(self, sink, descriptions=None, userid=None, points=None):
        """Add a watcher; it is first sent every hold already active."""
        watcher = Watcher(sink, descriptions, userid, points)
        for job in self.jobs.values():
            for hold in job.holds.values():
                if hold.state == ACTIVE and watcher.wants(hold):
                    if not self.port.send_activation(sink, self._activation(hold)):
                        return
        self.watchers.append(watcher)

    def unwatch(self, match):
        """Drop watchers whose sink satisfies ``match(sink)``; return count."""
        before = len(self.watchers)
        self.watchers = [w for w in self.watchers if not match(w.sink)]
        return before - len(self.watchers)

    # Job-manager callbacks

    def on_run(self, jobid):
        """The job entered RUN (only for jobs with prolog holds)."""
        job = self.jobs.get(jobid)
        if job:
            self.prolog.on_run(job)

    def on_cleanup(self, jobid):
        """The job entered CLEANUP."""
        job = self.jobs.get(jobid)
        if job:
            if not job.recovering:
                self.prolog.on_cleanup(job)
            self._advance(job, CLEANUP)

    def on_event(self, jobid, name, state):
        """An event was posted to a tracked job."""
        job = self.jobs.get(jobid)
        if job and name in ("finish", "free") and state == CLEANUP:
            self._advance(job, state)

    def on_inactive(self, jobid):
        """The job is inactive: whatever it still holds is gone."""
        job = self.jobs.pop(jobid, None)
        self.history.pop(jobid, None)
        if job is None:
            return
        for hold in job.holds.values():
            hold.state = GONE
            self._stop_timer(hold)
            self.gone.add(jobid, hold.description, "job is inactive")

    # Recovery

    def begin_recovery(self, jobid, userid):
        """A job whose holds will be known once its eventlog is read."""
        job = self.jobs.get(jobid) or self._track(jobid, userid)
        job.recovering = True
        self.prolog.recovering(job)

    def end_recovery(self, jobid, events):
        """Rebuild a job's holds from its eventlog ``events`` (a list of
        ``(timestamp, name, context)``) and carry on where it left off."""
        job = self.jobs.get(jobid)
        if job is None or not job.recovering:
            return
        try:
            state, _ = self.port.job_info(jobid)
        except OSError:
            state = INACTIVE
        # What this job-manager did while the eventlog was being read is
        # not necessarily in ``events``: keep it.
        placeholder, fresh = job.placeholder, job.holds
        job.holds = {}
        seen, unfinished = self._replay(job, events)
        job.placeholder = job.placeholder or placeholder
        for description, hold in fresh.items():
            if description not in job.holds:
                job.holds[description] = hold
                self.gone.discard(jobid, description)
        job.recovering = False
        if state in (RUN, CLEANUP) and seen:
            self.history[jobid] = seen
        if state == INACTIVE:
            self.on_inactive(jobid)
            return
        self.prolog.recovered(job, state)
        for hold in job.holds.values():
            if hold.state == ACTIVE:
                self._arm_timer(hold)
        if self._past_point(job, state):
            self._reach_point(job)
        # After the pending holds became active: these finishes may let
        # the job go on to clean.
        for hold, status in unfinished:
            self._finish_released(job, hold, status)
        if job.placeholder:
            job.placeholder = False
            self._post_finish(jobid, RECOVERY_DESCRIPTION, 0)
        if not job.holds:
            self._untrack(job)

    # Reload into the same job-manager

    def suspend(self):
        """The plugin is going away: send what is queued (its requests
        are answered as not confirmed), stop every timer."""
        self.record.suspend()
        for job in self.jobs.values():
            for hold in job.holds.values():
                self._stop_timer(hold)

    def retrack(self, jobid, state):
        """job.new for a job the gate already knows, after a reload.

        Return True if the job's eventlog must be read (again): the
        previous plugin instance was still recovering it."""
        job = self.jobs.get(jobid)
        if job is None:
            if jobid in self.history:
                self.port.track(jobid, events=False)
            return False
        self.port.track(jobid)
        if job.recovering:
            return True
        self.prolog.recovered(job, state)
        if not job.at_point and self._past_point(job, state):
            self._reach_point(job)
        return False

    def resume(self, seen):
        """After a reload: jobs not ``seen`` went inactive meanwhile; the
        others' timeouts carry on from when their holds became active."""
        for jobid in [jobid for jobid in self.jobs if jobid not in seen]:
            self.on_inactive(jobid)
        for jobid in [jobid for jobid in self.history if jobid not in seen]:
            del self.history[jobid]
        for job in self.jobs.values():
            for hold in job.holds.values():
                if hold.state == ACTIVE:
                    self._arm_timer(hold)

    def reconfigure(self, config):
        """Apply a new configuration to holds registered from now on."""
        self.config = config
        self.gone.limit = config.gone_limit
        self.gone.trim()

    def _replay(self, job, events):
        """Replay a job's log entries and eventlog, merged in time order;
        return the progress events seen, and the released holds whose
        ``epilog-finish`` is missing, with their status."""
        seen = set()
        # Released holds awaiting their epilog-finish, by description.
        released = {}
        for timestamp, name, context in events:
            description = context.get("description")
            if (
                name == "prolog-finish"
                and context.get(MARKER)
                and description in released
            ):
                # The finish of a released prolog hold.
                del released[description]
            elif name in ("prolog-start", "prolog-finish"):
                self.prolog.replay(job, timestamp, name, context)
            if name in PROGRESS_EVENTS:
                seen.add(name)
            elif name == HOLD_EVENT and description not in job.holds:
                self._replayed_hold(job, timestamp, context)
            elif name == CANCEL_EVENT:
                job.holds.pop(description, None)
            elif name == RELEASE_EVENT and description in job.holds:
                hold = job.holds.pop(description)
                self.gone.add(job.id, description, "released")
                # A hold never started needs no epilog-finish.
                if hold.state == ACTIVE:
                    released[description] = (hold, context.get("status", 0))
            elif name in EPILOG_EVENTS and context.get(MARKER):
                # Only the gate's own: another plugin's epilog may have the
                # same description (perilog.so's job-manager.epilog).
                self._replay_epilog(job, timestamp, name, context, released)
        return seen, list(released.values())

    def _replay_epilog(self, job, timestamp, name, context, released):
        description = context["description"]
        if description == RECOVERY_DESCRIPTION:
            job.placeholder = name == "epilog-start"
        elif name == "epilog-start":
            self._replay_start(job, timestamp, context)
        elif description in released:
            # The finish of a released hold (the oldest start).
            del released[description]
        elif description in job.holds:
            del job.holds[description]
            self.gone.add(job.id, description, "released")

    @staticmethod
    def _replayed_hold(job, timestamp, context, point=None):
        """The hold a recorded entry names, made if the job lacks it."""
        description = context["description"]
        if point is None:
            point = context.get("point", EPILOG)
            point = point if point in POINTS else EPILOG
        if description not in job.holds:
            job.holds[description] = Hold(
                job.id,
                description,
                job.userid,
                timestamp,
                context.get("timeout"),
                point,
            )
        return job.holds[description]

    def _replay_start(self, job, timestamp, context):
        # A hold that became active before its pending record was written
        # is known from its marked epilog-start alone.
        hold = self._replayed_hold(job, timestamp, context)
        hold.state = ACTIVE
        hold.t_start = timestamp

    def reach_point(self, jobid):
        """Take the job as at its epilog point now, whatever it went
        through (at shutdown, which ends its processes)."""
        job = self.jobs.get(jobid)
        if job is None or job.at_point or job.recovering:
            return
        try:
            self._reach_point(job)
        except GateError as exc:
            self.port.log(syslog.LOG_ERR, f"{f58(jobid)}: {exc.message}")

    def end(self, hold, status, reason, note):
        """Finish an active hold on the gate's own account (at shutdown),
        with a job exception whose ``note`` names it."""
        job = self.jobs.get(hold.id)
        if job is None or job.holds.get(hold.description) is not hold:
            return
        self._finish(job, hold, status, reason, note=note)

    # Timeouts

    def expire(self, hold):
        """A hold's timeout expired."""
        job = self.jobs.get(hold.id)
        if job is None or job.holds.get(hold.description) is not hold:
            return
        hold.timer = None
        self._finish(job, hold, TIMEOUT_STATUS, "timed out")

    # Internals

    def _job_info(self, jobid):
        try:
            return self.port.job_info(jobid)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                raise GateError(errno.ENOENT, f"unknown job {f58(jobid)}") from None
            raise GateError.from_oserror(exc, f"looking up job {f58(jobid)}") from None

    def _epilog_start(self, jobid, description, timeout=None):
        try:
            self.port.epilog_start(jobid, description, timeout)
        except OSError as exc:
            raise GateError.from_oserror(
                exc, f"posting epilog-start to job {f58(jobid)}"
            ) from None

    def _track(self, jobid, userid):
        job = Job(jobid, userid)
        self.jobs[jobid] = job
        self.port.track(jobid)
        return job

    def _untrack(self, job):
        if self.jobs.get(job.id) is job:
            del self.jobs[job.id]
            self.port.untrack(job.id)
            if job.id in self.history:
                # keep on_inactive() coming, so the history is dropped
                self.port.track(job.id, events=False)

    def _posted(self, job, name):
        return name in self.history.get(job.id, ()) or self.port.posted(job.id, name)

    def _past_point(self, job, state):
        """True if the job is in CLEANUP and none of its processes can still
        be running (see README, "The epilog point")."""
        if state != CLEANUP:
            return False
        if job.start_held:
            # The gate's own prolog action kept the start request back.
            return True
        if not self._posted(job, "alloc"):
            return True
        if self._posted(job, "finish") or self._posted(job, "free"):
            return True
        if self._posted(job, "start"):
            return False
        # A prolog still open when CLEANUP began means no start was ever
        # requested; otherwise wait for finish, or free as the last resort.
        return self._posted(job, "prolog-start") and not self._posted(
            job, "prolog-finish"
        )

    def _advance(self, job, state):
        if job.recovering:
            self._hold_for_recovery(job)
        elif not job.at_point and self._past_point(job, state):
            self._reach_point(job)

    def _hold_for_recovery(self, job):
        # Still reading the eventlog: keep clean from being posted until
        # we know which holds this job has.
        if not job.placeholder:
            self._epilog_start(job.id, RECOVERY_DESCRIPTION)
            job.placeholder = True

    def _reach_point(self, job):
        job.at_point = True
        for hold in list(job.holds.values()):
            # A pending prolog hold is the prolog side's (dropped when the
            # job enters CLEANUP), never an epilog.
            if hold.state == PENDING and hold.point != PROLOG:
                self._activate(hold)
        self._annotate(job)

    def _annotate(self, job):
        """Keep the job's annotation naming its active holds, what its
        clean waits on (if annotations are on)."""
        if not self.config.annotate:
            return
        active = sorted(d for d, h in job.holds.items() if h.state == ACTIVE)
        text = ",".join(active) or None
        if text == job.annotation:
            return
        job.annotation = text
        try:
            self.port.annotate(job.id, text)
        except OSError as exc:
            self.port.log(syslog.LOG_ERR, f"{f58(job.id)}: annotation: {exc}")

    def _activate(self, hold):
        self._epilog_start(hold.id, hold.description, hold.timeout)
        hold.state = ACTIVE
        hold.t_start = self.port.now()
        self.stats["activated"] += 1
        self._arm_timer(hold)
        self._notify(hold)
        if self.shutdown is not None:
            self.shutdown.activated(hold)

    def _arm_timer(self, hold):
        if hold.timeout is None or hold.timer is not None:
            return
        delay = max(0.0, hold.t_start + hold.timeout - self.port.now())
        hold.timer = self.port.timer(delay, lambda: self.expire(hold))

    def _stop_timer(self, hold):
        if hold.timer is not None:
            hold.timer.stop()
            hold.timer = None

    def _finish_released(self, job, hold, status):
        """Post the ``epilog-finish`` (and exception) of an acknowledged
        release that a crash kept out of the job's eventlog."""
        self.port.log(
            syslog.LOG_INFO,
            f"{f58(job.id)}: finishing hold {hold.description}, released "
            "before the restart",
        )
        hold.state = GONE
        self.stats["released"] += 1
        if hold.point == PROLOG:
            self.prolog.finish(job, hold, status, "released")
        else:
            if status != 0:
                self.stats["failed"] += 1
                self._raise(job.id, hold, status, "released")
            self._post_finish(job.id, hold.description, status)
        # Recorded again, so that snapshots keep it while this
        # epilog-finish is not yet checkpointed.
        self.record.release(hold, status)

    def _finish(self, job, hold, status, reason, done=None, note=None):
        # Forget the hold before posting: epilog-finish may let the job go
        # inactive synchronously, calling back into on_inactive().
        del job.holds[hold.description]
        was, hold.state = hold.state, GONE
        self._stop_timer(hold)
        self.gone.add(job.id, hold.description, reason)
        if not job.holds and not job.recovering:
            self._untrack(job)
        if was == PENDING:
            self.stats["cancelled"] += 1
            self.record.cancel(hold, done)
            return
        timedout = reason == "timed out"
        self.stats[_COUNTERS.get(reason, "released")] += 1
        # Before the finish, which may end the job.
        self._annotate(job)
        if hold.point == PROLOG:
            self.prolog.finish(job, hold, status, reason, note)
        else:
            if status != 0:
                self.stats["failed"] += 1
                self._raise(job.id, hold, status, reason, note)
            self._post_finish(job.id, hold.description, status)
        # A timeout needs no record: after a crash it expires again.
        if not timedout:
            self.record.release(hold, status, done)

    def failure_note(self, hold, status, reason):
        """The note of the job exception a failed or timed-out hold raises."""
        point = "prolog hold" if hold.point == PROLOG else "hold"
        what = f"epilog-gate: {point} {hold.description}"
        if reason == "timed out":
            # Say how long it really was active: a hold that expired while
            # the instance was down ends later than its timeout.
            active = max(hold.timeout, self.port.now() - hold.t_start)
            return f"{what} timed out after {active:.1f}s (timeout {hold.timeout:g}s)"
        return f"{what} {reason} with status {status}"

    def _raise(self, jobid, hold, status, reason, note=None):
        if note is None:
            note = self.failure_note(hold, status, reason)
        try:
            self.port.raise_exception(jobid, note)
        except OSError as exc:
            self.port.log(syslog.LOG_ERR, f"{f58(jobid)}: raising exception: {exc}")

    def _post_finish(self, jobid, description, status):
        try:
            self.port.epilog_finish(jobid, description, status)
        except OSError as exc:
            self.port.log(
                syslog.LOG_ERR, f"{f58(jobid)}: epilog-finish {description}: {exc}"
            )

    def _why_gone(self, jobid, description, job):
        reason = self.gone.get(jobid, description)
        if reason:
            return reason
        state, _ = self._job_info(jobid)
        if state == INACTIVE:
            return "job is inactive"
        held = ", ".join(sorted(job.holds)) if job and job.holds else ""
        raise GateError(
            errno.ENOENT,
            f"job {f58(jobid)} has no hold {description}"
            + (f" (it holds: {held})" if held else " (it has no holds)"),
        )

    def _activation(self, hold):
        job = self.jobs.get(hold.id)
        activation = {
            "id": hold.id,
            "description": hold.description,
            "userid": hold.userid,
            "ran": bool(job) and self._posted(job, "start"),
            "point": hold.point,
        }
        if hold.aborted:
            activation["aborted"] = True
        return activation

    @staticmethod
    def _same_hold(hold, point):
        """The existing hold asked for again, if at the same point."""
        if hold.point != point:
            raise GateError(
                errno.EEXIST,
                f"job {f58(hold.id)} already has hold {hold.description} "
                f"at its {hold.point} point",
            )
        return hold

    def _notify(self, hold):
        if not self.watchers:
            return
        payload = self._activation(hold)
        for watcher in list(self.watchers):
            if watcher.wants(hold) and not self.port.send_activation(
                watcher.sink, payload
            ):
                self.watchers.remove(watcher)
