"""The lines of the hold log: how each record is written.

Entries are RFC 18 eventlog lines (see :mod:`flux_epilog_gate.gate.holdlog`
for what each means); the log's reader is
:mod:`flux_epilog_gate.gate.logparse`.
"""

import json
from math import isfinite

from .holds import _VERBATIM, CANCEL_EVENT, EPILOG, HOLD_EVENT, RELEASE_EVENT, Point
from .logparse import FORMAT, FORMAT_EVENT

#: The KVS key of the log.
KEY = "epilog-gate.holds"

#: Key of the ``epilog-start`` context that marks the gate's own: with it,
#: an active hold is recovered from the job's eventlog alone.
MARKER = "epilog_gate"


def hold_entry(hold):
    """The log line that records ``hold``.  A snapshot writes the line of
    every hold again: the hold keeps the text of its time (``t_text``),
    as a float's ``repr`` costs more than the rest of the line, and not
    the line, which would cost every pending hold some 150 bytes."""
    jobid, description, t = hold.id, hold.description, hold.t_hold
    text = hold.t_text
    if text is None and type(t) is float and isfinite(t):
        text = hold.t_text = repr(t)
    point = hold.point
    if (
        text is not None
        and hold.timeout is None
        and type(jobid) is int
        and type(description) is str
        and _VERBATIM[description]
    ):
        # The common lines, written out (what _line writes of them).
        if point == EPILOG:
            return (
                f'{{"timestamp":{text}{_HOLD_CONTEXT}{jobid}'
                f'{_DESCRIPTION}{description}"}}}}\n'
            )
        point_text = _POINT_TEXT.get(point)
        if point_text is not None:
            return (
                f'{{"timestamp":{text}{_HOLD_CONTEXT}{jobid}'
                f'{_DESCRIPTION}{description}{_POINT}{point_text}"}}}}\n'
            )
    context = {"id": jobid, "description": description}
    if hold.timeout is not None:
        context["timeout"] = hold.timeout
    if point != EPILOG:
        context["point"] = point
    return _line(t, HOLD_EVENT, context, text)


def format_entry(timestamp, text=None):
    """The log line that says the log's format (:data:`FORMAT`): the
    first of every snapshot, and of a log begun anew; ``text``:
    ``repr(timestamp)`` if the caller has it (``port.stamp()``)."""
    return _line(timestamp, FORMAT_EVENT, {"version": FORMAT}, text)


def cancel_entry(hold, timestamp, text=None):
    """The log line that records the cancellation of pending ``hold``;
    ``text``: ``repr(timestamp)`` if the caller has it (``port.stamp()``)."""
    return _line(
        timestamp,
        CANCEL_EVENT,
        {"id": hold.id, "description": hold.description},
        text,
    )


def release_entry(hold, status, timestamp, text=None, exception=None):
    """The log line that records the release of active ``hold``;
    ``text``: ``repr(timestamp)`` if the caller has it (``port.stamp()``);
    ``exception``: the job exception the releaser raised with it."""
    jobid, description = hold.id, hold.description
    if exception is not None:
        context = {"id": jobid, "description": description, "status": status}
        context["exception"] = exception
        return _json_line(timestamp, RELEASE_EVENT, context)
    if (
        type(jobid) is int
        and type(status) is int
        and type(description) is str
        and _VERBATIM[description]
        and type(timestamp) is float
        and isfinite(timestamp)
    ):
        # One per release: written out (what _line writes of it).
        return (
            f'{{"timestamp":{text or repr(timestamp)}{_RELEASE_CONTEXT}{jobid}'
            f"{_DESCRIPTION}{description}{_STATUS}{status}}}}}\n"
        )
    return _line(
        timestamp,
        RELEASE_EVENT,
        {"id": jobid, "description": description, "status": status},
        text,
    )


#: The fixed parts of the lines written out by hold_entry and release_entry.
_HOLD_CONTEXT = f',"name":"{HOLD_EVENT}","context":{{"id":'
_RELEASE_CONTEXT = f',"name":"{RELEASE_EVENT}","context":{{"id":'
_DESCRIPTION = ',"description":"'
_STATUS = '","status":'
_POINT = '","point":"'
#: Each point's text in a hold's line.  A point is a member of Point, a
#: str subclass: looked up here (a member hashes as its text), not tested
#: for being a plain str, which sent every prolog and dependency hold's
#: line through _line.
_POINT_TEXT = {point: point.value for point in Point if _VERBATIM[point.value]}


def _line(timestamp, name, context, stamp=None):
    """``json.dumps`` of the entry, compact, newline-terminated: written
    out directly when every value needs no escaping (a log line per hold
    and per release, in the job-manager's thread: the test of each value
    is inlined, as a call per value costs more than the writing), else by
    json.  ``stamp``: ``repr(timestamp)`` if the caller has it already."""
    parts = []
    for key, value in context.items():
        if isinstance(value, str):
            if not _VERBATIM[value]:
                return _json_line(timestamp, name, context)
            text = f'"{str.__str__(value)}"'
        elif type(value) is int or (type(value) is float and isfinite(value)):
            text = repr(value)
        else:
            return _json_line(timestamp, name, context)
        parts.append(f'"{key}":{text}')
    if type(timestamp) is not float or not isfinite(timestamp):
        return _json_line(timestamp, name, context)
    return (
        f'{{"timestamp":{stamp or repr(timestamp)},"name":"{name}",'
        f'"context":{{{",".join(parts)}}}}}\n'
    )


def _json_line(timestamp, name, context):
    entry = {"timestamp": timestamp, "name": name, "context": context}
    return json.dumps(entry, separators=(",", ":")) + "\n"
