"""Configuration of the gate: plugin load options and the ``[epilog-gate]``
table of the instance config.

Options given to ``flux jobtap load`` (or in the ``conf`` table of a
``[job-manager] plugins`` entry) take precedence over the ``[epilog-gate]``
table, which ``flux config reload`` re-reads.
"""

import math
import re

from .holdlog import CHUNK_BYTES
from .holds import EPILOG, POINTS, description_error

KEYS = (
    "timeout",
    "max-holds",
    "gone-limit",
    "annotate",
    "rules",
    "shutdown-timeout",
    "shutdown-action",
    "watch-backlog",
    "max-pending",
    "snapshot-chunk",
    "debug-fault",
)
RULE_KEYS = ("attribute", "equals", "description", "timeout", "point")

#: Entry points where ``debug-fault`` makes the plugin raise, to prove that
#: an exception inside the job-manager is contained (tests only).  With
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


class ConfigError(ValueError):
    """Bad configuration; the message names the key."""


def parse_duration(value, key="timeout"):
    """Return seconds (> 0) from a number or a Flux Standard Duration
    (RFC 23: a number with an optional unit ``ms``, ``s``, ``m``, ``h``
    or ``d``, as ``flux.util.parse_fsd`` reads it) such as ``"90s"``,
    ``"10m"``, ``"1.5h"``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(f"{key}: expected a duration such as 30 or 10m")
    shown = repr(value) if isinstance(value, str) else str(value)
    seconds = _fsd_seconds(value) if isinstance(value, str) else as_seconds(value)
    if seconds is None:
        raise ConfigError(
            f"{key}: {shown} is not a duration (seconds, or a number with a "
            "unit: 500ms, 90s, 10m, 1.5h, 2d)"
        )
    problem = duration_problem(seconds)
    if problem:
        raise ConfigError(f"{key}: {shown} {problem}")
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


_FSD = re.compile(r"(.*?)(s|m|h|d|ms)$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _fsd_seconds(text):
    match = _FSD.match(text.strip())
    number, unit = match.groups() if match else (text, "s")
    try:
        return float(number) * _UNITS[unit]
    except ValueError:
        return None


def as_seconds(value):
    """A number as float seconds (an integer too large for a float is
    infinite)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _parse_count(value, key, low, high):
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key}: expected an integer")
    if not low <= value <= high:
        raise ConfigError(f"{key}: {value} is not between {low} and {high}")
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


def _parse_bool(value, key):
    if isinstance(value, bool):
        return value
    if value in ("true", "1", 1):
        return True
    if value in ("false", "0", 0):
        return False
    raise ConfigError(f"{key}: expected true or false")


def _parse_choice(value, key, choices):
    if value not in choices:
        raise ConfigError(
            f"{key}: {value!r} is not one of {', '.join(map(repr, choices))}"
        )
    return value


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
        ``table``; raise ConfigError naming the first bad key."""
        merged = {}
        for origin, source in (("[epilog-gate]", table), ("option", options)):
            if source is None:
                continue
            if not isinstance(source, dict):
                raise ConfigError(f"{origin}: expected a table of keys")
            for key, value in source.items():
                if key not in KEYS:
                    raise ConfigError(
                        f"{key}: unknown {origin} key (known: {', '.join(KEYS)})"
                    )
                merged[key] = value
        config = cls()
        if "timeout" in merged:
            config.timeout = parse_duration(merged["timeout"])
        if "max-holds" in merged:
            config.max_holds = _parse_count(
                merged["max-holds"], "max-holds", 1, MAX_HOLDS_LIMIT
            )
        if "gone-limit" in merged:
            config.gone_limit = _parse_count(
                merged["gone-limit"], "gone-limit", 0, 10_000_000
            )
        if "annotate" in merged:
            config.annotate = _parse_bool(merged["annotate"], "annotate")
        if "rules" in merged:
            config.rules = _parse_rules(merged["rules"])
        if "shutdown-timeout" in merged:
            config.shutdown_timeout = parse_duration(
                merged["shutdown-timeout"], "shutdown-timeout"
            )
        if "shutdown-action" in merged:
            config.shutdown_action = _parse_choice(
                merged["shutdown-action"], "shutdown-action", SHUTDOWN_ACTIONS
            )
        if "watch-backlog" in merged:
            config.watch_backlog = _parse_count(
                merged["watch-backlog"], "watch-backlog", 1, MAX_BOUND
            )
        if "max-pending" in merged:
            config.max_pending = _parse_count(
                merged["max-pending"], "max-pending", 1, MAX_BOUND
            )
        if "snapshot-chunk" in merged:
            config.snapshot_chunk = _parse_count(
                merged["snapshot-chunk"],
                "snapshot-chunk",
                SNAPSHOT_CHUNK_MIN,
                SNAPSHOT_CHUNK_MAX,
            )
        if "debug-fault" in merged:
            if merged["debug-fault"] not in FAULTS:
                raise ConfigError(
                    f"debug-fault: {merged['debug-fault']!r} is not one of "
                    f"{', '.join(FAULTS)}"
                )
            config.fault = merged["debug-fault"]
        config._check_rules_fit()
        return config

    def _check_rules_fit(self):
        # A job can carry every attribute the rules name, so each rule
        # beyond max-holds would be refused (and logged) on such a job.
        if len(self.rules) > self.max_holds:
            raise ConfigError(
                f"rules: {len(self.rules)} rules but max-holds is "
                f"{self.max_holds}: a job that matches them all could not "
                "hold them (raise max-holds or drop rules)"
            )

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
        }
        if self.snapshot_chunk != CHUNK_BYTES:
            conf["snapshot-chunk"] = self.snapshot_chunk
        if self.fault:
            conf["debug-fault"] = self.fault
        return conf
