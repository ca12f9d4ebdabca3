"""A thin, Pythonic face on the jobtap API of the job-manager.

:class:`Jobtap` wraps one loaded plugin instance (a ``flux_plugin_t *``):
it owns the instance's handle, log and plugin arguments, and offers the
rest of the jobtap API as services, each an object of its own that takes
and returns Python values and raises OSError on failure:

==============  ========================================================
``jobs``        :class:`~.jobs.Jobs`: look up, post, raise, depend,
                prolog and epilog actions
``marks``       :class:`~.marks.Marks`: which jobs' calls reach Python
``kvs``         :class:`~.kvs.Kvs`: commits, lookups, eventlogs
``broker``      :class:`~.broker.Broker`: the broker's state
``messages``    :class:`~.messages.Messages`: RPC methods served, their
                answers, requests to other services
==============  ========================================================

Handles, messages, watchers, futures and eventlog entries come from
flux-core's own Python bindings.  It names nothing of any particular
plugin: a plugin's own port can subclass it (see plugin.py).
"""

import json
import os
import syslog
import time
import traceback

import flux
from flux.core.inner import ffi as flux_ffi

from .broker import Broker
from .jobs import Jobs
from .kvs import Kvs
from .marks import Marks
from .messages import Messages


def decode_value(text):
    """A value of a job's arguments decoded from JSON text; ValueError if
    it is not JSON, or nested deeper than Python's decoder goes (a job's
    content is its user's: it may be either)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deep to be decoded") from None


def _oserror(ffi):
    errnum = ffi.errno
    return OSError(errnum, os.strerror(errnum))


class Jobtap:
    """The job-manager, as seen by one loaded instance of a plugin.

    ``ffi`` and ``lib`` are those of the plugin's library (each plugin
    built with build.py has its own); ``topics`` maps the names of the
    job topics it declared to their numbers.
    """

    def __init__(self, p, ffi, lib, topics=None):
        self.p = p
        self.ffi = ffi
        self.lib = lib
        self.topics = dict(topics or {})
        #: True only in the benchmark's build of a plugin (runtime.c's
        #: RUNTIME_BENCH_NO_RECORD): its commits are never sent.
        self.bench_no_record = bool(lib.RUNTIME_BENCH_NO_RECORD)
        #: The plugin's name (set by the runtime).
        self.plugin_name = None
        #: True while the instance is being destroyed (set by the
        #: runtime): its C state is gone already, so the calls that need
        #: it (mark, forward...) fail with EINVAL.
        self.unloading = False
        self.flux = flux.Flux(
            handle=flux_ffi.cast("flux_t *", self.address(lib.flux_jobtap_get_flux(p)))
        )
        # The handle belongs to the job-manager: never close it.
        self.flux.incref()
        self.h = lib.flux_jobtap_get_flux(p)
        #: Names encoded once (see name()).
        self.names = {}
        #: The current time, seconds since the epoch (a builtin: no
        #: Python frame for each hold, activation and release).
        self.now = time.time
        self.jobs = Jobs(self)
        self.marks = Marks(self)
        self.kvs = Kvs(self)
        self.broker = Broker(self)
        self.messages = Messages(self)

    def address(self, cdata):
        return int(self.ffi.cast("uintptr_t", cdata))

    def oserror(self):
        """The OSError of the errno a failed C call left."""
        return _oserror(self.ffi)

    def check(self, rc):
        """Raise the OSError of a C call that returned ``rc`` < 0."""
        if rc < 0:
            raise _oserror(self.ffi)

    def name(self, name):
        """``name`` encoded, kept for the next call (names recur)."""
        encoded = self.names.get(name)
        if encoded is None:
            encoded = self.names[name] = name.encode()
        return encoded

    # Logging and error containment

    def log(self, level, text):
        self.lib.runtime_log(self.p, level, text.encode("utf-8", "replace"))

    def log_exception(self, where):
        """Log the exception being handled as one line."""
        lines = traceback.format_exc().strip().splitlines()
        self.log(syslog.LOG_ERR, f"{where}: {' | '.join(lines[-3:])}")

    def contained(self, where, callback):
        """Wrap a reactor callback so an exception is logged, never raised:
        an exception escaping into flux-core's bindings would stop the
        job-manager's reactor."""

        def wrapper(*args):
            if self.p is None:
                return
            try:
                callback(*args)
            except Exception:  # noqa: BLE001 - nothing may escape
                self.log_exception(where)

        return wrapper

    def on_answer(self, future, where, callback):
        """Call ``callback(future)``, contained, when the one answer of
        ``future`` comes, then let the future go."""
        handler = self.contained(where, callback)

        def answered(future):
            try:
                handler(future)
            finally:
                # The bindings tie a future with a continuation to itself
                # (its handle) for its lifetime.  Untied, it is freed with
                # its message by reference counting as soon as it is
                # dropped, not left to the collector, which never frees
                # it if it was frozen in flight (plugin/gcpolicy.py).
                future.cb_handle = None

        future.then(answered)

    def timer(self, delay, callback):
        """Call ``callback()`` after ``delay`` seconds, contained; returns
        the watcher (``stop()``)."""
        watcher = self.flux.timer_watcher_create(
            delay, self.contained("timer", lambda *args: callback())
        )
        watcher.start()
        return watcher

    def close(self):
        """The plugin instance is gone: drop everything that refers to it.

        Our reference on the job-manager's handle is dropped now, while the
        job-manager still holds its own, not whenever Python collects us.
        """
        self.p = None
        self.kvs.close()
        self.broker.close()
        self.messages.close()
        self.flux.handle = None

    # Plugin arguments

    def load_options(self):
        """The options of the load (``flux jobtap load NAME k=v``)."""
        conf = self.lib.flux_plugin_get_conf(self.p)
        return json.loads(self.ffi.string(conf)) if conf != self.ffi.NULL else {}

    def load_options_given(self):
        """False if the load gave no options at all."""
        return self.lib.flux_plugin_get_conf(self.p) != self.ffi.NULL

    def arg_in(self, args):
        """The IN arguments of a jobtap callback, decoded."""
        text = self.ffi.new("char **")
        self.check(
            self.lib.flux_plugin_arg_get(args, self.lib.FLUX_PLUGIN_ARG_IN, text)
        )
        return json.loads(self.ffi.string(text[0]))

    def arg_value(self, args, path, default=None):
        """The value at key path ``path`` (dot-separated:
        ``"jobspec.attributes.system.dw"``) of the IN arguments of a
        jobtap callback, or ``default`` if they have none.  Only that
        value is decoded (the runtime's C encodes it alone): the rest of
        the job (its user's attributes, however deep) is never read.
        ValueError if it cannot be decoded (see :func:`decode_value`)."""
        text = self.ffi.new("char **")
        self.check(self.lib.runtime_arg_value(args, path.encode(), text))
        return self.take_value(text, default)

    def take_value(self, text, default):
        """The value C left in ``text`` (a ``char **``, freed here)."""
        if text[0] == self.ffi.NULL:
            return default
        try:
            return decode_value(self.ffi.string(text[0]))
        finally:
            self.lib.runtime_free(text[0])
            text[0] = self.ffi.NULL

    def arg_out(self, args, value):
        """Set the OUT arguments of a jobtap callback."""
        self.check(
            self.lib.flux_plugin_arg_set(
                args, self.lib.FLUX_PLUGIN_ARG_OUT, json.dumps(value).encode()
            )
        )
