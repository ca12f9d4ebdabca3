"""Bad requests: an errno, a message that names the problem, and nothing
changed (the holds listed and the job's eventlog are as before)."""

import errno

import flux.job
import pytest
from flux.core.inner import raw
from flux.future import Future
from jobs import eventlog, names, release_all, submit, wait_event, wait_inactive

HOLD = "job-manager.epilog-gate.hold"
RELEASE = "job-manager.epilog-gate.release"
UNKNOWN_JOB = 1  # never a real job id (FLUIDs carry a timestamp)
ANY = raw.FLUX_NODEID_ANY


pytestmark = pytest.mark.usefixtures("no_leftover_holds")


@pytest.fixture
def held(handle, gate):
    """A pending job holding "bb"; cancelled (and so cleaned) afterwards."""
    jobid = submit(handle, urgency=0)
    gate.hold(jobid, "bb")
    yield jobid
    try:
        flux.job.cancel(handle, jobid)
    except OSError:
        pass  # already cancelled by the test
    release_all(gate)
    wait_inactive(handle, jobid)


def refused(request, errnum, *words):
    """Run ``request()``; assert it fails with ``errnum`` and a message
    containing ``words``."""
    with pytest.raises(OSError) as info:
        request()
    assert info.value.errno == errnum, info.value.strerror
    for word in words:
        assert word in info.value.strerror


def assert_unchanged(handle, gate, jobid, holds, events):
    """The holds listed are ``holds``; the job's eventlog up to its
    cancellation (committed after anything the request might have posted)
    is ``events``."""
    assert gate.list() == holds
    flux.job.cancel(handle, jobid)
    wait_event(handle, jobid, "exception")
    now = names(eventlog(handle, jobid))
    assert now[: now.index("exception")] == events


def snapshot(handle, gate, jobid):
    wait_event(handle, jobid, "priority")  # the last event of a held job
    return gate.list(), names(eventlog(handle, jobid))


def test_hold_on_unknown_job_is_enoent(gate):
    before = gate.list()
    refused(lambda: gate.hold(UNKNOWN_JOB, "bb"), errno.ENOENT, "unknown job")
    assert gate.list() == before


def test_release_on_unknown_job_is_enoent(gate):
    refused(lambda: gate.release(UNKNOWN_JOB, "bb"), errno.ENOENT, "unknown job")


def test_list_of_unknown_job_is_enoent(gate):
    refused(lambda: gate.list(UNKNOWN_JOB), errno.ENOENT, "unknown job")


def test_release_of_description_not_held_is_enoent_naming_holds(handle, gate, held):
    before = snapshot(handle, gate, held)
    refused(lambda: gate.release(held, "other"), errno.ENOENT, "other", "bb")
    assert_unchanged(handle, gate, held, *before)


def test_hold_on_inactive_job_is_enoent(handle, gate):
    jobid = submit(handle)
    wait_inactive(handle, jobid)
    refused(lambda: gate.hold(jobid, "bb"), errno.ENOENT, "inactive")
    assert gate.list(jobid) == []
    assert "epilog-start" not in names(eventlog(handle, jobid))


MALFORMED = [
    pytest.param(lambda j: "[]", "JSON object", id="array"),
    pytest.param(lambda j: "42", "JSON object", id="number"),
    pytest.param(lambda j: None, "JSON object", id="no-payload"),
    pytest.param(lambda j: "{", "malformed", id="bad-json"),
    pytest.param(lambda j: {"description": "new"}, "missing key 'id'", id="no-id"),
    pytest.param(
        lambda j: {"id": str(j), "description": "new"}, "id must be", id="id-string"
    ),
    pytest.param(
        lambda j: {"id": j, "description": "new", "color": 1},
        "unknown key 'color'",
        id="unknown-key",
    ),
    pytest.param(
        lambda j: {"id": j, "description": 7}, "description must be", id="desc-int"
    ),
    pytest.param(
        lambda j: {"id": j, "description": "new", "timeout": "10"},
        "timeout must be",
        id="timeout-string",
    ),
]


@pytest.mark.parametrize("payload, words", MALFORMED)
def test_malformed_hold_is_eproto(handle, gate, held, payload, words):
    before = snapshot(handle, gate, held)
    refused(lambda: handle.rpc(HOLD, payload(held)).get(), errno.EPROTO, words)
    assert_unchanged(handle, gate, held, *before)


REFUSED_RELEASE = [
    pytest.param({"status": "1"}, errno.EPROTO, "status must be", id="status-string"),
    pytest.param({"status": True}, errno.EPROTO, "status must be", id="status-bool"),
    pytest.param({"status": 1.5}, errno.EPROTO, "status must be", id="status-real"),
    pytest.param({"timeout": 5}, errno.EPROTO, "key 'timeout'", id="hold-key"),
    pytest.param({"status": 2**31}, errno.EINVAL, "out of range", id="status-big"),
    pytest.param(
        {"status": -(2**31) - 1}, errno.EINVAL, "out of range", id="status-small"
    ),
    pytest.param({"description": "b b"}, errno.EINVAL, "b b", id="desc-space"),
    # "bb" then a NUL: the held hold's name, were the string cut there.
    pytest.param({"description": "bb\x00"}, errno.EINVAL, "bb", id="desc-nul"),
    pytest.param({"id": -1}, errno.EINVAL, "-1", id="id-negative"),
]


@pytest.mark.parametrize("change, errnum, words", REFUSED_RELEASE)
def test_bad_release_is_refused_and_keeps_hold(
    handle, gate, held, change, errnum, words
):
    before = snapshot(handle, gate, held)
    payload = dict({"id": held, "description": "bb"}, **change)
    refused(lambda: handle.rpc(RELEASE, payload).get(), errnum, words)
    assert_unchanged(handle, gate, held, *before)


RAW = [
    pytest.param("hold", b'{"id":%d,"description":"new"}', id="hold"),
    pytest.param("release", b'{"id":%d,"description":"bb"}', id="release"),
    pytest.param("list", b"{}", id="list"),
    pytest.param("snapshot", b"{}", id="snapshot"),
    # A string, a NUL, then more: not one string.
    pytest.param("hold", b'{"id":%d,"description":"new"}\x00more', id="hold-inner-nul"),
]


@pytest.mark.parametrize("method, payload", RAW)
def test_raw_payload_not_ending_in_nul_is_eproto_naming_the_method(
    handle, gate, held, method, payload
):
    """A payload sent raw, not as a string: refused by the runtime before
    any decoding, naming the method."""
    before = snapshot(handle, gate, held)
    body = payload % held if b"%d" in payload else payload

    def request():
        topic = f"job-manager.epilog-gate.{method}".encode()
        future = raw.flux_rpc_raw(handle, topic, body, len(body), ANY, 0)
        Future(future).get()

    refused(request, errno.EPROTO, f"{method}: malformed payload")
    assert_unchanged(handle, gate, held, *before)


def test_hold_with_release_key_is_eproto(handle, gate, held):
    before = snapshot(handle, gate, held)
    payload = {"id": held, "description": "new", "status": 0}
    refused(lambda: handle.rpc(HOLD, payload).get(), errno.EPROTO, "'status'")
    assert_unchanged(handle, gate, held, *before)


BAD_VALUES = [
    pytest.param({"description": ""}, "empty", id="desc-empty"),
    pytest.param({"description": "x" * 65}, "64", id="desc-65-chars"),
    pytest.param({"description": "b/b"}, "b/b", id="desc-slash"),
    pytest.param({"description": "b b"}, "b b", id="desc-space"),
    pytest.param({"id": -1}, "-1", id="id-negative"),
    pytest.param({"timeout": 0}, "timeout", id="timeout-zero"),
    pytest.param({"timeout": -5}, "timeout", id="timeout-negative"),
    pytest.param({"point": "clean"}, "'clean'", id="point-unknown"),
    # Two names run together, as fastpath.c's table of points keeps them.
    pytest.param({"point": "epilog|prolog"}, "epilog|prolog", id="point-two-names"),
    pytest.param({"point": "prolog|"}, "prolog|", id="point-separator"),
    pytest.param({"description": "bb\x00"}, "bb", id="desc-nul"),
    pytest.param({"point": "prolog\x00"}, "prolog", id="point-nul"),
]


@pytest.mark.parametrize("change, words", BAD_VALUES)
def test_bad_hold_value_is_einval(handle, gate, held, change, words):
    before = snapshot(handle, gate, held)
    payload = dict({"id": held, "description": "new"}, **change)
    refused(lambda: handle.rpc(HOLD, payload).get(), errno.EINVAL, words)
    assert_unchanged(handle, gate, held, *before)


def test_description_of_64_chars_is_accepted(gate, held):
    assert gate.hold(held, "x" * 64)["state"] == "pending"


def test_release_after_release_answers_not_released(handle, gate):
    jobid = submit(handle, urgency=0)
    gate.hold(jobid, "bb")
    flux.job.cancel(handle, jobid)
    wait_event(handle, jobid, "epilog-start")
    assert gate.release(jobid, "bb") == {"released": True}
    again = gate.release(jobid, "bb")
    assert again["released"] is False and "released" in again["reason"]
    wait_inactive(handle, jobid)
    assert names(eventlog(handle, jobid)).count("epilog-finish") == 1


def test_release_on_inactive_job_answers_not_released(handle, gate):
    jobid = submit(handle)
    wait_inactive(handle, jobid)
    answer = gate.release(jobid, "bb")
    assert answer["released"] is False and "inactive" in answer["reason"]
