"""Configuration of dws.so: its load options.

As flux-coral2's ``dws-jobtap.so``, dws.so takes one option,
``epilog-timeout``: how long a job's ``dws-epilog`` may stay active
before the plugin raises ``dws-epilog-timeout`` on it.  It is a number
of seconds, where 0 or less means no timeout (as the C plugin reads
it), or a Flux Standard Duration as the gate's own durations are
written (``"90s"``, ``"10m"``, ``"1.5h"``, ``"0"`` for none): a
``conf`` table of a ``[job-manager] plugins`` entry gives TOML values,
and a duration is naturally written as text there.  Other options are
ignored, as the C plugin ignores them.
"""

import math

from ..gate.config import ConfigError, as_seconds, fsd_seconds, shown

KEY = "epilog-timeout"

#: What a good value looks like, for the error of a bad one (kept short:
#: the job-manager cuts a load's error at some 160 characters).
EXPECTED = "seconds or a duration (90, 1.5h, 10m; 0: none)"


def epilog_timeout(options):
    """The epilog timeout of the load ``options`` in seconds (0.0 if none
    is given; 0 or less means none); raise ConfigError naming the key
    and the value if it cannot be read."""
    if not isinstance(options, dict):
        raise ConfigError(f"load options: expected a table, got {shown(options)}")
    value = options.get(KEY, 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(f"{KEY}: {shown(value)} is not {EXPECTED}")
    seconds = fsd_seconds(value) if isinstance(value, str) else as_seconds(value)
    if seconds is None or (isinstance(value, str) and seconds < 0):
        # A duration's text is not negative (as flux-core reads it).
        raise ConfigError(f"{KEY}: {shown(value)} is not {EXPECTED}")
    if math.isnan(seconds):
        raise ConfigError(f"{KEY}: {shown(value)} is not a number")
    if math.isinf(seconds):
        raise ConfigError(
            f"{KEY}: {shown(value)} is infinite (leave it unset, or 0, for none)"
        )
    return float(seconds)


#: Past this many seconds (some 30 years) a timeout is logged as "%g":
#: as the C plugin's "%.3f", 1e308 would be 309 digits.
FIXED_MAX = 1e9


def shown_timeout(seconds):
    """``seconds`` as the load's log line shows it: ``600.000s`` as the
    C plugin writes it, ``1e+308s`` for a value of many digits."""
    if abs(seconds) < FIXED_MAX:
        return f"{seconds:.3f}s"
    return f"{seconds:g}s"
