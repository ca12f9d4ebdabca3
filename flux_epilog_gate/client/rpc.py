"""Requests to the gate whose missing answer is an error of its own.

When the connection to the broker is lost (the broker stopped, then died)
before an answer came, libflux fails a waiting ``get()`` with whatever
``errno`` happened to be set (ENOENT, EINVAL...) or, if it was 0, flux's
bindings return as if the answer had no payload (None); a ``then()``
callback is never called at all.  ENOENT is also the gate's answer for an unknown
job, so a caller could drop work it still owes.  :class:`GateRPC` tells the
two apart: an answer fulfils the future, a lost connection leaves it
unfulfilled, and that becomes :class:`NoAnswerError`.
"""

import errno

from flux.rpc import RPC

#: The errno of :class:`NoAnswerError`: flux-core's own for "the broker
#: that was to answer went away" (a lost overlay peer), and never one the
#: gate answers with.
NO_ANSWER_ERRNO = errno.EHOSTUNREACH


class NoAnswerError(OSError):
    """No answer came from the gate: the connection to the broker was lost
    (the broker stopped or died), the request could not be sent, or the
    broker answered that the broker running the job-manager went away.

    Whether the request took effect is unknown: send it again once the
    instance is back (``hold`` and ``release`` are idempotent).  Its
    ``errno`` is always EHOSTUNREACH, never an errno the gate answers
    with, so an ``ENOENT`` ("unknown job") is only ever the gate's.
    """

    def __init__(self, what, cause=None):
        reason = "the connection to the broker was lost"
        if cause is not None and cause.errno == NO_ANSWER_ERRNO:
            reason = "the broker running the job-manager went away"
        super().__init__(
            NO_ANSWER_ERRNO,
            f"{what}: no answer from the epilog gate: {reason} "
            "(the request may or may not have taken effect)",
        )


def no_answer(future):
    """Whether ``future``, whose ``get()`` just failed, got no answer."""
    return not future.is_ready()


class GateRPC(RPC):
    """An RPC to ``job-manager.epilog-gate.<method>`` (or another
    ``service`` of the gate's) whose ``get()`` raises
    :class:`NoAnswerError` when no answer came, and OSError with the gate's
    errno and message when the gate refused."""

    def __init__(self, handle, method, payload, flags=0, service=None):
        self.method = method
        service = service or "job-manager.epilog-gate"
        try:
            super().__init__(handle, f"{service}.{method}", payload, flags=flags)
        except OSError as exc:
            # Not sent (the connection is gone: EPIPE, ECONNRESET).
            raise NoAnswerError(method, exc) from exc

    def get_str(self):
        try:
            payload = super().get_str()
        except NoAnswerError:
            raise
        except OSError as exc:
            if no_answer(self) or exc.errno == NO_ANSWER_ERRNO:
                raise NoAnswerError(self.method, exc) from exc
            raise
        if no_answer(self):
            # The wait failed with errno 0, which flux's bindings do not
            # raise for: without this, "no payload" (None) would come back
            # as if it were the answer.
            raise NoAnswerError(self.method)
        return payload
