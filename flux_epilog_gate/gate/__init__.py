"""The gate: holds, the epilog point, releases, timeouts and watchers.

This package is plain Python.  Everything it does to the job-manager
goes through a *port* (:class:`~flux_epilog_gate.gate.port.Port`, the
calls it names and no more), handed to it at construction.

The gate is one :class:`Gate`, a facade over objects that each own one
concern and are handed, when the gate is made, the context they share
and the others they call (doc/design.md draws who calls whom):

=================  =========================================================
``gate``           :class:`Gate`: the facade the plugins and the load use
``port``           :class:`Port`: what the gate asks of the job-manager
``context``        :class:`Context`: the port, configuration and shutdown
                   every part reads, replaced in one place
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
``lost``           :class:`Losses`: holds that ended without becoming
                   active, whose job will never reach their point
``lostrecord``     :class:`LostRecord`: lost holds not yet delivered to a
                   service (watch ``lost``, the dws plugin), durable
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
