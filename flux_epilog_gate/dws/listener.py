"""What the gate tells dws.so of its rabbit jobs: a hold became active,
a held job got an exception.

dws.so is one of the gate's listeners
(:class:`~flux_epilog_gate.gate.listeners.Listeners`): an activation of
dws-setup or dws-epilog starts that phase's request to the service, and
a fatal exception ends it (an active dws-setup with status 1; an active
dws-epilog by asking the service to tear down, or to abort if it is the
epilog timeout's).  The plugin instance is the listener the gate knows;
its methods are this object's, bound once.
"""

from ..gate.holds import EPILOG as EPILOG_POINT
from ..gate.holds import PROLOG as PROLOG_POINT
from .names import EPILOG, EPILOG_TIMEOUT, SETUP


def exception_of(context):
    """The job exception whose event context is ``context``, as the
    gate records it with the end of a hold (``{type, severity, note}``),
    or True if it has no type (the gate then records none)."""
    kind, note = context.get("type"), context.get("note", "")
    if not isinstance(kind, str) or not kind or not isinstance(note, str):
        return True
    return {"type": kind, "severity": 0, "note": note}


class Listener:
    """A listener of the gate for rabbit jobs: through the plugin's
    ``jobtap`` and ``gate``, ``jobs`` (:class:`.jobs.Jobs`) and the
    phases it starts and ends, ``prolog`` (:class:`.prolog.Prolog`) and
    ``epilog`` (:class:`.epilog.Epilog`).  Owns no state."""

    def __init__(self, jobtap, gate, jobs, prolog, epilog):
        self.jobtap = jobtap
        self.gate = gate
        self.jobs = jobs
        self.prolog = prolog
        self.epilog = epilog

    def activated(self, hold):
        """The gate made one of the job's holds active (a listener of the
        gate, see :attr:`flux_epilog_gate.gate.Gate.listeners`).  The
        job's exceptions matter from now on (see :meth:`exception`): its
        events are asked for before anything can raise one."""
        if hold.description == SETUP and hold.point == PROLOG_POINT:
            if self.jobs.is_rabbit(hold.id):
                self.gate.send_events(hold.id)
                self.prolog.start_setup(hold.id)
        elif hold.description == EPILOG and hold.point == EPILOG_POINT:
            if self.jobs.is_rabbit(hold.id):
                self.gate.send_events(hold.id)
                self.epilog.start_epilog(hold.id, hold.t_start)

    def wants_events(self, jobid):
        """True while the job's exceptions would end its dws-setup or
        dws-epilog (a listener of the gate)."""
        return self.jobs.active(jobid, SETUP) or self.jobs.active(jobid, EPILOG)

    def exception(self, jobid, context):
        """A job exception of a job the gate holds."""
        if context.get("severity") != 0:
            return
        raised = exception_of(context)
        if self.jobs.active(jobid, SETUP):
            self.jobs.release(jobid, SETUP, 1, raised=raised)
        elif self.jobs.active(jobid, EPILOG):
            if context.get("type") == EPILOG_TIMEOUT:
                # Answered, but nothing waits for the answer.
                self.jobtap.messages.rpc("dws.abort", {"jobid": jobid})
                self.epilog.stop_timeout(jobid)
                self.jobs.release(jobid, EPILOG, 1, raised=raised)
            else:
                self.jobtap.messages.rpc("dws.teardown", {"jobid": jobid})
