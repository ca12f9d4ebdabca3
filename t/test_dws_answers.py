"""The dws plugin reads the DWS service's answers (dws.so's C,
dws/service.c): any answer to ``dws.create`` that is not ``{success:
true}`` fails the job with the note the C plugin gives it."""

import json
import os

import pytest
from dwsfake import DW, FakeDws
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jobs import submit, wait_event

from flux_epilog_gate.paths import plugin_path
from flux_epilog_gate.testing import Instance

FAILED = "DWS workflow interactions failed: "
UNREADABLE = "Failed to unpack dws.create RPC"
REFUSED = "dws.create RPC returned failure"

#: JSON as a service may send it (jansson's range: 64-bit integers,
#: finite floats).
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=5,
)
#: Answers of the expected shape and near it.
SHAPED = st.fixed_dictionaries(
    {"success": st.booleans() | VALUES},
    optional={"errstr": st.none() | st.text(max_size=12) | VALUES},
)


def note_for(answer):
    """The exception note an answer gives the job; None for success."""
    if not isinstance(answer, dict) or not isinstance(answer.get("success"), bool):
        return FAILED + UNREADABLE
    errstr = answer.get("errstr")
    if errstr is not None and not isinstance(errstr, str):
        return FAILED + UNREADABLE
    if answer["success"]:
        return None
    return FAILED + (errstr or REFUSED)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("answers")
    answer = os.path.join(tmp, "answer")
    with Instance(cores=8, plugin=plugin_path("dws")) as inst:
        service = FakeDws(inst, str(tmp), "--create-answer", answer)
        try:
            yield inst.handle(), answer
        finally:
            service.stop()


def answered(setup, text):
    """Submit a rabbit job whose dws.create is answered ``text``; return
    its dws-create exception's note."""
    h, path = setup
    with open(path, "w") as f:
        f.write(text)
    jobid = submit(h, **DW)
    exc = wait_event(h, jobid, "exception")
    assert exc.context["type"] == "dws-create"
    return exc.context["note"]


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(answer=SHAPED | VALUES)
def test_an_answer_that_is_not_success_fails_the_job_with_its_note(setup, answer):
    note = note_for(answer)
    if note is None:
        return
    assert answered(setup, json.dumps(answer)) == note


@pytest.mark.parametrize("text", ["", "not json", '{"success": false', "[]"])
def test_an_answer_that_is_no_json_object_cannot_be_unpacked(setup, text):
    assert answered(setup, text) == FAILED + UNREADABLE
