"""The scheduling constraints of a rabbit job after its storage is placed.

When the dws service places a job's storage it sends a constraint that
keeps the job off nodes attached to down rabbits (``exclude``).  It is
joined to the constraints the job already had with ``and``; a job that
allows rabbit nodes themselves (``attributes.system.allow_rabbits``) may
also run on nodes with property ``rabbit``, with ``or``.
"""


class ConstraintError(ValueError):
    """The job's attributes cannot be combined with the exclusion."""


def combine(system, exclude):
    """The job's new ``attributes.system.constraints``: ``system`` is the
    job's ``attributes.system`` (a dict), ``exclude`` the constraint to
    add (JSON, not None)."""
    old = system.get("constraints")
    allow_rabbits = system.get("allow_rabbits", False)
    if not isinstance(allow_rabbits, bool):
        raise ConstraintError(
            f"attributes.system.allow_rabbits: {allow_rabbits!r} is not a boolean"
        )
    combined = exclude if old is None else {"and": [old, exclude]}
    if allow_rabbits:
        combined = {"or": [{"properties": ["rabbit"]}, combined]}
    return combined
