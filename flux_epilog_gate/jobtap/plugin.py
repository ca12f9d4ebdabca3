"""Jobtap plugins written in Python: the base class and its entry points.

A plugin is a subclass of :class:`Plugin` whose methods are declared as
handlers with decorators, in the manner of flux-core's
``flux.brokermod.BrokerModule``::

    class Limit(Plugin):
        @job_topic("job.state.depend", every_job=True)
        def depend(self, job):
            ...

        @request("status", guests=True)
        def status(self, request):
            request.respond({"ok": True})

:func:`flux_epilog_gate.jobtap.build.compile_plugin` turns (name,
"module:Class") into NAME.so; when the job-manager loads it, runtime.c
starts the interpreter (once per broker) and calls :func:`bootstrap`,
which binds the class to that library.  Each load makes an instance of
the class, also a load the job-manager then refuses (a duplicate) or
fails (its configuration): such an instance must touch nothing another
one uses; its RPC methods are registered only once its first
``conf.update`` has succeeded (or when it calls :meth:`Plugin.register`).

Containment: an exception in a handler becomes an error return (a
refused configuration, a failed callback) or an error response, and one
line in the broker's log, never a crash of the job-manager.
"""

import errno
import syslog
import traceback

from .facade import Jobtap
from .pattern import job_pattern

#: How a job topic reaches Python (runtime.c's enum runtime_topic_mode).
MARKED, EVERY_JOB, WANTED, SWITCHED = "marked", "every_job", "wanted", "switched"

#: The plugin topics a plugin may handle.
PLUGIN_TOPICS = ("conf.update", "plugin.query")

_JOB_PREFIXES = ("job.state.", "job.event.")


class Refused(Exception):
    """Raised by a ``conf.update`` (or ``plugin.query``) handler: the
    callback fails with this text for the caller (the load, ``flux config
    reload``, ``flux jobtap query``)."""


class RequestError(Exception):
    """Raised by a request handler: answer the request with ``errnum``
    and ``message``."""

    def __init__(self, errnum, message):
        super().__init__(message)
        self.errnum = errnum
        self.message = message


def job_topic(
    topic, every_job=False, wanted=False, requires=None, switched=False, id_only=False
):
    """Declare a handler ``method(self, job)`` of job topic ``topic``
    (``job.new``, ``job.state.STATE`` or ``job.event.NAME``).

    By default only jobs the plugin marked (:meth:`.Marks.mark`) reach
    it: other jobs never enter Python.  ``every_job``: every job's, while
    switched on with :meth:`.Marks.forward` (``job.new``: only this way).
    ``wanted``: a marked job's, once it asked with :meth:`.Marks.want`.
    ``switched``: a marked job's, only while switched on with
    :meth:`.Marks.forward` (off at first: a handler that has nothing to
    do most of the time costs no trip into Python then).
    A ``job.event.*`` call comes only for marked jobs subscribed with
    ``mark(id, events=True)``.  ``requires``: a jobspec key path
    (``"attributes.system.dw"``): only jobs whose jobspec has it reach the
    handler; the test is made in C, so other jobs never enter Python.
    """
    if topic != "job.new" and not topic.startswith(_JOB_PREFIXES):
        raise ValueError(f"{topic}: not job.new, job.state.* or job.event.*")
    if sum(map(bool, (every_job, wanted, switched))) > 1:
        raise ValueError(f"{topic}: every_job, wanted and switched exclude each other")
    if topic == "job.new" and not every_job:
        raise ValueError("job.new: a new job is never marked: say every_job=True")
    if requires is not None and (
        not isinstance(requires, str) or not requires or len(requires) >= 128
    ):
        raise ValueError(f"{topic}: requires: {requires!r}: not a jobspec key path")
    mode = (
        EVERY_JOB
        if every_job
        else WANTED if wanted else SWITCHED if switched else MARKED
    )
    return _declare("_jobtap_job", (topic, mode, requires, bool(id_only)))


def plugin_topic(topic):
    """Declare a handler ``method(self, args)`` of ``conf.update`` or
    ``plugin.query`` (:class:`Args`).  What it returns, if not None, is
    set as the callback's OUT arguments (a ``plugin.query`` answer)."""
    if topic not in PLUGIN_TOPICS:
        raise ValueError(f"{topic}: not one of {', '.join(PLUGIN_TOPICS)}")
    return _declare("_jobtap_plugin", topic)


def request(method, guests=False, c_handler=None, max_bytes=0):
    """Declare a handler ``method(self, request)`` of RPC method
    ``job-manager.NAME.METHOD`` (:class:`Request`).  ``guests``: users
    other than the instance owner may call it (the handler decides what
    they may do).  ``c_handler``: the name of a message handler in the
    plugin's C extension that answers some requests itself and passes the
    others on to runtime_request_cb.  ``max_bytes``: the largest payload
    taken (0: any); the runtime refuses a larger one with EMSGSIZE before
    the handler sees it."""
    return _declare("_jobtap_request", (method, guests, c_handler, max_bytes))


def _declare(attribute, value):
    def decorate(function):
        setattr(function, attribute, value)
        return function

    return decorate


class Job:
    """A job as a job topic's handler sees it: ``id``, ``state`` (a
    flux.constants job state), ``userid``; ``input`` decodes the
    callback's arguments (jobspec, R, entry...) on first use."""

    __slots__ = ("id", "state", "userid", "topic", "_args", "_jobtap", "_input")

    def __init__(self, jobtap, topic, jobid, state, userid, args):
        self.id = jobid
        self.state = state
        self.userid = userid
        self.topic = topic
        self._args = args
        self._jobtap = jobtap
        self._input = None

    @property
    def input(self):
        if self._input is None:
            self._input = self._jobtap.arg_in(self._args)
        return self._input

    @property
    def jobspec(self):
        """The job's jobspec (a dict), from the callback's arguments."""
        return self.input["jobspec"]

    @property
    def args(self):
        """The callback's arguments (a ``flux_plugin_arg_t *``), for C
        that reads them itself: valid during the callback only."""
        return self._args

    def get(self, path, default=None):
        """The value at key path ``path`` (dot-separated:
        ``"jobspec.attributes.system.dw"``) of the callback's arguments,
        or ``default``; decoded alone, never the rest of the job (see
        :meth:`~flux_epilog_gate.jobtap.facade.Jobtap.arg_value`)."""
        if self._input is not None:
            value = self._input
            for key in path.split("."):
                if not isinstance(value, dict) or key not in value:
                    return default
                value = value[key]
            return value
        return self._jobtap.arg_value(self._args, path, default)


class Args:
    """The arguments of a plugin topic's call: ``input`` (decoded)."""

    __slots__ = ("topic", "_args", "_jobtap")

    def __init__(self, jobtap, topic, args):
        self.topic = topic
        self._args = args
        self._jobtap = jobtap

    @property
    def input(self):
        return self._jobtap.arg_in(self._args)


class Request:
    """An RPC request: ``msg`` (valid during the handler; :meth:`keep` for
    later), ``method``, ``userid``, ``rolemask``, ``owner``, ``payload``
    (decoded JSON, None if there is none)."""

    __slots__ = ("msg", "method", "userid", "rolemask", "_text", "_jobtap")

    def __init__(self, jobtap, method, msg, userid, rolemask, text):
        self.msg = msg
        self.method = method
        self.userid = userid
        self.rolemask = rolemask
        self._text = text
        self._jobtap = jobtap

    @property
    def owner(self):
        return bool(self.rolemask & self._jobtap.lib.FLUX_ROLE_OWNER)

    @property
    def payload(self):
        """The decoded payload; ValueError if it is not JSON."""
        return self._jobtap.messages.request_payload(self._text)

    @property
    def text(self):
        """The payload as it came (bytes of JSON text), None if there is
        none or it is no longer at hand (a detached request's)."""
        ffi = self._jobtap.ffi
        if self._text is None or self._text == ffi.NULL:
            return None
        return ffi.string(self._text)

    def respond(self, payload):
        """Answer ``payload`` (a dict)."""
        self._jobtap.messages.send(self.msg, payload)

    def error(self, errnum, message):
        self._jobtap.messages.respond_error(self.msg, errnum, message)

    def keep(self):
        """A reference on the message that outlives the handler."""
        return self._jobtap.messages.keep_request(self.msg)

    def detach(self):
        """This request as an object that outlives the handler (to answer
        it later): its message kept, its payload decoded now."""
        return DetachedRequest(self)


class DetachedRequest(Request):
    """A :class:`Request` whose handler runs later (see
    :meth:`Request.detach`)."""

    __slots__ = ("_payload", "_problem")

    def __init__(self, request):
        super().__init__(
            request._jobtap,
            request.method,
            request.keep(),
            request.userid,
            request.rolemask,
            None,
        )
        self._payload = self._problem = None
        try:
            self._payload = request.payload
        except ValueError as exc:
            self._problem = exc

    @property
    def payload(self):
        if self._problem is not None:
            raise self._problem
        return self._payload


class Plugin:
    """Base class of a jobtap plugin written in Python.

    ``self.jobtap`` (:class:`~flux_epilog_gate.jobtap.facade.Jobtap`, or
    the class named by :attr:`facade`) is the plugin's way to the
    job-manager; ``self.name`` its name.  Override :meth:`unload` to
    clean up when the instance goes away.
    """

    #: The class of ``self.jobtap``: a subclass of Jobtap may add calls
    #: into the plugin's own C extension.
    facade = Jobtap

    def __init__(self, jobtap):
        self.jobtap = jobtap
        self.name = jobtap.plugin_name
        self.registered = False

    def register(self):
        """Register the plugin's RPC methods (once)."""
        if self.registered:
            return
        for index, (method, guests, c_handler, max_bytes, _) in enumerate(
            self._methods
        ):
            handler = getattr(self.jobtap.lib, c_handler) if c_handler else None
            self.jobtap.messages.register(
                method, index, guests=guests, handler=handler, max_bytes=max_bytes
            )
        self.registered = True

    def unload(self):
        """The instance is destroyed (a removed plugin, or a load that
        failed or was refused)."""
        self.jobtap.close()

    @classmethod
    def _collect(cls):
        """The declared handlers of the class, in declaration order."""
        # By attribute: a subclass's method of the same name replaces the
        # declaration of its base's (undecorated, it removes it).
        jobs, plugins, methods = {}, {}, {}
        for klass in reversed(cls.__mro__):
            for attr, function in vars(klass).items():
                for declared, marker in (
                    (jobs, "_jobtap_job"),
                    (plugins, "_jobtap_plugin"),
                    (methods, "_jobtap_request"),
                ):
                    value = getattr(function, marker, None)
                    if value is None:
                        declared.pop(attr, None)
                    elif declared is plugins:
                        declared[attr] = value
                    else:
                        declared[attr] = (*value, attr)
        topics = [topic for topic, *_ in jobs.values()]
        if len(set(topics)) != len(topics):
            raise ValueError(f"{cls.__name__}: a job topic is declared twice")
        cls._job_topics = list(jobs.values())
        # What each call of a job topic runs, by index: the class's
        # function (no bound method made per call), and the topic for a
        # Job, or None for an id alone.
        cls._job_calls = [
            (getattr(cls, attr), None if id_only else topic)
            for topic, _, _, id_only, attr in cls._job_topics
        ]
        cls._plugin_topics = {topic: attr for attr, topic in plugins.items()}
        cls._methods = list(methods.values())
        # What each request runs, by index, as for a job topic.
        cls._request_calls = [
            (method, getattr(cls, attr)) for method, *_, attr in cls._methods
        ]


class _Runtime:
    """One plugin library: its ffi and lib, its class and its instances."""

    def __init__(self, ffi, lib, cls):
        self.ffi = ffi
        self.lib = lib
        self.cls = cls
        self.name = ffi.string(lib.runtime_name()).decode()
        cls._collect()
        modes = {
            MARKED: lib.RUNTIME_TOPIC_MARKED,
            EVERY_JOB: lib.RUNTIME_TOPIC_ALL,
            WANTED: lib.RUNTIME_TOPIC_WANTED,
            SWITCHED: lib.RUNTIME_TOPIC_SWITCHED,
        }
        self.topic_modes = [(t, modes[m], r) for t, m, r, _, _ in cls._job_topics]
        self.topics = {t[0]: i for i, t in enumerate(cls._job_topics)}
        self.job_pattern = job_pattern(self.topics).encode()
        self.plugin_topics = {
            lib.RUNTIME_PLUGIN_CONF: cls._plugin_topics.get("conf.update"),
            lib.RUNTIME_PLUGIN_QUERY: cls._plugin_topics.get("plugin.query"),
        }
        #: Handles of live instances: the C side holds only their address.
        self.handles = {}

    def log(self, p, text):
        self.lib.runtime_log(p, syslog.LOG_ERR, text.encode("utf-8", "replace"))

    def init(self, p):
        jobtap = None
        try:
            jobtap = self.cls.facade(p, self.ffi, self.lib, self.topics)
            jobtap.plugin_name = self.name
            for topic, mode, requires in self.topic_modes:
                index = self.lib.runtime_add_topic(p, topic.encode(), mode)
                jobtap.check(index)
                if requires is not None:
                    jobtap.check(
                        self.lib.runtime_topic_require(p, index, requires.encode())
                    )
            jobtap.check(self.lib.runtime_set_job_pattern(p, self.job_pattern))
            plugin = self.cls(jobtap)
        except Exception:
            self.log(p, f"init: {_last_lines()}")
            if jobtap is not None:
                # A failed instance must not keep a reference on the handle.
                jobtap.close()
            return self.ffi.NULL
        handle = self.ffi.new_handle(plugin)
        self.handles[self.jobtap_key(handle)] = handle
        return handle

    def jobtap_key(self, handle):
        return int(self.ffi.cast("uintptr_t", handle))

    def unload(self, handle):
        plugin = self.ffi.from_handle(handle)
        plugin.jobtap.unloading = True
        try:
            plugin.unload()
        except Exception:
            _log_error(plugin, "unload")
        finally:
            self.handles.pop(self.jobtap_key(handle), None)

    def plugin(self, handle, index, args):
        plugin = self.ffi.from_handle(handle)
        name = self.plugin_topics.get(index)
        if name is None:
            return 0
        topic = "conf.update" if index == self.lib.RUNTIME_PLUGIN_CONF else "query"
        try:
            out = getattr(plugin, name)(Args(plugin.jobtap, topic, args))
            if out is not None:
                plugin.jobtap.arg_out(args, out)
        except Refused as exc:
            self.lib.runtime_error(plugin.jobtap.p, args, str(exc).encode())
            return -1
        except Exception:
            _log_error(plugin, "plugin callback")
            text = f"{self.name}: internal error (see flux dmesg)"
            self.lib.runtime_error(plugin.jobtap.p, args, text.encode())
            return -1
        if index == self.lib.RUNTIME_PLUGIN_CONF and not plugin.registered:
            # The last step of a load that can fail is behind: the services
            # are this instance's now.
            try:
                plugin.register()
            except Exception:
                _log_error(plugin, "registering services")
                return -1
        return 0

    def job(self, handle, index, jobid, state, userid, args):
        plugin = self.ffi.from_handle(handle)
        function, topic = plugin._job_calls[index]
        try:
            if topic is None:
                function(plugin, jobid)
            else:
                function(plugin, Job(plugin.jobtap, topic, jobid, state, userid, args))
        except Exception:
            _log_error(plugin, f"job {jobid}")
            return -1
        return 0

    def request(self, handle, msg, index, userid, rolemask, text):
        plugin = self.ffi.from_handle(handle)
        method, function = plugin._request_calls[index]
        request = Request(plugin.jobtap, method, msg, userid, rolemask, text)
        try:
            function(plugin, request)
        except RequestError as exc:
            plugin.jobtap.messages.respond_error(msg, exc.errnum, exc.message)
        except Exception:
            internal_error(plugin, msg)


def internal_error(plugin, msg):
    """Log the exception being handled and answer request ``msg`` with
    EIO."""
    _log_error(plugin, "request")
    try:
        plugin.jobtap.messages.respond_error(
            msg, errno.EIO, f"{plugin.name}: internal error (see flux dmesg)"
        )
    except Exception:
        _log_error(plugin, "responding")


def _last_lines():
    return " | ".join(traceback.format_exc().strip().splitlines()[-3:])


def _log_error(plugin, where):
    text = f"{where}: {_last_lines()}"
    if plugin.jobtap.p is not None:
        plugin.jobtap.log(syslog.LOG_ERR, text)
    else:
        print(f"{plugin.name}: {text}", flush=True)


def extern(ffi, name, function, error=None):
    """Define extern "Python" function ``name`` of a plugin's library:
    ``function(plugin, *args)``, called with the instance whose handle C
    passes first; an exception is logged as one line (and, with ``error``,
    returned)."""
    kwargs = {"name": name, "onerror": _onerror}
    if error is not None:
        kwargs["error"] = error

    @ffi.def_extern(**kwargs)
    def entry(handle, *args):
        plugin = ffi.from_handle(handle)
        try:
            return function(plugin, *args)
        except Exception:
            _log_error(plugin, name)
            return error

    return entry


def _onerror(exc_type, exc_value, tb):
    # Only reached if the logging above failed: nothing else to do.
    return None


def bootstrap(ffi, lib, target):
    """Bind plugin class ``target`` ("module:Class") to a library's ffi
    and lib: define its extern "Python" entry points."""
    import importlib

    module, _, name = target.partition(":")
    cls = getattr(importlib.import_module(module), name)
    runtime = _Runtime(ffi, lib, cls)

    @ffi.def_extern(error=ffi.NULL, onerror=_onerror)
    def runtime_py_init(p):
        return runtime.init(p)

    @ffi.def_extern(onerror=_onerror)
    def runtime_py_unload(handle):
        runtime.unload(handle)

    # The runtime's method itself: a job's call is the most frequent.
    ffi.def_extern(name="runtime_py_job", error=-1, onerror=_onerror)(runtime.job)

    @ffi.def_extern(error=-1, onerror=_onerror)
    def runtime_py_plugin(handle, index, args):
        return runtime.plugin(handle, index, args)

    @ffi.def_extern(onerror=_onerror)
    def runtime_py_request(handle, msg, index, userid, rolemask, text):
        runtime.request(handle, msg, index, userid, rolemask, text)

    @ffi.def_extern(onerror=_onerror)
    def runtime_py_commit(handle, cookie, errnum, errstr):
        ffi.from_handle(handle).jobtap.kvs.committed(cookie, errnum, errstr)

    binder = getattr(cls, "bind_externs", None)
    if binder is not None:
        binder(ffi, lib)
    return runtime
