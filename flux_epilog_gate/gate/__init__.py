"""The gate: holds, the epilog point, releases, timeouts and watchers.

This module is plain Python.  Everything it does to the job-manager goes
through a *port*, an object with these methods (the real one is
:class:`flux_epilog_gate.plugin.port.GatePort`; the unit tests use a fake):

``now()``
    current time, seconds since the epoch
``job_info(id)``
    ``(state, userid)`` of a job; raises OSError(ENOENT) for unknown jobs
``posted(id, name)``
    True if event ``name`` was posted to the job since the job-manager
    started
``epilog_start(id, description, timeout)``
    post ``epilog-start``, marked as the gate's, with the hold's timeout
    (None: none) so that the eventlog alone tells an active hold
``epilog_finish(id, description, status)``
    post ``epilog-finish``
``raise_exception(id, note)``
    raise a non-fatal job exception
``annotate(id, text)``
    set the job's ``epilog_gate`` user annotation to ``text`` (None:
    remove it)
``prolog_start(id, description, timeout)`` / ``prolog_finish(id, description, status)``
    post ``prolog-start`` / ``prolog-finish``, marked as the gate's
``raise_fatal(id, note)``
    raise a fatal job exception (a failed prolog hold)
``depend_start(id, description, timeout)`` / ``depend_finish(id, description)``
    post ``dependency-add`` / ``dependency-remove``, marked as the gate's
``raise_dependency(id, note)``
    raise a fatal job exception (a failed dependency hold)
``want_run(id)``
    also send the tracked job's entry to RUN to the gate
``track(id, events=True)`` / ``untrack(id)``
    start or stop sending the job's callbacks to the gate (with
    ``events``, also its ``finish`` and ``free`` events)
``timer(delay, callback)``
    call ``callback()`` after ``delay`` seconds; returns an object with
    ``stop()``
``kvs_commit(key, text, append, callback, sync)``
    write (or with ``append``, append) ``text`` to KVS key ``key``
    without blocking (with ``sync``, checkpointed before it answers);
    later call ``callback(error)``, with None on success
``kvs_get(key)``
    the value of KVS key ``key`` as bytes (``b""`` if empty), waited for;
    None if there is no such key; raises OSError on other failures.  For
    the load only (:mod:`~flux_epilog_gate.gate.loader`)
``read_eventlog(id, callback)``
    read the job's eventlog without blocking; later call
    ``callback(events, error)`` exactly once: a list of ``(timestamp,
    name, context)``, or None and an OSError
``send_activation(sink, activation)``
    send one response (a dict ``{id, description, userid, ran, point[,
    aborted]}``) to a watcher; returns False if the watcher is gone
``end_watch(sink, errnum, text)``
    end a watcher's stream with an error
``read_eventlog(id, callback)``
    read a job's eventlog without blocking; later call
    ``callback(events, error)`` with a list of ``(timestamp, name,
    context)``, or None and an OSError
``log(level, text)``
    log a line (syslog levels)

What the gate does at shutdown (:mod:`flux_epilog_gate.gate.shutdown`) needs
two more, documented there.

A load is a :class:`~flux_epilog_gate.gate.loader.Load` on the port:
``Load(port, carried)`` reads the hold log (never fails), ``begin(config)``
returns the gate (a new one, or ``carried``, the gate of the plugin
instance removed from the same job-manager), ``on_new(id, state,
userid)`` is each job.new of the load, ``loaded()`` says they are all
seen, and ``when_ready(run, refuse)`` runs a request once every job is
recovered (``close()`` at unload refuses those still waiting).  So a
restart, a reload or a crash can be driven through the port alone: a
crash keeps only what the KVS holds, a reload carries the gate over.

The gate is one :class:`Gate`, each of its concerns in a module of this
package:

=================  =========================================================
``requests``       hold, release, list; the holds of configured rules
``epilog``         the job-manager callbacks and the epilog point
``finish``         how a hold ends (release, timeout, withdrawal, shutdown)
``loader``         a load: the hold log read, jobs recovered, requests
                   kept waiting until the gate's view is complete
``recovery``       rebuilding holds from the hold log and the eventlog
``reload``         going from one plugin instance to the next
``timeouts``       the timers of active holds
``watchers``       clients streaming activations
``jobs``           the record of each held job; holds that are gone
``counters``       what ``stats`` reports
``lost``           pending holds whose job went inactive without them
``prolog``         prolog holds: holds that keep a job's start back
``depend``         dependency holds: holds that keep a job in DEPEND
``states``         job states (flux.constants)
=================  =========================================================
"""

import syslog

from .config import Config
from .counters import Counters
from .depend import Dependencies
from .epilog import EpilogPoint
from .finish import Finishing
from .holdlog import HoldLog
from .jobs import GoneLog, Job, Tracking
from .lost import Losses
from .prolog import Prologs
from .recovery import EPILOG_EVENTS, PROGRESS_EVENTS, Recovery
from .reload import Reload
from .requests import Requests
from .states import (
    CLEANUP,
    DEPEND,
    INACTIVE,
    NEW,
    PRIORITY,
    RUN,
    SCHED,
    JobState,
)
from .timeouts import Timeouts
from .watchers import Watcher, Watching

__all__ = [
    "Gate",
    "Job",
    "GoneLog",
    "Watcher",
    "JobState",
    "NEW",
    "DEPEND",
    "PRIORITY",
    "SCHED",
    "RUN",
    "CLEANUP",
    "INACTIVE",
    "EPILOG_EVENTS",
    "PROGRESS_EVENTS",
]


class Gate(
    Requests, EpilogPoint, Finishing, Recovery, Reload, Timeouts, Watching, Tracking
):
    """Holds of all jobs, driven by job-manager callbacks and requests."""

    def __init__(self, port, config=None):
        self.port = port
        self.config = config or Config()
        #: The gate's record of each job with holds, by id.
        self.jobs = {}
        self.gone = GoneLog(self.config.gone_limit)
        #: Progress events (PROGRESS_EVENTS) read from the eventlogs of
        #: recovered jobs, by id: the port only knows of events posted
        #: since this job-manager started.
        self.replayed_progress = {}
        self.watchers = []
        self.holdlog = HoldLog(port, self.holds)
        self.prolog = Prologs(self)
        self.depend = Dependencies(self)
        # What the instance's shutdown does (flux_epilog_gate.gate.shutdown).
        self.shutdown = None
        self.stats = Counters()
        #: Clients a bound refused: watch streams ended for falling
        #: behind (watch-backlog), requests refused at max-pending.
        self.refused = {"behind": 0, "busy": 0}
        self.losses = Losses(self)
        #: In-process users of the gate (the dws plugin): each is told
        #: ``activated(hold)``, and of a held job ``exception(id,
        #: context)`` (a job exception) and ``inactive(id)``.
        self.listeners = []

    def attach(self, port):
        """Drive another port: the plugin was loaded again."""
        self.port = port
        self.holdlog.resume(port)

    def tell(self, method, *args):
        """Call ``method(*args)`` of every listener; one that raises is
        logged, and the others are told all the same."""
        for listener in list(self.listeners):
            try:
                getattr(listener, method)(*args)
            except Exception as exc:  # noqa: BLE001 - a listener's, not ours
                self.port.log(
                    syslog.LOG_ERR,
                    f"{method}: listener {type(listener).__name__}: "
                    f"{type(exc).__name__}: {exc}",
                )

    def posted(self, jobid, name):
        """True if event ``name`` is in the job's eventlog, as far as the
        gate knows (it holds the job, or read its eventlog)."""
        job = self.jobs.get(jobid)
        if job is None:
            return self.port.posted(jobid, name)
        return self._posted(job, name)

    def holds(self):
        """Every hold of every job, or None while some job's holds are
        still being recovered."""
        if any(job.recovering for job in self.jobs.values()):
            return None
        return [hold for job in self.jobs.values() for hold in job.holds.values()]

    def reconfigure(self, config):
        """Apply a new configuration to holds registered from now on."""
        self.config = config
        self.gone.limit = config.gone_limit
        self.gone.trim()
