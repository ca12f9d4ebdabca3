"""What the gate tells dws.so of its rabbit jobs: a hold became active,
a held job got an exception.

dws.so is one of the gate's listeners
(:class:`~flux_epilog_gate.gate.listeners.Listeners`): an activation of
dws-setup or dws-epilog starts that phase's request to the service, and
a fatal exception ends it (an active dws-setup with status 1; an active
dws-epilog by asking the service to tear down, or to abort if it is the
epilog timeout's).  The plugin instance is the listener the gate knows;
its methods are this object's, bound once.

Once a plugin has asked for a job's events flux-core packs the job's
arguments for every event of the job that follows, asked for or not (a
rabbit job's events from prolog-start on cost it more than a tenth of
the job-manager's work on the job).  So none is asked for: a fatal
exception during dws-setup moves the job to CLEANUP, where the gate ends
the hold as this listener would have (status 1, the exception recorded
with the end: the plugin has the gate end dws-setup when its job is
aborted); one during dws-epilog reaches this listener from the
instance's ``job-exception`` events (``Gate.watch_exceptions``), a
little after it was posted and without its note (so the end of a
dws-epilog it aborts records none; the epilog timeout's own is ended by
:meth:`.epilog.Epilog.epilog_timed_out`, with it).
"""

from ..gate.holds import EPILOG as EPILOG_POINT
from ..gate.holds import PROLOG as PROLOG_POINT
from ..gate.holds import exception_of
from .names import EPILOG, EPILOG_TIMEOUT, SETUP


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
        gate, see :attr:`flux_epilog_gate.gate.Gate.listeners`).  A
        dws-epilog's exceptions matter from now on (see
        :meth:`exception`): they are watched for before anything can
        raise one."""
        if hold.description == SETUP and hold.point == PROLOG_POINT:
            if self.jobs.is_rabbit(hold.id):
                self.prolog.start_setup(hold.id)
        elif hold.description == EPILOG and hold.point == EPILOG_POINT:
            if self.jobs.is_rabbit(hold.id):
                self.gate.watch_exceptions(hold.id)
                self.epilog.start_epilog(hold.id, hold.t_start)

    def wants_events(self, jobid):
        """True while the job's exceptions would end its dws-epilog (a
        listener of the gate)."""
        return self.jobs.active(jobid, EPILOG)

    def exception(self, jobid, context):
        """A job exception of a job the gate holds."""
        if context.get("severity") != 0:
            return
        raised = exception_of(context)
        if self.jobs.active(jobid, SETUP):
            self.jobs.release(jobid, SETUP, 1, raised=raised)
        elif self.jobs.active(jobid, EPILOG):
            if context.get("type") == EPILOG_TIMEOUT:
                self.epilog.timed_out(jobid, raised)
            else:
                self.jobtap.messages.rpc("dws.teardown", {"jobid": jobid})
