"""A thin, Pythonic face on the jobtap API of the job-manager.

:class:`Jobtap` wraps one loaded plugin (a ``flux_plugin_t *``) and offers
what the gate needs as plain methods that take and return Python values
and raise OSError on failure.  It is also the gate's *port* (see
:mod:`flux_epilog_gate.gate`).  Handles, messages, watchers, futures and
eventlog entries come from flux-core's own Python bindings.
"""

import errno
import json
import os
import signal
import syslog
import time
import traceback

import flux
import flux.constants
from flux.core.inner import ffi as flux_ffi
from flux.core.inner import lib as flux_lib
from flux.core.inner import raw
from flux.eventlog import EventLogEvent
from flux.future import Future
from flux.job import JobID

from ._entry import ffi, lib

EXCEPTION_TYPE = b"epilog"
EXCEPTION_SEVERITY = 1
#: Job exception raised for a failed prolog hold: fatal, the job never
#: starts.
PROLOG_EXCEPTION_TYPE = b"prolog"


def _address(cdata):
    return int(ffi.cast("uintptr_t", cdata))


def _oserror():
    errnum = ffi.errno
    return OSError(errnum, __import__("os").strerror(errnum))


class Jobtap:
    """The job-manager, as seen by one loaded instance of the plugin."""

    def __init__(self, p):
        self.p = p
        self.flux = flux.Flux(
            handle=flux_ffi.cast("flux_t *", _address(lib.flux_jobtap_get_flux(p)))
        )
        # The handle belongs to the job-manager: never close it.
        self.flux.incref()
        self.h = lib.flux_jobtap_get_flux(p)
        self._names = {}
        self._lookups = set()
        self._commits = set()
        self._streams = set()

    # Logging and error containment

    def log(self, level, text):
        lib.gate_log(self.p, level, text.encode("utf-8", "replace"))

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

    def close(self):
        """The plugin instance is gone: drop everything that refers to it.

        Our reference on the job-manager's handle is dropped now, while the
        job-manager still holds its own, not whenever Python collects us.
        """
        self.p = None
        self._lookups.clear()
        self._streams.clear()
        # Commits already sent are carried out by the KVS all the same.
        self._commits.clear()
        self.flux.handle = None

    # Jobs

    def now(self):
        return time.time()

    def _name(self, name):
        encoded = self._names.get(name)
        if encoded is None:
            encoded = self._names[name] = name.encode()
        return encoded

    def job_info(self, jobid):
        state = ffi.new("int *")
        userid = ffi.new("uint32_t *")
        if lib.gate_job_lookup(self.p, jobid, state, userid) < 0:
            raise _oserror()
        return state[0], userid[0]

    def posted(self, jobid, name):
        return lib.flux_jobtap_job_event_posted(self.p, jobid, self._name(name)) > 0

    def epilog_start(self, jobid, description, timeout=None):
        """Post ``epilog-start``, marked as the gate's (packed in C)."""
        if (
            lib.gate_epilog_start(
                self.p,
                jobid,
                description.encode(),
                -1.0 if timeout is None else timeout,
            )
            < 0
        ):
            raise _oserror()

    def epilog_finish(self, jobid, description, status):
        """Post ``epilog-finish``, marked as the gate's (packed in C)."""
        if lib.gate_epilog_finish(self.p, jobid, description.encode(), status) < 0:
            raise _oserror()

    def annotate(self, jobid, text):
        """Set the job's ``user.epilog_gate`` annotation to ``text`` (None:
        remove it) with a memo event."""
        encoded = ffi.NULL if text is None else text.encode()
        if lib.gate_memo(self.p, jobid, encoded) < 0:
            raise _oserror()

    def raise_exception(self, jobid, note):
        if (
            lib.gate_raise(
                self.p, jobid, EXCEPTION_TYPE, EXCEPTION_SEVERITY, note.encode()
            )
            < 0
        ):
            raise _oserror()

    def prolog_start(self, jobid, description, timeout=None):
        """Post ``prolog-start``, marked as the gate's (packed in C)."""
        timeout = -1.0 if timeout is None else timeout
        if lib.gate_prolog_start(self.p, jobid, description.encode(), timeout) < 0:
            raise _oserror()

    def prolog_finish(self, jobid, description, status):
        """Post ``prolog-finish``, marked as the gate's (packed in C)."""
        if lib.gate_prolog_finish(self.p, jobid, description.encode(), status) < 0:
            raise _oserror()

    def raise_fatal(self, jobid, note):
        if lib.gate_raise(self.p, jobid, PROLOG_EXCEPTION_TYPE, 0, note.encode()) < 0:
            raise _oserror()

    def want_run(self, jobid):
        """Also send the tracked job's job.state.run to Python."""
        if lib.gate_want_run(self.p, jobid) < 0:
            raise _oserror()

    def cancel(self, jobid, note):
        """Raise a fatal job exception of type ``cancel``, as ``flux
        cancel`` does."""
        if lib.gate_raise(self.p, jobid, b"cancel", 0, note.encode()) < 0:
            raise _oserror()

    def track(self, jobid, events=True):
        """Send the job's callbacks to Python; with ``events`` also its
        job.event.* callbacks."""
        if lib.gate_track(self.p, jobid, 1 if events else 0) < 0:
            raise _oserror()

    def untrack(self, jobid):
        lib.gate_untrack(self.p, jobid)

    def forward(self, new=False, depend=False):
        """Forward every job.new / job.state.depend to Python, not only
        those of tracked jobs."""
        flags = (lib.GATE_FORWARD_NEW if new else 0) | (
            lib.GATE_FORWARD_DEPEND if depend else 0
        )
        if lib.gate_set_forward(self.p, flags) < 0:
            raise _oserror()

    # Reactor

    def timer(self, delay, callback):
        watcher = self.flux.timer_watcher_create(
            delay, self.contained("timer", lambda *args: callback())
        )
        watcher.start()
        return watcher

    def kvs_commit(self, key, text, append, callback, sync=False):
        """Write (``append``: append) ``text`` to KVS ``key`` without
        blocking; later call ``callback(error)``, None on success.  With
        ``sync`` the KVS flushes the content store and checkpoints the
        new root before it answers (FLUX_KVS_SYNC)."""
        txn = raw.flux_kvs_txn_create()
        try:
            flags = flux_lib.FLUX_KVS_APPEND if append else 0
            raw.flux_kvs_txn_put(txn, flags, key.encode(), text.encode())
            commit_flags = flux_lib.FLUX_KVS_SYNC if sync else 0
            future = Future(
                raw.flux_kvs_commit(self.flux.handle, flux_ffi.NULL, commit_flags, txn)
            )
        finally:
            raw.flux_kvs_txn_destroy(txn)
        self._commits.add(future)

        def done(future):
            self._commits.discard(future)
            try:
                future.get()
            except OSError as exc:
                callback(exc)
                return
            callback(None)

        future.then(self.contained("kvs commit", done))

    def lookup_kvs(self, key):
        """Look up KVS ``key`` and wait for its value (text); raise
        OSError.  For the load only, as the job-manager reads its own
        state at start."""
        future = Future(
            raw.flux_kvs_lookup(self.flux.handle, flux_ffi.NULL, 0, key.encode())
        )
        value = flux_ffi.new("char *[1]")
        raw.flux_kvs_lookup_get(future.pimpl.handle, value)
        return flux_ffi.string(value[0]).decode()

    def read_kvs(self, key, callback):
        """Look up KVS ``key`` without blocking; later call
        ``callback(text, error)``: the value, or None and an OSError."""
        future = Future(
            raw.flux_kvs_lookup(self.flux.handle, flux_ffi.NULL, 0, key.encode())
        )
        self._lookups.add(future)

        def done(future):
            self._lookups.discard(future)
            try:
                value = flux_ffi.new("char *[1]")
                raw.flux_kvs_lookup_get(future.pimpl.handle, value)
            except OSError as exc:
                callback(None, exc)
                return
            callback(flux_ffi.string(value[0]).decode(), None)

        future.then(self.contained("kvs lookup", done))

    def read_eventlog(self, jobid, callback):
        """Look up the job's eventlog without blocking; later call
        ``callback(events, error)`` with a list of
        ``(timestamp, name, context)``, or None and an OSError."""

        def done(text, error):
            callback(None if error else _parse_eventlog(text), error)

        self.read_kvs(f"{JobID(jobid).kvs}.eventlog", done)

    # The broker

    def watch_broker(self, final, callback):
        """Call ``callback(state)`` with the broker's state (a
        broker_state_t), now and at each change up to ``final``."""
        future = self.flux.rpc(
            "state-machine.monitor",
            {"final": final},
            flags=flux.constants.FLUX_RPC_STREAMING,
        )
        self._streams.add(future)

        def done(future):
            try:
                state = future.get()["state"]
            except OSError as exc:
                self._streams.discard(future)
                if exc.errno != errno.ENODATA:
                    self.log(syslog.LOG_ERR, f"watching the broker's state: {exc}")
                return
            future.reset()
            callback(state)

        future.then(self.contained("broker state", done))

    def restartable(self):
        """True if this instance starts again from its state after a
        shutdown: its state directory is kept (``statedir-cleanup`` is 0)
        and it is not a job of another instance (no ``jobid``)."""
        try:
            self.flux.attr_get("jobid")
            return False
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise
        try:
            return self.flux.attr_get("statedir-cleanup") == "0"
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise
            return False

    def abort_cleanup(self):
        """Make the broker abort its cleanup step, as a signal does.

        The job-manager runs as a thread of the broker, whose threads all
        block SIGTERM: the signal is taken by the broker's own signal
        watcher, which in CLEANUP aborts the running cleanup commands.
        """
        os.kill(os.getpid(), signal.SIGTERM)

    # Services
    #
    # Requests are decoded in C (entry.c) and answered here with libflux
    # calls on the raw message: the hot path of every hold and release.

    def register(self, method, index, guests=False):
        rolemask = lib.FLUX_ROLE_OWNER | (lib.FLUX_ROLE_USER if guests else 0)
        arg = ffi.cast("void *", index)
        if (
            lib.flux_jobtap_service_register_ex(
                self.p, method.encode(), rolemask, lib.gate_request_cb, arg
            )
            < 0
        ):
            raise _oserror()

    def send(self, msg, payload):
        """Respond to request ``msg``; False if that failed."""
        text = json.dumps(payload, separators=(",", ":")).encode()
        return lib.flux_respond(self.h, msg, text) == 0

    def send_activation(self, msg, activation):
        """Send one ``watch`` response; False if that failed."""
        return (
            lib.gate_respond_watch(
                self.p,
                msg,
                activation["id"],
                activation["description"].encode(),
                activation["userid"],
                activation["ran"],
                self._name(activation["point"]),
                activation.get("aborted", False),
            )
            == 0
        )

    def send_hold(self, msg, hold):
        """Answer a ``hold`` request with ``hold``."""
        lib.gate_respond_hold(
            self.p, msg, hold.id, hold.description.encode(), self._name(hold.state)
        )

    def send_release(self, msg, released, reason=None):
        """Answer a ``release`` request."""
        lib.gate_respond_release(
            self.p, msg, released, ffi.NULL if reason is None else reason.encode()
        )

    def respond_error(self, msg, errnum, text):
        lib.flux_respond_error(self.h, msg, errnum, text.encode("utf-8", "replace"))

    # Plugin arguments

    def load_options(self):
        conf = lib.flux_plugin_get_conf(self.p)
        return json.loads(ffi.string(conf)) if conf != ffi.NULL else {}


def request_payload(text):
    """Decoded JSON payload of a request (None if it has none)."""
    if text == ffi.NULL:
        return None
    try:
        return json.loads(ffi.string(text))
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def keep_request(msg):
    """A reference on request ``msg`` that outlives the callback (for a
    streaming answer); dropped when Python collects it."""
    return ffi.gc(lib.flux_msg_incref(msg), lib.flux_msg_decref)


def is_streaming(msg):
    return bool(lib.flux_msg_is_streaming(msg))


def disconnect_match(msg, other):
    """True if request ``other`` came from the client that sent disconnect
    request ``msg``."""
    return bool(lib.flux_disconnect_match(msg, other))


def arg_in(args):
    """The IN arguments of a jobtap callback, decoded."""
    text = ffi.new("char **")
    if lib.flux_plugin_arg_get(args, lib.FLUX_PLUGIN_ARG_IN, text) < 0:
        raise _oserror()
    return json.loads(ffi.string(text[0]))


def arg_out(args, value):
    """Set the OUT arguments of a jobtap callback."""
    if (
        lib.flux_plugin_arg_set(
            args, lib.FLUX_PLUGIN_ARG_OUT, json.dumps(value).encode()
        )
        < 0
    ):
        raise _oserror()


def _parse_eventlog(text):
    events = []
    for line in text.splitlines():
        if line.strip():
            event = EventLogEvent(line)
            events.append((event.timestamp, event.name, event.context))
    return events
