"""The gate as a plugin of the jobtap runtime (epilog-gate.so, and what
dws.so shares with it).

=============  ==========================================================
``driver``     :class:`GateDriver`: a plugin instance that drives the
               gate, its load, and the hand-over to the next instance
``plugin``     :class:`EpilogGatePlugin`: configuration, query, requests
``fast``       the owner's hold and release decoded in C, and answers
``host``       the one gate of a job-manager, shared by its plugins
``port``       :class:`GatePort`: the runtime facade the gate drives
``gcpolicy``   the collector's policy for the gate's long-lived objects
``cbuild``     building epilog-gate.so (fastpath.c, stamp.c)
=============  ==========================================================
"""

from .driver import UNLOADED, UNLOADED_WAITING, GateDriver, after_recovery
from .plugin import EpilogGatePlugin

__all__ = [
    "EpilogGatePlugin",
    "GateDriver",
    "UNLOADED",
    "UNLOADED_WAITING",
    "after_recovery",
]
