"""Loading the gate into a job-manager: which gate, what the hold log
says, which jobs to recover, and when the gate knows enough to answer.

A :class:`Load` is made for each load of the plugin.  A new job-manager
(module reload, instance restart, or a first load) makes a new gate,
reads the hold log at once (:func:`read_log`, which never fails, see
:mod:`flux_epilog_gate.gate.logparse`) and rebuilds the holds of the jobs it
names from their entries and eventlogs; other jobs never see the gate.
The first load into a KVS where the gate never ran (:data:`FIRST_LOAD_KEY`
absent, and no hold log) has no record to recover and no job that the
gate could have posted to: it reads no eventlog, and marks the KVS, so
that a later load that finds no hold log (deleted by hand) still reads
the eventlogs of the jobs in CLEANUP or DEPEND.  A load into the
job-manager where an earlier instance ran takes that instance's gate
over (``carried``) and only re-reads what it was still recovering.

The job-manager calls ``job.new`` for every active job right after the
load; :meth:`Load.on_new` starts each job's recovery, :meth:`Load.loaded`
says that every such call has been made.  Until that has happened and
every eventlog read has answered, the gate's view is partial:
:meth:`Load.when_ready` keeps requests waiting until it is complete.

Plain Python: the job-manager is reached through the gate's port
(``kvs_get``, ``read_eventlog``, ``job_info``, ``log``; see
:mod:`flux_epilog_gate.gate`).
"""

import errno
import syslog
from collections import deque

from ..version import __version__
from . import lostrecord
from .holdlog import KEY, SEGMENTS, read_segments, segment_key
from .logparse import FORMAT, parse
from .states import CLEANUP, DEPEND, INACTIVE, NEW, RUN

#: The KVS key the first load of the gate writes (its time): from then
#: on a load that finds no hold log is not a first load.
FIRST_LOAD_KEY = "epilog-gate.first-load"

#: Skipped lines of the hold log named one log line each, at most; the
#: others are counted in one more line.
SKIPPED_LOGGED = 20


class LogRead:
    """What :func:`read_log` found: ``jobs``, the log's entries by job
    (see :func:`flux_epilog_gate.gate.logparse.parse`), None if its key
    could not be read; ``complete``, False if some of its records could
    not be read (then every job that may be at a point is recovered from
    its eventlog too); ``size``, the bytes of its values (None if there
    are none); ``base``, those of its first value (where the last
    snapshot begins); ``last``, the number of its last segment (0: no
    segment), None if its segments hold what the gate did not write or
    could not read (the next commit is a snapshot, which removes them);
    ``ragged``, True if its key's value does not end its last line (the
    next commit is a snapshot, which replaces it); ``first``, True if the
    gate never ran with this KVS: no log, no segments and no
    :data:`FIRST_LOAD_KEY`."""

    def __init__(self, jobs, complete, size, base, last):
        self.jobs = jobs
        self.complete = complete
        self.size = size
        self.base = base
        self.last = last
        self.ragged = False
        #: Why the log is not read, if it is of a newer format than this
        #: build reads (then ``jobs`` is empty), else None.
        self.refused = None
        self.first = False


def read_log(port):
    """Read the hold log, :data:`KEY` and its segments, as a
    :class:`LogRead`.  Each line that is not an entry and each key that
    is left out is logged, naming it.  Never raises."""
    try:
        data = port.kvs_get(KEY)
    except Exception as exc:  # noqa: BLE001 - the load must go on
        _unreadable(port, KEY, exc)
        return LogRead(None, False, 0, 0, _no_segments(port))
    key_data = data
    try:
        segments, left = read_segments(port)
    except Exception as exc:  # noqa: BLE001 - the load must go on
        segments, left = [], [(SEGMENTS, str(exc), _listing_lost(exc))]
    complete = _report_left(port, left)
    base = len(segments[0][1] if segments else data or b"")
    # The segments are the older records: KEY has the newest.
    values = [(segment_key(n), text) for n, text in segments] + [(KEY, data)]
    formats = []
    jobs = _parsed(port, values, formats)
    newest = max(formats, default=1)
    if newest > FORMAT:
        return _refused(port, newest)
    last = None if left else segments[-1][0] if segments else 0
    size = (
        None if data is None and not segments else sum(len(v or b"") for _, v in values)
    )
    found = LogRead(jobs, complete, size, base, last)
    # An append to a value that does not end its last line would run
    # into it: such a value (written by another hand) is replaced.
    found.ragged = bool(key_data) and not key_data.endswith(b"\n")
    found.first = size is None and last == 0 and _never_loaded(port)
    return found


def _refused(port, newest):
    """A log of format ``newest``, newer than this build reads: left as
    it is, and none of it is read."""
    found = LogRead({}, True, 0, 0, 0)
    found.refused = (
        f"{KEY} is of format {newest}, newer than this build of "
        f"epilog-gate ({__version__}) reads ({FORMAT}): the log is left as "
        "it is and no hold is taken; load a build that reads it"
    )
    port.log(syslog.LOG_ERR, found.refused)
    return found


def _never_loaded(port):
    """Whether :data:`FIRST_LOAD_KEY` is absent (False if it cannot be
    read: then the load reads what a later load would)."""
    try:
        return port.kvs_get(FIRST_LOAD_KEY) is None
    except Exception:  # noqa: BLE001 - the load must go on
        return False


def _listing_lost(exc):
    """Whether segments' records may be lost when :data:`SEGMENTS` cannot
    be listed: not if it is a value (the gate writes none there)."""
    return getattr(exc, "errno", None) != errno.ENOTDIR


def _report_left(port, left):
    """Log each key of the segments left out; return whether the log is
    complete all the same (none of them may hold its records)."""
    for key, why, records in left[:SKIPPED_LOGGED]:
        if records:
            port.log(
                syslog.LOG_ERR,
                f"reading {key}: {why}: the holds recorded only there are "
                "not known; every job is recovered from its eventlog as well",
            )
        else:
            port.log(syslog.LOG_WARNING, f"{key} is left out: {why}")
    if len(left) > SKIPPED_LOGGED:
        port.log(
            syslog.LOG_ERR,
            f"{len(left) - SKIPPED_LOGGED} more keys under {SEGMENTS} left out",
        )
    return not any(records for _, _, records in left)


def _parsed(port, values, formats=None):
    """The entries by job of ``values`` (``(key, bytes)``, in order), each
    line that is not an entry logged, naming its key and line; the
    versions of the format entries are appended to ``formats``."""
    jobs, skipped = {}, []
    for key, value in values:
        entries, bad = parse(value, formats)
        for jobid, items in entries.items():
            jobs.setdefault(jobid, []).extend(items)
        skipped.extend((key, line) for line in bad)
    for key, bad in skipped[:SKIPPED_LOGGED]:
        port.log(syslog.LOG_ERR, f"{key}: skipped {bad}")
    if len(skipped) > SKIPPED_LOGGED:
        port.log(
            syslog.LOG_ERR,
            f"{KEY}: skipped {len(skipped) - SKIPPED_LOGGED} more lines "
            f"({len(skipped)} in all) that are not hold log entries",
        )
    return jobs


def _unreadable(port, key, exc):
    port.log(
        syslog.LOG_ERR,
        f"reading {key}: {exc}: recovering every job from its eventlog",
    )


def _read_lost(port):
    """The value of the record of lost holds (bytes, or None); an error
    is logged (the holds it kept are then not delivered)."""
    try:
        return port.kvs_get(lostrecord.KEY)
    except Exception as exc:  # noqa: BLE001 - the load must go on
        port.log(
            syslog.LOG_ERR,
            f"reading {lostrecord.KEY}: {exc}: the lost holds it kept are "
            "not delivered",
        )
        return None


def _no_segments(port):
    """0 if the log has no segments, else None (they are not read: the
    log's key could not be)."""
    try:
        return 0 if port.kvs_dir(SEGMENTS) is None else None
    except Exception:  # noqa: BLE001 - then they are replaced
        return None


class Load:
    """One load of the gate into a job-manager through ``port``.

    ``carried`` is the gate a removed plugin instance left in this same
    job-manager, or None; ``delay``, seconds each eventlog read waits
    (0: none); ``partial``: the carried gate's own load was not complete
    (the plugin that loaded it handed it over before every job.new came),
    so a job it does not know is recovered as by a new gate.  The hold
    log is read here, at once (only when it is needed: a carried gate
    that recovers nothing knows every hold).
    """

    def __init__(self, port, carried=None, delay=0.0, partial=False):
        self.port = port
        self.carried = carried
        self.partial = carried is not None and partial
        # Seconds each eventlog read waits (tests: debug-fault=slow-recovery).
        self.delay = delay
        self.gate = None
        #: Entries of the hold log by job, or None if it could not be read.
        self.log = {}
        #: Whether ``log`` has every record (else every job that may be
        #: at a point is recovered from its eventlog as well).
        self.complete = True
        self.log_size = 0
        self.log_base = self.log_last = 0
        self.log_ragged = False
        #: Why the log is not read (a newer format), or None.
        self.log_refused = None
        #: The gate never ran with this KVS (see :class:`LogRead`).
        self.first = False
        if carried is None or self.partial or carried.jobs.recovering():
            found = read_log(port)
            self.log, self.complete = found.jobs, found.complete
            self.log_size = found.size or 0
            self.log_base, self.log_last = found.base, found.last
            self.log_ragged = found.ragged
            self.log_refused = found.refused
            self.first = carried is None and found.first
        # The record of lost holds not yet delivered (a carried gate has it).
        self.lost = _read_lost(port) if carried is None else None
        # Jobs the job-manager sent job.new for (a carried gate forgets
        # the others: they went inactive while no plugin was loaded).
        self.seen = set()
        # Jobs whose eventlog is being read.
        self.reading = set()
        self.started = False
        self.ready = False
        self.closed = False
        self.waiting = deque()

    def begin(self, config):
        """Make the gate (or take the carried one over) with ``config``;
        return it.  Nothing here can fail."""
        from . import Gate

        if self.carried is not None:
            self.carried.attach(self.port)
            self.gate = self.carried
        else:
            self.gate = Gate(self.port)
            if self.log_refused is not None:
                self.gate.holdlog.refuse(self.log_refused)
            else:
                # The log as found: a large one is replaced by a snapshot.
                self.gate.holdlog.found(
                    self.log_size, self.log_base, self.log_last, self.log_ragged
                )
            self.gate.lost_record.found(self.lost)
        if self.first:
            self._mark_first_load()
        self.gate.reconfigure(config)
        return self.gate

    def _mark_first_load(self):
        """Write :data:`FIRST_LOAD_KEY`.  Sent before any hold can be
        made, so the KVS applies it before any record or marked event of
        the gate (one sender's commits in order): a checkpoint that has
        one has it too."""
        text = f"{self.port.now():.6f}\n"
        try:
            self.port.kvs_commit(FIRST_LOAD_KEY, text, False, self._first_marked)
        except Exception as exc:  # noqa: BLE001 - the load must go on
            self._first_marked(exc)

    def _first_marked(self, error):
        if error is not None:
            self.port.log(syslog.LOG_ERR, f"writing {FIRST_LOAD_KEY}: {error}")

    # The job-manager's calls of the load

    def on_new(self, jobid, state, userid):
        """job.new for an active job, right after the load."""
        if self.started or state == NEW or self.log_refused is not None:
            # (A log refused: no hold is known, none is taken.)
            return
        self.seen.add(jobid)
        if self.carried is not None and (not self.partial or self._known(jobid)):
            if self.gate.retrack(jobid, state):
                self._recover(jobid)
        # A job in DEPEND may be held by a dependency hold whose record a
        # crash lost: its marked dependency-add tells.  So may a job in
        # CLEANUP by an epilog hold whose record failed as the plugin
        # went away: its marked epilog-start tells.  (One eventlog read
        # per such job.)  Such a hold's open action keeps the job by
        # itself, and a job the log does not name has no pending hold:
        # the gate posts nothing of its own to it while reading.  A
        # first load knows that no job has either.
        elif (
            not self.complete
            or jobid in self.log
            or (state in (DEPEND, CLEANUP) and not self.first)
        ):
            named = not self.complete or jobid in self.log
            self.gate.begin_recovery(jobid, userid, keep=named)
            self._recover(jobid)

    def _known(self, jobid):
        return jobid in self.gate.jobs or jobid in self.gate.replayed_progress

    def loaded(self):
        """Every job.new of the load has been seen."""
        if self.started:
            return
        self.started = True
        if self.carried is not None:
            self.gate.resume(self.seen)
            # What the previous instance was still reading, read again.
            self.gate.losses.recheck()
            if self.partial and self.log:
                self.gate.losses.check_unseen(self.log, self.seen, self.delay)
        elif self.log:
            # Jobs the log names that went inactive before this load.
            self.gate.losses.check_unseen(self.log, self.seen, self.delay)
        self.seen = set()
        self._check_ready()

    def _recover(self, jobid):
        """Rebuild the holds of a job: from its entries in the hold log,
        and its eventlog if it may have active holds or has entries."""
        try:
            state, _ = self.port.job_info(jobid)
        except OSError:
            state = INACTIVE
        entries = (self.log or {}).get(jobid, [])
        if not entries and state not in (DEPEND, RUN, CLEANUP):
            self._end(jobid, [])
            return
        self.reading.add(jobid)
        if self.delay > 0:
            self.port.timer(self.delay, lambda: self._read(jobid, entries))
        else:
            self._read(jobid, entries)

    def _read(self, jobid, entries):
        if self.closed:
            return
        try:
            self.port.read_eventlog(
                jobid,
                lambda events, error: self._recovered(jobid, entries, events, error),
            )
        except Exception as exc:  # noqa: BLE001 - recover what can be
            self._recovered(jobid, entries, None, exc)

    def _recovered(self, jobid, entries, events, error):
        if self.closed or jobid not in self.reading:
            return
        self.reading.discard(jobid)
        if error is not None:
            self.port.log(
                syslog.LOG_ERR, f"recovering job {jobid}: eventlog lookup: {error}"
            )
            events = []
        # A stable sort: at equal times a log entry comes first.
        self._end(jobid, sorted(entries + list(events), key=lambda e: e[0]))
        self._check_ready()

    def _end(self, jobid, events):
        try:
            self.gate.end_recovery(jobid, events)
        except Exception as exc:  # noqa: BLE001 - one job must not stop the rest
            self.port.log(
                syslog.LOG_ERR, f"recovering job {jobid}: {type(exc).__name__}: {exc}"
            )
            self.gate.abandon_recovery(jobid)

    # Requests

    def when_ready(self, run, refuse):
        """Call ``run()`` once the gate's view is complete (now, if it is).
        Should the load be closed first, ``refuse()`` is called instead."""
        if self.ready:
            run()
        else:
            self.waiting.append((run, refuse))

    def _check_ready(self):
        if self.ready or self.closed or not self.started or self.reading:
            return
        self.ready = True
        while self.waiting and not self.closed:
            run, _ = self.waiting.popleft()
            self._call(run, "a request that waited on recovery")

    def close(self):
        """The plugin instance is going away: refuse what still waits.  A
        job still being recovered stays so in the gate: the next load
        reads it again."""
        self.closed = True
        waiting, self.waiting = self.waiting, deque()
        for _, refuse in waiting:
            self._call(refuse, "refusing a request that waited on recovery")

    def _call(self, callback, what):
        try:
            callback()
        except Exception as exc:  # noqa: BLE001 - one must not stop the rest
            self.port.log(syslog.LOG_ERR, f"{what}: {type(exc).__name__}: {exc}")
