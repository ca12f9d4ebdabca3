"""dws-epilog: a rabbit job's data moved out and its storage torn down.

The job's ``dws-epilog`` is an epilog hold of the gate: at the job's
epilog point (its ``finish``, or its entry to CLEANUP if it never
started) the gate makes it active, and this phase sends
``dws.post_run``.  The service's ``epilog-remove`` releases it.  With an
epilog timeout (the load's ``epilog-timeout``), a hold active that long
gets the job a ``dws-epilog-timeout`` exception, which asks the service
to abort (see :class:`.listener.Listener`).
"""

import errno
import syslog

import flux.constants

from ..errors import GateError
from ..gate.holds import ACTIVE
from ..jobtap.plugin import RequestError
from .jobs import f58, not_started
from .names import EPILOG, EPILOG_TIMEOUT

CLEANUP = flux.constants.FLUX_JOB_STATE_CLEANUP

#: The note of the epilog timeout's exception (flux-coral2's).
TIMED_OUT = "DWS epilog timed out"


class Epilog:
    """The dws-epilog phase of rabbit jobs and their epilog timeouts
    (``timeout`` seconds, 0 or less for none): through the plugin's
    ``jobtap``, its ``gate`` and ``service``, ``jobs``
    (:class:`.jobs.Jobs`) and ``payloads`` (:class:`.payload.Payloads`).
    Owns the timers."""

    def __init__(self, jobtap, gate, service, jobs, payloads, timeout):
        self.jobtap = jobtap
        self.gate = gate
        self.service = service
        self.jobs = jobs
        self.payloads = payloads
        self.epilog_timeout = timeout
        #: job id -> the timer of its dws-epilog's epilog-timeout
        self.timers = {}
        #: The job whose epilog timeout's exception is being raised.
        self.timing_out = None

    def start_epilog(self, jobid, t_start):
        self.arm_timeout(jobid, t_start)
        started = self.gate.posted(jobid, "start")
        if self.service.post_run(jobid, started) < 0:
            self.finish_epilog(jobid, False, "Failed to send dws.post_run RPC")

    def arm_timeout(self, jobid, t_start):
        if self.epilog_timeout <= 0 or jobid in self.timers:
            return
        left = t_start + self.epilog_timeout - self.jobtap.now()
        self.timers[jobid] = self.jobtap.timer(
            max(left, 0.001), lambda: self.epilog_timed_out(jobid)
        )

    def stop_timeout(self, jobid):
        timer = self.timers.pop(jobid, None)
        if timer is not None:
            timer.stop()

    def stop_timeouts(self):
        """The plugin goes away: no timer may call into it any more."""
        for jobid in list(self.timers):
            self.stop_timeout(jobid)

    def post_ran(self, jobid, errnum, errstr):
        """``dws.post_run`` failed: ``errnum`` if it did (or its answer
        is malformed), else 0 and its answer's ``errstr``."""
        if errnum:
            self.finish_epilog(jobid, False, "Failed to send dws.post_run RPC")
            return
        self.finish_epilog(jobid, False, errstr)

    def epilog_timed_out(self, jobid):
        """The job's epilog timeout: its exception, then, as for one raised
        by another (see :meth:`.listener.Listener.exception`), the service
        asked to abort and the dws-epilog ended with status 1 and the
        exception recorded.  At once: the exception reaches the listener
        only later, and without its note."""
        self.timers.pop(jobid, None)
        if self.jobs.state_of(jobid) != CLEANUP:
            return
        self.timing_out = jobid
        try:
            raised = self.jobs.raise_exception(jobid, EPILOG_TIMEOUT, TIMED_OUT)
        finally:
            self.timing_out = None
        self.abort(jobid, raised)

    def timed_out(self, jobid, raised):
        """An epilog timeout's exception reached the listener (``raised``:
        as recorded, or True): one another raised, unless this plugin is
        raising its own (it ends the hold itself)."""
        if jobid != self.timing_out:
            self.abort(jobid, raised)

    def abort(self, jobid, raised):
        """The job's epilog timed out (``raised``: its exception, as
        recorded, or True): ask the service to abort, end the dws-epilog
        with status 1."""
        if not self.jobs.active(jobid, EPILOG):
            return
        # Answered, but nothing waits for the answer.
        self.jobtap.messages.rpc("dws.abort", {"jobid": jobid})
        self.stop_timeout(jobid)
        self.jobs.release(jobid, EPILOG, 1, raised=raised)

    def finish_epilog(self, jobid, success, errstr):
        """End the job's dws-epilog (status 0 on success, else 1 after an
        exception naming ``errstr``); True if it was held."""
        raised = False
        if not success:
            self.jobtap.log(
                syslog.LOG_ERR,
                f"Failed to clean up DWS workflow object for job {f58(jobid)}",
            )
            raised = self.jobs.fail(jobid, EPILOG, errstr)
        self.stop_timeout(jobid)
        return self.jobs.release(jobid, EPILOG, 0 if success else 1, raised=raised)

    def epilog_remove(self, request):
        """The service's ``epilog-remove`` {id}, as the runtime decoded it:
        checked, then :meth:`remove`."""
        payload = self.payloads.payload_of(
            request, "epilog-remove", (), raise_on_job=False
        )
        self.remove(request, payload["id"])

    def remove(self, request, jobid):
        """The job's storage is torn down (``request``: its well-formed
        ``epilog-remove``); let it go inactive."""
        hold = self.jobs.holds(jobid).get(EPILOG)
        # An active dws-epilog keeps its job in CLEANUP (it became active
        # there, and its job cannot leave before its end): only the state
        # of a job without one is looked up.
        active = hold is not None and hold.state == ACTIVE
        if not active and self.jobs.state_of(jobid) != CLEANUP:
            raise RequestError(errno.ENOENT, "job not found in CLEANUP state")
        if hold is None and not self.gate.gone(jobid, EPILOG):
            self.jobs.finish_foreign(
                request.detach(), jobid, EPILOG, lambda: self._finish_foreign(jobid)
            )
            return
        if hold is not None and not active:
            # In CLEANUP short of its epilog point (its processes may still
            # run): releasing the pending hold would skip dws.post_run.
            raise RequestError(
                errno.EINVAL,
                not_started(jobid, EPILOG, "the job's processes have not ended"),
            )
        try:
            self.finish_epilog(jobid, True, None)
        except GateError as exc:
            self.jobtap.log(
                syslog.LOG_ERR,
                f"Failed to finish epilog {EPILOG} for job {f58(jobid)}: {exc}",
            )
            raise RequestError(exc.errnum, "could not finish epilog") from None
        request.respond(None)

    def _finish_foreign(self, jobid):
        """Finish the job's dws-epilog epilog that another plugin (such as
        dws-jobtap.so) started (see :meth:`.jobs.Jobs.finish_foreign`)."""
        self.jobtap.jobs.epilog_finish(jobid, EPILOG, 0)
