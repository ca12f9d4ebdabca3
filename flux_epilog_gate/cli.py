"""flux-epilog-gate: the command line of the epilog gate.

Also reachable as ``flux epilog-gate`` when ``flux`` can find it (see
README).  Built on :class:`flux_epilog_gate.EpilogGate`; the plugin checks
every request, so this only parses arguments and prints answers.
"""

import argparse
import errno
import json
import sys
import time

# The package's __init__ has made flux-core's bindings importable.
import flux
from flux.job import JobID

from .client import EpilogGate
from .paths import plugin_path

PROG = "flux-epilog-gate"


def jobid(text):
    try:
        return JobID(text)
    except (OSError, ValueError, TypeError):
        raise argparse.ArgumentTypeError(f"invalid job id {text!r}") from None


def cmd_path(args):
    print(plugin_path())


def cmd_hold(args):
    point = "prolog" if args.prolog else None
    hold = EpilogGate(flux.Flux()).hold(
        args.jobid, args.description, args.timeout, point
    )
    if not args.quiet:
        print(f"{JobID(hold['id']).f58} {hold['description']} {hold['state']}")


def cmd_release(args):
    answer = EpilogGate(flux.Flux()).release(args.jobid, args.description, args.status)
    if not answer["released"]:
        print(
            f"{PROG}: {args.jobid.f58} {args.description}: "
            f"nothing to release ({answer.get('reason', 'gone')})",
            file=sys.stderr,
        )


def _age(t):
    return f"{max(0.0, time.time() - t):.1f}s"


def cmd_list(args):
    holds = EpilogGate(flux.Flux()).list(args.jobid)
    if args.json:
        print(json.dumps(holds))
        return
    print(
        f"{'JOBID':<14} {'DESCRIPTION':<24} {'STATE':<8} {'POINT':<6} {'USER':>6} "
        f"{'HELD':>8} {'ACTIVE':>8} {'TIMEOUT':>8}"
    )
    for hold in sorted(holds, key=lambda h: (h["id"], h["description"])):
        active = _age(hold["t_start"]) if "t_start" in hold else "-"
        timeout = f"{hold['timeout']:g}s" if "timeout" in hold else "-"
        print(
            f"{JobID(hold['id']).f58:<14} {hold['description']:<24} "
            f"{hold['state']:<8} {hold.get('point', 'epilog'):<6} "
            f"{hold['userid']:>6} {_age(hold['t_hold']):>8} "
            f"{active:>8} {timeout:>8}"
        )


def cmd_watch(args):
    points = [args.point] if args.point else None
    for hold in EpilogGate(flux.Flux()).watch(args.descriptions, points=points):
        if args.json:
            print(json.dumps(hold), flush=True)
        else:
            ran = "ran" if hold["ran"] else "never-ran"
            # An epilog hold's line is as it always was.
            prolog = " prolog" if hold.get("point") == "prolog" else ""
            aborted = " aborted" if hold.get("aborted") else ""
            print(
                f"{JobID(hold['id']).f58} {hold['description']} "
                f"userid={hold['userid']} {ran}{prolog}{aborted}",
                flush=True,
            )
        if args.count is not None:
            args.count -= 1
            if args.count <= 0:
                return


def parser():
    top = argparse.ArgumentParser(
        prog=PROG, description="Hold Flux jobs' clean until cleanup is done."
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("path", help="print the path of the installed plugin")
    p.set_defaults(func=cmd_path)

    p = sub.add_parser("hold", help="register a hold on a job")
    p.add_argument("jobid", type=jobid)
    p.add_argument("description")
    p.add_argument(
        "-t",
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="finish the hold with a failure after SECONDS active",
    )
    p.add_argument(
        "--prolog",
        action="store_true",
        help="hold the job's start (until released) instead of its clean",
    )
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_hold)

    p = sub.add_parser("release", help="release a hold")
    p.add_argument("jobid", type=jobid)
    p.add_argument("description")
    p.add_argument(
        "-s",
        "--status",
        type=int,
        default=0,
        help="status of the cleanup (non-zero raises an exception)",
    )
    p.set_defaults(func=cmd_release)

    p = sub.add_parser("list", help="list holds")
    p.add_argument("jobid", type=jobid, nargs="?")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("watch", help="print holds as they become active")
    p.add_argument("descriptions", nargs="*", metavar="DESCRIPTION")
    p.add_argument("--json", action="store_true", help="print JSON lines")
    p.add_argument(
        "--point",
        choices=("epilog", "prolog"),
        help="only holds at this point",
    )
    p.add_argument("-c", "--count", type=int, metavar="N", help="exit after N holds")
    p.set_defaults(func=cmd_watch)
    return top


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        args.func(args)
    except OSError as exc:
        print(f"{PROG}: {exc.strerror or exc}", file=sys.stderr)
        if exc.errno == errno.ENOSYS:
            print(
                f"{PROG}: is the plugin loaded? " f"flux jobtap load $({PROG} path)",
                file=sys.stderr,
            )
        return 1
    except FileNotFoundError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
