"""The dws plugin's check of a service request's shape
(flux_epilog_gate.dws.payload): its quick test of a well-formed payload
says what the full one says, for any JSON value."""

from hypothesis import given
from hypothesis import strategies as st
from hypothesis_settings import bounded
from jsonstrategies import SCALARS, any_json

from flux_epilog_gate.dws.payload import missing_keys, well_formed

KEYS = st.sampled_from(["id", "errmsg", "variables", "resources", "exclude", "x"])

#: Job ids of every kind a payload may carry, good and bad.
IDS = st.integers(-1, 2**64 + 1) | st.sampled_from([2**64 - 1, 2**64, True, 1.0])

PAYLOADS = st.dictionaries(KEYS, any_json()) | st.fixed_dictionaries(
    {"id": IDS},
    optional={
        "errmsg": SCALARS,
        "variables": any_json(),
        "resources": any_json(),
        "exclude": any_json(),
    },
)


@bounded(1000)
@given(PAYLOADS | any_json(), st.lists(KEYS, max_size=3))
def test_well_formed_is_missing_keys_finding_nothing(payload, keys):
    assert well_formed(payload, keys) == (missing_keys(payload, keys) is None)
