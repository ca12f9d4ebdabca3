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
``epilog_gate.release {id, description, status[, exception]}``
    an active hold was released: its ``epilog-finish`` reaches the job's
    eventlog only with the job-manager's own (unsynced) event batch, so
    recovery finishes a hold that has this entry but no ``epilog-finish``;
    ``exception`` (``{type, severity, note}``) only if the releaser raised
    the job exception that goes with the end itself (a plugin of the gate,
    such as dws's ``dws-epilog-timeout``): recovery raises it again if the
    crash lost it too, rather than the gate's own

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
again, it is idempotent), the queued records are sent in one last
commit, after the records of the commit in flight again (should that
one fail, no plugin instance would learn of it; a record read twice
changes nothing), and a gate taken over by the next load writes every
record that was not confirmed again.

**Snapshots.**  Whenever the log has grown past :data:`MAX_BYTES` (or
past twice the last snapshot, if that is larger: many live holds), and
every :data:`MAX_APPENDS` appends while the last snapshot is smaller
than :data:`SEGMENT_FLOOR`, the log is replaced by a snapshot:
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

**Snapshots in parts.**  A snapshot of up to :data:`CHUNK_BYTES` bytes
(the ``snapshot-chunk`` option) replaces the value in one commit.  A
larger one would stall the job-manager while libkvs encodes it (some
100 ms a megabyte), so it is written in parts to :data:`SIDE_KEY`, one
part per commit, and then swapped in:

1. The first part is a put (whatever a crash left at :data:`SIDE_KEY` is
   overwritten), the next ones appends.  Each goes in the same
   transaction as the batch of that round, which is appended to
   :data:`KEY` as usual: answers keep flowing, and :data:`KEY` stays a
   complete log throughout.
2. The parts are the entries of the holds, job after job, read as each
   part is made (not all at the start, which alone would stall the
   job-manager), then the release entries of the start, then every
   record committed since the start (in order).  A job's entries thus
   show its holds at some moment after the start, and its records since
   the start follow them: replayed in time order (as recovery does) they
   leave the job's current holds, whatever happened in between.
3. Once all of that but the last :data:`CHUNK_BYTES` is written, the
   tree object of :data:`SIDE_KEY` is looked up and one synced
   transaction makes it the value of :data:`KEY`, appends the records not
   written yet and the current batch, and unlinks :data:`SIDE_KEY`.  The
   KVS applies a transaction's operations in order, and all of them or
   none.

A failed part, lookup or swap abandons the snapshot (the next commit
starts another); so do an unload and the start of a job's recovery (a
job being recovered has holds the gate does not know yet).  A crash at
any step leaves :data:`KEY` a complete log; the load never reads
:data:`SIDE_KEY`.

**Segments.**  Each append to a key adds a reference to its value, so
a key takes :data:`MAX_APPENDS` appends at most.  A snapshot every
:data:`MAX_APPENDS` appends would cost each append a share of every
live hold: with 10,000 of them, a megabyte written for 256 batches.  So
once the last snapshot is :data:`SEGMENT_FLOOR` bytes or more, a full
:data:`KEY` is made a *segment* instead: its tree object is looked up
(no commit in flight meanwhile) and one transaction makes it the value
of segment ``n`` (:func:`segment_key`) and puts the batch in its place.
No byte is written again: the segment refers to the same blobs.  Each
segment is in a directory of its own under :data:`SEGMENTS`, so that
the segments' directory holds a reference to each, not its list of
blobs; records are always appended to :data:`KEY`, so an append costs
the same with segments or without.  The log is segments 1, 2, ... then
:data:`KEY`; the load reads them in that order (and makes :data:`KEY` a
segment at its first batch: its appends are not known).  The next
snapshot comes by bytes, as above, or after :data:`MAX_SEGMENTS`
segments; it removes :data:`SEGMENTS` in its own transaction (``put``
and ``unlink``; in parts, the swap).  A failed lookup makes a snapshot
due instead; a failed transaction leaves :data:`KEY` as it was, made a
segment at the next batch.

This module is plain Python; it reaches the KVS through the gate's port
(``kvs_commit(key, text, append, callback, sync)``; for snapshots in
parts ``kvs_commit_ops(ops, callback, sync)`` and
``kvs_lookup_treeobj(key, callback)``).
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

#: Appends to one key of the log.  Each append adds a reference to the
#: key's value, which the KVS rewrites on every append.
MAX_APPENDS = 256

#: Bytes of the last snapshot past which a key that took
#: :data:`MAX_APPENDS` appends is followed by a new segment rather than
#: by a snapshot: a smaller snapshot costs less than a segment's keys.
SEGMENT_FLOOR = 128 * 1024

#: Segments at most between two snapshots: the directory of the
#: segments, rewritten on every append, holds a reference to each.
MAX_SEGMENTS = 64

#: Bytes of the value past which the next commit is a snapshot (unless
#: the last snapshot was more than half of that: then twice its size).
MAX_BYTES = 256 * 1024

#: Errors of an append to :data:`KEY` that say it is not a value (a
#: directory, a symlink): a snapshot replaces whatever is there.
NOT_A_VALUE = (errno.EISDIR, errno.ENOTDIR, errno.EOPNOTSUPP, errno.ELOOP)

#: Seconds a release entry is kept by snapshots: far longer than the
#: job-manager takes to send the event batch with its ``epilog-finish``.
RELEASE_GRACE = 2.0

#: Seconds after a failed commit before the records it carried are sent
#: again, if no new record sends them first: a KVS that keeps failing is
#: not retried in a loop, and records are not left waiting for traffic
#: that may never come.
RETRY_DELAY = 1.0

#: The KVS key a snapshot too large for one commit is written to, in
#: parts, before it replaces :data:`KEY`.
SIDE_KEY = KEY + "-next"

#: The KVS directory of the log's segments: segment ``n`` (1, 2, ...)
#: is the value :func:`segment_key` names, in a directory of its own, so
#: that a full segment is one reference in :data:`SEGMENTS`.
SEGMENTS = KEY + "-segments"

#: Bytes of a snapshot written in one commit (the ``snapshot-chunk``
#: option): libkvs encodes a commit in the job-manager's thread, some
#: 10 ms for this much on a loaded machine.
CHUNK_BYTES = 128 * 1024

#: Tree object types of a value (``FLUX_KVS_TREEOBJ`` lookups): what
#: :data:`SIDE_KEY` must hold to be swapped in.
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


def segment_key(n):
    """The key of segment ``n`` (1, 2, ...) of the log."""
    return f"{SEGMENTS}.{n}.log"


def read_segments(port):
    """The segments of the log found in the KVS: ``(segments, left)``,
    ``segments`` those read, in order, as ``(n, bytes)``; ``left`` what
    was left out, as ``(key, why, records)``: a name the gate never
    writes (``records`` False: it holds none of the log's records), or a
    segment that could not be read (``records`` True).  Raises OSError
    if :data:`SEGMENTS` cannot be listed (ENOTDIR: it is a value)."""
    names = port.kvs_dir(SEGMENTS)
    if names is None:
        return [], []
    numbers, left = [], []
    for name in names:
        if name.isdecimal() and name.isascii() and name[0] != "0":
            numbers.append(int(name))
        else:
            why = "not a segment of the log (the gate writes no such name)"
            left.append((f"{SEGMENTS}.{name}", why, False))
    segments = []
    for n in sorted(numbers):
        try:
            segments.append((n, port.kvs_get(segment_key(n)) or b""))
        except OSError as exc:
            left.append((segment_key(n), str(exc), True))
    return segments, left


def hold_entry(hold):
    """The log line that records ``hold``.  A snapshot writes the line of
    every hold again: the hold keeps the text of its time (``t_text``),
    as a float's ``repr`` costs more than the rest of the line, and not
    the line, which would cost every pending hold some 150 bytes."""
    jobid, description, t = hold.id, hold.description, hold.t_hold
    text = hold.t_text
    if text is None and type(t) is float and isfinite(t):
        text = hold.t_text = repr(t)
    point = hold.point
    if (
        text is not None
        and hold.timeout is None
        and type(jobid) is int
        and type(description) is str
        and _VERBATIM[description]
    ):
        # The common lines, written out (what _line writes of them).
        if point == EPILOG:
            return (
                f'{{"timestamp":{text}{_HOLD_CONTEXT}{jobid}'
                f'{_DESCRIPTION}{description}"}}}}\n'
            )
        if type(point) is str and _VERBATIM[point]:
            return (
                f'{{"timestamp":{text}{_HOLD_CONTEXT}{jobid}'
                f'{_DESCRIPTION}{description}{_POINT}{point}"}}}}\n'
            )
    context = {"id": jobid, "description": description}
    if hold.timeout is not None:
        context["timeout"] = hold.timeout
    if point != EPILOG:
        context["point"] = point
    return _line(t, HOLD_EVENT, context, text)


def cancel_entry(hold, timestamp, text=None):
    """The log line that records the cancellation of pending ``hold``;
    ``text``: ``repr(timestamp)`` if the caller has it (``port.stamp()``)."""
    return _line(
        timestamp,
        CANCEL_EVENT,
        {"id": hold.id, "description": hold.description},
        text,
    )


def release_entry(hold, status, timestamp, text=None, exception=None):
    """The log line that records the release of active ``hold``;
    ``text``: ``repr(timestamp)`` if the caller has it (``port.stamp()``);
    ``exception``: the job exception the releaser raised with it."""
    jobid, description = hold.id, hold.description
    if exception is not None:
        context = {"id": jobid, "description": description, "status": status}
        context["exception"] = exception
        return _json_line(timestamp, RELEASE_EVENT, context)
    if (
        type(jobid) is int
        and type(status) is int
        and type(description) is str
        and _VERBATIM[description]
        and type(timestamp) is float
        and isfinite(timestamp)
    ):
        # One per release: written out (what _line writes of it).
        return (
            f'{{"timestamp":{text or repr(timestamp)}{_RELEASE_CONTEXT}{jobid}'
            f"{_DESCRIPTION}{description}{_STATUS}{status}}}}}\n"
        )
    return _line(
        timestamp,
        RELEASE_EVENT,
        {"id": jobid, "description": description, "status": status},
        text,
    )


#: The fixed parts of the lines written out by hold_entry and release_entry.
_HOLD_CONTEXT = f',"name":"{HOLD_EVENT}","context":{{"id":'
_RELEASE_CONTEXT = f',"name":"{RELEASE_EVENT}","context":{{"id":'
_DESCRIPTION = ',"description":"'
_STATUS = '","status":'
_POINT = '","point":"'


def _line(timestamp, name, context, stamp=None):
    """``json.dumps`` of the entry, compact, newline-terminated: written
    out directly when every value needs no escaping (a log line per hold
    and per release, in the job-manager's thread: the test of each value
    is inlined, as a call per value costs more than the writing), else by
    json.  ``stamp``: ``repr(timestamp)`` if the caller has it already."""
    parts = []
    for key, value in context.items():
        if isinstance(value, str):
            if not _VERBATIM[value]:
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
        f'{{"timestamp":{stamp or repr(timestamp)},"name":"{name}",'
        f'"context":{{{",".join(parts)}}}}}\n'
    )


def _json_line(timestamp, name, context):
    entry = {"timestamp": timestamp, "name": name, "context": context}
    return json.dumps(entry, separators=(",", ":")) + "\n"


class Recovering(Exception):
    """A snapshot met a job whose holds are being recovered."""


def _recovering_error():
    """The answer to a snapshot asked for while a job is recovered."""
    return OSError(errno.EAGAIN, "a job's holds are being recovered: try again")


class Snapshot:
    """The content of one snapshot, made part after part.

    ``jobs`` are the job records at the start, read in turn as parts are
    taken (a job no longer in ``table``, or replaced there, is skipped:
    what became of its holds is in the records since); ``releases`` the
    release entries kept at the start; :meth:`committed` adds the
    records committed since, which follow.
    """

    def __init__(self, table, releases):
        self.table = table
        self.jobs = list(table.values())
        self.next = 0
        self.releases = releases
        #: Records committed since the start, not in a part yet.
        self.since = deque()
        self.since_bytes = 0
        #: Parts written to :data:`SIDE_KEY`, and bytes of the snapshot.
        self.parts = 0
        self.written = 0
        #: The operations of the part not written yet, and of the swap
        #: (each sent again as it was if it must go without sync).
        self.part = None
        self.swap = None
        #: The records of the first round's batch were made before the
        #: start: the snapshot has them already.
        self.covered = True

    def take(self, limit):
        """Lines of the next part: ``limit`` bytes or a line more, fewer
        only at the end.  Raises :class:`Recovering` if a job's holds are
        not all known."""
        lines = []
        size = 0
        jobs, table = self.jobs, self.table
        while size < limit and self.next < len(jobs):
            job = jobs[self.next]
            self.next += 1
            if job.recovery is not None and job.recovery.active:
                raise Recovering()
            if table.get(job.id) is not job:
                continue
            for hold in job.holds.values():
                line = hold_entry(hold)
                lines.append(line)
                size += len(line)
        if self.next == len(jobs):
            while size < limit and self.releases:
                line = self.releases.popleft()
                lines.append(line)
                size += len(line)
            while size < limit and self.since:
                line = self.since.popleft()
                lines.append(line)
                size += len(line)
                self.since_bytes -= len(line)
        self.size = size
        return lines

    def content_left(self):
        """True while the holds or releases of the start are not all
        taken."""
        return self.next < len(self.jobs) or bool(self.releases)

    def committed(self, lines):
        """A part was written, with the records ``lines`` appended to the
        log in the same transaction."""
        self.parts += 1
        self.written += self.size
        self.part = None
        if self.covered:
            self.covered = False
            return
        self.since.extend(lines)
        self.since_bytes += sum(map(len, lines))


class HoldLog:
    """Records of holds, group-committed to :data:`KEY` with a sync.

    ``jobs`` is the gate's job table: its job records' holds are what a
    snapshot is made of.  Each ``callback`` given is called once, as
    ``callback(error)``: None once the record is durable, else an OSError.
    """

    def __init__(self, port, jobs):
        self.port = port
        self.jobs = jobs
        #: Every current hold, or None while some are being recovered.
        self.holds = jobs.holds
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
        # Appends to KEY; segments made of it since the last snapshot,
        # and whether SEGMENTS may hold any (the next snapshot removes
        # them); the segment being made (see _rotate), or None.
        self.appends = 0
        self.segment = 0
        self.segments_left = False
        self.rotation = None
        self.commits = 0
        # Bytes of the value as this gate wrote it (or read it at load),
        # and of the last snapshot.
        self.size = 0
        # The value found does not end its last line (see found()).
        self.ragged = False
        self.snapshot_size = 0
        # The next commit must replace the key: an append found no value.
        self.replace = False
        # The snapshot being written in parts (see Snapshot), or None;
        # bytes of a part.
        self.snap = None
        self.chunk = CHUNK_BYTES
        # SIDE_KEY may hold parts of a snapshot this gate gave up: the
        # next snapshot, even in one commit, removes them.
        self.side_left = False
        #: Called as ``on_snapshot()`` each time a snapshot has replaced
        #: the log or a segment was made: the holds of that moment have
        #: outlived a log's worth of records (the plugin's memory
        #: policy); or None.
        self.on_snapshot = None
        # Armed after a failed commit left records queued (RETRY_DELAY).
        self.retry = None
        # Callbacks of the snapshots asked for (compact), answered once
        # one has replaced the log or was given up; those served by the
        # snapshot that just replaced the log.
        self.compacting = []
        self.served = []

    # Records

    def hold(self, hold, callback=None):
        """``hold`` was registered."""
        self._record(hold_entry(hold), callback)

    def cancel(self, hold, callback=None):
        """Pending ``hold`` was released."""
        self._record(cancel_entry(hold, *self.port.stamp()), callback)

    def release(self, hold, status, callback=None, exception=None):
        """Active ``hold`` was released with ``status`` (and ``exception``,
        the job exception its releaser raised, see release_entry)."""
        now, text = self.port.stamp()
        line = release_entry(hold, status, now, text, exception)
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
        elif self.inflight is not None and self.sent:
            self.inflight.append(callback)
        else:
            # (A part of a snapshot in flight carries no record.)
            callback(None)

    def compact(self, callback):
        """Replace the log with a snapshot now, its segments too; call
        ``callback(error)`` once one has (None), or was given up (an
        OSError; EAGAIN while a job's holds are being recovered).  The
        requests made meanwhile share it."""
        self.compacting.append(callback)
        # With the queued records, if any, or on its own.
        self._kick()

    def _compacted(self, error):
        """Answer the snapshots asked for."""
        waiting, self.compacting = self.compacting, []
        self._answer(waiting, error)

    def _record(self, line, callback):
        self.lines.append(line)
        if callback is not None:
            self.waiters.append(callback)
        if self.inflight is None:
            self._kick()

    # Commits

    def _kick(self):
        """Send the next batch (or the next part of a snapshot), unless a
        commit is in flight."""
        if self.inflight is not None or not (
            self.lines or self.snap or self.compacting
        ):
            return
        self._take_batch()
        if (
            self.snap is None
            and not self.replace
            and self.appends < MAX_APPENDS
            and self.size < MAX_BYTES
            and not self.compacting
        ):
            # No snapshot can be due (what _due() decides, the common
            # case tested first): every batch of records comes here.
            self._send_batch()
            return
        self._send()

    def _send(self):
        if self.snap is None and self._due():
            text = self._begin_snapshot()
            if text is not None:
                self._send_whole(text)
                return
        if self.snap is not None:
            self._send_part()
        elif self.sent and self.appends >= MAX_APPENDS:
            # KEY is full, and _due() found no snapshot due.
            self._rotate()
        else:
            self._send_batch()

    def _send_batch(self):
        if not self.sent:
            # Only a snapshot, given up, was to be sent.
            waiters, self.inflight = self.inflight, None
            self._answer(waiters or (), None)
            return
        text = "".join(self.sent)
        self.appends += 1
        self.size += len(text)
        self._send_text(KEY, text, True)

    # Segments

    def _rotate(self):
        """KEY took :data:`MAX_APPENDS` appends: look its tree object up,
        to make it the next segment (the batch goes with it)."""
        rotation = self.rotation = object()
        self._look_up(
            KEY, lambda treeobj, error: self._found_key(rotation, treeobj, error)
        )

    def _look_up(self, key, then):
        """Look ``key``'s tree object up, then call ``then(treeobj,
        error)``.  The lookup holds the place of a commit: none is sent
        meanwhile, and the batch waits."""
        self.lines[:0], self.sent = self.sent, []
        self.waiters[:0], self.inflight = self.inflight, []
        try:
            self.port.kvs_lookup_treeobj(key, then)
        except OSError as exc:
            then(None, exc)

    def _take_batch(self):
        """The queued records and their callbacks go in the next commit."""
        self.sent, self.lines = self.lines, []
        if self.ragged:
            # An append would run into the value's last line (a blank
            # line is no entry).
            self.ragged = False
            self.sent.insert(0, "\n")
        self.inflight, self.waiters = self.waiters, []

    def _found_key(self, rotation, treeobj, error):
        if rotation is not self.rotation:
            return
        # The lookup held the place of a commit.
        self.rotation = self.inflight = None
        if error is None:
            error = _value_treeobj_error(treeobj)
        else:
            error = "" if error.errno == errno.ENOENT else error.strerror
        if error is not None:
            # Appended to as it is meanwhile (no lookup again); if it is
            # there at all (ENOENT: nothing to make a segment of), a
            # snapshot replaces the log instead.
            self.appends = 0
            if error:
                self.port.log(
                    syslog.LOG_ERR,
                    f"{KEY}: making it a segment: {error}: "
                    "a snapshot replaces the log instead",
                )
                self.size = max(self.size, MAX_BYTES, 2 * self.snapshot_size)
        if error is not None or not self.lines:
            self._kick()
            return
        self._take_batch()
        # Counted as made from now on, whatever the outcome (it may never
        # be known, should the plugin be unloaded): a number is never
        # used twice, and the next snapshot removes the segments.
        self.segment += 1
        self.segments_left = True
        batch = "".join(self.sent)
        self.appends = 1
        self.size += len(batch)
        self.commits += 1
        # In this order: KEY's value becomes the segment, the batch KEY's.
        ops = [("put_treeobj", segment_key(self.segment), treeobj), ("put", KEY, batch)]
        self._commit_ops(ops, self._rotated, self.sync)

    def _rotated(self, error):
        if error is not None:
            # KEY is as it was: made a segment at the next batch.
            self.appends = MAX_APPENDS
        self._committed(error)
        if error is None:
            self._tell()

    def _send_text(self, key, text, append):
        callback = self._committed
        if not append:
            self.appends = 0
            self.size = self.snapshot_size = len(text)
            callback = self._snapshot_committed
        self.commits += 1
        try:
            self.port.kvs_commit(key, text, append, callback, sync=self.sync)
        except OSError as exc:
            self._committed(exc)

    def _snapshot_committed(self, error):
        if error is None:
            self._replaced()
        elif error.errno != errno.ENOSYS or not self.sync:
            # (Without a backing store it is sent again, unsynced.)
            self._compacted(error)
        self._committed(error)
        if error is None:
            self._snapshot_done()

    def _replaced(self):
        """A snapshot is the whole log: neither SEGMENTS nor SIDE_KEY
        holds anything, and no snapshot asked for is due any more."""
        self.segment = 0
        self.segments_left = self.side_left = False
        # Served: no other snapshot is due for them.
        self.served, self.compacting = self.compacting, []

    def _send_whole(self, text):
        """Send a snapshot in one commit."""
        ops = [("put", KEY, text)]
        if self.side_left:
            ops.append(("unlink", SIDE_KEY, None))
        if self.segments_left:
            ops.append(("unlink", SEGMENTS, None))
        if len(ops) == 1:
            self._send_text(KEY, text, False)
            return
        self.appends = 0
        self.size = self.snapshot_size = len(text)
        self.commits += 1
        self._commit_ops(ops, self._snapshot_committed, self.sync)

    def _due(self):
        """True if the next commit should be a snapshot: asked for, by
        bytes (at most as many appended since the last one as it took),
        or once KEY took :data:`MAX_APPENDS` appends (the KVS rewrites a
        value's references on every append) if the snapshot is small or
        :data:`MAX_SEGMENTS` segments follow it; else a full KEY is made
        a segment."""
        if (
            self.replace
            or self.compacting
            or self.size >= max(MAX_BYTES, 2 * self.snapshot_size)
        ):
            return True
        return self.appends >= MAX_APPENDS and (
            self.snapshot_size < SEGMENT_FLOOR or self.segment >= MAX_SEGMENTS
        )

    # Snapshots in parts

    def _begin_snapshot(self):
        """Start a snapshot.  Return its text if it fits one commit (or
        the key must be replaced at once); else return None, and either
        :attr:`snap` is set (its first part is next) or a job is being
        recovered (no snapshot now)."""
        self._forget_releases(self.port.now())
        snap = Snapshot(self.jobs, deque(line for _, line in self.recent))
        limit = float("inf") if self.replace else self.chunk
        try:
            lines = snap.take(limit)
        except Recovering:
            self._compacted(_recovering_error())
            return None
        if not snap.content_left():
            # Never empty: an empty value reads back as NULL.
            return "".join(lines) or "\n"
        # A put: whatever a crash left there is replaced.
        snap.part = [("put", SIDE_KEY, "".join(lines))]
        self.snap = snap
        return None

    def _send_part(self):
        """Send the snapshot's next transaction: a part and the batch,
        or the swap; or look the parts up first."""
        snap = self.snap
        if snap.swap is not None:
            # Sent again (without sync).
            self._send_swap(snap)
            return
        if snap.part is None:
            if not snap.content_left() and snap.since_bytes <= self.chunk:
                self._look_up_parts(snap)
                return
            try:
                snap.part = [("append", SIDE_KEY, "".join(snap.take(self.chunk)))]
            except Recovering:
                self._abandon("a job is being recovered")
                self._send_batch()
                return
        ops = list(snap.part)
        if self.sent:
            batch = "".join(self.sent)
            # To KEY, full or not: the swap replaces it.
            ops.append(("append", KEY, batch))
            self.appends += 1
            self.size += len(batch)
        self.commits += 1
        self._commit_ops(
            ops,
            lambda error: self._part_committed(snap, error),
            # Only the swap must be checkpointed, and the records.
            self.sync and bool(self.sent),
        )

    def _commit_ops(self, ops, callback, sync):
        try:
            self.port.kvs_commit_ops(ops, callback, sync=sync)
        except OSError as exc:
            callback(exc)

    def _part_committed(self, snap, error):
        if snap is self.snap:
            if error is None:
                snap.committed(self.sent)
            elif not (error.errno == errno.ENOSYS and self.sync):
                self._abandon(f"writing {SIDE_KEY}: {error.strerror}")
        self._committed(error)

    def _look_up_parts(self, snap):
        """Every part is written: look up :data:`SIDE_KEY`'s tree object
        for the swap."""
        self._look_up(
            SIDE_KEY, lambda treeobj, error: self._found_parts(snap, treeobj, error)
        )

    def _found_parts(self, snap, treeobj, error):
        # The lookup held the place of a commit.
        self.inflight = None
        if snap is not self.snap:
            self._kick()
            return
        if error is None:
            error = _value_treeobj_error(treeobj)
        if error is not None:
            self._abandon(f"looking {SIDE_KEY} up: {error}")
            self._kick()
            return
        self._take_batch()
        tail = "".join(list(snap.since) + self.sent)
        # In this order: the parts become the log, the rest follows.
        snap.swap = [("put_treeobj", KEY, treeobj)]
        if tail:
            snap.swap.append(("append", KEY, tail))
        snap.swap.append(("unlink", SIDE_KEY, None))
        if self.segments_left:
            snap.swap.append(("unlink", SEGMENTS, None))
        snap.written += len(tail)
        self._send_swap(snap)

    def _send_swap(self, snap):
        self.commits += 1
        self._commit_ops(snap.swap, lambda error: self._swapped(snap, error), self.sync)

    def _swapped(self, snap, error):
        if error is None:
            if snap is self.snap:
                self.snap = None
            self._replaced()
            self.appends = 0
            self.size = self.snapshot_size = snap.written
        elif snap is self.snap and not (error.errno == errno.ENOSYS and self.sync):
            self._abandon(f"swapping it in: {error.strerror}")
        self._committed(error)
        if error is None:
            self._snapshot_done()

    def _snapshot_done(self):
        """A snapshot replaced the log: answer those who asked for one,
        tell :attr:`on_snapshot`."""
        if self.served:
            served, self.served = self.served, []
            self._answer(served, None)
        self._tell()

    def _tell(self):
        """Call :attr:`on_snapshot`, if set."""
        if self.on_snapshot is None:
            return
        try:
            self.on_snapshot()
        except Exception as exc:  # noqa: BLE001 - the log's work is done
            self.port.log(syslog.LOG_ERR, f"{KEY}: after a snapshot: {exc}")

    def _abandon(self, why):
        """Give the snapshot in progress up: the log stays as it is."""
        self.snap = None
        self.side_left = True
        self.port.log(syslog.LOG_ERR, f"{KEY}: snapshot given up: {why}")
        self._compacted(OSError(errno.EAGAIN, f"snapshot given up: {why}"))

    def recovering(self):
        """A job's holds are being rebuilt from the log: a snapshot in
        progress would leave them out."""
        if self.snap is not None:
            self.snap = None
            self.side_left = True
            self._compacted(_recovering_error())

    def _forget_releases(self, now):
        """Drop the release entries that snapshots no longer need."""
        horizon = now - RELEASE_GRACE
        while self.recent and self.recent[0][0] < horizon:
            self.recent.popleft()

    def _committed(self, error):
        if error is None and not self.replace:
            # A batch committed (every batch): nothing to repair or log.
            waiters, self.inflight = self.inflight, None
            self.sent = []
            if self.lines or self.snap or self.compacting:
                self._kick()
            self._answer(waiters or (), None)
            return
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
            # Written again with the next commit, or after RETRY_DELAY;
            # not sent now, so that a KVS that keeps failing is not
            # retried in a loop.
            self.lines[:0] = self.sent
            error = OSError(
                error.errno or errno.EIO, f"recording in {KEY} failed: {error.strerror}"
            )
        self.sent = []
        # The next batch goes first: its sync overlaps these answers.
        if fresh:
            self._kick()
        elif self.lines and self.retry is None:
            self.retry = self.port.timer(RETRY_DELAY, self._retry)
        self._answer(waiters or (), error)

    def _retry(self):
        self.retry = None
        self._kick()

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
        """The plugin is going away: send what is queued, with the records
        of the commit in flight again, answer every waiting request with
        :class:`NotConfirmed`, and keep the records not known to be
        durable for the next plugin instance."""
        waiters = (self.inflight or []) + self.waiters
        self.unconfirmed = self.sent + self.lines
        # A lookup for a segment is answered to nobody.
        self.rotation = None
        if self.retry is not None:
            self.retry.stop()
            self.retry = None
        # Whatever of it the KVS carries out, the log stays complete; the
        # next instance starts another.
        if self.snap is not None:
            self.snap = None
            self.side_left = True
        # The records of the commit in flight go again, before the queued
        # ones: should that commit fail, no plugin instance would learn of
        # it, and a new job-manager's load reads the log alone.  The KVS
        # applies this commit after that one, so the log gets them
        # whichever of the two fails.  A record read twice changes
        # nothing (a second hold of a held description, or release of a
        # gone one, is skipped).
        if self.unconfirmed:
            self.appends += 1
            try:
                self.port.kvs_commit(
                    KEY,
                    "".join(self.unconfirmed),
                    True,
                    lambda error: None,
                    sync=self.sync,
                )
            except OSError as exc:
                self.port.log(syslog.LOG_ERR, f"recording holds in {KEY}: {exc}")
        self.lines, self.waiters, self.sent, self.inflight = [], [], [], None
        self._answer(waiters, NotConfirmed())
        self._compacted(NotConfirmed())

    def found(self, size, base, last, ragged=False):
        """The load found the log ``size`` bytes long, ``base`` of them
        in its first value, with segments up to ``last`` (0: none), or
        segments it could not read (``last`` is None): those are
        replaced by a snapshot at the next commit.  ``ragged``: the
        value does not end its last line (it was written by another
        hand); the next text sent ends it first."""
        self.size = size
        self.ragged = ragged
        if last is None:
            self.segments_left = True
            self.size = max(size, MAX_BYTES)
        elif last > 0:
            # The first segment begins with the last snapshot.  KEY's
            # appends are not known: it is made a segment at once.
            self.snapshot_size = base
            self.segment = last
            self.segments_left = True
            self.appends = MAX_APPENDS

    def resume(self, port):
        """The next plugin instance takes the log over: write again what
        the previous one could not confirm (entries are idempotent on
        replay)."""
        self.port = port
        self.lines[:0], self.unconfirmed = self.unconfirmed, []
        self._kick()


def _value_treeobj_error(treeobj):
    """None if ``treeobj`` (JSON text) is the tree object of a value,
    else what it is."""
    try:
        kind = json.loads(treeobj).get("type")
    except (TypeError, ValueError, AttributeError):
        return "not a tree object"
    if kind not in VALUE_TREEOBJS:
        return f"a tree object of type {kind!r}, not a value"
    return None
