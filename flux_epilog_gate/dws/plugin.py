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
The service's well-formed ``prolog-remove`` and ``epilog-remove`` are
decoded there too and reach Python as the job id (:meth:`Dws.removed`).

This module is the plugin itself: its load, configuration and query,
and the job callback, requests and listener methods the runtime and the
gate call, each handed to the part of the workflow it belongs to, built
once the load has the gate: :mod:`.create` (dws-create),
:mod:`.prolog` (dws-setup), :mod:`.epilog` (dws-epilog and its
timeouts), :mod:`.listener` (the gate's activations and exceptions),
:mod:`.recovery` (what a new instance takes over, lost holds), over
:mod:`.jobs` (a job's holds, state and exceptions) and :mod:`.payload`
(the service's requests checked).
"""

import errno
import syslog
from functools import partial

from ..errors import GateError
from ..gate import protocol
from ..gate.config import Config, ConfigError
from ..gate.holds import ACTIVE
from ..jobtap.plugin import (
    Refused,
    Request,
    RequestError,
    internal_error,
    job_topic,
    plugin_topic,
)
from ..jobtap.plugin import request as rpc_method
from ..plugin import GateDriver, after_recovery
from .config import epilog_timeout, shown_timeout
from .create import DEPEND, Create
from .epilog import Epilog
from .jobs import Jobs
from .listener import Listener
from .names import DW, EPILOG, SETUP
from .payload import Payloads
from .prolog import Prolog
from .recovery import Recovery
from .service import (
    CALL_CREATE,
    CALL_POST_RUN,
    CALL_R,
    CALL_SETUP,
    REMOVE_EPILOG,
    REMOVE_PROLOG,
    DwsService,
)

__all__ = ["Dws"]

#: The methods of the requests service.c decodes, by kind (REMOVE_*).
REMOVES = {REMOVE_PROLOG: "prolog-remove", REMOVE_EPILOG: "epilog-remove"}


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
        #: The workflow's parts, built by :meth:`configure` once the load
        #: has the gate (a load that fails builds none).
        self.jobs = self.create = self.prolog = self.epilog = self.recovery = None

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

        @ffi.def_extern()
        def dws_py_remove(handle, msg, kind, jobid, userid, rolemask, text):
            try:
                plugin = ffi.from_handle(handle)
                return plugin.removed(msg, kind, jobid, userid, rolemask, text)
            except Exception:  # noqa: BLE001 - inside the job-manager
                # Nothing was done (removed() answers whatever the phase
                # raised): the general path takes the request.
                return 0

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
        self.log(syslog.LOG_INFO, f"epilog timeout = {shown_timeout(timeout)}")
        self.epilog_timeout = timeout
        # The gate dws.so loads (alone) has the defaults: epilog-gate's
        # configuration is epilog-gate.so's.
        self.commit(Config())
        # A cancel while dws.so is removed ends dws-setup all the same.
        self.gate.end_when_aborted(SETUP)
        self._compose()
        self.gate.add_listener(self)
        # Activations from now on are told to this instance.
        listening_since = self.jobtap.now()
        self.configured = True
        self.when_ready(partial(self.recovery.adopt, listening_since))

    def _compose(self):
        """Build the workflow's parts on this load's gate, and make this
        instance the gate's listener they are (the gate knows it, and
        logs it, by its class): its listener methods are theirs, bound
        once, so that the gate's calls of a rabbit job reach them
        directly."""
        jobtap, gate, service = self.jobtap, self.gate, self.service
        jobs = self.jobs = Jobs(jobtap, gate, service)
        payloads = Payloads(jobs)
        self.create = Create(jobtap, gate, service, jobs, payloads)
        self.prolog = Prolog(jobtap, gate, service, jobs, payloads)
        self.epilog = Epilog(jobtap, gate, service, jobs, payloads, self.epilog_timeout)
        listener = Listener(jobtap, gate, jobs, self.prolog, self.epilog)
        phases = (self.create, self.prolog, self.epilog)
        self.recovery = Recovery(jobtap, gate, self.host, self.name, jobs, *phases)
        self.activated = listener.activated
        self.wants_events = listener.wants_events
        self.exception = listener.exception
        self.inactive = self.epilog.stop_timeout
        self.lost = self.recovery.lost

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
            "prologs": self.gate.jobs_holding(SETUP, ACTIVE),
            "epilogs": self.gate.jobs_holding(EPILOG, ACTIVE),
        }

    def log(self, level, text):
        self.jobtap.log(level, text)

    def unload(self):
        if self.jobs is not None:
            self.jobs.close()
        if self.epilog is not None:
            self.epilog.stop_timeouts()
        if self.gate is not None:
            self.gate.remove_listener(self)
        if self.host is not None:
            self.host.departures[self.name] = self.jobtap.now()
        self.service.close()
        super().unload()

    # Jobs and the service's answers: each to its phase

    @job_topic("job.state.depend", every_job=True, requires=DW)
    def on_depend(self, job):
        # The jobspec is read in C (service.c), never decoded here.
        if self.service.check_args(job.args) < 0:
            self.jobs.raise_exception(
                job.id, "dws", "jobtap plugin failed to unpack args"
            )
            return
        if self.gate.recovering(job.id):
            # Held before this load, maybe: its holds are being read back.
            self.when_ready(partial(self.recovery.recovered, job.id))
            return
        self.create.begin(
            job.id, job.args, inherited=self.loading, known=(DEPEND, job.userid)
        )

    def call_failed(self, jobid, kind, errnum, errstr):
        """A request to the service failed (service.c): ``errnum`` if it
        did (or its answer is not ``{success, errstr?}``), else 0 and the
        ``errstr`` (bytes or None) of its answer's success false."""
        if errstr is not None:
            errstr = errstr.decode("utf-8", "replace")
        if kind == CALL_CREATE:
            self.create.created(jobid, errnum, errstr)
        elif kind == CALL_SETUP:
            self.prolog.set_up(jobid, errnum, errstr)
        elif kind == CALL_R:
            self.prolog.setup_failed(jobid, "Failed to unpack R")
        elif kind == CALL_POST_RUN:
            self.epilog.post_ran(jobid, errnum, errstr)

    # Requests

    @rpc_method("resource-update")
    @after_recovery
    def resource_update(self, request):
        """The service placed the job's storage: see
        :meth:`.create.Create.resource_update`."""
        self.create.resource_update(request)

    @rpc_method("prolog-remove", c_handler="dws_prolog_remove_cb")
    @after_recovery
    def prolog_remove(self, request):
        """The service mounted the job's storage: see
        :meth:`.prolog.Prolog.prolog_remove`.  A well-formed one comes
        decoded by service.c instead (:meth:`removed`)."""
        self.prolog.prolog_remove(request)

    @rpc_method("epilog-remove", c_handler="dws_epilog_remove_cb")
    @after_recovery
    def epilog_remove(self, request):
        """The service tore the job's storage down: see
        :meth:`.epilog.Epilog.epilog_remove` (and :meth:`removed`)."""
        self.epilog.epilog_remove(request)

    def removed(self, msg, kind, jobid, userid, rolemask, text):
        """A well-formed ``prolog-remove`` or ``epilog-remove`` (``kind``,
        REMOVE_*) of job ``jobid``, decoded by service.c: to its phase's
        ``remove``, and answered, as the general path does; False if
        not taken (this instance is not ready: the general path makes
        the request wait)."""
        if not self.ready or self.prolog is None:
            return False
        phase = self.prolog if kind == REMOVE_PROLOG else self.epilog
        method = REMOVES[kind]
        request = Request(self.jobtap, method, msg, userid, rolemask, text)
        try:
            phase.remove(request, jobid)
        except RequestError as exc:
            request.error(exc.errnum, exc.message)
        except Exception:  # noqa: BLE001 - inside the job-manager
            internal_error(self, msg)
        return True

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
