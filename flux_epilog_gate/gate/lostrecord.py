"""The record of lost holds not yet delivered to a service.

A hold is *lost* when it ends without becoming active and its job will
never reach its point (see :mod:`flux_epilog_gate.gate.lost`).  A
service that made something for such a hold (a burst buffer) must learn
of it without polling: a watch stream that asks for them (``lost``) is
sent each, once, and each stays in this record until one such stream
acknowledges it (``watch-ack``) or an in-process listener takes it (the
dws plugin, which tears the job's workflow down).

The record is durable: KVS key :data:`KEY`, a JSON line per lost hold,
written whole (synced) whenever it changes, and read by the load of a
new job-manager.  A lost hold is recorded as cancelled in the hold log
only once this record holding it is checkpointed, so a crash in between
reports it lost again rather than never.  It is bounded in count
(:data:`MAX_KEPT`): past that, the oldest is dropped with a line at
level error.  Nothing is dropped for age: an undelivered hold waits for
its service however long that takes.
"""

import json
import syslog
from collections import OrderedDict

from ..jobid import f58
from .holds import POINTS, description_error

#: KVS key of the record.
KEY = "epilog-gate.lost"

#: Lost holds kept undelivered at most; past it the oldest goes.
MAX_KEPT = 1000

#: The keys of an entry (see :func:`entry_of`).
ENTRY_KEYS = frozenset(
    ("id", "description", "userid", "point", "ran", "lost", "reason")
)

#: Seconds before a record that failed to commit is written again.
RETRY = 1.0


def entry_of(hold, reason, ran=False):
    """What the record keeps of lost ``hold`` (and a watcher is sent):
    ``{id, description, userid, point, ran, lost: true, reason}``."""
    return {
        "id": hold.id,
        "description": hold.description,
        "userid": hold.userid,
        "point": str(hold.point),
        "ran": bool(ran),
        "lost": True,
        "reason": str(reason),
    }


def parse(data):
    """The entries of the record's value ``data`` (bytes), and the lines
    that are not entries (by number)."""
    entries, bad = [], []
    text = data.decode("utf-8", "replace") if data else ""
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line, parse_constant=_not_json)
            if not _is_entry(entry):
                raise ValueError("not a lost hold")
        except (ValueError, RecursionError):
            bad.append(number)
            continue
        entries.append(entry)
    return entries, bad


def _not_json(name):
    """NaN and the infinities: Python reads them, JSON has none."""
    raise ValueError(f"{name} is not JSON")


def _is_entry(entry):
    """True for a line as :func:`entry_of` writes it: the record is read
    back (and sent to services, and its job torn down) only so, whoever
    wrote the key."""
    if not isinstance(entry, dict) or set(entry) != ENTRY_KEYS:
        return False
    jobid, userid = entry["id"], entry["userid"]
    return (
        type(jobid) is int
        and 0 <= jobid < 2**64
        and description_error(entry["description"]) is None
        and (userid is None or (type(userid) is int and 0 <= userid < 2**32))
        and entry["point"] in POINTS
        and type(entry["ran"]) is bool
        and isinstance(entry["reason"], str)
        and entry["lost"] is True
    )


class LostRecord:
    """Lost holds not yet delivered, by ``(id, description)``, and their
    durable record.

    Owns the entries and the KVS key.  Calls the context's port's ``kvs_commit``,
    ``timer`` and ``log``.  Called by the losses (:meth:`add`), the
    watchers (:meth:`entries`, :meth:`delivered`), the in-process
    listeners (through the gate) and the loader (:meth:`found`).
    """

    def __init__(self, context):
        self.context = context
        self.items = OrderedDict()
        # Writes: one in flight at a time; a change meanwhile writes again.
        self._writing = False
        self._dirty = False
        self._timer = None
        # Callbacks of the changes the write in flight carries, and of
        # those since (each called once its change is durable).
        self._inflight = []
        self._waiting = []
        # Lost holds delivered by this instance (bounded as the record):
        # the same loss found again meanwhile (its eventlog read at the
        # load, the record read before it) is not a new one.
        self._delivered = OrderedDict()

    def __len__(self):
        return len(self.items)

    def __contains__(self, key):
        return key in self.items

    def found(self, data):
        """A new job-manager's load read the record's value ``data`` (bytes
        or None): keep its entries."""
        entries, bad = parse(data)
        for number in bad[:5]:
            self.context.port.log(syslog.LOG_ERR, f"{KEY}: line {number} skipped")
        for entry in entries[-MAX_KEPT:]:
            self.items[(entry["id"], entry["description"])] = entry
        if bad:
            self._write()

    def add(self, entry, durable=None):
        """Record lost hold ``entry`` (see :func:`entry_of`); True if it
        is new.  ``durable()`` is called once the record holding it is
        checkpointed (or, for a hold this instance delivered already,
        the record without it)."""
        key = (entry["id"], entry["description"])
        if key in self._delivered:
            # Delivered already: the record without it goes on.
            self._write(durable)
            return False
        new = key not in self.items
        self.items[key] = entry
        while len(self.items) > MAX_KEPT:
            (jobid, description), _ = self.items.popitem(last=False)
            self.context.port.log(
                syslog.LOG_ERR,
                f"lost hold {description} of job {f58(jobid)} dropped "
                f"undelivered: more than {MAX_KEPT} lost holds wait for a "
                "service",
            )
        self._write(durable)
        return new

    def entries(self):
        """The entries not yet delivered, oldest first."""
        return list(self.items.values())

    def delivered(self, key):
        """The lost hold ``key`` was delivered: forget it."""
        if self.items.pop(key, None) is not None:
            self._delivered[key] = True
            if len(self._delivered) > MAX_KEPT:
                self._delivered.popitem(last=False)
            self._write()

    def suspend(self):
        """The plugin is going away: the record as it is now goes at once,
        answered to nobody (the KVS applies it after the commit in flight,
        if any); the next plugin instance writes it again (:meth:`resume`)."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if not (self._dirty or self._writing or self._waiting):
            return
        self._dirty = True
        try:
            self.context.port.kvs_commit(KEY, self._text(), False, _ignored, sync=True)
        except Exception:  # noqa: BLE001 - the next instance writes it again
            pass

    def resume(self):
        """The next plugin instance takes the record over: what the
        previous one could not confirm is written again."""
        self._timer = None
        self._writing = False
        self._waiting[:0], self._inflight = self._inflight, []
        if self._dirty or self._waiting:
            self._write()

    def _write(self, durable=None):
        if durable is not None:
            self._waiting.append(durable)
        self._dirty = True
        if self._writing or self._timer is not None:
            return
        self._writing, self._dirty = True, False
        self._inflight, self._waiting = self._waiting, []
        try:
            self.context.port.kvs_commit(
                KEY, self._text(), False, self._written, sync=True
            )
        except Exception as exc:  # noqa: BLE001 - written again later
            self._written(exc)

    def _text(self):
        return "".join(
            json.dumps(entry, separators=(",", ":")) + "\n"
            for entry in self.items.values()
        )

    def _written(self, error):
        self._writing = False
        done, self._inflight = self._inflight, []
        if error is not None:
            self.context.port.log(
                syslog.LOG_ERR, f"{KEY}: commit failed: {error}: writing it again"
            )
            self._waiting[:0] = done
            self._dirty = True
            self._timer = self.context.port.timer(RETRY, self._retry)
            return
        for callback in done:
            callback()
        if self._dirty or self._waiting:
            self._write()

    def _retry(self):
        self._timer = None
        self._write()


def _ignored(error):
    """The answer to the record sent as the plugin goes away."""
