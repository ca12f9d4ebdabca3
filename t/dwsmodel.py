"""A fake instance for the model-based test of dws.so (test_dws_model.py):
the plugin's own class (:class:`flux_epilog_gate.dws.plugin.Dws`, with
the glue it shares with epilog-gate.so) driven on the fake job-manager
and KVS of the gate's model (gate/modeljm.py), with what dws.so asks of
the jobtap runtime beyond the gate's port, and a fake DWS service.

What is added to modeljm:

- :class:`RabbitJob`: a job with a jobspec (dict; ``DEEP`` in it stands
  for an array nested deeper than Python decodes), its dependencies
  (``dependency-add``/``-remove``, as flux-core counts them: the job
  leaves DEPEND once its ``job.state.depend`` callbacks are done and none
  is left) and R once allocated;
- :class:`RabbitJobManager`: the job-manager calling the plugin's job
  topics as the runtime would (forwarded topics, marked and subscribed
  jobs, ``requires`` of ``attributes.system.dw``); a restart calls
  ``job.state.depend`` again for jobs in DEPEND;
- :class:`Jobtap`: the runtime's facade for one plugin instance: job
  lookups (whole, as flux-core hands them, or key by key), events, RPCs
  to the service, KVS reads, timers; and :class:`GatePort`, the gate's
  port of modeljm with dependencies;
- :class:`FakeService`: the DWS service: requests wait until the test
  answers them; its answer and its own request (``resource-update``,
  ``prolog-remove``, ``epilog-remove``) go separately;
- :class:`ServiceCalls`: dws.so's C calls to the service (service.c,
  :class:`flux_epilog_gate.dws.service.Service`) on the fake instance,
  with service.c's checks of a job's arguments and of the answers, and
  its failures told to the plugin's ``call_failed``.
"""

import errno
import json

from flux.job import JobID
from gate.modeljm import (
    CLEANUP,
    DEPEND,
    INACTIVE,
    LOST_FOUND,
    NEW,
    PRIORITY,
    RUN,
    FakeJob,
    FakeJobManager,
    JobtapPort,
    _oserror,
)

from flux_epilog_gate.dws.service import (
    CALL_CREATE,
    CALL_POST_RUN,
    CALL_R,
    CALL_SETUP,
)
from flux_epilog_gate.gate.holdlog import MARKER
from flux_epilog_gate.jobtap.plugin import Job

#: In a jobspec: an array nested deeper than Python's decoder goes.
DEEP = "__deep__"
DEPTH = 1500

#: What the service gets and answers.
CREATE, SETUP, POST_RUN, TEARDOWN, ABORT = (
    "dws.create",
    "dws.setup",
    "dws.post_run",
    "dws.teardown",
    "dws.abort",
)


def decode_value(text):
    """As the runtime decodes one value (facade.decode_value)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deep to be decoded") from None


def to_text(value):
    """JSON text of ``value``, with :data:`DEEP` written out."""
    return json.dumps(value).replace(f'"{DEEP}"', "[" * DEPTH + "]" * DEPTH)


class RabbitJob(FakeJob):
    def __init__(self, jobid, userid, jobspec=None):
        super().__init__(jobid, userid)
        self.jobspec = jobspec or {}
        self.deps = set()
        self.depend_called = False
        self.R = None
        #: Seen in DEPEND with what dws.create needs (service.c's
        #: dws::rabbit aux item: it lives as long as the job here).
        self.rabbit = False


class Args:
    """The arguments of one job callback: the job, and the event."""

    def __init__(self, job, entry=None):
        self.job = job
        self.entry = entry

    def value(self):
        job = self.job
        args = {
            "id": job.id,
            "userid": job.userid,
            "state": job.state,
            "jobspec": job.jobspec,
        }
        if self.entry is not None:
            timestamp, name, context = self.entry
            args["entry"] = {"timestamp": timestamp, "name": name, "context": context}
        return args


#: What a key path has not (a JSON null is a value).
ABSENT = object()


def walk(value, path, absent=None):
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return absent
        value = value[key]
    return value


class RabbitJobManager(FakeJobManager):
    """modeljm's job-manager, with dependencies and the plugin's topics."""

    #: Called with (where, exception) when the plugin raises where the
    #: runtime would log an error.
    failed = None

    def submit(self, jobid, userid, jobspec=None):
        job = RabbitJob(jobid, userid, jobspec)
        entry = (self.now(), "submit", {"userid": userid})
        job.eventlog.append(entry)
        # Written by ingest with the eventlog.
        self.kvs.put(f"job.{jobid}.eventlog", (entry,))
        self.kvs.put(f"job.{jobid}.jobspec", json.dumps(job.jobspec))
        self.jobs[jobid] = job
        self.post(job, "validate")
        return job

    @classmethod
    def restart(cls, kvs, clock, observer):
        """A new job-manager with every active job rebuilt from its
        eventlog (no state action yet: :meth:`restarted` runs them once
        the plugin is loaded, as flux-core calls its plugins first)."""
        jm = cls(kvs, clock, observer)
        for key in sorted(kvs.data):
            parts = key.split(".")
            if len(parts) != 3 or parts[0] != "job" or parts[2] != "eventlog":
                continue
            entries = kvs.data[key]
            job = RabbitJob(int(parts[1]), entries[0][2]["userid"])
            job.jobspec = json.loads(kvs.data.get(f"job.{job.id}.jobspec", "{}"))
            for entry in entries:
                job.eventlog.append(entry)
                jm._update(job, entry)
            if job.state == NEW:
                # Not replayed by flux-core: its directory is moved aside.
                kvs.data[f"{LOST_FOUND}.{job.id}.eventlog"] = kvs.data.pop(key)
                observer.dropped(job.id)
            elif job.state != INACTIVE:
                jm.jobs[job.id] = job
        return jm

    def restarted(self):
        """The restored jobs' state actions (a job in DEPEND has its
        ``job.state.depend`` callbacks called again)."""
        for job in list(self.jobs.values()):
            if job.state == DEPEND:
                self._depend(job)
            self._action(job)

    def _update(self, job, entry):
        _, name, context = entry
        if name == "dependency-add":
            job.deps.add(context.get("description"))
        elif name == "dependency-remove":
            job.deps.discard(context.get("description"))
        elif name == "jobspec-update":
            for key, value in context.items():
                *path, last = key.split(".")
                node = job.jobspec
                for part in path:
                    node = node.setdefault(part, {})
                node[last] = value
        elif name == "alloc":
            job.R = {"version": 1, "execution": {"R_lite": [], "nodelist": []}}
        FakeJobManager._update(job, entry)

    def _callbacks(self, job, entry, old):
        port = self.port
        if port is None:
            return
        plugin, jobtap = port.plugin, port.jobtap
        name = entry[1]
        events = port.subscribed(job.id)
        if name in ("finish", "free") and events:
            call = plugin.on_finish if name == "finish" else plugin.on_free
            self._call(
                f"job.event.{name}",
                call,
                Job(jobtap, name, job.id, job.state, job.userid, Args(job, entry)),
            )
        if name == "exception" and port.forwarded("job.event.exception"):
            told = entry
            if not events and port.watched(job.id):
                # From the instance's job-exception event: no note.
                timestamp, _, context = entry
                published = {k: context[k] for k in ("type", "severity")}
                told = (timestamp, name, published)
            if events or port.watched(job.id):
                self._call(
                    "job.event.exception",
                    plugin.on_exception,
                    Job(jobtap, name, job.id, job.state, job.userid, Args(job, told)),
                )
        if job.state == old:
            return
        if job.state == DEPEND:
            self._depend(job)
        elif job.state == RUN and port.wanted(job.id, RUN):
            self._call("job.state.run", plugin.on_run, job.id)
        elif job.state == CLEANUP and port.marked(job.id):
            self._call(
                "job.state.cleanup",
                plugin.on_cleanup,
                Job(jobtap, "cleanup", job.id, job.state, job.userid, Args(job, entry)),
            )
        elif job.state == INACTIVE and port.marked(job.id):
            self._call("job.state.inactive", plugin.on_inactive, job.id)
            port.untrack(job.id)

    def _depend(self, job):
        port = self.port
        job.depend_called = True
        if port is None or not port.forwarded("job.state.depend"):
            return
        if walk(job.jobspec, "attributes.system.dw") is None:
            return
        args = Args(job)
        self._call(
            "job.state.depend",
            port.plugin.on_depend,
            Job(port.jobtap, "depend", job.id, job.state, job.userid, args),
        )

    def _call(self, where, function, arg):
        try:
            function(arg)
        except Exception as exc:  # noqa: BLE001 - the runtime logs it
            if self.failed is not None:
                self.failed(where, exc)

    def _action(self, job):
        if job.state == DEPEND:
            if (
                job.depend_called
                and not job.deps
                and not self._queued(job, "dependency-add")
                and not self._queued(job, "depend")
            ):
                self.post(job, "depend")
            return
        if job.state == PRIORITY and not self._queued(job, "priority"):
            self.post(job, "priority", {"priority": 16})
            return
        super()._action(job)


class Future:
    """A service's answer, as the plugin's callback gets it."""

    def __init__(self, answer=None, error=None):
        self.answer = answer
        self.error = error

    def get(self):
        if self.error is not None:
            raise _oserror(self.error)
        return self.answer


class Request:
    """A request of the service to the plugin (job-manager.dws.METHOD)."""

    def __init__(self, method, payload, answered):
        self.method = method
        self.payload = payload
        # As it came on the wire: what the plugin's quick tests read.
        self.text = json.dumps(payload).encode()
        self.userid = 0
        self.rolemask = 1
        self.owner = True
        self.msg = self
        self.answered = answered

    def respond(self, payload):
        self.answered(self, None)

    def error(self, errnum, message):
        self.answered(self, (errnum, message))

    def detach(self):
        return self

    def keep(self):
        return self


class GatePort(JobtapPort):
    """The gate's port (flux_epilog_gate/plugin/port.py) of one dws.so
    instance: modeljm's, with dependencies and every job's events."""

    def __init__(self, jm, jobtap):
        super().__init__(jm, None)
        self.jobtap = jobtap
        #: The plugin instance the job-manager calls.
        self.plugin = None
        self.all_events = False

    def forwarded(self, topic):
        return self.jobtap.marks.forwarded(topic)

    def track(self, jobid, events=False):
        super().track(jobid, events or self.all_events)

    def depend_start(self, jobid, description, timeout=None):
        context = {"description": description, MARKER: True}
        self._post(jobid, "dependency-add", context)

    def depend_finish(self, jobid, description):
        context = {"description": description, MARKER: True}
        self._post(jobid, "dependency-remove", context)

    def raise_dependency(self, jobid, note):
        self.raise_job_exception(jobid, "dependency", 0, note)

    def cancel(self, jobid, note):
        self.raise_job_exception(jobid, "cancel", 0, note)


class CHandlers:
    """The message handlers of service.c, by name (what a plugin's
    ``c_handler`` names): the model delivers every request to the
    handler the runtime's general path calls, which ends in the same
    phase call as service.c's decoded one (``Dws.removed``)."""

    def __getattr__(self, name):
        return name


class Jobtap:
    """The runtime's facade (flux_epilog_gate/jobtap/facade.py) for one
    instance of dws.so on the fake job-manager: its services are the
    objects below, its gate port a :class:`GatePort`."""

    plugin_name = "dws"
    #: An installed build: its hold log is written.
    bench_no_record = False

    def __init__(self, jm, jmid, service, options):
        self.jm = jm
        self.jmid = jmid
        self.options = options
        self.p = self
        self.lib = CHandlers()
        self.unloading = False
        self.names = {}
        self.gate_port = GatePort(jm, self)
        self.jobs = Jobs(self)
        self.marks = Marks(self, jmid)
        self.kvs = KvsReads(self)
        self.broker = Broker()
        self.messages = Messages(self, service)

    @property
    def open(self):
        return self.p is not None

    def now(self):
        return self.jm.now()

    def timer(self, delay, callback):
        return self.gate_port.timer(delay, callback)

    def log(self, level, text):
        self.gate_port.log(level, text)

    def log_exception(self, where):
        self.log(3, f"{where}: an exception")

    def name(self, name):
        return name.encode()

    def close(self):
        self.p = None
        self.gate_port.close()

    def load_options(self):
        return dict(self.options)

    def load_options_given(self):
        return bool(self.options)

    def arg_in(self, args):
        """The whole arguments, decoded as flux-core hands them over."""
        return json.loads(to_text(args.value()))

    def arg_value(self, args, path, default=None):
        """One value, encoded alone (as runtime.c does) and decoded."""
        value = walk(args.value(), path)
        if value is None:
            return default
        return decode_value(to_text(value))


class Jobs:
    def __init__(self, jobtap):
        self.jobtap = jobtap
        self.port = jobtap.gate_port

    def _job(self, jobid):
        job = self.jobtap.jm.jobs.get(jobid)
        if job is None:
            raise _oserror(errno.ENOENT)
        return job

    def info(self, jobid):
        return self.port.job_info(jobid)

    def lookup(self, jobid):
        return self.jobtap.arg_in(Args(self._job(jobid)))

    def value(self, jobid, path, default=None):
        return self.jobtap.arg_value(Args(self._job(jobid)), path, default)

    def pick(self, jobid, *paths):
        """As runtime_job_pick: the job's values at ``paths`` (a JSON null
        kept, a path it has not left out), encoded together and decoded."""
        args = Args(self._job(jobid)).value()
        out = {}
        for path in paths:
            value = walk(args, path, ABSENT)
            if value is not ABSENT:
                out[path] = value
        return json.loads(to_text(out))

    def posted(self, jobid, name):
        return self.port.posted(jobid, name)

    def post_event(self, jobid, name, context=None):
        self.port._post(jobid, name, dict(context or {}))

    def jobspec_update(self, jobid, update):
        self.port._post(jobid, "jobspec-update", dict(update))

    def dependency_remove(self, jobid, description):
        self.port._post(jobid, "dependency-remove", {"description": description})

    def raise_exception(self, jobid, type, severity, note):
        self.port.raise_job_exception(jobid, type, severity, note)

    def cancel(self, jobid, note):
        self.raise_exception(jobid, "cancel", 0, note)

    def prolog_finish(self, jobid, description, status=0):
        context = {"description": description, "status": status}
        self.port._post(jobid, "prolog-finish", context)

    def epilog_finish(self, jobid, description, status=0):
        context = {"description": description, "status": status}
        self.port._post(jobid, "epilog-finish", context)


class Marks:
    def __init__(self, jobtap, jmid):
        self.jobtap = jobtap
        self.jmid = jmid
        self.forwards = set()

    def jobmanager_id(self):
        return self.jmid

    def forward(self, topic, on=True):
        (self.forwards.add if on else self.forwards.discard)(topic)

    def forwarded(self, topic):
        return topic in self.forwards


class KvsReads:
    """The KVS reads dws.so makes: a job's R and eventlog, answered on the
    next turn of the reactor."""

    def __init__(self, jobtap):
        self.jobtap = jobtap

    def read(self, key, callback):
        jm = self.jobtap.jm
        path, _, what = key.rpartition(".")
        job = jm.jobs.get(int(JobID(path))) if path.startswith("job.") else None

        def answer():
            if what == "R" and job is not None and job.R is not None:
                callback(json.dumps(job.R), None)
            elif what == "eventlog" and job is not None:
                lines = jm.kvs.data.get(f"job.{job.id}.eventlog", ())
                text = "".join(
                    json.dumps({"timestamp": t, "name": n, "context": c}) + "\n"
                    for t, n, c in lines
                )
                callback(text, None)
            else:
                callback(None, _oserror(errno.ENOENT))

        self.jobtap.timer(0.0, answer)


class Broker:
    def watch(self, final, callback):
        return None

    def unwatch(self, stream):
        pass


class Messages:
    """Requests to the service and answers to the service's requests."""

    def __init__(self, jobtap, service):
        self.jobtap = jobtap
        self.service = service

    def register(self, method, index, guests=False, handler=None, max_bytes=0):
        pass

    def rpc(self, topic, payload=None, callback=None):
        self.service.receive(self.jobtap, topic, payload, callback)

    def respond_error(self, msg, errnum, text):
        msg.error(errnum, text)

    def send(self, msg, payload):
        msg.respond(payload)


class FakeService:
    """The DWS service: every request it gets is kept until answered."""

    def __init__(self):
        #: (port, topic, payload, callback), in the order received.
        self.pending = []
        #: Its own requests to send: (method, payload).
        self.outbox = []
        #: Every request received: (topic, payload).
        self.received = []
        #: Told of each request as it arrives.
        self.observer = None

    def receive(self, port, topic, payload, callback):
        self.received.append((topic, payload))
        if self.observer is not None:
            self.observer(topic, payload)
        if topic in (TEARDOWN,):
            self.outbox.append(("epilog-remove", {"id": payload["jobid"]}))
            return
        if callback is None:
            return
        self.pending.append((port, topic, payload, callback))

    def answer(self, index, success=True):
        """Answer pending request ``index``; on success queue what the
        service sends once its work is done."""
        port, topic, payload, callback = self.pending.pop(index)
        jobid = payload["jobid"]
        if success and topic == CREATE:
            update = {"id": jobid, "resources": payload["resources"], "exclude": None}
            self.outbox.append(("resource-update", update))
        elif success and topic == SETUP:
            self.outbox.append(("prolog-remove", {"id": jobid, "variables": {}}))
        elif success and topic == POST_RUN:
            self.outbox.append(("epilog-remove", {"id": jobid}))
        if not port.open:
            return
        answer = {"success": success}
        if not success:
            answer["errstr"] = "the model's service failed it"
        callback(Future(answer))

    def requests_of(self, jobid, topic):
        return [p for t, p in self.received if t == topic and p["jobid"] == jobid]


def create_parts(args):
    """service.c's dws_create_parts: ``(dw, tolerance, resources,
    userid)`` of a job's arguments (a dict), or None (EPROTO) if they
    are not of that shape."""
    userid = args.get("userid")
    system = walk(args, "jobspec.attributes.system", ABSENT)
    resources = walk(args, "jobspec.resources", ABSENT)
    if (
        type(userid) is not int
        or not isinstance(system, dict)
        or "dw" not in system
        or resources in (ABSENT, None)
    ):
        return None
    tolerance = system.get("dw_failure_tolerance", 0)
    if type(tolerance) is not int:
        return None
    return system["dw"], tolerance, resources, userid


class ServiceCalls:
    """service.c's calls (:class:`flux_epilog_gate.dws.service.Service`)
    of one dws.so instance on the fake instance: the requests go to the
    :class:`FakeService`, their answers are checked as service.c checks
    them, and a failure is told to the plugin's ``call_failed`` (an
    exception there is the runtime's logged error: the model's
    ``failed``).  Requests in flight are the instance's: once it is
    closed, their answers are never read."""

    NO_ARGS = None

    def __init__(self, jobtap, service):
        self.jobtap = jobtap
        self.service = service
        self._errno = 0

    def _fail(self, errnum):
        self._errno = errnum
        return -1

    def _job(self, jobid):
        return self.jobtap.jm.jobs.get(jobid)

    def check_args(self, args):
        if create_parts(args.value()) is None:
            return self._fail(errno.EPROTO)
        args.job.rabbit = True
        return 0

    def create(self, jobid, args):
        if args is None:
            job = self._job(jobid)
            if job is None:
                return self._fail(errno.ENOENT)
            args = Args(job)
        parts = create_parts(args.value())
        if parts is None:
            return self._fail(errno.EPROTO)
        dw, tolerance, resources, userid = parts
        payload = {
            "dw_directives": dw,
            "jobid": jobid,
            "resources": resources,
            "userid": userid,
            "failure_tolerance": tolerance,
        }
        self._send(CREATE, payload, CALL_CREATE)
        return 0

    def setup(self, jobid):
        def read(text, error):
            if not self.jobtap.open:
                return
            if error is not None:
                self._failed(jobid, CALL_R, error.errno or errno.EPROTO, None)
                return
            self._send(SETUP, {"jobid": jobid, "R": json.loads(text)}, CALL_SETUP)

        self.jobtap.kvs.read(f"{JobID(jobid).kvs}.R", read)
        return 0

    def post_run(self, jobid, run_started):
        payload = {"jobid": jobid, "run_started": bool(run_started)}
        self._send(POST_RUN, payload, CALL_POST_RUN)
        return 0

    def is_rabbit(self, jobid):
        job = self._job(jobid)
        if job is None:
            return 0
        if job.rabbit:
            return 1
        return int(walk(job.jobspec, "attributes.system.dw", ABSENT) is not ABSENT)

    def post_environment(self, jobid, msg):
        # msg: the model's Request (its own message).
        try:
            self.jobtap.jobs.post_event(
                jobid, "dws_environment", {"variables": msg.payload["variables"]}
            )
        except OSError as exc:
            return self._fail(exc.errno)
        return 0

    def errno(self):
        return self._errno

    def close(self):
        # As DwsService.close: service.c refuses every call of a gone
        # instance (EINVAL), and knows no rabbit job.
        def gone(*args):
            return self._fail(errno.EINVAL)

        self.check_args = self.create = self.setup = self.post_run = gone
        self.post_environment = gone
        self.is_rabbit = lambda jobid: 0

    def _send(self, topic, payload, kind):
        jobid = payload["jobid"]
        self.service.receive(
            self.jobtap, topic, payload, lambda f: self._answered(jobid, kind, f)
        )

    def _answered(self, jobid, kind, future):
        """service.c's dws_answer_cb: {success: bool, errstr?: str|null}."""
        try:
            answer = future.get()
        except OSError as exc:
            self._failed(jobid, kind, exc.errno or errno.EPROTO, None)
            return
        success = answer.get("success") if isinstance(answer, dict) else None
        errstr = answer.get("errstr") if isinstance(answer, dict) else None
        if type(success) is not bool or not isinstance(errstr, (str, type(None))):
            self._failed(jobid, kind, errno.EPROTO, None)
        elif not success:
            self._failed(jobid, kind, 0, None if errstr is None else errstr.encode())

    def _failed(self, jobid, kind, errnum, errstr):
        """dws_failed: the plugin's call_failed, contained."""
        plugin = self.jobtap.gate_port.plugin
        if plugin is None or not self.jobtap.open:
            return
        try:
            plugin.call_failed(jobid, kind, errnum, errstr)
        except Exception as exc:  # noqa: BLE001 - the runtime logs it
            if self.jobtap.jm.failed is not None:
                self.jobtap.jm.failed("dws request", exc)
