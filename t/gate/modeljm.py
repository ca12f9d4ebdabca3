"""A fake instance for the model-based test of the gate (test_model.py):
a KVS with checkpoints, a job-manager with flux-core's perilog
semantics, and the gate's port on it, one per plugin instance.

What is modelled (see /work/shared/design/job-manager-facts.md and
flux-core's src/modules/job-manager/event.c):

- :class:`FakeKVS`: commits from the job-manager (its event batches and
  the gate's hold log) are applied in the order sent, one at a time, when
  the test says so; a commit with ``sync`` checkpoints the whole KVS; a
  crash goes back to the last checkpoint and drops the commits not yet
  applied.  An empty value reads back as NULL, as flux_kvs_lookup_get()
  gives it.
- :class:`FakeJobManager`: jobs whose state, perilog counter, resources
  and start request follow the events posted to them.  Events are
  processed one at a time per job (an event posted while another is
  processed waits in the job's queue); for each: update, then the
  plugin's callbacks (job.event.* of subscribed jobs, then
  job.state.*), then the state action (``clean`` only with the counter at
  0 and no ``epilog-start`` queued; the start request only with the
  counter at 0 and no ``prolog-start`` queued; prolog events do not count
  once the start request is sent, epilog events only in CLEANUP).
  Events go to the KVS in batches (:meth:`FakeJobManager.flush`), without
  sync.  A restart rebuilds the jobs from their eventlogs in the KVS and
  runs each one's state action before the plugin sees ``job.new``; a job
  whose eventlog replays to NEW (a checkpoint holds its ``submit``, put
  by ingest, and not yet the job-manager's ``validate``) is dropped, its
  eventlog moved to ``job-lost+found``, as flux-core's restart.c does.
- :class:`JobtapPort`: the gate's port (documented in
  flux_epilog_gate/gate/__init__.py) for one plugin instance; closed when
  the instance goes away, after which nothing reaches it.
"""

import base64
import errno
import json
import os

import cffi

from flux_epilog_gate.gate import (
    CLEANUP,
    DEPEND,
    INACTIVE,
    NEW,
    PRIORITY,
    RUN,
    SCHED,
)
from flux_epilog_gate.gate.holdlog import MARKER
from flux_epilog_gate.gate.holds import stamp
from flux_epilog_gate.gate.lost import LOST_FOUND
from flux_epilog_gate.jobid import f58
from flux_epilog_gate.plugin.port import fatal_exception

_ffi = cffi.FFI()


def _oserror(errnum):
    return OSError(errnum, os.strerror(errnum))


def eventlog_key(jobid):
    return f"job.{jobid}.eventlog"


class FakeKVS:
    """Values by key; commits applied in order; checkpoints."""

    def __init__(self):
        #: The current root.  An eventlog is a tuple of entries, other
        #: values are text.
        self.data = {}
        #: The last checkpoint: what a crash goes back to.
        self.checkpoint = {}
        #: Commits sent, not applied yet: (apply, sync, callback).
        self.queue = []
        #: Commits that fail with EIO when applied (count).
        self.failing = 0

    def put(self, key, value):
        """A write from outside the job-manager (job ingest): applied at
        once, durable only with the next checkpoint."""
        self.data[key] = value

    def commit(self, apply, sync, callback):
        self.queue.append((apply, sync, callback))

    def apply_next(self):
        """The KVS applies the oldest commit sent and answers it."""
        apply, sync, callback = self.queue.pop(0)
        if self.failing and callback is not None:
            self.failing -= 1
            callback(_oserror(errno.EIO))
            return
        apply(self.data)
        if sync:
            self.checkpoint = dict(self.data)
        if callback is not None:
            callback(None)

    def apply_all(self):
        while self.queue:
            self.apply_next()

    def crash(self):
        """The broker is killed: back to the last checkpoint."""
        self.data = dict(self.checkpoint)
        self.queue = []

    def lookup(self, key):
        """A value as flux_kvs_lookup_get() returns it: a ``char *``,
        NULL for an empty value; OSError(ENOENT) if there is none."""
        if key not in self.data:
            raise _oserror(errno.ENOENT)
        value = self.data[key]
        if value == "":
            return _ffi.cast("char *", 0)
        return _ffi.new("char[]", value.encode())


class FakeJob:
    """A job as the job-manager knows it."""

    def __init__(self, jobid, userid):
        self.id = jobid
        self.userid = userid
        self.state = NEW
        self.eventlog = []
        self.queue = []
        self.perilog = 0
        self.has_resources = False
        self.started = False
        self.start_pending = False
        self.free_posted = False
        #: Events posted since this job-manager started (the bitmap
        #: behind flux_jobtap_job_event_posted, not rebuilt on restart).
        self.posted = set()


class FakeJobManager:
    """The job-manager of one run of the instance (a restart makes a new
    one from the KVS)."""

    def __init__(self, kvs, clock, observer, jobs=None):
        self.kvs = kvs
        self.clock = clock
        #: Told of what matters to the model: observer.start_request(job),
        #: observer.event(job, entry).
        self.observer = observer
        self.jobs = jobs if jobs is not None else {}
        self.batch = []
        #: The committed plugin instance's port, or None.
        self.port = None
        #: An earlier instance of the plugin ran in this job-manager.
        self.seen_plugin = False
        #: Eventlog lookups not answered yet: (port, jobid, callback).
        self.reads = []

    @classmethod
    def restart(cls, kvs, clock, observer):
        """A new job-manager: every active job is rebuilt from its
        eventlog in the KVS, then its state action runs."""
        jm = cls(kvs, clock, observer)
        for key in sorted(kvs.data, key=_jobid_of_key):
            if not key.startswith("job."):
                continue
            jobid = _jobid_of_key(key)
            entries = kvs.data[key]
            job = FakeJob(jobid, entries[0][2]["userid"])
            for entry in entries:
                job.eventlog.append(entry)
                jm._update(job, entry)
            if job.state == NEW:
                # "job ... not replayed: job state (NEW) is invalid after
                # replay": its directory is moved aside.
                kvs.data[f"{LOST_FOUND}.{f58(jobid)}.eventlog"] = kvs.data.pop(key)
                observer.dropped(jobid)
            elif job.state != INACTIVE:
                jm.jobs[jobid] = job
        for job in list(jm.jobs.values()):
            # The dependency check and the priority plugin take a job
            # that a crash sent back on its way to SCHED again.
            if job.state == DEPEND:
                jm.post(job, "depend")
            if job.state == PRIORITY:
                jm.post(job, "priority", {"priority": 16})
            jm._action(job)
        return jm

    def now(self):
        return self.clock.now

    # Jobs

    def submit(self, jobid, userid):
        """A job submitted (its eventlog written by ingest), then taken to
        SCHED."""
        job = FakeJob(jobid, userid)
        entry = (self.now(), "submit", {"userid": userid})
        job.eventlog.append(entry)
        self._update(job, entry)
        self.kvs.put(eventlog_key(jobid), (entry,))
        self.jobs[jobid] = job
        for name in ("validate", "depend", "priority"):
            self.post(job, name, {"priority": 16} if name == "priority" else None)
        return job

    def active(self):
        return [job for job in self.jobs.values() if job.state != INACTIVE]

    def post(self, job, name, context=None):
        """Post an event: processed now, or after those already queued."""
        entry = (self.now(), name, dict(context or {}))
        job.queue.append(entry)
        if len(job.queue) > 1:
            return
        while job.queue:
            self._process(job, job.queue[0])
            job.queue.pop(0)

    def _queued(self, job, name):
        return any(entry[1] == name for entry in job.queue)

    def _process(self, job, entry):
        old = job.state
        job.eventlog.append(entry)
        self.batch.append((job.id, entry))
        job.posted.add(entry[1])
        self._update(job, entry)
        self.observer.event(job, entry, old)
        self._callbacks(job, entry, old)
        self._action(job)

    @staticmethod
    def _update(job, entry):
        """What an event does to the job (event.c, event_job_update)."""
        _, name, context = entry
        if name == "validate" and job.state == NEW:
            job.state = DEPEND
        elif name == "depend" and job.state == DEPEND:
            job.state = PRIORITY
        elif name == "priority" and job.state == PRIORITY:
            job.state = SCHED
        elif name == "exception":
            if job.state not in (NEW, INACTIVE) and context.get("severity") == 0:
                job.state = CLEANUP
        elif name == "alloc":
            job.has_resources = True
            if job.state == SCHED:
                job.state = RUN
        elif name == "start":
            job.started = True
        elif name == "free":
            job.has_resources = False
        elif name == "finish":
            if job.state == RUN:
                job.state = CLEANUP
        elif name == "clean":
            if job.state == CLEANUP:
                job.state = INACTIVE
        elif name.startswith("prolog-"):
            if not job.start_pending:
                _perilog(job, name)
        elif name.startswith("epilog-"):
            if job.state == CLEANUP:
                _perilog(job, name)

    def _callbacks(self, job, entry, old):
        port = self.port
        if port is None:
            return
        name = entry[1]
        if name in ("finish", "free") and port.subscribed(job.id):
            port.driver.on_event(job.id, name, job.state)
        if job.state == old:
            return
        if job.state == RUN and port.wanted(job.id, RUN):
            port.driver.on_run(job.id)
        elif job.state == CLEANUP and port.marked(job.id):
            port.driver.on_cleanup(job.id)
        elif job.state == INACTIVE and port.marked(job.id):
            port.driver.on_inactive(job.id)
            port.untrack(job.id)

    def _action(self, job):
        """The state action (event.c, event_job_action)."""
        if job.state == RUN:
            if (
                not job.start_pending
                and not job.perilog
                and not self._queued(job, "prolog-start")
            ):
                job.start_pending = True
                self.observer.start_request(job)
        elif job.state == CLEANUP:
            quiet = not job.perilog and not self._queued(job, "epilog-start")
            if (
                job.has_resources
                and quiet
                and not job.start_pending
                and not job.free_posted
            ):
                job.free_posted = True
                self.post(job, "free")
            # The free above may have ended the job already.
            if (
                job.state == CLEANUP
                and not job.start_pending
                and not job.has_resources
                and quiet
                and not self._queued(job, "clean")
            ):
                self.post(job, "clean")

    # The exec system

    def exec_start(self, job):
        """The job's shells started."""
        self.post(job, "start")

    def exec_end(self, job):
        """The job's shells exited (or were killed): finish, if it
        started, then the final release of its start request."""
        if job.started:
            self.post(job, "finish")
        job.start_pending = False
        self.post(job, "release", {"ranks": "all", "final": True})

    # The KVS

    def answer_read(self, index):
        """The KVS answers eventlog lookup number ``index`` with what it
        holds now."""
        port, jobid, callback = self.reads.pop(index)
        if not port.open:
            return
        entries = self.kvs.data.get(eventlog_key(jobid))
        if entries is None:
            callback(None, _oserror(errno.ENOENT))
        else:
            callback([(t, name, dict(context)) for t, name, context in entries], None)

    def flush(self):
        """The event batch timer: send the events posted so far."""
        batch, self.batch = self.batch, []
        if not batch:
            return

        def apply(data):
            for jobid, entry in batch:
                key = eventlog_key(jobid)
                data[key] = data.get(key, ()) + (entry,)

        self.kvs.commit(apply, False, None)


def _perilog(job, name):
    if name.endswith("-start"):
        job.perilog += 1
    elif name.endswith("-finish") and job.perilog > 0:
        job.perilog -= 1


def _jobid_of_key(key):
    parts = key.split(".")
    return int(parts[1]) if len(parts) == 3 and parts[0] == "job" else -1


class Clock:
    """The fake time, shared by every run of the instance.  It moves only
    when the test says, and by a microsecond at each reading, so that no
    two things happen at the same time (the job-manager's and the gate's
    timestamps are merged in time order on recovery)."""

    TICK = 1e-6

    def __init__(self, now=1_700_000_000.0):
        self._now = now

    @property
    def now(self):
        self._now += self.TICK
        return self._now

    @now.setter
    def now(self, value):
        self._now = value


class FakeTimer:
    def __init__(self, port, deadline, callback):
        self.port = port
        self.deadline = deadline
        self.callback = callback
        self.armed = True

    def stop(self):
        self.armed = False


class JobtapPort:
    """The gate's port for one plugin instance of the job-manager ``jm``;
    ``driver`` gets the job-manager's callbacks."""

    def __init__(self, jm, driver):
        self.jm = jm
        self.driver = driver
        self.open = True
        self.marks = {}
        self.wants = set()
        #: Jobs whose exceptions are watched (runtime_watch_exceptions).
        self.exceptions = set()
        self.timers = []
        self.logs = []
        #: Streams this port answered, by sink: the activations sent.
        self.sent = {}

    def close(self):
        """The plugin instance is gone: its timers, commit answers and
        eventlog lookups no longer reach it."""
        self.open = False
        for timer in self.timers:
            timer.stop()
        if self.jm.port is self:
            self.jm.port = None

    # What the job-manager asks of the runtime

    def marked(self, jobid):
        return jobid in self.marks

    def subscribed(self, jobid):
        return self.marks.get(jobid, False)

    def watched(self, jobid):
        """The job's exceptions come from the instance's job-exception
        events (without a note)."""
        return jobid in self.marks and jobid in self.exceptions

    def wanted(self, jobid, state):
        return jobid in self.marks and jobid in self.wants

    # The port interface

    def now(self):
        return self.jm.now()

    def stamp(self):
        return stamp(self.jm.now())

    def job_info(self, jobid):
        job = self.jm.jobs.get(jobid)
        if job is None:
            raise _oserror(errno.ENOENT)
        return job.state, job.userid

    def posted(self, jobid, name):
        job = self.jm.jobs.get(jobid)
        return bool(job) and name in job.posted

    def _post(self, jobid, name, context):
        job = self.jm.jobs.get(jobid)
        if job is None or job.state == INACTIVE:
            raise _oserror(errno.ENOENT)
        self.jm.post(job, name, context)

    def epilog_start(self, jobid, description, timeout=None):
        context = {"description": description, MARKER: True}
        if timeout is not None:
            context["timeout"] = timeout
        self._post(jobid, "epilog-start", context)

    def epilog_finish(self, jobid, description, status):
        context = {"description": description, "status": status, MARKER: True}
        self._post(jobid, "epilog-finish", context)

    def prolog_start(self, jobid, description, timeout=None):
        context = {"description": description, MARKER: True}
        if timeout is not None:
            context["timeout"] = timeout
        self._post(jobid, "prolog-start", context)

    def prolog_finish(self, jobid, description, status):
        context = {"description": description, "status": status, MARKER: True}
        self._post(jobid, "prolog-finish", context)

    def raise_exception(self, jobid, note):
        self._post(jobid, "exception", {"type": "epilog", "severity": 1, "note": note})

    def raise_fatal(self, jobid, note):
        self._post(jobid, "exception", {"type": "prolog", "severity": 0, "note": note})

    def raise_job_exception(self, jobid, type, severity, note):
        context = {"type": type, "severity": severity, "note": note}
        self._post(jobid, "exception", context)

    def annotate(self, jobid, text):
        self._post(jobid, "memo", {"epilog_gate": text})

    def want_run(self, jobid):
        self.wants.add(jobid)

    def cleanup_exception(self, call):
        return fatal_exception(call)

    def track(self, jobid, events=False):
        if jobid not in self.jm.jobs:
            raise _oserror(errno.ENOENT)
        # As the runtime: a job's events, once asked for, stay asked for.
        self.marks[jobid] = self.marks.get(jobid, False) or events

    def untrack(self, jobid):
        self.marks.pop(jobid, None)
        self.exceptions.discard(jobid)

    def watch_exceptions(self, jobid):
        # As the runtime: a job that had an exception is subscribed.
        if self.posted(jobid, "exception"):
            self.track(jobid, events=True)
            return
        self.track(jobid)
        self.exceptions.add(jobid)

    def timer(self, delay, callback):
        timer = FakeTimer(self, self.now() + delay, callback)
        self.timers.append(timer)
        return timer

    def kvs_commit(self, key, text, append, callback, sync=False):
        def apply(data):
            data[key] = (data.get(key, "") if append else "") + text

        def answer(error):
            if self.open:
                callback(error)

        self.jm.kvs.commit(apply, sync, answer)

    def kvs_commit_ops(self, ops, callback, sync=False):
        """As Jobtap.kvs_commit_ops: puts, appends, unlinks, and tree
        objects of values as :meth:`kvs_lookup_treeobj` answers them (the
        model's snapshots fit one commit)."""

        def apply(data):
            for op, key, value in ops:
                if op == "put":
                    data[key] = value
                elif op == "put_treeobj":
                    data[key] = base64.b64decode(json.loads(value)["data"]).decode()
                elif op == "append":
                    data[key] = data.get(key, "") + value
                elif op == "unlink":
                    for name in [
                        k for k in data if k == key or k.startswith(key + ".")
                    ]:
                        del data[name]
                else:
                    raise ValueError(f"{op!r}: not in the model")

        def answer(error):
            if self.open:
                callback(error)

        self.jm.kvs.commit(apply, sync, answer)

    def kvs_lookup_treeobj(self, key, callback):
        """As Jobtap.kvs_lookup_treeobj, answered at once from what the
        KVS has applied: a value's data in a ``val``."""
        value = self.jm.kvs.data.get(key)
        if value is None:
            callback(None, _oserror(errno.ENOENT))
            return
        data = base64.b64encode(value.encode()).decode()
        callback(json.dumps({"data": data, "type": "val", "ver": 1}), None)

    def kvs_dir(self, key):
        """As Jobtap.kvs_dir: the names in directory ``key``."""
        data = self.jm.kvs.data
        if key in data:
            raise _oserror(errno.ENOTDIR)
        names = {
            k[len(key) + 1 :].split(".")[0] for k in data if k.startswith(key + ".")
        }
        return sorted(names) or None

    def send_activation(self, sink, activation):
        if not self.open or not sink.open:
            return False
        sink.received.append(activation)
        return True

    def log(self, level, text):
        self.logs.append((level, text))

    # What the plugin's glue uses (flux_epilog_gate/jobtap/facade.py)

    def seen_jobmanager(self):
        seen, self.jm.seen_plugin = self.jm.seen_plugin, True
        return seen

    def kvs_get(self, key):
        """As Jobtap.kvs_get: the value as bytes (an empty one comes back
        from the KVS as NULL: ``b""``), None if there is none."""
        try:
            value = self.jm.kvs.lookup(key)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return None
            raise
        if value == _ffi.NULL:
            return b""
        return _ffi.string(value)

    def read_eventlog(self, jobid, callback):
        """As Jobtap.read_eventlog: answered when the test says so
        (:meth:`FakeInstance.answer_read`)."""
        self.jm.reads.append((self, jobid, callback))

    def read_kvs(self, key, callback):
        """As Jobtap.read_kvs, answered at once from what the KVS has
        applied (an eventlog as its text)."""
        value = self.jm.kvs.data.get(key)
        if value is None:
            callback(None, _oserror(errno.ENOENT))
            return
        if isinstance(value, tuple):
            value = "".join(
                json.dumps({"timestamp": t, "name": name, "context": context}) + "\n"
                for t, name, context in value
            )
        callback(value.encode(), None)


class Sink:
    """A watch stream: what it received, and whether it is still open."""

    def __init__(self, number):
        self.number = number
        self.open = True
        self.received = []
        self.ended = None

    def end(self, why):
        self.open = False
        self.ended = why

    def __repr__(self):
        return f"Sink({self.number})"
