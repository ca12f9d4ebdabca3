"""Holds: the named cleanup actions the gate keeps on a job.

A hold is ``(job id, description)``.  It is *pending* until the job reaches
its epilog point, *active* once ``epilog-start`` has been posted for it, and
gone once ``epilog-finish`` has been posted or it was cancelled while
pending.  A *prolog* hold (``point`` :data:`PROLOG`) is the same with the
job's start for the epilog point and ``prolog-start``/``prolog-finish`` for
the epilog events (see :mod:`flux_epilog_gate.gate.prolog`).  A
*dependency* hold (``point`` :data:`DEPEND`) keeps the job in DEPEND
with ``dependency-add``/``dependency-remove``; it is active from the
moment it is registered (see :mod:`flux_epilog_gate.gate.depend`).
"""

import math
import re

try:
    from enum import StrEnum
except ImportError:  # Python < 3.11
    from enum import Enum

    class StrEnum(str, Enum):
        """Members are their values, as strings (enum.StrEnum)."""

        def __str__(self):
            return self.value

        def __format__(self, spec):
            return format(self.value, spec)


class Point(StrEnum):
    """Where a hold keeps its job: before its clean, before its start, or
    in DEPEND."""

    EPILOG = "epilog"
    PROLOG = "prolog"
    DEPEND = "depend"


class HoldState(StrEnum):
    """Where a hold is in its life (the ``state`` of a ``list`` entry)."""

    PENDING = "pending"
    ACTIVE = "active"
    #: Released, timed out or cancelled (no longer on its job).
    GONE = "gone"


class Reason(StrEnum):
    """Why a hold is gone: what a late ``release`` answers."""

    RELEASED = "released"
    TIMED_OUT = "timed out"
    WITHDRAWN = "withdrawn: its record could not be committed"
    #: Finished by the instance's shutdown (:mod:`flux_epilog_gate.gate.shutdown`).
    SHUTDOWN = "finished by shutdown"
    JOB_INACTIVE = "job is inactive"
    #: A pending epilog hold whose job went inactive without it (see
    #: flux_epilog_gate.gate.lost).
    LOST = "lost: the job went inactive before epilog-gate could hold it"
    #: A hold of a job that flux-core dropped at a restart (not replayed).
    LOST_DROPPED = (
        "lost: flux-core dropped the job as the instance restarted (not "
        "replayed): it will never reach the hold's point"
    )
    #: A hold the hold log gives a job past the most it can have.
    LOST_LIMIT = "lost: the job had more holds than a job can have"
    #: A pending prolog hold whose job ended before it started ...
    NEVER_STARTED = "job ended before it started"
    #: ... or started while the gate was not loaded.
    STARTED_UNGATED = "job started while epilog-gate was not loaded"
    #: A prolog hold whose prolog-start could not be posted.
    PROLOG_START_FAILED = "prolog-start failed"
    #: A dependency hold whose job left DEPEND while the gate was not
    #: there to see it (its dependency-add was lost in a crash).
    LEFT_DEPEND = "job left DEPEND while epilog-gate was not loaded"
    #: A dependency hold whose dependency-add could not be posted again.
    DEPENDENCY_ADD_FAILED = "dependency-add failed"
    #: An in-process listener failed on the hold's activation (see
    #: flux_epilog_gate.gate.listeners): nothing would ever end it.
    LISTENER_FAILED = "its activation's handler failed"


# The members by their short names, as the gate's modules use them.  (A
# member read from its class takes a slow path, EnumType having a
# __getattr__: the end of every hold reads these two.)
EPILOG, PROLOG, DEPEND = Point
POINTS = tuple(point.value for point in Point)
PENDING, ACTIVE, GONE = HoldState
RELEASED, TIMED_OUT = Reason.RELEASED, Reason.TIMED_OUT

#: ``epilog-finish`` status posted when a hold's timeout expires.
TIMEOUT_STATUS = 124

#: Status of a hold ended because a listener failed on its activation.
LISTENER_FAILED_STATUS = 1

#: ``epilog-finish`` status of a hold that the instance's shutdown finishes
#: (see :mod:`flux_epilog_gate.gate.shutdown`): 128 + SIGTERM, the status of a
#: command terminated by the shutdown; and the reason ``release`` answers.
SHUTDOWN_STATUS = 143
SHUTDOWN_REASON = Reason.SHUTDOWN

#: Job exception type raised for a failed or timed-out hold (severity 1).
EXCEPTION_TYPE = "epilog"
EXCEPTION_SEVERITY = 1

#: Names of the entries that record holds (see
#: :mod:`flux_epilog_gate.gate.holdlog`).  Recovery reads them merged with the
#: job's eventlog, so they follow its rules: names must not start with
#: "epilog-" or "prolog-", which the job-manager takes for perilog actions.
HOLD_EVENT = "epilog_gate.hold"
CANCEL_EVENT = "epilog_gate.cancel"
RELEASE_EVENT = "epilog_gate.release"

#: Description of the gate's own short-lived epilog action that keeps a
#: job from going inactive while its holds are being recovered.  The ':'
#: keeps it out of the namespace users can hold.
RECOVERY_DESCRIPTION = "epilog-gate:recovery"

DESCRIPTION_MAX = 64
_DESCRIPTION = re.compile(r"[A-Za-z0-9._-]{1,%d}\Z" % DESCRIPTION_MAX)


def exception_of(context):
    """The fatal job exception whose event context is ``context``, as the
    end of a hold records it (``{type, severity, note}``), or True if it
    has no type or no note (its end then records none)."""
    kind, note = context.get("type"), context.get("note")
    if not isinstance(kind, str) or not kind or not isinstance(note, str):
        return True
    return {"type": kind, "severity": 0, "note": note}


def description_error(description):
    """Return why ``description`` is not a valid hold description, or None."""
    if not isinstance(description, str):
        return "description must be a string"
    if not description:
        return "description must not be empty"
    if len(description) > DESCRIPTION_MAX:
        return f"description is longer than {DESCRIPTION_MAX} characters"
    if not _DESCRIPTION.match(description):
        return (
            f"description {description!r} may only contain "
            "letters, digits, '.', '_' and '-'"
        )
    return None


#: Microseconds for which :func:`stamp` writes its text as six decimals:
#: below 2**32 s a double's spacing is under half a microsecond, so the
#: double nearest a whole microsecond has that decimal (trailing zeros
#: stripped) as its shortest ``repr``; from 1e-4 s ``repr`` uses no
#: exponent.
STAMP_FIXED = (100, 2**32 * 1_000_000)


def stamp(now):
    """``(t, text)``: time ``now`` rounded to the microsecond, as
    eventlogs keep it, and ``repr(t)``, the text json writes of it: the
    time of every hold-log line (``port.stamp()``).  Every line takes its
    time from here, rounded alike, so that the lines of a log replay in
    the order they were written (a line stamped with a raw time just
    after a rounded one could sort before it).  The real port writes it in
    C (plugin/stamp.c, the same rule), where a float's ``repr`` was the
    costliest step of a hold's Python."""
    us = round(now * 1e6)
    t = us / 1e6
    if not STAMP_FIXED[0] <= us < STAMP_FIXED[1]:
        return t, repr(t)
    text = ("%d.%06d" % divmod(us, 1_000_000)).rstrip("0")
    return t, text + "0" if text[-1] == "." else text


class Hold:
    """One hold on one job."""

    __slots__ = (
        "id",
        "description",
        "state",
        "userid",
        "t_hold",
        "t_start",
        "timeout",
        "timer",
        "t_text",
        "point",
        "aborted",
        "record_error",
    )

    def __init__(
        self,
        jobid,
        description,
        userid,
        t_hold,
        timeout=None,
        point=EPILOG,
        t_text=None,
    ):
        self.id = jobid
        self.description = description
        self.state = PENDING
        self.userid = userid
        self.t_hold = t_hold
        self.t_start = None
        self.timeout = timeout
        self.timer = None
        # t_hold as json writes it, once the hold's log line is made (see
        # logentries.hold_entry): snapshots and list answers write it again.
        self.t_text = t_text
        self.point = point
        # An active prolog hold whose job will never start (it entered
        # CLEANUP): its service should abort the setup and release it.
        self.aborted = False
        # Why its record could not be committed (the hold was withdrawn):
        # the answer to this hold's requests, also those that repeat it.
        self.record_error = None

    def to_dict(self):
        """Return the hold as a ``list`` entry."""
        entry = {
            "id": self.id,
            "description": self.description,
            "state": self.state,
            "userid": self.userid,
            "t_hold": self.t_hold,
            "point": self.point,
        }
        if self.t_start is not None:
            entry["t_start"] = self.t_start
        if self.timeout is not None:
            entry["timeout"] = self.timeout
        return entry

    def __repr__(self):
        return f"Hold({self.id}, {self.description!r}, {self.state})"


_VERBATIM_RE = re.compile(r"[A-Za-z0-9._-]*\Z").match


class _Verdicts(dict):
    """Whether json writes a string as it is (hold descriptions are of
    these), by string: ``_VERBATIM[text]``.  Each hold-log line asks of
    its description, and a regular expression's match costs far more
    than a lookup; the few descriptions a site uses recur.  Bounded: past
    :attr:`LIMIT` strings it starts afresh."""

    LIMIT = 4096

    def __missing__(self, text):
        verdict = _VERBATIM_RE(text) is not None
        if len(self) >= self.LIMIT:
            self.clear()
        self[text] = verdict
        return verdict

    def __call__(self, text):
        """The verdict as a call, ``_VERBATIM(text)``, as the match was."""
        return self[text]


#: Strings json writes as they are: ``_VERBATIM[text]`` (see _Verdicts).
_VERBATIM = _Verdicts()


def json_scalar(value):
    """The JSON text of ``value`` if json would write it as ``repr`` does
    (an int, a finite float, a string of letters, digits, '.', '_' and
    '-'), else None."""
    if type(value) is int:
        return repr(value)
    return _number(value) if type(value) is float else _quote(value)


def _number(value):
    if type(value) is float and math.isfinite(value):
        return repr(value)
    if type(value) is int:
        return repr(value)
    return None


def _quote(value):
    if isinstance(value, str) and _VERBATIM[value]:
        return f'"{str.__str__(value)}"'
    return None
