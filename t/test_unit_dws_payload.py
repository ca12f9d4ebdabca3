"""The dws plugin's check of a service request's shape
(flux_epilog_gate.dws.payload): ``payload_of`` takes a payload exactly
when ``missing_keys`` finds nothing wrong with it, for any JSON value,
and refuses any other (EPROTO) naming what is wrong, with an exception
on the job it names."""

import errno

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis_settings import bounded
from jsonstrategies import SCALARS, any_json

from flux_epilog_gate.dws.payload import Payloads, missing_keys
from flux_epilog_gate.jobtap.plugin import RequestError

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


class Request:
    def __init__(self, payload):
        self.payload = payload


class Jobs:
    """What Payloads asks of the workflow's jobs: the exceptions raised."""

    def __init__(self):
        self.failed = []

    def fail(self, jobid, type, errstr):
        self.failed.append(jobid)

    def log(self, level, text):
        pass


@bounded(1000)
@given(PAYLOADS | any_json(), st.lists(KEYS, max_size=3))
def test_payload_of_takes_what_missing_keys_finds_nothing_wrong_with(payload, keys):
    jobs = Jobs()
    problem = missing_keys(payload, keys)
    if problem is None:
        assert Payloads(jobs).payload_of(Request(payload), "m", keys) is payload
        assert jobs.failed == []
        return
    with pytest.raises(RequestError) as info:
        Payloads(jobs).payload_of(Request(payload), "m", keys)
    assert info.value.errnum == errno.EPROTO
    assert problem in info.value.message
    jobid = payload.get("id") if isinstance(payload, dict) else None
    named = type(jobid) is int and 0 <= jobid < 2**64
    assert jobs.failed == ([jobid] if named else [])
