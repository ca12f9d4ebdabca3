"""The Python client's job ids: an integer (a JobID too) or a string in
any Flux form; anything else is refused (TypeError naming what it got)
before a request is sent.  A float used to reach flux-core's parser,
whose error named its C signature, and ``True`` was taken for job 1."""

import pytest
from jobs import submit

#: (None is no id to hold or release, and to list: every job.)
BAD = [1.5, 2.0, True, False, b"f2", [1], {"id": 1}]


@pytest.fixture(scope="module")
def jobid(instance):
    return submit(instance.handle(), urgency=0)


@pytest.mark.parametrize("value", BAD, ids=repr)
@pytest.mark.parametrize("method", ["hold", "release", "list"])
def test_what_is_not_a_job_id_is_refused_before_sending(gate, jobid, method, value):
    before = gate.list(jobid)
    args = {"hold": (value, "x"), "release": (value, "x"), "list": (value,)}[method]
    with pytest.raises(TypeError) as info:
        getattr(gate, method)(*args)
    assert str(info.value) == (
        "job id: expected an integer or a string, " f"not {type(value).__name__}"
    )
    assert gate.list(jobid) == before


@pytest.mark.parametrize("form", [int, str, lambda jobid: jobid.f58, lambda j: j])
def test_each_form_of_a_job_id_names_the_job(gate, jobid, form):
    gate.hold(form(jobid), "forms")
    assert [h["description"] for h in gate.list(form(jobid))] == ["forms"]
    assert gate.release(form(jobid), "forms") == {"released": True}
