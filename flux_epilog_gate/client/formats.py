"""The ``list`` command's formats: a hold as ``flux jobs``-style format
fields see it, the named formats (built in and from
``flux-epilog-gate.toml``) and a format checked before it prints.  The
default table is written directly, by :mod:`.table`."""

import functools
import pwd

from flux.util import OutputFormat, UtilConfig, UtilFormatter, fsd

from . import formatcheck
from .arguments import Usage, flux_jobid
from .exits import PROG
from .table import DEFAULT_FORMAT


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


class OutOfRange(str):
    """A number a ``!D`` or ``!H`` conversion cannot make a date or a
    ``timedelta`` of, as the text shown instead."""


class DateOutOfRange(OutOfRange):
    """As :class:`OutOfRange`, of a ``!d`` conversion: its spec is a
    date's (strftime text, then ``::`` and the width)."""


class HoldFormatter(UtilFormatter):
    """flux's formatter, but a number past what a conversion takes is
    shown, never a failure: a hold's timeout may be any finite number of
    seconds (1e308), far more than ``!H``'s ``timedelta`` holds
    (999999999 days) or a date's year 9999."""

    def convert_field(self, value, conv):
        try:
            return super().convert_field(value, conv)
        except (OverflowError, ValueError, OSError):
            # OSError: a timestamp past the platform's time_t (EOVERFLOW).
            if conv not in ("d", "D", "H") or not isinstance(value, (int, float)):
                raise
        if conv == "H":
            return OutOfRange(fsd(value))  # as !F shows it: 1.157e+303d
        # A date as its seconds since the epoch.
        return (DateOutOfRange if conv == "d" else OutOfRange)(f"{value:g}")

    def format_field(self, value, spec):
        if isinstance(value, DateOutOfRange):
            # The strftime text has no date to format: only the width.
            spec = spec.split("::", 1)[1] if "::" in spec else ""
        return super().format_field(value, spec)


class HoldFormat(OutputFormat):
    """``flux jobs``-style formats of holds."""

    formatter = HoldFormatter

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
