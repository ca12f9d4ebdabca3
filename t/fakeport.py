"""A fake job-manager for unit tests of :class:`flux_epilog_gate.gate.Gate`.

:class:`FakePort` implements the port interface documented in
:mod:`flux_epilog_gate.gate` with no broker:

- jobs are declared with :meth:`FakePort.add_job` and driven by the test
  (:meth:`set_state`, :meth:`happen` for events the job-manager posts);
- every event the gate posts, every ``epilog-finish`` and every exception
  it raises is recorded per job, in order, as ``(name, context)``;
  exceptions appear as ``("exception", {"note": ...})``;
- the clock is fake and only moves with :meth:`advance`, which fires the
  timers that come due, in deadline order;
- ``send_activation`` records watcher payloads per sink; :meth:`kill`
  makes a sink dead, so ``send_activation`` to it answers False;
- the KVS is a dict, ``kvs``; ``kvs_commit`` applies each commit at once
  and records it in ``commits`` (with :attr:`defer_commits` set, commits
  wait in ``pending_commits`` until :meth:`complete_commit`);
- ``kvs_commit_ops`` applies its operations in order, all or none (a
  commit waits in ``pending_commits`` as ``(OPS, ops, sync, callback)``,
  and is recorded in :attr:`txns`); ``kvs_lookup_treeobj`` answers a
  value's tree object (a ``val``, its data in base64), at once or, with
  :attr:`defer_commits` set, once :meth:`complete_lookup` is called;
  :meth:`orphan` makes what is pending complete without calling back (the
  plugin was unloaded);
- ``kvs_get`` answers the dict's value as bytes (a value may also be
  set to bytes, to store what is not text); the dict's keys are paths:
  ``kvs_dir`` answers the names under one, ``unlink`` removes what is
  under it too; ``read_eventlog`` answers
  :attr:`eventlogs` (``{id: [(timestamp, name, context)]}``, default
  empty) at once, or with :attr:`defer_eventlogs` set, once
  :meth:`complete_eventlog` is called, or ENOENT for the jobs in
  :attr:`purged`; ``read_kvs`` answers a value of the dict at once;
- ``restartable()`` answers :attr:`FakePort.restart`; ``abort_cleanup()``
  counts its calls in :attr:`FakePort.aborted`; ``cancel()`` records a
  ``("cancel", {"note": ...})`` and puts a running job in CLEANUP (fails
  with ``fail(CANCEL)``);
- :meth:`fail` makes one kind of post (or ``raise_exception``, or with
  ``KVS`` a commit, or with ``"kvs_get"`` the load's read of the hold
  log) fail with OSError, to check what the gate does when the
  job-manager refuses;
- ``job_cleanup()`` answers :attr:`FakePort.cleanup_step`.
"""

import base64
import errno
import json
import os
from collections import defaultdict

from flux_epilog_gate.gate import CLEANUP, RUN, SCHED
from flux_epilog_gate.gate.holds import stamp

#: ``fail()`` key that makes ``raise_exception`` fail.
EXCEPTION = "exception"

#: ``fail()`` key that makes ``kvs_commit`` report an error.
KVS = "kvs"

#: ``fail()`` key that makes ``cancel`` fail.
CANCEL = "cancel"

#: ``fail()`` key that makes ``kvs_lookup_treeobj`` fail.
LOOKUP = "lookup"

#: The key of a pending commit made by ``kvs_commit_ops``.
OPS = "<ops>"


class FakeJob:
    def __init__(self, state, userid, happened):
        self.state = state
        self.userid = userid
        self.happened = set(happened)


class FakeTimer:
    """A timer of the fake reactor; ``stop()`` disarms it."""

    def __init__(self, port, delay, callback):
        self.port = port
        self.delay = delay
        self.deadline = port.clock + delay
        self.callback = callback
        self.stopped = False
        self.fired = False

    @property
    def armed(self):
        return not (self.stopped or self.fired)

    def stop(self):
        self.stopped = True

    def fire(self):
        self.fired = True
        self.callback()

    def __repr__(self):
        return f"FakeTimer(delay={self.delay}, deadline={self.deadline})"


class FakePort:
    """The gate's port, faked.  See the module docstring."""

    def __init__(self, clock=1_700_000_000.0):
        self.clock = clock
        self.jobs = {}
        self.events = defaultdict(list)
        self.tracked = {}
        self.track_calls = []
        self.exceptions_watched = set()
        self.timers = []
        self.sent = defaultdict(list)
        self.dead = set()
        self.ended = {}
        self.logs = []
        self.failures = {}
        self.kvs = {}
        self.commits = []
        self.synced = []
        self.defer_commits = False
        self.pending_commits = []
        self.txns = []
        self.pending_lookups = []
        self.run_wanted = set()
        self.restart = True
        self.aborted = 0
        self.eventlogs = {}
        #: Jobs whose eventlog is gone: reading it answers ENOENT.
        self.purged = set()
        self.defer_eventlogs = False
        self.pending_eventlogs = []
        self.cleanup_step = True

    # Driving the fake from a test

    def add_job(self, jobid, state=SCHED, userid=1000, happened=()):
        """Declare a job; ``happened`` are events the job-manager already
        posted to it (since it started)."""
        self.jobs[jobid] = FakeJob(state, userid, happened)
        return jobid

    def set_state(self, jobid, state):
        self.jobs[jobid].state = state

    def happen(self, jobid, *names):
        """The job-manager posts events ``names`` to the job."""
        self.jobs[jobid].happened.update(names)

    def forget_job(self, jobid):
        """The job-manager no longer knows the job (job_info: ENOENT)."""
        del self.jobs[jobid]

    def advance(self, seconds):
        """Move the clock on by ``seconds``, firing timers as they come due."""
        target = self.clock + seconds
        while True:
            due = [t for t in self.timers if t.armed and t.deadline <= target]
            if not due:
                break
            timer = min(due, key=lambda t: t.deadline)
            self.clock = max(self.clock, timer.deadline)
            timer.fire()
        self.clock = target

    def armed_timers(self):
        """Armed timers."""
        return [t for t in self.timers if t.armed]

    def complete_commit(self, error=None):
        """The oldest deferred commit answers: applied, or failed with
        errno ``error``."""
        key, text, append, callback = self.pending_commits.pop(0)
        if error is not None:
            callback(OSError(error, os.strerror(error)))
            return
        if key == OPS:
            self._apply_ops(text)
        else:
            self._apply(key, text, append)
        callback(None)

    def answer_all(self, limit=10000):
        """Answer every deferred commit and lookup, in order, until none
        is left; AssertionError if they never stop."""
        for _ in range(limit):
            if self.pending_commits:
                self.complete_commit()
            elif self.pending_lookups:
                self.complete_lookup()
            else:
                return
        raise AssertionError("commits never stop")

    def complete_lookup(self, error=None):
        """The oldest deferred tree object lookup answers (or fails with
        errno ``error``)."""
        key, callback = self.pending_lookups.pop(0)
        if error is None:
            self._answer_lookup(key, callback)
        else:
            callback(None, OSError(error, os.strerror(error)))

    def orphan(self):
        """The plugin is unloaded: what it sent is still carried out (or
        fails), but it is never called back."""
        self.pending_commits = [
            (key, text, append, lambda error: None)
            for key, text, append, _ in self.pending_commits
        ]
        self.pending_lookups = [
            (key, lambda treeobj, error: None) for key, _ in self.pending_lookups
        ]

    def complete_eventlog(self, error=None):
        """The oldest deferred eventlog read answers: with the job's
        :attr:`eventlogs`, or failed with errno ``error``."""
        jobid, callback = self.pending_eventlogs.pop(0)
        if error is not None:
            callback(None, OSError(error, os.strerror(error)))
            return
        callback(list(self.eventlogs.get(jobid, [])), None)

    def kill(self, sink):
        """The watcher behind ``sink`` disconnected."""
        self.dead.add(sink)

    def fail(self, name, errnum=errno.EIO):
        """Make posting event ``name`` (or, with ``EXCEPTION``, raising a job
        exception) fail with ``errnum``."""
        self.failures[name] = errnum

    def names(self, jobid):
        """Names of what the gate posted to the job, in order."""
        return [name for name, _ in self.events[jobid]]

    def posted_by_gate(self, jobid, name):
        """Contexts of the events ``name`` the gate posted to the job."""
        return [context for n, context in self.events[jobid] if n == name]

    def outstanding(self, jobid):
        """Descriptions of epilog actions started but not finished: what
        keeps the job-manager from posting ``clean``."""
        open_ = []
        for name, context in self.events[jobid]:
            if name == "epilog-start":
                open_.append(context["description"])
            elif name == "epilog-finish":
                open_.remove(context["description"])
        return sorted(open_)

    def prologs_open(self, jobid):
        """Descriptions of prolog actions started but not finished: what
        keeps the job-manager from sending the start request."""
        open_ = []
        for name, context in self.events[jobid]:
            if name == "prolog-start":
                open_.append(context["description"])
            elif name == "prolog-finish":
                open_.remove(context["description"])
        return sorted(open_)

    def dependencies_open(self, jobid):
        """Descriptions of the gate's dependencies added and not removed:
        what keeps the job in DEPEND."""
        open_ = []
        for name, context in self.events[jobid]:
            if name == "dependency-add":
                open_.append(context["description"])
            elif name == "dependency-remove":
                open_.remove(context["description"])
        return sorted(open_)

    def notes(self, jobid):
        return [context["note"] for context in self.posted_by_gate(jobid, EXCEPTION)]

    # The port interface

    def now(self):
        return self.clock

    def stamp(self):
        return stamp(self.clock)

    def job_info(self, jobid):
        job = self.jobs.get(jobid)
        if job is None:
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
        return job.state, job.userid

    def posted(self, jobid, name):
        job = self.jobs.get(jobid)
        return bool(job and name in job.happened) or name in self.names(jobid)

    def _maybe_fail(self, name):
        errnum = self.failures.get(name)
        if errnum is not None:
            raise OSError(errnum, os.strerror(errnum))

    def epilog_start(self, jobid, description, timeout=None):
        self._maybe_fail("epilog-start")
        context = {"description": description}
        if timeout is not None:
            context["timeout"] = timeout
        self.events[jobid].append(("epilog-start", context))

    def epilog_finish(self, jobid, description, status):
        self._maybe_fail("epilog-finish")
        self.events[jobid].append(
            ("epilog-finish", {"description": description, "status": status})
        )

    def annotate(self, jobid, text):
        self._maybe_fail("memo")
        self.events[jobid].append(("memo", {"epilog_gate": text}))

    def raise_exception(self, jobid, note):
        self._maybe_fail(EXCEPTION)
        self.events[jobid].append((EXCEPTION, {"note": note}))

    def prolog_start(self, jobid, description, timeout=None):
        self._maybe_fail("prolog-start")
        context = {"description": description, "epilog_gate": True}
        if timeout is not None:
            context["timeout"] = timeout
        self.events[jobid].append(("prolog-start", context))

    def prolog_finish(self, jobid, description, status):
        self._maybe_fail("prolog-finish")
        self.events[jobid].append(
            (
                "prolog-finish",
                {"description": description, "status": status, "epilog_gate": True},
            )
        )

    def raise_fatal(self, jobid, note):
        self._maybe_fail(EXCEPTION)
        self.events[jobid].append((EXCEPTION, {"note": note, "severity": 0}))

    def depend_start(self, jobid, description, timeout=None):
        self._maybe_fail("dependency-add")
        context = {"description": description, "epilog_gate": True}
        if timeout is not None:
            context["timeout"] = timeout
        self.events[jobid].append(("dependency-add", context))

    def depend_finish(self, jobid, description):
        self._maybe_fail("dependency-remove")
        self.events[jobid].append(
            ("dependency-remove", {"description": description, "epilog_gate": True})
        )

    def raise_dependency(self, jobid, note):
        self._maybe_fail(EXCEPTION)
        self.events[jobid].append(
            (EXCEPTION, {"note": note, "severity": 0, "type": "dependency"})
        )

    def raise_job_exception(self, jobid, type, severity, note):
        self._maybe_fail(EXCEPTION)
        self.events[jobid].append(
            (EXCEPTION, {"note": note, "severity": severity, "type": type})
        )

    def want_run(self, jobid):
        self.run_wanted.add(jobid)

    def watch_exceptions(self, jobid):
        self.track(jobid)
        self.exceptions_watched.add(jobid)

    def cleanup_exception(self, call):
        # The tests give the exception's context itself.
        return call

    def track(self, jobid, events=False):
        # As the runtime: a job's events, once asked for, stay asked for.
        self.tracked[jobid] = self.tracked.get(jobid, False) or events
        self.track_calls.append((jobid, events))

    def untrack(self, jobid):
        self.tracked.pop(jobid, None)

    def kvs_commit(self, key, text, append, callback, sync=False):
        self.synced.append(sync)
        if self.defer_commits:
            self.pending_commits.append((key, text, append, callback))
            return
        errnum = self.failures.get(KVS)
        if errnum is None and self._below(key):
            errnum = errno.EISDIR
        if errnum is not None:
            callback(OSError(errnum, os.strerror(errnum)))
            return
        self._apply(key, text, append)
        callback(None)

    def _apply(self, key, text, append):
        old = self.kvs.get(key, "") if append else ""
        self.kvs[key] = old + (text.encode() if isinstance(old, bytes) else text)
        self.commits.append((key, text, append))

    def kvs_get(self, key):
        self._maybe_fail("kvs_get")
        value = self.kvs.get(key)
        if value is None and self._below(key):
            raise OSError(errno.EISDIR, os.strerror(errno.EISDIR))
        if value is None or isinstance(value, bytes):
            return value
        return value.encode("utf-8", "surrogateescape")

    def _below(self, key):
        """The keys in directory ``key`` (the dict's keys are paths)."""
        prefix = key + "."
        return [k for k in self.kvs if k.startswith(prefix)]

    def hold_log(self):
        """The hold log as the gate's load reads it: its segments in
        order, then its key (text)."""
        from flux_epilog_gate.gate.holdlog import KEY, read_segments

        segments, _ = read_segments(self)
        parts = [t for _, t in segments] + [self.kvs.get(KEY, "")]
        return "".join(p.decode() if isinstance(p, bytes) else p for p in parts)

    def kvs_dir(self, key):
        self._maybe_fail("kvs_dir")
        if key in self.kvs:
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        names = {k[len(key) + 1 :].split(".")[0] for k in self._below(key)}
        return sorted(names) or None

    def read_eventlog(self, jobid, callback):
        if self.defer_eventlogs:
            self.pending_eventlogs.append((jobid, callback))
            return
        if jobid in self.purged:
            callback(None, OSError(errno.ENOENT, os.strerror(errno.ENOENT)))
            return
        callback(list(self.eventlogs.get(jobid, [])), None)

    def read_kvs(self, key, callback):
        """A KVS value as bytes, at once; ENOENT if there is none."""
        value = self.kvs.get(key)
        if value is None:
            callback(None, OSError(errno.ENOENT, os.strerror(errno.ENOENT)))
            return
        callback(value if isinstance(value, bytes) else value.encode(), None)

    def timer(self, delay, callback):
        timer = FakeTimer(self, delay, callback)
        self.timers.append(timer)
        return timer

    def send_activation(self, sink, payload):
        if sink in self.dead:
            return False
        self.sent[sink].append(payload)
        return True

    def end_watch(self, sink, errnum, text):
        self.ended[sink] = (errnum, text)

    def log(self, level, text):
        self.logs.append((level, text))

    def restartable(self):
        return self.restart

    def abort_cleanup(self):
        self.aborted += 1

    def job_cleanup(self):
        return self.cleanup_step

    def cancel(self, jobid, note):
        self._maybe_fail(CANCEL)
        self.events[jobid].append((CANCEL, {"note": note}))
        if self.jobs[jobid].state == RUN:
            self.jobs[jobid].state = CLEANUP

    def kvs_commit_ops(self, ops, callback, sync=False):
        self.synced.append(sync)
        if self.defer_commits:
            self.pending_commits.append((OPS, list(ops), sync, callback))
            return
        errnum = self.failures.get(KVS)
        if errnum is not None:
            callback(OSError(errnum, os.strerror(errnum)))
            return
        self._apply_ops(ops)
        callback(None)

    def _apply_ops(self, ops):
        kvs = dict(self.kvs)
        for op, key, value in ops:
            if op == "put":
                kvs[key] = value
            elif op == "append":
                old = kvs.get(key, "")
                kvs[key] = old + (value.encode() if isinstance(old, bytes) else value)
            elif op == "put_treeobj":
                treeobj = json.loads(value)
                assert treeobj["type"] == "val", treeobj
                kvs[key] = base64.b64decode(treeobj["data"]).decode()
            elif op == "unlink":
                kvs.pop(key, None)
                for below in [k for k in kvs if k.startswith(key + ".")]:
                    del kvs[below]
            else:
                raise ValueError(f"{op!r} is not a KVS transaction operation")
        self.kvs.clear()
        self.kvs.update(kvs)
        self.txns.append(list(ops))

    def kvs_lookup_treeobj(self, key, callback):
        if self.defer_commits:
            self.pending_lookups.append((key, callback))
            return
        errnum = self.failures.get(LOOKUP)
        if errnum is not None:
            callback(None, OSError(errnum, os.strerror(errnum)))
            return
        self._answer_lookup(key, callback)

    def _answer_lookup(self, key, callback):
        try:
            treeobj = self._treeobj(key)
        except OSError as exc:
            callback(None, exc)
            return
        callback(treeobj, None)

    def _treeobj(self, key):
        value = self.kvs.get(key)
        if value is None:
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
        data = value if isinstance(value, bytes) else value.encode()
        return json.dumps(
            {"ver": 1, "type": "val", "data": base64.b64encode(data).decode()}
        )
