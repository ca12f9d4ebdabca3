"""Job id formatting for messages."""

from flux.job import JobID


def f58(jobid):
    """Return ``jobid`` in F58 form, or as a number if it cannot be encoded."""
    try:
        return JobID(jobid).f58
    except (OSError, ValueError, TypeError):
        return str(jobid)
