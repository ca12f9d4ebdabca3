"""Configuration of the gate: plugin load options and the ``[epilog-gate]``
table of the instance config.

Options given to ``flux jobtap load`` (or in the ``conf`` table of a
``[job-manager] plugins`` entry) take precedence over the ``[epilog-gate]``
table, which ``flux config reload`` re-reads.  Every value of the table is
checked all the same, also one an option overrides: a bad value fails
the reload that brings it, not a later load without that option.

Values are taken only in their exact form: a count is an integer, a
switch ``true`` or ``false``, a duration a number or an ASCII decimal
with an optional unit.  A load option given on the command line
(``KEY=VALUE``) reaches the plugin as JSON if it reads as JSON, else as
text: there a count may also be ASCII decimal digits and a switch the
words ``true`` or ``false``.
"""

import json
import math
import re

from .holdlog import CHUNK_BYTES
from .holds import EPILOG, POINTS, description_error

RULE_KEYS = ("attribute", "equals", "description", "timeout", "point")

#: Entry points where ``debug-fault`` makes the plugin raise, to prove that
#: an exception inside the job-manager is contained (tests only: a load
#: option, never a key of the ``[epilog-gate]`` table, see OPTION_ONLY).  With
#: ``init`` (Python's start-up of the instance) and ``plugin-init`` (the end
#: of ``flux_plugin_init``, in C) the load itself fails: both are read from
#: the load options.  ``slow-recovery`` is no fault: it delays each read
#: of an eventlog at load, so that tests can send requests while the gate
#: is still recovering.
FAULTS = ("request", "job", "query", "init", "plugin-init", "slow-recovery")

#: The job-manager counts perilog actions in a uint8: stay well below it.
MAX_HOLDS_LIMIT = 200

#: How long shutdown waits on holds by default: inside flux-core's
#: system unit's broker.cleanup-timeout (45 s, which aborts the cleanup
#: of a shutdown begun by a signal) and so well inside its 90 s stop
#: timeout, after which systemd kills the broker.
SHUTDOWN_TIMEOUT = 30.0

#: What becomes of the holds shutdown still waits on at shutdown-timeout
#: (see :mod:`flux_epilog_gate.gate.shutdown`).
SHUTDOWN_ACTIONS = ("auto", "keep", "finish")

#: Activations a watch stream may be behind (sent and not acknowledged,
#: or waiting in the gate) before it is ended: a burst of activations
#: larger than this ends even a client that reads (see
#: :mod:`flux_epilog_gate.gate.watchers`).
WATCH_BACKLOG = 10000

#: Requests (hold, release) that may wait for their hold log commit at
#: once; past it a request is refused with EAGAIN.  Commits normally keep
#: this to the requests of one KVS round trip; the bound matters when the
#: KVS stalls.
MAX_PENDING = 10000

#: Upper limit of both bounds.
MAX_BOUND = 10_000_000

#: Range of ``snapshot-chunk``, the bytes of a hold log snapshot written
#: per commit (see :mod:`flux_epilog_gate.gate.holdlog`).
SNAPSHOT_CHUNK_MIN = 1024
SNAPSHOT_CHUNK_MAX = 2**30


#: Where a value comes from (see :meth:`Config.from_sources`).
TABLE = "[epilog-gate]"
OPTION = "option"


class ConfigError(ValueError):
    """Bad configuration; the message names the key."""


def shown(value):
    """``value`` as a message shows it: text quoted, anything else as
    JSON or TOML write it (``true``, not Python's ``True``), cut short if
    long."""
    try:
        if isinstance(value, str):
            text = repr(value)
        elif isinstance(value, float) and not math.isfinite(value):
            text = str(value)  # as TOML writes them: nan, inf
        else:
            text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        # An integer of more digits than Python converts to text.
        text = f"a {type(value).__name__} too large to show"
    return text if len(text) <= 60 else text[:57] + "..."


def parse_duration(value, key="timeout"):
    """Return seconds (> 0) from a number or a Flux Standard Duration
    (RFC 23: a number with an optional unit ``ms``, ``s``, ``m``, ``h``
    or ``d``) such as ``"90s"``, ``"10m"``, ``"1.5h"``.  Its text is
    ASCII digits with no spaces: ``flux.util.parse_fsd``, which reads
    the number with Python's float(), also takes ``"10 m"``, ``"1_0"``
    and other scripts' digits, which flux-core's C reader refuses."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(
            f"{key}: expected a duration such as 30 or 10m, got {shown(value)}"
        )
    seconds = fsd_seconds(value) if isinstance(value, str) else as_seconds(value)
    if seconds is None:
        raise ConfigError(
            f"{key}: {shown(value)} is not a duration (seconds, or a number "
            "with a unit and no spaces: 500ms, 90s, 10m, 1.5h, 2d)"
        )
    problem = duration_problem(seconds)
    if problem:
        raise ConfigError(f"{key}: {shown(value)} {problem}")
    return seconds


def duration_problem(seconds):
    """What is wrong with ``seconds`` as a duration, or None."""
    if math.isnan(seconds):
        return "is not a number"
    if math.isinf(seconds):
        return "is infinite (leave it unset for none)"
    if seconds <= 0:
        return "must be greater than 0"
    return None


#: A duration's text: a decimal number in ASCII digits (a sign only so
#: that a negative one is refused as such), then an optional unit.
#: Python's float() alone would also read other scripts' digits, ``_``
#: and surrounding spaces.
_FSD = re.compile(
    r"(-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)(ms|s|m|h|d)?"
)
#: Texts float() reads as infinity or NaN: refused, saying which.
_NOT_FINITE = re.compile(r"[-+]?(?:inf|infinity|nan)", re.IGNORECASE)
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def fsd_seconds(text):
    """Seconds of a duration's text (a Flux Standard Duration in ASCII,
    see :func:`parse_duration`), or None if it is not one.  Not checked
    further: it may be 0, negative, infinite or NaN."""
    match = _FSD.fullmatch(text)
    if match:
        number, unit = match.groups()
        return float(number) * _UNITS[unit or "s"]
    if _NOT_FINITE.fullmatch(text):
        return float(text)
    return None


def as_seconds(value):
    """A number as float seconds (an integer too large for a float is
    infinite)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


#: A count given as text (a load option only): ASCII decimal digits.
#: str.isdigit() would also take other scripts' digits, and int() spaces.
_DIGITS = re.compile(r"[0-9]+")


def _parse_count(value, key, low, high, origin=TABLE):
    """An integer from ``low`` to ``high``: a TOML (or JSON) integer, or,
    as a load option, its ASCII decimal digits."""
    if origin == OPTION and isinstance(value, str) and _DIGITS.fullmatch(value):
        digits = value.lstrip("0") or "0"
        # Past 20 digits it is out of range anyway (and int() refuses
        # some 4300).
        value = int(digits) if len(digits) <= 20 else high + 1
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key}: expected an integer, got {shown(value)}")
    if not low <= value <= high:
        raise ConfigError(f"{key}: {shown(value)} is not between {low} and {high}")
    return value


_MISSING = object()


class Rule:
    """Hold ``description`` on every job whose jobspec has ``attribute``
    (a dotted path under ``attributes``), equal to ``equals`` if given."""

    __slots__ = ("attribute", "path", "equals", "description", "timeout", "point")

    def __init__(
        self, attribute, description, equals=_MISSING, timeout=None, point=EPILOG
    ):
        self.attribute = attribute
        self.path = attribute.split(".")
        self.equals = equals
        self.description = description
        self.timeout = timeout
        self.point = point

    @classmethod
    def parse(cls, index, table):
        where = f"rules[{index}]"
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: expected a table")
        for key in table:
            if key not in RULE_KEYS:
                raise ConfigError(f"{where}.{key}: unknown key")
        attribute = table.get("attribute")
        if not isinstance(attribute, str) or not all(attribute.split(".")):
            raise ConfigError(f"{where}.attribute: expected a dotted attribute path")
        problem = description_error(table.get("description"))
        if problem:
            raise ConfigError(f"{where}.description: {problem}")
        timeout = table.get("timeout")
        if timeout is not None:
            timeout = parse_duration(timeout, f"{where}.timeout")
        point = table.get("point", EPILOG)
        if point not in POINTS:
            raise ConfigError(
                f"{where}.point: expected " + " or ".join(map(repr, POINTS))
            )
        return cls(
            attribute,
            table["description"],
            table.get("equals", _MISSING),
            timeout,
            point,
        )

    def matches(self, attributes):
        value = attributes
        for key in self.path:
            if not isinstance(value, dict) or key not in value:
                return False
            value = value[key]
        return self.equals is _MISSING or strictly_equal(value, self.equals)

    def to_dict(self):
        rule = {"attribute": self.attribute, "description": self.description}
        if self.equals is not _MISSING:
            rule["equals"] = self.equals
        if self.timeout is not None:
            rule["timeout"] = self.timeout
        if self.point != EPILOG:
            rule["point"] = self.point
        return rule


def strictly_equal(a, b):
    """Equal in type and value, all the way down: ``1`` is neither
    ``true`` nor ``1.0`` (Python's ``==`` says both are)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(strictly_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(strictly_equal, a, b))
    return a == b


def _parse_rules(value):
    if not isinstance(value, list):
        raise ConfigError("rules: expected an array of tables")
    rules = tuple(Rule.parse(i, table) for i, table in enumerate(value))
    # A job holds a description once, at one point: a second rule of the
    # same description would be ignored (its timeout lost) or, at another
    # point, refused on every job both match.
    first = {}
    for index, rule in enumerate(rules):
        earlier = first.setdefault(rule.description, index)
        if earlier != index:
            raise ConfigError(
                f"rules[{index}].description: {rule.description!r} is already "
                f"the description of rules[{earlier}] (each rule needs a "
                "description of its own)"
            )
    return rules


def _parse_bool(value, key, origin=TABLE):
    """``true`` or ``false``: a boolean, or, as a load option, one of
    those words (never a number: ``1`` is not a switch)."""
    if isinstance(value, bool):
        return value
    if origin == OPTION and isinstance(value, str) and value in ("true", "false"):
        return value == "true"
    raise ConfigError(f"{key}: expected true or false, got {shown(value)}")


def _choice(choices):
    """A parser of one of ``choices``."""

    def parse(value, key, origin):
        if not isinstance(value, str) or value not in choices:
            raise ConfigError(
                f"{key}: {shown(value)} is not one of {', '.join(map(repr, choices))}"
            )
        return value

    return parse


def _count(low, high):
    """A parser of integers from ``low`` to ``high``."""
    return lambda value, key, origin: _parse_count(value, key, low, high, origin)


def _duration(value, key, origin):
    return parse_duration(value, key)


def _rules(value, key, origin):
    return _parse_rules(value)


#: Each key: the Config attribute it sets, and its parser
#: ``parse(value, key, origin)``.
_PARSERS = {
    "timeout": ("timeout", _duration),
    "max-holds": ("max_holds", _count(1, MAX_HOLDS_LIMIT)),
    "gone-limit": ("gone_limit", _count(0, MAX_BOUND)),
    "annotate": ("annotate", _parse_bool),
    "rules": ("rules", _rules),
    "shutdown-timeout": ("shutdown_timeout", _duration),
    "shutdown-action": ("shutdown_action", _choice(SHUTDOWN_ACTIONS)),
    "watch-backlog": ("watch_backlog", _count(1, MAX_BOUND)),
    "max-pending": ("max_pending", _count(1, MAX_BOUND)),
    "snapshot-chunk": (
        "snapshot_chunk",
        _count(SNAPSHOT_CHUNK_MIN, SNAPSHOT_CHUNK_MAX),
    ),
    "debug-fault": ("fault", _choice(FAULTS)),
}
KEYS = tuple(_PARSERS)

#: Keys taken only as load options: ``debug-fault`` is a switch of the
#: tests, which give it to the load they test; in the instance's
#: ``[epilog-gate]`` table it would break the gate of a real instance.
OPTION_ONLY = frozenset({"debug-fault"})


def _read_source(source, origin, overridden=()):
    """The Config attributes a source sets (``origin``: TABLE or OPTION),
    each value checked; raise ConfigError naming the first bad key.  A
    bad table value of a key in ``overridden`` (given as a load option
    too) is refused all the same: the table must stand on its own."""
    if source is None:
        return {}
    if not isinstance(source, dict):
        raise ConfigError(f"{origin}: expected a table of keys")
    values = {}
    for key, value in source.items():
        if key not in _PARSERS:
            known = [k for k in KEYS if origin == OPTION or k not in OPTION_ONLY]
            raise ConfigError(
                f"{key}: unknown {origin} key (known: {', '.join(known)})"
            )
        if key in OPTION_ONLY and origin != OPTION:
            raise ConfigError(
                f"{key}: a switch of the tests, taken only as a load option, "
                f"never from {TABLE}"
            )
        attribute, parse = _PARSERS[key]
        try:
            values[attribute] = parse(value, key, origin)
        except ConfigError as exc:
            if key in overridden:
                raise ConfigError(
                    f"{exc} (in {TABLE}: a load option overrides it, but the "
                    "table is checked whole)"
                ) from None
            raise
    return values


def _check_rules_fit(rules, max_holds):
    # A job can carry every attribute the rules name, so each rule
    # beyond max-holds would be refused (and logged) on such a job.
    if len(rules) > max_holds:
        raise ConfigError(
            f"rules: {len(rules)} rules but max-holds is "
            f"{max_holds}: a job that matches them all could not "
            "hold them (raise max-holds or drop rules)"
        )


class Config:
    """Effective gate configuration."""

    def __init__(
        self,
        timeout=None,
        max_holds=64,
        gone_limit=10000,
        annotate=False,
        rules=(),
        fault=None,
        shutdown_timeout=SHUTDOWN_TIMEOUT,
        shutdown_action="auto",
        watch_backlog=WATCH_BACKLOG,
        max_pending=MAX_PENDING,
        snapshot_chunk=CHUNK_BYTES,
    ):
        self.timeout = timeout
        self.max_holds = max_holds
        self.gone_limit = gone_limit
        self.annotate = annotate
        self.rules = rules
        self.fault = fault
        self.shutdown_timeout = shutdown_timeout
        self.shutdown_action = shutdown_action
        self.watch_backlog = watch_backlog
        self.max_pending = max_pending
        self.snapshot_chunk = snapshot_chunk

    @classmethod
    def from_sources(cls, options=None, table=None):
        """Build a Config from load ``options`` over the ``[epilog-gate]``
        ``table``; raise ConfigError naming the first bad key.  The
        options are checked first (what the admin typed), then every
        value of the table, then what the two make together."""
        given = _read_source(options, OPTION)
        overridden = set(options) if isinstance(options, dict) else set()
        from_table = _read_source(table, TABLE, overridden)
        if "rules" in from_table and "max_holds" in from_table:
            # The table's own pair must fit, whatever an option says.
            _check_rules_fit(from_table["rules"], from_table["max_holds"])
        config = cls(**dict(from_table, **given))
        _check_rules_fit(config.rules, config.max_holds)
        return config

    def to_dict(self):
        conf = {
            "timeout": self.timeout,
            "max-holds": self.max_holds,
            "gone-limit": self.gone_limit,
            "annotate": self.annotate,
            "rules": [rule.to_dict() for rule in self.rules],
            "shutdown-timeout": self.shutdown_timeout,
            "shutdown-action": self.shutdown_action,
            "watch-backlog": self.watch_backlog,
            "max-pending": self.max_pending,
            "snapshot-chunk": self.snapshot_chunk,
            "debug-fault": self.fault,
        }
        return conf
