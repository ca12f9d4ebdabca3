"""flux-epilog-gate: the command line of the epilog gate.

Also reachable as ``flux epilog-gate`` when ``flux`` can find it (see
README).  Built on :class:`flux_epilog_gate.EpilogGate` and on flux-core's
own command-line helpers (``flux.util``), as ``flux jobs`` is: durations
are Flux Standard Durations, ``list`` takes ``flux jobs``-style formats.
The plugin checks every request, so this parses arguments and prints
answers.

Exit status: 0 success; 1 a request refused or the plugin unreachable
(for several holds: any of them); 2 a usage error; 3 no answer came (the
connection to the broker was lost: a request may or may not have taken
effect; a watch ends so); 130 interrupted.  A
closed standard output (``| head``) ends the command quietly, status 0.

This module runs a command and turns what happened into the exit status;
the commands are in :mod:`.subcommands` (the table), :mod:`.commands` and
:mod:`.listing`, the ``list`` formats in :mod:`.formats`.
"""

import errno
import logging
import os
import sys

# The package's __init__ has made flux-core's bindings importable.
from flux.util import CLIMain

from .arguments import Usage
from .exits import (
    EXIT_INTERRUPTED,
    EXIT_NO_ANSWER,
    EXIT_OK,
    EXIT_REFUSED,
    LOGGER,
    PROG,
)
from .rpc import NoAnswerError
from .subcommands import parser


def _run(argv):
    top = parser()
    args = top.parse_args(argv)
    try:
        return args.func(args) or EXIT_OK
    except Usage as exc:
        args.parser.error(str(exc))  # exits with EXIT_USAGE
    except NoAnswerError as exc:
        LOGGER.error("%s", exc.strerror)
        return EXIT_NO_ANSWER
    except BrokenPipeError:
        raise
    except (OSError, ValueError) as exc:  # ConfigError is a ValueError
        LOGGER.error("%s", getattr(exc, "strerror", None) or exc)
        if getattr(exc, "errno", None) == errno.ENOSYS:
            LOGGER.error("is the plugin loaded? flux jobtap load $(%s path)", PROG)
        return EXIT_REFUSED


def _quiet_broken_pipe():
    # The reader went away (| head): nothing more to say to anyone.
    # Point stdout at /dev/null so that the interpreter's final flush of
    # it cannot fail again.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv=None):
    """Run the command and exit with its status."""
    # Messages as flux commands print them, "flux-epilog-gate: text":
    # configured before CLIMain would add the level to each.
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    CLIMain(LOGGER)(lambda: sys.exit(_main(argv)))


def _main(argv):
    try:
        status = _run(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_broken_pipe()
        return EXIT_OK
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return status


if __name__ == "__main__":
    main()
