"""The answer to ``list``: every listed hold's entry as compact JSON text,
the text ``json.dumps`` writes of :meth:`Hold.to_dict
<flux_epilog_gate.gate.holds.Hold.to_dict>`, key for key.

A list of 100,000 holds is answered from the job-manager's thread, so an
entry is one f-string: the fixed texts of a hold's state and point are
constants, a description's quoted text is made once per answer, and the
hold's time is the text its hold-log line was written with
(:func:`hold_entry <flux_epilog_gate.gate.logentries.hold_entry>` keeps
it): writing a float out again is the dearest part of an entry.  Any
value the constants do not cover is written by json.

An answer by column (``list`` with ``columns: true``) has the same
values, an array per key (:data:`COLUMNS`), ``null`` where a hold has
none: a client decodes a few long arrays of numbers and strings in half
the time it takes to decode as many objects, each with its keys.
"""

import json
from math import isfinite

from ..listentry import KEYS
from .holds import ACTIVE, DEPEND, EPILOG, PENDING, PROLOG

_PENDING = ',"state":"pending","userid":'
_ACTIVE = ',"state":"active","userid":'
_EPILOG = ',"point":"epilog"'
_PROLOG = ',"point":"prolog"'
_DEPEND = ',"point":"depend"'
_T_START = ',"t_start":'
_TIMEOUT = ',"timeout":'


def list_answer(holds):
    """The text of ``{"holds": [...]}`` of ``holds``' entries."""
    return '{"holds":[' + ",".join(entries(holds)) + "]}"


#: The columns of an answer by column, in the order they are written.
COLUMNS = KEYS


def columns_answer(holds):
    """The text of ``{"columns": {key: [...], ...}}`` of ``holds``: for
    each key of :data:`COLUMNS` its values, hold by hold, as
    :func:`list_answer` writes them (``null`` for a hold without it)."""
    holds = list(holds)
    quoted = _Quoted()
    timeouts = _Timeouts()
    columns = (
        [str(h.id) for h in holds],
        [quoted[d] if (d := h.description) in quoted else quoted.add(d) for h in holds],
        [_STATES.get(h.state) or json.dumps(h.state) for h in holds],
        [str(h.userid) for h in holds],
        [_number(h.t_hold) if (w := h.t_text) is None else w for h in holds],
        [_POINTS.get(h.point) or json.dumps(h.point) for h in holds],
        ["null" if (t := h.t_start) is None else _number(t) for h in holds],
        [
            (
                "null"
                if (o := h.timeout) is None
                else (
                    timeouts[o]
                    if type(o) is float and o in timeouts
                    else timeouts.add(o)
                )
            )
            for h in holds
        ],
    )
    return (
        '{"columns":{'
        + ",".join(
            f'"{key}":[' + ",".join(values) + "]"
            for key, values in zip(COLUMNS, columns)
        )
        + "}}"
    )


def entry(hold):
    """The hold's list entry, as JSON text: :meth:`Hold.to_dict
    <flux_epilog_gate.gate.holds.Hold.to_dict>` as ``list`` answers it."""
    return entries((hold,))[0]


def entries(holds):
    """Each hold's list entry, as JSON text."""
    quoted = _Quoted()
    timeouts = _Timeouts()
    return [
        f'{{"id":{h.id},"description":'
        f"{quoted[d] if (d := h.description) in quoted else quoted.add(d)}"
        f"{_PENDING if (s := h.state) is PENDING else _ACTIVE if s is ACTIVE else _state(s)}"  # noqa: E501
        f'{h.userid},"t_hold":'
        f"{_number(h.t_hold) if (w := h.t_text) is None else w}"
        f"{_EPILOG if (p := h.point) is EPILOG else _PROLOG if p is PROLOG else _DEPEND if p is DEPEND else _point(p)}"  # noqa: E501
        f'{"" if (t := h.t_start) is None else _T_START + _number(t)}'
        f'{"" if (o := h.timeout) is None else _TIMEOUT + (timeouts[o] if type(o) is float and o in timeouts else timeouts.add(o))}'  # noqa: E501
        "}"
        for h in holds
    ]


#: The JSON texts of the constant states and points (by identity first:
#: a state or point of the gate's own is one of these objects).
_STATES = {PENDING: '"pending"', ACTIVE: '"active"'}
_POINTS = {EPILOG: '"epilog"', PROLOG: '"prolog"', DEPEND: '"depend"'}


def _number(value):
    """A number as json writes it: a finite float as ``repr`` does (json
    writes NaN and the infinities its own way)."""
    if type(value) is float and isfinite(value):
        return repr(value)
    return json.dumps(value)


def _state(state):
    return f',"state":{json.dumps(state)},"userid":'


def _point(point):
    return f',"point":{json.dumps(point)}'


class _Quoted(dict):
    """Descriptions' JSON texts, by description: the holds of an answer
    share a few."""

    def add(self, description):
        text = json.dumps(description)
        try:
            self[description] = text
        except TypeError:  # not a string: written each time
            pass
        return text


class _Timeouts(dict):
    """Timeouts' JSON texts: a hold's timeout is most often the
    configured one, a float (written the dearest).  Only positive floats
    are kept (an int or -0.0 equal to a kept float is written apart)."""

    def add(self, timeout):
        text = json.dumps(timeout)
        if type(timeout) is float and timeout > 0:
            self[timeout] = text
        return text
