"""In-process users of the gate (the dws plugin): told of what happens
to the holds and jobs they care about."""

import syslog


class Listeners(list):
    """The gate's in-process listeners, in the order they came.

    Each listener has the methods ``activated(hold)`` (a hold became
    active), ``exception(id, context)`` (a held job got an exception) and
    ``inactive(id)`` (a held job is inactive).  Owns the list.  Calls
    the port's ``log``.  Called by the lifecycle (activations) and by
    the plugin (a job's exception and inactivity), through
    :meth:`~flux_epilog_gate.gate.Gate.tell`; listeners add and remove
    themselves.
    """

    def __init__(self, context):
        super().__init__()
        self.context = context
        #: Called with no argument when a listener comes or goes: the
        #: plugin driving the gate has a held job's exceptions sent to it
        #: only while some listener wants them.
        self.changed = None

    def append(self, listener):
        super().append(listener)
        self._changed()

    def remove(self, listener):
        super().remove(listener)
        self._changed()

    def _changed(self):
        if self.changed is not None:
            self.changed()

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
