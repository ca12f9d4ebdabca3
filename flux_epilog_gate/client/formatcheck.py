"""A ``list`` format, checked before anything is printed with it.

flux's OutputFormat checks a format's field names; what Python does with
a field's spec shows only when a line is made.  A width of a hundred
billion makes Python try to allocate that many characters (a
MemoryError with no message), a field nested in a spec takes a value
(a job id) as its width, and a spec of the wrong type fails only on the
first hold.  So a format is refused here, as a usage error naming the
problem, if a field's spec nests a field or asks for a width or
precision past :data:`WIDTH_MAX`, or if it cannot show a sample hold.
"""

import re

#: Widest field (or longest precision) a format may ask for: far wider
#: than any terminal, far short of what would fill the memory.
WIDTH_MAX = 10_000

#: What making a line of a bad format raises (flux's formatter and
#: Python's ``format``).
FORMAT_ERRORS = (
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    AttributeError,
    OverflowError,
)

_NUMBER = re.compile(r"[0-9]+")


def python_spec(spec):
    """The part of a field's spec that sets its width: what follows
    ``::`` (a date's strftime text comes before it), else all of it.
    flux's formatter reads a ``!d`` field's spec without ``::`` as a
    width too, for its header."""
    if "::" in spec:
        return spec.split("::", 1)[1]
    return spec


def spec_problem(field, spec, conv):
    """What is wrong with the spec of ``field``, or None."""
    shown = (
        "{" + field + ("!" + conv if conv else "") + (":" + spec if spec else "") + "}"
    )
    if "{" in spec or "}" in spec:
        return f"{shown}: a field inside a spec is not supported"
    for number in _NUMBER.findall(python_spec(spec)):
        if len(number) > len(str(WIDTH_MAX)) or int(number) > WIDTH_MAX:
            return (
                f"{shown}: a width or precision of {number} is more than "
                f"{WIDTH_MAX}"
            )
    return None


def check(formatter, sample):
    """Raise ValueError naming what keeps ``formatter`` (a flux
    OutputFormat) from showing holds: a bad spec, or a failure to make
    its header or a line of ``sample`` (an item with every field set)."""
    for _, field, spec, conv in formatter.format_list:
        problem = spec_problem(field, spec, conv) if field else None
        if problem:
            raise ValueError(f"format: {problem}")
    try:
        formatter.header()
        formatter.format(sample)
    except FORMAT_ERRORS as exc:
        raise ValueError(f"format: cannot show a hold: {exc}") from None
