"""The owner's hold and release: decoded in C, answered from C.

fastpath.c decodes the owner's well-formed ``hold`` and ``release``
requests (the bulk of the traffic) and passes their values to the two
extern "Python" functions defined here; every other request of the two
methods comes through the runtime's general path
(:class:`~flux_epilog_gate.plugin.plugin.EpilogGatePlugin`) and ends in
the same :class:`FastPath` calls.

Each request is held by a bare reference (``kept``, as
:meth:`GatePort.own_request <flux_epilog_gate.plugin.port.GatePort.own_request>`
returns it; C takes it for the requests it decodes): exactly one answer,
or a drop, gives it back.  The answer is bound with ``partial()``, not a
closure (a closure's cells cost more than the call), and taken by the
gate once it accepted the request; a refusal (GateError) comes before
anything took the answer.  An unexpected exception leaves the reference
to the answer, which may already be kept.

Every Python call here costs about a thousand instructions of the
job-manager's thread per request: a hold from C is two calls (the extern
and :meth:`FastPath.hold`) before the gate's.
"""

import errno
from functools import partial

from ..errors import GateError
from ..gate.holds import EPILOG, POINTS
from ..jobtap.plugin import internal_error
from .driver import UNLOADED_WAITING


def bind_externs(ffi):
    """Define the extern "Python" functions fastpath.c calls: each
    decodes what C passed (C's strings do not outlive the call) and
    hands it to the plugin's :class:`FastPath`."""

    @ffi.def_extern()
    def gate_py_hold(handle, kept, jobid, description, timeout, point):
        fast = ffi.from_handle(handle).fast
        try:
            description = ffi.string(description).decode()
            # C passes the point's index in POINTS (-1: none was given).
            point = POINTS[point] if point >= 0 else EPILOG
        except Exception:  # noqa: BLE001 - inside the job-manager
            fast.failed(kept)
            return
        fast.hold(kept, jobid, description, None if timeout < 0 else timeout, point)

    @ffi.def_extern()
    def gate_py_release(handle, kept, jobid, description, status):
        fast = ffi.from_handle(handle).fast
        try:
            description = ffi.string(description).decode()
        except Exception:  # noqa: BLE001 - inside the job-manager
            fast.failed(kept)
            return
        fast.release(kept, jobid, description, status)


class FastPath:
    """Holds and releases of one plugin instance, each request kept by a
    bare reference until its answer."""

    def __init__(self, plugin):
        #: The plugin instance whose gate and load these requests go to.
        self.plugin = plugin
        self.jobtap = plugin.jobtap
        #: The gate's port: the requests' bare references and answers.
        self.port = plugin.port

    # The general path's: a request the runtime decoded.

    def hold_message(self, message, jobid, description, timeout, point=EPILOG):
        """:meth:`hold` for a request the general path decoded."""
        self.hold(
            self.port.own_request(message),
            jobid,
            description,
            timeout,
            point,
        )

    def release_message(self, message, jobid, description, status):
        """:meth:`release` for a request the general path decoded."""
        self.release(self.port.own_request(message), jobid, description, status)

    # The one body of each request.  hold and release check readiness
    # each in its own lines, not through a shared helper: every owner
    # hold and release runs here, and a call more is paid per request.

    def hold(self, kept, jobid, description, timeout, point):
        """Place a hold for the request ``kept``; answered once its
        record is durable, or at once if it is refused.  While the gate
        still recovers, it waits."""
        plugin = self.plugin
        try:
            ready, gate = plugin.load.ready, plugin.gate
            if ready and gate.context.config.fault is not None:
                plugin.fault("request")
        except Exception:  # noqa: BLE001 - inside the job-manager
            self.failed(kept)
            return
        if not ready:
            self._wait(kept, self.hold, (jobid, description, timeout, point))
            return
        try:
            gate.hold(
                jobid, description, timeout, point, partial(self._answer_hold, kept)
            )
        except GateError as exc:
            # Refused before anything took the answer (see Gate.hold).
            self.port.answer_error(kept, exc.errnum, exc.message)
        except Exception:  # noqa: BLE001 - inside the job-manager
            # The answer may have been taken: the reference is its own.
            internal_error(plugin, kept)

    def release(self, kept, jobid, description, status):
        """Release a hold for the request ``kept`` (as :meth:`hold`)."""
        plugin = self.plugin
        try:
            ready, gate = plugin.load.ready, plugin.gate
            if ready and gate.context.config.fault is not None:
                plugin.fault("request")
        except Exception:  # noqa: BLE001 - inside the job-manager
            self.failed(kept)
            return
        if not ready:
            self._wait(kept, self.release, (jobid, description, status))
            return
        try:
            gate.release(
                jobid, description, status, partial(self._answer_release, kept)
            )
        except GateError as exc:
            self.port.answer_error(kept, exc.errnum, exc.message)
        except Exception:  # noqa: BLE001 - inside the job-manager
            internal_error(plugin, kept)

    def failed(self, kept):
        """A request failed before the gate had it: answered as an
        internal error, and its reference given back."""
        try:
            internal_error(self.plugin, kept)
        finally:
            self.port.drop_request(kept)

    def _wait(self, owned, handle, values):
        """A request that arrived while the gate's view is incomplete:
        ``handle(kept, *values)`` takes it on once it is complete (with a
        bare reference of its own: ``owned`` goes back now, the message
        kept meanwhile by one Python's collector gives back)."""
        port, messages = self.port, self.jobtap.messages
        msg = messages.keep_request(owned)
        port.drop_request(owned)
        self.plugin.load.when_ready(
            lambda: handle(port.own_request(msg), *values),
            lambda: messages.respond_error(msg, errno.EAGAIN, UNLOADED_WAITING),
        )

    # The answers, given the request's reference.

    def _answer_hold(self, kept, hold, error):
        jobtap, port = self.jobtap, self.port
        if error is not None:
            self._answer_error(kept, "hold", error)
        elif jobtap.p is None:
            port.drop_request(kept)
        else:
            try:
                port.answer_hold(kept, hold)
            except Exception:  # noqa: BLE001 - inside the job-manager
                jobtap.log_exception("answering hold")

    def _answer_release(self, kept, result, error):
        jobtap, port = self.jobtap, self.port
        if error is not None:
            self._answer_error(kept, "release", error)
        elif jobtap.p is None:
            port.drop_request(kept)
        else:
            try:
                port.answer_release(kept, *result)
            except Exception:  # noqa: BLE001 - inside the job-manager
                jobtap.log_exception("answering release")

    def _answer_error(self, kept, method, error):
        """Answer a kept request with the error that kept its record from
        being durable."""
        jobtap, port = self.jobtap, self.port
        if jobtap.p is None:
            port.drop_request(kept)
            return
        try:
            port.answer_error(
                kept, error.errno or errno.EIO, f"{method}: {error.strerror}"
            )
        except Exception:  # noqa: BLE001 - inside the job-manager
            jobtap.log_exception(f"answering {method}")
