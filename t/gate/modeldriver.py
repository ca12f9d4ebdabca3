"""The plugin's glue, as the model-based test drives it: one
:class:`Driver` per plugin instance, doing with the gate what
flux_epilog_gate/plugin.py does on a load, a job callback, a request and
an unload, on a :class:`~modeljm.JobtapPort` instead of the jobtap
runtime.

The load path still lives in plugin.py (commit, _read_log, _on_new,
_recover, _recovered, _loaded): this module follows it step by step,
calling the same gate methods, so that the model checks the load the
plugin really does.  Keep the two in step.
"""

import errno
import syslog

from flux_epilog_gate import holdlog
from flux_epilog_gate.errors import GateError
from flux_epilog_gate.gate import CLEANUP, INACTIVE, NEW, RUN, Gate

from .modeljm import JobtapPort


class Carried:
    """What survives a plugin's unload in one job-manager (plugin.py's
    _State): the gate of the removed instance."""

    def __init__(self):
        self.gate = None


class Driver:
    """One plugin instance of job-manager ``jm``."""

    def __init__(self, jm, carried):
        self.jm = jm
        self.state = carried
        self.port = JobtapPort(jm, self)
        self.gate = None
        self.carried = None
        self.recovering = False
        self.seen = set()
        self.log = {}
        self.loading = False

    # Load (plugin.py: commit and what follows)

    def load(self):
        """conf.update of a load: commit.  Returns once job.new was called
        for every active job; the load timer fires later."""
        carried = self.state.gate if self.port.seen_jobmanager() else None
        if carried is None or any(job.recovering for job in carried.jobs.values()):
            self.log = self._read_log()
        self.loading = True
        self.port.timer(0.0, self._loaded)
        if carried is not None:
            carried.attach(self.port)
            self.gate = carried
        else:
            self.gate = Gate(self.port)
        self.carried = carried
        self.recovering = carried is None
        self.state.gate = None
        self.jm.port = self.port

    def announce(self):
        """job.new of every active job, right after the load (or, in a
        restarting job-manager, of every restored job)."""
        for job in self.jm.active():
            self._on_new(job.id, job.state, job.userid)

    def _read_log(self):
        try:
            text = self.port.lookup_kvs(holdlog.KEY)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return {}
            self.port.log(syslog.LOG_ERR, f"reading {holdlog.KEY}: {exc}")
            return None
        log, skipped = holdlog.parse(text)
        if skipped:
            self.port.log(
                syslog.LOG_ERR, f"{holdlog.KEY}: skipped {skipped} malformed entries"
            )
        return log

    def _on_new(self, jobid, state, userid):
        if state == NEW:
            return
        self.seen.add(jobid)
        if self.carried is not None:
            if self.gate.retrack(jobid, state):
                self._recover(jobid)
        elif self.recovering and (self.log is None or jobid in self.log):
            self.gate.begin_recovery(jobid, userid)
            self._recover(jobid)

    def _recover(self, jobid):
        try:
            state, _ = self.port.job_info(jobid)
        except OSError:
            state = INACTIVE
        entries = (self.log or {}).get(jobid, [])
        if not entries and state not in (RUN, CLEANUP):
            self.gate.end_recovery(jobid, [])
            return
        self.port.read_eventlog(
            jobid, lambda events, error: self._recovered(jobid, entries, events, error)
        )

    def _recovered(self, jobid, entries, events, error):
        if not self.port.open:
            return
        if error is not None:
            events = []
        self.gate.end_recovery(jobid, sorted(entries + events, key=lambda e: e[0]))

    def _loaded(self):
        self.loading = False
        if self.carried is not None:
            self.gate.resume(self.seen)
            self.carried = None
        self.recovering = False
        self.seen = set()

    # Job callbacks (only those the runtime forwards: see JobtapPort)

    def on_run(self, jobid):
        self.gate.on_run(jobid)

    def on_cleanup(self, jobid):
        self.gate.on_cleanup(jobid)

    def on_inactive(self, jobid):
        self.gate.on_inactive(jobid)

    def on_event(self, jobid, name, state):
        self.gate.on_event(jobid, name, state)

    # Requests: ``answer(result, error)`` is called once, when the
    # request is answered (never if the instance goes away first).

    def hold(self, jobid, description, timeout, point, answer):
        def done(hold, error):
            if self.port.open:
                answer(hold, error)

        try:
            self.gate.hold(jobid, description, timeout, point, done=done)
        except GateError as exc:
            answer(None, exc)

    def release(self, jobid, description, status, answer):
        def done(result, error):
            if self.port.open:
                answer(result, error)

        try:
            self.gate.release(jobid, description, status, done=done)
        except GateError as exc:
            answer(None, exc)

    def list(self, jobid=None):
        return self.gate.list(jobid)

    def watch(self, sink):
        self.gate.watch(sink)

    def disconnect(self, sink):
        self.gate.unwatch(lambda other: other is sink)

    # Unload (plugin.py: unload and _suspend)

    def unload(self):
        """This committed instance is removed: watch streams end, the gate
        is suspended and kept for the next load in this job-manager."""
        for watcher in self.gate.watchers:
            watcher.sink.end("unloaded")
        self.gate.watchers = []
        self.gate.suspend()
        self.port.close()
        self.state.gate = self.gate
