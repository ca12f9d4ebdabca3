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

from flux.util import empty_outputs, fsd

#: The default format (flux-epilog-gate(1)), which this module writes.
DEFAULT_FORMAT = (
    "+:{id.f58:<12} +:{description:<11} {state:<7} {point:<6} "
    "+:{username:<8} {age!F:>7} {active!F:>7h} {timeout!F:>7h}"
)


def default_lines(holds, now, username, no_header=False):
    """The lines ``HoldFormat(DEFAULT_FORMAT).print_items()`` prints of
    ``holds`` (list entries, in order) at time ``now``; ``username(userid)``
    names a job's owner."""
    empty = frozenset(empty_outputs())
    ids = F58().many([hold["id"] for hold in holds])
    descriptions = [hold["description"] for hold in holds]
    users = [username(hold["userid"]) for hold in holds]
    # Fixed widths baked into one %-format: str values only, padded as
    # format()'s "<" and ">" pad them.
    row = (
        f"%-{_widest(ids, 12, 'JOBID', no_header, empty)}s "
        f"%-{_widest(descriptions, 11, 'DESCRIPTION', no_header, empty)}s "
        f"%-7s %-6s %-{_widest(users, 8, 'USER', no_header, empty)}s %7s %7s %7s"
    )
    lines = []
    if not no_header:
        lines.append(
            row
            % (
                "JOBID",
                "DESCRIPTION",
                "STATE",
                "POINT",
                "USER",
                "AGE",
                "ACTIVE",
                "TIMEOUT",
            )
        )
    timeouts = _Durations(empty)
    lines += [
        row
        % (
            jobid,
            description,
            hold["state"],
            hold.get("point", "epilog"),
            user,
            # fsd() of a negative age (a clock stepped back) as of 0.
            fsd(age) if (age := now - hold["t_hold"]) > 0.0 else "0s",
            (
                "-"
                if (t_start := hold.get("t_start")) is None
                else _or_dash(fsd(max(0.0, now - t_start)), empty)
            ),
            timeouts[hold.get("timeout")],
        )
        for hold, jobid, description, user in zip(holds, ids, descriptions, users)
    ]
    return lines


def _widest(values, least, heading, no_header, empty):
    """A widened column's width: its spec's, its heading's (unless there
    is no header), or its widest value's (one flux takes for empty
    counts as none)."""
    widest = max(least, 0 if no_header else len(heading))
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
        return [
            (
                heads[j // F58_TAIL]
                + pairs[j // F58_PAIR_2 % F58_PAIR]
                + pairs[j // F58_PAIR % F58_PAIR]
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
