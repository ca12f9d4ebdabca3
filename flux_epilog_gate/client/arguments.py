"""The argument types of ``flux-epilog-gate`` (:mod:`.cli`): each takes
a word of the command line and returns its value, or raises
``argparse.ArgumentTypeError`` naming what is wrong with it."""

import argparse
import json
import math
import pwd
import re

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
    """A Flux Standard Duration greater than 0 (``90``, ``90s``, ``10m``),
    read as the configuration reads one: ASCII digits, no spaces (what
    flux-core's C reader takes; ``flux.util.parse_fsd`` would also take
    ``1_0s`` and ``10 m``)."""
    from ..gate.config import ConfigError, parse_duration

    try:
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
    """A comma-separated list, every word of it kept (an empty one too,
    for its type to refuse: ``--state ''`` is no state)."""
    return text.split(",")


#: The largest user id: flux's are 32-bit.
USERID_MAX = 2**32 - 1

_USERID = re.compile(r"-?[0-9]+")


def userids(text):
    """``--user``: names or ids, comma-separated, or ``all``."""
    if text == "all":
        return None
    return {_userid(word) for word in words(text)}


def _userid(word):
    if _USERID.fullmatch(word):
        # Many digits are out of range before int() would read them.
        digits = word.lstrip("-").lstrip("0")
        value = int(word) if len(digits) <= len(str(USERID_MAX)) else None
        if value is None or not 0 <= value <= USERID_MAX:
            raise argparse.ArgumentTypeError(
                f"user id {_shown(word, quoted=False)} is out of range "
                f"(0 to {USERID_MAX})"
            )
        return value
    if not word:
        raise argparse.ArgumentTypeError("an empty user name")
    try:
        return pwd.getpwnam(word).pw_uid
    except (KeyError, ValueError):  # ValueError: a NUL, half a surrogate pair
        raise argparse.ArgumentTypeError(f"unknown user {_shown(word)}") from None


def states(text):
    chosen = words(text)
    for state in chosen:
        if state not in STATES:
            raise argparse.ArgumentTypeError(
                f"invalid state {_shown(state)} (choose from {', '.join(STATES)})"
            )
    return chosen


def descriptions(text):
    """``--description``: descriptions a hold can have, comma-separated."""
    from ..gate.holds import description_error

    chosen = words(text)
    for description in chosen:
        problem = description_error(description)
        if problem:
            raise argparse.ArgumentTypeError(problem)
    return chosen


def _shown(word, limit=40, quoted=True):
    """``word`` as a message shows it: quoted (or not), cut short if
    long."""
    show = repr if quoted else str
    if len(word) <= limit:
        return show(word)
    return show(word[:limit]) + f"... ({len(word)} characters)"


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
