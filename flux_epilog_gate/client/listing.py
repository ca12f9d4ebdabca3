"""The ``list`` command: the holds fetched (all of them, or each job's),
filtered, sorted and printed as JSON, the default table or a format."""

import errno
import json
import operator
import sys
import time

import flux

from ..listentry import columns_of
from .arguments import Usage
from .client import EpilogGate
from .exits import EXIT_OK, LOGGER, failure_status
from .formatcheck import FORMAT_ERRORS
from .formats import HoldConfig, HoldInfo, checked_format, username
from .rpc import NoAnswerError
from .table import DEFAULT_FORMAT, default_lines, in_order

#: How ``list --json`` writes its array: as the gate writes its answer.
COMPACT = (",", ":")

#: The gate's answer to ``list`` around its array of holds.
ANSWER_HEAD, ANSWER_TAIL = '{"holds":', "}"


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
        except FORMAT_ERRORS as exc:
            # A spec that suits some holds only (a number's on a pending
            # hold's empty t_start).
            raise Usage(f"format: cannot show a hold: {exc}") from None
    return status


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
