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
"""

import argparse
import errno
import functools
import json
import logging
import operator
import os
import pwd
import sys
import time

# The package's __init__ has made flux-core's bindings importable.  What
# only some commands need (flux.job, the gate's configuration) is imported
# where it is used: a list of many holds should not wait for it.
import flux
from flux.cli.argparse import FluxArgumentParser
from flux.util import CLIMain, OutputFormat, UtilConfig, help_formatter

from ..listentry import columns_of
from ..paths import PLUGINS, plugin_path
from ..version import __version__
from . import EpilogGate, NoAnswerError, formatcheck
from .arguments import (
    Usage,
    count,
    flux_jobid,
    jobid,
    option,
    states,
    timeout,
    userids,
    words,
)
from .table import DEFAULT_FORMAT, default_lines, in_order

PROG = "flux-epilog-gate"
LOGGER = logging.getLogger(PROG)

#: Exit statuses (see EXIT STATUS in flux-epilog-gate(1)).
EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_NO_ANSWER, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

JOBID_HELP = "a job id in any Flux form (f58, decimal, hex, dothex, words)"


# list: fields and formats


class HoldInfo:
    """One hold as the ``list`` format fields see it."""

    def __init__(self, hold, now):
        self.id = flux_jobid(hold["id"])
        self.description = hold["description"]
        self.state = hold["state"]
        self.point = hold.get("point", "epilog")
        self.userid = hold["userid"]
        self.username = username(self.userid)
        self.t_hold = hold["t_hold"]
        self.t_start = hold.get("t_start", "")
        self.age = max(0.0, now - self.t_hold)
        self.active = max(0.0, now - self.t_start) if self.t_start != "" else ""
        self.timeout = hold.get("timeout", "")


@functools.lru_cache(maxsize=None)
def username(userid):
    """The user's name, or the id if it has none here."""
    try:
        return pwd.getpwuid(userid).pw_name
    except KeyError:
        return str(userid)


class HoldFormat(OutputFormat):
    """``flux jobs``-style formats of holds."""

    headings = {
        "id": "JOBID",
        "id.f58": "JOBID",
        "id.f58plain": "JOBID",
        "id.dec": "JOBID",
        "id.hex": "JOBID",
        "id.dothex": "JOBID",
        "id.kvs": "JOBID",
        "id.words": "JOBID",
        "id.emoji": "JOBID",
        "description": "DESCRIPTION",
        "state": "STATE",
        "userid": "UID",
        "username": "USER",
        "t_hold": "T_HOLD",
        "t_start": "T_START",
        "age": "AGE",
        "active": "ACTIVE",
        "timeout": "TIMEOUT",
        "point": "POINT",
    }


#: A hold with every field set, that a format must be able to show.
SAMPLE_HOLD = {
    "id": 2**63 - 1,
    "description": "sample",
    "state": "active",
    "point": "epilog",
    "userid": 0,
    "t_hold": 1.0,
    "t_start": 2.0,
    "timeout": 60.0,
}


def checked_format(fmt):
    """The HoldFormat of ``fmt``; Usage naming what is wrong with it (see
    :mod:`.formatcheck`)."""
    try:
        formatter = HoldFormat(fmt)
        formatcheck.check(formatter, HoldInfo(SAMPLE_HOLD, 3.0))
    except ValueError as exc:
        raise Usage(str(exc)) from None
    return formatter


class HoldConfig(UtilConfig):
    """Named formats of ``list``, with user ones from
    ``flux-epilog-gate.toml`` in the XDG config directories."""

    builtin_formats = {
        "default": {
            "description": "Default list format",
            "format": DEFAULT_FORMAT,
        },
        "long": {
            "description": "With user ids and the times of hold and start",
            "format": (
                "+:{id.f58:<12} +:{description:<11} {state:<7} {point:<6} "
                "+:{username:<8} {userid:>6} "
                "{t_hold!d:%b%d %T::>15} {t_start!d:%b%d %T::>15h} "
                "{age!F:>7} {active!F:>7h} {timeout!F:>7h}"
            ),
        },
    }

    def __init__(self):
        super().__init__(
            name=PROG, initial_dict={"formats": dict(self.builtin_formats)}
        )

    def validate(self, path, config):
        for key, value in config.items():
            if key != "formats":
                raise ValueError(f"{path}: invalid key {key}")
            self.validate_formats(path, value)


# Commands


def cmd_path(args):
    print(plugin_path(args.plugin))


def cmd_load(args):
    """Check the options here, where a bad one can be named, then load."""
    from ..gate.config import Config

    options = dict(args.options)
    Config.from_sources(options)
    request = {"load": plugin_path()}
    if options:
        request["conf"] = options
    flux.Flux().rpc("job-manager.jobtap", request).get()


def cmd_hold(args):
    point = "prolog" if args.prolog else "depend" if args.depend else None
    hold = EpilogGate(flux.Flux()).hold(
        args.jobid, args.description, args.timeout, point
    )
    if not args.quiet:
        print(f"{flux_jobid(hold['id']).f58} {hold['description']} {hold['state']}")


def cmd_release(args):
    gate = EpilogGate(flux.Flux())
    description, targets = release_targets(gate, args)
    answers = gate.release_many(targets, args.status)
    for (target, _), answer in zip(targets, answers):
        what = f"{flux_jobid(target).f58} {description}"
        if isinstance(answer, OSError):
            LOGGER.error("%s: %s", what, answer.strerror or answer)
        elif not answer["released"]:
            reason = answer.get("reason", "gone")
            LOGGER.warning("%s: nothing to release (%s)", what, reason)
        elif not args.quiet:
            print(f"{what} released")
    return failure_status(answers)


def failure_status(answers):
    """The exit status of several requests: no answer to any of them
    outweighs a refusal of any."""
    errors = [answer for answer in answers if isinstance(answer, OSError)]
    if any(isinstance(error, NoAnswerError) for error in errors):
        return EXIT_NO_ANSWER
    return EXIT_REFUSED if errors else EXIT_OK


def release_targets(gate, args):
    """``(description, [(jobid, description)...])`` from the arguments."""
    *jobids, description = args.arguments
    if args.all:
        from ..gate.holds import description_error

        if jobids:
            raise Usage("--all takes a DESCRIPTION and no JOBID")
        problem = description_error(description)
        if problem:
            raise ValueError(problem)  # as the plugin would refuse it
        targets = sorted(
            h["id"] for h in gate.list() if h["description"] == description
        )
        if not targets:
            LOGGER.warning("no hold %s to release", description)
    else:
        if not jobids:
            raise Usage("release needs JOBID... DESCRIPTION (or --all DESCRIPTION)")
        try:
            targets = [int(jobid(text)) for text in jobids]
        except argparse.ArgumentTypeError as exc:
            raise Usage(str(exc)) from None
    return description, [(target, description) for target in targets]


def cmd_list(args):
    gate = EpilogGate(flux.Flux())
    filtered = args.states or args.userids is not None or args.descriptions
    if args.json and not args.jobids and not filtered:
        return print_answer(gate.list_text())
    formatter = None
    if not args.json:
        try:
            fmt = HoldConfig().load().get_format_string(args.format)
        except ValueError as exc:
            raise Usage(str(exc)) from None
        if fmt != DEFAULT_FORMAT:
            formatter = checked_format(fmt)
    if not args.json and formatter is None and not args.jobids and not filtered:
        # The common table of every hold: decoded by column, much faster.
        lines = default_lines(
            in_order(gate.list_columns()), time.time(), username, args.no_header
        )
        print_lines(lines)
        return EXIT_OK
    holds, status = fetch_holds(gate, args.jobids)
    if filtered:
        holds = [hold for hold in holds if wanted(hold, args)]
    holds.sort(key=operator.itemgetter("id", "description"))
    now = time.time()
    if args.json:
        print(json.dumps(holds, separators=COMPACT))
    elif formatter is None:
        print_lines(default_lines(columns_of(holds), now, username, args.no_header))
    else:
        items = [HoldInfo(hold, now) for hold in holds]
        try:
            formatter.print_items(items, no_header=args.no_header)
        except formatcheck.FORMAT_ERRORS as exc:
            # A spec that suits some holds only (a number's on a pending
            # hold's empty t_start).
            raise Usage(f"format: cannot show a hold: {exc}") from None
    return status


#: How ``list --json`` writes its array: as the gate writes its answer.
COMPACT = (",", ":")

#: The gate's answer to ``list`` around its array of holds.
ANSWER_HEAD, ANSWER_TAIL = '{"holds":', "}"


def print_answer(text):
    """Print the array of holds of the gate's answer to ``list``, sorted
    already (by job id, then description) and written compactly, as it
    came: 100,000 holds are not decoded to be encoded again.  An answer
    written otherwise is decoded and sorted."""
    if text.startswith(ANSWER_HEAD) and text.endswith(ANSWER_TAIL):
        sys.stdout.write(text[len(ANSWER_HEAD) : -len(ANSWER_TAIL)] + "\n")
        return EXIT_OK
    holds = json.loads(text)["holds"]
    holds.sort(key=operator.itemgetter("id", "description"))
    print(json.dumps(holds, separators=COMPACT))
    return EXIT_OK


def print_lines(lines):
    """Print ``lines`` at once (as print_items would, one by one)."""
    if not lines:
        return
    try:
        sys.stdout.write("\n".join(lines) + "\n")
    except UnicodeEncodeError:
        # Not written: encoding comes first.  Each line as flux prints it.
        for line in lines:
            try:
                print(line)
            except UnicodeEncodeError:
                print(line.encode("utf-8", errors="surrogateescape").decode())


def fetch_holds(gate, jobids):
    """The holds of ``jobids`` (all if none) and the exit status: whether
    any job was refused (unknown, not visible).  Without an answer for
    every job, raise NoAnswerError: a partial table would read as complete."""
    if not jobids:
        return gate.list(), EXIT_OK
    answers = gate.wait_all(gate.list_async(target) for target in jobids)
    for answer in answers:
        if isinstance(answer, NoAnswerError):
            raise answer
    if any(_not_loaded(answer) for answer in answers):
        # Not epilog-gate.so: ask each job of the plugin that serves list.
        answers = [_list_one(gate, target) for target in jobids]
    holds = []
    for answer in answers:
        if isinstance(answer, OSError):
            LOGGER.error("%s", answer.strerror or answer)
        else:
            holds.extend(answer["holds"])
    return holds, failure_status(answers)


def _not_loaded(answer):
    return isinstance(answer, OSError) and answer.errno == errno.ENOSYS


def _list_one(gate, target):
    try:
        return {"holds": gate.list(target)}
    except NoAnswerError:
        raise
    except OSError as exc:
        return exc


def wanted(hold, args):
    return (
        (not args.states or hold["state"] in args.states)
        and (args.userids is None or hold["userid"] in args.userids)
        and (not args.descriptions or hold["description"] in args.descriptions)
    )


def cmd_snapshot(args):
    answer = EpilogGate(flux.Flux()).snapshot()
    if not args.quiet:
        print(f"hold log: {answer['bytes']} bytes")


def cmd_watch(args):
    remaining = args.count
    points = [args.point] if args.point else None
    gate = EpilogGate(flux.Flux())
    for hold in gate.watch(args.descriptions, points=points, lost=args.lost):
        if args.json:
            print(json.dumps(hold), flush=True)
        elif hold.get("lost"):
            print(
                f"{flux_jobid(hold['id']).f58} {hold['description']} "
                f"userid={hold['userid']} lost {hold.get('point', 'epilog')}: "
                f"{hold['reason']}",
                flush=True,
            )
        else:
            ran = "ran" if hold["ran"] else "never-ran"
            # An epilog hold's line is as it always was.
            point = hold.get("point", "epilog")
            prolog = f" {point}" if point != "epilog" else ""
            aborted = " aborted" if hold.get("aborted") else ""
            print(
                f"{flux_jobid(hold['id']).f58} {hold['description']} "
                f"userid={hold['userid']} {ran}{prolog}{aborted}",
                flush=True,
            )
        if remaining is not None:
            remaining -= 1
            if remaining == 0:
                return


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
        help="only holds on jobs of these users (names or ids, or all)",
    )
    p.add_argument(
        "--description",
        dest="descriptions",
        type=words,
        default=[],
        metavar="DESCRIPTION,...",
        help="only holds of these descriptions",
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
