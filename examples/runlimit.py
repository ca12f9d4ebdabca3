"""run-limit: a jobtap plugin that ends jobs running longer than a limit.

A site-wide ceiling on how long any job may run, whatever it asked for
(a debug or interactive instance, a partition under maintenance): once a
job has run for ``limit``, the plugin raises a fatal ``run-limit``
exception on it, which ends it as a timeout would.  ``limit`` is a Flux
Standard Duration given at load time or in the ``[run-limit]`` table of
the instance config (``flux config reload`` applies a new one to jobs that
start afterwards).  ``flux jobtap query run-limit.so`` shows the limit and
counters; ``job-manager.run-limit.deadlines`` lists the deadlines of the
running jobs (a guest sees only its own).

Built on the Python jobtap runtime of flux-epilog-gate::

    python -m flux_epilog_gate.jobtap.build run-limit runlimit:RunLimit \\
        DIR examples
    flux jobtap load DIR/run-limit.so limit=10m

It is also the example of "Writing a jobtap plugin in Python" (README).
"""

import math
import syslog

from flux.util import parse_fsd

from flux_epilog_gate.jobtap.plugin import (
    Plugin,
    Refused,
    job_topic,
    plugin_topic,
    request,
)


def parse_limit(value):
    """Seconds from a Flux Standard Duration (or a number); None: none."""
    if value is None:
        return None
    try:
        seconds = parse_fsd(value) if isinstance(value, str) else float(value)
    except (TypeError, ValueError) as exc:
        raise Refused(f"run-limit: limit: {value!r}: {exc}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise Refused(f"run-limit: limit: {value!r} must be finite and > 0")
    return seconds


class RunLimit(Plugin):
    """End every job that runs longer than ``limit`` seconds."""

    def __init__(self, jobtap):
        super().__init__(jobtap)
        self.limit = None
        self.timers = {}  # job id -> (deadline, userid, timer)
        self.counters = {"started": 0, "ended": 0}

    @plugin_topic("conf.update")
    def configure(self, args):
        """The load, and each ``flux config reload``: a bad limit refuses
        it, and nothing changes."""
        table = (args.input.get("conf") or {}).get("run-limit") or {}
        options = self.jobtap.load_options()
        limit = parse_limit(options.get("limit", table.get("limit")))
        self.limit = limit
        # Only while there is a limit does any job's start enter Python.
        self.jobtap.marks.forward("job.state.run", limit is not None)

    @plugin_topic("plugin.query")
    def query(self, args):
        return {"limit": self.limit, "running": len(self.timers), **self.counters}

    @job_topic("job.state.run", every_job=True)
    def on_run(self, job):
        """A job starts: arm its timer, and mark the job so that its end
        comes to Python too."""
        self.jobtap.marks.mark(job.id)
        deadline = self.jobtap.now() + self.limit
        timer = self.jobtap.timer(self.limit, lambda: self.expire(job.id))
        self.timers[job.id] = (deadline, job.userid, timer)
        self.counters["started"] += 1

    @job_topic("job.state.inactive")
    def on_inactive(self, job):
        """A marked job ended (the runtime unmarks it)."""
        entry = self.timers.pop(job.id, None)
        if entry is not None:
            entry[2].stop()

    def expire(self, jobid):
        if self.timers.pop(jobid, None) is None:
            return
        self.counters["ended"] += 1
        note = f"ran longer than the run-limit of {self.limit:g}s"
        try:
            self.jobtap.jobs.raise_exception(jobid, "run-limit", 0, note)
        except OSError as exc:
            self.jobtap.log(syslog.LOG_ERR, f"job {jobid}: {exc}")

    @request("deadlines", guests=True)
    def deadlines(self, request):
        """``{jobs: [{id, deadline}]}``: the running jobs' deadlines; a
        guest's own only."""
        jobs = [
            {"id": jobid, "deadline": deadline}
            for jobid, (deadline, userid, _) in sorted(self.timers.items())
            if request.owner or userid == request.userid
        ]
        request.respond({"jobs": jobs})
