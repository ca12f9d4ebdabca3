"""The command line's table of commands: each subcommand's name, help,
arguments and the function that runs it (set as ``func``, with its own
parser as ``parser`` to name a usage error)."""

import argparse

from flux.cli.argparse import FluxArgumentParser
from flux.util import help_formatter

from ..paths import PLUGINS
from ..version import __version__
from .arguments import (
    count,
    descriptions,
    jobid,
    option,
    states,
    timeout,
    userids,
)
from .commands import (
    cmd_hold,
    cmd_load,
    cmd_path,
    cmd_release,
    cmd_snapshot,
    cmd_watch,
)
from .exits import PROG
from .listing import cmd_list

JOBID_HELP = "a job id in any Flux form (f58, decimal, hex, dothex, words)"


def parser():
    top = FluxArgumentParser(
        prog=PROG,
        description="Hold Flux jobs' clean until named cleanup work is done.",
        epilog="Exit status: 0 success, 1 a request refused (any of several), "
        "2 a usage error, 3 no answer (the connection to the broker was lost), "
        "130 interrupted.  See flux-epilog-gate(1).",
    )
    top.add_argument(
        "--version",
        action="version",
        version=f"{PROG} {__version__}",
        help="print the package's version and exit",
    )
    sub = top.add_subparsers(
        title="commands", dest="command", required=True, metavar="COMMAND"
    )

    def command(name, func, help, **kwargs):
        p = sub.add_parser(name, help=help, description=help, **_formatting(), **kwargs)
        p.set_defaults(func=func, parser=p)
        return p

    p = command("path", cmd_path, "print the path of an installed plugin")
    p.add_argument(
        "plugin",
        nargs="?",
        default="epilog-gate",
        choices=sorted(PLUGINS),
        help="the gate (epilog-gate, the default) or dws",
    )

    p = command(
        "load",
        cmd_load,
        "load the installed plugin into the job-manager, its options checked "
        "first (a bad one is named and nothing is loaded)",
    )
    p.add_argument(
        "options",
        nargs="*",
        type=option,
        metavar="KEY=VALUE",
        help="plugin options, as flux jobtap load takes them",
    )

    p = command(
        "hold",
        cmd_hold,
        "register hold DESCRIPTION on job JOBID: from the job's epilog point "
        "it keeps the job from clean until released (with --prolog: from its "
        "entry to RUN, its start; with --depend: at once, the job in DEPEND); "
        "print the hold",
    )
    p.add_argument("jobid", type=jobid, metavar="JOBID", help=JOBID_HELP)
    p.add_argument("description", metavar="DESCRIPTION", help="1-64 of [A-Za-z0-9._-]")
    p.add_argument(
        "-t",
        "--timeout",
        type=timeout,
        metavar="FSD",
        help="finish the hold with status 124 once active this long "
        "(a Flux Standard Duration: 90, 90s, 10m, 1.5h, 2d)",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--prolog",
        action="store_true",
        help="hold the job's start (until released) instead of its clean",
    )
    where.add_argument(
        "--depend",
        action="store_true",
        help="keep the job in DEPEND (until released); only while it is in "
        "NEW or DEPEND",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing")

    p = command(
        "release",
        cmd_release,
        "release hold DESCRIPTION of each JOBID, or of every job (--all)",
        usage=f"{PROG} release [-h] [-s STATUS] [-q] JOBID... DESCRIPTION\n"
        f"       {PROG} release [-h] [-s STATUS] [-q] --all DESCRIPTION",
    )
    p.add_argument(
        "arguments", nargs="+", metavar="JOBID... DESCRIPTION", help=argparse.SUPPRESS
    )
    p.add_argument(
        "-a",
        "--all",
        action="store_true",
        help="release every hold DESCRIPTION (no JOBID)",
    )
    p.add_argument(
        "-s",
        "--status",
        type=int,
        default=0,
        help="status of the cleanup (non-zero raises a job exception)",
    )
    p.add_argument(
        "-q", "--quiet", action="store_true", help="print nothing for released holds"
    )

    p = command(
        "list",
        cmd_list,
        "list the holds the caller may see, or those of each JOBID (an "
        "unknown JOBID is an error)",
    )
    p.add_argument("jobids", nargs="*", type=jobid, metavar="JOBID", help=JOBID_HELP)
    p.add_argument(
        "-o",
        "--format",
        default="default",
        metavar="FORMAT",
        help="a named format or a format string ('-o help' lists the names)",
    )
    p.add_argument(
        "-n", "--no-header", action="store_true", help="do not print the header"
    )
    p.add_argument(
        "--state",
        dest="states",
        type=states,
        default=[],
        metavar="STATE,...",
        help="only holds in these states (pending, active)",
    )
    p.add_argument(
        "-u",
        "--user",
        dest="userids",
        type=userids,
        default=None,
        metavar="USER,...",
        help="only holds on jobs of these users (names or ids from 0 to "
        "4294967295, or all)",
    )
    p.add_argument(
        "--description",
        dest="descriptions",
        type=descriptions,
        default=[],
        metavar="DESCRIPTION,...",
        help="only holds of these descriptions (each 1-64 of [A-Za-z0-9._-])",
    )
    p.add_argument("--json", action="store_true", help="print a JSON array")

    p = command(
        "snapshot",
        cmd_snapshot,
        "replace the hold log with a snapshot of the current holds now, and "
        "remove its segments (the instance owner only); print its size",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing")

    p = command(
        "watch",
        cmd_watch,
        "print every active hold, then each hold as it becomes active",
    )
    p.add_argument(
        "descriptions",
        nargs="*",
        metavar="DESCRIPTION",
        help="only holds of these descriptions",
    )
    p.add_argument("--json", action="store_true", help="print JSON lines")
    p.add_argument(
        "--point",
        choices=("epilog", "prolog", "depend"),
        help="only holds at this point",
    )
    p.add_argument(
        "--lost",
        action="store_true",
        help="also print, once each, every hold lost without becoming active "
        "(the instance owner only)",
    )
    p.add_argument(
        "-c", "--count", type=count, metavar="N", help="exit after N holds (N >= 1)"
    )
    return top


def _formatting():
    return {"formatter_class": help_formatter()}
