"""The argument types of ``flux-epilog-gate`` (:mod:`.cli`): each takes
a word of the command line and returns its value, or raises
``argparse.ArgumentTypeError`` naming what is wrong with it."""

import argparse
import json
import math
import pwd

from flux.util import parse_fsd

#: The states ``list --states`` takes.
STATES = ("pending", "active")


class Usage(Exception):
    """A usage error found after parsing (exit 2)."""


def flux_jobid(value):
    """``flux.job.JobID(value)``, imported when first used (the command
    starts faster without it)."""
    from flux.job import JobID

    return JobID(value)


def jobid(text):
    try:
        return flux_jobid(text)
    except (OSError, ValueError, TypeError):
        raise argparse.ArgumentTypeError(f"invalid job id {text!r}") from None


def timeout(text):
    """A Flux Standard Duration greater than 0 (``90``, ``90s``, ``10m``)."""
    from ..gate.config import ConfigError, duration_problem, parse_duration

    try:
        seconds = parse_fsd(text)
    except ValueError:
        seconds = None
    if seconds is not None and duration_problem(seconds) is None:
        return seconds
    try:
        # The configuration's parser reads the same and says what is wrong.
        return parse_duration(text, "timeout")
    except ConfigError as exc:
        problem = str(exc)[len("timeout: ") :]
        raise argparse.ArgumentTypeError(problem) from None


def count(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count of at least 1")
    return value


def words(text):
    """A comma-separated list."""
    return [word for word in text.split(",") if word]


def userids(text):
    """``--user``: names or ids, comma-separated, or ``all``."""
    if text == "all":
        return None
    found = set()
    for word in words(text):
        if word.isdigit():
            found.add(int(word))
            continue
        try:
            found.add(pwd.getpwnam(word).pw_uid)
        except KeyError:
            raise argparse.ArgumentTypeError(f"unknown user {word!r}") from None
    return found


def states(text):
    chosen = words(text)
    for state in chosen:
        if state not in STATES:
            raise argparse.ArgumentTypeError(
                f"invalid state {state!r} (choose from {', '.join(STATES)})"
            )
    return chosen


def option(text):
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    try:
        # As flux jobtap load reads it, but a number JSON cannot carry
        # (1e309, NaN) stays text, for the plugin's parser to name.
        value = json.loads(value, parse_constant=str, parse_float=_finite_or_text)
    except ValueError:
        pass  # a string, as flux jobtap load takes it
    return key, value


def _finite_or_text(text):
    number = float(text)
    return number if math.isfinite(number) else text
