"""EpilogGate, the Python client of the epilog-gate plugin; how to use it
(errors, many requests at once) is the package's docstring,
:mod:`flux_epilog_gate.client`."""

import errno
import json
import time

import flux
from flux.core.inner import raw

from ..listentry import columns_of
from .rpc import GateRPC, NoAnswerError

SERVICE = "job-manager.epilog-gate"

#: Plugins of the gate that serve its ``list`` under their own name: with
#: dws.so loaded alone (epilog-gate answers ENOSYS) ``list`` asks them.
LIST_FALLBACKS = ("job-manager.dws",)

#: :meth:`EpilogGate.watch` acknowledges what it has read at least this
#: often, and before it waits for more.
ACK_EVERY = 32

__all__ = ["EpilogGate", "NoAnswerError"]


def _jobid(jobid):
    """Any Flux job id form (int, f58, decimal, hex, words) as an int;
    TypeError for anything else (flux-core's parser would take a float
    or a bool for an id, or fail naming its C signature)."""
    if type(jobid) is int:
        return jobid
    if isinstance(jobid, bool) or not isinstance(jobid, (int, str)):
        raise TypeError(
            "job id: expected an integer or a string, " f"not {type(jobid).__name__}"
        )
    # Imported when needed: flux.job is a long import for a command.
    from flux.job import JobID

    return int(JobID(jobid))


def _names(value, what):
    """``value`` (a string, or an iterable of strings) as a list, or None."""
    if value is None:
        return None
    if isinstance(value, str):
        return [value]  # one name, not its characters
    try:
        names = list(value)
    except TypeError:
        raise TypeError(
            f"{what}: expected a string or an iterable of strings, "
            f"not {type(value).__name__}"
        ) from None
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"{what}: {name!r} is not a string")
    return names


class EpilogGate:
    """Hold, release, list and watch holds through ``handle``.

    Every call returns the gate's answer, or raises OSError with the
    gate's errno and message, or :class:`NoAnswerError` when no answer
    came (see the module's documentation)."""

    def __init__(self, handle=None):
        self.handle = handle if handle is not None else flux.Flux()

    def _rpc(self, method, payload, flags=0, service=None):
        return GateRPC(self.handle, method, payload, flags=flags, service=service)

    def hold_async(self, jobid, description, timeout=None, point=None):
        """Start a hold request (see :meth:`hold`); returns the future."""
        payload = {"id": _jobid(jobid), "description": description}
        if isinstance(timeout, str):
            from ..gate.config import parse_duration

            # As the configuration reads one (ValueError naming it if not).
            timeout = parse_duration(timeout, "timeout")
        if timeout is not None:
            payload["timeout"] = timeout
        if point is not None:
            payload["point"] = point
        return self._rpc("hold", payload)

    def hold(self, jobid, description, timeout=None, point=None):
        """Register hold ``description`` on ``jobid``; return the hold
        (``{id, description, state}``).  ``timeout``: seconds, or a Flux
        Standard Duration such as ``"10m"`` (ASCII digits, no spaces, as
        the configuration takes one; else ValueError, nothing sent);
        ``point="prolog"`` holds the
        job's start instead of its clean, ``point="depend"`` keeps the job
        in DEPEND."""
        return self.hold_async(jobid, description, timeout, point).get()

    def release_async(self, jobid, description, status=0):
        """Start a release request (see :meth:`release`); returns the
        future."""
        payload = {"id": _jobid(jobid), "description": description}
        if status:
            payload["status"] = status
        return self._rpc("release", payload)

    def release(self, jobid, description, status=0):
        """Release a hold; return ``{released, reason?}``.  A hold that is
        already gone answers ``released: False`` with the reason."""
        return self.release_async(jobid, description, status).get()

    def release_many(self, holds, status=0):
        """Release every ``(jobid, description)`` of ``holds`` at once;
        return, in order, each answer (as :meth:`release`) or the OSError
        that request failed with (:class:`NoAnswerError` if it got no
        answer).  Raises NoAnswerError if the requests cannot be sent (the
        connection to the broker is lost)."""
        return self.wait_all(
            [self.release_async(jobid, d, status) for jobid, d in holds]
        )

    def wait_all(self, futures):
        """Wait for ``futures`` on the handle's own reactor; return, in
        order, each one's result or the OSError it failed with.  A future
        that got no answer (the connection to the broker was lost) gives a
        :class:`NoAnswerError`, never a result.

        Each future is waited with a ``then()`` callback, so no future runs
        a reactor of its own however many there are.  Call it outside any
        reactor callback of the same handle."""
        futures = list(futures)
        unanswered = object()
        results = [unanswered] * len(futures)
        pending = [len(futures)]

        def done(future, index):
            try:
                results[index] = future.get()  # fulfilled: does not wait
            except OSError as exc:
                results[index] = exc
            pending[0] -= 1
            if not pending[0]:
                self.handle.reactor_stop()

        try:
            for index, future in enumerate(futures):
                future.then(done, index)
            if pending[0]:
                # Returns early, without calling back the futures still
                # waiting, when the connection to the broker is lost.
                self.handle.reactor_run()
        except OSError as exc:
            lost = exc
        else:
            lost = None
        return [
            (
                NoAnswerError(getattr(future, "method", "request"), lost)
                if result is unanswered
                else result
            )
            for future, result in zip(futures, results)
        ]

    def snapshot_async(self):
        """Start a snapshot (see :meth:`snapshot`); returns the future."""
        return self._rpc("snapshot", {})

    def snapshot(self):
        """Replace the hold log with a snapshot of the current holds now,
        its segments too (the instance owner only); return ``{bytes}``,
        the log's size then."""
        return self.snapshot_async().get()

    def list_async(self, jobid=None, service=None, columns=False):
        """Start a list (of ``service``, by default epilog-gate's); the
        future's answer is ``{holds: [...]}``, or with ``columns``
        ``{columns: {...}}`` (see :meth:`list_columns`)."""
        payload = {} if jobid is None else {"id": _jobid(jobid)}
        if columns:
            payload["columns"] = True
        return self._rpc("list", payload, service=service)

    def list(self, jobid=None):
        """Return all holds visible to the caller, or those of ``jobid``,
        by job id then description.  Without epilog-gate.so loaded,
        another plugin of the gate that serves ``list`` answers (see
        :data:`LIST_FALLBACKS`)."""
        return json.loads(self.list_text(jobid))["holds"]

    def list_columns(self, jobid=None):
        """The holds :meth:`list` returns, by column: for each key of a
        list entry (:data:`~flux_epilog_gate.listentry.KEYS`) its values,
        hold by hold, None where a hold has none.  Many holds decode in
        half the time they take as entries."""
        try:
            return json.loads(self.list_text(jobid, columns=True))["columns"]
        except OSError as exc:
            if exc.errno != errno.EPROTO:
                raise
            # A plugin of an earlier version, which lists by rows only.
            return columns_of(self.list(jobid))

    def list_text(self, jobid=None, columns=False):
        """The answer of :meth:`list` as the gate wrote it, the JSON text
        ``{"holds":[...]}`` (with ``columns``, ``{"columns":{...}}``): for
        a caller that passes it on, a list of many holds is not decoded."""
        try:
            return self.list_async(jobid, columns=columns).get_str()
        except NoAnswerError:
            raise
        except OSError as exc:
            if exc.errno != errno.ENOSYS:
                raise
            for service in LIST_FALLBACKS:
                try:
                    return self.list_async(jobid, service, columns).get_str()
                except NoAnswerError:
                    raise
                except OSError as other:
                    if other.errno != errno.ENOSYS:
                        raise
            raise

    def watch_async(self, descriptions=None, points=None, lost=False):
        """Start a watch; returns the streaming future (see :meth:`watch`)."""
        payload = {"lost": True} if lost else {}
        descriptions = _names(descriptions, "descriptions")
        if descriptions:
            payload["descriptions"] = descriptions
        points = _names(points, "points")
        if points:
            payload["points"] = points
        return self._rpc("watch", payload, flags=flux.constants.FLUX_RPC_STREAMING)

    def watch_ack(self, future, count):
        """Tell the plugin that ``count`` activations (in all) of the watch
        stream ``future`` (from :meth:`watch_async`) have been read; no
        answer is awaited.  A stream whose client is behind by more than
        the plugin's ``watch-backlog`` is ended with ENOBUFS, and no more
        than 256 activations are sent unacknowledged: a reader of
        :meth:`watch_async` must acknowledge (:meth:`watch` does)."""
        self._rpc(
            "watch-ack",
            {
                "matchtag": raw.flux_rpc_get_matchtag(future.pimpl.handle),
                "count": count,
            },
            flags=flux.constants.FLUX_RPC_NORESPONSE,
        )

    def watch(self, descriptions=None, reconnect=60.0, points=None, lost=False):
        """Yield ``{id, description, userid, ran, point}`` for every hold
        that is active now, then for each hold as it becomes active.
        Blocks between holds; stop by leaving the loop.  ``descriptions``
        (one description, or an iterable of them) limits the holds to
        those descriptions, ``points`` (``"epilog"``, ``"prolog"``,
        ``"depend"``, one or an iterable) to those points.

        An active prolog hold whose job will never start (it was cancelled,
        or another hold failed) comes again with ``aborted: True``: abandon
        the setup and release it.

        When the plugin is reloaded or the job-manager restarts, the stream
        is ended and this watches again, waiting up to ``reconnect``
        seconds for the plugin to be back; holds still active are then
        sent again (releasing twice is harmless).  When the connection to
        the broker is lost (the broker stopped or died), the watch ends
        with :class:`NoAnswerError`.

        With ``lost`` (the instance owner only) it also yields, first, every
        lost hold of those descriptions and points not yet delivered, then
        each as it is lost: a hold that ended without becoming active,
        whose job will never reach its point (the job was dropped at a
        restart, went inactive while the plugin was not loaded, or had
        more holds than a job can have), as ``{id, description, userid,
        point, ran, lost: True, reason}``: reclaim what was made for it.
        Each is acknowledged as soon as the loop asks for the next item,
        and the plugin then forgets it: it comes once, to one watcher
        (again only if the loop never asked for more before the stream
        or the broker went away).

        What has been read is acknowledged to the plugin (``watch-ack``)
        as the loop asks for more.  A loop body so slow that more than
        the plugin's ``watch-backlog`` activations pile up ends the watch
        with OSError(ENOBUFS): watch again (holds still active come
        again)."""
        acks = _Acks(self, self.watch_async(descriptions, points, lost))
        try:
            yield from self._stream(acks, reconnect, (descriptions, points, lost))
        finally:
            # Leaving the loop: what it read is acknowledged (a lost hold
            # read last is then not sent again).
            acks.flush()

    def _stream(self, acks, reconnect, what):
        """The loop of :meth:`watch` on ``acks``' stream, watching
        ``what`` again (``(descriptions, points, lost)``) as it ends."""
        # Lost holds yielded: one sent again on a new stream (its
        # acknowledgement did not reach the plugin) is not yielded twice.
        yielded = set()
        deadline = None  # while watching again after the stream ended
        while True:
            acks.before_get()
            try:
                hold = acks.future.get()
            except OSError as exc:
                if not reconnect or not self._again(exc, deadline):
                    raise
                if exc.errno == errno.ECONNRESET:
                    deadline = time.monotonic() + reconnect
                else:
                    time.sleep(0.5)
                acks.restart(self.watch_async(*what))
                continue
            deadline = None
            acks.future.reset()
            acks.read += 1
            if isinstance(hold, dict) and hold.get("lost"):
                acks.lost = True
                key = (hold.get("id"), hold.get("description"))
                if key in yielded:
                    continue
                yielded.add(key)
            yield hold

    @staticmethod
    def _again(exc, deadline):
        if exc.errno == errno.ECONNRESET:
            return True
        # Not loaded (yet) while the plugin is being reloaded.
        return (
            exc.errno == errno.ENOSYS
            and deadline is not None
            and time.monotonic() < deadline
        )


class _Acks:
    """Acknowledges the activations read on one watch stream: every
    :data:`ACK_EVERY`, and before waiting for the next, so a reader never
    waits with reads unacknowledged (the plugin would hold activations
    back)."""

    def __init__(self, gate, future):
        self.gate = gate
        self.future = future
        self.read = 0
        self.acked = 0
        #: A lost hold was read since the last acknowledgement: the
        #: plugin keeps it until acknowledged, so that goes at once.
        self.lost = False

    def restart(self, future):
        """Acknowledge on the new stream ``future`` from now on."""
        self.future = future
        self.read = self.acked = 0
        self.lost = False

    def before_get(self):
        unacked = self.read - self.acked
        if unacked and (
            unacked >= ACK_EVERY or self.lost or not self.future.is_ready()
        ):
            self.flush()

    def flush(self):
        """Acknowledge every activation read so far."""
        if self.read <= self.acked:
            return
        try:
            self.gate.watch_ack(self.future, self.read)
        except OSError:
            # The stream itself says so next, as the watch's own error
            # (or it is over).
            return
        self.acked = self.read
        self.lost = False
