"""dws.so's requests to the DWS service, made in C (service.c).

:class:`Service` names what the workflow (:class:`~.plugin.Dws`) asks
of service.c; :class:`DwsService` is that, the C functions bound once
to the plugin instance, so a call is the C call itself with no Python
frame of its own.  Each request is packed, sent and answered in C: a
request that succeeds never enters Python; one that fails is told to
the plugin's :meth:`~.plugin.Dws.call_failed` with its kind (below).
"""

from functools import partial
from typing import Any, Protocol

#: What service.c tells dws_py_failed failed (its enum dws_kind): a
#: request of dws.create, dws.setup or dws.post_run, or the job's R
#: read for dws.setup.
CALL_CREATE, CALL_SETUP, CALL_POST_RUN, CALL_R = range(4)

#: Which of the service's requests service.c decoded for dws_py_remove
#: (its enum dws_remove).
REMOVE_PROLOG, REMOVE_EPILOG = range(2)


class Service(Protocol):
    """The calls of service.c, as the workflow makes them.  A call that
    returns an int returns -1 on failure, the errno then in
    :meth:`errno`."""

    #: What :meth:`create` takes for "no arguments: look the job up".
    NO_ARGS: Any

    def check_args(self, args):
        """0 if a job callback's ``args`` hold what ``dws.create`` needs
        (``userid``, ``jobspec.attributes.system.dw``, an integer
        ``dw_failure_tolerance`` if any, ``jobspec.resources`` not null):
        the job is then known as a rabbit job; else -1 (EPROTO)."""

    def create(self, jobid, args):
        """Send ``dws.create`` {dw_directives, jobid, resources, userid,
        failure_tolerance} from ``args`` (a job callback's, or
        :attr:`NO_ARGS`: the job looked up now).  -1 if it could not be
        sent (EPROTO: the job has not what it needs; ENOENT: no job)."""

    def setup(self, jobid):
        """Read the job's R, then send ``dws.setup`` {jobid, R}; -1 if
        the read could not be sent."""

    def post_run(self, jobid, run_started):
        """Send ``dws.post_run`` {jobid, run_started}; -1 on failure."""

    def is_rabbit(self, jobid):
        """1 if the job asks for rabbit storage (seen by
        :meth:`check_args`, or its jobspec has ``attributes.system.dw``),
        else 0 (also if there is no such job)."""

    def post_environment(self, jobid, msg):
        """Post the job's ``dws_environment`` {variables}, the
        ``variables`` of ``msg``, its ``prolog-remove`` request (its
        message, as the request's handler has it); -1 on failure."""

    def errno(self):
        """The errno of the last call that failed."""

    def close(self):
        """The plugin instance is gone: every later call fails."""


class DwsService:
    """service.c's calls for one plugin instance (a :class:`Service`)."""

    def __init__(self, jobtap):
        self._lib, self._ffi = jobtap.lib, jobtap.ffi
        self.NO_ARGS = self._ffi.NULL
        self._bind(jobtap.p)

    def _bind(self, p):
        lib = self._lib
        # Bound once: each call is the cffi function's, no frame of ours.
        self.check_args = partial(lib.dws_check_args, p)
        self.create = partial(lib.dws_create, p)
        self.setup = partial(lib.dws_setup, p)
        self.post_run = partial(lib.dws_post_run, p)
        self.is_rabbit = partial(lib.dws_is_rabbit, p)
        self.post_environment = partial(lib.dws_post_environment, p)

    def errno(self):
        return self._ffi.errno

    def close(self):
        """The plugin instance is gone: a late call gets NULL, which
        service.c refuses, never the freed instance."""
        self._bind(self._ffi.NULL)
