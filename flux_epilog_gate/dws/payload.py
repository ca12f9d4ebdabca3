"""The payloads of the DWS service's requests to dws.so, checked.

Each request of the service (``resource-update``, ``prolog-remove``,
``epilog-remove``) names its job in ``id`` and carries keys of its own.
One that is not of that shape is refused (EPROTO) with a log line, and,
as the C plugin does, the job it names gets an exception: it waits on a
request that will not come right.  The values' own shapes are the
phases' to check (see :mod:`.validate`).
"""

import errno
import syslog

from ..jobtap.plugin import RequestError
from .names import OUT_OF_SYNC


def missing_keys(payload, keys):
    """What is wrong with a request's payload, short of its values' shapes:
    not an object, no job id in ``id``, a key of ``keys`` missing, or an
    ``errmsg`` that is not a string; None if nothing."""
    if not isinstance(payload, dict):
        return "payload is not an object"
    jobid = payload.get("id")
    if not (type(jobid) is int and 0 <= jobid < 2**64):
        return "id: is not a job id"
    for key in keys:
        if key not in payload:
            return f"{key}: is missing"
    errmsg = payload.get("errmsg")
    if errmsg is not None and not isinstance(errmsg, str):
        return "errmsg: is not a string"
    return None


class Payloads:
    """The service's request payloads, checked; a malformed one raises
    its job's exception through ``jobs`` (:class:`.jobs.Jobs`)."""

    def __init__(self, jobs):
        self.jobs = jobs

    def payload_of(self, request, method, keys, raise_on_job=True):
        """The payload of ``request`` if it is an object with an integer
        ``id`` and ``keys``; else raise RequestError (and, with
        ``raise_on_job``, an exception on the job it names, if any)."""
        try:
            payload = request.payload
        except ValueError as exc:
            # Not JSON to flux-core either: no job can be read from it.
            self.malformed(None, method, f"payload is not JSON: {exc}")
        problem = missing_keys(payload, keys)
        if problem is None:
            return payload
        # The job it names, if it names one, waits on it.
        jobid = payload.get("id") if isinstance(payload, dict) else None
        if not (type(jobid) is int and 0 <= jobid < 2**64):
            jobid = None
        self.malformed(jobid if raise_on_job else None, method, problem)

    def malformed(self, jobid, method, problem=None):
        """Refuse a malformed request of ``method`` (EPROTO), naming
        ``problem`` if known; raise the exception the service's requests
        raise for it on the job ``jobid`` (unless None): the job waits on
        a request that will not come right."""
        errmsg = f"received malformed dws.{method} RPC"
        if problem is not None:
            errmsg = f"{errmsg}: {problem}"
        if jobid is not None:
            self.jobs.fail(jobid, "exception", errmsg)
        self.jobs.log(syslog.LOG_ERR, errmsg + OUT_OF_SYNC)
        raise RequestError(errno.EPROTO, errmsg)
