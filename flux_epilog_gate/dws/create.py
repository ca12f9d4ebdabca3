"""dws-create: a rabbit job's holds placed, and its storage asked for.

In its ``job.state.depend`` callback a rabbit job gets its three holds
(:data:`POINTS`) in one commit of the hold log, and the service gets
``dws.create``.  The service's ``resource-update`` then rewrites the
job's resources and constraints, and releases ``dws-create``.  A job in
DEPEND that this plugin finds at its load may have been held by another
plugin (dws-jobtap.so): its eventlog says whether ``dws.create`` was
sent already.
"""

import errno
import syslog

import flux.constants
from flux.job import JobID

from ..errors import GateError
from ..gate.holds import DEPEND as DEPEND_POINT
from ..gate.holds import EPILOG as EPILOG_POINT
from ..gate.holds import PROLOG as PROLOG_POINT
from ..jobtap.plugin import RequestError
from .constraints import ConstraintError, combine
from .eventlog import created_before
from .jobs import f58
from .names import CREATE, EPILOG, NO_SERVICE, SETUP
from .validate import Malformed, check_constraint, check_update

DEPEND = flux.constants.FLUX_JOB_STATE_DEPEND

#: Where each of a rabbit job's holds keeps it.
POINTS = {CREATE: DEPEND_POINT, SETUP: PROLOG_POINT, EPILOG: EPILOG_POINT}

#: The key paths of a job that resource-update reads, and the keys of
#: its attributes.system they are.
STATE = "state"
SYSTEM = {
    "jobspec.attributes.system.constraints": "constraints",
    "jobspec.attributes.system.allow_rabbits": "allow_rabbits",
}


class Create:
    """The dws-create phase of rabbit jobs: through the plugin's
    ``jobtap``, its ``gate`` and ``service``, ``jobs``
    (:class:`.jobs.Jobs`) and ``payloads`` (:class:`.payload.Payloads`).
    Owns no state: the holds are the gate's."""

    def __init__(self, jobtap, gate, service, jobs, payloads):
        self.jobtap = jobtap
        self.gate = gate
        self.service = service
        self.jobs = jobs
        self.payloads = payloads

    def begin(self, jobid, args, inherited=False, known=None):
        """Hold a rabbit job in DEPEND and ask for its storage, unless that
        was done before this load.  ``args``: the job's callback's
        arguments (None: it is looked up); ``known``: its ``(state,
        userid)`` (from its callback)."""
        holds = self.jobs.holds(jobid)
        if CREATE in holds or self.gate.gone(jobid, CREATE):
            # Held (or held and released) by the gate before: the service
            # has the job's workflow.
            return
        if not inherited:
            self.hold_all(jobid, known=known)
            self.send_create(jobid, args)
            return
        # A job in DEPEND that the gate never held: another plugin (such
        # as dws-jobtap.so) may have asked for its storage already.
        self.jobtap.kvs.read(
            f"{JobID(jobid).kvs}.eventlog",
            lambda text, error: self.inherit(jobid, text, error),
        )

    def inherit(self, jobid, text, error):
        if error is None and created_before(text, self.jobtap.now()):
            self.jobtap.log(
                syslog.LOG_INFO,
                f"{f58(jobid)}: {CREATE} from before this load kept, not sent again",
            )
            self.hold_all(jobid, create=False)
            return
        if self.hold_all(jobid):
            self.send_create(jobid, None)

    def hold_all(self, jobid, create=True, known=None):
        """Register the job's holds: dws-create (active at once), dws-setup
        and dws-epilog (pending).  False if dws-create could not be.
        ``known``: the job's ``(state, userid)``, from its callback.  The
        three records go to the hold log in one commit."""
        with self.gate.together():
            return self._hold_all(jobid, create, known)

    def _hold_all(self, jobid, create, known):
        stamp = self.gate.stamp()
        for description, point in POINTS.items():
            if description == CREATE and not create:
                continue
            try:
                self.gate.hold(
                    jobid,
                    description,
                    point=point,
                    default_timeout=False,
                    known=known,
                    stamp=stamp,
                )
            except GateError as exc:
                if description != CREATE:
                    self.jobtap.log(syslog.LOG_ERR, f"{f58(jobid)}: {exc.message}")
                    continue
                self.jobtap.log(
                    syslog.LOG_ERR,
                    f"Failed to add dws jobtap dependency for {f58(jobid)}: "
                    f"{exc.message}",
                )
                self.jobs.raise_exception(
                    jobid, "dws", "Failed to add dws jobtap dependency"
                )
                return False
        return True

    def send_create(self, jobid, args):
        """Send ``dws.create`` {dw_directives, jobid, resources, userid,
        failure_tolerance}, packed in C from ``args`` (the job's
        callback's; None: the job looked up)."""
        service = self.service
        if service.create(jobid, service.NO_ARGS if args is None else args) < 0:
            unpacked = service.errno() != errno.EPROTO
            self.jobtap.log(
                syslog.LOG_ERR, f"Failed to send dws.create RPC for {f58(jobid)}"
            )
            note = "Failed to send dws.create RPC"
            if not unpacked:
                note = "jobtap plugin failed to unpack args"
            self.jobs.raise_exception(jobid, "dws", note)

    def created(self, jobid, errnum, errstr):
        """``dws.create`` failed: ``errnum`` if it did (or its answer is
        malformed), else 0 and its answer's ``errstr``."""
        if errnum:
            nosys = errnum == errno.ENOSYS
            errstr = NO_SERVICE if nosys else "Failed to unpack dws.create RPC"
            self.jobs.fail(jobid, CREATE, errstr)
            return
        self.jobs.fail(jobid, CREATE, errstr or "dws.create RPC returned failure")

    def resource_update(self, request):
        """The job's storage is placed: ``{id, resources, exclude,
        errmsg?}``; update its jobspec and let it leave DEPEND.  The whole
        request is checked first (see :mod:`.validate`): a value the
        scheduler or job-list cannot read never reaches the jobspec."""
        payloads = self.payloads
        payload = payloads.payload_of(
            request, "resource-update", ("resources", "exclude")
        )
        jobid = payload["id"]
        try:
            check_update(payload["resources"], payload["exclude"], request.text)
        except Malformed as exc:
            payloads.malformed(jobid, "resource-update", str(exc))
        errmsg = payload.get("errmsg")
        if errmsg is not None:
            self.jobs.fail(jobid, "dws", str(errmsg))
            request.respond(None)
            return
        try:
            job = self.jobtap.jobs.pick(jobid, STATE, *SYSTEM)
        except OSError:
            job = None
        if job is None or job.get(STATE) != DEPEND:
            raise RequestError(errno.ENOENT, "job not found in depend state")
        if CREATE not in self.jobs.holds(jobid) and self.gate.gone(jobid, CREATE):
            # Its storage was placed already (the request sent again, or
            # crossing the first; the job still in DEPEND for another
            # dependency): a second update would join its constraints
            # again, and there is no dws-create left to release.
            raise RequestError(
                errno.ENOENT,
                f"{CREATE} of job {f58(jobid)} was released already: "
                "its resources were updated",
            )
        update = {"resources": payload["resources"]}
        if payload["exclude"] is not None:
            system = {key: job[path] for path, key in SYSTEM.items() if path in job}
            update["attributes.system.constraints"] = self.constraints(
                jobid, system, payload["exclude"]
            )
        try:
            self.jobtap.jobs.jobspec_update(jobid, update)
        except OSError as exc:
            errmsg = "could not update jobspec with new constraints and resources"
            self.jobtap.log(syslog.LOG_ERR, f"{f58(jobid)}: {errmsg}: {exc}")
            self.jobs.fail(jobid, "dws", "Internal error: failed to update jobspec")
            raise RequestError(exc.errno, errmsg) from None
        try:
            if not self.jobs.release(jobid, CREATE, 0):
                # Added by another plugin before this one was loaded.
                self.jobtap.jobs.dependency_remove(jobid, CREATE)
        except (OSError, GateError) as exc:
            errmsg = "Failed to remove dependency for job"
            self.jobtap.log(syslog.LOG_ERR, f"{CREATE}: {errmsg} {f58(jobid)}: {exc}")
            raise RequestError(getattr(exc, "errno", errno.EIO), errmsg) from None
        request.respond(None)

    def constraints(self, jobid, system, exclude):
        """The job's new constraints: its own (``system``, what
        :func:`~.constraints.combine` reads of its ``attributes.system``)
        joined with ``exclude``,
        checked whole (its own may be of a shape no matcher takes); on
        failure raise the job's exception and RequestError."""
        try:
            combined = combine(system, exclude)
            if combined is not exclude:
                # exclude alone was checked with the request.
                check_constraint(combined, "attributes.system.constraints")
        except (ConstraintError, Malformed, OSError, ValueError) as exc:
            errmsg = "Could not generate new constraints"
            self.jobtap.log(syslog.LOG_ERR, f"{errmsg} for {f58(jobid)}: {exc}")
            self.jobs.fail(jobid, "dws", errmsg)
            raise RequestError(errno.EINVAL, f"{errmsg}: {exc}") from None
        return combined
