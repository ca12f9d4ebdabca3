"""The gate: holds, the epilog point, releases, timeouts and watchers.

This module is plain Python.  Everything it does to the job-manager goes
through a *port*, an object with these methods (the real one is
:class:`flux_epilog_gate.plugin.port.GatePort`; the unit tests use a fake):

``now()``
    current time, seconds since the epoch
``stamp()``
    ``holds.stamp(now())``: the time of a hold-log line and its text
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
``raise_job_exception(id, type, severity, note)``
    raise a job exception of any type (one a releaser raised, raised again
    by recovery if a crash lost it)
``depend_start(id, description, timeout)`` / ``depend_finish(id, description)``
    post ``dependency-add`` / ``dependency-remove``, marked as the gate's
``raise_dependency(id, note)``
    raise a fatal job exception (a failed dependency hold)
``want_run(id)``
    also send the tracked job's entry to RUN to the gate
``track(id, events=False)`` / ``untrack(id)``
    start or stop sending the job's callbacks to the gate (with
    ``events``, also its ``finish`` and ``free`` events, asked for only
    while the epilog point waits on them: see
    :mod:`~flux_epilog_gate.gate.epilog`); a job's events, once asked
    for, are sent until it is untracked
``timer(delay, callback)``
    call ``callback()`` after ``delay`` seconds; returns an object with
    ``stop()``
``kvs_commit(key, text, append, callback, sync)``
    write (or with ``append``, append) ``text`` to KVS key ``key``
    without blocking (with ``sync``, checkpointed before it answers);
    later call ``callback(error)``, with None on success
``kvs_commit_ops(ops, callback, sync)``
    commit ``ops``, a list of ``(op, key, value)`` (op ``put``,
    ``append``, ``put_treeobj`` or ``unlink``) in one transaction, applied
    in order, all or none; later call ``callback(error)`` (a snapshot of
    the hold log in parts)
``kvs_lookup_treeobj(key, callback)``
    look up KVS key ``key``'s tree object (JSON text) without blocking;
    later call ``callback(treeobj, error)``
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
``log(level, text)``
    log a line (syslog levels)

What the gate does at shutdown (:mod:`flux_epilog_gate.gate.shutdown`) needs
two more, documented there.

The gate is one :class:`Gate`, a facade over objects that each own one
concern and are handed, when the gate is made, the others they call
(doc/design.md draws who calls whom):

=================  =========================================================
``gate``           :class:`Gate`: the facade the plugins and the load use
``requests``       :class:`Requests`: hold, release, list; the holds of
                   configured rules
``points``         :class:`HoldPoint`: the protocol of the three points
``epilog``         :class:`EpilogPoint`: holds that keep a job's clean back
``prolog``         :class:`PrologPoint`: holds that keep a job's start back
``depend``         :class:`DependPoint`: holds that keep a job in DEPEND
``lifecycle``      :class:`Lifecycle`: a hold becomes active, then ends
                   (release, timeout, withdrawal, shutdown, job inactive)
``timeouts``       :class:`Timeouts`: the timers of active holds
``watchers``       :class:`Watchers`: clients streaming activations
``annotations``    :class:`Annotations`: each job's annotation
``jobs``           :class:`JobTable`: the record of each held job; holds
                   that are gone
``recovery``       :class:`Recovery`: rebuilding holds from the hold log
                   and the eventlog
``reload``         :class:`Reload`: going from one plugin instance to the
                   next
``lost``           :class:`Losses`: pending holds whose job went inactive
                   without them
``listeners``      :class:`Listeners`: in-process users of the gate (the
                   dws plugin)
``counters``       :class:`Counters`: what ``stats`` reports
``holdlog``        :class:`HoldLog`: the durable record of holds
``loader``         a load: the hold log read, jobs recovered, requests
                   kept waiting until the gate's view is complete
``shutdown``       what the instance's shutdown does to holds
``states``         job states (flux.constants)
=================  =========================================================
"""

from .epilog import EPILOG_EVENTS
from .gate import Gate
from .jobs import GoneLog, Job
from .recovery import PROGRESS_EVENTS
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
from .watchers import Watcher

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
