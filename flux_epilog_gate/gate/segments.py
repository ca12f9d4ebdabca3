"""Segment rotation: a full key of the hold log made a segment.

Each append to a key adds a reference to its value, so a key takes
:data:`~flux_epilog_gate.gate.holdlog.MAX_APPENDS` appends at
most.  A snapshot every so many appends would cost each append a share
of every live hold: with 10,000 of them, a megabyte written for 256
batches.  So once the last snapshot is large (see
:mod:`flux_epilog_gate.gate.holdlog`), a full :data:`KEY` is made
a *segment* instead: its tree object is looked up (no commit in flight
meanwhile) and one transaction makes it the value of segment ``n``
(:func:`segment_key`) and puts the batch in its place.  No byte is
written again: the segment refers to the same blobs.  Each segment is in
a directory of its own under :data:`SEGMENTS`, so that the segments'
directory holds a reference to each, not its list of blobs; records are
always appended to :data:`KEY`, so an append costs the same with
segments or without.  The log is segments 1, 2, ... then :data:`KEY`;
the load reads them in that order (and makes :data:`KEY` a segment at
its first batch: its appends are not known).  The next snapshot removes
:data:`SEGMENTS` in its own transaction.  A failed lookup makes a
snapshot due instead; a failed transaction leaves :data:`KEY` as it
was, made a segment at the next batch.
"""

import errno
import syslog

from .groupcommit import value_treeobj_error
from .logentries import KEY

#: The KVS directory of the log's segments: segment ``n`` (1, 2, ...)
#: is the value :func:`segment_key` names, in a directory of its own, so
#: that a full segment is one reference in :data:`SEGMENTS`.
SEGMENTS = KEY + "-segments"


def segment_key(n):
    """The key of segment ``n`` (1, 2, ...) of the log."""
    return f"{SEGMENTS}.{n}.log"


#: The most digits of a segment's number: a name longer is no segment
#: (the gate numbers few, and Python converts no more than some 4,300
#: digits to an integer).
SEGMENT_DIGITS_MAX = 20


def is_segment_name(name):
    """True if ``name`` (in :data:`SEGMENTS`) is one the gate writes: a
    number 1, 2, ... in ASCII digits, without leading zeros."""
    return (
        0 < len(name) <= SEGMENT_DIGITS_MAX
        and name.isdecimal()
        and name.isascii()
        and name[0] != "0"
    )


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
        if is_segment_name(name):
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


class Segments:
    """The segments made since the last snapshot.

    Owns ``made`` (segments made since the last snapshot: the number of
    the last one), ``present`` (:data:`SEGMENTS` may hold some: the next
    snapshot removes it) and the lookup in progress.  Sends through
    ``commit`` (a :class:`~flux_epilog_gate.gate.groupcommit.GroupCommit`),
    reports to ``compaction``; calls ``tell()`` once a segment is made;
    reaches the KVS through the port of ``context``.
    """

    def __init__(self, context, commit, compaction, tell):
        self.context = context
        self.commit = commit
        self.compaction = compaction
        self.tell = tell
        self.made = 0
        self.present = False
        # A token for the lookup in progress (see rotate), or None.
        self.lookup = None

    def rotate(self):
        """:data:`KEY` is full: look its tree object up, to make it the
        next segment (the batch taken goes with it)."""
        lookup = self.lookup = object()
        self.commit.look_up(
            KEY, lambda treeobj, error: self._found_key(lookup, treeobj, error)
        )

    def _found_key(self, lookup, treeobj, error):
        if lookup is not self.lookup:
            return
        self.lookup = None
        commit = self.commit
        commit.looked_up()
        if error is None:
            error = value_treeobj_error(treeobj)
        else:
            error = "" if error.errno == errno.ENOENT else error.strerror
        if error is not None:
            # Appended to as it is meanwhile (no lookup again); if it is
            # there at all (ENOENT: nothing to make a segment of), a
            # snapshot replaces the log instead.
            self.compaction.key_kept()
            if error:
                self.context.port.log(
                    syslog.LOG_ERR,
                    f"{KEY}: making it a segment: {error}: "
                    "a snapshot replaces the log instead",
                )
                self.compaction.snapshot_instead()
        if error is not None or not commit.queued:
            commit.kick()
            return
        commit.take()
        # Counted as made from now on, whatever the outcome (it may never
        # be known, should the plugin be unloaded): a number is never
        # used twice, and the next snapshot removes the segments.
        self.made += 1
        self.present = True
        batch = "".join(commit.sent)
        self.compaction.rotated(len(batch))
        # In this order: KEY's value becomes the segment, the batch KEY's.
        ops = [("put_treeobj", segment_key(self.made), treeobj), ("put", KEY, batch)]
        commit.ops(ops, self._rotated)

    def _rotated(self, error):
        if error is not None:
            # KEY is as it was: made a segment at the next batch.
            self.compaction.key_full()
        self.commit.committed(error)
        if error is None:
            self.tell()

    def removed(self):
        """A snapshot replaced the log, its segments too."""
        self.made = 0
        self.present = False

    def found(self, last):
        """The load found segments up to ``last`` (0: none; None: some
        could not be read)."""
        if last is None or last > 0:
            self.present = True
            self.made = last or 0

    def stop(self):
        """The plugin is going away: the lookup in progress is answered
        to nobody."""
        self.lookup = None
