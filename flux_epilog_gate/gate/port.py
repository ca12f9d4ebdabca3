"""The port: everything the gate does to the job-manager.

The gate is plain Python: it calls the job-manager only through an
object of this :class:`Port` protocol, handed to it at construction
(the real one is :class:`flux_epilog_gate.plugin.port.GatePort`; the
unit tests use ``t/fakeport.py``'s ``FakePort``; ``t/test_unit_port.py``
checks both against it).  Job ids are integers, descriptions text.
"""

from typing import Protocol


class Port(Protocol):
    """What the gate asks of the job-manager."""

    # Time and the log

    def now(self):
        """The current time, seconds since the epoch."""

    def stamp(self):
        """``holds.stamp(now())``: the time of a hold-log line and its
        text."""

    def log(self, level, text):
        """Log a line (syslog levels)."""

    def timer(self, delay, callback):
        """Call ``callback()`` after ``delay`` seconds; returns an object
        with ``stop()``."""

    # Jobs

    def job_info(self, jobid):
        """``(state, userid)`` of a job; raises OSError(ENOENT) for
        unknown jobs."""

    def posted(self, jobid, name):
        """True if event ``name`` was posted to the job since the
        job-manager started."""

    def track(self, jobid, events=False):
        """Start sending the job's callbacks to the gate (with
        ``events``, also its ``finish`` and ``free`` events, asked for
        only while the epilog point waits on them: see
        :mod:`~flux_epilog_gate.gate.epilog`); a job's events, once asked
        for, are sent until it is untracked."""

    def untrack(self, jobid):
        """Stop sending the job's callbacks to the gate."""

    def want_run(self, jobid):
        """Also send the tracked job's entry to RUN to the gate."""

    def watch_exceptions(self, jobid):
        """Track the job and send its exceptions to the gate (for its
        listeners) without its other events: a little after each was
        posted, its context without a ``note``."""

    def cleanup_exception(self, call):
        """The context of the fatal exception whose event moved a job to
        CLEANUP, read from ``call`` (what the job's entry to CLEANUP came
        with, given to ``Gate.on_cleanup``), or None if another event
        did."""

    def read_eventlog(self, jobid, callback):
        """Read the job's eventlog without blocking; later call
        ``callback(events, error)`` exactly once: a list of ``(timestamp,
        name, context)``, or None and an OSError."""

    def read_kvs(self, key, callback):
        """Read KVS ``key`` without blocking; later call ``callback(data,
        error)`` exactly once: its bytes, or None and an OSError (where a
        job dropped at a restart went: see :mod:`~flux_epilog_gate.gate.lost`)."""

    # The events the gate posts, its annotation and exceptions

    def epilog_start(self, jobid, description, timeout=None):
        """Post ``epilog-start``, marked as the gate's, with the hold's
        timeout (None: none) so that the eventlog alone tells an active
        hold."""

    def epilog_finish(self, jobid, description, status):
        """Post ``epilog-finish``."""

    def prolog_start(self, jobid, description, timeout=None):
        """Post ``prolog-start``, marked as the gate's."""

    def prolog_finish(self, jobid, description, status):
        """Post ``prolog-finish``, marked as the gate's."""

    def depend_start(self, jobid, description, timeout=None):
        """Post ``dependency-add``, marked as the gate's."""

    def depend_finish(self, jobid, description):
        """Post ``dependency-remove``, marked as the gate's."""

    def annotate(self, jobid, text):
        """Set the job's ``epilog_gate`` user annotation to ``text``
        (None: remove it)."""

    def raise_exception(self, jobid, note):
        """Raise a non-fatal job exception (a failed epilog hold)."""

    def raise_fatal(self, jobid, note):
        """Raise a fatal job exception (a failed prolog hold)."""

    def raise_dependency(self, jobid, note):
        """Raise a fatal job exception (a failed dependency hold)."""

    def raise_job_exception(self, jobid, type, severity, note):
        """Raise a job exception of any type (one a releaser raised,
        raised again by recovery should a crash lose it)."""

    def cancel(self, jobid, note):
        """Cancel the job (at shutdown-timeout)."""

    # The hold log

    def kvs_commit(self, key, text, append, callback, sync=False):
        """Write (with ``append``, append) ``text`` to KVS key ``key``
        without blocking (with ``sync``, checkpointed before it
        answers); later call ``callback(error)``, with None on success."""

    def kvs_commit_ops(self, ops, callback, sync=False):
        """Commit ``ops``, a list of ``(op, key, value)`` (op ``put``,
        ``append``, ``put_treeobj`` or ``unlink``) in one transaction,
        applied in order, all or none; later call ``callback(error)`` (a
        snapshot of the hold log in parts)."""

    def kvs_lookup_treeobj(self, key, callback):
        """Look up KVS key ``key``'s tree object (JSON text) without
        blocking; later call ``callback(treeobj, error)``."""

    def kvs_get(self, key):
        """The value of KVS key ``key`` as bytes (``b""`` if empty),
        waited for; None if there is no such key; raises OSError on other
        failures.  For the load only
        (:mod:`~flux_epilog_gate.gate.loader`)."""

    def kvs_dir(self, key):
        """The names in KVS directory ``key``, waited for; None if there
        is no such key (for the load only, like :meth:`kvs_get`)."""

    # Watchers

    def send_activation(self, sink, activation):
        """Send one response (a dict ``{id, description, userid, ran,
        point[, aborted]}``, or a lost hold's, see
        :mod:`~flux_epilog_gate.gate.lostrecord`) to a watcher; returns
        False if the watcher is gone."""

    def end_watch(self, sink, errnum, text):
        """End a watcher's stream with an error."""

    # The instance's shutdown (:mod:`~flux_epilog_gate.gate.shutdown`)

    def restartable(self):
        """True if the instance starts again from its state after a
        shutdown."""

    def job_cleanup(self):
        """True if the instance's shutdown runs flux-core's job cleanup
        step."""

    def abort_cleanup(self):
        """Make the broker abort its cleanup step, as a signal does."""
