"""The durable record of holds: one KVS key, written in synced group commits.

An acknowledged ``hold`` or ``release`` must survive a crash of the
broker.  A KVS commit is not enough for that: after a SIGKILL the
instance restarts from its last KVS *checkpoint*, and the job-manager's
own events (``epilog-start``, ``epilog-finish``) are committed without
one, in batches.  So every hold and every release is recorded here, in
an eventlog of the gate's own, the KVS key :data:`KEY`, committed with
``FLUX_KVS_SYNC`` (the content store is flushed and the new root
checkpointed before the commit answers), and a request is answered only
once the commit that carries its record has succeeded.

Entries (RFC 18 eventlog lines):

``epilog_gate.hold {id, description[, timeout][, point]}``
    a hold was registered (its timestamp is the hold's ``t_hold``); every
    hold gets one, also a hold that becomes active at once, so the log
    names every job that has holds; ``point`` only for a prolog or a
    dependency hold (the latter written once its ``dependency-add`` is
    sent, see :mod:`flux_epilog_gate.gate.depend`)
``epilog_gate.cancel {id, description}``
    a pending hold was released before the job reached its epilog point
``epilog_gate.release {id, description, status}``
    an active hold was released: its ``epilog-finish`` reaches the job's
    eventlog only with the job-manager's own (unsynced) event batch, so
    recovery finishes a hold that has this entry but no ``epilog-finish``

An active hold is also told by the ``epilog-start`` the gate posted,
marked with :data:`MARKER` and the hold's timeout: that is where its
``t_start`` comes from.  A ``released: false`` answer and a duplicate
hold record nothing, but are answered only once every record already
queued or in flight is durable, so no answer runs ahead of the log.

**In force at once, answered once durable.**  A request takes effect
when it arrives (a hold must already hold a job cancelled a moment
later; a pending hold cancelled must not become active meanwhile) and is
recorded then; only its answer waits.  A request not answered yet when
the broker dies may or may not have taken effect.

**Group commit.**  At most one commit is in flight.  Records made
meanwhile are queued and all go into the next commit, which is sent as
soon as the one in flight has answered; the answers of a batch are sent
when its commit succeeds.  A pipelining client, or many clients, thus
share one sync among all the requests of a round trip to the KVS.

**A failed commit** is logged; every request of its batch is answered
with the error.  Where that can be undone, the gate undoes it: a hold
created by a failed request is withdrawn (see
:meth:`flux_epilog_gate.gate.Gate.hold`).  A release cannot be undone
(its ``epilog-finish`` is posted already); it is answered with the
error.  The failed batch's records are sent again with the next commit,
so the log stays a faithful history.

**Unload.**  A commit already sent is carried out by the KVS whatever
becomes of the plugin; the requests still waiting are answered with
:class:`NotConfirmed` (the request may have taken effect: send it
again, it is idempotent), the queued records are sent, and a gate taken
over by the next load writes every record that was not confirmed again.

**Snapshots.**  Every :data:`MAX_APPENDS` appends, and whenever the
value has grown past :data:`MAX_BYTES` (or past twice the last snapshot,
if that is larger: many live holds), the log is replaced by a snapshot:
a hold entry for every current hold, and the release entries of the last
:data:`RELEASE_GRACE` seconds.  The value thus stays under the larger of
:data:`MAX_BYTES` and twice what the live holds take, plus one batch,
however many holds come and go.  The job-manager
sends the batch that carries a release's ``epilog-finish`` within its
event batch timeout (10 ms); a synced commit sent after that checkpoints
it too, since the KVS applies one sender's commits in order.  Older
release entries are no longer needed, nor are cancel entries (the
snapshot drops the cancelled hold's entry with them).  A snapshot with
nothing to keep writes a blank line: flux-core reads an empty value back
as no value at all.

This module is plain Python; it reaches the KVS through the gate's port
(``kvs_commit(key, text, append, callback, sync)``).
"""

import errno
import json
import syslog
from collections import deque
from math import isfinite

from .holds import _VERBATIM, CANCEL_EVENT, EPILOG, HOLD_EVENT, RELEASE_EVENT
from .logparse import ENTRY_NAMES, parse  # noqa: F401 - the log's reader

#: The KVS key of the log.
KEY = "epilog-gate.holds"

#: Key of the ``epilog-start`` context that marks the gate's own: with it,
#: an active hold is recovered from the job's eventlog alone.
MARKER = "epilog_gate"

#: Appends between snapshots.  Each append adds a reference to the key's
#: value, which the KVS rewrites on every append.
MAX_APPENDS = 256

#: Bytes of the value past which the next commit is a snapshot (unless
#: the last snapshot was more than half of that: then twice its size).
MAX_BYTES = 256 * 1024

#: Errors of an append to :data:`KEY` that say it is not a value (a
#: directory, a symlink): a snapshot replaces whatever is there.
NOT_A_VALUE = (errno.EISDIR, errno.ENOTDIR, errno.EOPNOTSUPP, errno.ELOOP)

#: Seconds a release entry is kept by snapshots: far longer than the
#: job-manager takes to send the event batch with its ``epilog-finish``.
RELEASE_GRACE = 2.0


class NotConfirmed(OSError):
    """A record whose commit was sent, but whose outcome this plugin
    instance will not learn (it is being unloaded)."""

    def __init__(self):
        super().__init__(
            errno.EAGAIN,
            "epilog-gate was unloaded before the record was committed: "
            "the request may have taken effect, send it again",
        )


def hold_entry(hold):
    """The log line that records ``hold``.  Kept on the hold: a snapshot
    writes the line of every hold, and making tens of thousands of them
    at once would stall the job-manager."""
    if hold.entry is None:
        context = {"id": hold.id, "description": hold.description}
        if hold.timeout is not None:
            context["timeout"] = hold.timeout
        if hold.point != EPILOG:
            context["point"] = hold.point
        hold.entry = _line(hold.t_hold, HOLD_EVENT, context)
    return hold.entry


def cancel_entry(hold, timestamp):
    """The log line that records the cancellation of pending ``hold``."""
    return _line(
        timestamp, CANCEL_EVENT, {"id": hold.id, "description": hold.description}
    )


def release_entry(hold, status, timestamp):
    """The log line that records the release of active ``hold``."""
    return _line(
        timestamp,
        RELEASE_EVENT,
        {"id": hold.id, "description": hold.description, "status": status},
    )


def _line(timestamp, name, context):
    """``json.dumps`` of the entry, compact, newline-terminated: written
    out directly when every value needs no escaping (a log line per hold
    and per release, in the job-manager's thread: the test of each value
    is inlined, as a call per value costs more than the writing), else by
    json."""
    parts = []
    for key, value in context.items():
        if isinstance(value, str):
            if not _VERBATIM(value):
                return _json_line(timestamp, name, context)
            text = f'"{str.__str__(value)}"'
        elif type(value) is int or (type(value) is float and isfinite(value)):
            text = repr(value)
        else:
            return _json_line(timestamp, name, context)
        parts.append(f'"{key}":{text}')
    if type(timestamp) is not float or not isfinite(timestamp):
        return _json_line(timestamp, name, context)
    return (
        f'{{"timestamp":{timestamp!r},"name":"{name}",'
        f'"context":{{{",".join(parts)}}}}}\n'
    )


def _json_line(timestamp, name, context):
    entry = {"timestamp": timestamp, "name": name, "context": context}
    return json.dumps(entry, separators=(",", ":")) + "\n"


class HoldLog:
    """Records of holds, group-committed to :data:`KEY` with a sync.

    ``holds`` is a callable that returns every current hold for a
    snapshot, or None while a snapshot would miss some (holds still being
    recovered from the log).  Each ``callback`` given is called once, as
    ``callback(error)``: None once the record is durable, else an OSError.
    """

    def __init__(self, port, holds):
        self.port = port
        self.holds = holds
        # The next batch: its lines and the callbacks waiting on it.
        self.lines = []
        self.waiters = []
        # The commit in flight: its lines and callbacks (None: no commit).
        self.sent = []
        self.inflight = None
        # Release entries a snapshot keeps: (timestamp, line).
        self.recent = deque()
        # Records a previous plugin instance could not confirm.
        self.unconfirmed = []
        self.sync = True
        self.appends = 0
        self.commits = 0
        # Bytes of the value as this gate wrote it (or read it at load),
        # and of the last snapshot.
        self.size = 0
        self.snapshot_size = 0
        # The next commit must replace the key: an append found no value.
        self.replace = False

    # Records

    def hold(self, hold, callback=None):
        """``hold`` was registered."""
        self._record(hold_entry(hold), callback)

    def cancel(self, hold, callback=None):
        """Pending ``hold`` was released."""
        self._record(cancel_entry(hold, self.port.now()), callback)

    def release(self, hold, status, callback=None):
        """Active ``hold`` was released with ``status``."""
        now = self.port.now()
        line = release_entry(hold, status, now)
        self._forget_releases(now)
        self.recent.append((now, line))
        self._record(line, callback)

    def waiting(self):
        """How many callbacks wait for a commit (queued or in flight)."""
        return len(self.waiters) + len(self.inflight or ())

    def barrier(self, callback):
        """Call ``callback`` once every record made so far is durable."""
        if self.lines:
            self.waiters.append(callback)
            self._kick()
        elif self.inflight is not None:
            self.inflight.append(callback)
        else:
            callback(None)

    def _record(self, line, callback):
        self.lines.append(line)
        if callback is not None:
            self.waiters.append(callback)
        self._kick()

    # Commits

    def _kick(self):
        """Send the next batch, unless a commit is in flight."""
        if self.inflight is not None or not self.lines:
            return
        self.sent, self.lines = self.lines, []
        self.inflight, self.waiters = self.waiters, []
        self._send()

    def _send(self):
        live = self.holds() if self._due() else None
        if live is not None:
            text, append = self._snapshot(live), False
            self.appends = 0
            self.size = self.snapshot_size = len(text)
        else:
            text, append = "".join(self.sent), True
            self.appends += 1
            self.size += len(text)
        self.commits += 1
        try:
            self.port.kvs_commit(KEY, text, append, self._committed, sync=self.sync)
        except OSError as exc:
            self._committed(exc)

    def _due(self):
        """True if the next commit should be a snapshot (by count or by
        bytes: the KVS rewrites the value's references on every append)."""
        return (
            self.replace
            or self.appends >= MAX_APPENDS
            or self.size >= max(MAX_BYTES, 2 * self.snapshot_size)
        )

    def _forget_releases(self, now):
        """Drop the release entries that snapshots no longer need."""
        horizon = now - RELEASE_GRACE
        while self.recent and self.recent[0][0] < horizon:
            self.recent.popleft()

    def _snapshot(self, live):
        self._forget_releases(self.port.now())
        releases = [line for _, line in self.recent]
        # Never empty: an empty value reads back as NULL.
        return "".join([hold_entry(hold) for hold in live] + releases) or "\n"

    def _committed(self, error):
        if error is not None and error.errno == errno.ENOSYS and self.sync:
            # No content backing store: nothing can be checkpointed.
            self.sync = False
            self.port.log(
                syslog.LOG_ERR,
                f"{KEY}: the KVS cannot sync ({error.strerror}): "
                "holds are recorded without a checkpoint",
            )
            self._send()
            return
        if self._repairs(error):
            return
        self.replace = False
        waiters, self.inflight = self.inflight, None
        fresh = error is None or bool(self.lines)
        if error is not None:
            self.port.log(syslog.LOG_ERR, f"recording holds in {KEY}: {error}")
            # Written again with the next commit; not sent now, so that a
            # KVS that keeps failing is not retried in a loop.
            self.lines[:0] = self.sent
            error = OSError(
                error.errno or errno.EIO, f"recording in {KEY} failed: {error.strerror}"
            )
        self.sent = []
        # The next batch goes first: its sync overlaps these answers.
        if fresh:
            self._kick()
        self._answer(waiters or (), error)

    def _repairs(self, error):
        """If an append failed because the key is not a value, send a
        snapshot in its place, once, for the same waiters: the gate's
        view is complete, so nothing the key held is needed."""
        if error is None or error.errno not in NOT_A_VALUE or self.replace:
            return False
        if self.holds() is None:
            return False
        self.port.log(
            syslog.LOG_ERR,
            f"{KEY} is not a value ({error.strerror}): "
            "replacing it with a snapshot of the current holds",
        )
        self.replace = True
        self._send()
        return True

    def _answer(self, waiters, error):
        for callback in waiters:
            try:
                callback(error)
            except Exception:  # noqa: BLE001 - one answer must not stop the rest
                self.port.log(syslog.LOG_ERR, f"{KEY}: answering a request failed")

    # Plugin unload and load

    def suspend(self):
        """The plugin is going away: send what is queued, answer every
        waiting request with :class:`NotConfirmed`, and keep the records
        not known to be durable for the next plugin instance."""
        waiters = (self.inflight or []) + self.waiters
        self.unconfirmed = self.sent + self.lines
        if self.lines:
            try:
                self.port.kvs_commit(
                    KEY, "".join(self.lines), True, lambda error: None, sync=self.sync
                )
            except OSError as exc:
                self.port.log(syslog.LOG_ERR, f"recording holds in {KEY}: {exc}")
        self.lines, self.waiters, self.sent, self.inflight = [], [], [], None
        self._answer(waiters, NotConfirmed())

    def resume(self, port):
        """The next plugin instance takes the log over: write again what
        the previous one could not confirm (entries are idempotent on
        replay)."""
        self.port = port
        self.lines[:0], self.unconfirmed = self.unconfirmed, []
        self._kick()
