"""What a ``resource-update`` may write into a rabbit job's jobspec.

The DWS service's ``resource-update`` replaces the job's ``resources``
and adds its ``exclude`` to ``attributes.system.constraints``.  Both are
read by the scheduler, job-list and every later reader of the jobspec,
and a value of a shape they do not expect fails them (a constraint that
is not an object stops the scheduler, and the jobspec stays in the KVS
for every restart to read again).  So a request is checked whole before
anything of it is written:

- ``resources`` against RFC 14 (canonical jobspec): a non-empty list of
  resource vertices, each an object with a non-empty string ``type``, a
  ``count`` that is a positive integer or an RFC 14 count object
  (``min``, optional ``max``, ``operator``, ``operand``), optional
  ``with`` (a non-empty list of vertices), ``label`` and ``unit``
  (strings) and ``exclusive`` (a boolean); a ``slot`` has a ``label``,
  and there is at least one slot (tasks run in slots).  Other keys are
  left to their readers.
- a constraint against RFC 31: an object of exactly one operator,
  ``properties`` (strings without the characters RFC 20 reserves; ``^``
  negates), ``hostlist`` (RFC 29 hostlists), ``ranks`` (RFC 22 idsets),
  ``and``/``or`` (non-empty lists of constraints) or ``not`` (a list of
  exactly one constraint).  An empty object, or one of several
  operators, is refused: flux-core's matchers disagree on what it means.

Nesting is bounded (:data:`MAX_DEPTH`), so that no value can exhaust the
stack of the job-manager that checks it.
"""

import re

import flux.hostlist

from .. import jsontext

#: Deepest nesting of ``with`` lists, or of ``and``/``or``/``not``.
MAX_DEPTH = 64

#: The characters a property may not contain (RFC 20; ``^`` is allowed
#: as the negation prefix).
PROPERTY_RESERVED = "!&'\"`|()"

#: The RFC 31 operators whose values are constraints.
LOGICAL = ("and", "or", "not")

#: An RFC 22 idset (brackets optional): ids and ranges, comma separated,
#: with no leading zeros.
NUMBER = "(?:0|[1-9][0-9]*)"
RANGE = f"{NUMBER}(?:-{NUMBER})?"
IDSET = re.compile(rf"\[?(?:{RANGE}(?:,{RANGE})*)?\]?\Z")

#: The ranks a constraint may name are below this: more than any instance
#: has, and few enough that the scheduler's Python idsets decode them at
#: once (a rank near 2**31 takes them seconds, for each node matched).
IDSET_LIMIT = 2**20

#: How a NUL is written in JSON text (its only escape: the digits are
#: zeros, which have no case).
NUL_ESCAPE = b"\\u0000"

#: Finds a reserved character in a property (one C call a property).
_RESERVED = re.compile(f"[{re.escape(PROPERTY_RESERVED)}]").search

COUNT_KEYS = ("min", "max", "operator", "operand")
OPERATORS = ("+", "*", "^")


class Malformed(ValueError):
    """A value of a request is not of the shape it must have: the text
    names where (``resources[0].with[1].count``) and what is wrong."""


def is_int(value):
    """True for a JSON integer (a bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def kind(value):
    """The JSON name of ``value``'s type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if is_int(value) or isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def check_update(resources, exclude, text=None):
    """Check a resource-update's ``resources`` and ``exclude`` (None: no
    constraint to add); raise :class:`Malformed` naming the key.
    ``text``: the request's JSON text (bytes) they were read from, if
    known: without the escape of a NUL in it (JSON writes one no other
    way), none of their strings holds one, and they are not walked for
    it."""
    check_resources(resources)
    walk = text is None or NUL_ESCAPE in text
    if walk:
        check_no_nul(resources, "resources")
    if exclude is not None:
        check_constraint(exclude, "exclude")
        if walk:
            check_no_nul(exclude, "exclude")


def check_no_nul(value, where):
    """Refuse a NUL character in any string of ``value``, a key's too:
    flux-core's readers of a jobspec (libjob, librlist) decode it
    without JSON_ALLOW_NUL and would fail on it.  Walked without
    recursion: keys left to their readers may nest as deep as JSON
    does.  A NUL is written ``\\u0000`` by json: an update without one
    (every update but a hostile one) is passed by that test alone, a
    walk costing some 500 bytecodes."""
    try:
        if "\\u0000" not in jsontext.dumps(value):
            return
    except RecursionError:
        pass  # nested deeper than the encoder goes: walked
    stack = [(value, where)]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            if "\0" in value:
                raise Malformed(f"{where}: holds a NUL character")
        elif isinstance(value, dict):
            for key, item in value.items():
                if "\0" in key:
                    raise Malformed(f"{where}: a key holds a NUL character")
                stack.append((item, f"{where}.{key}"))
        elif isinstance(value, list):
            stack.extend((item, f"{where}[{i}]") for i, item in enumerate(value))


# Resources (RFC 14)


def check_resources(resources, where="resources"):
    """Check a jobspec's ``resources``; raise :class:`Malformed`."""
    if not isinstance(resources, list):
        raise Malformed(
            f"{where}: must be an array of resources, not {kind(resources)}"
        )
    if not resources:
        raise Malformed(f"{where}: must not be empty")
    if not _check_vertices(resources, where, 1):
        raise Malformed(f"{where}: has no slot (RFC 14: tasks run in slots)")


# Where a vertex is, as ``(parent, index)``, ``(parent, key)`` or the
# root's name: made into text only for a refusal (every update walks its
# vertices, and formatting the path of each cost more than checking it).


def _named(where):
    """The text of a path (``resources[0].with[1]``)."""
    if isinstance(where, str):
        return where
    parent, part = where
    if isinstance(part, int):
        return f"{_named(parent)}[{part}]"
    return f"{_named(parent)}.{part}"


def _check_vertices(vertices, where, depth):
    """Check a list of vertices; True if a slot is among them or below."""
    if depth > MAX_DEPTH:
        raise Malformed(f"{_named(where)}: nested deeper than {MAX_DEPTH} levels")
    slot = False
    for index, vertex in enumerate(vertices):
        slot = _check_vertex(vertex, (where, index), depth) or slot
    return slot


def _check_vertex(vertex, where, depth):
    """Check one resource vertex; True if it is a slot or has one below."""
    if not isinstance(vertex, dict):
        raise Malformed(f"{_named(where)}: must be an object, not {kind(vertex)}")
    rtype = vertex.get("type")
    if not isinstance(rtype, str) or not rtype:
        raise Malformed(f"{_named(where)}.type: must be a non-empty string")
    count = vertex.get("count")
    if type(count) is not int or count < 1:
        if "count" not in vertex:
            raise Malformed(f"{_named(where)}.count: is missing")
        check_count(count, f"{_named(where)}.count")
    for key in ("label", "unit"):
        if key in vertex and not isinstance(vertex[key], str):
            raise Malformed(
                f"{_named(where)}.{key}: must be a string, not {kind(vertex[key])}"
            )
    if "exclusive" in vertex and not isinstance(vertex["exclusive"], bool):
        raise Malformed(f"{_named(where)}.exclusive: must be a boolean")
    if rtype == "slot" and not vertex.get("label"):
        raise Malformed(f"{_named(where)}.label: a slot must have a non-empty label")
    children = vertex.get("with")
    if children is None and "with" not in vertex:
        return rtype == "slot"
    if not isinstance(children, list) or not children:
        raise Malformed(f"{_named(where)}.with: must be a non-empty array of resources")
    below = _check_vertices(children, (where, "with"), depth + 1)
    return rtype == "slot" or below


def check_count(count, where):
    """A positive integer, or an RFC 14 count object."""
    if is_int(count):
        if count < 1:
            raise Malformed(f"{where}: must be at least 1, not {count}")
        return
    if not isinstance(count, dict):
        raise Malformed(
            f"{where}: must be a positive integer or a count object, not {kind(count)}"
        )
    for key in count:
        if key not in COUNT_KEYS:
            raise Malformed(f"{where}: unknown key {key!r}")
    if "min" not in count:
        raise Malformed(f"{where}.min: is missing")
    for key in ("min", "max", "operand"):
        if key in count and not (is_int(count[key]) and count[key] >= 1):
            raise Malformed(f"{where}.{key}: must be a positive integer")
    if "max" in count and count["max"] < count["min"]:
        raise Malformed(f"{where}.max: must not be less than min")
    _check_step(count, where)


def _check_step(count, where):
    """The operator and operand of a count object (RFC 14)."""
    if ("operator" in count) != ("operand" in count):
        raise Malformed(f"{where}: operator and operand go together")
    if "operator" not in count:
        return
    operator = count["operator"]
    if operator not in OPERATORS:
        raise Malformed(f"{where}.operator: must be one of {', '.join(OPERATORS)}")
    if operator != "+" and count["operand"] < 2:
        raise Malformed(f"{where}.operand: must be at least 2 for {operator!r}")
    if operator == "^" and count["min"] < 2:
        raise Malformed(f"{where}.min: must be at least 2 for '^'")
    if "max" not in count and (operator != "+" or count["operand"] != 1):
        # An unbounded sequence that is not every integer: no scheduler
        # can list its values.
        raise Malformed(f"{where}.max: is needed with this operator and operand")


# Constraints (RFC 31)


def check_constraint(constraint, where, depth=1):
    """Check an RFC 31 constraint; raise :class:`Malformed`."""
    if depth > MAX_DEPTH:
        raise Malformed(f"{where}: nested deeper than {MAX_DEPTH} levels")
    if not isinstance(constraint, dict):
        raise Malformed(
            f"{where}: a constraint must be an object, not {kind(constraint)}"
        )
    if len(constraint) != 1:
        raise Malformed(
            f"{where}: a constraint must have exactly one operator, "
            f"not {len(constraint)}"
        )
    ((operator, values),) = constraint.items()
    check = CHECKS.get(operator)
    if check is None:
        raise Malformed(
            f"{where}: unknown constraint operator {operator!r} "
            f"(known: {', '.join(sorted(CHECKS))})"
        )
    where = f"{where}.{operator}"
    if not isinstance(values, list):
        raise Malformed(f"{where}: must be an array, not {kind(values)}")
    check(values, where, depth)


def _check_logical(values, where, depth):
    operator = where.rsplit(".", 1)[1]
    if operator == "not" and len(values) != 1:
        raise Malformed(f"{where}: must hold exactly one constraint")
    if not values:
        # One scheduler takes an empty "or" as true, another as false.
        raise Malformed(f"{where}: must not be empty")
    for index, value in enumerate(values):
        check_constraint(value, f"{where}[{index}]", depth + 1)


def _check_properties(values, where, depth):
    for index, value in enumerate(values):
        if not isinstance(value, str):
            raise Malformed(f"{where}[{index}]: must be a string, not {kind(value)}")
        if _RESERVED(value):
            bad = [c for c in PROPERTY_RESERVED if c in value]
            raise Malformed(f"{where}[{index}]: invalid character {bad[0]!r}")


def _check_decoded(decode, what):
    def check(values, where, depth):
        for index, value in enumerate(values):
            if not isinstance(value, str):
                raise Malformed(
                    f"{where}[{index}]: must be a string, not {kind(value)}"
                )
            try:
                decode(value)
            except (ValueError, OSError, TypeError):
                raise Malformed(f"{where}[{index}]: invalid {what} {value!r}") from None

    return check


def decode_idset(text):
    """Check an RFC 22 idset as flux-core decodes it (its ids ascending,
    its ranges apart) without expanding it (a large one takes flux.idset
    seconds); ValueError if it is not one."""
    if text.count("[") != text.count("]") or not IDSET.match(text):
        raise ValueError(text)
    previous = -1
    for item in filter(None, text.strip("[]").split(",")):
        first, _, last = item.partition("-")
        first, last = int(first), int(last or first)
        if not previous < first <= last < IDSET_LIMIT:
            raise ValueError(text)
        previous = last


def _check_ranks(values, where, depth):
    _check_decoded(decode_idset, "idset")(values, where, depth)
    if len(values) > 1:
        # flux.idset.IDset, the scheduler's, reads a list as one idset: its
        # items sorted as text, then joined.
        try:
            decode_idset(",".join(sorted(values)))
        except ValueError:
            raise Malformed(
                f"{where}: the idsets joined must make one (ascending, apart)"
            ) from None


CHECKS = {
    "properties": _check_properties,
    "hostlist": _check_decoded(flux.hostlist.decode, "hostlist"),
    "ranks": _check_ranks,
    **{operator: _check_logical for operator in LOGICAL},
}
