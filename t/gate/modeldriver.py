"""The plugin's glue, as the model-based test drives it: one
:class:`Driver` per plugin instance, doing with the gate what
flux_epilog_gate/plugin/__init__.py does on a load, a job callback, a request and
an unload, on a :class:`~modeljm.JobtapPort` instead of the jobtap
runtime.

A load is a :class:`flux_epilog_gate.gate.loader.Load`, as in plugin/__init__.py;
requests wait until the load's view is complete (plugin/__init__.py's
``_after_recovery``), and those still waiting when the instance goes
away are refused.  Keep the two in step.
"""

from flux_epilog_gate.errors import GateError
from flux_epilog_gate.gate.config import Config
from flux_epilog_gate.gate.loader import Load

from .modeljm import JobtapPort


class Carried:
    """What survives a plugin's unload in one job-manager (plugin/__init__.py's
    _State): the gate of the removed instance."""

    def __init__(self):
        self.gate = None


class Driver:
    """One plugin instance of job-manager ``jm``."""

    def __init__(self, jm, carried, violations=None):
        self.jm = jm
        self.state = carried
        #: Where a broken promise of the gate to the plugin is told.
        self.violations = [] if violations is None else violations
        self.port = JobtapPort(jm, self)
        self.gate = None
        self.load = None

    # Load (plugin/__init__.py: commit and what follows)

    def commit(self):
        """conf.update of a load: commit.  The load timer fires later."""
        carried = self.state.gate if self.port.seen_jobmanager() else None
        load = Load(self.port, carried)
        self.port.timer(0.0, self._loaded)
        self.load = load
        self.gate = load.begin(Config())
        self.state.gate = None
        self.jm.port = self.port

    def announce(self):
        """job.new of every active job, right after the load (or, in a
        restarting job-manager, of every restored job)."""
        for job in self.jm.active():
            self.load.on_new(job.id, job.state, job.userid)

    def _loaded(self):
        self.load.loaded()

    @property
    def ready(self):
        return self.load.ready

    # Job callbacks (only those the runtime forwards: see JobtapPort)

    def on_run(self, jobid):
        self.gate.on_run(jobid)

    def on_cleanup(self, jobid):
        self.gate.on_cleanup(jobid)

    def on_inactive(self, jobid):
        self.gate.on_inactive(jobid)

    def on_event(self, jobid, name, state):
        self.gate.on_event(jobid, name, state)

    # Requests: they run once the load is ready; ``answer(result,
    # error)`` is called once, when the request is answered (never if the
    # instance goes away first).

    def _when_ready(self, run, answer):
        self.load.when_ready(run, lambda: answer(None, GateError(11, "unloaded")))

    def hold(self, jobid, description, timeout, point, answer):
        self._request(
            f"hold {jobid} {description}",
            lambda done: self.gate.hold(jobid, description, timeout, point, done=done),
            answer,
        )

    def release(self, jobid, description, status, answer):
        self._request(
            f"release {jobid} {description}",
            lambda done: self.gate.release(jobid, description, status, done=done),
            answer,
        )

    def _request(self, what, call, answer):
        """Run ``call(done)`` once ready.  The plugin gives back the request
        it holds when the gate refuses (GateError), and in the one answer
        otherwise: the gate must call ``done`` at most once, and never for
        a refused request."""
        refused = []
        calls = []

        def done(result, error):
            calls.append(error)
            if refused or len(calls) > 1:
                self.violations.append(f"{what}: done called {len(calls)} times")
                return
            if self.port.open:
                answer(result, error)

        def run():
            try:
                call(done)
            except GateError as exc:
                refused.append(exc)
                if calls:
                    self.violations.append(f"{what}: refused after done was called")
                answer(None, exc)

        self._when_ready(run, answer)

    def list(self, answer):
        """``answer(holds)`` once the list is answered."""
        self._when_ready(lambda: answer(self.gate.list()), lambda *_: None)

    def watch(self, sink, starting, lost=False):
        """``starting()`` is called right before the watch starts; with
        ``lost``, the stream also gets lost holds."""

        def run():
            starting()
            self.gate.watch(sink, lost=lost)

        self._when_ready(run, lambda *_: sink.end("refused"))

    def disconnect(self, sink):
        self._when_ready(
            lambda: self.gate.unwatch(lambda other: other is sink), lambda *_: None
        )

    # Unload (plugin/__init__.py: unload and _suspend)

    def unload(self):
        """This committed instance is removed: requests still waiting are
        refused, watch streams end, the gate is suspended and kept for the
        next load in this job-manager."""
        self.load.close()
        self.gate.end_watches(lambda sink: sink.end("unloaded"))
        self.gate.suspend()
        self.port.close()
        self.state.gate = self.gate
