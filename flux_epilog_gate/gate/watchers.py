"""Watchers: clients streaming the activations of holds, with flow control.

A jobtap plugin cannot see how much of a response stream its client has
read: responses the client does not read wait in the broker, and without
a bound a stopped watcher makes the broker grow for as long as holds
become active.  So the client says what it has read: a ``watch-ack``
request carries the number of activations read on the stream so far.

A stream has at most :data:`WINDOW` activations sent and not
acknowledged; behind those, activations wait in the gate, as references
to payloads made once for every watcher.  A stream whose client is behind
by more than ``watch-backlog`` activations that came after it started (in
flight or waiting) is ended with ENOBUFS and forgotten.  The holds already
active when a stream starts do not count: they are sent as
acknowledgements make room (a hold released meanwhile is skipped), so a
watcher can always start, however many holds are active.  Nothing is lost
by an ended stream: watching again sends every hold still active.

So a client that stops reading costs the broker at most :data:`WINDOW`
responses queued to it, and the gate at most ``watch-backlog``
references, until it is ended.

A stream that asks for lost holds (``lost``, the owner's) is also sent
each hold that ended without becoming active (see
:mod:`flux_epilog_gate.gate.lost`), marked ``"lost": true``: first every
one the record of lost holds keeps (:mod:`.lostrecord`), before the
holds already active, then each as it is lost.  Such a hold counts as
an activation for the flow control, and leaves the record once the
client acknowledges it: a stream that ends first leaves it to the next.
"""

import errno
import syslog
from collections import deque

from ..errors import GateError
from .holds import ACTIVE

#: Activations a stream may have sent and not acknowledged: what waits in
#: the broker for a client that does not read.  The client acknowledges
#: far more often (see flux_epilog_gate/client).
WINDOW = 256

#: Watch streams one user other than the instance owner may have at once:
#: with the bytes of a request (protocol.REQUEST_BYTES_MAX), what a guest
#: can make the broker hold.  A service keeps one or a few.
WATCHES_PER_USER = 64


class Watcher:
    """A client streaming hold activations, and its flow control.

    ``sent`` counts the activations sent on the stream, ``acked`` those
    the client said it read; ``queue`` holds what waits for room: holds
    active when the stream started (their payload is made when sent) and
    then payloads of later activations.
    """

    __slots__ = (
        "sink",
        "descriptions",
        "userid",
        "points",
        "sent",
        "acked",
        "queue",
        "initial",
        "unsent",
        "lost",
        "lost_sent",
    )

    def __init__(self, sink, descriptions=None, userid=None, points=None, lost=False):
        self.sink = sink
        self.descriptions = frozenset(descriptions) if descriptions else None
        self.userid = userid
        self.points = frozenset(points) if points else None
        self.sent = 0
        self.acked = 0
        self.queue = deque()
        # How many entries at the head of the queue are holds active when
        # the stream started, and (by id) those holds: news of one of them
        # before its turn (a prolog hold aborted) goes with it, not twice.
        self.initial = 0
        self.unsent = set()
        #: Whether the stream asked for lost holds, and those it was sent
        #: and that the client has not acknowledged: ``(count, key)``, the
        #: count of ``sent`` that includes it.
        self.lost = lost
        self.lost_sent = deque()

    def wants_lost(self, entry):
        """True if the stream wants lost hold ``entry`` (a dict)."""
        return (
            self.lost
            and (self.descriptions is None or entry["description"] in self.descriptions)
            and (self.userid is None or self.userid == entry.get("userid"))
            and (self.points is None or entry.get("point") in self.points)
        )

    def wants(self, hold):
        return (
            (self.descriptions is None or hold.description in self.descriptions)
            and (self.userid is None or self.userid == hold.userid)
            and (self.points is None or hold.point in self.points)
        )

    @property
    def unacknowledged(self):
        return self.sent - self.acked

    @property
    def behind(self):
        """Activations since the stream started not acknowledged yet: in
        flight or waiting (those of the first holds are all sent before
        any later one)."""
        return self.unacknowledged + len(self.queue) - self.initial

    def window(self, backlog):
        return min(WINDOW, backlog)


class Watchers:
    """The gate's watch streams, told of each hold that becomes active
    (or is aborted).

    Owns the streams (``streams``, a list of :class:`Watcher`) and how
    many were ended for falling behind (``ended_behind``).  Calls the
    port's ``send_activation``, ``end_watch`` and ``log``, and reads the
    jobs (has the job started?).  Called by the gate's ``watch``,
    ``unwatch`` and ``watch-ack`` entry points, and by whatever makes a
    hold active or aborted (the lifecycle, the points, recovery).
    """

    def __init__(self, context, jobs, record=None):
        self.context = context
        self.jobs = jobs
        #: The record of lost holds not yet delivered
        #: (:class:`~flux_epilog_gate.gate.lostrecord.LostRecord`).
        self.record = record
        self.streams = []
        self.ended_behind = 0

    def watch(self, sink, descriptions=None, userid=None, points=None, lost=False):
        """Add a watcher; it is first sent every hold already active (with
        ``lost``, after every lost hold not yet delivered).  ``userid``: a
        guest's (None for the owner), who may have WATCHES_PER_USER
        streams at most (GateError EMFILE past it)."""
        if userid is not None:
            streams = sum(1 for w in self.streams if w.userid == userid)
            if streams >= WATCHES_PER_USER:
                raise GateError(
                    errno.EMFILE,
                    f"watch: user {userid} has {streams} watch streams "
                    f"already, the limit: end one first",
                )
        watcher = Watcher(sink, descriptions, userid, points, lost)
        if lost and self.record is not None:
            for entry in self.record.entries():
                if watcher.wants_lost(entry):
                    watcher.queue.append(entry)
        for job in self.jobs.values():
            for hold in job.holds.values():
                if hold.state == ACTIVE and watcher.wants(hold):
                    watcher.queue.append(hold)
        watcher.initial = len(watcher.queue)
        watcher.unsent = {id(hold) for hold in watcher.queue}
        self.streams.append(watcher)
        self._drain(watcher)

    def unwatch(self, match):
        """Drop watchers whose sink satisfies ``match(sink)``; return count."""
        before = len(self.streams)
        self.streams = [w for w in self.streams if not match(w.sink)]
        return before - len(self.streams)

    def end_all(self, end):
        """End every watch stream: ``end(sink)`` for each."""
        streams, self.streams = self.streams, []
        for watcher in streams:
            end(watcher.sink)

    def acknowledge(self, match, count):
        """The client of the stream whose sink satisfies ``match(sink)``
        has read ``count`` activations of it: send what waited for room.
        Raise GateError if there is no such stream, or if ``count`` is
        more than was sent."""
        watcher = next((w for w in self.streams if match(w.sink)), None)
        if watcher is None:
            raise GateError(errno.ENOENT, "watch-ack: no such watch stream")
        if count > watcher.sent:
            raise GateError(
                errno.EINVAL,
                f"watch-ack: count {count} is more than the {watcher.sent} "
                "activations sent",
            )
        watcher.acked = max(watcher.acked, count)
        sent = watcher.lost_sent
        while sent and sent[0][0] <= count:
            self.record.delivered(sent.popleft()[1])
        self._drain(watcher)

    def _activation(self, hold):
        job = self.jobs.get(hold.id)
        activation = {
            "id": hold.id,
            "description": hold.description,
            "userid": hold.userid,
            "ran": bool(job) and self.jobs.posted(job, "start"),
            "point": hold.point,
        }
        if hold.aborted:
            activation["aborted"] = True
        return activation

    def notify(self, hold):
        """``hold`` became active, or was aborted: tell the streams that
        want it."""
        if not self.streams:
            return
        payload = self._activation(hold)
        for watcher in list(self.streams):
            if watcher.wants(hold) and id(hold) not in watcher.unsent:
                self._offer(watcher, payload)

    def lost(self, entry):
        """A hold was lost (``entry``, see
        :func:`~flux_epilog_gate.gate.lostrecord.entry_of`): tell the
        streams that want lost holds."""
        for watcher in list(self.streams):
            if watcher.wants_lost(entry):
                self._offer_lost(watcher, entry)

    def _offer_lost(self, watcher, entry):
        """As :meth:`_offer`, for a lost hold (seldom: by the slow path)."""
        backlog = self.context.config.watch_backlog
        if watcher.queue or watcher.unacknowledged >= watcher.window(backlog):
            watcher.queue.append(entry)
            if watcher.behind > backlog:
                self._end_behind(watcher)
        else:
            self._send(watcher, entry)

    def _offer(self, watcher, payload):
        """Send ``payload`` to ``watcher``, or queue it behind what waits."""
        backlog = self.context.config.watch_backlog
        # watcher.unacknowledged >= watcher.window(backlog) and _send(),
        # written out: this runs for every activation.
        if watcher.queue or watcher.sent - watcher.acked >= min(WINDOW, backlog):
            watcher.queue.append(payload)
            if watcher.behind > backlog:
                self._end_behind(watcher)
        elif self.context.port.send_activation(watcher.sink, payload):
            watcher.sent += 1
        else:
            self._drop(watcher)

    def _drain(self, watcher):
        """Send what waits while the stream has room."""
        queue = watcher.queue
        window = watcher.window(self.context.config.watch_backlog)
        while queue and watcher.unacknowledged < window:
            item = queue.popleft()
            if watcher.initial:
                watcher.initial -= 1
                watcher.unsent.discard(id(item))
                if type(item) is dict:
                    # A lost hold: skip it if delivered meanwhile.
                    if (item["id"], item["description"]) not in self.record:
                        continue
                # Released since the stream started: nothing to do for it.
                elif item.state != ACTIVE:
                    continue
                else:
                    item = self._activation(item)
            if not self._send(watcher, item):
                return

    def _send(self, watcher, payload):
        if self.context.port.send_activation(watcher.sink, payload):
            watcher.sent += 1
            if "lost" in payload:
                key = (payload["id"], payload["description"])
                watcher.lost_sent.append((watcher.sent, key))
            return True
        self._drop(watcher)
        return False

    def _end_behind(self, watcher):
        """End the stream of a client that does not read (its memory goes
        with it)."""
        bound = self.context.config.watch_backlog
        self.context.port.end_watch(
            watcher.sink,
            errno.ENOBUFS,
            f"watch: more than {bound} activations not acknowledged "
            f"(watch-backlog={bound}): the watcher fell behind; watch again",
        )
        self.context.port.log(
            syslog.LOG_WARNING,
            f"ended a watch stream that fell behind (watch-backlog={bound})",
        )
        self.ended_behind += 1
        self._drop(watcher)

    def _drop(self, watcher):
        watcher.queue.clear()
        watcher.unsent.clear()
        watcher.lost_sent.clear()
        if watcher in self.streams:
            self.streams.remove(watcher)
