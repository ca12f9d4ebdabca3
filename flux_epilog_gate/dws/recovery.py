"""What dws.so takes over at its load: active holds, jobs seen while
recovering, and lost holds.

The gate keeps a rabbit job's holds across reloads, restarts and
crashes, but the service's requests and the epilog timeouts are this
plugin's: once the gate's view is complete a new instance takes over
the timeouts of the active dws-epilog holds, and starts the phases that
became active while dws.so was removed from the same job-manager.  A
hold the gate lost (its job will never reach its point) gets its
workflow torn down, so the service strands nothing.
"""

import syslog

import flux.constants

from ..gate.holds import ACTIVE
from .create import POINTS
from .jobs import f58
from .names import EPILOG, SETUP

DEPEND = flux.constants.FLUX_JOB_STATE_DEPEND
CLEANUP = flux.constants.FLUX_JOB_STATE_CLEANUP


class Recovery:
    """Adoption of a rabbit job's workflow by a new instance of the
    plugin named ``name``, and its lost holds: through the plugin's
    ``jobtap``, its ``gate`` and ``host``
    (:class:`~flux_epilog_gate.plugin.host.Host`), ``jobs``
    (:class:`.jobs.Jobs`) and the phases ``create``
    (:class:`.create.Create`), ``prolog`` (:class:`.prolog.Prolog`) and
    ``epilog`` (:class:`.epilog.Epilog`).  Owns the jobs torn down."""

    def __init__(self, jobtap, gate, host, name, jobs, create, prolog, epilog):
        self.jobtap = jobtap
        self.gate = gate
        self.host = host
        self.name = name
        self.jobs = jobs
        self.create = create
        self.prolog = prolog
        self.epilog = epilog
        #: Jobs whose lost holds' workflow this instance tore down.
        self.torn = set()

    def adopt(self, listening_since):
        """The gate's view is complete: take over the epilog timeouts of
        the dws-epilog holds already active (a load, reload or restart).
        A hold that became active while dws.so was removed from this same
        job-manager is started now, as it would have been then (one that
        an earlier instance started is not asked of the service again).
        ``listening_since``: when this instance became a listener of the
        gate."""
        jobs = self.jobs
        since = self.host.departures.pop(self.name, None) if self.host else None
        # Lost while dws.so was not loaded (or before this load).
        for entry in self.gate.lost_holds():
            if POINTS.get(entry["description"]) == entry.get("point"):
                self.teardown_lost(entry["id"], entry["description"])
        for jobid in self.gate.jobs_holding(SETUP, ACTIVE):
            if jobs.state_of(jobid) == CLEANUP and jobs.is_rabbit(jobid):
                # Its fatal exception came while dws.so was not loaded.
                self.prolog.end_aborted_setup(jobid)
        for jobid in self.gate.jobs_holding(SETUP, ACTIVE):
            t_start = jobs.holds(jobid)[SETUP].t_start
            if unseen(since, t_start, listening_since) and jobs.is_rabbit(jobid):
                self.prolog.start_setup(jobid)
        for jobid in self.gate.jobs_holding(EPILOG, ACTIVE):
            t_start = jobs.holds(jobid)[EPILOG].t_start
            if unseen(since, t_start, listening_since) and jobs.is_rabbit(jobid):
                self.epilog.start_epilog(jobid, t_start)
            else:
                self.epilog.arm_timeout(jobid, t_start)

    def recovered(self, jobid):
        """A job in DEPEND whose holds the gate was reading back when
        its callback came: begin its workflow, unless it had one."""
        if self.jobs.state_of(jobid) == DEPEND:
            self.create.begin(jobid, None, inherited=True)

    def lost(self, hold):
        """One of the gate's holds was lost: its job will never reach its
        point (it was dropped at a restart, or went inactive while the
        gate was not loaded).  A rabbit job's workflow is torn down, as
        the C plugin ends one on an exception (``dws.teardown``), so the
        service strands nothing."""
        if POINTS.get(hold.description) == hold.point:
            self.teardown_lost(hold.id, hold.description)

    def teardown_lost(self, jobid, description):
        """``dws.teardown`` for the job of lost hold ``description``, once
        per job; the gate then forgets the hold (it is taken)."""
        if jobid not in self.torn:
            self.torn.add(jobid)
            self.jobtap.log(
                syslog.LOG_ERR,
                f"{f58(jobid)}: {description} was lost: tearing its workflow down",
            )
            # Answered, but nothing waits for the answer.
            self.jobtap.messages.rpc("dws.teardown", {"jobid": jobid})
        self.gate.take_lost(jobid, description)


def unseen(since, t_start, listening_since):
    """True if an activation at ``t_start`` came after dws.so left
    this job-manager (at ``since``, None if it never did) and before
    this instance listened (at ``listening_since``)."""
    return since is not None and since <= t_start < listening_since
