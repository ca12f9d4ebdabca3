"""The keys of a ``list`` entry, shared by the plugin and its client.

An answer by rows (``{"holds": [...]}``) has an object per hold with
these keys, in this order, the optional ones only where the hold has
them; an answer by column (``list`` with ``columns: true``) has an array
per key, ``null`` where a hold has no such value.
"""

#: Every key of an entry, in the order the gate writes them.
KEYS = ("id", "description", "state", "userid", "t_hold", "point", "t_start", "timeout")

#: The keys an entry has only if its hold has a value for them.
OPTIONAL = ("t_start", "timeout")


def columns_of(entries):
    """The columns of ``entries`` (list entries, in order): for each of
    :data:`KEYS` its values, entry by entry, None where one lacks it."""
    return {key: [entry.get(key) for entry in entries] for key in KEYS}
