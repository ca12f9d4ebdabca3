"""Job states as flux-core numbers them (``flux_job_state_t``).

Taken from :mod:`flux.constants`, which needs flux-core's library but no
broker: the gate logic stays importable (and unit-testable) anywhere
flux-core is installed.
"""

from enum import IntEnum

import flux.constants


class JobState(IntEnum):
    """A job's state, as the job-manager reports it."""

    NEW = flux.constants.FLUX_JOB_STATE_NEW
    DEPEND = flux.constants.FLUX_JOB_STATE_DEPEND
    PRIORITY = flux.constants.FLUX_JOB_STATE_PRIORITY
    SCHED = flux.constants.FLUX_JOB_STATE_SCHED
    RUN = flux.constants.FLUX_JOB_STATE_RUN
    CLEANUP = flux.constants.FLUX_JOB_STATE_CLEANUP
    INACTIVE = flux.constants.FLUX_JOB_STATE_INACTIVE


NEW, DEPEND, PRIORITY, SCHED, RUN, CLEANUP, INACTIVE = JobState
