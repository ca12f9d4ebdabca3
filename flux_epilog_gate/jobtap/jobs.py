"""A plugin's calls on the job-manager's jobs: look one up, post its
events, raise its exceptions, hold it with a dependency, a prolog or an
epilog action."""

from .. import jsontext


class Jobs:
    """The jobs of the job-manager, as one plugin instance acts on them
    (:attr:`Jobtap.jobs <flux_epilog_gate.jobtap.facade.Jobtap.jobs>`)."""

    def __init__(self, jobtap):
        self.jobtap = jobtap
        lib, ffi = jobtap.lib, jobtap.ffi
        # What the calls of every held job use, bound once: a lookup on
        # the library costs more than the attribute, and a new cdata per
        # lookup more than reusing one (single-threaded, never reentered).
        self._posted = lib.flux_jobtap_job_event_posted
        self._lookup = lib.runtime_job_lookup
        self._state = ffi.new("int *")
        self._userid = ffi.new("uint32_t *")

    def info(self, jobid):
        """``(state, userid)`` of an active job; OSError(ENOENT) if none."""
        jobtap, state, userid = self.jobtap, self._state, self._userid
        if self._lookup(jobtap.p, jobid, state, userid) < 0:
            raise jobtap.oserror()
        return state[0], userid[0]

    def lookup(self, jobid):
        """The arguments of any active job (or one in the job-manager's
        inactive cache) as a dict: ``id``, ``state``, ``userid``,
        ``jobspec``, ``R``... OSError(ENOENT) if there is none."""
        jobtap = self.jobtap
        args = jobtap.lib.flux_jobtap_job_lookup(jobtap.p, jobid)
        if args == jobtap.ffi.NULL:
            raise jobtap.oserror()
        try:
            return jobtap.arg_in(args)
        finally:
            jobtap.lib.flux_plugin_arg_destroy(args)

    def pick(self, jobid, *paths):
        """What the active job (or one in the job-manager's inactive
        cache) has at each of ``paths``, key paths of :meth:`lookup`'s
        dict (``"jobspec.attributes.system.constraints"``), as a dict of
        path: value without the paths it has not: only what is asked for
        is encoded.  OSError(ENOENT) if there is no such job."""
        jobtap = self.jobtap
        text = jobtap.lib.runtime_job_pick(jobtap.p, jobid, " ".join(paths).encode())
        if text == jobtap.ffi.NULL:
            raise jobtap.oserror()
        try:
            return jsontext.loads(jobtap.ffi.string(text))
        finally:
            jobtap.lib.runtime_free(text)

    def value(self, jobid, path, default=None):
        """The value at key path ``path`` of an active job's arguments
        (``"jobspec.attributes.system.dw"``), decoded alone, or
        ``default`` if it has none (see :meth:`Jobtap.arg_value
        <flux_epilog_gate.jobtap.facade.Jobtap.arg_value>`).
        OSError(ENOENT) if there is no such job."""
        jobtap = self.jobtap
        text = jobtap.ffi.new("char **")
        jobtap.check(jobtap.lib.runtime_job_value(jobtap.p, jobid, path.encode(), text))
        return jobtap.take_value(text, default)

    def jobspec_update(self, jobid, update):
        """Update the jobspec of job ``jobid``, which must not be the job of
        the current callback nor in RUN or later: ``update`` maps
        period-delimited keys (``"attributes.system.duration"``) to their
        new values.  A ``jobspec-update`` event records it."""
        jobtap = self.jobtap
        text = jsontext.dumps(update).encode()
        jobtap.check(jobtap.lib.runtime_jobspec_update(jobtap.p, jobid, text))

    def dependency_add(self, jobid, description):
        """Keep the job in DEPEND until :meth:`dependency_remove` of the
        same description (only in its job.state.depend callback)."""
        jobtap = self.jobtap
        jobtap.check(
            jobtap.lib.flux_jobtap_dependency_add(jobtap.p, jobid, description.encode())
        )

    def dependency_remove(self, jobid, description):
        """Remove the job's dependency ``description``; the job leaves
        DEPEND when it has none left."""
        jobtap = self.jobtap
        jobtap.check(
            jobtap.lib.flux_jobtap_dependency_remove(
                jobtap.p, jobid, description.encode()
            )
        )

    def posted(self, jobid, name):
        """True if event ``name`` was posted to the job since the
        job-manager started."""
        jobtap = self.jobtap
        encoded = jobtap.names.get(name) or jobtap.name(name)
        return self._posted(jobtap.p, jobid, encoded) > 0

    def post_event(self, jobid, name, context=None):
        """Post event ``name`` to the job's eventlog, with ``context`` (a
        dict) if given."""
        jobtap = self.jobtap
        text = jobtap.ffi.NULL if context is None else jsontext.dumps(context).encode()
        jobtap.check(
            jobtap.lib.runtime_post_event(jobtap.p, jobid, jobtap.name(name), text)
        )

    def raise_exception(self, jobid, type, severity, note):
        """Raise a job exception (severity 0 is fatal)."""
        jobtap = self.jobtap
        jobtap.check(
            jobtap.lib.runtime_raise(
                jobtap.p, jobid, jobtap.name(type), severity, note.encode()
            )
        )

    def cancel(self, jobid, note):
        """Raise a fatal job exception of type ``cancel``, as ``flux
        cancel`` does."""
        self.raise_exception(jobid, "cancel", 0, note)

    def prolog_start_current(self, description):
        """Start a prolog action of the job of the current callback: it
        does not start before :meth:`prolog_finish`."""
        jobtap = self.jobtap
        jobtap.check(
            jobtap.lib.flux_jobtap_prolog_start(jobtap.p, description.encode())
        )

    def prolog_finish(self, jobid, description, status=0):
        """End the job's prolog action ``description``."""
        jobtap = self.jobtap
        jobtap.check(
            jobtap.lib.flux_jobtap_prolog_finish(
                jobtap.p, jobid, description.encode(), status
            )
        )

    def epilog_start_current(self, description):
        """Start an epilog action of the job of the current callback: it is
        not freed (or cleaned) before :meth:`epilog_finish`."""
        jobtap = self.jobtap
        jobtap.check(
            jobtap.lib.flux_jobtap_epilog_start(jobtap.p, description.encode())
        )

    def epilog_finish(self, jobid, description, status=0):
        """End the job's epilog action ``description``."""
        jobtap = self.jobtap
        jobtap.check(
            jobtap.lib.flux_jobtap_epilog_finish(
                jobtap.p, jobid, description.encode(), status
            )
        )
