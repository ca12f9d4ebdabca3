"""The broker a plugin's job-manager runs in: its state, its modules,
its attributes."""

import errno
import os
import signal
import syslog

import flux.constants

#: A broker module's status while its ``mod_main`` has not yet run its
#: reactor (flux-core's FLUX_MODSTATE_INIT).
MODULE_INIT = 0


class Broker:
    """The broker, as one plugin instance asks it
    (:attr:`Jobtap.broker <flux_epilog_gate.jobtap.facade.Jobtap.broker>`)."""

    def __init__(self, jobtap):
        self.jobtap = jobtap
        #: The streams of the broker's state in flight (their futures).
        self._streams = set()
        #: Those of them no longer watched: they run on to their end (a
        #: streaming request cannot be taken back), unheard.
        self._unwatched = set()

    def close(self):
        """The plugin instance is gone: its streams end with it."""
        self._streams.clear()
        self._unwatched.clear()

    def watch(self, final, callback):
        """Call ``callback(state)`` with the broker's state (a
        broker_state_t), now and at each change up to ``final``, until
        :meth:`unwatch` of the stream returned."""
        jobtap = self.jobtap
        future = jobtap.flux.rpc(
            "state-machine.monitor",
            {"final": final},
            flags=flux.constants.FLUX_RPC_STREAMING,
        )
        self._streams.add(future)

        def done(future):
            try:
                state = future.get()["state"]
            except OSError as exc:
                self._streams.discard(future)
                heard = future not in self._unwatched
                self._unwatched.discard(future)
                if heard and exc.errno != errno.ENODATA:
                    jobtap.log(syslog.LOG_ERR, f"watching the broker's state: {exc}")
                return
            future.reset()
            if future not in self._unwatched:
                callback(state)

        future.then(jobtap.contained("broker state", done))
        return future

    def unwatch(self, stream):
        """Call back no more with the states of ``stream`` (what
        :meth:`watch` returned)."""
        if stream in self._streams:
            self._unwatched.add(stream)

    def restartable(self):
        """True if this instance starts again from its state after a
        shutdown: its state directory is kept (``statedir-cleanup`` is 0)
        and it is not a job of another instance (no ``jobid``)."""
        handle = self.jobtap.flux
        try:
            handle.attr_get("jobid")
            return False
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise
        try:
            return handle.attr_get("statedir-cleanup") == "0"
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise
            return False

    def job_manager_starting(self):
        """True while the job-manager module is still starting, None if
        the broker does not say, False once it runs.

        The job-manager loads the plugins of ``[job-manager] plugins``
        (and calls their ``conf.update``) in its ``mod_main``, before it
        runs its reactor; it reports itself running (``module.status``)
        from its reactor's first iteration, and only then handles
        requests such as ``flux jobtap load`` or a config reload.  So
        the broker lists it in state INIT exactly while it loads those
        plugins.  The request is synchronous: the broker answers it
        from its own thread.
        """
        try:
            modules = self.jobtap.flux.rpc("module.list").get()["mods"]
        except (OSError, KeyError, TypeError):
            return None
        for module in modules:
            if module.get("name") == "job-manager":
                return module.get("status") == MODULE_INIT
        return None

    def state(self):
        """The name of the broker's state (``init`` while rc1 runs,
        ``run``...), or None if the broker does not say."""
        try:
            return self.jobtap.flux.rpc("state-machine.get").get()["state"]
        except (OSError, KeyError, TypeError):
            return None

    def abort_cleanup(self):
        """Make the broker abort its cleanup step, as a signal does.

        The job-manager runs as a thread of the broker, whose threads all
        block SIGTERM: the signal is taken by the broker's own signal
        watcher, which in CLEANUP aborts the running cleanup commands.
        """
        os.kill(os.getpid(), signal.SIGTERM)
