"""The plugin instance that drives the gate, and hands it to the next.

One interpreter outlives ``flux jobtap remove``: the gate of a removed
plugin is kept and taken over by the next load into the same
job-manager, so holds survive a reload without reading anything back.  A
new job-manager (module reload, instance restart, or a first load) reads
the hold log (:mod:`flux_epilog_gate.gate.holdlog`) at once and rebuilds the
holds of the jobs it names from their entries and eventlogs; other jobs
never see the gate.  The load itself is plain Python
(:mod:`flux_epilog_gate.gate.loader`): a :class:`GateDriver` passes it the
job-manager's calls, and keeps each request that arrives while jobs are
still being recovered waiting until they all are (:func:`after_recovery`).

A load that fails or is refused leaves all of this alone: each load has
an instance of its own, which takes over only once the load is committed
(see :meth:`GateDriver.commit`).

Both plugins of the gate, epilog-gate.so
(:class:`~flux_epilog_gate.plugin.plugin.EpilogGatePlugin`) and dws.so
(:mod:`flux_epilog_gate.dws`), are drivers: loaded together into one
job-manager they share its one gate (see :mod:`.host`).
"""

import errno
import syslog
from functools import partial

from ..gate.loader import Load
from ..gate.logparse import FORMAT
from ..gate.shutdown import BROKER_SHUTDOWN
from ..jobid import f58
from ..jobtap.plugin import Plugin, RequestError, internal_error, job_topic
from ..version import __version__
from .gcpolicy import FREEZER
from .host import host_of
from .port import GatePort

#: Error text that ends watch streams when the plugin goes away.
UNLOADED = "epilog-gate was unloaded: watch again"


def unloaded_waiting(name):
    """Error text of a request that waited on recovery when plugin
    ``name`` went away."""
    return f"{name} was unloaded while recovering: send it again"


UNLOADED_WAITING = unloaded_waiting("epilog-gate")

#: Error text of a request of a plugin still loaded that waited on the
#: recovery of another that drove the gate, and went away or handed it on.
HANDED_OVER_WAITING = "the gate changed hands while recovering: send it again"

#: Seconds ``debug-fault=slow-recovery`` delays each eventlog read of a
#: load by.
SLOW_RECOVERY = 3.0


def after_recovery(handler):
    """A request handler that runs once the gate's view is complete: a
    request that arrives while the gate is still recovering waits (see
    :meth:`flux_epilog_gate.gate.loader.Load.when_ready`)."""

    def wrapper(self, request):
        if self.ready:
            handler(self, request)
            return
        waiting = request.detach()

        def refuse():
            # This instance went away, or else the driver it waited on
            # (removed, or handing the gate to a plugin just loaded).
            why = HANDED_OVER_WAITING if self.committed else unloaded_waiting(self.name)
            waiting.error(errno.EAGAIN, f"{waiting.method}: {why}")

        self.when_ready(lambda: self._run_waiting(handler, waiting), refuse)

    wrapper.__name__ = handler.__name__
    wrapper.__doc__ = handler.__doc__
    return wrapper


class Waits:
    """What a member of the gate left waiting on another member's load
    (a request of dws.so while epilog-gate.so recovers): each pair of
    callbacks settles once, by that load (``run`` once it is ready,
    ``refuse`` if it closes first) or by the member's own unload
    (``refuse`` at once).  Nothing a removed instance left must run on
    it, and a request it kept must still be answered: the load it waits
    on may outlive it by far."""

    def __init__(self, log_exception):
        self._log_exception = log_exception
        self._pending = {}

    def add(self, load, run, refuse):
        """Wait on ``load`` with ``run`` and ``refuse``."""
        key = object()
        self._pending[key] = (run, refuse)
        load.when_ready(partial(self._settle, key, 0), partial(self._settle, key, 1))

    def _settle(self, key, which):
        pair = self._pending.pop(key, None)
        if pair is not None:
            pair[which]()

    def refuse_all(self):
        """The member goes away: refuse everything it left waiting."""
        pending, self._pending = self._pending, {}
        for _, refuse in pending.values():
            try:
                refuse()
            except Exception:  # noqa: BLE001 - one must not stop the rest
                self._log_exception("refusing a request that waited on recovery")


#: An attribute a rule names whose value cannot be decoded: it is there,
#: and equal to nothing.
UNDECODABLE = object()
_ABSENT = object()


def rule_attributes(job, rules):
    """The job's ``attributes`` as far as ``rules`` look at them, each
    rule's key read alone: the rest of the jobspec is its user's, and may
    be anything (nested deeper than Python decodes, say)."""
    attributes = {}
    for rule in rules:
        try:
            value = job.get(f"jobspec.attributes.{rule.attribute}", _ABSENT)
        except ValueError:
            value = UNDECODABLE
        if value is _ABSENT:
            continue
        node = attributes
        for key in rule.path[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                break
        else:
            node[rule.path[-1]] = value
    return attributes


class GateDriver(Plugin):
    """A plugin instance of the gate: once its load is committed it shares
    the gate of its job-manager (:class:`~.host.Host`) and, if it is the
    one of the highest :attr:`drive_rank` loaded, drives it.

    An instance is made for every load, including one the job-manager then
    refuses (a duplicate) or fails (a bad configuration).  Until its first
    ``conf.update`` succeeds, the last step of a load that can fail, it
    touches nothing another instance uses: no gate, no services, no jobs.
    """

    #: Which plugin drives the gate when several share it: the highest
    #: (each plugin of the gate says its own; a driver that does not only
    #: drives alone).
    drive_rank = 0

    def __init__(self, jobtap):
        super().__init__(jobtap)
        #: The job-manager as the gate sees it, through this instance.
        self.port = GatePort(jobtap)
        self.gate = None
        self.shutdown = None
        #: The stream of the broker's states that self.shutdown follows.
        self._broker_states = None
        #: The host of the job-manager's gate, once committed.
        self.host = None
        #: This instance's load (gate.loader.Load), while it drives.
        self.load = None
        #: True until the job-manager has made the calls of the load
        #: (job.new and job.state.depend of jobs in flight).
        self.loading = False
        self._load_timer = None
        #: What this instance waits on while another member drives.
        self._waits = Waits(jobtap.log_exception)

    @property
    def committed(self):
        return self.host is not None

    def log_status(self):
        """What every plugin of the gate says of its build and hold log
        in ``flux jobtap query``: the package's version, the log format
        it writes, and why the log was refused (None if it was not)."""
        return {
            "version": __version__,
            "log_format": FORMAT,
            "log_error": self.gate.log_refused,
        }

    def instance_starting(self):
        """True while the job-manager starts or rc1 runs: then a load
        refused for its configuration would stop the instance (the
        job-manager fails on a ``[job-manager] plugins`` load that fails,
        rc1 on a ``flux jobtap load``), and with it the recovery of its
        jobs' holds, so a plugin of the gate loads despite a bad
        configuration and says so.  When the broker does not say, True:
        a load with an error logged is better than an instance that does
        not start."""
        if self.jobtap.broker.job_manager_starting() is not False:
            return True
        return self.jobtap.broker.state() in ("init", None)

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
        Should its driver, or this instance, go away first, ``refuse()``
        is called instead, or, without ``refuse``, ``run`` waits on for
        the next driver's (if this instance is still loaded)."""
        if self.ready:
            run()
            return
        if refuse is None:

            def refuse():
                # Once the next driver (if any) has begun its load.
                if self.committed:
                    self.jobtap.timer(0.0, lambda: self.when_ready(run))

        driver = self.host.driver
        if driver is self:
            # Closed, and so refused, as this instance goes away.
            self.load.when_ready(run, refuse)
        else:
            self._waits.add(driver.load, run, refuse)

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
                partial = host.recovery_unfinished
            load = Load(
                self.port, host.gate, delay=self._recovery_delay(), partial=partial
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
        host.recovery_unfinished = False
        self.gate = host.gate = load.begin(config)
        if self.jobtap.bench_no_record:
            self.gate.holdlog.unrecorded()
        self._freeze_long_lived()
        self._follow_listeners()
        self._watch_shutdown()

    def _freeze_long_lived(self):
        """Keep the gate's long-lived objects out of full collections
        (see :mod:`.gcpolicy`): those of the recovered holds once the load
        is ready, those of the current holds after each snapshot, and
        the survivors of every full collection."""
        FREEZER.install()
        self.gate.on_snapshot(FREEZER.freeze)
        self.load.when_ready(FREEZER.freeze, lambda: None)

    def _follow_listeners(self):
        """Have a held job's exceptions sent to this driver while the
        gate has listeners and one of them wants them, from now on, and
        once the load has recovered every job (a hold read back active
        is not activated again: its listener wants its events all the
        same)."""
        self.gate.on_listeners_changed(self._listeners_changed)
        self._listeners_changed()
        self.load.when_ready(self._listeners_changed, lambda: None)

    def _listeners_changed(self):
        # A listener that leaves as its plugin unloads may leave this
        # driver's port being destroyed: nothing is sent to it any more.
        if self.driving and self.jobtap.p is not None and not self.jobtap.unloading:
            wanted = self.gate.has_listeners()
            self.jobtap.marks.forward("job.event.exception", wanted)
            self._watch_wanted_exceptions()

    def _watch_wanted_exceptions(self):
        """A job's exception reaches a plugin only if it is watched for:
        each tracked job's that a listener wants now (the listeners ask
        for more as they need them, see
        :meth:`~flux_epilog_gate.gate.Gate.watch_exceptions`)."""
        port, gate = self.port, self.gate
        for jobid in gate.job_ids():
            if not gate.want_events(jobid):
                continue
            try:
                port.watch_exceptions(jobid)
            except OSError as exc:
                # Gone meanwhile: its job.state.inactive tells the gate.
                port.log(syslog.LOG_DEBUG, f"{f58(jobid)}: tracking: {exc}")

    def _watch_shutdown(self):
        self.shutdown = self.gate.watch_shutdown(self.port)
        # Last: the broker's state streams to the driver only.
        self._broker_states = self.jobtap.broker.watch(
            BROKER_SHUTDOWN, self.shutdown.on_broker_state
        )

    def hand_over(self):
        """A plugin of a higher rank takes the gate over (it loads it
        through its own port, see :meth:`commit`): stop driving it."""
        self.host.recovery_unfinished = not self.load.ready
        self.load.close()
        self.load = None
        self._suspend()
        for jobid in self.gate.tracked():
            self.port.untrack(jobid)
        self.forward(new=False, depend=False)
        self.jobtap.marks.forward("job.event.exception", False)

    def take_over(self):
        """The driver went away and this instance stays: drive the gate
        through this port, retracking each of its jobs by id (no job.new
        comes: this instance is loaded already)."""
        gate = self.gate
        load = self.load = Load(self.port, gate, partial=self.host.recovery_unfinished)
        self.host.recovery_unfinished = False
        load.begin(gate.config)
        self._freeze_long_lived()
        self._follow_listeners()
        try:
            self._watch_shutdown()
        except OSError as exc:
            self.jobtap.log(syslog.LOG_ERR, f"taking the gate over: {exc}")
        jobids = gate.tracked()
        # A partial load's: the jobs the log names, which it had not seen.
        named = [jobid for jobid in (load.log or {}) if jobid not in jobids]
        for jobid in jobids + named:
            try:
                state, userid = self.jobtap.jobs.info(jobid)
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
        self.jobtap.marks.forward("job.new", new)
        self.jobtap.marks.forward("job.state.depend", depend)

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
        rules = self.gate.config.rules
        if rules:
            self.gate.apply_rules(job.id, rule_attributes(job, rules))

    @job_topic("job.state.cleanup")
    def on_cleanup(self, job):
        # self.driving and self.fault(), written out: this is every held
        # job's activation.  The job's arguments are read only if a
        # prolog hold is aborted (its fatal exception is recorded).
        host = self.host
        if host is None or host.driver is not self:
            return
        gate = self.gate
        if gate.context.config.fault is not None:
            self.fault("job")
        gate.on_cleanup(job.id, job)

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
        if self.driving and self.gate.has_listeners():
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
            # Before the close: a request refused is answered through it.
            self._waits.refuse_all()
            self.jobtap.close()
            return
        host.recovery_unfinished = not self.load.ready
        self.load.close()
        self._suspend()
        self.jobtap.close()
        if successor is not None:
            successor.take_over()

    def _suspend(self):
        respond_error = self.jobtap.messages.respond_error
        self.gate.end_watches(
            lambda sink: respond_error(sink, errno.ECONNRESET, UNLOADED)
        )
        # A driver that hands the gate over (and stays loaded) must not
        # follow the shutdown too: its successor does.
        self.jobtap.broker.unwatch(self._broker_states)
        self._broker_states = None
        self.shutdown.stop()
        self.shutdown = None
        self.gate.on_snapshot(None)
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
