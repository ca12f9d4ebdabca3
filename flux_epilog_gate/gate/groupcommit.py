"""Group commit: the hold log's records, batched, one synced commit at a time.

At most one commit is in flight.  Records made meanwhile are queued and
all go into the next commit, which is sent as soon as the one in flight
has answered; the answers of a batch are sent when its commit succeeds.
A pipelining client, or many clients, thus share one sync among all the
requests of a round trip to the KVS.

**A failed commit** is logged; every request of its batch is answered
with the error, and its records are sent again with the next commit
(or after :data:`RETRY_DELAY`), so the log stays a faithful history.

Every transaction of the log goes through :class:`GroupCommit`, whatever
its form (an append, a snapshot, a part of one, a segment made): the
log's policy (:class:`flux_epilog_gate.gate.holdlog.HoldLog`) picks
the form of each batch taken.
"""

import errno
import json
import syslog

from .logentries import KEY

#: Seconds after a failed commit before the records it carried are sent
#: again, if no new record sends them first: a KVS that keeps failing is
#: not retried in a loop, and records are not left waiting for traffic
#: that may never come.
RETRY_DELAY = 1.0

#: Tree object types of a value (``FLUX_KVS_TREEOBJ`` lookups): what a key
#: must hold to be made a segment or swapped in.
VALUE_TREEOBJS = ("val", "valref")


class NotConfirmed(OSError):
    """A record whose commit was sent, but whose outcome this plugin
    instance will not learn (it is being unloaded)."""

    def __init__(self):
        super().__init__(
            errno.EAGAIN,
            "epilog-gate was unloaded before the record was committed: "
            "the request may have taken effect, send it again",
        )


class GroupCommit:
    """The queue of records and the commit in flight.

    Owns the records queued (``queued``, their callbacks ``waiters``),
    those of the commit in flight (``sent``, their callbacks
    ``in_flight``: None while no commit is in flight, empty while a
    lookup holds its place), whether commits are synced (``sync``) and
    the count of commits sent (``commits``).  Reaches the KVS through
    the port of ``context`` (the gate's
    :class:`~flux_epilog_gate.gate.context.Context`); reports each
    append to ``compaction`` (a
    :class:`~flux_epilog_gate.gate.holdlog.Compaction`).

    The policy is given as three callables: ``route()`` sends the batch
    just taken in the form it picks; ``repair(error)`` is asked about
    each failed commit first (True: it sent the batch again in another
    form); ``more()`` says whether a commit is wanted with no record
    queued (a snapshot).
    """

    def __init__(self, context, compaction, route, repair, more):
        self.context = context
        self.compaction = compaction
        self.route = route
        self.repair = repair
        self.more = more
        self.queued = []
        self.waiters = []
        self.sent = []
        self.in_flight = None
        self.sync = True
        self.commits = 0
        #: Text the next batch begins with, or None: the end of the
        #: value's last line (it was written by another hand), or the
        #: log's format (a log begun anew).
        self.prefix = None
        # Armed after a failed commit left records queued (RETRY_DELAY).
        self.retry_timer = None
        # Inside together(): records wait for the end of the block.
        self.gathering = 0
        self._together = _Together(self)
        #: False from a reload until a commit of this instance succeeds:
        #: the previous instance's commits may still be on their way, and
        #: a lookup meanwhile could read a value they will replace (the
        #: KVS carries out one sender's commits in order, so an answered
        #: one says the earlier ones are done).
        self.settled = True

    # Records

    def begin_with(self, text):
        """The next batch begins with ``text`` (see :attr:`prefix`)."""
        self.prefix = text

    def together(self):
        """A context: records added in the block go out in one batch, none
        sent before it ends (a caller registering several holds at once,
        whose first record would otherwise go alone and the others wait
        for its commit)."""
        return self._together

    def add(self, line, callback):
        """Queue ``line``; ``callback(error)`` once it is durable."""
        self.queued.append(line)
        if callback is not None:
            self.waiters.append(callback)
        if self.in_flight is None and not self.gathering:
            self.kick()

    def waiting(self):
        """How many callbacks wait for a commit (queued or in flight)."""
        return len(self.waiters) + len(self.in_flight or ())

    def barrier(self, callback):
        """Call ``callback`` once every record made so far is durable."""
        if self.queued:
            self.waiters.append(callback)
            if not self.gathering:
                self.kick()
        elif self.in_flight is not None and self.sent:
            self.in_flight.append(callback)
        else:
            # (A part of a snapshot in flight carries no record.)
            callback(None)

    # Sending

    def kick(self):
        """Send the next batch (or what the policy wants sent), unless a
        commit is in flight."""
        if self.in_flight is not None or not (self.queued or self.more()):
            return
        self.take()
        self.route()

    def take(self):
        """The queued records and their callbacks go in the next commit."""
        self.sent, self.queued = self.queued, []
        if self.prefix is not None:
            self.sent.insert(0, self.prefix)
            self.prefix = None
        self.in_flight, self.waiters = self.waiters, []

    def append(self, text=None):
        """Send the batch taken as an append to :data:`KEY` (``text``:
        its records joined, if the caller has them)."""
        if not self.sent:
            # Only a snapshot, given up, was to be sent.
            waiters, self.in_flight = self.in_flight, None
            self.answer(waiters or (), None)
            return
        if text is None:
            text = "".join(self.sent)
        self.compaction.appended(len(text))
        self.commits += 1
        try:
            self.context.port.kvs_commit(
                KEY, text, True, self.committed, sync=self.sync
            )
        except OSError as exc:
            self.committed(exc)

    def put(self, text, callback):
        """Send ``text`` as :data:`KEY`'s whole value."""
        self.commits += 1
        try:
            self.context.port.kvs_commit(KEY, text, False, callback, sync=self.sync)
        except OSError as exc:
            self.committed(exc)

    def ops(self, ops, callback, sync=None):
        """Send the transaction ``ops``; ``callback(error)`` when it ends
        (it then calls :meth:`committed`).  ``sync``: this commit's, if
        not :attr:`sync`."""
        self.commits += 1
        try:
            self.context.port.kvs_commit_ops(
                ops, callback, sync=self.sync if sync is None else sync
            )
        except OSError as exc:
            callback(exc)

    def look_up(self, key, then):
        """Look ``key``'s tree object up, then call ``then(treeobj,
        error)``, which calls :meth:`looked_up`.  The lookup holds the
        place of a commit: none is sent meanwhile, and the batch waits."""
        self.queued[:0], self.sent = self.sent, []
        self.waiters[:0], self.in_flight = self.in_flight, []
        try:
            self.context.port.kvs_lookup_treeobj(key, then)
        except OSError as exc:
            then(None, exc)

    def looked_up(self):
        """The lookup that held the place of a commit has answered."""
        self.in_flight = None

    # Outcomes

    def committed(self, error):
        """The commit in flight ended (``error`` None: it succeeded)."""
        if error is None:
            # A batch committed (every batch): nothing to repair or log.
            self.settled = True
            waiters, self.in_flight = self.in_flight, None
            self.sent = []
            if self.queued or self.more():
                self.kick()
            self.answer(waiters or (), None)
            return
        if error.errno == errno.ENOSYS and self.sync:
            # No content backing store: nothing can be checkpointed.
            self.sync = False
            self.context.port.log(
                syslog.LOG_ERR,
                f"{KEY}: the KVS cannot sync ({error.strerror}): "
                "holds are recorded without a checkpoint",
            )
            self.route()
            return
        if self.repair(error):
            return
        self._failed(error)

    def _failed(self, error):
        waiters, self.in_flight = self.in_flight, None
        fresh = bool(self.queued)
        self.context.port.log(syslog.LOG_ERR, f"recording holds in {KEY}: {error}")
        # Written again with the next commit, or after RETRY_DELAY; not
        # sent now, so that a KVS that keeps failing is not retried in a
        # loop.
        self.queued[:0] = self.sent
        self.sent = []
        error = OSError(
            error.errno or errno.EIO, f"recording in {KEY} failed: {error.strerror}"
        )
        # The next batch goes first: its sync overlaps these answers.
        if fresh:
            self.kick()
        elif self.queued and self.retry_timer is None:
            self.retry_timer = self.context.port.timer(RETRY_DELAY, self._retry)
        self.answer(waiters or (), error)

    def _retry(self):
        self.retry_timer = None
        self.kick()

    def answer(self, waiters, error):
        """Call each of ``waiters`` with ``error``."""
        for callback in waiters:
            try:
                callback(error)
            except Exception:  # noqa: BLE001 - one answer must not stop the rest
                self.context.port.log(
                    syslog.LOG_ERR, f"{KEY}: answering a request failed"
                )

    # Unload

    def hand_off(self):
        """The plugin is going away: send the records not known to be
        durable in one last commit, and stop.  Return ``(waiters,
        records)``: the callbacks still waiting, and those records."""
        waiters = (self.in_flight or []) + self.waiters
        records = self.sent + self.queued
        if self.retry_timer is not None:
            self.retry_timer.stop()
            self.retry_timer = None
        # The records of the commit in flight go again, before the queued
        # ones: should that commit fail, no plugin instance would learn of
        # it, and a new job-manager's load reads the log alone.  The KVS
        # applies this commit after that one, so the log gets them
        # whichever of the two fails.  A record read twice changes
        # nothing (a second hold of a held description, or release of a
        # gone one, is skipped).
        if records:
            self.compaction.appended(0)
            try:
                self.context.port.kvs_commit(
                    KEY, "".join(records), True, lambda error: None, sync=self.sync
                )
            except OSError as exc:
                self.context.port.log(
                    syslog.LOG_ERR, f"recording holds in {KEY}: {exc}"
                )
        self.queued, self.waiters, self.sent, self.in_flight = [], [], [], None
        return waiters, records

    def take_back(self, records):
        """The next plugin instance takes the log over: ``records`` go
        first in the next batch."""
        self.settled = False
        self.queued[:0] = records
        self.kick()


class Refusal:
    """In the place of a :class:`GroupCommit` while the log is of a newer
    format than this build reads: nothing is written, and every callback
    is answered, from a timer (as a commit would be), with an error
    saying ``why``."""

    def __init__(self, context, why):
        self.context = context
        self.error = OSError(errno.EPROTO, why)
        self.waiters = []
        self.timer = None
        self.commits = 0

    def add(self, line, callback):
        """``line`` is not written; ``callback`` gets the error."""
        if callback is not None:
            self.barrier(callback)

    def barrier(self, callback):
        """``callback`` gets the error."""
        self.waiters.append(callback)
        if self.timer is None:
            self.timer = self.context.port.timer(0.0, self._answer)

    def kick(self):
        """Nothing is sent."""

    def waiting(self):
        return len(self.waiters)

    def _answer(self):
        self.timer = None
        waiters, self.waiters = self.waiters, []
        for callback in waiters:
            try:
                callback(self.error)
            except Exception:  # noqa: BLE001 - one answer must not stop the rest
                self.context.port.log(
                    syslog.LOG_ERR, f"{KEY}: answering a request failed"
                )


def value_treeobj_error(treeobj):
    """None if ``treeobj`` (JSON text) is the tree object of a value,
    else what it is."""
    try:
        kind = json.loads(treeobj).get("type")
    except (TypeError, ValueError, AttributeError):
        return "not a tree object"
    if kind not in VALUE_TREEOBJS:
        return f"a tree object of type {kind!r}, not a value"
    return None


class _Together:
    """The context of :meth:`GroupCommit.together` (one per group
    commit, entered as often as nested): a class, as every rabbit job
    enters it, and a generator's context costs several times more."""

    __slots__ = ("commit",)

    def __init__(self, commit):
        self.commit = commit

    def __enter__(self):
        self.commit.gathering += 1

    def __exit__(self, *exc):
        commit = self.commit
        commit.gathering -= 1
        if not commit.gathering and commit.in_flight is None:
            commit.kick()
        return False
