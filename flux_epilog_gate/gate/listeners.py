"""In-process users of the gate (the dws plugin): told of what happens
to the holds and jobs they care about."""

import syslog


class Listeners(list):
    """The gate's in-process listeners, in the order they came.

    Each listener has the methods ``activated(hold)`` (a hold became
    active), ``exception(id, context)`` (a held job got an exception),
    ``inactive(id)`` (a held job is inactive) and ``wants_events(id)``
    (True while it would act on the job's exceptions: they are then
    sent, see :meth:`~flux_epilog_gate.gate.Gate.watch_exceptions`).
    Owns the list.  Calls the port's ``log``, and the context's
    ``listeners_changed`` hook when a listener comes or goes.  Called by the lifecycle
    (activations) and by the plugin (a job's exception and inactivity,
    the events it sends), through
    :meth:`~flux_epilog_gate.gate.Gate.tell`; listeners add and remove
    themselves.
    """

    def __init__(self, context):
        super().__init__()
        self.context = context

    def append(self, listener):
        super().append(listener)
        self._changed()

    def remove(self, listener):
        super().remove(listener)
        self._changed()

    def _changed(self):
        """Call the context's ``listeners_changed``, if set."""
        changed = self.context.listeners_changed
        if changed is not None:
            changed()

    def want_events(self, jobid):
        """True if some listener wants the events of job ``jobid`` (one
        without ``wants_events`` wants none)."""
        for listener in self:
            wants = getattr(listener, "wants_events", None)
            if wants is not None and wants(jobid):
                return True
        return False

    def tell(self, method, *args):
        """Call ``method(*args)`` of every listener; one that raises is
        logged, and the others are told all the same.  Return what each
        that raised raised (a list of ``(listener, exception)``): the
        caller may have to make up for it."""
        failed = []
        for listener in list(self):
            try:
                getattr(listener, method)(*args)
            # Whatever it is (RecursionError on a job's content, say):
            # the job-manager goes on, and so does the hold.
            except Exception as exc:  # noqa: BLE001 - a listener's, not ours
                self.context.port.log(
                    syslog.LOG_ERR,
                    f"{method}: listener {type(listener).__name__}: "
                    f"{type(exc).__name__}: {exc}",
                )
                failed.append((listener, exc))
        return failed
