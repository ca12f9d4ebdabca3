"""The gate's facade: :class:`Gate`.

A load is a :class:`~flux_epilog_gate.gate.loader.Load` on the port:
``Load(port, carried)`` reads the hold log (never fails), ``begin(config)``
returns the gate (a new one, or ``carried``, the gate of the plugin
instance removed from the same job-manager), ``on_new(id, state,
userid)`` is each job.new of the load, ``loaded()`` says they are all
seen, and ``when_ready(run, refuse)`` runs a request once every job is
recovered (``close()`` at unload refuses those still waiting).  So a
restart, a reload or a crash can be driven through the port alone: a
crash keeps only what the KVS holds, a reload carries the gate over.
"""

from .annotations import Annotations
from .config import Config
from .counters import Counters
from .depend import DependPoint
from .epilog import EpilogPoint
from .holdlog import HoldLog
from .holds import EPILOG, Point
from .jobs import JobTable
from .lifecycle import Lifecycle
from .listeners import Listeners
from .lost import Losses
from .prolog import PrologPoint
from .recovery import Recovery
from .reload import Reload
from .requests import Requests
from .timeouts import Timeouts
from .watchers import Watchers


class Gate:
    """Holds of all jobs, driven by job-manager callbacks and requests.

    The facade the plugin (:mod:`flux_epilog_gate.plugin`), the loader,
    the shutdown and the tests use: it makes the gate's objects, hands
    each the others it calls, and passes each entry point on to the one
    that owns it.
    """

    def __init__(self, port, config=None):
        self.port = port
        self.config = config = config or Config()
        self.stats = Counters()
        self.jobs = jobs = JobTable(port, config.gone_limit)
        self.holdlog = holdlog = HoldLog(port, jobs)
        self.timeouts = timeouts = Timeouts(port)
        self.watching = watchers = Watchers(port, config, jobs)
        self.annotations = annotations = Annotations(port, config)
        self.losses = Losses(port, jobs, holdlog, self.stats)
        #: In-process users of the gate (the dws plugin): each is told
        #: ``activated(hold)``, and of a held job ``exception(id,
        #: context)`` (a job exception) and ``inactive(id)``.
        self.listeners = Listeners(port)
        self.lifecycle = lifecycle = Lifecycle(
            port,
            jobs,
            holdlog,
            timeouts,
            watchers,
            annotations,
            self.stats,
            self.losses,
            self.listeners,
        )
        self.epilog = EpilogPoint(port, jobs, lifecycle, holdlog, annotations)
        self.prolog = PrologPoint(port, jobs, lifecycle, holdlog, watchers)
        self.depend = DependPoint(port, jobs, lifecycle, holdlog, watchers)
        #: The hold points by name.
        self.points = {
            point.name: point for point in (self.epilog, self.prolog, self.depend)
        }
        # The points make their holds active through the lifecycle, which
        # ends them through their point.
        lifecycle.points = self.points
        self.requests = Requests(
            port, config, jobs, holdlog, lifecycle, self.points, annotations, self.stats
        )
        self.recovery = Recovery(
            port,
            jobs,
            lifecycle,
            watchers,
            self.losses,
            self.epilog,
            self.prolog,
            self.depend,
        )
        self.reload = Reload(
            port,
            jobs,
            holdlog,
            timeouts,
            lifecycle,
            self.epilog,
            self.prolog,
            self.depend,
        )
        self._shutdown = None

    # What the plugin reads

    @property
    def gone(self):
        """Holds that are gone, and why (a GoneLog)."""
        return self.jobs.gone

    @property
    def replayed_progress(self):
        """Progress events read from the eventlogs of recovered jobs, by id."""
        return self.jobs.replayed_progress

    @property
    def watchers(self):
        """The watch streams (a list of Watcher)."""
        return self.watching.streams

    @watchers.setter
    def watchers(self, streams):
        self.watching.streams = streams

    @property
    def refused(self):
        """Clients a bound refused: watch streams ended for falling
        behind (watch-backlog), requests refused at max-pending."""
        return {
            "behind": self.watching.ended_behind,
            "busy": self.requests.refused_busy,
        }

    @property
    def shutdown(self):
        """What the instance's shutdown does
        (:class:`flux_epilog_gate.gate.shutdown.Shutdown`), once it is
        known; the objects it hooks into are told."""
        return self._shutdown

    @shutdown.setter
    def shutdown(self, shutdown):
        self._shutdown = shutdown
        self.shutdown_changed()

    def shutdown_changed(self):
        """Tell the objects the shutdown hooks into of it once it is under
        way (:attr:`~flux_epilog_gate.gate.shutdown.Shutdown.underway`):
        its hooks do nothing before, and the paths of every held job
        need not call them."""
        shutdown = self._shutdown
        hooked = shutdown if shutdown is not None and shutdown.underway else None
        self.requests.shutdown = hooked
        self.lifecycle.shutdown = hooked
        self.epilog.shutdown = hooked

    def holds(self):
        """Every hold of every job, or None while some job's holds are
        still being recovered."""
        return self.jobs.holds()

    def end_when_aborted(self, description):
        """Prolog holds ``description`` end with status 1 when their job
        enters CLEANUP before it started, rather than wait for a release
        (a plugin of the gate whose holds these are, such as dws's
        ``dws-setup``): whichever plugin drives the gate then, also one
        that knows nothing of them.  Kept with the gate across reloads."""
        self.prolog.ends_aborted.add(description)

    def tell(self, method, *args):
        """Call ``method(*args)`` of every listener (see :class:`Listeners`)."""
        self.listeners.tell(method, *args)

    def posted(self, jobid, name):
        """True if event ``name`` is in the job's eventlog, as far as the
        gate knows (it holds the job, or read its eventlog)."""
        job = self.jobs.get(jobid)
        if job is None:
            return self.port.posted(jobid, name)
        return self.jobs.posted(job, name)

    # Requests

    def hold(
        self,
        jobid,
        description,
        timeout=None,
        point=Point.EPILOG,
        done=None,
        default_timeout=True,
    ):
        """Register a hold; return ``(hold, created)`` (see
        :meth:`Requests.hold <flux_epilog_gate.gate.requests.Requests.hold>`)."""
        return self.requests.hold(
            jobid, description, timeout, point, done, default_timeout
        )

    def release(self, jobid, description, status=0, done=None, raised=False):
        """Release a hold; return ``(released, reason)`` (see
        :meth:`Requests.release <flux_epilog_gate.gate.requests.Requests.release>`)."""
        return self.requests.release(jobid, description, status, done, raised)

    def list(self, jobid=None, userid=None):
        """List entries of all holds, or of one job's (see
        :meth:`Requests.list <flux_epilog_gate.gate.requests.Requests.list>`)."""
        return self.requests.list(jobid, userid)

    def list_json(self, jobid=None, userid=None, columns=False):
        """The answer to ``list`` as JSON text, by column with ``columns``
        (see :meth:`Requests.list_json
        <flux_epilog_gate.gate.requests.Requests.list_json>`)."""
        return self.requests.list_json(jobid, userid, columns)

    def snapshot(self, done):
        """Replace the hold log with a snapshot of the current holds now
        (its segments too); ``done(size, error)`` once it has: the bytes
        of the log then, or an OSError (see
        :meth:`HoldLog.compact <flux_epilog_gate.gate.holdlog.HoldLog.compact>`)."""
        log = self.holdlog
        log.compact(lambda error: done(log.size, error))

    def apply_rules(self, jobid, attributes):
        """Register the holds that configured rules give a new job."""
        self.requests.apply_rules(jobid, attributes)

    def watch(self, sink, descriptions=None, userid=None, points=None):
        """Add a watcher; it is first sent every hold already active."""
        self.watching.watch(sink, descriptions, userid, points)

    def unwatch(self, match):
        """Drop watchers whose sink satisfies ``match(sink)``; return count."""
        return self.watching.unwatch(match)

    def acknowledge(self, match, count):
        """A watcher read ``count`` activations (see
        :meth:`flux_epilog_gate.gate.watchers.Watchers.acknowledge`)."""
        self.watching.acknowledge(match, count)

    # Job-manager callbacks

    def on_run(self, jobid):
        """The job entered RUN (only for jobs with prolog holds)."""
        job = self.jobs.get(jobid)
        if job:
            self.prolog.on_run(job)

    def on_cleanup(self, jobid):
        """The job entered CLEANUP: the prolog and dependency points drop
        or abort their holds, then the epilog point looks for its point."""
        job = self.jobs.get(jobid)
        if job:
            # The prolog and dependency points act on their own holds only:
            # a job with epilog holds alone (most) skips them.
            for hold in job.holds.values():
                if hold.point != EPILOG:
                    self.prolog.on_cleanup(job)
                    self.depend.on_cleanup(job)
                    break
            self.epilog.on_cleanup(job)

    def on_event(self, jobid, name, state):
        """An event was posted to a tracked job."""
        job = self.jobs.get(jobid)
        if job:
            self.epilog.on_event(job, name, state)

    def on_inactive(self, jobid):
        """The job is inactive: whatever it still holds is gone."""
        self.lifecycle.on_inactive(jobid)

    # The shutdown's

    def reach_point(self, jobid):
        """Take the job as at its epilog point now (at shutdown)."""
        job = self.jobs.get(jobid)
        if job is not None:
            self.epilog.reach(job)

    def end(self, hold, status, reason, note):
        """Finish an active hold on the gate's own account (at shutdown)."""
        self.lifecycle.end(hold, status, reason, note)

    def expire(self, hold):
        """A hold's timeout expired."""
        self.lifecycle.expire(hold)

    # Recovery (the loader's)

    def begin_recovery(self, jobid, userid, keep=True):
        """A job whose holds will be known once its eventlog is read
        (``keep``: see :meth:`Recovery.begin`)."""
        self.holdlog.recovering()
        self.recovery.begin(jobid, userid, keep)

    def end_recovery(self, jobid, events):
        """Rebuild a job's holds from its eventlog ``events``."""
        self.recovery.end(jobid, events)

    def abandon_recovery(self, jobid):
        """Recovering a job failed: carry on with what is known of it."""
        self.recovery.abandon(jobid)

    # Reload

    def suspend(self):
        """The plugin is going away (see :meth:`Reload.suspend
        <flux_epilog_gate.gate.reload.Reload.suspend>`)."""
        self.reload.suspend()

    def retrack(self, jobid, state):
        """job.new for a job the gate already knows, after a reload;
        True if its eventlog must be read (again)."""
        return self.reload.retrack(jobid, state)

    def resume(self, seen):
        """After a reload: jobs not ``seen`` went inactive meanwhile."""
        self.reload.resume(seen)

    def attach(self, port):
        """Drive another port: the plugin was loaded again."""
        self.port = port
        for part in (
            self.jobs,
            self.timeouts,
            self.watching,
            self.annotations,
            self.losses,
            self.listeners,
            self.lifecycle,
            self.epilog,
            self.prolog,
            self.depend,
            self.requests,
            self.recovery,
            self.reload,
        ):
            part.port = port
        self.holdlog.resume(port)

    def reconfigure(self, config):
        """Apply a new configuration to holds registered from now on."""
        self.config = config
        self.requests.config = config
        self.watching.config = config
        self.annotations.config = config
        self.jobs.gone.limit = config.gone_limit
        self.jobs.gone.trim()
        self.holdlog.chunk = config.snapshot_chunk
