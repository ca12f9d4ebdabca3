"""Snapshots of the hold log, in one commit or in parts.

A snapshot replaces the log with a hold entry for every current hold,
and the release entries of the last :data:`RELEASE_GRACE` seconds.  The
job-manager sends the batch that carries a release's ``epilog-finish``
within its event batch timeout (10 ms); a synced commit sent after that
checkpoints it too, since the KVS applies one sender's commits in order.
Older release entries are no longer needed, nor are cancel entries (the
snapshot drops the cancelled hold's entry with them).  Each begins with
the log's format (:func:`~flux_epilog_gate.gate.logentries.format_entry`),
so a snapshot with nothing to keep is never empty (flux-core reads an
empty value back as no value at all).  When one is due is the policy's
(:mod:`flux_epilog_gate.gate.holdlog`).

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
:data:`SIDE_KEY`.  A snapshot removes the segments
(:data:`~flux_epilog_gate.gate.segments.SEGMENTS`) in its own
transaction (``put`` and ``unlink``; in parts, the swap).
"""

import errno
import syslog
from collections import deque

from .groupcommit import value_treeobj_error
from .logentries import KEY, format_entry, hold_entry
from .segments import SEGMENTS

#: Seconds a release entry is kept by snapshots: far longer than the
#: job-manager takes to send the event batch with its ``epilog-finish``.
RELEASE_GRACE = 2.0

#: The KVS key a snapshot too large for one commit is written to, in
#: parts, before it replaces :data:`KEY`.
SIDE_KEY = KEY + "-next"

#: Bytes of a snapshot written in one commit (the ``snapshot-chunk``
#: option): libkvs encodes a commit in the job-manager's thread, some
#: 10 ms for this much on a loaded machine.
CHUNK_BYTES = 128 * 1024

#: Errors of an append to :data:`KEY` that say it is not a value (a
#: directory, a symlink): a snapshot replaces whatever is there.
NOT_A_VALUE = (errno.EISDIR, errno.ENOTDIR, errno.EOPNOTSUPP, errno.ELOOP)


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

    def __init__(self, table, releases, preamble=None):
        self.table = table
        #: The line the snapshot begins with (the log's format), not
        #: taken yet.
        self.preamble = preamble
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
        #: Bytes of the hold entries taken, and how many (what the log's
        #: policy reckons a hold's entry by).
        self.hold_bytes = 0
        self.holds_taken = 0

    def take(self, limit):
        """Lines of the next part: ``limit`` bytes or a line more, fewer
        only at the end.  Raises :class:`Recovering` if a job's holds are
        not all known."""
        lines = []
        size = 0
        if self.preamble is not None:
            lines.append(self.preamble)
            size = len(self.preamble)
            self.preamble = None
        start = size
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
            self.holds_taken += len(job.holds)
        self.hold_bytes += size - start
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


class SnapshotWriter:
    """Takes the snapshots of the log, whole or in parts.

    Owns the snapshot being written in parts (``in_parts``, a
    :class:`Snapshot`, or None); the
    release entries a snapshot keeps (``kept_releases``, as ``(timestamp,
    line)``); the hold entries it keeps of holds the gate no longer
    has, whose fate is not settled yet (``unsettled``, lines by
    description by job id: see :meth:`keep_unsettled`); the snapshots
    asked for (``asked``: callbacks answered once
    one has replaced the log or was given up, ``answering``: those the
    snapshot in flight serves); ``replacing``: the next commit must
    replace :data:`KEY` whole (an append found it no value);
    ``side_used``: :data:`SIDE_KEY` may hold parts of a snapshot given
    up (the next snapshot, even in one commit, removes them).

    Reads the job records of ``jobs``; sends through ``commit`` (a
    :class:`~flux_epilog_gate.gate.groupcommit.GroupCommit`), reports
    to ``compaction``, tells ``segments`` when a snapshot removed them;
    calls ``tell()`` each time a snapshot has replaced the log.  Reads
    the port and the bytes of a part (``snapshot_chunk`` of the
    configuration in force) from ``context``, the gate's
    :class:`~flux_epilog_gate.gate.context.Context`.
    """

    def __init__(self, context, jobs, commit, compaction, segments, tell):
        self.context = context
        self.jobs = jobs
        self.commit = commit
        self.compaction = compaction
        self.segments = segments
        self.tell = tell
        self.in_parts = None
        self.kept_releases = deque()
        self.kept_bytes = 0
        self.unsettled = {}
        self.asked = []
        self.answering = []
        self.replacing = False
        self.side_used = False

    def chunk(self):
        """Bytes of a snapshot written in one commit: as the
        configuration in force says."""
        return self.context.config.snapshot_chunk

    # What snapshots keep, and who waits for one

    def keep_release(self, now, line):
        """A release entry made at ``now``: snapshots keep it for
        :data:`RELEASE_GRACE` seconds."""
        self.forget_releases(now)
        self.kept_releases.append((now, line))
        self.kept_bytes += len(line)

    def forget_releases(self, now):
        """Drop the release entries that snapshots no longer need."""
        horizon = now - RELEASE_GRACE
        kept = self.kept_releases
        while kept and kept[0][0] < horizon:
            self.kept_bytes -= len(kept.popleft()[1])

    def keep_unsettled(self, jobid, lines):
        """The hold entries ``lines`` (by description) of job ``jobid``
        are kept in every snapshot until :meth:`forget_unsettled`,
        though the gate has none of those holds: those of a job a new
        job-manager did not replay, until its eventlog tells whether
        they were lost (a snapshot without them would forget a loss that
        a restart meanwhile leaves unreported), and a pending prolog hold
        dropped as its job entered CLEANUP, until its cancel is recorded
        (a crash that undoes the job's exception must find it)."""
        self.unsettled.setdefault(jobid, {}).update(lines)

    def forget_unsettled(self, jobid, description=None):
        """What became of job ``jobid``'s hold ``description`` (None: of
        every one) is known, or recorded (see :meth:`keep_unsettled`)."""
        lines = self.unsettled.get(jobid)
        if lines is None:
            return
        if description is not None:
            lines.pop(description, None)
        if description is None or not lines:
            del self.unsettled[jobid]

    def ask(self, callback):
        """A snapshot is asked for: ``callback(error)`` once one has
        replaced the log (None), or was given up (an OSError)."""
        self.asked.append(callback)

    def wanted(self):
        """True if the next commit must be a snapshot, whatever its size:
        one was asked for, or :data:`KEY` must be replaced."""
        return self.replacing or bool(self.asked)

    def answer_asked(self, error):
        """Answer the snapshots asked for."""
        waiting, self.asked = self.asked, []
        self.commit.answer(waiting, error)

    def repair(self, error):
        """True if, an append having failed because :data:`KEY` is not a
        value, the next commit replaces it with a snapshot, for the same
        waiters (once: the gate's view is complete, so nothing the key
        held is needed)."""
        if self.replacing:
            self.replacing = False
            return False
        if error.errno not in NOT_A_VALUE or self.jobs.holds() is None:
            return False
        self.context.port.log(
            syslog.LOG_ERR,
            f"{KEY} is not a value ({error.strerror}): "
            "replacing it with a snapshot of the current holds",
        )
        self.replacing = True
        return True

    # A snapshot in one commit

    def begin(self):
        """Start a snapshot.  Return True if it fit one commit (or the
        key must be replaced at once), sent; else False, and either
        :attr:`in_parts` is set (its first part is next) or a job is
        being recovered (no snapshot now)."""
        now, text = self.context.port.stamp()
        self.forget_releases(now)
        releases = deque(
            line for lines in self.unsettled.values() for line in lines.values()
        )
        releases.extend(line for _, line in self.kept_releases)
        snap = Snapshot(self.jobs, releases, format_entry(now, text))
        limit = float("inf") if self.replacing else self.chunk()
        try:
            lines = snap.take(limit)
        except Recovering:
            self.answer_asked(_recovering_error())
            return False
        if not snap.content_left():
            # Never empty (it says its format): an empty value reads back
            # as NULL.
            self._send_whole(snap, "".join(lines))
            return True
        # A put: whatever a crash left there is replaced.
        snap.part = [("put", SIDE_KEY, "".join(lines))]
        self.in_parts = snap
        return False

    def _send_whole(self, snap, text):
        """Send snapshot ``snap``, ``text``, in one commit."""
        ops = [("put", KEY, text)]
        if self.side_used:
            ops.append(("unlink", SIDE_KEY, None))
        if self.segments.present:
            ops.append(("unlink", SEGMENTS, None))
        self._measured(snap, len(text))
        if len(ops) == 1:
            self.commit.put(text, self._whole_committed)
        else:
            self.commit.ops(ops, self._whole_committed)

    def _measured(self, snap, nbytes):
        """Tell the policy what snapshot ``snap`` of ``nbytes`` makes the
        log: what its hold entries took, and how many holds are live."""
        live = sum(len(job.holds) for job in self.jobs.values())
        self.compaction.replaced(nbytes, snap.hold_bytes, snap.holds_taken, live)

    def _whole_committed(self, error):
        if error is None:
            self._replaced()
        elif error.errno != errno.ENOSYS or not self.commit.sync:
            # (Without a backing store it is sent again, unsynced.)
            self.answer_asked(error)
        self.commit.committed(error)
        if error is None:
            self._done()

    def _replaced(self):
        """A snapshot is the whole log: neither the segments nor
        :data:`SIDE_KEY` hold anything, and no snapshot asked for is due
        any more."""
        self.segments.removed()
        self.side_used = self.replacing = False
        # Answered once it is done: no other snapshot is due for them.
        self.answering, self.asked = self.asked, []

    def _done(self):
        """A snapshot replaced the log: answer those who asked for one,
        tell."""
        if self.answering:
            answering, self.answering = self.answering, []
            self.commit.answer(answering, None)
        self.tell()

    # A snapshot in parts

    def send_part(self):
        """Send the snapshot's next transaction: a part and the batch,
        or the swap; or look the parts up first."""
        snap = self.in_parts
        commit = self.commit
        if snap.swap is not None:
            # Sent again (without sync).
            self._send_swap(snap)
            return
        if snap.part is None:
            chunk = self.chunk()
            if not snap.content_left() and snap.since_bytes <= chunk:
                self._look_up_parts(snap)
                return
            try:
                snap.part = [("append", SIDE_KEY, "".join(snap.take(chunk)))]
            except Recovering:
                self.abandon("a job is being recovered")
                commit.append()
                return
        ops = list(snap.part)
        if commit.sent:
            batch = "".join(commit.sent)
            # To KEY, full or not: the swap replaces it.
            ops.append(("append", KEY, batch))
            self.compaction.appended(len(batch))
        commit.ops(
            ops,
            lambda error: self._part_committed(snap, error),
            # Only the swap must be checkpointed, and the records.
            commit.sync and bool(commit.sent),
        )

    def _part_committed(self, snap, error):
        if snap is self.in_parts:
            if error is None:
                snap.committed(self.commit.sent)
            elif not (error.errno == errno.ENOSYS and self.commit.sync):
                self.abandon(f"writing {SIDE_KEY}: {error.strerror}")
        self.commit.committed(error)

    def _look_up_parts(self, snap):
        """Every part is written: look up :data:`SIDE_KEY`'s tree object
        for the swap."""
        self.commit.look_up(
            SIDE_KEY, lambda treeobj, error: self._found_parts(snap, treeobj, error)
        )

    def _found_parts(self, snap, treeobj, error):
        commit = self.commit
        commit.looked_up()
        if snap is not self.in_parts:
            commit.kick()
            return
        if error is None:
            error = value_treeobj_error(treeobj)
        if error is not None:
            self.abandon(f"looking {SIDE_KEY} up: {error}")
            commit.kick()
            return
        commit.take()
        tail = "".join(list(snap.since) + commit.sent)
        # In this order: the parts become the log, the rest follows.
        snap.swap = [("put_treeobj", KEY, treeobj)]
        if tail:
            snap.swap.append(("append", KEY, tail))
        snap.swap.append(("unlink", SIDE_KEY, None))
        if self.segments.present:
            snap.swap.append(("unlink", SEGMENTS, None))
        snap.written += len(tail)
        self._send_swap(snap)

    def _send_swap(self, snap):
        self.commit.ops(snap.swap, lambda error: self._swapped(snap, error))

    def _swapped(self, snap, error):
        if error is None:
            if snap is self.in_parts:
                self.in_parts = None
            self._replaced()
            self._measured(snap, snap.written)
        elif snap is self.in_parts and not (
            error.errno == errno.ENOSYS and self.commit.sync
        ):
            self.abandon(f"swapping it in: {error.strerror}")
        self.commit.committed(error)
        if error is None:
            self._done()

    # Giving a snapshot up

    def abandon(self, why):
        """Give the snapshot in progress up: the log stays as it is."""
        self.stop()
        self.context.port.log(syslog.LOG_ERR, f"{KEY}: snapshot given up: {why}")
        self.answer_asked(OSError(errno.EAGAIN, f"snapshot given up: {why}"))

    def recovering(self):
        """A job's holds are being rebuilt from the log: a snapshot in
        progress would leave them out."""
        if self.in_parts is not None:
            self.stop()
            self.answer_asked(_recovering_error())

    def stop(self):
        """Drop the snapshot in parts in progress, if any (whatever of it
        the KVS carries out, the log stays complete; the next one
        starts another)."""
        if self.in_parts is not None:
            self.in_parts = None
            self.side_used = True
