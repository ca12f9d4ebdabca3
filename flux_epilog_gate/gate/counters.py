"""The gate's counters, reported by ``query`` and ``flux epilog-gate stats``."""

from .holds import Reason

#: Every counter, in the order they are reported.
NAMES = (
    "held",
    "activated",
    "released",
    "cancelled",
    "failed",
    "timedout",
    "lost",
)

#: The counter a finished active hold counts in, by the reason it finished
#: (shutdown-timeout is a timeout too); any other reason counts as released.
_FINISHED = {Reason.TIMED_OUT: "timedout", Reason.SHUTDOWN: "timedout"}


class Counters(dict):
    """Counts of what happened to holds since the gate was made: a dict
    of :data:`NAMES` to numbers."""

    def __init__(self):
        super().__init__(dict.fromkeys(NAMES, 0))

    def finished(self, reason, status):
        """An active hold finished for ``reason`` with ``status``."""
        self[_FINISHED.get(reason, "released")] += 1
        if status != 0:
            self["failed"] += 1
