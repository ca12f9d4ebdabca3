"""The prologs and epilogs another plugin started, finished once each.

A rabbit job that flux-coral2's ``dws-jobtap.so`` held before the swap
may have its ``dws-setup`` prolog or ``dws-epilog`` epilog open under
that plugin's name: the gate does not hold it, and only the job's
eventlog, read from the KVS, tells whether it is still open.  That read
shows a finish only once the job-manager has committed it, so two
requests whose reads cross (the same ``prolog-remove`` sent twice, or
sent again at once) would both find the action open, and both finish
it.  The job-manager counts a job's open prolog and epilog actions, not
their names: the second finish would end another action in that count,
and a job could start while a prolog hold still keeps it back.  So the
first request for an action decides; the requests for it that arrive
meanwhile get its answer, and one that arrives once it is finished is
answered with success and does nothing, as for a hold the gate ended.
"""

import errno

from ..jobtap.plugin import RequestError
from .eventlog import held_actions


class ForeignActions:
    """The foreign actions of jobs (``(jobid, description)``) being
    finished (the requests waiting on the read of the job's eventlog)
    and finished by this plugin instance.  Through ``jobtap``'s KVS;
    ``refusal(jobid, description)`` is the error text of an action that
    is not open.  The finished ones are at most two per job another
    plugin held at the swap: they are kept for the plugin's life."""

    def __init__(self, jobtap, refusal):
        self.jobtap = jobtap
        self.refusal = refusal
        self._reading = {}
        self._finished = set()

    def finish(self, request, jobid, description, finish, eventlog_key):
        """Finish the action with ``finish()`` if the job's eventlog (KVS
        ``eventlog_key``) shows it open, then answer ``request`` (and every
        request for it that came meanwhile); refuse it (EINVAL) if it is
        not open.  ``finish`` raises RequestError or OSError if it
        failed."""
        key = (jobid, description)
        if key in self._finished:
            request.respond(None)
            return
        waiting = self._reading.get(key)
        if waiting is not None:
            waiting.append(request)
            return
        self._reading[key] = [request]
        self.jobtap.kvs.read(
            eventlog_key, lambda text, error: self._read(key, finish, text, error)
        )

    def close(self, errnum, text):
        """The plugin instance goes away: the read of each action being
        finished will not call back, so answer the requests waiting on
        it with ``errnum`` and ``text`` (nothing was finished)."""
        reading, self._reading = self._reading, {}
        for requests in reading.values():
            for request in requests:
                request.error(errnum, text)

    def _read(self, key, finish, text, error):
        requests = self._reading.pop(key, [])
        failure = self._finish_if_open(key, finish, text, error)
        for request in requests:
            if failure is None:
                request.respond(None)
            else:
                request.error(*failure)

    def _finish_if_open(self, key, finish, text, error):
        """None once the action is finished, else ``(errnum, text)``."""
        jobid, description = key
        if error is not None or description not in held_actions(text):
            return errno.EINVAL, self.refusal(jobid, description)
        try:
            finish()
        except RequestError as exc:
            return exc.errnum, exc.message
        except OSError as exc:
            return exc.errno, f"could not finish {description}"
        self._finished.add(key)
        return None
