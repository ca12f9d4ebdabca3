"""dws-setup: a rabbit job's storage mounted before it starts.

The job's ``dws-setup`` is a prolog hold of the gate: once the job
enters RUN the gate makes it active, and this phase sends ``dws.setup``
(the job's R read first, in C).  The service's ``prolog-remove`` gives
the storage's environment, posted for the job's shell, and releases the
hold.  A failure raises the job's fatal exception, which ends the hold
with status 1 (see :class:`.listener.Listener`).
"""

import errno
import syslog

from ..gate.holds import ACTIVE
from ..jobtap.plugin import RequestError
from .jobs import f58, not_started
from .names import SETUP


class Prolog:
    """The dws-setup phase of rabbit jobs: through the plugin's
    ``jobtap``, its ``gate`` and ``service``, ``jobs``
    (:class:`.jobs.Jobs`) and ``payloads`` (:class:`.payload.Payloads`).
    Owns no state: the holds are the gate's."""

    def __init__(self, jobtap, gate, service, jobs, payloads):
        self.jobtap = jobtap
        self.gate = gate
        self.service = service
        self.jobs = jobs
        self.payloads = payloads

    def start_setup(self, jobid):
        """Send ``dws.setup`` {jobid, R}, the job's R read from the KVS
        first, in C."""
        if self.service.setup(jobid) < 0:
            self.setup_failed(jobid, "Failed to unpack R")

    def set_up(self, jobid, errnum, errstr):
        """``dws.setup`` failed: ``errnum`` if it did (or its answer is
        malformed), else 0 and its answer's ``errstr``."""
        if errnum:
            self.setup_failed(jobid, "Failed to unpack dws.setup RPC")
            return
        self.setup_failed(jobid, errstr or "dws.setup RPC returned failure")

    def setup_failed(self, jobid, errstr):
        """The exception this raises ends the prolog (see
        :meth:`.listener.Listener.exception`)."""
        if self.jobs.active(jobid, SETUP):
            self.jobtap.log(
                syslog.LOG_ERR,
                f"Failed to setup DWS workflow object for job {f58(jobid)}",
            )
            self.jobs.fail(jobid, SETUP, errstr)

    def end_aborted_setup(self, jobid):
        """End the dws-setup of a job that will never start: status 1,
        and no exception of the gate's (the job has its fatal one)."""
        if self.jobs.active(jobid, SETUP):
            self.jobtap.log(
                syslog.LOG_INFO,
                f"{f58(jobid)}: {SETUP} ended: the job will never start",
            )
            self.jobs.release(jobid, SETUP, 1, raised=True)

    def prolog_remove(self, request):
        """The service's ``prolog-remove`` {id, variables}, as the
        runtime decoded it: checked, then :meth:`remove`."""
        payload = self.payloads.payload_of(request, "prolog-remove", ("variables",))
        self.remove(request, payload["id"])

    def remove(self, request, jobid):
        """The job's storage is mounted (``request``: its well-formed
        ``prolog-remove``); post its environment and let it start.  Only
        while its dws-setup prolog runs: before, the hold is pending, and
        releasing it would let the job run with no storage set up (the
        request is refused, nothing changed); after, there is nothing
        left to end."""
        hold = self.jobs.holds(jobid).get(SETUP)
        if hold is None and self.gate.gone(jobid, SETUP):
            # Ended already (a failed setup, a cancel): the service's
            # request crossed the end.
            request.respond(None)
            return
        if hold is None:
            self.jobtap.log(
                syslog.LOG_ERR, f"no dws-setup prolog known for {f58(jobid)}"
            )
            self.finish_foreign(request.detach(), jobid)
            return
        if hold.state != ACTIVE:
            raise RequestError(
                errno.EINVAL, not_started(jobid, SETUP, "the job is not running yet")
            )
        self.post_environment(jobid, request.msg)
        self.jobs.release(jobid, SETUP, 0)
        request.respond(None)

    def post_environment(self, jobid, msg):
        """Post the job's ``dws_environment`` (its shell reads the storage's
        variables from it) from ``msg``, its prolog-remove request; on
        failure end its prolog and raise RequestError."""
        service = self.service
        if service.post_environment(jobid, msg) < 0:
            errnum = service.errno() or errno.EIO
            errmsg = "failed to post dws_environment event"
            self.setup_failed(jobid, errmsg)
            raise RequestError(errnum, errmsg)

    def finish_foreign(self, request, jobid):
        """Finish the job's dws-setup prolog that another plugin (such as
        dws-jobtap.so) started, if it is open, posting its environment
        (from ``request``, detached) first (see
        :meth:`.jobs.Jobs.finish_foreign`)."""

        def finish():
            self.post_environment(jobid, request.msg)
            self.jobtap.jobs.prolog_finish(jobid, SETUP, 0)

        self.jobs.finish_foreign(request, jobid, SETUP, finish)
