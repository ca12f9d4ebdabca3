"""The durable record of pending holds: one KVS key, written in batches.

A hold must survive a restart of the instance while it is *pending*; once
it is active, the ``epilog-start`` the gate posted to the job's eventlog
records it (with its timeout, see :data:`MARKER`), and ``epilog-finish``
records its end.  So the gate keeps pending holds in an eventlog of its
own, the KVS key :data:`KEY`, rather than in each job's eventlog: a record
in a job's eventlog costs the KVS a rewrite of the job's directory and
the job-manager a copy of the entry for as long as the job lives, while
one append here carries every hold of a batch.

Entries (RFC 18 eventlog lines):

``epilog_gate.hold {id, description[, timeout]}``
    a hold was registered (its timestamp is the hold's ``t_hold``)
``epilog_gate.cancel {id, description}``
    a pending hold was released before the job reached its epilog point

The log is appended to at most every :data:`FLUSH_DELAY` seconds, with the
holds registered meanwhile that are not gone by then, active ones too: the
log names every job that has holds, and at a load only the jobs it names
are recovered (a hold already gone is not needed: a cancelled one left
nothing, a finished one is ended in the job's eventlog).  The job-manager
writes its own events in batches the same way, so a hold is as durable as
the job's events.  Every
:data:`MAX_APPENDS` appends, the log is replaced by a snapshot of the
current holds, so that it stays short.

This module is plain Python; it reaches the KVS through the gate's port
(``kvs_commit(key, text, append, callback)``).
"""

import json
import syslog

from .holds import CANCEL_EVENT, GONE, HOLD_EVENT

#: The KVS key of the log.
KEY = "epilog-gate.holds"

#: Key of the ``epilog-start`` context that marks the gate's own: with it,
#: an active hold is recovered from the job's eventlog alone.
MARKER = "epilog_gate"

#: Seconds between a hold and the append that records it.
FLUSH_DELAY = 0.01

#: Appends between snapshots.  Each append adds a reference to the key's
#: value, which the KVS rewrites on every append.
MAX_APPENDS = 256


def hold_entry(hold):
    """The log line that records ``hold``."""
    context = {"id": hold.id, "description": hold.description}
    if hold.timeout is not None:
        context["timeout"] = hold.timeout
    return _line(hold.t_hold, HOLD_EVENT, context)


def cancel_entry(hold, timestamp):
    """The log line that records the cancellation of pending ``hold``."""
    return _line(
        timestamp, CANCEL_EVENT, {"id": hold.id, "description": hold.description}
    )


def _line(timestamp, name, context):
    entry = {"timestamp": timestamp, "name": name, "context": context}
    return json.dumps(entry, separators=(",", ":")) + "\n"


def parse(text):
    """Entries of the log ``text`` by job: ``{id: [(timestamp, name,
    context)]}``, with ``context`` as in the job's eventlog (no ``id``).
    Lines that cannot be understood are skipped and counted: returns
    ``(jobs, skipped)``."""
    jobs = {}
    skipped = 0
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            context = dict(entry["context"])
            jobid = context.pop("id")
            item = (float(entry["timestamp"]), entry["name"], context)
            if not isinstance(jobid, int) or item[1] not in (HOLD_EVENT, CANCEL_EVENT):
                raise ValueError(line)
        except (ValueError, KeyError, TypeError):
            skipped += 1
            continue
        jobs.setdefault(jobid, []).append(item)
    return jobs, skipped


class HoldLog:
    """Batches the records of pending holds and writes them to :data:`KEY`.

    ``holds`` is a callable that returns every current hold for a
    snapshot, or None while a snapshot would miss some (holds still being
    recovered from the log).
    """

    def __init__(self, port, holds):
        self.port = port
        self.holds = holds
        self.queue = []
        self.timer = None
        self.appends = 0
        self.commits = 0

    def add(self, hold):
        """``hold`` was registered."""
        self.queue.append(hold)
        self._arm()

    def cancel(self, hold):
        """Pending ``hold`` was released.  Only a hold already in the log
        needs a record of that."""
        if hold.logged:
            self.queue.append(cancel_entry(hold, self.port.now()))
            self._arm()

    def flush(self):
        """Write what is queued now."""
        self._disarm()
        lines = []
        for item in self.queue:
            if isinstance(item, str):
                lines.append(item)
            elif item.state != GONE and not item.logged:
                lines.append(hold_entry(item))
                item.logged = True
        self.queue = []
        if not lines:
            return
        live = self.holds() if self.appends >= MAX_APPENDS else None
        if live is not None:
            self._snapshot(live)
        else:
            self._commit("".join(lines), append=True)
            self.appends += 1

    def _snapshot(self, live):
        lines = []
        for hold in live:
            hold.logged = True
            lines.append(hold_entry(hold))
        self._commit("".join(lines), append=False)
        self.appends = 0

    def _commit(self, text, append):
        self.commits += 1
        try:
            self.port.kvs_commit(KEY, text, append, self._committed)
        except OSError as exc:
            self.port.log(syslog.LOG_ERR, f"recording holds in {KEY}: {exc}")

    def _committed(self, error):
        if error is not None:
            self.port.log(syslog.LOG_ERR, f"recording holds in {KEY}: {error}")

    def _arm(self):
        if self.timer is None:
            self.timer = self.port.timer(FLUSH_DELAY, self._fire)

    def _fire(self):
        self.timer = None
        self.flush()

    def _disarm(self):
        if self.timer is not None:
            self.timer.stop()
            self.timer = None
