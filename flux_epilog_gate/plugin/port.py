"""The gate's port (:class:`flux_epilog_gate.gate.port.Port`) on the
jobtap runtime.

:class:`GatePort` is what the gate sees of a plugin instance's
:class:`~flux_epilog_gate.jobtap.facade.Jobtap`: the port's calls and no
more.  Those the runtime's services answer as they are, it binds to them
once (:data:`SERVED`); the others are the gate's own: its marked epilog,
prolog and dependency events, its annotation, its exception types, and
the answers of a hold's life, packed in the gate's C (fastpath.c).
"""

import os

from ..gate.holds import EXCEPTION_SEVERITY, EXCEPTION_TYPE

#: Job exception raised for a failed prolog hold: fatal, the job never
#: starts.
PROLOG_EXCEPTION_TYPE = "prolog"

#: Job exception raised for a failed dependency hold: fatal, the job
#: never runs.
DEPEND_EXCEPTION_TYPE = "dependency"

#: The job topic a job with prolog holds asks for (see gate/prolog.py).
RUN_TOPIC = "job.state.run"


def _timeout(timeout):
    return -1.0 if timeout is None else timeout


#: The port's calls the runtime answers as they are: each is bound to
#: the service's method at construction, so that the gate's call is the
#: service's (no frame of this class's in between).  By the path of the
#: method on the plugin's Jobtap.
SERVED = {
    "now": "now",
    "log": "log",
    "timer": "timer",
    "job_info": "jobs.info",
    "posted": "jobs.posted",
    "cancel": "jobs.cancel",
    "read_eventlog": "kvs.read_eventlog",
    "read_kvs": "kvs.read",
    "kvs_commit": "kvs.commit",
    "kvs_commit_ops": "kvs.commit_ops",
    "kvs_lookup_treeobj": "kvs.lookup_treeobj",
    "kvs_get": "kvs.get",
    "kvs_dir": "kvs.dir",
    "end_watch": "messages.respond_error",
    "restartable": "broker.restartable",
    "abort_cleanup": "broker.abort_cleanup",
}


def served(jobtap, path):
    """The method of ``jobtap`` at ``path`` (a key of :data:`SERVED`'s
    values)."""
    target = jobtap
    for name in path.split("."):
        target = getattr(target, name)
    return target


def fatal_exception(job):
    """The context of the fatal exception that moved ``job`` (the jobtap
    ``Job`` of a job.state.* call) to its state, or None if its entry is
    another event: the entry alone is decoded."""
    entry = job.get("entry")
    if not isinstance(entry, dict) or entry.get("name") != "exception":
        return None
    context = entry.get("context")
    if isinstance(context, dict) and context.get("severity") == 0:
        return context
    return None


class GatePort:
    """The job-manager, as the gate sees it (the runtime's ``jobtap``
    of one plugin instance)."""

    def __init__(self, jobtap):
        self.jobtap = jobtap
        for name, path in SERVED.items():
            setattr(self, name, served(jobtap, path))
        lib, ffi = jobtap.lib, jobtap.ffi
        # Called for every held job: bound once (a lookup on the library
        # costs more than the attribute).
        self._post_start = lib.gate_post_start
        self._post_finish = lib.gate_post_finish
        self._answer_hold = lib.gate_answer_hold
        self._answer_release = lib.gate_answer_release
        self._answer_error = lib.gate_answer_error
        self._respond_watch = lib.gate_respond_watch
        self._post_marked = lib.gate_post_marked
        self._mark = lib.runtime_mark
        self._unmark = lib.runtime_unmark
        self._incref = lib.flux_msg_incref
        self._decref = lib.flux_msg_decref
        self._stamp = lib.gate_stamp
        self._stamp_text = ffi.new("char[32]")
        self._string = ffi.string
        self._names = jobtap.names
        self._name = jobtap.name

    def stamp(self):
        """Now to the microsecond and its text (see holds.stamp), from C:
        one call where Python's own takes a dozen operations."""
        text = self._stamp_text
        t = self._stamp(text)
        return t, self._string(text).decode() or repr(t)

    def epilog_start(self, jobid, description, timeout=None):
        """Post ``epilog-start``, marked as the gate's (packed in C)."""
        if (
            self._post_start(
                self.jobtap.p,
                jobid,
                b"epilog-start",
                description.encode(),
                -1.0 if timeout is None else timeout,
            )
            < 0
        ):
            raise self.jobtap.oserror()

    def epilog_finish(self, jobid, description, status):
        """Post ``epilog-finish``, marked as the gate's (packed in C)."""
        if (
            self._post_finish(
                self.jobtap.p, jobid, b"epilog-finish", description.encode(), status
            )
            < 0
        ):
            raise self.jobtap.oserror()

    def prolog_start(self, jobid, description, timeout=None):
        """Post ``prolog-start``, marked as the gate's (packed in C)."""
        if (
            self._post_start(
                self.jobtap.p,
                jobid,
                b"prolog-start",
                description.encode(),
                -1.0 if timeout is None else timeout,
            )
            < 0
        ):
            raise self.jobtap.oserror()

    def prolog_finish(self, jobid, description, status):
        """Post ``prolog-finish``, marked as the gate's (packed in C)."""
        if (
            self._post_finish(
                self.jobtap.p, jobid, b"prolog-finish", description.encode(), status
            )
            < 0
        ):
            raise self.jobtap.oserror()

    def depend_start(self, jobid, description, timeout=None):
        """Post ``dependency-add``, marked as the gate's, with the hold's
        timeout (packed in C).  The job-manager takes it in NEW and DEPEND
        only (the gate checks the state itself): posted as an event, it
        counts exactly as one from ``flux_jobtap_dependency_add()``,
        which cannot carry the mark."""
        self.jobtap.check(
            self.jobtap.lib.gate_post_start(
                self.jobtap.p,
                jobid,
                b"dependency-add",
                description.encode(),
                _timeout(timeout),
            )
        )

    def depend_finish(self, jobid, description):
        """Post ``dependency-remove``, marked as the gate's (packed in C)."""
        if (
            self._post_marked(
                self.jobtap.p, jobid, b"dependency-remove", description.encode()
            )
            < 0
        ):
            raise self.jobtap.oserror()

    def raise_dependency(self, jobid, note):
        """A failed dependency hold: the job never runs."""
        self.jobtap.jobs.raise_exception(jobid, DEPEND_EXCEPTION_TYPE, 0, note)

    def annotate(self, jobid, text):
        """Set the job's ``user.epilog_gate`` annotation to ``text`` (None:
        remove it) with a memo event."""
        encoded = self.jobtap.ffi.NULL if text is None else text.encode()
        self.jobtap.check(self.jobtap.lib.gate_memo(self.jobtap.p, jobid, encoded))

    def raise_exception(self, jobid, note):
        """A failed or timed-out epilog hold: a non-fatal exception."""
        self.jobtap.jobs.raise_exception(
            jobid, EXCEPTION_TYPE, EXCEPTION_SEVERITY, note
        )

    def raise_fatal(self, jobid, note):
        """A failed prolog hold: the job never starts."""
        self.jobtap.jobs.raise_exception(jobid, PROLOG_EXCEPTION_TYPE, 0, note)

    def raise_job_exception(self, jobid, type, severity, note):
        """An exception a releaser raised, raised again after a crash lost
        it (see Lifecycle.finish_released)."""
        self.jobtap.jobs.raise_exception(jobid, type, severity, note)

    def track(self, jobid, events=False):
        """Send the job's callbacks to the gate; with ``events`` also its
        events (``finish``, ``free``; ``exception`` while the gate has
        listeners), from now on until it is untracked.  Each event of a
        job whose events are sent costs the job-manager a call with the
        job's arguments packed, whether anything is done with it or not:
        they are asked for only when needed."""
        if self._mark(self.jobtap.p, jobid, 1 if events else 0) < 0:
            raise self.jobtap.oserror()

    def untrack(self, jobid):
        self._unmark(self.jobtap.p, jobid)

    def job_cleanup(self):
        """True if the instance's shutdown runs flux-core's job cleanup
        step: rc1 pushes it unless ``FLUX_DISABLE_JOB_CLEANUP`` is set in
        the broker's environment, which is the job-manager's own."""
        return "FLUX_DISABLE_JOB_CLEANUP" not in os.environ

    def want_run(self, jobid):
        """Also send the tracked job's job.state.run to the gate."""
        self.jobtap.marks.want(jobid, RUN_TOPIC)

    def watch_exceptions(self, jobid):
        """See ``Marks.watch_exceptions``: no subscription to the job's
        events, so none of its later events costs the job-manager a
        call."""
        self.jobtap.marks.watch_exceptions(jobid)

    def cleanup_exception(self, call):
        """``call``: the job.state.cleanup call's job (a jobtap ``Job``)."""
        return fatal_exception(call)

    # Answers

    def send_activation(self, msg, activation):
        """Send one ``watch`` response; False if that failed."""
        if "lost" in activation:
            # A lost hold (seldom), of its own shape.
            return self.jobtap.messages.send(msg, activation)
        return (
            self._respond_watch(
                self.jobtap.h,
                msg,
                activation["id"],
                activation["description"].encode(),
                activation["userid"],
                activation["ran"],
                self._names.get(point := activation["point"]) or self._name(point),
                activation.get("aborted", False),
            )
            == 0
        )

    # A hold or release is answered once its record is durable.  Its
    # request is kept by a bare reference (own_request) rather than one
    # Python collects (keep_request): exactly one of the answers below, or
    # drop_request, gives that reference back, in the same C call as the
    # answer.  An answer that raises was never sent, and has given it
    # back all the same.

    def own_request(self, msg):
        """A reference on request ``msg`` that the caller owns (see
        above)."""
        return self._incref(msg)

    def drop_request(self, kept):
        """Give back ``kept`` unanswered."""
        self._decref(kept)

    def answer_hold(self, kept, hold):
        """Answer the ``hold`` request ``kept`` with ``hold``."""
        state = hold.state
        try:
            self._answer_hold(
                self.jobtap.h,
                kept,
                hold.id,
                hold.description.encode(),
                self._names.get(state) or self._name(state),
            )
        except BaseException:
            self._decref(kept)
            raise

    def answer_release(self, kept, released, reason=None):
        """Answer the ``release`` request ``kept``."""
        try:
            self._answer_release(
                self.jobtap.h,
                kept,
                released,
                self.jobtap.ffi.NULL if reason is None else reason.encode(),
            )
        except BaseException:
            self._decref(kept)
            raise

    def answer_error(self, kept, errnum, text):
        """Answer the request ``kept`` with an error."""
        try:
            self._answer_error(
                self.jobtap.h, kept, errnum, text.encode("utf-8", "replace")
            )
        except BaseException:
            self._decref(kept)
            raise
