"""Shutdown: the gate never holds an instance's shutdown without end.

When a Flux instance shuts down (``flux shutdown``, the end of the
initial program of ``flux start CMD`` or of a batch script, a signal),
its broker enters the CLEANUP state and runs flux-core's cleanup step,
which ends with ``flux queue idle``: it answers only once no job is in
RUN or CLEANUP, so a job the gate holds holds the whole shutdown.  The
gate therefore, from the moment the broker enters CLEANUP:

- names in the log (``flux dmesg``, and the output of ``flux shutdown``)
  each hold the shutdown waits on, once: at once the holds of jobs in RUN
  or CLEANUP, later each hold as it becomes active;
- ``shutdown-timeout`` seconds later ends the wait on every hold still
  outstanding, first taking each held job that has not ended as at its
  epilog point (see :meth:`Shutdown._end_processes`), then as
  ``shutdown-action`` says:

  ``keep``
      the holds stay as they are, recorded (an active hold by its
      ``epilog-start``, a pending one in the hold log), and the gate makes
      the broker abort its cleanup step the way a signal to the broker
      does.  The instance stops with the jobs still in CLEANUP; restarted
      from its state directory, it has them back, holds and all.
  ``finish``
      each active hold is finished with ``epilog-finish`` status 143
      (:data:`~flux_epilog_gate.gate.holds.SHUTDOWN_STATUS`) and a job exception
      naming it; a hold that becomes active after that is finished the
      same way at once.  The jobs then go on to ``clean``.
  ``auto`` (default)
      ``keep`` in an instance that restarts from its state (a persistent
      state directory, ``statedir-cleanup`` 0) and is not a job of another
      instance; ``finish`` in the others (a ``flux batch`` or ``flux
      alloc`` sub-instance, an instance without a persistent statedir),
      which never start again from their state;

- from that moment on refuses new holds (``ESHUTDOWN``): nothing would
  wait for them.  Until then holds are accepted; they are waited on, and
  named, with the others, within the same bound.

Pending holds of jobs that are neither running nor in CLEANUP do not hold
the shutdown: they stay in the hold log, whatever the action.

When the broker leaves CLEANUP with held jobs not ended (no cleanup step,
``FLUX_DISABLE_JOB_CLEANUP``, or one cut short by a signal or
``broker.cleanup-timeout``), see :meth:`Shutdown.leave`: a job left in
CLEANUP, or one that enters CLEANUP after that, has its pending holds
made active (the restart would free it before any plugin sees it); a job
left running is named, with what the restart will do to its holds.

Plain Python: it drives the job-manager through the gate's port (see
:mod:`flux_epilog_gate.gate`), with these methods in addition:

``restartable()``
    True if the instance restarts from its state after a shutdown
``abort_cleanup()``
    make the broker abort its cleanup step (as a signal would)
``cancel(id, note)``
    raise a fatal job exception of type ``cancel``, as ``flux cancel`` does
``job_cleanup()``
    True if the shutdown runs flux-core's job cleanup step (False with
    ``FLUX_DISABLE_JOB_CLEANUP``)
"""

import errno
import os
import syslog

from ..errors import GateError
from ..jobid import f58
from .holds import ACTIVE, EPILOG, SHUTDOWN_REASON, SHUTDOWN_STATUS
from .states import CLEANUP, RUN

#: States of the broker's state machine (flux-core
#: src/broker/state_machine.h, broker_state_t), not job states.
BROKER_RUN = 5
BROKER_CLEANUP = 6
BROKER_SHUTDOWN = 7


class Shutdown:
    """What the gate does while its instance shuts down."""

    def __init__(self, gate, port, previous=None):
        self.gate = gate
        self.port = port
        self.broker_state = None
        self.began = None
        self.expired = False
        self.action = None
        self.named = set()
        #: The instance config loads the gate ([job-manager] plugins): it
        #: is back before a job left running can end at the restart.
        self.from_config = False
        self._timer = None
        self._sweeper = None
        if previous is not None:
            # Loaded again during a shutdown: the bound does not move.
            self.began, self.expired = previous.began, previous.expired
            self.action, self.named = previous.action, previous.named
            self.from_config = previous.from_config

    def configured(self, from_config):
        """The plugin was configured: ``from_config`` if the instance
        config loads it (see :func:`loaded_from_config`)."""
        self.from_config = from_config

    @property
    def underway(self):
        """True once the broker has entered CLEANUP (or a later state):
        until then the gate's hooks below have nothing to do, and the
        gate does not call them (see Gate.shutdown_changed)."""
        state = self.broker_state
        return self.began is not None or (state is not None and state >= BROKER_CLEANUP)

    # The broker's state

    def on_broker_state(self, state):
        """The broker entered ``state`` (a broker_state_t)."""
        previous, self.broker_state = self.broker_state, state
        if state >= BROKER_CLEANUP and self.gate.shutdown is self:
            self.gate.shutdown_changed()
        if state == BROKER_CLEANUP:
            self.begin()
        elif state > BROKER_CLEANUP:
            self.stop()
            if previous == BROKER_CLEANUP:
                self.leave()

    def begin(self):
        """The broker entered CLEANUP: start the clock, name the holds."""
        now = self.port.now()
        if self.began is None:
            self.began = now
            self.action = self._resolve_action()
        if self.expired:
            return
        if not self.port.job_cleanup():
            # Nothing waits: the broker leaves CLEANUP at once (see leave()).
            self.port.log(
                syslog.LOG_WARNING,
                "shutdown: flux-core's job cleanup step is disabled "
                "(FLUX_DISABLE_JOB_CLEANUP): the instance stops without "
                "waiting on holds",
            )
            return
        timeout = self.gate.config.shutdown_timeout
        delay = max(0.0, self.began + timeout - now)
        self._timer = self.port.timer(delay, self.expire)
        waiting = self.waiting()
        if waiting:
            self.port.log(
                syslog.LOG_WARNING,
                f"shutdown waits on {_holds(len(waiting))} for up to {delay:g}s, "
                f"then shutdown-action={self.action}",
            )
        for hold in waiting:
            self._name(hold)

    def stop(self):
        """Nothing to wait for any more (the broker is past CLEANUP, or the
        plugin goes away): stop the clock."""
        for timer in (self._timer, self._sweeper):
            if timer is not None:
                timer.stop()
        self._timer = self._sweeper = None

    def leave(self):
        """The broker left CLEANUP: the instance stops with the jobs that
        are still in RUN or CLEANUP.

        That is the usual end when the cleanup step does not run
        (``FLUX_DISABLE_JOB_CLEANUP``) or was cut short (a signal,
        ``broker.cleanup-timeout``).  A job left in CLEANUP whose
        processes have not ended is freed and cleaned as the instance
        restarts, while the job-manager replays its eventlog, before any
        plugin (also one loaded from the config) sees it: its pending
        holds become active now, which keeps it.  A job left in RUN is
        ended at the restart only if it cannot be reattached, after the
        job-manager has loaded the plugins of its config: only a gate
        loaded from there holds it then.
        """
        for job in list(self.gate.jobs.values()):
            pending = _pending(job)
            if not pending:
                continue
            state = self._state(job.id)
            if state == CLEANUP:
                self._stopping_in_cleanup(job.id, "is still in")
            elif state == RUN:
                self._left_running(job.id, pending)

    def entered_cleanup(self, jobid):
        """A held job entered CLEANUP without reaching its epilog point.

        Once the broker has left CLEANUP, that is a job the stopping
        instance ends (job-exec raises an exception as the modules it
        needs are removed): nothing will wait for its processes, and the
        restart would free it before any plugin sees it."""
        if self.broker_state is None or self.broker_state <= BROKER_CLEANUP:
            return
        job = self.gate.jobs.get(jobid)
        if job is not None and _pending(job):
            self._stopping_in_cleanup(jobid, "entered")

    def _stopping_in_cleanup(self, jobid, how):
        self.port.log(
            syslog.LOG_ERR,
            f"shutdown: job {f58(jobid)} {how} CLEANUP as the instance stops: "
            "its holds become active now, or the restart would free it before "
            "any plugin can hold it",
        )
        self.gate.reach_point(jobid)

    def _left_running(self, jobid, pending):
        several = len(pending) > 1
        holds = f"hold{'s' if several else ''} {', '.join(pending)}"
        if self.from_config:
            self.port.log(
                syslog.LOG_WARNING,
                f"shutdown: job {f58(jobid)} still runs as the instance stops: "
                f"its pending {holds} {'stay' if several else 'stays'} pending; "
                "epilog-gate is loaded from "
                "the instance config, and holds the job if it ends as the "
                "instance restarts",
            )
            return
        self.port.log(
            syslog.LOG_ERR,
            f"shutdown: job {f58(jobid)} still runs as the instance stops, and "
            "epilog-gate is not loaded from the instance config ([job-manager] "
            "plugins): if the job cannot be reattached at the restart, it ends "
            f"before 'flux jobtap load' can load the gate, and its pending {holds} "
            "will be lost",
        )

    def _resolve_action(self):
        action = self.gate.config.shutdown_action
        try:
            restartable = self.port.restartable()
        except OSError as exc:
            self.port.log(syslog.LOG_ERR, f"shutdown: instance attributes: {exc}")
            restartable = False
        if action == "auto":
            return "keep" if restartable else "finish"
        if action == "keep" and not restartable:
            self.port.log(
                syslog.LOG_WARNING,
                "shutdown-action=keep in an instance that does not restart "
                "from its state: holds it keeps end with the instance",
            )
        return action

    # What shutdown waits on

    def waiting(self):
        """The holds that keep the shutdown waiting: those of jobs in RUN
        or CLEANUP."""
        holds = []
        for job in self.gate.jobs.values():
            if job.holds and self._state(job.id) in (RUN, CLEANUP):
                holds.extend(job.holds.values())
        return holds

    def _state(self, jobid):
        try:
            return self.port.job_info(jobid)[0]
        except OSError:
            return None

    def _name(self, hold):
        key = (hold.id, hold.description)
        if key in self.named:
            return
        self.named.add(key)
        if hold.state == ACTIVE:
            since = max(0.0, self.port.now() - hold.t_start)
            state = f"active for {since:.1f}s"
        else:
            state = "pending: the job has not ended"
        self.port.log(
            syslog.LOG_WARNING,
            f"shutdown waits on hold {hold.description} of job {f58(hold.id)} "
            f"({state})",
        )

    # Hooks of the gate

    def check_hold(self, jobid, description):
        """Raise GateError if a new hold must be refused."""
        if self.expired:
            raise GateError(
                errno.ESHUTDOWN,
                f"hold {description} on job {f58(jobid)} refused: the instance "
                "is shutting down (shutdown-timeout expired)",
            )

    def activated(self, hold):
        """A hold became active (inside a job-manager callback)."""
        if self.began is None or self.broker_state != BROKER_CLEANUP:
            return
        if not self.expired:
            self._name(hold)
        elif self.action == "finish" and self._sweeper is None:
            # Finished from a timer, once the callback has posted the
            # epilog-start of every hold of the job.
            self._sweeper = self.port.timer(0.0, self._sweep)

    # The bound

    def expire(self):
        """shutdown-timeout expired with the broker still in CLEANUP."""
        self._timer = None
        self.expired = True
        waiting = self.waiting()
        if not waiting or self.broker_state != BROKER_CLEANUP:
            return
        timeout = self.gate.config.shutdown_timeout
        self.port.log(
            syslog.LOG_ERR,
            f"shutdown-timeout ({timeout:g}s) expired: shutdown-action="
            f"{self.action} for {_holds(len(waiting))}",
        )
        self._end_processes()
        if self.action == "finish":
            self._finish(waiting)
        else:
            self._keep(waiting)

    def _end_processes(self):
        """Held jobs whose processes still run reach their epilog point now.

        The shutdown ends those processes, and flux-core lets such a job
        go inactive as the instance restarts (``free``, ``clean``) before
        any plugin could start an epilog action for it: a hold still
        pending would be lost.  A job still in RUN (the cleanup step
        cancels every running job, but had not got to it yet) is cancelled
        first, as that step does: epilog actions count only in CLEANUP.
        """
        for job in list(self.gate.jobs.values()):
            if all(hold.state == ACTIVE for hold in job.holds.values()):
                continue
            state = self._state(job.id)
            if state == RUN:
                state = self._cancel(job.id)
            if state == CLEANUP:
                self.port.log(
                    syslog.LOG_ERR,
                    f"shutdown: job {f58(job.id)} has not ended: its holds "
                    "become active now, as the shutdown ends its processes",
                )
                self.gate.reach_point(job.id)

    def _cancel(self, jobid):
        self.port.log(
            syslog.LOG_ERR,
            f"shutdown: job {f58(jobid)} with holds is still running: "
            "cancelling it, as the shutdown's cleanup step does",
        )
        try:
            self.port.cancel(jobid, "epilog-gate: cancelled at shutdown-timeout")
        except OSError as exc:
            self.port.log(syslog.LOG_ERR, f"shutdown: cancelling {f58(jobid)}: {exc}")
        return self._state(jobid)

    def _finish(self, waiting):
        for hold in waiting:
            if hold.state != ACTIVE:
                self.port.log(
                    syslog.LOG_ERR,
                    f"shutdown: hold {hold.description} of job {f58(hold.id)} "
                    "is pending on a running job: it is finished once the job "
                    "ends",
                )
        self._sweep()

    def _sweep(self):
        """Finish every active hold whose point ends at shutdown (not the
        dependency point's: a job in DEPEND does not hold the shutdown,
        and keeps its dependencies across a restart)."""
        self._sweeper = None
        timeout = self.gate.config.shutdown_timeout
        points = self.gate.points
        for hold in [
            hold
            for job in self.gate.jobs.values()
            for hold in job.holds.values()
            if hold.state == ACTIVE and points[hold.point].ends_at_shutdown
        ]:
            self.port.log(
                syslog.LOG_ERR,
                f"shutdown: finished hold {hold.description} of job "
                f"{f58(hold.id)} with status {SHUTDOWN_STATUS}",
            )
            self.gate.end(
                hold,
                SHUTDOWN_STATUS,
                SHUTDOWN_REASON,
                f"epilog-gate: hold {hold.description} was still active when "
                f"shutdown-timeout ({timeout:g}s) expired: finished by shutdown "
                f"with status {SHUTDOWN_STATUS}",
            )

    def _keep(self, waiting):
        for hold in waiting:
            self.port.log(
                syslog.LOG_ERR,
                f"shutdown: kept hold {hold.description} of job {f58(hold.id)} "
                f"({hold.state}) for the restart",
            )
        # Nothing to flush: every record went to the hold log when it was
        # made (a batch queued behind a commit in flight is sent when that
        # one answers, or by the unload that follows).
        self.port.log(
            syslog.LOG_ERR,
            "shutdown: sending SIGTERM to the broker to abort its cleanup "
            "step; the held jobs stay in CLEANUP",
        )
        self.port.abort_cleanup()


def loaded_from_config(conf, name):
    """True if the instance config ``conf`` (the whole of it, as
    ``conf.update`` gives it) loads the plugin called ``name``: a
    ``[job-manager] plugins`` entry whose ``load`` names its library, by
    name or by path."""
    try:
        entries = conf.get("job-manager", {}).get("plugins", [])
        loads = [entry.get("load") for entry in entries]
    except (AttributeError, TypeError):
        return False
    return any(
        isinstance(load, str) and os.path.basename(load) in (name, f"{name}.so")
        for load in loads
    )


def _pending(job):
    """The descriptions of the job's pending epilog holds, sorted."""
    return sorted(
        hold.description
        for hold in job.holds.values()
        if hold.state != ACTIVE and hold.point == EPILOG
    )


def _holds(count):
    return f"{count} hold" + ("" if count == 1 else "s")
