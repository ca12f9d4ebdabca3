"""Dependency holds: holds that keep a job in DEPEND.

The job-manager keeps a job in DEPEND while it has dependencies: a
``dependency-add description=D`` adds one, a ``dependency-remove``
takes it away, and the job goes on to PRIORITY once none is left.  It
takes these events only while the job is in NEW or DEPEND.  So a
dependency hold is never pending: it is registered while the job is in
NEW or DEPEND (in practice from a configured rule, in the job's
``job.state.depend`` callback, or by an in-process plugin) and its
``dependency-add`` (marked as the gate's, with the hold's timeout) is
posted at once; a hold that arrives later is refused with the reason.

Releasing it with status 0 posts ``dependency-remove`` (marked).  A
non-zero status or a timeout raises a fatal job exception that names
the hold instead: the job goes to CLEANUP and never runs, and its
epilog holds still hold its clean.  A job that leaves DEPEND otherwise
(it can only be an exception: a cancel) drops its dependency holds; a
watcher is told (``aborted: true``) first, so that a service can abandon
what it was preparing.

Durability.  After a crash the job-manager rebuilds a job's dependencies
from its eventlog and, before any plugin is loaded, lets a job in
DEPEND go on if none is left.  An acknowledged hold therefore needs its
``dependency-add`` checkpointed, not only its record in the hold log.
The job-manager sends its events to the KVS in batches (every 10 ms),
and the KVS applies one sender's commits in order: a hold's record is
committed :data:`BATCH_WAIT` after its ``dependency-add``, so that the
synced commit that carries it (and on which the answer waits)
checkpoints the event too.

Shutdown leaves dependency holds alone: a job in DEPEND does not hold
the shutdown (``flux queue idle`` waits on jobs in RUN and CLEANUP
only), and the job-manager keeps its dependencies across a restart.

Timeouts are as at every point (:mod:`flux_epilog_gate.gate.points`):
a dependency hold that times out fails its job.

This module is plain Python: it reaches the job-manager through the
gate's port (``depend_start``, ``depend_finish``, ``raise_dependency``;
see :mod:`flux_epilog_gate.gate`).
"""

import errno
import syslog

from ..errors import GateError
from ..jobid import f58
from .holdlog import MARKER
from .holds import PENDING, Point, Reason
from .points import HoldPoint, replay_start
from .states import CLEANUP, DEPEND, NEW, JobState

#: The dependency events the gate posts, marked as its own.
DEPEND_EVENTS = frozenset(("dependency-add", "dependency-remove"))

#: Seconds between a hold's ``dependency-add`` and the commit of its
#: record: longer than the job-manager's event batch timeout (10 ms).
BATCH_WAIT = 0.05

#: The states in which the job-manager takes dependency events.
_OPEN = (NEW, DEPEND)


def is_depend(hold):
    return hold.point == Point.DEPEND


class AfterBatch:
    """Records that wait until the job-manager has sent the events of
    this moment to the KVS (:data:`BATCH_WAIT`): ``items``, in the order
    added, all handed to ``write(items)`` at once when the wait ends, or
    at :meth:`flush`.  A caller may take an item out before (it wrote it
    itself), or add one while some wait (the wait is armed then)."""

    def __init__(self, context, write):
        self.context = context
        self.write = write
        self.items = []
        self._timer = None

    def add(self, item):
        self.items.append(item)
        if self._timer is None:
            self._timer = self.context.port.timer(BATCH_WAIT, self._written)

    def flush(self):
        """Write now what waits (the plugin goes away)."""
        if self._timer is not None:
            self._timer.stop()
        self._written()

    def _written(self):
        self._timer = None
        items, self.items = self.items, []
        self.write(items)


class DependPoint(HoldPoint):
    """The dependency point (see module docstring and
    :class:`~flux_epilog_gate.gate.points.HoldPoint`).

    Owns the records that wait for the job-manager's event batch (an
    :class:`AfterBatch`).  Also tells the watchers of a
    hold whose job left DEPEND.  Called by the gate's job-manager
    callback ``on_cleanup``, the requests (also :meth:`barrier`), the
    lifecycle (``finish``), recovery and reload (also :meth:`flush`).
    """

    name = Point.DEPEND
    events = DEPEND_EVENTS
    # A job in DEPEND does not hold the shutdown, and the job-manager
    # keeps its dependencies across a restart.
    ends_at_shutdown = False
    label = "dependency hold"

    def __init__(self, context, jobs, lifecycle, holdlog, watchers):
        super().__init__(context, jobs, lifecycle, holdlog)
        self.watchers = watchers
        # Holds whose record waits for the job-manager's event batch, with
        # the callback of the record, in order; a barrier's callback alone.
        self._unrecorded = AfterBatch(context, self._record_all)

    # Requests

    def check(self, job, jobid, state):
        """Raise GateError if a dependency hold on ``jobid`` (in ``state``)
        comes too late: the job has left DEPEND."""
        if state in _OPEN:
            return
        raise GateError(
            errno.EINVAL,
            f"too late for a dependency hold: job {f58(jobid)} is in "
            f"{JobState(state).name}, and the job-manager takes dependencies "
            "only in NEW and DEPEND (hold it from a rule with point "
            '"depend"; a prolog hold can still keep its start back)',
        )

    def place(self, job, hold, state):
        """A new dependency hold: active at once."""
        self.activate(job, hold)

    def record(self, hold, callback):
        """Record new ``hold`` in the hold log once the job-manager has
        sent its ``dependency-add`` to the KVS (see :data:`BATCH_WAIT`)."""
        self._unrecorded.add((hold, callback))

    def barrier(self, callback):
        """Call ``callback(error)`` once every record made so far is
        durable, those still waiting for the event batch included."""
        if self._unrecorded.items:
            self._unrecorded.add((None, callback))
        else:
            self.holdlog.barrier(callback)

    def flush(self):
        """Record now every hold still waiting (the plugin goes away)."""
        self._unrecorded.flush()

    # Job-manager callbacks

    def on_cleanup(self, job):
        """The job entered CLEANUP: it never runs, its dependency holds
        are gone (its watchers are told first)."""
        if job.recovery is not None and job.recovery.active:
            # recovered() does this once the holds are known.
            return
        for hold in list(job.holds.values()):
            if is_depend(hold):
                hold.aborted = True
                self.watchers.notify(hold)
                self._drop(job, hold, Reason.NEVER_STARTED)

    def finish(self, job, hold, status, reason, note=None, raised=False):
        """End active dependency hold ``hold`` (already off the job); with
        ``raised`` a failure's fatal exception is the releaser's."""
        self._recorded(hold)
        if self._state(job.id) not in _OPEN:
            # It left DEPEND already (an exception): nothing holds it.
            return
        if status != 0 and raised:
            return
        if status != 0:
            if note is None:
                note = self.failure_note(hold, status, reason)
            try:
                self.context.port.raise_dependency(job.id, note)
            except OSError as exc:
                self.context.port.log(
                    syslog.LOG_ERR, f"{f58(job.id)}: raising exception: {exc}"
                )
            return
        try:
            self.context.port.depend_finish(job.id, hold.description)
        except OSError as exc:
            self.context.port.log(
                syslog.LOG_ERR,
                f"{f58(job.id)}: dependency-remove {hold.description}: {exc}",
            )

    # Recovery and reload

    def replay(self, job, timestamp, name, context, released):
        """One ``dependency-*`` entry of a recovering job's eventlog;
        ``released`` maps released holds awaiting their end."""
        if not context.get(MARKER):
            return
        description = context.get("description")
        if name == "dependency-add":
            replay_start(job, timestamp, context, Point.DEPEND)
        elif description in released:
            del released[description]
        elif description in job.holds and is_depend(job.holds[description]):
            del job.holds[description]
            self.jobs.gone.add(job.id, description, Reason.RELEASED)

    def recovered(self, job, state):
        """A job's holds are known again (after a restart or a reload) and
        it is in ``state``: carry its dependency holds on from there."""
        for hold in list(job.holds.values()):
            if not is_depend(hold):
                continue
            if state not in _OPEN:
                reason = Reason.NEVER_STARTED if state >= CLEANUP else None
                self._drop(job, hold, reason or Reason.LEFT_DEPEND)
            elif hold.state == PENDING:
                # Recorded, but its dependency-add is not in the eventlog:
                # the job is still in DEPEND (something else holds it).
                try:
                    self.activate(job, hold)
                except GateError as exc:
                    self.context.port.log(
                        syslog.LOG_ERR, f"{f58(job.id)}: {exc.message}"
                    )
                    self._drop(job, hold, Reason.DEPENDENCY_ADD_FAILED)

    # Internals

    def activate(self, job, hold):
        try:
            self.context.port.depend_start(hold.id, hold.description, hold.timeout)
        except OSError as exc:
            raise GateError.from_oserror(
                exc, f"posting dependency-add to job {f58(hold.id)}"
            ) from None
        self.lifecycle.activated(hold)

    def _record_all(self, waiting):
        # In one batch, not the first alone and the others after it.
        with self.holdlog.together():
            for hold, callback in waiting:
                if hold is None:
                    self.holdlog.barrier(callback)
                else:
                    self.holdlog.hold(hold, callback)

    def _drop(self, job, hold, reason):
        # Nothing to post: the job is out of DEPEND.
        self._recorded(hold)
        self.lifecycle.drop(job, hold, reason)

    def _recorded(self, hold):
        """What ends ``hold`` is recorded after the hold itself: record it
        now if it is still waiting (the others wait on)."""
        unrecorded = self._unrecorded.items
        for index, (waiting, callback) in enumerate(unrecorded):
            if waiting is hold:
                del unrecorded[index]
                self.holdlog.hold(hold, callback)
                return

    def _state(self, jobid):
        try:
            return self.context.port.job_info(jobid)[0]
        except OSError:
            return None
