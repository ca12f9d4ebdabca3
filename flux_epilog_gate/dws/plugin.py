"""dws: the rabbit (burst-buffer) workflow of flux-coral2, in Python.

A drop-in for flux-coral2's ``dws-jobtap.so``, driven by its DWS service
(``coral2_dws.py``) with the same requests both ways.  A job that asks
for rabbit storage (jobspec ``attributes.system.dw``) is held three
times:

- in DEPEND by dependency ``dws-create``, while ``dws.create`` places its
  storage; the service's ``resource-update`` then rewrites the job's
  resources and constraints and removes the dependency;
- in its prolog ``dws-setup``, while ``dws.setup`` mounts the storage;
  the service's ``prolog-remove`` ends it;
- in its epilog ``dws-epilog``, from its ``finish`` event (or its entry
  to CLEANUP if it never started), while ``dws.post_run`` moves data out
  and tears the storage down; the service's ``epilog-remove`` ends it.

A fatal exception ends an active prolog with status 1, or, during the
epilog, asks the service to tear down (``dws.teardown``), or to abort
(``dws.abort``) if the exception is the epilog timeout's
(``epilog-timeout`` seconds, a load option).  Other jobs never enter
Python: the runtime filters them in C.
"""

import errno
import json
import math
import syslog
import time

import flux.constants
from flux.job import JobID

from ..jobtap.plugin import Plugin, Refused, RequestError, job_topic, plugin_topic
from ..jobtap.plugin import request as rpc_method
from .constraints import ConstraintError, combine

DW = "attributes.system.dw"
CREATE = "dws-create"
SETUP = "dws-setup"
EPILOG = "dws-epilog"
EPILOG_TIMEOUT = "dws-epilog-timeout"
#: The note of every exception the service's answers cause starts so.
FAILED = "DWS workflow interactions failed: "
OUT_OF_SYNC = (
    ", coral2_dws module and dws_jobtap plugin versions may be out of sync,"
    " Flux may need to be restarted"
)
NO_SERVICE = (
    "dws.create RPC could not be sent. "
    "Admins: is the flux-coral2-dws service loaded?"
)

DEPEND = flux.constants.FLUX_JOB_STATE_DEPEND
RUN = flux.constants.FLUX_JOB_STATE_RUN
CLEANUP = flux.constants.FLUX_JOB_STATE_CLEANUP


def f58(jobid):
    return JobID(jobid).f58


def answer_of(future):
    """``(success, errstr)`` of a DWS service's answer; OSError if the
    request failed, ValueError if the answer is not of that shape."""
    answer = future.get()
    if not isinstance(answer, dict) or not isinstance(answer.get("success"), bool):
        raise ValueError("answer has no boolean 'success'")
    errstr = answer.get("errstr")
    if errstr is not None and not isinstance(errstr, str):
        raise ValueError("'errstr' is not a string")
    return answer["success"], errstr


def created_before(eventlog, when):
    """True if ``eventlog`` (a job's, as text) has a ``dependency-add`` of
    dws-create posted before time ``when``."""
    return any(
        entry.get("name") == "dependency-add"
        and entry.get("context", {}).get("description") == CREATE
        and isinstance(entry.get("timestamp"), (int, float))
        and entry["timestamp"] < when
        for entry in entries(eventlog)
    )


def entries(eventlog):
    """The entries (dicts) of a job's eventlog given as text."""
    if isinstance(eventlog, bytes):
        eventlog = eventlog.decode(errors="replace")
    for line in eventlog.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("context", {}), dict):
            yield entry


def held_actions(eventlog):
    """``{description: start time}`` of the dws-setup prolog and
    dws-epilog epilog that ``eventlog`` shows started and not finished."""
    kinds = {"prolog-start": SETUP, "epilog-start": EPILOG}
    ends = {"prolog-finish": SETUP, "epilog-finish": EPILOG}
    held = {}
    for entry in entries(eventlog):
        name = entry.get("name")
        description = entry.get("context", {}).get("description")
        if description is None:
            continue
        if kinds.get(name) == description:
            held[description] = entry.get("timestamp", time.time())
        elif ends.get(name) == description:
            held.pop(description, None)
    return held


def parse_timeout(options):
    """The epilog timeout of the load options (seconds, <= 0: none)."""
    value = options.get("epilog-timeout", 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Refused(f"dws: epilog-timeout: {value!r} is not a number of seconds")
    if not math.isfinite(value):
        raise Refused(f"dws: epilog-timeout: {value!r} is not finite")
    return float(value)


class Epilog:
    """A job's ``dws-epilog``: running until finished once."""

    __slots__ = ("finished", "timer")

    def __init__(self):
        self.finished = False
        self.timer = None


class Dws(Plugin):
    """The ``dws`` plugin: holds rabbit jobs for the DWS service."""

    def __init__(self, jobtap):
        super().__init__(jobtap)
        self.epilog_timeout = 0.0
        self.configured = False
        #: job id -> is its dws-setup prolog still to be finished
        self.prolog = {}
        #: job id -> its Epilog
        self.epilog = {}
        #: ids of jobs already in DEPEND when this instance first saw them
        #: (a load with jobs in flight): their dws-create may be an earlier
        #: instance's
        self.inherited = set()

    # Configuration

    @plugin_topic("conf.update")
    def configure(self, args):
        """The load (and each ``flux config reload``, which changes
        nothing: the options are the load's)."""
        if self.configured:
            return
        if not self.jobtap.load_options_given():
            self.log(syslog.LOG_INFO, "failed to unpack config: No plugin conf set")
        self.epilog_timeout = parse_timeout(self.jobtap.load_options())
        self.log(syslog.LOG_INFO, f"epilog timeout = {self.epilog_timeout:.3f}s")
        for topic in (
            "job.new",
            "job.state.depend",
            "job.state.run",
            "job.state.cleanup",
        ):
            self.jobtap.forward(topic)
        self.configured = True

    @plugin_topic("plugin.query")
    def query(self, args):
        return {
            "epilog-timeout": self.epilog_timeout,
            "prologs": sorted(j for j, active in self.prolog.items() if active),
            "epilogs": sorted(j for j, e in self.epilog.items() if not e.finished),
        }

    def log(self, level, text):
        self.jobtap.log(level, text)

    def fail(self, jobid, type, errstr):
        """Raise a fatal exception of ``type`` on the job for a failed
        interaction with the DWS service."""
        self.raise_exception(
            jobid, type, FAILED + (errstr or "<no error string provided>")
        )

    def raise_exception(self, jobid, type, note):
        try:
            self.jobtap.raise_job_exception(jobid, type, 0, note)
        except OSError as exc:
            self.log(syslog.LOG_ERR, f"raising {type} on {f58(jobid)}: {exc}")

    # Dependency: dws-create

    @job_topic("job.new", every_job=True, requires=DW)
    def new(self, job):
        # flux jobtap load calls job.new, then job.state.depend, for each
        # job in flight: a job in DEPEND then may hold dws-create already.
        if job.state == DEPEND:
            self.inherited.add(job.id)
        elif job.state in (RUN, CLEANUP):
            # Held in its prolog or epilog by an earlier instance, maybe:
            # learn which from its eventlog, and follow its events again.
            jobid = job.id
            self.jobtap.subscribe(jobid)
            self.jobtap.read_kvs(
                f"{JobID(jobid).kvs}.eventlog",
                lambda text, error: self.recover(jobid, text, error),
            )

    def recover(self, jobid, text, error):
        """Take over the job's dws-setup or dws-epilog, if still held."""
        if error is not None:
            self.log(syslog.LOG_ERR, f"{f58(jobid)}: eventlog unreadable: {error}")
            return
        held = held_actions(text)
        if held.get(SETUP) is not None and jobid not in self.prolog:
            self.prolog[jobid] = True
        started = held.get(EPILOG)
        if started is not None and jobid not in self.epilog:
            epilog = self.epilog[jobid] = Epilog()
            if self.epilog_timeout > 0:
                left = started + self.epilog_timeout - time.time()
                epilog.timer = self.jobtap.timer(
                    max(left, 0.001), lambda: self.epilog_timed_out(jobid)
                )
        if held:
            self.log(
                syslog.LOG_INFO,
                f"{f58(jobid)}: held by {', '.join(sorted(held))} "
                "from before this load",
            )

    @job_topic("job.state.depend", every_job=True, requires=DW)
    def depend(self, job):
        inherited = job.id in self.inherited
        self.inherited.discard(job.id)
        jobspec = job.jobspec
        system = jobspec["attributes"]["system"]
        tolerance = system.get("dw_failure_tolerance", 0)
        resources = jobspec.get("resources")
        if type(tolerance) is not int or resources is None:
            self.raise_exception(job.id, "dws", "jobtap plugin failed to unpack args")
            return
        added = time.time()
        try:
            self.jobtap.dependency_add(job.id, CREATE)
        except OSError as exc:
            if inherited and exc.errno == errno.EEXIST:
                # Added and removed before this load: the storage exists.
                self.jobtap.subscribe(job.id)
                return
            self.log(
                syslog.LOG_ERR,
                f"Failed to add dws jobtap dependency for {f58(job.id)}: {exc}",
            )
            self.raise_exception(job.id, "dws", "Failed to add dws jobtap dependency")
            return
        self.jobtap.subscribe(job.id)
        payload = {
            "dw_directives": system["dw"],
            "jobid": job.id,
            "resources": resources,
            "userid": job.userid,
            "failure_tolerance": tolerance,
        }
        if not inherited:
            self.send_create(job.id, payload)
            return
        # The service refuses a second create of a job's workflow: send
        # it only if no earlier dws-create is in the job's eventlog.
        jobid = job.id
        self.jobtap.read_kvs(
            f"{JobID(jobid).kvs}.eventlog",
            lambda text, error: self.create_unless_created(
                jobid, payload, added, text, error
            ),
        )

    def create_unless_created(self, jobid, payload, added, text, error):
        if error is None and created_before(text, added):
            self.log(
                syslog.LOG_INFO,
                f"{f58(jobid)}: {CREATE} from before this load kept, not sent again",
            )
            return
        self.send_create(jobid, payload)

    def send_create(self, jobid, payload):
        self.jobtap.rpc("dws.create", payload, lambda f: self.created(jobid, f))

    def created(self, jobid, future):
        try:
            success, errstr = answer_of(future)
        except (OSError, ValueError) as exc:
            nosys = getattr(exc, "errno", None) == errno.ENOSYS
            errstr = NO_SERVICE if nosys else "Failed to unpack dws.create RPC"
            self.fail(jobid, CREATE, errstr)
            return
        if not success:
            self.fail(jobid, CREATE, errstr or "dws.create RPC returned failure")

    @rpc_method("resource-update")
    def resource_update(self, request):
        """The job's storage is placed: ``{id, resources, exclude,
        errmsg?}``; update its jobspec and let it leave DEPEND."""
        payload = self.payload_of(request, "resource-update", ("resources", "exclude"))
        jobid = payload["id"]
        errmsg = payload.get("errmsg")
        if errmsg is not None:
            self.fail(jobid, "dws", str(errmsg))
            request.respond(None)
            return
        try:
            job = self.jobtap.lookup_job(jobid)
        except OSError:
            job = None
        if job is None or job.get("state") != DEPEND:
            raise RequestError(errno.ENOENT, "job not found in depend state")
        update = {"resources": payload["resources"]}
        if payload["exclude"] is not None:
            system = job.get("jobspec", {}).get("attributes", {}).get("system", {})
            try:
                update["attributes.system.constraints"] = combine(
                    system, payload["exclude"]
                )
            except ConstraintError as exc:
                errmsg = "Could not generate new constraints"
                self.log(syslog.LOG_ERR, f"{errmsg} for {f58(jobid)}: {exc}")
                self.fail(jobid, "dws", errmsg)
                raise RequestError(errno.EINVAL, errmsg) from None
        try:
            self.jobtap.jobspec_update(jobid, update)
        except OSError as exc:
            errmsg = "could not update jobspec with new constraints and resources"
            self.log(syslog.LOG_ERR, f"{f58(jobid)}: {errmsg}: {exc}")
            self.fail(jobid, "dws", "Internal error: failed to update jobspec")
            raise RequestError(exc.errno, errmsg) from None
        try:
            self.jobtap.dependency_remove(jobid, CREATE)
        except OSError as exc:
            errmsg = "Failed to remove dependency for job"
            self.log(syslog.LOG_ERR, f"{CREATE}: {errmsg} {f58(jobid)}: {exc}")
            raise RequestError(exc.errno, errmsg) from None
        request.respond(None)

    # Prolog: dws-setup

    @job_topic("job.state.run", every_job=True, requires=DW)
    def run(self, job):
        # Subscribe again: an instance loaded after the job's DEPEND has not.
        self.jobtap.subscribe(job.id)
        self.prolog[job.id] = True
        try:
            self.jobtap.prolog_start_current(SETUP)
        except OSError as exc:
            self.prolog[job.id] = False
            self.log(
                syslog.LOG_ERR,
                f"Failed to start dws jobtap prolog for {f58(job.id)}: {exc}",
            )
            self.raise_exception(job.id, "dws", "Failed to start dws jobtap prolog")
            return
        jobid = job.id
        self.jobtap.read_kvs(
            f"{JobID(jobid).kvs}.R",
            lambda text, error: self.send_setup(jobid, text, error),
        )

    def send_setup(self, jobid, text, error):
        if error is not None:
            self.setup_failed(jobid, "Failed to unpack R")
            return
        try:
            R = json.loads(text)
        except ValueError:
            self.setup_failed(jobid, "Failed to unpack R")
            return
        self.jobtap.rpc(
            "dws.setup", {"jobid": jobid, "R": R}, lambda f: self.set_up(jobid, f)
        )

    def set_up(self, jobid, future):
        try:
            success, errstr = answer_of(future)
        except (OSError, ValueError):
            self.setup_failed(jobid, "Failed to unpack dws.setup RPC")
            return
        if not success:
            self.setup_failed(jobid, errstr or "dws.setup RPC returned failure")

    def setup_failed(self, jobid, errstr):
        """The exception this raises ends the prolog (see exception)."""
        if self.prolog.get(jobid):
            self.log(
                syslog.LOG_ERR,
                f"Failed to setup DWS workflow object for job {f58(jobid)}",
            )
            self.fail(jobid, SETUP, errstr)

    @rpc_method("prolog-remove")
    def prolog_remove(self, request):
        """The job's storage is mounted: ``{id, variables}``; post its
        environment and let it start."""
        payload = self.payload_of(request, "prolog-remove", ("variables",))
        jobid = payload["id"]
        if jobid not in self.prolog:
            # Set up by an earlier instance (a reload): finish it all the same.
            self.log(syslog.LOG_ERR, f"no dws-setup prolog known for {f58(jobid)}")
        try:
            self.jobtap.post_event(
                jobid, "dws_environment", {"variables": payload["variables"]}
            )
        except OSError as exc:
            errmsg = "failed to post dws_environment event"
            self.setup_failed(jobid, errmsg)
            raise RequestError(exc.errno, errmsg) from None
        if self.prolog.get(jobid, True):
            try:
                self.jobtap.prolog_finish_job(jobid, SETUP, 0)
            except OSError as exc:
                self.log(
                    syslog.LOG_ERR,
                    f"Failed to finish prolog {SETUP} for job {f58(jobid)}: {exc}",
                )
                raise RequestError(exc.errno, "failed to finish prolog") from None
            self.prolog[jobid] = False
        request.respond(None)

    # Epilog: dws-epilog

    @job_topic("job.state.cleanup", every_job=True, requires=DW)
    def cleanup(self, job):
        # A job that started gets its epilog from its finish event.
        if not self.jobtap.posted(job.id, "start"):
            self.start_epilog(job.id, False)

    @job_topic("job.event.finish")
    def finished(self, job):
        if job.id not in self.epilog:
            self.start_epilog(job.id, True)

    def start_epilog(self, jobid, started):
        epilog = self.epilog[jobid] = Epilog()
        try:
            self.jobtap.epilog_start_current(EPILOG)
        except OSError as exc:
            epilog.finished = True
            self.log(
                syslog.LOG_ERR, f"Failed to start jobtap epilog for {f58(jobid)}: {exc}"
            )
            self.raise_exception(jobid, "dws", "Failed to start jobtap epilog")
            return
        if self.epilog_timeout > 0:
            epilog.timer = self.jobtap.timer(
                self.epilog_timeout, lambda: self.epilog_timed_out(jobid)
            )
        self.jobtap.rpc(
            "dws.post_run",
            {"jobid": jobid, "run_started": started},
            lambda f: self.post_ran(jobid, f),
        )

    def post_ran(self, jobid, future):
        try:
            success, errstr = answer_of(future)
        except (OSError, ValueError):
            self.finish_epilog(jobid, False, "Failed to send dws.post_run RPC")
            return
        if not success:
            self.finish_epilog(jobid, False, errstr)

    def epilog_timed_out(self, jobid):
        try:
            state = self.jobtap.lookup_job(jobid).get("state")
        except OSError:
            return
        if state == CLEANUP:
            self.raise_exception(jobid, EPILOG_TIMEOUT, "DWS epilog timed out")

    def finish_epilog(self, jobid, success, errstr):
        """End the job's dws-epilog (status 0 on success, else 1 after an
        exception naming ``errstr``); OSError if the job-manager refuses."""
        if not success:
            self.log(
                syslog.LOG_ERR,
                f"Failed to clean up DWS workflow object for job {f58(jobid)}",
            )
            self.fail(jobid, EPILOG, errstr)
        epilog = self.epilog.get(jobid)
        if epilog is not None:
            if epilog.finished:
                return
            epilog.finished = True
            if epilog.timer is not None:
                epilog.timer.stop()
        self.jobtap.epilog_finish_job(jobid, EPILOG, 0 if success else 1)

    @rpc_method("epilog-remove")
    def epilog_remove(self, request):
        """The job's storage is torn down: ``{id}``; let it go inactive."""
        jobid = self.payload_of(request, "epilog-remove", (), raise_on_job=False)["id"]
        try:
            state = self.jobtap.lookup_job(jobid).get("state")
        except OSError:
            state = None
        if state != CLEANUP:
            raise RequestError(errno.ENOENT, "job not found in CLEANUP state")
        try:
            self.finish_epilog(jobid, True, None)
        except OSError as exc:
            self.log(
                syslog.LOG_ERR,
                f"Failed to finish epilog {EPILOG} for job {f58(jobid)}: {exc}",
            )
            raise RequestError(exc.errno, "could not finish epilog") from None
        request.respond(None)

    # Exceptions

    @job_topic("job.event.exception")
    def exception(self, job):
        context = job.input.get("entry", {}).get("context", {})
        if context.get("severity") != 0:
            return
        jobid = job.id
        epilog = self.epilog.get(jobid)
        if self.prolog.get(jobid):
            self.prolog[jobid] = False
            self.jobtap.prolog_finish_job(jobid, SETUP, 1)
        elif epilog is not None and not epilog.finished:
            if context.get("type") == EPILOG_TIMEOUT:
                # Answered, but nothing waits for the answer.
                self.jobtap.rpc("dws.abort", {"jobid": jobid})
                epilog.finished = True
                if epilog.timer is not None:
                    epilog.timer.stop()
                self.jobtap.epilog_finish_job(jobid, EPILOG, 1)
            else:
                self.jobtap.rpc("dws.teardown", {"jobid": jobid})

    @job_topic("job.state.inactive")
    def inactive(self, job):
        self.inherited.discard(job.id)
        self.prolog.pop(job.id, None)
        epilog = self.epilog.pop(job.id, None)
        if epilog is not None and epilog.timer is not None:
            epilog.timer.stop()

    # Requests

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
        if jobid is not None and all(k in payload for k in keys):
            errmsg = payload.get("errmsg")
            if errmsg is None or isinstance(errmsg, str):
                return payload
        errmsg = f"received malformed dws.{method} RPC"
        if raise_on_job and jobid is not None:
            self.fail(jobid, "exception", errmsg)
        self.log(syslog.LOG_ERR, errmsg + OUT_OF_SYNC)
        raise RequestError(errno.EPROTO, errmsg)
