"""Reading the hold log back: a total parser.

The log (:mod:`flux_epilog_gate.gate.holdlog`) is read once per load, and
whatever its KVS key holds must not keep the job-manager from loading: no
key, an empty value, bytes that are not UTF-8 or not JSON, JSON of any
shape and types, NaN and infinities, huge lines.  :func:`parse` keeps
every line that is a well-formed entry of its kind and skips every other
one, saying why.  An entry is checked field by field against what the
gate writes (see :func:`flux_epilog_gate.gate.logentries.hold_entry`):

==========================  ==================================================
``timestamp``               a number of seconds since the epoch, from 0
                            to :data:`TIMESTAMP_MAX` (the end of year 9999)
``name``                    one of the log's entry names
``context.id``              a job id: an integer from 1 to 2**64-1
``context.description``     a hold description (letters, digits, ``.``,
                            ``_``, ``-``; see :mod:`flux_epilog_gate.gate.holds`);
                            so never the gate's reserved ones
``context.timeout``         (hold) absent, or a finite number > 0
``context.point``           (hold) absent, or a point the gate knows
``context.status``          (release) an integer that fits a C int
``context.exception``       (release) absent, or ``{type, severity, note}``
                            (a non-empty string, 0 to 7, a string); of
                            another shape it is left out, the release kept
==========================  ==================================================

Other keys of an entry are ignored; the context handed on holds only the
keys above, so nothing unchecked reaches recovery.
"""

import json
import math

from .holds import (
    CANCEL_EVENT,
    HOLD_EVENT,
    POINTS,
    RECOVERY_DESCRIPTION,
    RELEASE_EVENT,
    description_error,
)

JOBID_MAX = 2**64 - 1
STATUS_MIN = -(2**31)
STATUS_MAX = 2**31 - 1
#: The last second of year 9999 UTC: a later time (or one before the
#: epoch) is no time the gate stamped, and a client cannot show it.
TIMESTAMP_MAX = 253402300799.0

#: Entry names the log may contain.
ENTRY_NAMES = frozenset((HOLD_EVENT, CANCEL_EVENT, RELEASE_EVENT))

#: The entry that says the log's format, ``{version}``: the first of every
#: snapshot, and of a log begun anew.  A log with none is of format 1.
FORMAT_EVENT = "epilog_gate.format"

#: The newest format of the log this build reads, and the one it writes:
#: 1, hold, cancel and release entries, in :data:`KEY` and its segments
#: (what every build before 0.2.0 wrote, without saying so); 2, the same,
#: each snapshot saying its format.
FORMAT = 2

#: Bytes beyond which a line cannot be an entry the gate wrote (those are
#: under 300 bytes): skipped unread.
LINE_MAX = 4096

#: Characters of a skipped line that its log message quotes.
EXCERPT_MAX = 80


class Skipped:
    """A line of the log that is not an entry: where, why, and its start."""

    __slots__ = ("lineno", "reason", "excerpt")

    def __init__(self, lineno, reason, line):
        self.lineno = lineno
        self.reason = reason
        self.excerpt = _excerpt(line)

    def __str__(self):
        return f"line {self.lineno}: {self.reason}: {self.excerpt}"

    def __repr__(self):
        return f"Skipped({self})"


class BadEntry(ValueError):
    """Why a line is not an entry."""


def _excerpt(line):
    text = line.decode("utf-8", "backslashreplace")
    if len(text) > EXCERPT_MAX:
        return repr(text[:EXCERPT_MAX]) + f"... ({len(line)} bytes)"
    return repr(text)


def parse(data, formats=None):
    """Entries of the log ``data`` (bytes or text; None or empty: no log)
    by job: ``{id: [(timestamp, name, context)]}``, with ``context`` as in
    the job's eventlog (no ``id``).  Returns ``(jobs, skipped)``, with a
    :class:`Skipped` for each line that is not an entry.  The version of
    each format entry is appended to ``formats``, if given.  Never
    raises."""
    if not data:
        return {}, []
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    jobs = {}
    skipped = []
    for lineno, line in enumerate(data.split(b"\n"), 1):
        line = line.strip()
        if not line:
            continue
        try:
            jobid, item = parse_entry(line)
        except BadEntry as exc:
            skipped.append(Skipped(lineno, str(exc), line))
            continue
        if jobid is None:
            if formats is not None:
                formats.append(item)
            continue
        jobs.setdefault(jobid, []).append(item)
    return jobs, skipped


def parse_entry(line):
    """``(id, (timestamp, name, context))`` of one line (bytes) of the
    log, or ``(None, version)`` of a format entry; raises
    :class:`BadEntry` saying what is wrong with it."""
    if len(line) > LINE_MAX:
        raise BadEntry(f"longer than {LINE_MAX} bytes")
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise BadEntry("not UTF-8") from None
    entry = _json(text)
    if not isinstance(entry, dict):
        raise BadEntry("not a JSON object")
    timestamp = _timestamp(entry.get("timestamp"))
    name = entry.get("name")
    if name == FORMAT_EVENT:
        return None, _version(entry.get("context"))
    if not isinstance(name, str) or name not in ENTRY_NAMES:
        raise BadEntry("name is not one of " + ", ".join(sorted(ENTRY_NAMES)))
    context = entry.get("context")
    if not isinstance(context, dict):
        raise BadEntry("context is not a JSON object")
    jobid = context.get("id")
    if isinstance(jobid, bool) or not isinstance(jobid, int):
        raise BadEntry("id is not an integer")
    if not 0 < jobid <= JOBID_MAX:
        raise BadEntry(f"id {jobid} is not a job id")
    clean = {"description": _description(context.get("description"))}
    if name == HOLD_EVENT:
        _hold_fields(context, clean)
    elif name == RELEASE_EVENT:
        status = context.get("status")
        if isinstance(status, bool) or not isinstance(status, int):
            raise BadEntry("status is not an integer")
        if not STATUS_MIN <= status <= STATUS_MAX:
            raise BadEntry(f"status {status} is out of range")
        clean["status"] = status
        exception = raised_exception(context.get("exception"))
        if exception is not None:
            clean["exception"] = exception
    return jobid, (timestamp, name, clean)


def raised_exception(value):
    """The ``exception`` of a release entry, ``{type, severity, note}``,
    if it is of that shape, else None: the release stands without it
    (the gate then raises its own exception, as for a release recorded
    without one)."""
    if not isinstance(value, dict):
        return None
    kind, severity, note = value.get("type"), value.get("severity"), value.get("note")
    if not isinstance(kind, str) or not kind or not isinstance(note, str):
        return None
    if isinstance(severity, bool) or severity not in range(8):
        return None
    return {"type": kind, "severity": severity, "note": note}


def _version(context):
    version = context.get("version") if isinstance(context, dict) else None
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise BadEntry("format version is not an integer from 1")
    return version


def _json(text):
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadEntry(f"not JSON ({type(exc).__name__})") from None


def _number(value, key):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadEntry(f"{key} is not a number")
    try:
        return float(value)
    except OverflowError:
        raise BadEntry(f"{key} is out of range") from None


def _timestamp(value):
    timestamp = _finite(value, "timestamp")
    if not 0 <= timestamp <= TIMESTAMP_MAX:
        raise BadEntry(f"timestamp {timestamp!r} is not a time of years 1970 to 9999")
    return timestamp


def _finite(value, key):
    number = _number(value, key)
    if not math.isfinite(number):
        raise BadEntry(f"{key} is not finite")
    return number


def _description(description):
    if description == RECOVERY_DESCRIPTION:
        raise BadEntry(f"description {description} is reserved")
    problem = description_error(description)
    if problem:
        raise BadEntry(problem)
    return description


def _hold_fields(context, clean):
    if "timeout" in context:
        timeout = _finite(context["timeout"], "timeout")
        if timeout <= 0:
            raise BadEntry("timeout is not greater than 0")
        clean["timeout"] = context["timeout"]
    if "point" in context:
        point = context["point"]
        if not isinstance(point, str) or point not in POINTS:
            raise BadEntry("point is not one of " + ", ".join(POINTS))
        clean["point"] = point
