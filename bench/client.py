"""The benchmark's client: one handle, reactor-driven, that submits,
holds, cancels and releases jobs and observes their clean events."""

import time

import flux
import flux.job
from common import DESCRIPTION
from flux.constants import FLUX_RPC_STREAMING
from flux.core.inner import raw


def submit_waiting(handle, count, spec, window=256):
    """Submit ``count`` jobs of ``spec`` with urgency 0 (they wait in
    SCHED), ``window`` in flight at a time (thousands of futures waited on
    one by one with get() can abort in flux-core's client library);
    return their ids."""
    encoded = spec.dumps()
    ids = []
    while len(ids) < count:
        futures = [
            flux.job.submit_async(handle, encoded, urgency=0)
            for _ in range(min(window, count - len(ids)))
        ]
        ids.extend(int(f.get_id()) for f in futures)
    return ids


def hold_pipelined(handle, topic, jobids, window, answered=None):
    """Send a ``hold`` (``topic``) on each of ``jobids``, ``window`` in
    flight, and run the reactor until all are answered: each answer's
    future and the ``time.perf_counter()`` of its sending go to
    ``answered``; return the errors, as strings."""
    todo = iter(jobids)
    errors = []
    left = [len(jobids)]

    def send():
        jobid = next(todo, None)
        if jobid is not None:
            future = handle.rpc(topic, {"id": jobid, "description": DESCRIPTION})
            future.then(on_answer, time.perf_counter())

    def on_answer(future, sent):
        try:
            future.get()
        except OSError as exc:
            errors.append(str(exc))
        if answered is not None:
            answered(future, sent)
        left[0] -= 1
        if left[0] == 0:
            handle.reactor_stop()
        else:
            send()

    if not jobids:
        return errors
    for _ in range(window):
        send()
    handle.reactor_run()
    return errors


class Client:
    """Drives one instance: submits, holds, cancels or releases jobs, and
    observes clean events through the job-manager journal.

    Every per-job request is asynchronous; completions are observed from
    two streams (the journal, and the gate's watch), never by polling.
    """

    def __init__(self, handle, service=None):
        self.h = handle
        self.service = service
        self.cleaned = {}  # jobid -> monotonic time its clean arrived
        self.outstanding = set()  # jobs whose clean is awaited
        self.activated = {}  # jobid -> monotonic time its hold became active
        self.errors = []
        self.auto_release = True
        self.pending_responses = 0
        self._wanted = None
        self._journal = self.h.rpc(
            "job-manager.events-journal",
            {"allow": {"clean": 1}, "full": False},
            flags=FLUX_RPC_STREAMING,
        )
        self._journal.then(self._on_journal)
        self._watch = None
        self._watch_closing = False
        if service:
            self.open_watch(service)
        # The journal's backlog ends with a sentinel: wait for it.
        self._sentinel = False
        while not self._sentinel:
            self.h.reactor_run(flags=flux.constants.FLUX_REACTOR_ONCE)

    def open_watch(self, service):
        """Watch holds of ``service`` become active (released at once if
        ``auto_release``)."""
        self.service = service
        self._watch_closing = False
        self._watch = self.h.rpc(f"{service}.watch", {}, flags=FLUX_RPC_STREAMING)
        self._watch_read = 0
        self._watch.then(self._on_watch)

    def close_watch(self):
        """The plugin is about to be removed: its watch stream ends (or
        goes silent), which is not an error."""
        self._watch_closing = True
        self._watch = None
        self.service = None

    # streams

    def _on_journal(self, future):
        try:
            resp = future.get()
        except OSError as exc:
            self.errors.append(f"journal: {exc}")
            self.h.reactor_stop()
            return
        future.reset()
        if resp["id"] in (-1, flux.constants.FLUX_JOBID_ANY):
            self._sentinel = True
            return
        now = time.monotonic()
        for event in resp["events"]:
            if event["name"] == "clean":
                self.cleaned[resp["id"]] = now
                self.outstanding.discard(resp["id"])
        self._check_done()

    def _on_watch(self, future):
        if self._watch_closing or future is not self._watch:
            return
        try:
            resp = future.get()
        except OSError as exc:
            self.errors.append(f"watch: {exc}")
            self.h.reactor_stop()
            return
        future.reset()
        self._watch_read += 1
        if self._watch_read % 32 == 0:
            # The gate's flow control: it sends 256 unacknowledged at most.
            self.h.rpc(
                f"{self.service}.watch-ack",
                {
                    "matchtag": raw.flux_rpc_get_matchtag(future.pimpl.handle),
                    "count": self._watch_read,
                },
                flags=flux.constants.FLUX_RPC_NORESPONSE,
            )
        jobid = resp["id"]
        self.activated[jobid] = time.monotonic()
        if self.auto_release:
            self.release(jobid, resp["description"])
        self._check_done()

    # requests (responses checked, not waited for one by one)

    def _on_response(self, future):
        self.pending_responses -= 1
        try:
            future.get()
        except OSError as exc:
            self.errors.append(str(exc))
            self.h.reactor_stop()
            return
        self._check_done()

    def _send(self, topic, payload):
        future = self.h.rpc(topic, payload)
        self.pending_responses += 1
        future.then(self._on_response)

    def hold(self, jobid, description=DESCRIPTION, point=None):
        payload = {"id": jobid, "description": description}
        if point:
            payload["point"] = point
        self._send(f"{self.service}.hold", payload)

    def release(self, jobid, description=DESCRIPTION):
        self._send(f"{self.service}.release", {"id": jobid, "description": description})

    def snapshot(self):
        """Ask the gate for a snapshot of its hold log (answered once it
        has replaced the log)."""
        self._send(f"{self.service}.snapshot", {})

    def cancel(self, jobid):
        self._send(
            "job-manager.raise",
            {"id": jobid, "severity": 0, "type": "cancel", "note": ""},
        )

    def urgency(self, jobid, urgency=16):
        self._send("job-manager.urgency", {"id": jobid, "urgency": urgency})

    # waiting

    def _check_done(self):
        if self._wanted is not None and self._wanted():
            self.h.reactor_stop()

    def run_until(self, predicate, timeout=300.0, what="jobs"):
        """Run the reactor until ``predicate()`` holds."""
        if predicate():
            return
        self._wanted = predicate
        timer = self.h.timer_watcher_create(timeout, lambda *a: self.h.reactor_stop())
        timer.start()
        try:
            deadline = time.monotonic() + timeout
            while not predicate():
                if self.errors:
                    raise RuntimeError(f"bench: request failed: {self.errors[0]}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"bench: timed out waiting for {what}")
                self.h.reactor_run()
            if self.errors:
                raise RuntimeError(f"bench: request failed: {self.errors[0]}")
        finally:
            timer.stop()
            timer.destroy()
            self._wanted = None

    def drain_responses(self, timeout=60.0):
        self.run_until(lambda: self.pending_responses == 0, timeout, "responses")

    # submission (untimed set-up)

    def submit_held(self, count, spec, window=256):
        """Submit ``count`` jobs with urgency 0 (held); return their ids
        once the job-manager has taken every one to SCHED."""
        ids = submit_waiting(self.h, count, spec, window)
        self.wait_sched(ids)
        return ids

    def wait_sched(self, ids):
        """Wait until every job in ``ids`` has had its priority event (is in
        SCHED, held); the journal of priority events is only open here."""
        want = {int(i) for i in ids}
        seen = set()
        stream = self.h.rpc(
            "job-manager.events-journal",
            {"allow": {"priority": 1}, "full": False},
            flags=FLUX_RPC_STREAMING,
        )
        try:
            while not want <= seen:
                resp = stream.get()
                stream.reset()
                if resp["events"]:
                    seen.add(resp["id"])
        finally:
            self.h.rpc(
                "job-manager.events-journal-cancel",
                {"matchtag": stream.pimpl.get_matchtag()},
                flags=flux.constants.FLUX_RPC_NORESPONSE,
            )
            try:
                while True:
                    stream.get()
                    stream.reset()
            except OSError:
                pass

    def hold_active(self, count, spec):
        """Submit ``count`` jobs, hold each and cancel each, so every hold
        is active; return the ids."""
        self.auto_release = False
        ids = self.submit_held(count, spec)
        for jobid in ids:
            self.hold(jobid)
            self.cancel(jobid)
        self.run_until(
            lambda: all(j in self.activated for j in ids), what="activations"
        )
        self.drain_responses()
        return ids

    def warm_up(self, count, spec):
        """Take ``count`` jobs through a hold and its release, untimed, so
        that the plugin's code paths are warm before a measurement."""
        warm = self.hold_active(count, spec)
        for jobid in warm:
            self.release(jobid)
        self.run_until(lambda: all(j in self.cleaned for j in warm))
