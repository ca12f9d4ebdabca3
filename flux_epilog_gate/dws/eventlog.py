"""What a rabbit job's eventlog says of its dws actions, read as text.

The gate recovers the holds it placed from its hold log and its own
marked events; these read the plain events a plugin that is not the
gate posted (flux-coral2's ``dws-jobtap.so``, or a dws plugin of an
older release), so that a job such a plugin left in its prolog or epilog
can still be finished after the swap.
"""

import json
import time

from .names import CREATE, EPILOG, SETUP


def entries(eventlog):
    """The entries (dicts) of a job's eventlog given as text."""
    if isinstance(eventlog, bytes):
        eventlog = eventlog.decode(errors="replace")
    for line in eventlog.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("context", {}), dict):
            yield entry


def created_before(eventlog, when):
    """True if ``eventlog`` (a job's, as text) has a ``dependency-add`` of
    dws-create posted before time ``when``."""
    return any(
        entry.get("name") == "dependency-add"
        and entry.get("context", {}).get("description") == CREATE
        and isinstance(entry.get("timestamp"), (int, float))
        and entry["timestamp"] < when
        for entry in entries(eventlog)
    )


def held_actions(eventlog):
    """``{description: start time}`` of the dws-setup prolog and
    dws-epilog epilog that ``eventlog`` shows started and not finished."""
    kinds = {"prolog-start": SETUP, "epilog-start": EPILOG}
    ends = {"prolog-finish": SETUP, "epilog-finish": EPILOG}
    held = {}
    for entry in entries(eventlog):
        name = entry.get("name")
        description = entry.get("context", {}).get("description")
        if description is None:
            continue
        if kinds.get(name) == description:
            held[description] = entry.get("timestamp", time.time())
        elif ends.get(name) == description:
            held.pop(description, None)
    return held
