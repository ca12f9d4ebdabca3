"""Hold timeouts: an active hold with a timeout is finished with
:data:`~flux_epilog_gate.gate.holds.TIMEOUT_STATUS` once it has been active
that long (counted from its activation, across reloads and restarts)."""

from .holds import TIMEOUT_STATUS, Reason


class Timeouts:
    """Part of :class:`~flux_epilog_gate.gate.Gate`: the timers of its
    active holds."""

    def expire(self, hold):
        """A hold's timeout expired."""
        job = self.jobs.get(hold.id)
        if job is None or job.holds.get(hold.description) is not hold:
            return
        hold.timer = None
        self._finish(job, hold, TIMEOUT_STATUS, Reason.TIMED_OUT)

    def _arm_timer(self, hold):
        if hold.timeout is None or hold.timer is not None:
            return
        delay = max(0.0, hold.t_start + hold.timeout - self.port.now())
        hold.timer = self.port.timer(delay, lambda: self.expire(hold))

    def _stop_timer(self, hold):
        if hold.timer is not None:
            hold.timer.stop()
            hold.timer = None
