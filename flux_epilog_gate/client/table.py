"""The ``list`` table in its default format, written directly.

flux's :class:`~flux.util.OutputFormat` formats a row by parsing the
format and converting each field through its formatter, some 0.3 ms a
row: minutes for 100,000 holds.  The default format's columns are fixed,
so its rows are written here with plain string formatting, to the same
text: the widened columns (``+:``) as wide as their widest value or their
heading, durations by flux's own ``fsd``, and the values flux's formatter
takes for empty written ``-`` in the columns that ask so (``h``).
t/test_cli_table.py checks the two agree.
"""

import math
import operator

from flux.util import empty_outputs, fsd

#: The default format (flux-epilog-gate(1)), which this module writes.
DEFAULT_FORMAT = (
    "+:{id.f58:<12} +:{description:<11} {state:<7} {point:<6} "
    "+:{username:<8} {age!F:>7} {active!F:>7h} {timeout!F:>7h}"
)


def default_lines(columns, now, username, no_header=False):
    """The lines ``HoldFormat(DEFAULT_FORMAT).print_items()`` prints of
    the holds whose list entries are ``columns`` (see
    :func:`~flux_epilog_gate.listentry.columns_of`), in their order, at
    time ``now``; ``username(userid)`` names a job's owner."""
    empty = frozenset(empty_outputs())
    ids = F58().many(columns["id"])
    descriptions = columns["description"]
    names = {userid: username(userid) for userid in set(columns["userid"])}
    users = list(map(names.__getitem__, columns["userid"]))
    # Fixed widths baked into one %-format: str values only, padded as
    # format()'s "<" and ">" pad them.
    row = (
        f"%-{_widest(ids, 12, 'JOBID', no_header, empty)}s "
        f"%-{_widest(descriptions, 11, 'DESCRIPTION', no_header, empty)}s "
        f"%-7s %-6s %-{_widest(users, 8, 'USER', no_header, empty)}s %7s %7s %7s"
    )
    lines = [] if no_header else [row % HEADINGS]
    lines += map(
        row.__mod__,
        zip(
            ids,
            descriptions,
            columns["state"],
            ["epilog" if point is None else point for point in columns["point"]],
            users,
            ages(now, columns["t_hold"]),
            [
                (
                    "-"
                    if t_start is None
                    else _or_dash(fsd(max(0.0, now - t_start)), empty)
                )
                for t_start in columns["t_start"]
            ],
            map(_Durations(empty).__getitem__, columns["timeout"]),
        ),
    )
    return lines


#: The default format's headings.
HEADINGS = (
    "JOBID",
    "DESCRIPTION",
    "STATE",
    "POINT",
    "USER",
    "AGE",
    "ACTIVE",
    "TIMEOUT",
)

INFINITY = math.inf


def ages(now, t_holds):
    """``fsd(now - t_hold)`` of each of ``t_holds``, "0s" for an age of
    0 or less (a clock stepped back): flux's fsd() written inline, a
    function call less per hold."""
    return [
        (
            "0s"
            if not (age := now - t_hold) >= 1.0e-3
            else (
                "%.03fs" % age
                if age < 10.0
                else (
                    "%.4gs" % age
                    if age < 60.0
                    else (
                        "%.4gm" % (age / 60.0)
                        if age < 3600.0
                        else (
                            "%.4gh" % (age / 3600.0)
                            if age < 86400.0
                            else "inf" if age == INFINITY else "%.4gd" % (age / 86400.0)
                        )
                    )
                )
            )
        )
        for t_hold in t_holds
    ]


def in_order(columns):
    """``columns`` with their holds by job id, then description, as the
    gate answers them: reordered only if they are not."""
    ids, descriptions = columns["id"], columns["description"]
    if all(map(operator.lt, ids, ids[1:])):
        return columns
    order = sorted(range(len(ids)), key=lambda i: (ids[i], descriptions[i]))
    if order == list(range(len(ids))):
        return columns
    return {key: [values[i] for i in order] for key, values in columns.items()}


def _widest(values, least, heading, no_header, empty):
    """A widened column's width: its spec's, its heading's (unless there
    is no header), or its widest value's (one flux takes for empty
    counts as none)."""
    widest = max(least, 0 if no_header else len(heading))
    if max(map(len, values), default=0) <= widest:
        return widest  # the common case, without a set of the values
    return max(widest, max(map(len, set(values) - empty), default=0))


def _or_dash(text, empty):
    return "-" if text in empty else text


class _Durations(dict):
    """A ``{timeout!F:>7h}`` column's texts by value: holds share a few
    timeouts.  An int and an equal float give the same text."""

    def __init__(self, empty):
        super().__init__()
        self.empty = empty
        self[None] = "-"

    def __missing__(self, value):
        text = self[value] = _or_dash(fsd(value), self.empty)
        return text


#: FLUID's base 58 digits (flux-core's f58 job ids).
F58_DIGITS = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"

#: Each pair of digits, by its value (0 to 58**2 - 1).
F58_PAIRS = tuple(a + b for a in F58_DIGITS for b in F58_DIGITS)

#: The last six digits of an id come from pairs; ids of one instance made
#: within days of each other share the rest.
F58_PAIR = 58**2
F58_PAIR_2 = 58**4
F58_TAIL = 58**6

#: Job ids are 64-bit.
F58_LIMIT = 2**64


class F58:
    """``JobID(jobid).f58`` written without a libflux call per id: a call,
    its string and its decoding cost some 3 µs, a third of a second for
    100,000 holds.  The prefix (``ƒ``, or ``f`` with
    ``FLUX_F58_FORCE_ASCII``) is libflux's own, taken once."""

    def __init__(self):
        from flux.job import JobID

        self.prefix = JobID(0).f58[:-1]
        self.heads = _Heads(self.prefix)

    def __call__(self, jobid):
        """The f58 text of ``jobid``."""
        return self.many((jobid,))[0]

    def many(self, jobids):
        """The f58 text of each of ``jobids``: an id of seven digits or
        more, the common case, from its pairs without a call."""
        heads, pairs = self.heads, F58_PAIRS
        # Two operations on the id itself: its quotient by a pair (q) is a
        # small int for most ids, cheaper to divide again.
        return [
            (
                heads[(q := j // F58_PAIR) // F58_PAIR_2]
                + pairs[q // F58_PAIR % F58_PAIR]
                + pairs[q % F58_PAIR]
                + pairs[j % F58_PAIR]
                if type(j) is int and F58_TAIL <= j < F58_LIMIT
                else self._short(j)
            )
            for j in jobids
        ]

    def _short(self, jobid):
        """An id of six digits or fewer, or one flux refuses."""
        if type(jobid) is not int or not 0 <= jobid < F58_LIMIT:
            from flux.job import JobID

            return JobID(jobid).f58  # raises as flux would
        return self.prefix + _digits(jobid)


class _Heads(dict):
    """The f58 text of an id's digits before its last six, by their value,
    each made when first asked for."""

    def __init__(self, prefix):
        super().__init__()
        self.prefix = prefix

    def __missing__(self, head):
        text = self[head] = self.prefix + _digits(head)
        return text


def _digits(number):
    """``number``'s base 58 digits, without leading zeros ("1")."""
    digits = []
    while True:
        number, digit = divmod(number, 58)
        digits.append(F58_DIGITS[digit])
        if not number:
            return "".join(reversed(digits))
