"""Requests of the ``job-manager.epilog-gate.*`` methods, checked.

Each ``parse_*`` function takes a decoded JSON payload and returns the
request's values, or raises GateError: EPROTO for a payload of the wrong
shape (not an object, a missing or unknown key, a value of the wrong type),
EINVAL for a value of the right type that is out of range.
"""

import errno

from ..errors import GateError
from .config import as_seconds, duration_problem
from .holds import EPILOG, POINTS, description_error

JOBID_MAX = 2**64 - 1
STATUS_MIN = -(2**31)
STATUS_MAX = 2**31 - 1

#: The largest payload of a request to the gate, in bytes (refused with
#: EMSGSIZE by the runtime, before it is decoded): the broker keeps a
#: watch request for as long as its stream lasts, and a hold or release
#: until its record is committed.  The largest request a client needs,
#: a watch of WATCH_DESCRIPTIONS_MAX descriptions of the longest kind,
#: is some 70 KiB; a hold is some 100 bytes.
REQUEST_BYTES_MAX = 128 * 1024

#: The most descriptions one watch request may name: a service watches
#: the few it serves.
WATCH_DESCRIPTIONS_MAX = 1024


def _object(payload, method, required, optional=()):
    if not isinstance(payload, dict):
        raise GateError(errno.EPROTO, f"{method}: payload must be a JSON object")
    unknown = sorted(set(payload) - set(required) - set(optional), key=str)
    if unknown:
        raise GateError(
            errno.EPROTO, f"{method}: unknown key {unknown[0]!r} in payload"
        )
    for key in required:
        if key not in payload:
            raise GateError(errno.EPROTO, f"{method}: missing key {key!r}")
    return payload


def _integer(value, method, key):
    if isinstance(value, bool) or not isinstance(value, int):
        raise GateError(errno.EPROTO, f"{method}: {key} must be an integer")
    return value


def _jobid(value, method):
    _integer(value, method, "id")
    if not 0 <= value <= JOBID_MAX:
        raise GateError(errno.EINVAL, f"{method}: id {value} is not a job id")
    return value


def _description(value, method):
    if not isinstance(value, str):
        raise GateError(errno.EPROTO, f"{method}: description must be a string")
    problem = description_error(value)
    if problem:
        raise GateError(errno.EINVAL, f"{method}: {problem}")
    return value


def parse_hold(payload):
    """Return ``(id, description, timeout)``; timeout is None if absent."""
    _object(payload, "hold", ("id", "description"), ("timeout", "point"))
    jobid = _jobid(payload["id"], "hold")
    description = _description(payload["description"], "hold")
    timeout = payload.get("timeout")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise GateError(errno.EPROTO, "hold: timeout must be a number")
        problem = duration_problem(as_seconds(timeout))
        if problem:
            raise GateError(errno.EINVAL, f"hold: timeout {timeout} {problem}")
        timeout = float(timeout)
    return jobid, description, timeout


def _point(value, method):
    if not isinstance(value, str):
        raise GateError(errno.EPROTO, f"{method}: point must be a string")
    if value not in POINTS:
        raise GateError(
            errno.EINVAL,
            f"{method}: point {value!r} must be one of " + ", ".join(map(repr, POINTS)),
        )
    return value


def parse_hold_point(payload):
    """Return the ``point`` of a hold request that :func:`parse_hold`
    accepted (default ``"epilog"``)."""
    point = payload.get("point")
    return EPILOG if point is None else _point(point, "hold")


def parse_release(payload):
    """Return ``(id, description, status)``."""
    _object(payload, "release", ("id", "description"), ("status",))
    jobid = _jobid(payload["id"], "release")
    description = _description(payload["description"], "release")
    status = _integer(payload.get("status", 0), "release", "status")
    if not STATUS_MIN <= status <= STATUS_MAX:
        raise GateError(errno.EINVAL, f"release: status {status} is out of range")
    return jobid, description, status


def parse_list(payload):
    """Return the job id to list, or None for all jobs."""
    _object(payload, "list", (), ("id", "columns"))
    jobid = payload.get("id")
    return None if jobid is None else _jobid(jobid, "list")


def parse_list_columns(payload):
    """Return whether a list request that :func:`parse_list` accepted
    asks for its answer by column (``columns``, a boolean; absent or
    null, false)."""
    columns = payload.get("columns")
    if columns is None:
        return False
    if not isinstance(columns, bool):
        raise GateError(errno.EPROTO, "list: columns must be a boolean")
    return columns


def parse_snapshot(payload):
    """Check a snapshot request's payload: an empty object, or none."""
    _object({} if payload is None else payload, "snapshot", (), ())


def parse_watch_points(payload):
    """Return the set of points to watch (``points``) of a watch request
    that :func:`parse_watch` accepted, or None for both."""
    points = payload.get("points")
    if points is None:
        return None
    if not isinstance(points, list):
        raise GateError(errno.EPROTO, "watch: points must be a list")
    return frozenset(_point(p, "watch") for p in points) or None


def parse_watch(payload):
    """Return the set of descriptions to watch, or None for all."""
    _object(payload, "watch", (), ("descriptions", "points", "lost"))
    descriptions = payload.get("descriptions")
    if descriptions is None:
        return None
    if not isinstance(descriptions, list):
        raise GateError(errno.EPROTO, "watch: descriptions must be a list")
    if len(descriptions) > WATCH_DESCRIPTIONS_MAX:
        raise GateError(
            errno.EINVAL,
            f"watch: {len(descriptions)} descriptions, more than the limit "
            f"of {WATCH_DESCRIPTIONS_MAX}",
        )
    return frozenset(_description(d, "watch") for d in descriptions) or None


def parse_watch_lost(payload):
    """Return whether a watch request that :func:`parse_watch` accepted
    asks for lost holds too (``lost``, a boolean; absent or null,
    false)."""
    lost = payload.get("lost")
    if lost is None:
        return False
    if not isinstance(lost, bool):
        raise GateError(errno.EPROTO, "watch: lost must be a boolean")
    return lost


def parse_watch_ack(payload):
    """Return ``(matchtag, count)`` of a ``watch-ack``: the stream (the
    matchtag of the client's watch request) and how many of its
    activations the client has read."""
    _object(payload, "watch-ack", ("matchtag", "count"))
    matchtag = _integer(payload["matchtag"], "watch-ack", "matchtag")
    count = _integer(payload["count"], "watch-ack", "count")
    if not 0 <= matchtag < 2**32:
        raise GateError(errno.EINVAL, f"watch-ack: matchtag {matchtag} is out of range")
    if count < 0:
        raise GateError(errno.EINVAL, f"watch-ack: count {count} is negative")
    return matchtag, count
