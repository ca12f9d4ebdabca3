"""Inputs that reach the dws plugin: the constraints it combines, and
generated payloads sent to its three services on a live instance."""

import errno
import json

import flux.job
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis_settings import bounded
from jobs import Quiet, eventlog, names, submit, wait_event, wait_inactive
from jsonstrategies import ANY_JSON, SCALARS

from flux_epilog_gate.dws.constraints import ConstraintError, combine
from flux_epilog_gate.dws.payload import missing_keys
from flux_epilog_gate.paths import plugin_path
from flux_epilog_gate.testing import Instance

BOUNDED = bounded(40)

CONSTRAINT = st.dictionaries(
    st.sampled_from(["properties", "hostlist", "not", "and"]), ANY_JSON, max_size=2
)


@BOUNDED
@given(old=st.none() | CONSTRAINT, exclude=CONSTRAINT, allow=st.booleans())
def test_combine_keeps_both_and_adds_rabbits_only_when_allowed(old, exclude, allow):
    system = {"allow_rabbits": allow}
    if old is not None:
        system["constraints"] = old
    combined = combine(system, exclude)
    inner = combined
    if allow:
        assert list(combined) == ["or"]
        assert combined["or"][0] == {"properties": ["rabbit"]}
        inner = combined["or"][1]
    if old is None:
        assert inner == exclude
    else:
        assert inner == {"and": [old, exclude]}


@BOUNDED
@given(allow=ANY_JSON.filter(lambda v: not isinstance(v, bool)))
def test_combine_refuses_a_non_boolean_allow_rabbits(allow):
    with pytest.raises(ConstraintError, match="allow_rabbits"):
        combine({"allow_rabbits": allow}, {"properties": ["x"]})


@pytest.fixture(scope="module")
def live():
    with Instance(cores=8, plugin=plugin_path("dws")) as inst:
        h = inst.handle()
        # A job that is neither in DEPEND nor in CLEANUP, and not a rabbit
        # job: no request may change it.
        bystander = submit(h, duration=300)
        wait_event(h, bystander, "start")
        yield Quiet((inst, h, bystander))
        flux.job.cancel(h, bystander)
        wait_inactive(h, bystander)


KEYS = st.sampled_from(["id", "resources", "exclude", "errmsg", "variables", "x"])
IDS = st.integers(-(2**66), 2**66) | SCALARS | st.integers(1, 2**40)
PAYLOAD = st.dictionaries(KEYS, ANY_JSON, max_size=4).flatmap(
    lambda d: st.builds(lambda i: {**d, "id": i}, IDS) | st.just(d)
)
METHOD = st.sampled_from(["resource-update", "prolog-remove", "epilog-remove"])


@BOUNDED
@given(method=METHOD, payload=PAYLOAD | st.lists(SCALARS, max_size=2))
@example(method="epilog-remove", payload={"id": -1})
@example(method="epilog-remove", payload={"id": 2**64})
@example(method="prolog-remove", payload={"id": 2**64 - 1, "variables": {}})
@example(method="resource-update", payload={"id": 2**70, "resources": 1, "exclude": 1})
@example(method="resource-update", payload={"id": 1, "errmsg": 5})
def test_any_payload_is_answered_and_changes_no_other_job(live, method, payload):
    inst, h, bystander = live
    try:
        text = json.dumps(payload)
    except ValueError:
        return
    future = h.rpc(f"job-manager.dws.{method}", text)
    try:
        future.get()
    except OSError as exc:
        assert exc.errno in {errno.EPROTO, errno.ENOENT, errno.EINVAL}, exc
        assert exc.strerror and "internal error" not in exc.strerror
    events = names(eventlog(h, bystander))
    assert "exception" not in events and "jobspec-update" not in events
    assert "epilog-finish" not in events and "dws_environment" not in events


#: The keys each request must have beside ``id`` (payload.py's checks).
REMOVE_KEYS = {"prolog-remove": ("variables",), "epilog-remove": ()}


@BOUNDED
@given(
    method=st.sampled_from(sorted(REMOVE_KEYS)),
    payload=PAYLOAD | st.lists(SCALARS, max_size=2),
    bystander_id=st.booleans(),
)
@example(
    method="prolog-remove", payload={"variables": {}, "errmsg": None}, bystander_id=True
)
@example(method="epilog-remove", payload={"errmsg": 5}, bystander_id=True)
@example(method="epilog-remove", payload={"id": 2**63}, bystander_id=False)
@example(
    method="prolog-remove", payload={"id": 1.0, "variables": 1}, bystander_id=False
)
def test_a_remove_is_refused_as_malformed_exactly_when_python_finds_it_so(
    live, method, payload, bystander_id
):
    """prolog-remove and epilog-remove are decoded in C when well formed,
    else by Python: whichever reads a request, it is refused as
    malformed (EPROTO, naming the problem) exactly when payload.py's
    check finds it so, and answered on its merits otherwise."""
    inst, h, bystander = live
    keys = REMOVE_KEYS[method]
    if bystander_id and isinstance(payload, dict):
        aimed = {**payload, "id": int(bystander)}
        # A malformed prolog-remove raises an exception on the job it
        # names (it waits on a request that will not come right): never
        # on the bystander, which no request may change.
        if method == "epilog-remove" or missing_keys(aimed, keys) is None:
            payload = aimed
    try:
        text = json.dumps(payload)
    except ValueError:
        return
    problem = missing_keys(payload, keys)
    try:
        h.rpc(f"job-manager.dws.{method}", text).get()
        errnum = None
    except OSError as exc:
        errnum, message = exc.errno, exc.strerror
    if problem is not None:
        assert errnum == errno.EPROTO and message.endswith(problem), (errnum, problem)
    else:
        assert errnum != errno.EPROTO, message
    assert "exception" not in names(eventlog(h, bystander)), payload


def test_no_payload_reached_an_internal_error(live):
    inst, h, bystander = live
    log = inst.flux("dmesg").stdout
    assert "internal error" not in log and "Traceback" not in log
