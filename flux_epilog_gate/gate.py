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
``track(id, events=True)`` / ``untrack(id)``
    start or stop sending the job's callbacks to the gate (with
    ``events``, also its ``finish`` and ``free`` events)
``timer(delay, callback)``
    call ``callback()`` after ``delay`` seconds; returns an object with
    ``stop()``
``kvs_commit(key, text, append, callback)``
    write (or with ``append``, append) ``text`` to KVS key ``key``
    without blocking; later call ``callback(error)``, with None on success
``send_activation(sink, activation)``
    send one response (a dict ``{id, description, userid, ran}``) to a
    watcher; returns False if the watcher is gone
``log(level, text)``
    log a line (syslog levels)
"""

import errno
import syslog
from collections import OrderedDict

from .config import Config
from .errors import GateError
from .holdlog import MARKER, HoldLog
from .holds import (
    ACTIVE,
    CANCEL_EVENT,
    GONE,
    HOLD_EVENT,
    PENDING,
    RECOVERY_DESCRIPTION,
    TIMEOUT_STATUS,
    Hold,
)
from .jobid import f58

# flux_job_state_t
NEW = 1
DEPEND = 2
PRIORITY = 4
SCHED = 8
RUN = 16
CLEANUP = 32
INACTIVE = 64

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
    )

    def __init__(self, jobid, userid):
        self.id = jobid
        self.userid = userid
        self.holds = {}
        self.at_point = False
        self.recovering = False
        self.placeholder = False


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

    __slots__ = ("sink", "descriptions", "userid")

    def __init__(self, sink, descriptions=None, userid=None):
        self.sink = sink
        self.descriptions = frozenset(descriptions) if descriptions else None
        self.userid = userid

    def wants(self, hold):
        return (
            self.descriptions is None or hold.description in self.descriptions
        ) and (self.userid is None or self.userid == hold.userid)


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
        self.stats = dict.fromkeys(
            ("held", "activated", "released", "cancelled", "failed", "timedout"),
            0,
        )

    def attach(self, port):
        """Drive another port: the plugin was loaded again."""
        self.port = port
        self.record.port = port

    def holds(self):
        """Every hold of every job, or None while some job's holds are
        still being recovered."""
        if any(job.recovering for job in self.jobs.values()):
            return None
        return [hold for job in self.jobs.values() for hold in job.holds.values()]

    # Requests

    def hold(self, jobid, description, timeout=None):
        """Register a hold; return ``(hold, created)``.

        Holding the same ``(jobid, description)`` again answers the
        existing hold.
        """
        job = self.jobs.get(jobid)
        if job and description in job.holds:
            return job.holds[description], False
        state, userid = self._job_info(jobid)
        if state == INACTIVE:
            raise GateError(errno.ENOENT, f"job {f58(jobid)} is inactive")
        if job and len(job.holds) >= self.config.max_holds:
            raise GateError(
                errno.ENOSPC,
                f"job {f58(jobid)} already has {len(job.holds)} holds "
                f"(max-holds={self.config.max_holds})",
            )
        if timeout is None:
            timeout = self.config.timeout
        hold = Hold(jobid, description, userid, self.port.now(), timeout)
        tracked = job is not None
        job = job or self._track(jobid, userid)
        if not job.recovering and (job.at_point or self._past_point(job, state)):
            try:
                self._activate(hold)
            except GateError:
                if not tracked:
                    self._untrack(job)
                raise
            job.at_point = True
        job.holds[description] = hold
        self.gone.discard(jobid, description)
        self.stats["held"] += 1
        # Active or not, the hold log names the job: at a load, only the
        # jobs it names are recovered.
        self.record.add(hold)
        return hold, True

    def apply_rules(self, jobid, attributes):
        """Register the holds that configured rules give a new job."""
        for rule in self.config.rules:
            if rule.matches(attributes):
                try:
                    self.hold(jobid, rule.description, rule.timeout)
                except GateError as exc:
                    self.port.log(
                        syslog.LOG_ERR,
                        f"{f58(jobid)}: rule {rule.attribute}: {exc.message}",
                    )

    def release(self, jobid, description, status=0):
        """Release a hold; return ``(released, reason)``."""
        job = self.jobs.get(jobid)
        hold = job.holds.get(description) if job else None
        if hold is None:
            return False, self._why_gone(jobid, description, job)
        self._finish(job, hold, status, "released")
        return True, None

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

    def annotate(self, jobid):
        """The ``epilog_gate`` annotation of a job entering CLEANUP: the
        holds its clean waits on (None if annotations are off or it has
        none).  It stays on the inactive job as a record."""
        job = self.jobs.get(jobid)
        if not self.config.annotate or job is None or not job.holds:
            return None
        return ",".join(job.holds)

    def watch(self, sink, descriptions=None, userid=None):
        """Add a watcher; it is first sent every hold already active."""
        watcher = Watcher(sink, descriptions, userid)
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

    def on_cleanup(self, jobid):
        """The job entered CLEANUP."""
        job = self.jobs.get(jobid)
        if job:
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
        seen = self._replay(job, events)
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
        for hold in job.holds.values():
            if hold.state == ACTIVE:
                self._arm_timer(hold)
        if self._past_point(job, state):
            self._reach_point(job)
        if job.placeholder:
            job.placeholder = False
            self._post_finish(jobid, RECOVERY_DESCRIPTION, 0)
        if not job.holds:
            self._untrack(job)

    # Reload into the same job-manager

    def suspend(self):
        """The plugin is going away: record what is queued, stop every
        timer."""
        self.record.flush()
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
        seen = set()
        for timestamp, name, context in events:
            description = context.get("description")
            if name in PROGRESS_EVENTS:
                seen.add(name)
            elif name == HOLD_EVENT and description not in job.holds:
                self._replayed_hold(job, timestamp, context).logged = True
            elif name == CANCEL_EVENT:
                job.holds.pop(description, None)
            elif name in EPILOG_EVENTS and context.get(MARKER):
                # Only the gate's own: another plugin's epilog may have the
                # same description (perilog.so's job-manager.epilog).
                self._replay_epilog(job, timestamp, name, context)
        return seen

    def _replay_epilog(self, job, timestamp, name, context):
        description = context["description"]
        if description == RECOVERY_DESCRIPTION:
            job.placeholder = name == "epilog-start"
        elif name == "epilog-start":
            self._replay_start(job, timestamp, context)
        elif description in job.holds:
            del job.holds[description]
            self.gone.add(job.id, description, "released")

    @staticmethod
    def _replayed_hold(job, timestamp, context):
        """The hold a recorded entry names, made if the job lacks it."""
        description = context["description"]
        if description not in job.holds:
            job.holds[description] = Hold(
                job.id, description, job.userid, timestamp, context.get("timeout")
            )
        return job.holds[description]

    def _replay_start(self, job, timestamp, context):
        # A hold that became active before its pending record was written
        # is known from its marked epilog-start alone.
        hold = self._replayed_hold(job, timestamp, context)
        hold.state = ACTIVE
        hold.t_start = timestamp

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
            if hold.state == PENDING:
                self._activate(hold)

    def _activate(self, hold):
        self._epilog_start(hold.id, hold.description, hold.timeout)
        hold.state = ACTIVE
        hold.t_start = self.port.now()
        self.stats["activated"] += 1
        self._arm_timer(hold)
        self._notify(hold)

    def _arm_timer(self, hold):
        if hold.timeout is None or hold.timer is not None:
            return
        delay = max(0.0, hold.t_start + hold.timeout - self.port.now())
        hold.timer = self.port.timer(delay, lambda: self.expire(hold))

    def _stop_timer(self, hold):
        if hold.timer is not None:
            hold.timer.stop()
            hold.timer = None

    def _finish(self, job, hold, status, reason):
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
            self.record.cancel(hold)
            return
        self.stats["timedout" if reason == "timed out" else "released"] += 1
        if status != 0:
            self.stats["failed"] += 1
            self._raise(job.id, hold, status, reason)
        self._post_finish(job.id, hold.description, status)

    def _raise(self, jobid, hold, status, reason):
        what = f"epilog-gate: hold {hold.description}"
        if reason == "timed out":
            note = f"{what} timed out after {hold.timeout:g}s"
        else:
            note = f"{what} {reason} with status {status}"
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
        return {
            "id": hold.id,
            "description": hold.description,
            "userid": hold.userid,
            "ran": bool(job) and self._posted(job, "start"),
        }

    def _notify(self, hold):
        if not self.watchers:
            return
        payload = self._activation(hold)
        for watcher in list(self.watchers):
            if watcher.wants(hold) and not self.port.send_activation(
                watcher.sink, payload
            ):
                self.watchers.remove(watcher)
