"""dws: the rabbit (burst-buffer) workflow of flux-coral2, on the gate.

A drop-in for flux-coral2's ``dws-jobtap.so``, driven by its DWS service
(``coral2_dws.py``) with the same requests both ways.  A job that asks
for rabbit storage (jobspec ``attributes.system.dw``) gets three holds of
the gate (:mod:`flux_epilog_gate.gate`) in its ``job.state.depend``
callback:

- ``dws-create``, a dependency hold, while ``dws.create`` places its
  storage; the service's ``resource-update`` rewrites the job's resources
  and constraints and releases it;
- ``dws-setup``, a prolog hold: once the job enters RUN, ``dws.setup``
  mounts the storage; the service's ``prolog-remove`` releases it;
- ``dws-epilog``, an epilog hold: at the job's epilog point (its
  ``finish``, or its entry to CLEANUP if it never started)
  ``dws.post_run`` moves data out and tears the storage down; the
  service's ``epilog-remove`` releases it.

The holds are the gate's: its hold log keeps them across reloads,
restarts and crashes, ``flux-epilog-gate list`` shows them, and the
gate posts their events.  This plugin sends the service's requests when
the gate says a hold became active, and answers the service.  A fatal
exception ends an active ``dws-setup`` with status 1, or, during the
epilog, asks the service to tear down (``dws.teardown``), or to abort
(``dws.abort``) if it is the epilog timeout's (``epilog-timeout``
seconds, a load option).

dws.so is a plugin of the gate (:class:`~flux_epilog_gate.plugin.GateDriver`):
alone, it loads the gate and drives it; beside epilog-gate.so both share
the one gate of their job-manager (see :mod:`flux_epilog_gate.plugin.host`).
Other jobs never enter Python in this plugin: its ``job.state.depend`` is
filtered in C.  The service's requests are packed, sent and answered in
C (service.c): Python hears of one only if it failed
(:meth:`Dws.call_failed`), and never decodes a rabbit job's jobspec.
"""

import errno
import syslog

import flux.constants
from flux.job import JobID

from ..errors import GateError
from ..gate import protocol
from ..gate.config import Config, ConfigError
from ..gate.holds import ACTIVE
from ..gate.holds import DEPEND as DEPEND_POINT
from ..gate.holds import EPILOG as EPILOG_POINT
from ..gate.holds import PROLOG as PROLOG_POINT
from ..jobtap.plugin import Refused, RequestError, job_topic, plugin_topic
from ..jobtap.plugin import request as rpc_method
from ..plugin import GateDriver, after_recovery
from .config import epilog_timeout
from .constraints import ConstraintError, combine
from .eventlog import created_before, held_actions
from .names import (
    CREATE,
    DW,
    EPILOG,
    EPILOG_TIMEOUT,
    FAILED,
    NO_SERVICE,
    OUT_OF_SYNC,
    SETUP,
)
from .service import CALL_CREATE, CALL_POST_RUN, CALL_R, CALL_SETUP, DwsService
from .validate import Malformed, check_constraint, check_update

__all__ = ["Dws", "created_before", "held_actions"]

DEPEND = flux.constants.FLUX_JOB_STATE_DEPEND
CLEANUP = flux.constants.FLUX_JOB_STATE_CLEANUP

#: Where each of a rabbit job's holds keeps it.
POINTS = {CREATE: DEPEND_POINT, SETUP: PROLOG_POINT, EPILOG: EPILOG_POINT}

#: The key paths of a job that resource-update reads, and the keys of
#: its attributes.system they are.
STATE = "state"
SYSTEM = {
    "jobspec.attributes.system.constraints": "constraints",
    "jobspec.attributes.system.allow_rabbits": "allow_rabbits",
}


def f58(jobid):
    return JobID(jobid).f58


def missing_keys(payload, keys):
    """What is wrong with a request's payload, short of its values' shapes:
    not an object, no job id in ``id``, a key of ``keys`` missing, or an
    ``errmsg`` that is not a string; None if nothing."""
    if not isinstance(payload, dict):
        return "payload is not an object"
    jobid = payload.get("id")
    if not (type(jobid) is int and 0 <= jobid < 2**64):
        return "id: is not a job id"
    for key in keys:
        if key not in payload:
            return f"{key}: is missing"
    errmsg = payload.get("errmsg")
    if errmsg is not None and not isinstance(errmsg, str):
        return "errmsg: is not a string"
    return None


def exception_of(context):
    """The job exception whose event context is ``context``, as the
    gate records it with the end of a hold (``{type, severity, note}``),
    or True if it has no type (the gate then records none)."""
    kind, note = context.get("type"), context.get("note", "")
    if not isinstance(kind, str) or not kind or not isinstance(note, str):
        return True
    return {"type": kind, "severity": 0, "note": note}


def not_started(jobid, description, why=None):
    """The error of a request to end a prolog or epilog that is not open."""
    action = "prolog" if description == SETUP else "epilog"
    text = f"{action} {description} of job {f58(jobid)} is not active"
    if why is not None:
        text += f": it has not started, {why}"
    return text


class Dws(GateDriver):
    """The ``dws`` plugin: holds rabbit jobs with the gate for the DWS
    service."""

    #: epilog-gate.so drives the gate whenever it is loaded (its rules and
    #: services need its own port); dws.so drives it only alone.
    drive_rank = 0

    def __init__(self, jobtap, service=None):
        super().__init__(jobtap)
        #: service.c's requests to the DWS service (a :class:`.service.Service`).
        self.service = service if service is not None else DwsService(jobtap)
        self.epilog_timeout = 0.0
        #: Why the epilog timeout in force is not the load's (a load
        #: despite a bad one while the instance started), or None.
        self.config_error = None
        self.configured = False
        #: job id -> the timer of its dws-epilog's epilog-timeout
        self.timers = {}
        #: Jobs whose lost holds' workflow this instance tore down.
        self.torn = set()
        #: When this instance became a listener of the gate.
        self.listening_since = None

    @classmethod
    def bind_externs(cls, ffi, lib):
        """Define the extern "Python" function service.c calls when a
        request to the service failed."""

        @ffi.def_extern()
        def dws_py_failed(handle, jobid, kind, errnum, errstr):
            plugin = ffi.from_handle(handle)
            text = None if errstr == ffi.NULL else ffi.string(errstr)
            try:
                plugin.call_failed(jobid, kind, errnum, text)
            except Exception:  # noqa: BLE001 - inside the job-manager
                plugin.jobtap.log_exception("dws request")

    # Configuration

    @plugin_topic("conf.update")
    def configure(self, args):
        """The load (and each ``flux config reload``, which changes
        nothing: the options are the load's)."""
        if self.configured:
            return
        timeout = self._timeout()
        if not self.jobtap.load_options_given():
            self.log(syslog.LOG_INFO, "failed to unpack config: No plugin conf set")
        self.log(syslog.LOG_INFO, f"epilog timeout = {timeout:.3f}s")
        self.epilog_timeout = timeout
        # The gate dws.so loads (alone) has the defaults: epilog-gate's
        # configuration is epilog-gate.so's.
        self.commit(Config())
        # A cancel while dws.so is removed ends dws-setup all the same.
        self.gate.end_when_aborted(SETUP)
        self.gate.add_listener(self)
        #: Activations from now on are told to this instance.
        self.listening_since = self.jobtap.now()
        self.configured = True
        self.when_ready(self.adopt)

    def _timeout(self):
        """The load's epilog timeout.  A bad one fails the load (Refused),
        unless the instance is starting: then, as the C plugin does, the
        plugin runs without a timeout and says why (an error in the log
        and ``config_error`` in its query)."""
        try:
            return epilog_timeout(self.jobtap.load_options())
        except ConfigError as exc:
            if not self.instance_starting():
                raise Refused(f"dws: {exc}") from None
            self.config_error = (
                f"{exc}: loaded without an epilog timeout (fix the option, "
                "then load dws.so again)"
            )
            self.log(syslog.LOG_ERR, self.config_error)
            return 0.0

    def forward(self, new=False, depend=False):
        """The gate's job.new while it loads; every rabbit job's
        job.state.depend, always (rules are epilog-gate.so's)."""
        self.jobtap.marks.forward("job.new", new)
        self.jobtap.marks.forward("job.state.depend", True)

    @plugin_topic("plugin.query")
    def query(self, args):
        return {
            **self.log_status(),
            "epilog-timeout": self.epilog_timeout,
            "config_error": self.config_error,
            "drives-gate": self.driving,
            "prologs": self._active(SETUP),
            "epilogs": self._active(EPILOG),
        }

    def _active(self, description):
        return self.gate.jobs_holding(description, ACTIVE)

    def log(self, level, text):
        self.jobtap.log(level, text)

    def fail(self, jobid, type, errstr):
        """Raise a fatal exception of ``type`` on the job for a failed
        interaction with the DWS service; return it (see
        :meth:`raise_exception`)."""
        return self.raise_exception(
            jobid, type, FAILED + (errstr or "<no error string provided>")
        )

    def raise_exception(self, jobid, type, note):
        """Raise a fatal exception on the job; return it as the gate
        records it with the end of a hold, ``{type, severity, note}``."""
        try:
            self.jobtap.jobs.raise_exception(jobid, type, 0, note)
        except OSError as exc:
            self.log(syslog.LOG_ERR, f"raising {type} on {f58(jobid)}: {exc}")
        return {"type": type, "severity": 0, "note": note}

    def holds(self, jobid):
        """The job's holds in the gate ({} if none)."""
        return self.gate.job_holds(jobid)

    def active(self, jobid, description):
        hold = self.holds(jobid).get(description)
        return hold is not None and hold.state == ACTIVE

    def release(self, jobid, description, status, raised=False):
        """Release the job's hold; True if it held.  ``raised``: the job's
        fatal exception is this plugin's or the one it ended the hold for
        (the gate raises none), ``{type, severity, note}`` if known: the
        gate records it with the end, and raises it again should a crash
        lose it."""
        released, _ = self.gate.release(jobid, description, status, raised=raised)
        return released

    def adopt(self):
        """The gate's view is complete: take over the epilog timeouts of
        the dws-epilog holds already active (a load, reload or restart).
        A hold that became active while dws.so was removed from this same
        job-manager is started now, as it would have been then (one that
        an earlier instance started is not asked of the service again)."""
        since = self.host.departures.pop(self.name, None) if self.host else None
        # Lost while dws.so was not loaded (or before this load).
        for entry in self.gate.lost_holds():
            if POINTS.get(entry["description"]) == entry.get("point"):
                self.teardown_lost(entry["id"], entry["description"])
        for jobid in self._active(SETUP):
            if self.state_of(jobid) == CLEANUP and self.is_rabbit(jobid):
                # Its fatal exception came while dws.so was not loaded.
                self.end_aborted_setup(jobid)
        for jobid in self._active(SETUP):
            if self.unseen(since, self.holds(jobid)[SETUP].t_start):
                if self.is_rabbit(jobid):
                    self.start_setup(jobid)
        for jobid in self._active(EPILOG):
            t_start = self.holds(jobid)[EPILOG].t_start
            if self.unseen(since, t_start) and self.is_rabbit(jobid):
                self.start_epilog(jobid, t_start)
            else:
                self.arm_timeout(jobid, t_start)

    def unseen(self, since, t_start):
        """True if an activation at ``t_start`` came after dws.so left
        this job-manager (at ``since``, None if it never did) and before
        this instance listened."""
        return since is not None and since <= t_start < self.listening_since

    # Dependency: dws-create

    @job_topic("job.state.depend", every_job=True, requires=DW)
    def on_depend(self, job):
        # The jobspec is read in C (service.c), never decoded here.
        if self.service.check_args(job.args) < 0:
            self.raise_exception(job.id, "dws", "jobtap plugin failed to unpack args")
            return
        if self.gate.recovering(job.id):
            # Held before this load, maybe: its holds are being read back.
            jobid = job.id
            self.when_ready(lambda: self.recovered(jobid))
            return
        self.begin(job.id, job.args, inherited=self.loading, known=(DEPEND, job.userid))

    def recovered(self, jobid):
        state = self.state_of(jobid)
        if state == DEPEND:
            self.begin(jobid, None, inherited=True)

    def begin(self, jobid, args, inherited=False, known=None):
        """Hold a rabbit job in DEPEND and ask for its storage, unless that
        was done before this load.  ``args``: the job's callback's
        arguments (None: it is looked up); ``known``: its ``(state,
        userid)`` (from its callback)."""
        holds = self.holds(jobid)
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
            self.log(
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
                )
            except GateError as exc:
                if description != CREATE:
                    self.log(syslog.LOG_ERR, f"{f58(jobid)}: {exc.message}")
                    continue
                self.log(
                    syslog.LOG_ERR,
                    f"Failed to add dws jobtap dependency for {f58(jobid)}: "
                    f"{exc.message}",
                )
                self.raise_exception(
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
            self.log(syslog.LOG_ERR, f"Failed to send dws.create RPC for {f58(jobid)}")
            note = "Failed to send dws.create RPC"
            if not unpacked:
                note = "jobtap plugin failed to unpack args"
            self.raise_exception(jobid, "dws", note)

    def call_failed(self, jobid, kind, errnum, errstr):
        """A request to the service failed (service.c): ``errnum`` if it
        did (or its answer is not ``{success, errstr?}``), else 0 and the
        ``errstr`` (bytes or None) of its answer's success false."""
        if errstr is not None:
            errstr = errstr.decode("utf-8", "replace")
        if kind == CALL_CREATE:
            self.created(jobid, errnum, errstr)
        elif kind == CALL_SETUP:
            self.set_up(jobid, errnum, errstr)
        elif kind == CALL_R:
            self.setup_failed(jobid, "Failed to unpack R")
        elif kind == CALL_POST_RUN:
            self.post_ran(jobid, errnum, errstr)

    def created(self, jobid, errnum, errstr):
        if errnum:
            nosys = errnum == errno.ENOSYS
            errstr = NO_SERVICE if nosys else "Failed to unpack dws.create RPC"
            self.fail(jobid, CREATE, errstr)
            return
        self.fail(jobid, CREATE, errstr or "dws.create RPC returned failure")

    @rpc_method("resource-update")
    @after_recovery
    def resource_update(self, request):
        """The job's storage is placed: ``{id, resources, exclude,
        errmsg?}``; update its jobspec and let it leave DEPEND.  The whole
        request is checked first (see :mod:`.validate`): a value the
        scheduler or job-list cannot read never reaches the jobspec."""
        payload = self.payload_of(request, "resource-update", ("resources", "exclude"))
        jobid = payload["id"]
        try:
            check_update(payload["resources"], payload["exclude"])
        except Malformed as exc:
            self.malformed(jobid, "resource-update", str(exc))
        errmsg = payload.get("errmsg")
        if errmsg is not None:
            self.fail(jobid, "dws", str(errmsg))
            request.respond(None)
            return
        try:
            job = self.jobtap.jobs.pick(jobid, STATE, *SYSTEM)
        except OSError:
            job = None
        if job is None or job.get(STATE) != DEPEND:
            raise RequestError(errno.ENOENT, "job not found in depend state")
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
            self.log(syslog.LOG_ERR, f"{f58(jobid)}: {errmsg}: {exc}")
            self.fail(jobid, "dws", "Internal error: failed to update jobspec")
            raise RequestError(exc.errno, errmsg) from None
        try:
            if not self.release(jobid, CREATE, 0):
                # Added by another plugin before this one was loaded.
                self.jobtap.jobs.dependency_remove(jobid, CREATE)
        except (OSError, GateError) as exc:
            errmsg = "Failed to remove dependency for job"
            self.log(syslog.LOG_ERR, f"{CREATE}: {errmsg} {f58(jobid)}: {exc}")
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
            self.log(syslog.LOG_ERR, f"{errmsg} for {f58(jobid)}: {exc}")
            self.fail(jobid, "dws", errmsg)
            raise RequestError(errno.EINVAL, f"{errmsg}: {exc}") from None
        return combined

    def state_of(self, jobid):
        """The job's state, None if it is not active."""
        try:
            return self.jobtap.jobs.info(jobid)[0]
        except OSError:
            return None

    # Prolog: dws-setup

    def activated(self, hold):
        """The gate made one of the job's holds active (a listener of the
        gate, see :attr:`flux_epilog_gate.gate.Gate.listeners`).  The
        job's exceptions matter from now on (see :meth:`exception`): its
        events are asked for before anything can raise one."""
        if hold.description == SETUP and hold.point == PROLOG_POINT:
            if self.is_rabbit(hold.id):
                self.gate.send_events(hold.id)
                self.start_setup(hold.id)
        elif hold.description == EPILOG and hold.point == EPILOG_POINT:
            if self.is_rabbit(hold.id):
                self.gate.send_events(hold.id)
                self.start_epilog(hold.id, hold.t_start)

    def wants_events(self, jobid):
        """True while the job's exceptions would end its dws-setup or
        dws-epilog (a listener of the gate)."""
        return self.active(jobid, SETUP) or self.active(jobid, EPILOG)

    def end_aborted_setup(self, jobid):
        """End the dws-setup of a job that will never start: status 1,
        and no exception of the gate's (the job has its fatal one)."""
        if self.active(jobid, SETUP):
            self.log(
                syslog.LOG_INFO,
                f"{f58(jobid)}: {SETUP} ended: the job will never start",
            )
            self.release(jobid, SETUP, 1, raised=True)

    def is_rabbit(self, jobid):
        """True if the job asks for rabbit storage (a hold of this name
        on another job is someone else's): seen in DEPEND by this
        instance, or else looked up (in C: its jobspec is not decoded)."""
        return bool(self.service.is_rabbit(jobid))

    def start_setup(self, jobid):
        """Send ``dws.setup`` {jobid, R}, the job's R read from the KVS
        first, in C."""
        if self.service.setup(jobid) < 0:
            self.setup_failed(jobid, "Failed to unpack R")

    def set_up(self, jobid, errnum, errstr):
        if errnum:
            self.setup_failed(jobid, "Failed to unpack dws.setup RPC")
            return
        self.setup_failed(jobid, errstr or "dws.setup RPC returned failure")

    def setup_failed(self, jobid, errstr):
        """The exception this raises ends the prolog (see exception)."""
        if self.active(jobid, SETUP):
            self.log(
                syslog.LOG_ERR,
                f"Failed to setup DWS workflow object for job {f58(jobid)}",
            )
            self.fail(jobid, SETUP, errstr)

    @rpc_method("prolog-remove")
    @after_recovery
    def prolog_remove(self, request):
        """The job's storage is mounted: ``{id, variables}``; post its
        environment and let it start.  Only while its dws-setup prolog
        runs: before, the hold is pending, and releasing it would let the
        job run with no storage set up (the request is refused, nothing
        changed); after, there is nothing left to end."""
        payload = self.payload_of(request, "prolog-remove", ("variables",))
        jobid = payload["id"]
        hold = self.holds(jobid).get(SETUP)
        if hold is None and self.gate.gone(jobid, SETUP):
            # Ended already (a failed setup, a cancel): the service's
            # request crossed the end.
            request.respond(None)
            return
        if hold is None:
            self.log(syslog.LOG_ERR, f"no dws-setup prolog known for {f58(jobid)}")
            self.finish_foreign(request.detach(), jobid, SETUP, payload["variables"])
            return
        if hold.state != ACTIVE:
            raise RequestError(
                errno.EINVAL, not_started(jobid, SETUP, "the job is not running yet")
            )
        self.post_environment(jobid, payload["variables"])
        self.release(jobid, SETUP, 0)
        if not hold.aborted:
            # Running (not aborted by its entry to CLEANUP): its events
            # matter again only once its dws-epilog is active.
            self.gate.stop_events(jobid)
        request.respond(None)

    def post_environment(self, jobid, variables):
        """Post the job's ``dws_environment`` (its shell reads the storage's
        variables from it); on failure end its prolog and raise
        RequestError."""
        try:
            self.jobtap.jobs.post_event(
                jobid, "dws_environment", {"variables": variables}
            )
        except OSError as exc:
            errmsg = "failed to post dws_environment event"
            self.setup_failed(jobid, errmsg)
            raise RequestError(exc.errno, errmsg) from None

    def finish_foreign(self, request, jobid, description, variables=None):
        """Finish the job's prolog or epilog ``description`` that the gate
        does not hold, if its eventlog shows it open (one another plugin,
        such as dws-jobtap.so, started), and answer ``request``; refuse it
        if none is open (a prolog's environment is posted only then)."""

        def finish(text, error):
            if error is not None or description not in held_actions(text):
                request.error(errno.EINVAL, not_started(jobid, description))
                return
            try:
                if description == SETUP:
                    self.post_environment(jobid, variables)
                    self.jobtap.jobs.prolog_finish(jobid, SETUP, 0)
                else:
                    self.jobtap.jobs.epilog_finish(jobid, EPILOG, 0)
            except RequestError as exc:
                request.error(exc.errnum, exc.message)
                return
            except OSError as exc:
                request.error(exc.errno, f"could not finish {description}")
                return
            request.respond(None)

        self.jobtap.kvs.read(f"{JobID(jobid).kvs}.eventlog", finish)

    # Epilog: dws-epilog

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

    def post_ran(self, jobid, errnum, errstr):
        if errnum:
            self.finish_epilog(jobid, False, "Failed to send dws.post_run RPC")
            return
        self.finish_epilog(jobid, False, errstr)

    def epilog_timed_out(self, jobid):
        self.timers.pop(jobid, None)
        if self.state_of(jobid) == CLEANUP:
            self.raise_exception(jobid, EPILOG_TIMEOUT, "DWS epilog timed out")

    def finish_epilog(self, jobid, success, errstr):
        """End the job's dws-epilog (status 0 on success, else 1 after an
        exception naming ``errstr``); True if it was held."""
        raised = False
        if not success:
            self.log(
                syslog.LOG_ERR,
                f"Failed to clean up DWS workflow object for job {f58(jobid)}",
            )
            raised = self.fail(jobid, EPILOG, errstr)
        self.stop_timeout(jobid)
        return self.release(jobid, EPILOG, 0 if success else 1, raised=raised)

    @rpc_method("epilog-remove")
    @after_recovery
    def epilog_remove(self, request):
        """The job's storage is torn down: ``{id}``; let it go inactive."""
        jobid = self.payload_of(request, "epilog-remove", (), raise_on_job=False)["id"]
        if self.state_of(jobid) != CLEANUP:
            raise RequestError(errno.ENOENT, "job not found in CLEANUP state")
        hold = self.holds(jobid).get(EPILOG)
        if hold is None and not self.gate.gone(jobid, EPILOG):
            self.finish_foreign(request.detach(), jobid, EPILOG)
            return
        if hold is not None and hold.state != ACTIVE:
            # In CLEANUP short of its epilog point (its processes may still
            # run): releasing the pending hold would skip dws.post_run.
            raise RequestError(
                errno.EINVAL,
                not_started(jobid, EPILOG, "the job's processes have not ended"),
            )
        try:
            self.finish_epilog(jobid, True, None)
        except GateError as exc:
            self.log(
                syslog.LOG_ERR,
                f"Failed to finish epilog {EPILOG} for job {f58(jobid)}: {exc}",
            )
            raise RequestError(exc.errnum, "could not finish epilog") from None
        request.respond(None)

    # Listener of the gate: a tracked job's exceptions and end

    def exception(self, jobid, context):
        """A job exception of a job the gate holds."""
        if context.get("severity") != 0:
            return
        raised = exception_of(context)
        if self.active(jobid, SETUP):
            self.release(jobid, SETUP, 1, raised=raised)
        elif self.active(jobid, EPILOG):
            if context.get("type") == EPILOG_TIMEOUT:
                # Answered, but nothing waits for the answer.
                self.jobtap.messages.rpc("dws.abort", {"jobid": jobid})
                self.stop_timeout(jobid)
                self.release(jobid, EPILOG, 1, raised=raised)
            else:
                self.jobtap.messages.rpc("dws.teardown", {"jobid": jobid})

    def inactive(self, jobid):
        self.stop_timeout(jobid)

    def lost(self, hold):
        """One of the gate's holds was lost: its job will never reach its
        point (it was dropped at a restart, or went inactive while the
        gate was not loaded).  A rabbit job's workflow is torn down, as
        the C plugin ends one on an exception (``dws.teardown``), so the
        service strands nothing."""
        if POINTS.get(hold.description) == hold.point:
            self.teardown_lost(hold.id, hold.description)

    def teardown_lost(self, jobid, description):
        """``dws.teardown`` for the job of lost hold ``description``, once
        per job; the gate then forgets the hold (it is taken)."""
        if jobid not in self.torn:
            self.torn.add(jobid)
            self.log(
                syslog.LOG_ERR,
                f"{f58(jobid)}: {description} was lost: tearing its workflow down",
            )
            # Answered, but nothing waits for the answer.
            self.jobtap.messages.rpc("dws.teardown", {"jobid": jobid})
        self.gate.take_lost(jobid, description)

    def unload(self):
        for jobid in list(self.timers):
            self.stop_timeout(jobid)
        if self.gate is not None:
            self.gate.remove_listener(self)
        if self.host is not None:
            self.host.departures[self.name] = self.jobtap.now()
        self.service.close()
        super().unload()

    # Requests

    @rpc_method("list", guests=True, max_bytes=protocol.REQUEST_BYTES_MAX)
    @after_recovery
    def list_request(self, request):
        """The gate's ``list``, served under dws's name too: with dws.so
        loaded alone, ``flux-epilog-gate list`` shows a rabbit job's holds."""
        try:
            payload = request.payload
            payload = payload if payload is not None else {}
            jobid = protocol.parse_list(payload)
            text = self.gate.list_json(
                jobid,
                userid=None if request.owner else request.userid,
                columns=protocol.parse_list_columns(payload),
            )
        except GateError as exc:
            raise RequestError(exc.errnum, exc.message) from None
        except ValueError as exc:
            raise RequestError(
                errno.EPROTO, f"list: malformed payload: {exc}"
            ) from None
        self.jobtap.messages.send_text(request.msg, text)

    def payload_of(self, request, method, keys, raise_on_job=True):
        """The payload of ``request`` if it is an object with an integer
        ``id`` and ``keys``; else raise RequestError (and, with
        ``raise_on_job``, an exception on the job it names, if any)."""
        try:
            payload = request.payload
        except ValueError:
            payload = None
        jobid = payload.get("id") if isinstance(payload, dict) else None
        if not (type(jobid) is int and 0 <= jobid < 2**64):
            jobid = None
        problem = missing_keys(payload, keys)
        if problem is None:
            return payload
        self.malformed(jobid if raise_on_job else None, method, problem)

    def malformed(self, jobid, method, problem=None):
        """Refuse a malformed request of ``method`` (EPROTO), naming
        ``problem`` if known; raise the exception the service's requests
        raise for it on the job ``jobid`` (unless None): the job waits on
        a request that will not come right."""
        errmsg = f"received malformed dws.{method} RPC"
        if problem is not None:
            errmsg = f"{errmsg}: {problem}"
        if jobid is not None:
            self.fail(jobid, "exception", errmsg)
        self.log(syslog.LOG_ERR, errmsg + OUT_OF_SYNC)
        raise RequestError(errno.EPROTO, errmsg)
