"""Python client of the epilog-gate plugin.

    >>> import flux
    >>> from flux_epilog_gate import EpilogGate
    >>> gate = EpilogGate(flux.Flux())
    >>> gate.hold("ƒ2xPxUZuF", "bb-teardown", timeout=600)
    {'id': ..., 'description': 'bb-teardown', 'state': 'pending'}
    >>> for hold in gate.watch(["bb-teardown"]):
    ...     teardown(hold["id"])
    ...     gate.release(hold["id"], "bb-teardown")

Errors come back as OSError with the plugin's errno and message, as from
any Flux RPC.  The plugin checks every request; the client only converts
job ids.  A request that gets no answer (the broker stopped or died, or the
connection to it was lost) raises :class:`NoAnswerError` (an OSError, errno
EHOSTUNREACH): whether it took effect is unknown, and it is never mistaken
for an answer such as ENOENT, "unknown job".

Many requests at once: start them with the ``*_async`` methods and wait
with :meth:`EpilogGate.wait_all` (or ``then()`` callbacks), never with
``get()`` on each of many futures kept alive: a ``get()`` that has to wait
runs a reactor of its own (an epoll descriptor) that lives as long as its
future, so thousands of live futures waited that way hold thousands of
descriptors, and libflux's reactor can then abort the process.

===============  ==========================================================
``client``       :class:`EpilogGate`: the plugin's requests, sync and async
``rpc``          :class:`GateRPC`: one RPC, and a request that got no answer
``cli``          the ``flux epilog-gate`` command: runs one, says its status
``subcommands``  the command line's table of commands and their arguments
``commands``     ``path``, ``load``, ``hold``, ``release``, ``snapshot``, ``watch``
``listing``      the ``list`` command: holds fetched, filtered, printed
``formats``      ``list``'s ``flux jobs``-style formats, named and checked
``table``        the ``list`` answer as the default table
``formatcheck``  a ``list`` format checked before it prints
``arguments``    the command line's argument types
``exits``        the command's name, logger and exit statuses
===============  ==========================================================
"""

from .client import EpilogGate
from .rpc import NoAnswerError

__all__ = ["EpilogGate", "NoAnswerError"]
