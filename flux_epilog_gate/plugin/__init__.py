"""The gate as a plugin of the jobtap runtime: epilog-gate.so's Python class.

:class:`EpilogGatePlugin` wires the job-manager's calls and the RPC
methods to the gate (:class:`flux_epilog_gate.gate.Gate`).  The runtime
(:mod:`flux_epilog_gate.jobtap`) contains every exception: one becomes an
error return (or an error response) and one log line, never a crash of
the job-manager.

One interpreter outlives ``flux jobtap remove``: the gate of a removed
plugin is kept and taken over by the next load into the same
job-manager, so holds survive a reload without reading anything back.  A
new job-manager (module reload, instance restart, or a first load) reads
the hold log (:mod:`flux_epilog_gate.gate.holdlog`) at once and rebuilds the
holds of the jobs it names from their entries and eventlogs; other jobs
never see the gate.  The load itself is plain Python
(:mod:`flux_epilog_gate.gate.loader`): this class passes it the
job-manager's calls, and keeps each request that arrives while jobs are
still being recovered waiting until they all are.

A load that fails or is refused leaves all of this alone: each load has
an instance of its own, which takes over only once the load is committed
(see :meth:`GateDriver.commit`).

The dws plugin (dws.so, :mod:`flux_epilog_gate.dws`) is a plugin of the
same gate: :class:`GateDriver` is what both classes share, the
job-manager's calls that drive the gate and the load.  Loaded together
into one job-manager they share its one gate (see :mod:`.host`).
"""

import errno
import syslog
from functools import partial

from ..errors import GateError
from ..gate import protocol
from ..gate.config import Config, ConfigError
from ..gate.holds import EPILOG, POINTS
from ..gate.loader import Load
from ..gate.shutdown import BROKER_SHUTDOWN, Shutdown, loaded_from_config
from ..jobid import f58
from ..jobtap.plugin import (
    Plugin,
    Refused,
    RequestError,
    internal_error,
    job_topic,
    plugin_topic,
    request,
)
from .gcpolicy import FREEZER
from .host import host_of
from .port import GatePort

#: Error text that ends watch streams when the plugin goes away.
UNLOADED = "epilog-gate was unloaded: watch again"

#: Error text of a request that waited on recovery when the plugin went
#: away.
UNLOADED_WAITING = "epilog-gate was unloaded while recovering: send it again"

#: Seconds ``debug-fault=slow-recovery`` delays each eventlog read of a
#: load by.
SLOW_RECOVERY = 3.0


def _answers_refusals(handler):
    """A request handler whose GateError (ValueError: a malformed payload)
    is its answer."""

    def wrapper(self, request):
        self.fault("request")
        try:
            handler(self, request)
        except GateError as exc:
            request.error(exc.errnum, exc.message)
        except ValueError as exc:
            request.error(errno.EPROTO, f"{request.method}: malformed payload: {exc}")

    wrapper.__name__ = handler.__name__
    wrapper.__doc__ = handler.__doc__
    return wrapper


def _after_recovery(handler):
    """A request handler that runs once the gate's view is complete: a
    request that arrives while the gate is still recovering waits (see
    :meth:`flux_epilog_gate.gate.loader.Load.when_ready`)."""

    def wrapper(self, request):
        if self.ready:
            handler(self, request)
            return
        waiting = request.detach()
        self.when_ready(
            lambda: self._run_waiting(handler, waiting),
            lambda: waiting.error(
                errno.EAGAIN, f"{waiting.method}: {UNLOADED_WAITING}"
            ),
        )

    wrapper.__name__ = handler.__name__
    wrapper.__doc__ = handler.__doc__
    return wrapper


#: For plugins of the gate: a request handler run once the gate's view is
#: complete.
after_recovery = _after_recovery


class GateDriver(Plugin):
    """A plugin instance of the gate: once its load is committed it shares
    the gate of its job-manager (:class:`~.host.Host`) and, if it is the
    one of the highest :attr:`drive_rank` loaded, drives it.

    An instance is made for every load, including one the job-manager then
    refuses (a duplicate) or fails (a bad configuration).  Until its first
    ``conf.update`` succeeds, the last step of a load that can fail, it
    touches nothing another instance uses: no gate, no services, no jobs.
    """

    port = GatePort

    #: Which plugin drives the gate when several share it: the highest.
    drive_rank = 1

    def __init__(self, jobtap):
        super().__init__(jobtap)
        self.gate = None
        self.shutdown = None
        #: The host of the job-manager's gate, once committed.
        self.host = None
        #: This instance's load (gate.loader.Load), while it drives.
        self.load = None
        #: True until the job-manager has made the calls of the load
        #: (job.new and job.state.depend of jobs in flight).
        self.loading = False
        self._load_timer = None

    @property
    def committed(self):
        return self.host is not None

    @property
    def driving(self):
        # Asked at every call of a held job: one property, not two.
        host = self.host
        return host is not None and host.driver is self

    @property
    def ready(self):
        """True once the gate's view is complete (every job recovered)."""
        driver = self.host.driver if self.host is not None else None
        return driver is None or driver.load is None or driver.load.ready

    def when_ready(self, run, refuse=None):
        """Call ``run()`` once the gate's view is complete (now, if it is).
        Should its driver go away first, ``refuse()`` is called instead,
        or, without ``refuse``, ``run`` waits on for the next driver's."""
        if self.ready:
            run()
            return
        if refuse is None:

            def refuse():
                # Once the next driver (if any) has begun its load.
                if self.committed:
                    self.jobtap.timer(0.0, lambda: self.when_ready(run))

        self.host.driver.load.when_ready(run, refuse)

    def commit(self, config):
        """Take this job-manager's gate: the load succeeds.

        The gate of a removed instance is carried over (also one another
        plugin of the gate drove); a new job-manager starts a gate of its
        own and recovers the jobs the hold log names (see
        :class:`~flux_epilog_gate.gate.loader.Load`).  An instance of a
        lower rank than the driver only joins.  If anything here fails,
        the load fails and nothing has changed.
        """
        host = host_of(self.jobtap)
        drives = host.driver is None or self.drive_rank > host.driver.drive_rank
        load = None
        if drives:
            if host.driver is not None:
                partial = not host.driver.load.ready
            else:
                partial = host.partial
            load = Load(
                self.jobtap, host.gate, delay=self._recovery_delay(), partial=partial
            )
        self.register()
        # job.new is called for every active job right after the load (or,
        # in a restarting job-manager, for every restored job); a timer
        # fires only once that is done.
        self.forward(new=drives, depend=bool(config.rules))
        self._load_timer = self.jobtap.timer(0.0, self._loaded)
        # Nothing below can fail.
        self.loading = True
        host.join(self)
        self.host = host
        if not drives:
            self.gate = host.gate
            return
        self.load = load
        host.partial = False
        self.gate = host.gate = load.begin(config)
        self._freeze_long_lived()
        self._follow_listeners()
        self._watch_shutdown()

    def _freeze_long_lived(self):
        """Keep the gate's long-lived objects out of full collections
        (see :mod:`.gcpolicy`): those of the recovered holds once the load
        is ready, those of the current holds after each snapshot, and
        the survivors of every full collection."""
        FREEZER.install()
        self.gate.holdlog.on_snapshot = FREEZER.freeze
        self.load.when_ready(FREEZER.freeze, lambda: None)

    def _follow_listeners(self):
        """Have a held job's exceptions sent to this driver while the
        gate has listeners (they are all that want them), from now on."""
        self.gate.listeners.changed = self._listeners_changed
        self._listeners_changed()

    def _listeners_changed(self):
        # A listener that leaves as its plugin unloads may leave this
        # driver's port being destroyed: nothing is sent to it any more.
        if self.driving and self.jobtap.p is not None and not self.jobtap.unloading:
            wanted = bool(self.gate.listeners)
            self.jobtap.forward("job.event.exception", wanted)
            self._send_all_events(wanted)

    def _send_all_events(self, wanted):
        """A job's exception reaches a plugin only if the job's events
        are sent to it: while the gate has listeners, every tracked job's
        are (else only those the epilog point waits on)."""
        port = self.jobtap
        if wanted and not port.all_events:
            for jobid in list(self.gate.jobs):
                try:
                    port.track(jobid, events=True)
                except OSError as exc:
                    # Gone meanwhile: its job.state.inactive tells the gate.
                    port.log(syslog.LOG_DEBUG, f"{f58(jobid)}: tracking: {exc}")
        port.all_events = wanted

    def _watch_shutdown(self):
        self.shutdown = Shutdown(self.gate, self.jobtap)
        # Last: the broker's state streams to the driver only.
        self.jobtap.watch_broker(BROKER_SHUTDOWN, self.shutdown.on_broker_state)

    def hand_over(self):
        """A plugin of a higher rank takes the gate over (it loads it
        through its own port, see :meth:`commit`): stop driving it."""
        self.host.partial = not self.load.ready
        self.load.close()
        self.load = None
        self._suspend()
        for jobid in list(self.gate.jobs) + list(self.gate.replayed_progress):
            self.jobtap.untrack(jobid)
        self.forward(new=False, depend=False)
        self.jobtap.forward("job.event.exception", False)

    def take_over(self):
        """The driver went away and this instance stays: drive the gate
        through this port, retracking each of its jobs by id (no job.new
        comes: this instance is loaded already)."""
        gate = self.gate
        load = self.load = Load(self.jobtap, gate, partial=self.host.partial)
        self.host.partial = False
        load.begin(gate.config)
        self._freeze_long_lived()
        self._follow_listeners()
        try:
            self._watch_shutdown()
        except OSError as exc:
            self.jobtap.log(syslog.LOG_ERR, f"taking the gate over: {exc}")
        jobids = list(gate.jobs) + list(gate.replayed_progress)
        # A partial load's: the jobs the log names, which it had not seen.
        named = [jobid for jobid in (load.log or {}) if jobid not in jobids]
        for jobid in jobids + named:
            try:
                state, userid = self.jobtap.job_info(jobid)
            except OSError:
                # Not looked up (the job-manager may be going away): its
                # job.state.inactive would have come to the driver.
                continue
            load.on_new(jobid, state, userid)
        # None went inactive while no plugin of the gate was there.
        load.seen.update(jobids)
        load.loaded()

    def _recovery_delay(self):
        """Seconds each eventlog read of the load waits: 0, or with
        ``debug-fault=slow-recovery`` (tests) long enough for requests to
        arrive while the gate is still recovering."""
        if self.jobtap.load_options().get("debug-fault") == "slow-recovery":
            return SLOW_RECOVERY
        return 0.0

    def forward(self, new=False, depend=False):
        """Send every job's job.new / job.state.depend, not only those of
        tracked jobs (or stop)."""
        self.jobtap.forward("job.new", new)
        self.jobtap.forward("job.state.depend", depend)

    def discard(self):
        """A load that failed or was refused: drop this instance."""
        if self._load_timer is not None:
            self._load_timer.stop()
            self._load_timer = None
        self.jobtap.close()

    # Jobs: only the driver's port tracks jobs, so only the driver gets
    # their calls; job.new is forwarded to it while it loads.

    def fault(self, where):
        if self.gate.config.fault == where:
            raise RuntimeError(f"debug-fault={where}: injected failure")

    @job_topic("job.new", every_job=True)
    def on_new(self, job):
        if not self.driving:
            return
        self.fault("job")
        self._on_new(job.id, job.state, job.userid)

    @job_topic("job.state.depend", every_job=True)
    def on_depend(self, job):
        if not self.driving:
            return
        self.fault("job")
        if self.gate.config.rules:
            attributes = job.input.get("jobspec", {}).get("attributes", {})
            self.gate.apply_rules(job.id, attributes)

    @job_topic("job.state.cleanup", id_only=True)
    def on_cleanup(self, jobid):
        # self.driving and self.fault(), written out: this is every held
        # job's activation.
        host = self.host
        if host is None or host.driver is not self:
            return
        gate = self.gate
        if gate.config.fault is not None:
            self.fault("job")
        gate.on_cleanup(jobid)

    @job_topic("job.state.inactive", id_only=True)
    def on_inactive(self, jobid):
        if not self.driving:
            return
        self.fault("job")
        self.gate.on_inactive(jobid)
        self.gate.tell("inactive", jobid)

    #: Sent only while the gate has listeners (see _follow_listeners).
    @job_topic("job.event.exception", switched=True)
    def on_exception(self, job):
        """Told to the gate's listeners (its own holds need nothing)."""
        if self.driving and self.gate.listeners:
            # The event alone: the rest of the job is its user's content.
            try:
                context = job.get("entry.context")
            except ValueError:
                context = None
            if not isinstance(context, dict):
                context = {}
            self.gate.tell("exception", job.id, context)

    # Of a subscribed job's events only these move it to its epilog point.

    @job_topic("job.event.finish")
    def on_finish(self, job):
        if not self.driving:
            return
        self.fault("job")
        self.gate.on_event(job.id, "finish", job.state)

    @job_topic("job.event.free")
    def on_free(self, job):
        if not self.driving:
            return
        self.fault("job")
        self.gate.on_event(job.id, "free", job.state)

    #: Entry to RUN matters only to jobs with prolog holds (port.want_run):
    #: their prolog-start must be posted from this very callback.
    @job_topic("job.state.run", wanted=True, id_only=True)
    def on_run(self, jobid):
        if not self.driving:
            return
        self.fault("job")
        self.gate.on_run(jobid)

    def _on_new(self, jobid, state, userid):
        self.load.on_new(jobid, state, userid)

    def _loaded(self):
        self._load_timer = None
        self.loading = False
        if self.driving:
            self.load.loaded()
        self.forward(depend=bool(self.gate.config.rules))

    def unload(self):
        """This instance is being destroyed.  The driver ends the watch
        streams (their clients watch again once the gate is back), stops
        everything that would call back into it, and leaves the gate to
        the plugin that stays, if any (which drives it from now on), or
        to the next load; another one simply leaves."""
        if not self.committed:
            self.discard()
            return
        host, self.host = self.host, None
        driving = host.driver is self
        successor = host.leave(self)
        if self._load_timer is not None:
            self._load_timer.stop()
            self._load_timer = None
        if not driving:
            self.jobtap.close()
            return
        host.partial = not self.load.ready
        self.load.close()
        self._suspend()
        self.jobtap.close()
        if successor is not None:
            successor.take_over()

    def _suspend(self):
        for watcher in self.gate.watchers:
            self.jobtap.respond_error(watcher.sink, errno.ECONNRESET, UNLOADED)
        self.gate.watchers = []
        self.shutdown.stop()
        self.shutdown = None
        self.gate.holdlog.on_snapshot = None
        self.gate.suspend()

    def _run_waiting(self, handler, request):
        """Run the handler of a request that waited on recovery, as the
        runtime would have."""
        if self.jobtap.p is None:
            return
        try:
            handler(self, request)
        except RequestError as exc:
            request.error(exc.errnum, exc.message)
        except Exception:  # noqa: BLE001 - inside the job-manager
            internal_error(self, request.msg)


class EpilogGatePlugin(GateDriver):
    """epilog-gate.so: the gate's configuration, rules and services.  It
    drives the gate whenever it is loaded."""

    drive_rank = 1

    def __init__(self, jobtap):
        super().__init__(jobtap)
        #: Why the configuration in force is not the instance's (a load
        #: despite a bad one while the instance started), or None.
        self.config_error = None
        if self.jobtap.load_options().get("debug-fault") == "init":
            raise RuntimeError("debug-fault=init: injected failure")

    # Plugin callbacks

    @plugin_topic("conf.update")
    def configure(self, args):
        """The load, and each ``flux config reload``: a bad configuration
        is refused, unless the instance is starting (see
        :meth:`_despite`)."""
        conf = args.input.get("conf") or {}
        try:
            config = Config.from_sources(
                self.jobtap.load_options(), conf.get("epilog-gate")
            )
        except ConfigError as exc:
            config = self._despite(exc, conf.get("epilog-gate"))
        else:
            self._config_good()
        if not self.committed:
            self.commit(config)
        else:
            self.gate.reconfigure(config)
            self.forward(new=self._load_timer is not None, depend=bool(config.rules))
        self.shutdown.from_config = loaded_from_config(conf, self.name)

    def _despite(self, error, table):
        """The configuration to load with despite ``error``, while the
        instance starts; else Refused, which fails the load or the reload
        with the error (an admin's ``flux jobtap load`` or ``flux config
        reload``: they see it, and what is loaded stays).

        While the job-manager starts (it loads ``[job-manager] plugins``
        then, and a failed load stops it and the instance) or while rc1
        runs (a failed ``flux jobtap load`` there fails rc1), a refusal
        would keep the instance from starting, and its jobs' holds from
        being recovered.  The gate then loads with the load options
        alone, or the table alone, or the defaults, and says so at
        level error and in ``flux jobtap query`` (``config_error``)."""
        if not self._instance_starting():
            raise Refused(f"epilog-gate: {error}") from None
        if self.committed:
            # The job-manager's second conf.update of its start: the
            # configuration loaded despite the error stays.
            config, in_force = self.gate.config, None
        else:
            config, in_force = self._fallback(table)
        if in_force is not None or self.config_error is None:
            self.config_error = f"{error}: {in_force or 'configuration kept'}"
            self.jobtap.log(syslog.LOG_ERR, self.config_error)
        return config

    def _instance_starting(self):
        """True while the job-manager starts or rc1 runs (see
        :meth:`_despite`); when the broker does not say, True: a load
        with the defaults and an error is better than an instance that
        does not start."""
        if self.jobtap.job_manager_starting() is not False:
            return True
        return self.jobtap.broker_state() in ("init", None)

    def _fallback(self, table):
        """The configuration a load despite an error takes, and what it
        is: the load options without the table, else the table without
        the options, else the defaults."""
        for options, kept_table, in_force in (
            (
                self.jobtap.load_options(),
                None,
                "the [epilog-gate] table is ignored and its keys have their "
                "defaults (fix it, then flux config reload)",
            ),
            (
                None,
                table,
                "the load options are ignored and have their defaults "
                "(fix them, then load the plugin again)",
            ),
        ):
            try:
                return Config.from_sources(options, kept_table), in_force
            except ConfigError:
                continue
        return Config(), (
            "the load options and the [epilog-gate] table are ignored: "
            "the defaults are in force"
        )

    def _config_good(self):
        """A configuration was taken whole: an earlier error is over."""
        if self.config_error is not None:
            self.jobtap.log(
                syslog.LOG_INFO, "the configuration is good again: it is in force"
            )
            self.config_error = None

    @plugin_topic("plugin.query")
    def query(self, args):
        self.fault("query")
        gate = self.gate
        return {
            "config": gate.config.to_dict(),
            "config_error": self.config_error,
            "counters": dict(
                gate.stats,
                **gate.refused,
                holds=sum(len(job.holds) for job in gate.jobs.values()),
                jobs=len(gate.jobs),
                watchers=len(gate.watchers),
                pending=gate.holdlog.waiting(),
                gone=len(gate.gone),
                log_commits=gate.holdlog.commits,
                log_segment=gate.holdlog.segment,
                gc_freezes=FREEZER.freezes,
                gc_collections_frozen=FREEZER.collections,
                gc_frozen=FREEZER.frozen(),
            ),
            "holds": gate.list(),
        }

    # Requests

    @request("disconnect", guests=True)
    @_after_recovery
    def disconnect(self, request):
        self.gate.unwatch(lambda sink: self.jobtap.disconnect_match(request.msg, sink))

    @request("hold", guests=True, c_handler="gate_hold_cb")
    @_after_recovery
    @_answers_refusals
    def hold_request(self, request):
        """The general path of ``hold`` (the owner's well-formed requests
        come decoded from C, see :meth:`fast_hold`)."""
        _require_owner("hold", request.owner)
        payload = request.payload
        parsed = protocol.parse_hold(payload)
        self.hold(request.msg, *parsed, point=protocol.parse_hold_point(payload))

    @request("release", guests=True, c_handler="gate_release_cb")
    @_after_recovery
    @_answers_refusals
    def release_request(self, request):
        _require_owner("release", request.owner)
        self.release(request.msg, *protocol.parse_release(request.payload))

    @request("list", guests=True)
    @_after_recovery
    @_answers_refusals
    def list_request(self, request):
        payload = request.payload if request.payload is not None else {}
        jobid = protocol.parse_list(payload)
        text = self.gate.list_json(
            jobid,
            userid=None if request.owner else request.userid,
            columns=protocol.parse_list_columns(payload),
        )
        self.jobtap.send_text(request.msg, text)

    @request("snapshot", guests=True)
    @_after_recovery
    @_answers_refusals
    def snapshot_request(self, request):
        """Replace the hold log with a snapshot now (the owner only; an
        admin's tool, e.g. before a downgrade): answered once it has,
        with the log's bytes."""
        _require_owner("snapshot", request.owner)
        protocol.parse_snapshot(request.payload)
        kept = request.keep()

        def done(size, error):
            jobtap = self.jobtap
            if jobtap.p is None:
                return
            if error is not None:
                text = f"snapshot: {error.strerror or error}"
                jobtap.respond_error(kept, error.errno or errno.EIO, text)
            else:
                jobtap.send(kept, {"bytes": size})

        self.gate.snapshot(done)

    @request("watch", guests=True)
    @_after_recovery
    @_answers_refusals
    def watch_request(self, request):
        if not self.jobtap.is_streaming(request.msg):
            raise GateError(errno.EPROTO, "watch: request must be streaming")
        payload = request.payload
        payload = payload if payload is not None else {}
        descriptions = protocol.parse_watch(payload)
        points = protocol.parse_watch_points(payload)
        self.gate.watch(
            request.keep(),
            descriptions,
            userid=None if request.owner else request.userid,
            points=points,
        )

    @request("watch-ack", guests=True)
    @_answers_refusals
    def watch_ack_request(self, request):
        """A watcher read ``count`` activations of its stream (named by the
        matchtag of its watch request, from the same connection)."""
        matchtag, count = protocol.parse_watch_ack(request.payload)
        msg = request.msg

        def match(sink):
            return (
                self.jobtap.disconnect_match(msg, sink)
                and self.jobtap.matchtag(sink) == matchtag
            )

        self.gate.acknowledge(match, count)
        # Sent with FLUX_RPC_NORESPONSE by the client: then nothing goes.
        self.jobtap.send(msg, {})

    # Decoded in C (fastpath.c): the owner's well-formed hold and release.

    @classmethod
    def bind_externs(cls, ffi, lib):
        """Define the extern "Python" functions fastpath.c calls."""

        @ffi.def_extern()
        def gate_py_hold(handle, kept, jobid, description, timeout, point):
            ffi.from_handle(handle).fast_hold(kept, jobid, description, timeout, point)

        @ffi.def_extern()
        def gate_py_release(handle, kept, jobid, description, status):
            ffi.from_handle(handle).fast_release(kept, jobid, description, status)

    # The owner's hold and release, decoded in C: the bulk of the traffic,
    # so written with as few Python calls as the answer allows.  C passes
    # a reference on the request (``kept``) that these calls own, as
    # GatePort.own_request would return it: the answer the gate takes
    # gives it back, and every path that never reaches the gate drops it
    # (see _decoded_failed).

    def fast_hold(self, kept, jobid, description, timeout, point):
        try:
            description = self.jobtap.ffi.string(description).decode()
            # C passes the point's index in POINTS (-1: none was given).
            point = POINTS[point] if point >= 0 else EPILOG
            ready, gate = self.load.ready, self.gate
            if ready and gate.config.fault is not None:
                self.fault("request")
        except Exception:  # noqa: BLE001 - inside the job-manager
            self._decoded_failed(kept)
            return
        timeout = None if timeout < 0 else timeout
        if not ready:
            self._wait_decoded(kept, self.hold, (jobid, description, timeout, point))
            return
        # hold() and _keeping(), written out: this is the bulk of the
        # traffic, and each Python call costs about a thousand
        # instructions of the job-manager's thread.
        try:
            gate.requests.hold(
                jobid, description, timeout, point, partial(self._answer_hold, kept)
            )
        except GateError as exc:
            # Refused before anything took the answer (see Requests.hold).
            self.jobtap.answer_error(kept, exc.errnum, exc.message)
        except Exception:  # noqa: BLE001 - inside the job-manager
            # The answer may have been taken: the reference is its own.
            internal_error(self, kept)

    def fast_release(self, kept, jobid, description, status):
        try:
            description = self.jobtap.ffi.string(description).decode()
            ready, gate = self.load.ready, self.gate
            if ready and gate.config.fault is not None:
                self.fault("request")
        except Exception:  # noqa: BLE001 - inside the job-manager
            self._decoded_failed(kept)
            return
        if not ready:
            self._wait_decoded(kept, self.release, (jobid, description, status))
            return
        try:
            gate.requests.release(
                jobid, description, status, partial(self._answer_release, kept)
            )
        except GateError as exc:
            self.jobtap.answer_error(kept, exc.errnum, exc.message)
        except Exception:  # noqa: BLE001 - inside the job-manager
            internal_error(self, kept)

    def _decoded_failed(self, kept):
        """A request decoded in C failed before the gate had it: answered
        as an internal error, and its reference given back."""
        try:
            internal_error(self, kept)
        finally:
            self.jobtap.drop_request(kept)

    def _wait_decoded(self, owned, handle, values):
        """A request decoded in C (``owned``: the reference C took) that
        arrived while the gate's view is incomplete: ``handle(msg,
        *values)`` answers it once it is complete (``values`` are
        Python's own: C's strings do not outlive this call)."""
        kept = self.jobtap.keep_request(owned)
        self.jobtap.drop_request(owned)
        self.load.when_ready(
            lambda: self._answer_decoded(kept, handle, values),
            lambda: self.jobtap.respond_error(kept, errno.EAGAIN, UNLOADED_WAITING),
        )

    def _answer_decoded(self, msg, handle, values):
        try:
            self.fault("request")
            handle(msg, *values)
        except GateError as exc:
            self.jobtap.respond_error(msg, exc.errnum, exc.message)
        except Exception:  # noqa: BLE001 - inside the job-manager
            internal_error(self, msg)

    # The answer of each request is bound with partial(), not a closure: a
    # closure's cells cost more than the call.  It holds the request by a
    # bare reference (GatePort.own_request), which exactly one answer, or
    # a drop, gives back: a refusal (GateError) from the gate comes before
    # anything took the answer.  An unexpected exception leaves the
    # reference to the answer, which may already be kept.

    def hold(self, message, jobid, description, timeout, point=EPILOG):
        self._keeping(
            message,
            self.gate.hold,
            self._answer_hold,
            jobid,
            description,
            timeout,
            point,
        )

    def _keeping(self, message, call, answer, *values):
        """``call(*values, done=...)``, whose ``done`` answers ``message``,
        kept by a bare reference."""
        jobtap = self.jobtap
        kept = jobtap.own_request(message)
        try:
            call(*values, done=partial(answer, kept))
        except GateError:
            jobtap.drop_request(kept)
            raise

    def _answer_hold(self, kept, hold, error):
        jobtap = self.jobtap
        if error is not None:
            self._answer_error(kept, "hold", error)
        elif jobtap.p is None:
            jobtap.drop_request(kept)
        else:
            try:
                jobtap.answer_hold(kept, hold)
            except Exception:  # noqa: BLE001 - inside the job-manager
                jobtap.log_exception("answering hold")

    def release(self, message, jobid, description, status):
        self._keeping(
            message, self.gate.release, self._answer_release, jobid, description, status
        )

    def _answer_release(self, kept, result, error):
        jobtap = self.jobtap
        if error is not None:
            self._answer_error(kept, "release", error)
        elif jobtap.p is None:
            jobtap.drop_request(kept)
        else:
            try:
                jobtap.answer_release(kept, *result)
            except Exception:  # noqa: BLE001 - inside the job-manager
                jobtap.log_exception("answering release")

    def _answer_error(self, kept, method, error):
        """Answer a kept request with the error that kept its record from
        being durable."""
        jobtap = self.jobtap
        if jobtap.p is None:
            jobtap.drop_request(kept)
            return
        try:
            jobtap.answer_error(
                kept, error.errno or errno.EIO, f"{method}: {error.strerror}"
            )
        except Exception:  # noqa: BLE001 - inside the job-manager
            jobtap.log_exception(f"answering {method}")


def _require_owner(method, owner):
    if not owner:
        raise GateError(errno.EPERM, f"{method}: only the instance owner may {method}")
