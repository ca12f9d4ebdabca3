"""Watchers: clients streaming the activations of holds."""

from ..holds import ACTIVE


class Watcher:
    """A client streaming hold activations."""

    __slots__ = ("sink", "descriptions", "userid", "points")

    def __init__(self, sink, descriptions=None, userid=None, points=None):
        self.sink = sink
        self.descriptions = frozenset(descriptions) if descriptions else None
        self.userid = userid
        self.points = frozenset(points) if points else None

    def wants(self, hold):
        return (
            (self.descriptions is None or hold.description in self.descriptions)
            and (self.userid is None or self.userid == hold.userid)
            and (self.points is None or hold.point in self.points)
        )


class Watching:
    """Part of :class:`~flux_epilog_gate.gate.Gate`: its watchers, told
    of each hold that becomes active (or is aborted)."""

    def watch(self, sink, descriptions=None, userid=None, points=None):
        """Add a watcher; it is first sent every hold already active."""
        watcher = Watcher(sink, descriptions, userid, points)
        for job in self.jobs.values():
            for hold in job.holds.values():
                if hold.state == ACTIVE and watcher.wants(hold):
                    if not self.port.send_activation(sink, self._activation(hold)):
                        return
        self.watchers.append(watcher)

    def unwatch(self, match):
        """Drop watchers whose sink satisfies ``match(sink)``; return count."""
        before = len(self.watchers)
        self.watchers = [w for w in self.watchers if not match(w.sink)]
        return before - len(self.watchers)

    def _activation(self, hold):
        job = self.jobs.get(hold.id)
        activation = {
            "id": hold.id,
            "description": hold.description,
            "userid": hold.userid,
            "ran": bool(job) and self._posted(job, "start"),
            "point": hold.point,
        }
        if hold.aborted:
            activation["aborted"] = True
        return activation

    def _notify(self, hold):
        if not self.watchers:
            return
        payload = self._activation(hold)
        for watcher in list(self.watchers):
            if watcher.wants(hold) and not self.port.send_activation(
                watcher.sink, payload
            ):
                self.watchers.remove(watcher)
