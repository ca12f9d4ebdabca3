"""Handing the hold log over: from the load that found it, and from one
plugin instance to the next across a reload.

**Unload.**  A commit already sent is carried out by the KVS whatever
becomes of the plugin; the requests still waiting are answered with
:class:`~flux_epilog_gate.gate.groupcommit.NotConfirmed` (the
request may have taken effect: send it again, it is idempotent), the
queued records are sent in one last commit, after the records of the
commit in flight again (should that one fail, no plugin instance would
learn of it; a record read twice changes nothing), and a gate taken
over by the next load writes every record that was not confirmed again,
and then, once its jobs are retracked, the whole log from its holds (see
:meth:`HoldLog.rewrite <flux_epilog_gate.gate.holdlog.HoldLog.rewrite>`:
another hand may have unlinked or rewritten the key meanwhile).
"""

from .groupcommit import NotConfirmed
from .logentries import format_entry


class Handover:
    """Takes the log over from a load, and hands it to the next plugin
    instance.

    Owns the records the previous plugin instance could not confirm
    (``unconfirmed``).  Calls the log's parts: ``commit`` (a
    :class:`~flux_epilog_gate.gate.groupcommit.GroupCommit`),
    ``compaction``, ``segments`` and ``snapshots``; they, and this,
    reach the port the gate drives now through ``context``, so a reload
    has none of them to re-point.
    """

    def __init__(self, context, commit, compaction, segments, snapshots):
        self.context = context
        self.commit = commit
        self.compaction = compaction
        self.segments = segments
        self.snapshots = snapshots
        self.unconfirmed = []

    def found(self, size, base, last, unended):
        """The load found the log ``size`` bytes long, ``base`` of them
        in its first value, with segments up to ``last`` (0: none), or
        segments it could not read (``last`` is None): those are
        replaced by a snapshot at the next commit.  ``unended``: the
        value does not end its last line (it was written by another
        hand); the next text sent ends it first."""
        if unended:
            # An append would run into the value's last line (a blank
            # line is no entry).
            self.commit.begin_with("\n")
        elif not size:
            # A log begun anew says its format.
            self.commit.begin_with(format_entry(*self.context.port.stamp()))
        self.compaction.found(size, base, last)
        self.segments.found(last)

    def suspend(self):
        """The plugin is going away: send what is queued, with the records
        of the commit in flight again, answer every waiting request with
        :class:`NotConfirmed`, and keep the records not known to be
        durable for the next plugin instance."""
        self.segments.stop()
        self.snapshots.stop()
        waiters, self.unconfirmed = self.commit.hand_off()
        self.commit.answer(waiters, NotConfirmed())
        self.snapshots.answer_asked(NotConfirmed())

    def resume(self):
        """The next plugin instance takes the log over (the gate's
        context has its port already): write again what the previous one
        could not confirm (entries are idempotent on replay).  While no
        plugin was loaded another hand may have written the value, its
        last line unended (``flux kvs put --append``): the next text
        sent ends it first, as at a load (a blank line is no entry)."""
        records, self.unconfirmed = self.unconfirmed, []
        if self.commit.prefix is None:
            self.commit.begin_with("\n")
        self.commit.take_back(records)
