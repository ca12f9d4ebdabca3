"""A thin, Pythonic face on the jobtap API of the job-manager.

:class:`Jobtap` wraps one loaded plugin instance (a ``flux_plugin_t *``)
and offers the jobtap API as plain methods that take and return Python
values and raise OSError on failure.  Handles, messages, watchers,
futures and eventlog entries come from flux-core's own Python bindings.
It names nothing of any particular plugin: a plugin's own port can
subclass it (see plugin.py).
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
from flux.core.inner import raw
from flux.eventlog import EventLogEvent
from flux.future import Future
from flux.job import JobID

#: A broker module's status while its ``mod_main`` has not yet run its
#: reactor (flux-core's FLUX_MODSTATE_INIT).
MODULE_INIT = 0


def _oserror(ffi):
    errnum = ffi.errno
    return OSError(errnum, os.strerror(errnum))


def decode_value(text):
    """A value of a job's arguments decoded from JSON text; ValueError if
    it is not JSON, or nested deeper than Python's decoder goes (a job's
    content is its user's: it may be either)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deep to be decoded") from None


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
        self._names = {}
        self._lookups = set()
        #: Callbacks of the KVS commits in flight, by the number C
        #: answers with (see kvs_commit).
        self._commits = {}
        self._next_commit = 1
        self._streams = set()
        self._rpcs = set()
        # What the calls of every held job use, bound once: a lookup on
        # the library costs more than the attribute, and a new cdata per
        # lookup more than reusing one (single-threaded, never reentered).
        self._gc = ffi.gc
        self._incref = lib.flux_msg_incref
        self._decref = lib.flux_msg_decref
        self._posted = lib.flux_jobtap_job_event_posted
        self._lookup = lib.runtime_job_lookup
        self._state = ffi.new("int *")
        self._userid = ffi.new("uint32_t *")
        self._value_text = ffi.new("char **")
        #: The current time, seconds since the epoch (a builtin: no
        #: Python frame for each hold, activation and release).
        self.now = time.time

    def address(self, cdata):
        return int(self.ffi.cast("uintptr_t", cdata))

    def oserror(self):
        """The OSError of the errno a failed C call left."""
        return _oserror(self.ffi)

    def check(self, rc):
        """Raise the OSError of a C call that returned ``rc`` < 0."""
        if rc < 0:
            raise _oserror(self.ffi)

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

    def close(self):
        """The plugin instance is gone: drop everything that refers to it.

        Our reference on the job-manager's handle is dropped now, while the
        job-manager still holds its own, not whenever Python collects us.
        """
        self.p = None
        self._lookups.clear()
        self._streams.clear()
        self._rpcs.clear()
        # Commits already sent are carried out by the KVS all the same.
        self._commits.clear()
        self.flux.handle = None

    # Jobs

    def name(self, name):
        """``name`` encoded, kept for the next call (names recur)."""
        encoded = self._names.get(name)
        if encoded is None:
            encoded = self._names[name] = name.encode()
        return encoded

    def job_info(self, jobid):
        """``(state, userid)`` of an active job; OSError(ENOENT) if none."""
        state, userid = self._state, self._userid
        if self._lookup(self.p, jobid, state, userid) < 0:
            raise self.oserror()
        return state[0], userid[0]

    def lookup_job(self, jobid):
        """The arguments of any active job (or one in the job-manager's
        inactive cache) as a dict: ``id``, ``state``, ``userid``,
        ``jobspec``, ``R``... OSError(ENOENT) if there is none."""
        args = self.lib.flux_jobtap_job_lookup(self.p, jobid)
        if args == self.ffi.NULL:
            raise self.oserror()
        try:
            return self.arg_in(args)
        finally:
            self.lib.flux_plugin_arg_destroy(args)

    def job_value(self, jobid, path, default=None):
        """The value at key path ``path`` (dot-separated:
        ``"jobspec.attributes.system.dw"``) of an active job's arguments,
        or ``default`` if it has none.  Only that value is decoded: the
        rest of the job (its user's attributes, however deep) is never
        read.  OSError(ENOENT) if there is no such job; ValueError if the
        value cannot be decoded (see :func:`decode_value`)."""
        text = self._value_text
        self.check(self.lib.runtime_job_value(self.p, jobid, path.encode(), text))
        return self._take_value(text, default)

    def arg_value(self, args, path, default=None):
        """:meth:`job_value` of the IN arguments of a jobtap callback."""
        text = self._value_text
        self.check(self.lib.runtime_arg_value(args, path.encode(), text))
        return self._take_value(text, default)

    def _take_value(self, text, default):
        if text[0] == self.ffi.NULL:
            return default
        try:
            return decode_value(self.ffi.string(text[0]))
        finally:
            self.lib.runtime_free(text[0])
            text[0] = self.ffi.NULL

    def jobspec_update(self, jobid, update):
        """Update the jobspec of job ``jobid``, which must not be the job of
        the current callback nor in RUN or later: ``update`` maps
        period-delimited keys (``"attributes.system.duration"``) to their
        new values.  A ``jobspec-update`` event records it."""
        text = json.dumps(update).encode()
        self.check(self.lib.runtime_jobspec_update(self.p, jobid, text))

    def dependency_add(self, jobid, description):
        """Keep the job in DEPEND until :meth:`dependency_remove` of the
        same description (only in its job.state.depend callback)."""
        self.check(
            self.lib.flux_jobtap_dependency_add(self.p, jobid, description.encode())
        )

    def dependency_remove(self, jobid, description):
        """Remove the job's dependency ``description``; the job leaves
        DEPEND when it has none left."""
        self.check(
            self.lib.flux_jobtap_dependency_remove(self.p, jobid, description.encode())
        )

    def subscribe(self, jobid):
        """Send the job's job.event.* calls (and its other calls of the
        plugin's topics) to Python: :meth:`mark` with events."""
        self.mark(jobid, events=True)

    def posted(self, jobid, name):
        """True if event ``name`` was posted to the job since the
        job-manager started."""
        encoded = self._names.get(name) or self.name(name)
        return self._posted(self.p, jobid, encoded) > 0

    def post_event(self, jobid, name, context=None):
        """Post event ``name`` to the job's eventlog, with ``context`` (a
        dict) if given."""
        text = self.ffi.NULL if context is None else json.dumps(context).encode()
        self.check(self.lib.runtime_post_event(self.p, jobid, self.name(name), text))

    def raise_job_exception(self, jobid, type, severity, note):
        """Raise a job exception (severity 0 is fatal)."""
        self.check(
            self.lib.runtime_raise(
                self.p, jobid, self.name(type), severity, note.encode()
            )
        )

    def cancel(self, jobid, note):
        """Raise a fatal job exception of type ``cancel``, as ``flux
        cancel`` does."""
        self.raise_job_exception(jobid, "cancel", 0, note)

    def prolog_start_current(self, description):
        """Start a prolog action of the job of the current callback: it
        does not start before :meth:`prolog_finish_job`."""
        self.check(self.lib.flux_jobtap_prolog_start(self.p, description.encode()))

    def prolog_finish_job(self, jobid, description, status=0):
        self.check(
            self.lib.flux_jobtap_prolog_finish(
                self.p, jobid, description.encode(), status
            )
        )

    def epilog_start_current(self, description):
        """Start an epilog action of the job of the current callback: it is
        not freed (or cleaned) before :meth:`epilog_finish_job`."""
        self.check(self.lib.flux_jobtap_epilog_start(self.p, description.encode()))

    def epilog_finish_job(self, jobid, description, status=0):
        self.check(
            self.lib.flux_jobtap_epilog_finish(
                self.p, jobid, description.encode(), status
            )
        )

    # Which jobs reach Python

    def mark(self, jobid, events=False):
        """Send the job's calls of the plugin's job topics to Python; with
        ``events``, subscribe to its job.event.* calls too."""
        self.check(self.lib.runtime_mark(self.p, jobid, 1 if events else 0))

    def unmark(self, jobid):
        """Stop sending the job's calls (and events) to Python."""
        self.lib.runtime_unmark(self.p, jobid)

    def want(self, jobid, topic):
        """Also send the marked job's calls of topic ``topic``, declared
        ``wanted=True``."""
        self.check(self.lib.runtime_want(self.p, jobid, self.topics[topic]))

    def forward(self, topic, on=True):
        """Send ``topic`` (declared ``every_job=True``) for every job, or
        (declared ``switched=True``) for marked jobs; or stop."""
        self.check(self.lib.runtime_forward(self.p, self.topics[topic], int(on)))

    def seen_jobmanager(self):
        """True if an earlier instance of this plugin ran in this same
        job-manager (the next call answers True)."""
        return bool(self.lib.runtime_seen_jobmanager(self.p))

    def jobmanager_id(self):
        """A number naming this job-manager: the same for every plugin on
        the runtime loaded into it, another for each new job-manager (a
        module reload makes one in the same process).  OSError if none
        could be made."""
        value = self.lib.runtime_jobmanager_id(self.p)
        if value == 0:
            raise OSError(errno.ENOMEM, "no job-manager id")
        return value

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
        new root before it answers (FLUX_KVS_SYNC).  OSError if the commit
        cannot be sent (then ``callback`` is never called)."""
        # Made and answered in C (runtime_kvs_commit): this runs for every
        # batch of records, and a bindings Future with a closure per commit
        # costs more than the commit itself.  C calls back committed() with
        # the number given here.
        cookie = self._next_commit
        if (
            self.lib.runtime_kvs_commit(
                self.p, self.name(key), text.encode(), append, sync, cookie
            )
            < 0
        ):
            raise self.oserror()
        self._next_commit = cookie + 1
        self._commits[cookie] = callback

    def committed(self, cookie, errnum, errstr):
        """The KVS answered commit ``cookie`` (0 or the errno of its
        failure, with the future's error text if any): call its callback,
        contained like every reactor callback."""
        callback = self._commits.pop(cookie, None)
        if callback is None or self.p is None:
            return
        error = None
        if errnum:
            text = (
                self.ffi.string(errstr).decode("utf-8", "replace")
                if errstr != self.ffi.NULL
                else os.strerror(errnum)
            )
            error = OSError(errnum, text)
        try:
            callback(error)
        except Exception:  # noqa: BLE001 - nothing may escape
            self.log_exception("kvs commit")

    def kvs_get(self, key):
        """The value of KVS ``key`` as bytes, waited for (for the load
        only, as the job-manager reads its own state at start): ``b""``
        for an empty value, None if there is no such key; raises OSError
        on any other failure."""
        future = Future(
            raw.flux_kvs_lookup(self.flux.handle, flux_ffi.NULL, 0, key.encode())
        )
        data = flux_ffi.new("const void *[1]")
        size = flux_ffi.new("size_t *")
        try:
            raw.flux_kvs_lookup_get_raw(future.pimpl.handle, data, size)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return None
            raise
        # An empty value comes back as NULL.
        if data[0] == flux_ffi.NULL or size[0] == 0:
            return b""
        return bytes(flux_ffi.buffer(data[0], size[0]))

    def kvs_dir(self, key):
        """The names in KVS directory ``key``, waited for (for the load
        only, like :meth:`kvs_get`): None if there is no such key; raises
        OSError on any other failure (ENOTDIR: it is a value)."""
        future = Future(
            raw.flux_kvs_lookup(
                self.flux.handle,
                flux_ffi.NULL,
                flux.constants.FLUX_KVS_READDIR,
                key.encode(),
            )
        )
        directory = flux_ffi.new("const flux_kvsdir_t *[1]")
        try:
            raw.flux_kvs_lookup_get_dir(future.pimpl.handle, directory)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return None
            raise
        names = []
        iterator = raw.flux_kvsitr_create(directory[0])
        try:
            while (name := raw.flux_kvsitr_next(iterator)) not in (None, flux_ffi.NULL):
                names.append(name.decode("utf-8", "surrogateescape"))
        finally:
            raw.flux_kvsitr_destroy(iterator)
        return names

    def read_kvs(self, key, callback):
        """Look up KVS ``key`` without blocking; later call
        ``callback(data, error)`` exactly once: the value as bytes (``b""``
        if empty), or None and an OSError."""
        future = Future(
            raw.flux_kvs_lookup(self.flux.handle, flux_ffi.NULL, 0, key.encode())
        )
        self._lookups.add(future)

        def done(future):
            self._lookups.discard(future)
            data = flux_ffi.new("const void *[1]")
            size = flux_ffi.new("size_t *")
            try:
                raw.flux_kvs_lookup_get_raw(future.pimpl.handle, data, size)
            except OSError as exc:
                callback(None, exc)
                return
            if data[0] == flux_ffi.NULL or size[0] == 0:
                callback(b"", None)
                return
            callback(bytes(flux_ffi.buffer(data[0], size[0])), None)

        self.on_answer(future, "kvs lookup", done)

    def read_eventlog(self, jobid, callback):
        """Look up the job's eventlog without blocking; later call
        ``callback(events, error)`` exactly once, with a list of
        ``(timestamp, name, context)``, or None and an OSError.  Lines that
        are not eventlog entries are left out."""

        def done(data, error):
            callback(None if error else _parse_eventlog(data), error)

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

    def job_manager_starting(self):
        """True while the job-manager module is still starting, None if
        the broker does not say, False once it runs.

        The job-manager loads the plugins of ``[job-manager] plugins``
        (and calls their ``conf.update``) in its ``mod_main``, before it
        runs its reactor; it reports itself running (``module.status``)
        from its reactor's first iteration, and only then handles
        requests such as ``flux jobtap load`` or a config reload.  So
        the broker lists it in state INIT exactly while it loads those
        plugins.  The request is synchronous: the broker answers it
        from its own thread.
        """
        try:
            modules = self.flux.rpc("module.list").get()["mods"]
        except (OSError, KeyError, TypeError):
            return None
        for module in modules:
            if module.get("name") == "job-manager":
                return module.get("status") == MODULE_INIT
        return None

    def broker_state(self):
        """The name of the broker's state (``init`` while rc1 runs,
        ``run``...), or None if the broker does not say."""
        try:
            return self.flux.rpc("state-machine.get").get()["state"]
        except (OSError, KeyError, TypeError):
            return None

    def abort_cleanup(self):
        """Make the broker abort its cleanup step, as a signal does.

        The job-manager runs as a thread of the broker, whose threads all
        block SIGTERM: the signal is taken by the broker's own signal
        watcher, which in CLEANUP aborts the running cleanup commands.
        """
        os.kill(os.getpid(), signal.SIGTERM)

    # Requests to other services

    def rpc(self, topic, payload=None, callback=None):
        """Send request ``topic`` with ``payload`` (a dict) to any rank and
        return its flux Future.  With ``callback``, later call
        ``callback(future)`` when it is answered (``future.get()`` gives
        the answer or raises OSError), contained like every handler: an
        exception in it is logged, never raised.  Without, the answer is
        not waited for (dropping the future drops it)."""
        future = self.flux.rpc(topic, payload)
        if callback is None:
            return future
        self._rpcs.add(future)

        def done(future):
            self._rpcs.discard(future)
            callback(future)

        self.on_answer(future, f"answer to {topic}", done)
        return future

    # Services

    def register(self, method, index, guests=False, handler=None):
        """Register RPC method ``method`` (Python's number ``index``),
        answered by runtime_request_cb or by the C message handler
        ``handler`` of the plugin's extension."""
        rolemask = self.lib.FLUX_ROLE_OWNER | (self.lib.FLUX_ROLE_USER if guests else 0)
        cb = self.lib.runtime_request_cb if handler is None else handler
        self.check(
            self.lib.runtime_service_register(
                self.p, method.encode(), index, rolemask, cb
            )
        )

    def send(self, msg, payload):
        """Respond to request ``msg`` with ``payload`` (a dict, or None for
        an empty answer); False if that failed."""
        if payload is None:
            return self.lib.flux_respond(self.h, msg, self.ffi.NULL) == 0
        text = json.dumps(payload, separators=(",", ":")).encode()
        return self.lib.flux_respond(self.h, msg, text) == 0

    def send_text(self, msg, text):
        """Respond to request ``msg`` with ``text``, a JSON object's text;
        False if that failed."""
        return self.lib.flux_respond(self.h, msg, text.encode()) == 0

    def respond_error(self, msg, errnum, text):
        self.lib.flux_respond_error(
            self.h, msg, errnum, text.encode("utf-8", "replace")
        )

    def keep_request(self, msg):
        """A reference on request ``msg`` that outlives the callback (for a
        later or streaming answer); dropped when Python collects it."""
        return self._gc(self._incref(msg), self._decref)

    def is_streaming(self, msg):
        return bool(self.lib.flux_msg_is_streaming(msg))

    def matchtag(self, msg):
        """The matchtag of request ``msg``: with its sender, it names the
        client's RPC."""
        tag = self.ffi.new("uint32_t *")
        self.check(self.lib.flux_msg_get_matchtag(msg, tag))
        return tag[0]

    def disconnect_match(self, msg, other):
        """True if request ``other`` came from the client that sent
        disconnect request ``msg``."""
        return bool(self.lib.flux_disconnect_match(msg, other))

    def request_payload(self, text):
        """Decoded JSON payload of a request (None if it has none)."""
        if text == self.ffi.NULL:
            return None
        try:
            return json.loads(self.ffi.string(text))
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None

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

    def arg_out(self, args, value):
        """Set the OUT arguments of a jobtap callback."""
        self.check(
            self.lib.flux_plugin_arg_set(
                args, self.lib.FLUX_PLUGIN_ARG_OUT, json.dumps(value).encode()
            )
        )

    # Transactions of several operations (the hold log's snapshots)

    def kvs_commit_ops(self, ops, callback, sync=False):
        """Commit ``ops`` in one transaction without blocking; later call
        ``callback(error)``, None on success.  ``ops`` is a list of ``(op,
        key, value)``, applied in this order, all or none: ``"put"`` or
        ``"append"`` ``value`` (text); ``"put_treeobj"`` ``value``, a tree
        object's JSON text (as :meth:`kvs_lookup_treeobj` answers it: the
        key then refers to the same content); ``"unlink"`` (``value`` is
        ignored).  ``sync`` as for :meth:`kvs_commit`."""
        # Through the bindings' checking wrappers: a few commits per
        # snapshot, not one per batch of records.
        txn = raw.flux_kvs_txn_create()
        try:
            for op, key, value in ops:
                _txn_op(txn, op, key.encode(), value)
            flags = flux.constants.FLUX_KVS_SYNC if sync else 0
            future = Future(
                raw.flux_kvs_commit(self.flux.handle, flux_ffi.NULL, flags, txn)
            )
        finally:
            raw.flux_kvs_txn_destroy(txn)
        # Kept with the requests in flight, dropped at close like them.
        self._rpcs.add(future)

        def done(future):
            self._rpcs.discard(future)
            try:
                future.get()
            except OSError as exc:
                callback(exc)
                return
            callback(None)

        self.on_answer(future, "kvs commit", done)

    def kvs_lookup_treeobj(self, key, callback):
        """Look up the tree object of KVS ``key`` without blocking; later
        call ``callback(treeobj, error)`` exactly once: its JSON text (for
        a value, its data or the references of its blobs), or None and an
        OSError."""
        future = Future(
            raw.flux_kvs_lookup(
                self.flux.handle,
                flux_ffi.NULL,
                flux.constants.FLUX_KVS_TREEOBJ,
                key.encode(),
            )
        )
        self._lookups.add(future)

        def done(future):
            self._lookups.discard(future)
            treeobj = flux_ffi.new("const char *[1]")
            try:
                raw.flux_kvs_lookup_get_treeobj(future.pimpl.handle, treeobj)
            except OSError as exc:
                callback(None, exc)
                return
            callback(flux_ffi.string(treeobj[0]).decode(), None)

        self.on_answer(future, "kvs lookup", done)


def _txn_op(txn, op, key, value):
    """Add operation ``op`` of :meth:`Jobtap.kvs_commit_ops` to ``txn``
    (the wrappers raise OSError on failure)."""
    if op == "put":
        raw.flux_kvs_txn_put(txn, 0, key, value.encode())
    elif op == "append":
        raw.flux_kvs_txn_put(txn, flux.constants.FLUX_KVS_APPEND, key, value.encode())
    elif op == "put_treeobj":
        raw.flux_kvs_txn_put_treeobj(txn, 0, key, value.encode())
    elif op == "unlink":
        raw.flux_kvs_txn_unlink(txn, 0, key)
    else:
        raise ValueError(f"{op!r} is not a KVS transaction operation")


def _parse_eventlog(data):
    events = []
    for line in data.decode("utf-8", "replace").splitlines():
        if not line.strip():
            continue
        try:
            event = EventLogEvent(line)
            events.append((float(event.timestamp), event.name, dict(event.context)))
        except Exception:  # noqa: BLE001 - a line that is no entry is left out
            continue
    return events
