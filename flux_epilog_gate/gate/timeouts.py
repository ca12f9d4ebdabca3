"""Hold timeouts: the timer of each active hold that has a timeout,
counted from its activation (across reloads and restarts: ``t_start``
comes back from the eventlog).  What an expired timer does is its
caller's (:meth:`~flux_epilog_gate.gate.lifecycle.Lifecycle.expire`
finishes the hold with
:data:`~flux_epilog_gate.gate.holds.TIMEOUT_STATUS`)."""

from functools import partial


class Timeouts:
    """The timers of active holds.

    Owns each hold's ``timer``.  Calls the port's ``timer`` and ``now``.
    Called by the lifecycle (a hold becomes active, or ends) and reload
    (timers stop with the plugin instance and start again in the next).
    """

    def __init__(self, context):
        self.context = context

    def arm(self, hold, expire):
        """Call ``expire(hold)`` once ``hold`` has been active for its
        timeout (nothing if it has none, or is armed already)."""
        if hold.timeout is None or hold.timer is not None:
            return
        delay = max(0.0, hold.t_start + hold.timeout - self.context.port.now())
        # partial(), not a lambda: its cells would be made at every
        # activation, also of holds without a timeout.
        hold.timer = self.context.port.timer(delay, partial(expire, hold))

    @staticmethod
    def stop(hold):
        """Stop ``hold``'s timer, if it has one."""
        if hold.timer is not None:
            hold.timer.stop()
            hold.timer = None
