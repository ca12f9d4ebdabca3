"""The commands that act on one plugin or one hold at a time: ``path``,
``load``, ``hold``, ``release``, ``snapshot`` and ``watch`` (``list`` has
its own module, :mod:`.listing`).  Each takes the parsed arguments and
returns its exit status (None for success)."""

import argparse
import json

# What only some commands need (flux.job, the gate's configuration) is
# imported where it is used: a list of many holds should not wait for it.
import flux

from ..paths import plugin_path
from .arguments import Usage, flux_jobid, jobid
from .client import EpilogGate
from .exits import LOGGER, failure_status


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


def cmd_snapshot(args):
    answer = EpilogGate(flux.Flux()).snapshot()
    if not args.quiet:
        print(f"hold log: {answer['bytes']} bytes")


def cmd_watch(args):
    remaining = args.count
    points = [args.point] if args.point else None
    gate = EpilogGate(flux.Flux())
    for hold in gate.watch(args.descriptions, points=points, lost=args.lost):
        print(watch_line(hold, args.json), flush=True)
        if remaining is not None:
            remaining -= 1
            if remaining == 0:
                return


def watch_line(hold, as_json):
    """The line ``watch`` prints for ``hold``."""
    if as_json:
        return json.dumps(hold)
    if hold.get("lost"):
        return (
            f"{flux_jobid(hold['id']).f58} {hold['description']} "
            f"userid={hold['userid']} lost {hold.get('point', 'epilog')}: "
            f"{hold['reason']}"
        )
    ran = "ran" if hold["ran"] else "never-ran"
    # An epilog hold's line is as it always was.
    point = hold.get("point", "epilog")
    prolog = f" {point}" if point != "epilog" else ""
    aborted = " aborted" if hold.get("aborted") else ""
    return (
        f"{flux_jobid(hold['id']).f58} {hold['description']} "
        f"userid={hold['userid']} {ran}{prolog}{aborted}"
    )
