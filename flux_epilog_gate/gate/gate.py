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
from .context import Context
from .counters import Counters
from .depend import DependPoint
from .epilog import EpilogPoint
from .holdlog import HoldLog
from .holds import EPILOG
from .jobs import JobTable
from .lifecycle import Lifecycle
from .listeners import Listeners
from .lost import Losses
from .lostrecord import LostRecord
from .prolog import PrologPoint
from .recovery import Recovery
from .reload import Reload
from .requests import Requests
from .shutdown import Shutdown
from .timeouts import Timeouts
from .watchers import Watchers


class Gate:
    """Holds of all jobs, driven by job-manager callbacks and requests.

    The facade the plugins (:mod:`flux_epilog_gate.plugin`,
    :mod:`flux_epilog_gate.dws`), the loader, the shutdown and the tests
    use: it makes the gate's objects once, each given at construction the
    :class:`~.context.Context` they share and the others it calls, and
    passes each entry point on to the one that owns it.  An entry point
    that is one object's method is that method, bound here (no frame of
    the facade's on the way: the hold and release of every request go
    through it).
    """

    def __init__(self, port, config=None):
        #: What every part reads, replaced here alone (attach, reconfigure,
        #: a shutdown under way, the plugin's hooks).
        self.context = context = Context(port, config or Config())
        self.stats = Counters()
        self.jobs = jobs = JobTable(context)
        self.holdlog = holdlog = HoldLog(context, jobs)
        self.timeouts = timeouts = Timeouts(context)
        #: Lost holds not yet delivered to a service, durable.
        self.lost_record = lost_record = LostRecord(context)
        self.watchers = watchers = Watchers(context, jobs, lost_record)
        self.annotations = annotations = Annotations(context)
        #: In-process users of the gate (the dws plugin): each is told
        #: ``activated(hold)``, ``lost(hold)``, and of a held job
        #: ``exception(id, context)`` (a job exception) and ``inactive(id)``.
        self.listeners = listeners = Listeners(context)
        self.losses = losses = Losses(
            context, jobs, holdlog, self.stats, lost_record, watchers, listeners
        )
        #: The hold points by name, filled below: the points make their
        #: holds active through the lifecycle, which ends them through
        #: their point.
        self.points = points = {}
        self.lifecycle = lifecycle = Lifecycle(
            context,
            jobs,
            holdlog,
            timeouts,
            watchers,
            annotations,
            self.stats,
            losses,
            listeners,
            points,
        )
        self.epilog = epilog = EpilogPoint(
            context, jobs, lifecycle, holdlog, annotations
        )
        self.prolog = prolog = PrologPoint(context, jobs, lifecycle, holdlog, watchers)
        self.depend = depend = DependPoint(context, jobs, lifecycle, holdlog, watchers)
        points.update((point.name, point) for point in (epilog, prolog, depend))
        self.requests = requests = Requests(
            context, jobs, holdlog, lifecycle, points, annotations, self.stats
        )
        self.recovery = recovery = Recovery(
            context, jobs, holdlog, lifecycle, watchers, losses, epilog, prolog, depend
        )
        self.reload = reload = Reload(
            context, jobs, holdlog, timeouts, lifecycle, epilog, prolog, depend
        )
        self._shutdown = None
        self._bind(requests, watchers, lifecycle, recovery, reload, listeners, jobs)
        self._bind_parts(holdlog, lost_record)

    def _bind(self, requests, watchers, lifecycle, recovery, reload, listeners, jobs):
        """The entry points that are one object's method, as they are."""
        #: Register a hold; return ``(hold, created)`` (Requests.hold).
        self.hold = requests.hold
        #: Release a hold; return ``(released, reason)`` (Requests.release).
        self.release = requests.release
        #: List entries of all holds, or of one job's (Requests.list).
        self.list = requests.list
        #: The answer to ``list`` as JSON text (Requests.list_json).
        self.list_json = requests.list_json
        #: Register the holds that configured rules give a new job.
        self.apply_rules = requests.apply_rules
        #: Add a watcher; it is first sent every hold already active (with
        #: ``lost``, first every lost hold not yet delivered, then each as
        #: it is lost).
        self.watch = watchers.watch
        #: Drop watchers whose sink satisfies ``match(sink)``; return count.
        self.unwatch = watchers.unwatch
        #: A watcher read ``count`` activations (Watchers.acknowledge).
        self.acknowledge = watchers.acknowledge
        #: The job is inactive: whatever it still holds is gone.
        self.on_inactive = lifecycle.on_inactive
        #: Finish an active hold on the gate's own account (at shutdown).
        self.end = lifecycle.end
        #: A hold's timeout expired.
        self.expire = lifecycle.expire
        #: Rebuild a job's holds from its eventlog ``events``.
        self.end_recovery = recovery.end
        #: Recovering a job failed: carry on with what is known of it.
        self.abandon_recovery = recovery.abandon
        #: job.new for a job the gate already knows, after a reload; True
        #: if its eventlog must be read (again).
        self.retrack = reload.retrack
        #: After a reload: jobs not ``seen`` went inactive meanwhile.
        self.resume = reload.resume
        #: Call ``method(*args)`` of every listener (Listeners.tell).
        self.tell = listeners.tell
        #: ``listener`` is told from now on (see :class:`Listeners`).
        self.add_listener = listeners.append
        #: True if some listener wants the events of job ``jobid`` now.
        self.want_events = listeners.want_events
        #: End every watch stream: ``end(sink)`` for each.
        self.end_watches = watchers.end_all
        #: Every hold of every job, or None while some job's holds are
        #: still being recovered.
        self.holds = jobs.holds

    def _bind_parts(self, holdlog, lost_record):
        """The entry points of the hold log and the record of lost holds
        that are one of their methods."""
        #: A context in which the holds and releases made are recorded in
        #: one batch of the hold log (HoldLog.together).
        self.together = holdlog.together
        #: The lost holds no service has taken yet (see
        #: :mod:`~flux_epilog_gate.gate.lostrecord`), oldest first.
        self.lost_holds = lost_record.entries

    # What the plugins read

    @property
    def config(self):
        """The configuration in force."""
        return self.context.config

    @property
    def log_refused(self):
        """Why the hold log was refused (a newer format), or None."""
        return self.holdlog.refused

    @property
    def replayed_progress(self):
        """Progress events read from the eventlogs of recovered jobs, by id."""
        return self.jobs.replayed_progress

    def job_ids(self):
        """The ids of the jobs the gate holds (or recovers)."""
        return list(self.jobs)

    def tracked(self):
        """The ids of every job the gate tracks: those it holds, and those
        whose progress it replayed."""
        return list(self.jobs) + list(self.jobs.replayed_progress)

    def job_holds(self, jobid):
        """The job's holds by description ({} if it has none)."""
        job = self.jobs.get(jobid)
        return job.holds if job is not None else {}

    def recovering(self, jobid):
        """True while the job's holds are being read back."""
        job = self.jobs.get(jobid)
        return job is not None and job.recovering

    def jobs_holding(self, description, state):
        """The ids of the jobs whose hold ``description`` is in ``state``,
        in order."""
        return sorted(
            jobid
            for jobid, job in self.jobs.items()
            if description in job.holds and job.holds[description].state == state
        )

    def gone(self, jobid, description):
        """Why the job's hold ``description`` is gone, if the gate
        remembers it (see GoneLog), else None."""
        return self.jobs.gone.get(jobid, description)

    def counters(self):
        """What ``flux jobtap query`` reports of the gate, by name."""
        holdlog = self.holdlog
        return dict(
            self.stats,
            behind=self.watchers.ended_behind,
            busy=self.requests.refused_busy,
            holds=sum(len(job.holds) for job in self.jobs.values()),
            jobs=len(self.jobs),
            watchers=len(self.watchers.streams),
            pending=holdlog.waiting(),
            gone=len(self.jobs.gone),
            log_commits=holdlog.commits,
            log_segment=holdlog.segment,
            lost_undelivered=len(self.lost_record),
        )

    def end_when_aborted(self, description):
        """Prolog holds ``description`` end with status 1 when their job
        enters CLEANUP before it started, rather than wait for a release
        (a plugin of the gate whose holds these are, such as dws's
        ``dws-setup``): whichever plugin drives the gate then, also one
        that knows nothing of them.  Kept with the gate across reloads."""
        self.prolog.ends_aborted.add(description)

    def take_lost(self, jobid, description):
        """A service took the lost hold ``description`` of the job: it
        is forgotten."""
        self.lost_record.delivered((jobid, description))

    def posted(self, jobid, name):
        """True if event ``name`` is in the job's eventlog, as far as the
        gate knows (it holds the job, or read its eventlog)."""
        job = self.jobs.get(jobid)
        if job is None:
            return self.context.port.posted(jobid, name)
        return self.jobs.posted(job, name)

    # What the plugins hook

    def remove_listener(self, listener):
        """``listener`` is told no more (nothing if it was not told)."""
        if listener in self.listeners:
            self.listeners.remove(listener)

    def on_listeners_changed(self, changed):
        """Call ``changed()`` when a listener comes or goes (None: stop)."""
        self.context.listeners_changed = changed

    def has_listeners(self):
        return bool(self.listeners)

    def watch_exceptions(self, jobid):
        """Have the exceptions of held job ``jobid`` sent to the gate from
        now on, for the listeners (see ``Port.watch_exceptions``): a
        listener asks for them only while it has something to do with
        them."""
        if jobid in self.jobs:
            self.context.port.watch_exceptions(jobid)

    def on_snapshot(self, snapshotted):
        """Call ``snapshotted()`` after each snapshot of the hold log
        (None: stop)."""
        self.context.on_snapshot = snapshotted

    # Requests

    def snapshot(self, done):
        """Replace the hold log with a snapshot of the current holds now
        (its segments too); ``done(size, error)`` once it has: the bytes
        of the log then, or an OSError (see
        :meth:`HoldLog.compact <flux_epilog_gate.gate.holdlog.HoldLog.compact>`)."""
        log = self.holdlog
        log.compact(lambda error: done(log.size, error))

    def stamp(self):
        """Now, as the hold log writes a time: ``(t, text)`` (see
        :func:`~flux_epilog_gate.gate.holds.stamp`), for holds placed
        together (:meth:`hold`'s ``stamp``)."""
        return self.context.port.stamp()

    # Job-manager callbacks

    def on_run(self, jobid):
        """The job entered RUN (only for jobs with prolog holds)."""
        job = self.jobs.get(jobid)
        if job:
            self.prolog.on_run(job)

    def on_cleanup(self, jobid, call=None):
        """The job entered CLEANUP: the prolog and dependency points drop
        or abort their holds, then the epilog point looks for its point.
        ``call``: what the entry came with, for the port to read the
        job's fatal exception from (see ``cleanup_exception``)."""
        job = self.jobs.get(jobid)
        if job:
            # The prolog and dependency points act on their own holds only:
            # a job with epilog holds alone (most) skips them.
            for hold in job.holds.values():
                if hold.point != EPILOG:
                    self.prolog.on_cleanup(job, call)
                    self.depend.on_cleanup(job)
                    break
            self.epilog.on_cleanup(job)

    def on_event(self, jobid, name, state):
        """An event was posted to a tracked job."""
        job = self.jobs.get(jobid)
        if job:
            self.epilog.on_event(job, name, state)

    # The shutdown's

    @property
    def shutdown(self):
        """What the instance's shutdown does
        (:class:`flux_epilog_gate.gate.shutdown.Shutdown`), once it is
        watched (:meth:`watch_shutdown`), else None."""
        return self._shutdown

    def watch_shutdown(self, port):
        """The instance's shutdown, followed through ``port`` from now on
        (the broker's states are the caller's to pass it): a shutdown
        already under way carries on where it is."""
        self._shutdown = Shutdown(self, port, self._shutdown)
        self.shutdown_changed()
        return self._shutdown

    def shutdown_changed(self):
        """The shutdown may be under way
        (:attr:`~flux_epilog_gate.gate.shutdown.Shutdown.underway`): the
        parts it hooks into see it from then on, in the context."""
        shutdown = self._shutdown
        underway = shutdown is not None and shutdown.underway
        self.context.shutdown = shutdown if underway else None

    def reach_point(self, jobid):
        """Take the job as at its epilog point now (at shutdown)."""
        job = self.jobs.get(jobid)
        if job is not None:
            self.epilog.reach(job)

    # Recovery (the loader's)

    def begin_recovery(self, jobid, userid, keep=True):
        """A job whose holds will be known once its eventlog is read
        (``keep``: see :meth:`Recovery.begin`)."""
        self.holdlog.recovering()
        self.recovery.begin(jobid, userid, keep)

    # Reload and reconfiguration

    def suspend(self):
        """The plugin is going away (Reload.suspend); the record of lost
        holds goes as it is."""
        self.reload.suspend()
        self.lost_record.suspend()

    def attach(self, port):
        """Drive another port: the plugin was loaded again."""
        self.context.port = port
        self.holdlog.resume()
        self.lost_record.resume()

    def reconfigure(self, config):
        """Apply a new configuration to holds registered from now on
        (and to the hold log's next snapshot, which reads it too)."""
        self.context.config = config
        self.jobs.gone.resize(config.gone_limit)
