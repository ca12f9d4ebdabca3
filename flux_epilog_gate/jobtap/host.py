"""The Python side of epilog-gate.so: entry points called from entry.c.

Every entry point contains its own exceptions: an exception becomes an
error return (or an error response) and one log line, never a crash of
the job-manager.

One interpreter outlives ``flux jobtap remove``: the gate of a removed
plugin is kept and taken over by the next load into the same
job-manager, so holds survive a reload without reading anything back.  A
new job-manager (module reload, instance restart, or a first load) reads
the hold log (:mod:`flux_epilog_gate.holdlog`) at once and rebuilds the
holds of the jobs it names from their entries and eventlogs; other jobs
never see the gate.

A load that fails or is refused leaves all of this alone: each load has
a :class:`Host` of its own, which takes over only once the load is
committed (see :meth:`Host.commit`).
"""

import errno
import syslog
import traceback

from .. import holdlog, protocol
from ..config import Config, ConfigError
from ..errors import GateError
from ..gate import CLEANUP, INACTIVE, NEW, RUN, Gate
from ..holds import EPILOG
from ..shutdown import BROKER_SHUTDOWN, Shutdown
from ._entry import ffi, lib
from .facade import (
    Jobtap,
    arg_in,
    arg_out,
    disconnect_match,
    is_streaming,
    keep_request,
    request_payload,
)

JOB_NEW, JOB_CLEANUP, JOB_INACTIVE, JOB_EVENT, JOB_DEPEND = range(5)
#: job.state.run, forwarded only for jobs with prolog holds (entry.c).
JOB_RUN = 5
PLUGIN_CONF, PLUGIN_QUERY = range(2)

#: RPC methods, in the order of the index each is registered with. All
#: admit guests at the dispatcher; the handlers decide what a guest may do.
METHODS = ("hold", "release", "list", "watch", "disconnect")

#: Error text that ends watch streams when the plugin goes away.
UNLOADED = "epilog-gate was unloaded: watch again"


class Host:
    """One instance of the plugin and, once its load is committed, the gate
    it drives.

    An instance is made for every load, including one the job-manager then
    refuses (a duplicate) or fails (a bad configuration).  Until its first
    ``conf.update`` succeeds, the last step of a load that can fail, it
    touches nothing another instance uses: no gate, no services, no jobs.
    """

    def __init__(self, p):
        self.jobtap = Jobtap(p)
        self.gate = None
        self.shutdown = None
        self.recovering = False
        self.carried = None
        self._load_timer = None
        self.seen = set()
        # Entries of the hold log by job, or None if it could not be read.
        self.log = {}
        if self.jobtap.load_options().get("debug-fault") == "init":
            # The failed instance must not keep a reference on the handle.
            self.jobtap.close()
            raise RuntimeError("debug-fault=init: injected failure")

    @property
    def committed(self):
        return _State.host is self

    def commit(self, config):
        """Take over as the gate of this job-manager: the load succeeds.

        The gate of a removed instance is carried over; a new job-manager
        starts a gate of its own and recovers the jobs the hold log names.
        If anything here fails, the load fails and nothing has changed.
        """
        carried = _State.carried if lib.gate_seen_jobmanager(self.jobtap.p) else None
        if carried is None or any(job.recovering for job in carried.jobs.values()):
            self.log = self._read_log()
        self._register()
        # job.new is called for every active job right after the load (or,
        # in a restarting job-manager, for every restored job); a timer
        # fires only once that is done.
        self.jobtap.forward(new=True, depend=bool(config.rules))
        self._load_timer = self.jobtap.timer(0.0, self._loaded)
        # Nothing below can fail.
        if carried is not None:
            carried.attach(self.jobtap)
            self.gate = carried
        else:
            self.gate = Gate(self.jobtap)
        self.gate.reconfigure(config)
        self.shutdown = Shutdown(self.gate, self.jobtap)
        self.carried = carried
        self.recovering = carried is None
        _State.carried = None
        _State.host = self
        # Last: the broker's state streams to the committed instance only.
        self.jobtap.watch_broker(BROKER_SHUTDOWN, self.shutdown.on_broker_state)

    def _read_log(self):
        """The hold log, read at once: only the jobs it names can have
        holds (see holdlog.py).  None if it cannot be read: then every job
        that may be at its epilog point is recovered."""
        try:
            text = self.jobtap.lookup_kvs(holdlog.KEY)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return {}
            self.jobtap.log(syslog.LOG_ERR, f"reading {holdlog.KEY}: {exc}")
            return None
        log, skipped = holdlog.parse(text)
        if skipped:
            self.jobtap.log(
                syslog.LOG_ERR, f"{holdlog.KEY}: skipped {skipped} malformed entries"
            )
        return log

    def discard(self):
        """A load that failed or was refused: drop this instance."""
        if self._load_timer is not None:
            self._load_timer.stop()
            self._load_timer = None
        self.jobtap.close()

    def _register(self):
        for index, method in enumerate(METHODS):
            self.jobtap.register(method, index, guests=True)

    # Jobs

    def fault(self, where):
        if self.gate.config.fault == where:
            raise RuntimeError(f"debug-fault={where}: injected failure")

    def job(self, what, topic, jobid, state, userid, args):
        self.fault("job")
        if what == JOB_NEW:
            self._on_new(jobid, state, userid)
        elif what == JOB_DEPEND:
            if self.gate.config.rules:
                attributes = arg_in(args).get("jobspec", {}).get("attributes", {})
                self.gate.apply_rules(jobid, attributes)
        elif what == JOB_CLEANUP:
            self.gate.on_cleanup(jobid)
        elif what == JOB_INACTIVE:
            self.gate.on_inactive(jobid)
        elif what == JOB_EVENT:
            self.gate.on_event(jobid, ffi.string(topic).decode(), state)
        elif what == JOB_RUN:
            self.gate.on_run(jobid)

    def _on_new(self, jobid, state, userid):
        if state == NEW:
            return
        self.seen.add(jobid)
        if self.carried is not None:
            if self.gate.retrack(jobid, state):
                self._recover(jobid)
        elif self.recovering and (self.log is None or jobid in self.log):
            self.gate.begin_recovery(jobid, userid)
            self._recover(jobid)

    def _recover(self, jobid):
        """Rebuild the holds of a job: from its entries in the hold log, and
        its eventlog if it may have active holds or has entries."""
        try:
            state, _ = self.jobtap.job_info(jobid)
        except OSError:
            state = INACTIVE
        entries = (self.log or {}).get(jobid, [])
        if not entries and state not in (RUN, CLEANUP):
            self.gate.end_recovery(jobid, [])
            return
        self.jobtap.read_eventlog(
            jobid, lambda events, error: self._recovered(jobid, entries, events, error)
        )

    def _recovered(self, jobid, entries, events, error):
        if self.jobtap.p is None:
            return
        if error is not None:
            self.jobtap.log(
                syslog.LOG_ERR, f"recovering job {jobid}: eventlog lookup: {error}"
            )
            events = []
        # A stable sort: at equal times a log entry comes first.
        self.gate.end_recovery(jobid, sorted(entries + events, key=lambda e: e[0]))

    def _loaded(self):
        self._load_timer = None
        if self.carried is not None:
            self.gate.resume(self.seen)
            self.carried = None
        self.recovering = False
        self.seen = set()
        self.jobtap.forward(depend=bool(self.gate.config.rules))

    # Plugin callbacks

    def configure(self, args):
        conf = arg_in(args).get("conf") or {}
        config = Config.from_sources(
            self.jobtap.load_options(), conf.get("epilog-gate")
        )
        if not self.committed:
            self.commit(config)
            return
        self.gate.reconfigure(config)
        self.jobtap.forward(new=self._load_timer is not None, depend=bool(config.rules))

    def query(self, args):
        self.fault("query")
        gate = self.gate
        arg_out(
            args,
            {
                "config": gate.config.to_dict(),
                "counters": dict(
                    gate.stats,
                    holds=sum(len(job.holds) for job in gate.jobs.values()),
                    jobs=len(gate.jobs),
                    watchers=len(gate.watchers),
                    gone=len(gate.gone),
                    log_commits=gate.record.commits,
                ),
                "holds": gate.list(),
            },
        )

    # Requests

    def request(self, index, msg, userid, rolemask, text):
        method = METHODS[index]
        if method == "disconnect":
            self.gate.unwatch(lambda sink: disconnect_match(msg, sink))
            return
        self.fault("request")
        try:
            owner = bool(rolemask & lib.FLUX_ROLE_OWNER)
            payload = request_payload(text)
            getattr(self, f"_{method}")(msg, payload, owner, userid)
        except GateError as exc:
            self.jobtap.respond_error(msg, exc.errnum, exc.message)
        except ValueError as exc:
            self.jobtap.respond_error(
                msg, errno.EPROTO, f"{method}: malformed payload: {exc}"
            )

    def _hold(self, message, payload, owner, userid):
        _require_owner("hold", owner)
        request = protocol.parse_hold(payload)
        self.hold(message, *request, point=protocol.parse_hold_point(payload))

    def _release(self, message, payload, owner, userid):
        _require_owner("release", owner)
        self.release(message, *protocol.parse_release(payload))

    # Both paths end here: the general one once Python has checked the
    # payload, the owner's well-formed requests straight from C.

    # The answer waits until the request's record is durable (see
    # holdlog.py): the message is kept until then.

    def hold(self, message, jobid, description, timeout, point=EPILOG):
        kept = keep_request(message)

        def done(hold, error):
            self._answer(kept, "hold", error, lambda: self.jobtap.send_hold(kept, hold))

        self.gate.hold(jobid, description, timeout, point, done=done)

    def release(self, message, jobid, description, status):
        kept = keep_request(message)

        def done(result, error):
            self._answer(
                kept, "release", error, lambda: self.jobtap.send_release(kept, *result)
            )

        self.gate.release(jobid, description, status, done=done)

    def _answer(self, msg, method, error, send):
        """Answer a kept request once its record is durable, or with the
        error that kept it from being so."""
        if self.jobtap.p is None:
            return
        try:
            if error is None:
                send()
            else:
                self.jobtap.respond_error(
                    msg, error.errno or errno.EIO, f"{method}: {error.strerror}"
                )
        except Exception:  # noqa: BLE001 - inside the job-manager
            self.jobtap.log_exception(f"answering {method}")

    def _list(self, message, payload, owner, userid):
        jobid = protocol.parse_list(payload if payload is not None else {})
        holds = self.gate.list(jobid, userid=None if owner else userid)
        self.jobtap.send(message, {"holds": holds})

    def _watch(self, message, payload, owner, userid):
        if not is_streaming(message):
            raise GateError(errno.EPROTO, "watch: request must be streaming")
        payload = payload if payload is not None else {}
        descriptions = protocol.parse_watch(payload)
        points = protocol.parse_watch_points(payload)
        sink = keep_request(message)
        self.gate.watch(
            sink, descriptions, userid=None if owner else userid, points=points
        )

    def unload(self):
        """This plugin instance is being destroyed: end the watch streams
        (their clients watch again once the gate is back), stop everything
        that would call back into it, and keep the gate for the next load."""
        for watcher in self.gate.watchers:
            self.jobtap.respond_error(watcher.sink, errno.ECONNRESET, UNLOADED)
        self.gate.watchers = []
        self.shutdown.stop()
        self.gate.suspend()
        self.jobtap.close()


def _require_owner(method, owner):
    if not owner:
        raise GateError(errno.EPERM, f"{method}: only the instance owner may {method}")


class _State:
    """Module state that survives plugin remove and load."""

    #: Every instance of the plugin, by the address of its flux_plugin_t.
    hosts = {}
    #: The one whose load was committed: it gets the jobs and requests.
    host = None
    #: The gate of a removed instance, for the next load to take over.
    carried = None


def _address(p):
    return int(ffi.cast("uintptr_t", p))


def _log_error(where, host=None):
    host = host or _State.host
    text = f"{where}: " + " | ".join(traceback.format_exc().strip().splitlines()[-3:])
    if host is not None and host.jobtap.p is not None:
        host.jobtap.log(syslog.LOG_ERR, text)
    else:
        print(f"epilog-gate: {text}", flush=True)


def _onerror(exc_type, exc_value, tb):
    host = _State.host
    lines = traceback.format_exception(exc_type, exc_value, tb)
    text = "uncaught: " + " | ".join("".join(lines).strip().splitlines()[-3:])
    if host is not None and host.jobtap.p is not None:
        host.jobtap.log(syslog.LOG_ERR, text)


@ffi.def_extern(error=-1, onerror=_onerror)
def gate_py_init(p):
    try:
        host = Host(p)
    except Exception:
        text = " | ".join(traceback.format_exc().strip().splitlines()[-3:])
        lib.gate_log(p, syslog.LOG_ERR, f"init: {text}".encode("utf-8", "replace"))
        return -1
    _State.hosts[_address(p)] = host
    return 1


@ffi.def_extern(onerror=_onerror)
def gate_py_unload(p):
    host = _State.hosts.pop(_address(p), None)
    if host is None:
        return
    try:
        if host.committed:
            _State.host = None
            host.unload()
            _State.carried = host.gate
        else:
            host.discard()
    except Exception:
        _log_error("unload", host)


@ffi.def_extern(error=-1, onerror=_onerror)
def gate_py_job(p, what, topic, jobid, state, userid, args):
    try:
        _State.host.job(what, topic, jobid, state, userid, args)
    except Exception:
        _log_error(f"job {jobid}")
        return -1
    return 0


@ffi.def_extern(error=-1, onerror=_onerror)
def gate_py_plugin(p, what, args):
    host = _State.hosts.get(_address(p))
    try:
        if what == PLUGIN_CONF:
            host.configure(args)
        elif what == PLUGIN_QUERY:
            host.query(args)
    except ConfigError as exc:
        lib.gate_error(p, args, f"epilog-gate: {exc}".encode())
        return -1
    except Exception:
        _log_error("plugin callback", host)
        lib.gate_error(p, args, b"epilog-gate: internal error (see flux dmesg)")
        return -1
    return 0


@ffi.def_extern(onerror=_onerror)
def gate_py_request(msg, method, userid, rolemask, payload):
    try:
        _State.host.request(method, msg, userid, rolemask, payload)
    except Exception:
        _internal_error(msg)


@ffi.def_extern(onerror=_onerror)
def gate_py_hold(msg, jobid, description, timeout):
    _decoded_request(
        msg,
        lambda host: host.hold(
            msg,
            jobid,
            ffi.string(description).decode(),
            None if timeout < 0 else timeout,
        ),
    )


@ffi.def_extern(onerror=_onerror)
def gate_py_release(msg, jobid, description, status):
    _decoded_request(
        msg,
        lambda host: host.release(msg, jobid, ffi.string(description).decode(), status),
    )


def _decoded_request(msg, handle):
    """A request decoded in C: ``handle(host)`` answers it."""
    host = _State.host
    try:
        host.fault("request")
        handle(host)
    except GateError as exc:
        host.jobtap.respond_error(msg, exc.errnum, exc.message)
    except Exception:
        _internal_error(msg)


def _internal_error(msg):
    _log_error("request")
    try:
        _State.host.jobtap.respond_error(
            msg, errno.EIO, "epilog-gate: internal error (see flux dmesg)"
        )
    except Exception:
        _log_error("responding")
