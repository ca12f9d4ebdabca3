"""What the rabbit workflow reads of a job and does to it.

Each phase of the workflow (:mod:`.create`, :mod:`.prolog`,
:mod:`.epilog`, :mod:`.recovery`) asks the same few things of a job: its
holds in the gate, its state, whether it is a rabbit job, and raises
the same exceptions on it.  :class:`Jobs` is that, shared by them; it
owns no state but that of :mod:`.foreign`.
"""

import errno
import syslog

from flux.job import JobID

from ..gate.holds import ACTIVE
from .foreign import ForeignActions
from .names import FAILED, SETUP

#: Error text of a request that waited on a job's eventlog when the
#: plugin went away.
UNLOADED_READING = "dws was unloaded before the job's eventlog was read: send it again"


def f58(jobid):
    return JobID(jobid).f58


def not_started(jobid, description, why=None):
    """The error of a request to end a prolog or epilog that is not open."""
    action = "prolog" if description == SETUP else "epilog"
    text = f"{action} {description} of job {f58(jobid)} is not active"
    if why is not None:
        text += f": it has not started, {why}"
    return text


class Jobs:
    """A rabbit job's holds, state and exceptions, for the workflow:
    through the plugin's ``jobtap``, its ``gate`` and its ``service``
    (:class:`.service.Service`)."""

    def __init__(self, jobtap, gate, service):
        self.jobtap = jobtap
        self.gate = gate
        self.service = service
        #: The foreign prologs and epilogs finished, each once.
        self.foreign = ForeignActions(jobtap, not_started)
        #: The job's holds in the gate ({} if none): the gate's own call,
        #: which every request and callback of a rabbit job makes.
        self.holds = gate.job_holds

    def log(self, level, text):
        self.jobtap.log(level, text)

    def close(self):
        """The plugin instance goes away: answer the requests still
        waiting on a job's eventlog (see :mod:`.foreign`)."""
        self.foreign.close(errno.EAGAIN, UNLOADED_READING)

    def fail(self, jobid, type, errstr):
        """Raise a fatal exception of ``type`` on the job for a failed
        interaction with the DWS service; return it (see
        :meth:`raise_exception`)."""
        return self.raise_exception(
            jobid, type, FAILED + (errstr or "<no error string provided>")
        )

    def raise_exception(self, jobid, type, note):
        """Raise a fatal exception on the job; return it as the gate
        records it with the end of a hold, ``{type, severity, note}``."""
        try:
            self.jobtap.jobs.raise_exception(jobid, type, 0, note)
        except OSError as exc:
            self.log(syslog.LOG_ERR, f"raising {type} on {f58(jobid)}: {exc}")
        return {"type": type, "severity": 0, "note": note}

    def active(self, jobid, description):
        hold = self.holds(jobid).get(description)
        return hold is not None and hold.state == ACTIVE

    def release(self, jobid, description, status, raised=False):
        """Release the job's hold; True if it held.  ``raised``: the job's
        fatal exception is this plugin's or the one it ended the hold for
        (the gate raises none), ``{type, severity, note}`` if known: the
        gate records it with the end, and raises it again should a crash
        lose it."""
        released, _ = self.gate.release(jobid, description, status, raised=raised)
        return released

    def state_of(self, jobid):
        """The job's state, None if it is not active."""
        try:
            return self.jobtap.jobs.info(jobid)[0]
        except OSError:
            return None

    def is_rabbit(self, jobid):
        """True if the job asks for rabbit storage (a hold of this name
        on another job is someone else's): seen in DEPEND by this
        instance, or else looked up (in C: its jobspec is not decoded)."""
        return bool(self.service.is_rabbit(jobid))

    def finish_foreign(self, request, jobid, description, finish):
        """Finish the job's prolog or epilog ``description`` that the gate
        does not hold, if its eventlog shows it open (one another plugin,
        such as dws-jobtap.so, started), with ``finish()``, and answer
        ``request``; refuse it if none is open (``finish`` is then not
        called).  Once per action, whatever requests cross (see
        :mod:`.foreign`).  ``finish`` raises RequestError or OSError if
        it failed."""
        self.foreign.finish(
            request, jobid, description, finish, f"{JobID(jobid).kvs}.eventlog"
        )
