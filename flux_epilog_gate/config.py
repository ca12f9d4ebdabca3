"""Configuration of the gate: plugin load options and the ``[epilog-gate]``
table of the instance config.

Options given to ``flux jobtap load`` (or in the ``conf`` table of a
``[job-manager] plugins`` entry) take precedence over the ``[epilog-gate]``
table, which ``flux config reload`` re-reads.
"""

import math

KEYS = ("timeout", "max-holds", "gone-limit", "debug-fault")

#: Entry points where ``debug-fault`` makes the plugin raise, to prove that
#: an exception inside the job-manager is contained (tests only).
FAULTS = ("request", "job", "query")

#: The job-manager counts perilog actions in a uint8: stay well below it.
MAX_HOLDS_LIMIT = 200


class ConfigError(ValueError):
    """Bad configuration; the message names the key."""


def parse_duration(value, key="timeout"):
    """Return seconds (> 0) from a number or a Flux standard duration
    such as ``"90s"``, ``"10m"``, ``"1.5h"``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(f"{key}: expected a duration such as 30 or 10m")
    seconds = _fsd_seconds(value) if isinstance(value, str) else float(value)
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"{key}: {value!r} is not a duration greater than zero")
    return seconds


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _fsd_seconds(text):
    text = text.strip()
    for unit in ("ms", "s", "m", "h", "d"):
        if text.endswith(unit):
            number, scale = text[: -len(unit)], _UNITS[unit]
            break
    else:
        number, scale = text, 1.0
    try:
        return float(number) * scale
    except ValueError:
        return None


def _parse_count(value, key, low, high):
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key}: expected an integer")
    if not low <= value <= high:
        raise ConfigError(f"{key}: {value} is not between {low} and {high}")
    return value


class Config:
    """Effective gate configuration."""

    def __init__(self, timeout=None, max_holds=64, gone_limit=10000, fault=None):
        self.timeout = timeout
        self.max_holds = max_holds
        self.gone_limit = gone_limit
        self.fault = fault

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
        if "debug-fault" in merged:
            if merged["debug-fault"] not in FAULTS:
                raise ConfigError(
                    f"debug-fault: {merged['debug-fault']!r} is not one of "
                    f"{', '.join(FAULTS)}"
                )
            config.fault = merged["debug-fault"]
        return config

    def to_dict(self):
        conf = {
            "timeout": self.timeout,
            "max-holds": self.max_holds,
            "gone-limit": self.gone_limit,
        }
        if self.fault:
            conf["debug-fault"] = self.fault
        return conf
