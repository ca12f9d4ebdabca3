"""Hypothesis strategies for any JSON value: what a client may put in a
payload (the tests that send it check each is refused or taken, never
anything else)."""

from hypothesis import strategies as st

#: JSON scalars, integers far past 64 bits and floats of every kind
#: among them.
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=16)
)


#: Keys of the objects :func:`any_json` makes, unless told others.
KEYS = st.text(max_size=8)


def any_json(keys=KEYS, max_leaves=6):
    """Any JSON value: scalars, and arrays and objects (with ``keys``) of
    any JSON values."""
    return st.recursive(
        SCALARS,
        lambda children: st.lists(children, max_size=3)
        | st.dictionaries(keys, children, max_size=3),
        max_leaves=max_leaves,
    )


#: Any JSON value, with objects of any keys.
ANY_JSON = any_json()
