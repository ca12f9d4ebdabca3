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

**Snapshots.**  The log is replaced by a snapshot (see
:mod:`flux_epilog_gate.gate.snapshot`) once it is :data:`MAX_BYTES` or
more and twice what the snapshot would write, if twice the bytes
appended since the last one are at least the live holds' part of it
(so a snapshot is paid for by the records that made it due); and every
:data:`MAX_APPENDS` appends while the last snapshot is smaller than
:data:`SEGMENT_FLOOR`.  What a snapshot would write is reckoned from
what is live now (the holds counted, each entry as large as the last
snapshot measured them, and the release entries kept), not from the
last snapshot: so the log, key and segments together, stays under the
larger of :data:`MAX_BYTES` and about twice what the live holds take,
however many holds come and go, and shrinks with them.  A log left idle
looks again once the release entries it keeps expire.

**Segments.**  Once the last snapshot is :data:`SEGMENT_FLOOR` bytes or
more, a :data:`KEY` that took :data:`MAX_APPENDS` appends is made a
segment instead (see :mod:`flux_epilog_gate.gate.segments`), until
:data:`MAX_SEGMENTS` of them follow the last snapshot.

**The parts.**  This module is the policy that picks how each batch is
written, and what the gate calls; each job of the log is a module and
an object of its own:

=====================  ==================================================
``groupcommit``        :class:`GroupCommit`: the queue of records, one
                       synced commit in flight, the answers
``snapshot``           :class:`SnapshotWriter`: snapshots, in one commit
                       or in parts
``segments``           :class:`Segments`: a full key made a segment
``handover``           :class:`Handover`: the log as the load found it;
                       from one plugin instance to the next
``logentries``         the lines of the log (its reader is
                       :mod:`flux_epilog_gate.gate.logparse`)
=====================  ==================================================

It is plain Python; it reaches the KVS through the gate's port
(``kvs_commit(key, text, append, callback, sync)``; for snapshots in
parts and segments ``kvs_commit_ops(ops, callback, sync)`` and
``kvs_lookup_treeobj(key, callback)``).
"""

import syslog

from .groupcommit import RETRY_DELAY, GroupCommit, NotConfirmed, Refusal
from .handover import Handover
from .holds import HOLD_EVENT
from .logentries import KEY, MARKER, _line, cancel_entry, hold_entry, release_entry
from .logparse import ENTRY_NAMES, parse
from .segments import SEGMENTS, Segments, read_segments, segment_key
from .snapshot import (
    CHUNK_BYTES,
    NOT_A_VALUE,
    RELEASE_GRACE,
    SIDE_KEY,
    SnapshotWriter,
)

#: What the rest of the gate, and the tests, take from here.
__all__ = [
    "CHUNK_BYTES",
    "ENTRY_NAMES",
    "HOLD_EVENT",
    "HoldLog",
    "KEY",
    "MARKER",
    "MAX_APPENDS",
    "MAX_BYTES",
    "MAX_SEGMENTS",
    "NOT_A_VALUE",
    "NotConfirmed",
    "RELEASE_GRACE",
    "RETRY_DELAY",
    "SEGMENTS",
    "SEGMENT_FLOOR",
    "SIDE_KEY",
    "_line",
    "cancel_entry",
    "hold_entry",
    "parse",
    "read_segments",
    "release_entry",
    "segment_key",
]

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

#: Seconds between looks at the jobs being recovered while a snapshot
#: waits for them (see HoldLog.recovered).
RECOVERY_LOOK = 0.05

#: Bytes of the log past which the next commit is a snapshot, if the log
#: is twice what the snapshot would write, or more.
MAX_BYTES = 256 * 1024

#: Seconds after the oldest release entry a snapshot keeps expires before
#: an idle log looks whether a snapshot is due (timers may fire early by
#: the clock's grain).
CHECK_SLACK = 0.1

#: Bytes of a hold's entry, until a snapshot measures them: an epilog
#: hold with a short description.
HOLD_BYTES = 110


class Compaction:
    """What the log takes, as this gate wrote it (or read it at load),
    and whether a snapshot or a segment is due.

    Owns ``size``, the bytes of the log (its key and segments);
    ``appends``, the appends to its key; ``snapshot_size``, the bytes of
    the last snapshot; ``since``, the bytes appended since; ``holds``,
    the live holds (counted at each snapshot, then by their records; None
    after a load, until they are counted);
    ``hold_bytes``, what a hold's entry took in the last snapshot that
    had any.  Whatever writes to the log reports it here.
    """

    def __init__(self):
        self.size = 0
        self.appends = 0
        self.snapshot_size = 0
        self.since = 0
        self.holds = 0
        self.hold_bytes = HOLD_BYTES
        #: A snapshot is due whatever the log takes (see snapshot_instead).
        self.forced = False

    # What was written

    def appended(self, nbytes):
        """A batch of ``nbytes`` was appended to the key."""
        self.appends += 1
        self.size += nbytes
        self.since += nbytes

    def replaced(self, nbytes, hold_bytes=0, taken=0, live=0):
        """A snapshot of ``nbytes`` replaced the log, ``hold_bytes`` of
        them the entries of ``taken`` holds; ``live`` holds now."""
        self.appends = self.since = 0
        self.size = self.snapshot_size = nbytes
        self.forced = False
        self.holds = live
        if taken:
            self.hold_bytes = max(hold_bytes // taken, 1)

    def held(self):
        """A hold's entry was recorded."""
        if self.holds is not None:
            self.holds += 1

    def ended(self):
        """A hold's cancel or release was recorded."""
        if self.holds:
            self.holds -= 1

    def counted(self, holds):
        """The live holds were counted: ``holds``."""
        self.holds = holds

    def rotated(self, nbytes):
        """The key was made a segment, a batch of ``nbytes`` its value."""
        self.appends = 1
        self.size += nbytes
        self.since += nbytes

    def key_full(self):
        """The key is to be made a segment at the next batch."""
        self.appends = MAX_APPENDS

    def key_kept(self):
        """The key could not be made a segment: it is appended to as it
        is (no lookup again)."""
        self.appends = 0

    def snapshot_instead(self):
        """A snapshot is due at the next commit, whatever the log takes."""
        self.forced = True
        self.size = max(self.size, MAX_BYTES)

    def found(self, size, base, segments):
        """The load found the log ``size`` bytes long, ``base`` of them
        in its first value, with ``segments`` after the last snapshot
        (None: some could not be read)."""
        self.size = self.since = size
        # The holds the load recovers have no record here: counted once
        # they are known.
        self.holds = None
        if segments is None:
            self.snapshot_instead()
        elif segments > 0:
            # The first segment begins with the last snapshot.  The key's
            # appends are not known: it is made a segment at once.
            self.snapshot_size = base
            self.since = size - base
            self.appends = MAX_APPENDS

    # What is due

    def quiet(self, pending):
        """True if no compaction can be due with a batch of ``pending``
        bytes: every batch of records asks."""
        return self.appends < MAX_APPENDS and self.size + pending < MAX_BYTES

    def full(self):
        """True once the key took :data:`MAX_APPENDS` appends."""
        return self.appends >= MAX_APPENDS

    def live(self):
        """Bytes of the live holds' entries, as the last snapshot
        measured an entry."""
        return self.holds * self.hold_bytes

    def snapshot_due(self, segments, live, kept, pending=0):
        """True if the next commit, of ``pending`` bytes of records,
        should be a snapshot (``live`` bytes of hold entries and ``kept``
        of release entries), with ``segments`` after the last one: by
        bytes, or once the key is full if the last snapshot is small or
        :data:`MAX_SEGMENTS` segments follow it; else a full key is made
        a segment.

        By bytes: the log with the batch is :data:`MAX_BYTES` or more and
        at least twice what a snapshot now would write, and twice the
        bytes appended since the last one pay for the live holds' part
        of it (the kept releases were appended in the last
        :data:`RELEASE_GRACE` seconds, and the log is twice them): a
        snapshot costs at most about twice the records that made it
        due.  What was once live does not count: the log shrinks with
        its holds (to some 2.1 times what they take, as a cancel entry
        takes 0.85 of a hold's)."""
        if self.forced:
            return True
        size = self.size + pending
        if size >= max(MAX_BYTES, 2 * (live + kept)):
            if 2 * (self.since + pending) >= live:
                return True
        return self.appends >= MAX_APPENDS and (
            self.snapshot_size < SEGMENT_FLOOR or segments >= MAX_SEGMENTS
        )


class HoldLog:
    """Records of holds, group-committed to :data:`KEY` with a sync.

    ``jobs`` is the gate's job table: its job records' holds are what a
    snapshot is made of.  Each ``callback`` given is called once, as
    ``callback(error)``: None once the record is durable, else an OSError.

    Made of four parts, each owning its state: ``commit``
    (:class:`~flux_epilog_gate.gate.groupcommit.GroupCommit`, the
    batches and the commit in flight), ``snapshots``
    (:class:`~flux_epilog_gate.gate.snapshot.SnapshotWriter`),
    ``segments`` (:class:`~flux_epilog_gate.gate.segments.Segments`)
    and ``handover`` (:class:`~flux_epilog_gate.gate.handover.Handover`);
    ``compaction`` (:class:`~Compaction`)
    measures the log.  The log itself picks, for each batch, which of
    them writes it.
    """

    def __init__(self, context, jobs):
        #: The gate's :class:`~flux_epilog_gate.gate.context.Context`: the
        #: port the log is written through, the configuration (the bytes
        #: of a snapshot's part) and the hook told of each snapshot.
        self.context = context
        # Armed while release entries keep the log above its bound (see
        # _check_later).
        self.check_timer = None
        # Armed while a snapshot waits for jobs being recovered (see
        # recovered).
        self.look_timer = None
        #: Every current hold, or None while some are being recovered.
        self.holds = jobs.holds
        #: True while some job's holds are being recovered.
        self.jobs_recovering = jobs.recovering
        self.compaction = compaction = Compaction()
        self.commit = commit = GroupCommit(
            context, compaction, self._route, self._repair, self._more
        )
        self.segments = segments = Segments(context, commit, compaction, self._tell)
        self.snapshots = snapshots = SnapshotWriter(
            context, jobs, commit, compaction, segments, self._tell
        )
        self.handover = Handover(context, commit, compaction, segments, snapshots)
        #: Why the log is not written (see refuse), or None.
        self.refused = None

    # Records

    def hold(self, hold, callback=None):
        """``hold`` was registered."""
        self.compaction.held()
        self.commit.add(hold_entry(hold), callback)

    def cancel(self, hold, callback=None):
        """Pending ``hold`` was released."""
        self.compaction.ended()
        self.commit.add(cancel_entry(hold, *self.context.port.stamp()), callback)

    def keep_unsettled(self, jobid, lines):
        """Keep job ``jobid``'s hold entries ``lines`` in snapshots though
        the gate has none of those holds, until what became of them is
        settled (see :meth:`SnapshotWriter.keep_unsettled
        <flux_epilog_gate.gate.snapshot.SnapshotWriter.keep_unsettled>`)."""
        self.snapshots.keep_unsettled(jobid, lines)

    def forget_unsettled(self, jobid, description=None):
        """Job ``jobid``'s hold ``description`` (None: every one) is
        settled: snapshots no longer keep its entry."""
        self.snapshots.forget_unsettled(jobid, description)

    def release(self, hold, status, callback=None, exception=None):
        """Active ``hold`` was released with ``status`` (and ``exception``,
        the job exception its releaser raised, see release_entry)."""
        now, text = self.context.port.stamp()
        line = release_entry(hold, status, now, text, exception)
        self.compaction.ended()
        self.snapshots.keep_release(now, line)
        self.commit.add(line, callback)

    def unrecorded(self):
        """Make no record from now on: each callback is answered at once,
        as if its record were durable.  Only the benchmark's build of a
        plugin (``RUNTIME_BENCH_NO_RECORD``, bench/instructions.py's
        ``dws-nolog``) asks for this, to measure apart what the durable
        record costs (the records made, their commits and their answers);
        an installed plugin never does."""
        self.hold = self.cancel = _answered
        self.release = lambda hold, status, callback=None, exception=None: _answered(
            hold, callback
        )

    def together(self):
        """A context in which the records made go out in one batch (see
        :meth:`GroupCommit.together
        <flux_epilog_gate.gate.groupcommit.GroupCommit.together>`)."""
        return self.commit.together()

    def waiting(self):
        """How many callbacks wait for a commit (queued or in flight)."""
        return self.commit.waiting()

    def barrier(self, callback):
        """Call ``callback`` once every record made so far is durable."""
        self.commit.barrier(callback)

    def compact(self, callback):
        """Replace the log with a snapshot now, its segments too; call
        ``callback(error)`` once one has (None), or was given up (an
        OSError; EAGAIN while a job's holds are being recovered).  The
        requests made meanwhile share it."""
        if self.refused is not None:
            self.commit.barrier(callback)
            return
        self.snapshots.ask(callback)
        # With the queued records, if any, or on its own.
        self.commit.kick()

    def recovering(self):
        """A job's holds are being rebuilt from the log: a snapshot in
        progress would leave them out."""
        self.snapshots.recovering()

    def refuse(self, why):
        """The log found is of a newer format than this build reads: it is
        left as it is.  Every record, barrier and snapshot is answered,
        soon, with an error saying ``why``; nothing is written."""
        self.refused = why
        self.commit = Refusal(self.context, why)

    # What the gate reads

    @property
    def size(self):
        """Bytes of the log as this gate wrote it (or read it at load)."""
        return self.compaction.size

    @property
    def appends(self):
        """Appends to :data:`KEY` since it was made (a snapshot or a
        segment)."""
        return self.compaction.appends

    @property
    def commits(self):
        """Commits sent to the KVS."""
        return self.commit.commits

    @property
    def segment(self):
        """Segments made since the last snapshot."""
        return self.segments.made

    @property
    def chunk(self):
        """Bytes of a snapshot written in one commit (the configuration
        in force says)."""
        return self.snapshots.chunk()

    # The policy

    def _route(self):
        """Send the batch just taken: appended, with a snapshot (whole or
        its next part), or as :data:`KEY` is made a segment."""
        commit = self.commit
        snapshots = self.snapshots
        text = "".join(commit.sent)
        if (
            snapshots.in_parts is None
            and not snapshots.replacing
            and not snapshots.asked
            and self.compaction.quiet(len(text))
        ):
            # No snapshot can be due (what _due() decides, the common
            # case tested first): every batch of records comes here.
            commit.append(text)
            return
        self._send(len(text))

    def _send(self, pending=0):
        """Send the batch taken, of ``pending`` bytes, in the form the
        policy picks."""
        snapshots = self.snapshots
        if snapshots.in_parts is None and self._due(pending) and snapshots.begin():
            return
        if snapshots.in_parts is not None:
            snapshots.send_part()
        elif self.commit.sent and self.compaction.full() and self.commit.settled:
            # KEY is full, and _due() found no snapshot due.  (Not before
            # this instance's first commit after a reload: what the
            # lookup read could be replaced by the previous one's.)
            self.segments.rotate()
        else:
            self.commit.append()
        if snapshots.kept_releases and self.check_timer is None:
            self._check_later()

    def _due(self, pending):
        """True if the next commit, of ``pending`` bytes of records,
        should be a snapshot: asked for, or what the compaction policy
        says of the log, of the live holds and of the release entries a
        snapshot keeps; else a full key is made a segment."""
        snapshots = self.snapshots
        if snapshots.wanted():
            return True
        snapshots.forget_releases(self.context.port.now())
        compaction = self.compaction
        if compaction.holds is None:
            # After a load: its holds are counted once, when all known.
            holds = self.holds()
            if holds is None:
                return False
            compaction.counted(len(holds))
        return compaction.snapshot_due(
            self.segments.made, compaction.live(), snapshots.kept_bytes, pending
        )

    def _check_later(self):
        """Release entries, kept by snapshots for :data:`RELEASE_GRACE`
        seconds, may be all that keeps a snapshot from being due: look
        again once the oldest has expired, should no record come by
        then (a log left idle shrinks too)."""
        oldest = self.snapshots.kept_releases[0][0]
        delay = max(oldest + RELEASE_GRACE - self.context.port.now(), 0.0) + CHECK_SLACK
        self.check_timer = self.context.port.timer(delay, self._check)

    def _check(self):
        self.check_timer = None
        commit = self.commit
        if commit.in_flight is not None or commit.queued:
            # The next commit's routing looks (a commit is in flight).
            self.check_timer = self.context.port.timer(RELEASE_GRACE, self._check)
            return
        # An empty batch: a snapshot, if one is due, else nothing sent.
        commit.take()
        self._send()

    def _more(self):
        """True if a commit is wanted with no record queued: a snapshot
        in progress, asked for or forced (once the holds are known)."""
        snapshots = self.snapshots
        if snapshots.in_parts is not None or snapshots.asked:
            return True
        # A rewrite (see rewrite) waits for no record.
        return self.compaction.forced and not self.jobs_recovering()

    def _repair(self, error):
        """A commit failed: True if a snapshot is sent in its place."""
        if not self.snapshots.repair(error):
            return False
        self._send()
        return True

    def _tell(self):
        """Call the context's ``on_snapshot``, if set."""
        on_snapshot = self.context.on_snapshot
        if on_snapshot is None:
            return
        try:
            on_snapshot()
        except Exception as exc:  # noqa: BLE001 - the log's work is done
            self.context.port.log(syslog.LOG_ERR, f"{KEY}: after a snapshot: {exc}")

    # Plugin unload and load

    def suspend(self):
        """The plugin is going away: no look later (see
        :meth:`Handover.suspend
        <flux_epilog_gate.gate.handover.Handover.suspend>`)."""
        if self.check_timer is not None:
            self.check_timer.stop()
            self.check_timer = None
        if self.look_timer is not None:
            self.look_timer.stop()
            self.look_timer = None
        if self.refused is None:
            self.handover.suspend()

    def found(self, size, base, last, ragged=False):
        """The load found the log (see :meth:`Handover.found
        <flux_epilog_gate.gate.handover.Handover.found>`;
        ``ragged``: its value does not end its last line)."""
        self.handover.found(size, base, last, ragged)

    def resume(self):
        """The next plugin instance takes the log over, its port in the
        context already (see :meth:`Handover.resume
        <flux_epilog_gate.gate.handover.Handover.resume>`)."""
        if self.refused is None:
            self.handover.resume()

    def recovered(self):
        """A job's holds are known again.  A snapshot that waits for
        every hold to be known (a rewrite after a reload, one forced at
        load) goes out once they are, even if no record comes to carry
        it: looked for a moment later, and again while some job is still
        being recovered (a look reads every job: one per moment, however
        many jobs end in it)."""
        if self.compaction.forced and self.look_timer is None:
            self.look_timer = self.context.port.timer(RECOVERY_LOOK, self._look)

    def _look(self):
        self.look_timer = None
        if not self.compaction.forced:
            return
        if self.jobs_recovering():
            self.recovered()
            return
        self.commit.kick()

    def rewrite(self):
        """Write the whole log again from the gate's holds (a snapshot,
        in parts if large), now or after the commit in flight.

        A gate taken over by the next plugin instance knows every hold,
        but the log may have lost some: while no plugin was loaded
        another hand may have unlinked or rewritten the key.  Appending
        to whatever is there would leave them to a snapshot that may
        never come before a restart.  Until the snapshot has replaced
        the log, each commit asks for it again (while a job's holds are
        being recovered, the next one after)."""
        if self.refused is not None:
            return
        self.compaction.snapshot_instead()
        commit = self.commit
        if commit.in_flight is None and not commit.gathering:
            commit.take()
            self._send()


def _answered(hold, callback=None):
    """A record not made (:meth:`HoldLog.unrecorded`), answered at once."""
    if callback is not None:
        callback(None)
