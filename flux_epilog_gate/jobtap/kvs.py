"""A plugin's KVS: commits answered in C, lookups and transactions
through flux-core's bindings, and jobs' eventlogs read."""

import errno
import os

import flux
import flux.constants
from flux.core.inner import ffi as flux_ffi
from flux.core.inner import raw
from flux.eventlog import EventLogEvent
from flux.future import Future
from flux.job import JobID


class Kvs:
    """The KVS, as one plugin instance reads and writes it
    (:attr:`Jobtap.kvs <flux_epilog_gate.jobtap.facade.Jobtap.kvs>`).
    Nothing it sent calls back once the instance is closed."""

    def __init__(self, jobtap):
        self.jobtap = jobtap
        #: Callbacks of the commits in flight, by the number C answers
        #: with (see commit).
        self._callbacks = {}
        self._next = 1
        #: Lookups and transactions in flight (their futures).
        self._lookups = set()
        self._futures = set()

    def close(self):
        """The plugin instance is gone.  Commits already sent are carried
        out by the KVS all the same; their callbacks are dropped."""
        self._lookups.clear()
        self._futures.clear()
        self._callbacks.clear()

    def commit(self, key, text, append, callback, sync=False):
        """Write (``append``: append) ``text`` to KVS ``key`` without
        blocking; later call ``callback(error)``, None on success.  With
        ``sync`` the KVS flushes the content store and checkpoints the
        new root before it answers (FLUX_KVS_SYNC).  OSError if the commit
        cannot be sent (then ``callback`` is never called)."""
        jobtap = self.jobtap
        # Made and answered in C (runtime_kvs_commit): this runs for every
        # batch of records, and a bindings Future with a closure per commit
        # costs more than the commit itself.  C calls back committed() with
        # the number given here.
        cookie = self._next
        if (
            jobtap.lib.runtime_kvs_commit(
                jobtap.p, jobtap.name(key), text.encode(), append, sync, cookie
            )
            < 0
        ):
            raise jobtap.oserror()
        self._next = cookie + 1
        self._callbacks[cookie] = callback

    def committed(self, cookie, errnum, errstr):
        """The KVS answered commit ``cookie`` (0 or the errno of its
        failure, with the future's error text if any): call its callback,
        contained like every reactor callback."""
        jobtap = self.jobtap
        callback = self._callbacks.pop(cookie, None)
        if callback is None or jobtap.p is None:
            return
        error = None
        if errnum:
            text = (
                jobtap.ffi.string(errstr).decode("utf-8", "replace")
                if errstr != jobtap.ffi.NULL
                else os.strerror(errnum)
            )
            error = OSError(errnum, text)
        try:
            callback(error)
        except Exception:  # noqa: BLE001 - nothing may escape
            jobtap.log_exception("kvs commit")

    def get(self, key):
        """The value of KVS ``key`` as bytes, waited for (for the load
        only, as the job-manager reads its own state at start): ``b""``
        for an empty value, None if there is no such key; raises OSError
        on any other failure."""
        jobtap = self.jobtap
        future = Future(
            raw.flux_kvs_lookup(jobtap.flux.handle, flux_ffi.NULL, 0, key.encode())
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

    def dir(self, key):
        """The names in KVS directory ``key``, waited for (for the load
        only, like :meth:`get`): None if there is no such key; raises
        OSError on any other failure (ENOTDIR: it is a value)."""
        jobtap = self.jobtap
        future = Future(
            raw.flux_kvs_lookup(
                jobtap.flux.handle,
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

    def read(self, key, callback):
        """Look up KVS ``key`` without blocking; later call
        ``callback(data, error)`` exactly once: the value as bytes (``b""``
        if empty), or None and an OSError."""
        jobtap = self.jobtap
        future = Future(
            raw.flux_kvs_lookup(jobtap.flux.handle, flux_ffi.NULL, 0, key.encode())
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

        jobtap.on_answer(future, "kvs lookup", done)

    def read_eventlog(self, jobid, callback):
        """Look up the job's eventlog without blocking; later call
        ``callback(events, error)`` exactly once, with a list of
        ``(timestamp, name, context)``, or None and an OSError.  Lines that
        are not eventlog entries are left out."""

        def done(data, error):
            callback(None if error else _parse_eventlog(data), error)

        self.read(f"{JobID(jobid).kvs}.eventlog", done)

    def commit_ops(self, ops, callback, sync=False):
        """Commit ``ops`` in one transaction without blocking; later call
        ``callback(error)``, None on success.  ``ops`` is a list of ``(op,
        key, value)``, applied in this order, all or none: ``"put"`` or
        ``"append"`` ``value`` (text); ``"put_treeobj"`` ``value``, a tree
        object's JSON text (as :meth:`lookup_treeobj` answers it: the
        key then refers to the same content); ``"unlink"`` (``value`` is
        ignored).  ``sync`` as for :meth:`commit`."""
        jobtap = self.jobtap
        # Through the bindings' checking wrappers: a few commits per
        # snapshot, not one per batch of records.
        txn = raw.flux_kvs_txn_create()
        try:
            for op, key, value in ops:
                _txn_op(txn, op, key.encode(), value)
            flags = flux.constants.FLUX_KVS_SYNC if sync else 0
            future = Future(
                raw.flux_kvs_commit(jobtap.flux.handle, flux_ffi.NULL, flags, txn)
            )
        finally:
            raw.flux_kvs_txn_destroy(txn)
        # Kept with the requests in flight, dropped at close like them.
        self._futures.add(future)

        def done(future):
            self._futures.discard(future)
            try:
                future.get()
            except OSError as exc:
                callback(exc)
                return
            callback(None)

        jobtap.on_answer(future, "kvs commit", done)

    def lookup_treeobj(self, key, callback):
        """Look up the tree object of KVS ``key`` without blocking; later
        call ``callback(treeobj, error)`` exactly once: its JSON text (for
        a value, its data or the references of its blobs), or None and an
        OSError."""
        jobtap = self.jobtap
        future = Future(
            raw.flux_kvs_lookup(
                jobtap.flux.handle,
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

        jobtap.on_answer(future, "kvs lookup", done)


def _txn_op(txn, op, key, value):
    """Add operation ``op`` of :meth:`Kvs.commit_ops` to ``txn``
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
