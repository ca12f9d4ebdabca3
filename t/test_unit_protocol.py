"""Unit tests of request payload checks (flux_epilog_gate.gate.protocol): EPROTO
for a payload of the wrong shape or type, EINVAL for a bad value, and a
message that names the problem."""

import errno
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flux_epilog_gate.errors import GateError
from flux_epilog_gate.gate.protocol import (
    JOBID_MAX,
    STATUS_MAX,
    STATUS_MIN,
    parse_hold,
    parse_list,
    parse_list_columns,
    parse_release,
    parse_snapshot,
    parse_watch,
    parse_watch_ack,
    parse_watch_lost,
)

VALID_DESCRIPTION = re.compile(r"[A-Za-z0-9._-]{1,64}")
DESCRIPTION_CHARS = st.sampled_from(
    "abcxyzABCXYZ0189._-" + " :/\\\n\t\x00é€日" + "!@#$%^&*()+=[]{}|;',<>?`~\""
)


def refused(parse, payload):
    """The GateError that ``parse(payload)`` raises."""
    with pytest.raises(GateError) as info:
        parse(payload)
    return info.value


def assert_refused(parse, payload, errnum, *words):
    error = refused(parse, payload)
    assert error.errnum == errnum, error.message
    for word in words:
        assert word in error.message


# hold


def test_hold_accepts_id_and_description():
    assert parse_hold({"id": 42, "description": "bb"}) == (42, "bb", None)


def test_hold_accepts_an_integer_timeout_as_seconds():
    _, _, timeout = parse_hold({"id": 42, "description": "bb", "timeout": 30})
    assert timeout == 30.0 and isinstance(timeout, float)


def test_hold_accepts_a_fractional_timeout():
    assert parse_hold({"id": 1, "description": "bb", "timeout": 0.5})[2] == 0.5


def test_hold_treats_null_timeout_as_absent():
    assert parse_hold({"id": 1, "description": "bb", "timeout": None})[2] is None


def test_hold_accepts_the_largest_job_id():
    assert parse_hold({"id": JOBID_MAX, "description": "bb"})[0] == JOBID_MAX


@pytest.mark.parametrize("payload", [None, [], "hold", 42, ["id", "description"]])
def test_hold_refuses_a_payload_that_is_not_an_object_with_eproto(payload):
    assert_refused(parse_hold, payload, errno.EPROTO, "hold", "object")


@pytest.mark.parametrize("missing", ["id", "description"])
def test_hold_refuses_a_missing_key_with_eproto_naming_it(missing):
    payload = {"id": 1, "description": "bb"}
    del payload[missing]
    assert_refused(parse_hold, payload, errno.EPROTO, "missing", repr(missing))


def test_hold_refuses_an_unknown_key_with_eproto_naming_it():
    payload = {"id": 1, "description": "bb", "status": 0}
    assert_refused(parse_hold, payload, errno.EPROTO, "unknown", "'status'")


@pytest.mark.parametrize("jobid", ["42", 4.2, 42.0, True, None, [42], {"id": 42}])
def test_hold_refuses_an_id_that_is_not_an_integer_with_eproto(jobid):
    payload = {"id": jobid, "description": "bb"}
    assert_refused(parse_hold, payload, errno.EPROTO, "id", "integer")


@pytest.mark.parametrize("jobid", [-1, JOBID_MAX + 1, -(2**70)])
def test_hold_refuses_an_id_out_of_range_with_einval(jobid):
    payload = {"id": jobid, "description": "bb"}
    assert_refused(parse_hold, payload, errno.EINVAL, str(jobid), "job id")


@pytest.mark.parametrize("description", [42, None, ["bb"], True, b"bb"])
def test_hold_refuses_a_description_that_is_not_a_string_with_eproto(description):
    payload = {"id": 1, "description": description}
    assert_refused(parse_hold, payload, errno.EPROTO, "description", "string")


def test_hold_refuses_an_empty_description_with_einval():
    payload = {"id": 1, "description": ""}
    assert_refused(parse_hold, payload, errno.EINVAL, "description", "empty")


def test_hold_refuses_a_description_longer_than_64_with_einval():
    payload = {"id": 1, "description": "x" * 65}
    assert_refused(parse_hold, payload, errno.EINVAL, "description", "64")


def test_hold_accepts_a_description_of_exactly_64():
    assert parse_hold({"id": 1, "description": "x" * 64})[1] == "x" * 64


@pytest.mark.parametrize(
    "description", ["bb umount", "bb\n", "a:b", "epilog-gate:recovery", "a/b", "é"]
)
def test_hold_refuses_a_description_with_bad_characters_with_einval(description):
    payload = {"id": 1, "description": description}
    assert_refused(parse_hold, payload, errno.EINVAL, repr(description))


@pytest.mark.parametrize("timeout", ["30", "10m", True, [30], {"s": 30}])
def test_hold_refuses_a_timeout_that_is_not_a_number_with_eproto(timeout):
    payload = {"id": 1, "description": "bb", "timeout": timeout}
    assert_refused(parse_hold, payload, errno.EPROTO, "timeout", "number")


@pytest.mark.parametrize("timeout", [0, 0.0, -1, -0.5])
def test_hold_refuses_a_timeout_not_greater_than_zero_with_einval(timeout):
    payload = {"id": 1, "description": "bb", "timeout": timeout}
    assert_refused(parse_hold, payload, errno.EINVAL, "timeout", "greater than 0")


@given(st.text(alphabet=DESCRIPTION_CHARS, max_size=70))
def test_hold_accepts_exactly_the_descriptions_of_the_contract(description):
    payload = {"id": 1, "description": description}
    if VALID_DESCRIPTION.fullmatch(description):
        assert parse_hold(payload)[1] == description
    else:
        assert refused(parse_hold, payload).errnum == errno.EINVAL


@given(st.from_regex(VALID_DESCRIPTION, fullmatch=True))
def test_hold_accepts_every_description_matching_the_contract(description):
    assert parse_hold({"id": 1, "description": description})[1] == description


@given(st.integers())
def test_hold_accepts_exactly_the_ids_of_the_uint64_range(jobid):
    payload = {"id": jobid, "description": "bb"}
    if 0 <= jobid <= JOBID_MAX:
        assert parse_hold(payload)[0] == jobid
    else:
        assert refused(parse_hold, payload).errnum == errno.EINVAL


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_hold_accepts_exactly_the_finite_positive_timeouts(timeout):
    payload = {"id": 1, "description": "bb", "timeout": timeout}
    if timeout > 0 and timeout != float("inf"):
        assert parse_hold(payload)[2] == timeout
    else:
        assert refused(parse_hold, payload).errnum == errno.EINVAL


# release


def test_release_defaults_status_to_zero():
    assert parse_release({"id": 42, "description": "bb"}) == (42, "bb", 0)


@pytest.mark.parametrize("status", [0, 1, 124, -1, STATUS_MIN, STATUS_MAX])
def test_release_accepts_an_int32_status(status):
    payload = {"id": 42, "description": "bb", "status": status}
    assert parse_release(payload) == (42, "bb", status)


@pytest.mark.parametrize("payload", [None, [], "release", 1.5])
def test_release_refuses_a_payload_that_is_not_an_object_with_eproto(payload):
    assert_refused(parse_release, payload, errno.EPROTO, "release", "object")


@pytest.mark.parametrize("missing", ["id", "description"])
def test_release_refuses_a_missing_key_with_eproto_naming_it(missing):
    payload = {"id": 1, "description": "bb"}
    del payload[missing]
    assert_refused(parse_release, payload, errno.EPROTO, "missing", repr(missing))


def test_release_refuses_an_unknown_key_with_eproto_naming_it():
    payload = {"id": 1, "description": "bb", "timeout": 3}
    assert_refused(parse_release, payload, errno.EPROTO, "unknown", "'timeout'")


@pytest.mark.parametrize("status", ["0", 1.0, 1.5, True, False, None])
def test_release_refuses_a_status_that_is_not_an_integer_with_eproto(status):
    payload = {"id": 1, "description": "bb", "status": status}
    assert_refused(parse_release, payload, errno.EPROTO, "status", "integer")


@pytest.mark.parametrize("status", [STATUS_MAX + 1, STATUS_MIN - 1, 2**64])
def test_release_refuses_a_status_out_of_int32_with_einval(status):
    payload = {"id": 1, "description": "bb", "status": status}
    assert_refused(parse_release, payload, errno.EINVAL, "status", str(status))


def test_release_refuses_a_bad_id_with_einval():
    payload = {"id": -5, "description": "bb"}
    assert_refused(parse_release, payload, errno.EINVAL, "release", "-5")


def test_release_refuses_a_bad_description_with_einval():
    payload = {"id": 1, "description": "no spaces"}
    assert_refused(parse_release, payload, errno.EINVAL, "release", "description")


def test_release_refuses_a_description_that_is_not_a_string_with_eproto():
    payload = {"id": 1, "description": 7}
    assert_refused(parse_release, payload, errno.EPROTO, "description", "string")


@given(st.integers())
def test_release_accepts_exactly_the_int32_statuses(status):
    payload = {"id": 1, "description": "bb", "status": status}
    if STATUS_MIN <= status <= STATUS_MAX:
        assert parse_release(payload)[2] == status
    else:
        assert refused(parse_release, payload).errnum == errno.EINVAL


# list


def test_list_without_id_lists_every_job():
    assert parse_list({}) is None


def test_list_with_null_id_lists_every_job():
    assert parse_list({"id": None}) is None


def test_list_with_id_lists_that_job():
    assert parse_list({"id": 42}) == 42


@pytest.mark.parametrize("payload", [None, [], "list"])
def test_list_refuses_a_payload_that_is_not_an_object_with_eproto(payload):
    assert_refused(parse_list, payload, errno.EPROTO, "list", "object")


def test_list_refuses_an_unknown_key_with_eproto_naming_it():
    assert_refused(parse_list, {"userid": 5}, errno.EPROTO, "unknown", "'userid'")


@pytest.mark.parametrize("jobid", ["42", 4.2, True])
def test_list_refuses_an_id_that_is_not_an_integer_with_eproto(jobid):
    assert_refused(parse_list, {"id": jobid}, errno.EPROTO, "id", "integer")


def test_list_refuses_a_negative_id_with_einval():
    assert_refused(parse_list, {"id": -1}, errno.EINVAL, "list", "job id")


@pytest.mark.parametrize("columns", [True, False])
def test_list_takes_columns_as_a_boolean(columns):
    payload = {"columns": columns}
    assert parse_list(payload) is None
    assert parse_list_columns(payload) is columns


@pytest.mark.parametrize("payload", [{"id": 42}, {"columns": None}])
def test_list_is_by_rows_without_columns_or_with_null(payload):
    assert parse_list_columns(payload) is False


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.integers() | st.floats() | st.text(max_size=4),
        lambda inner: st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3),
        max_leaves=6,
    ).filter(lambda value: value is not None and not isinstance(value, bool))
)
def test_list_refuses_columns_that_are_not_a_boolean_with_eproto(columns):
    payload = {"columns": columns}
    parse_list(payload)
    assert_refused(parse_list_columns, payload, errno.EPROTO, "list", "columns")


# watch


def test_watch_without_descriptions_watches_all():
    assert parse_watch({}) is None


def test_watch_with_null_descriptions_watches_all():
    assert parse_watch({"descriptions": None}) is None


def test_watch_with_empty_descriptions_watches_all():
    assert parse_watch({"descriptions": []}) is None


def test_watch_with_descriptions_returns_them_as_a_set():
    payload = {"descriptions": ["bb", "umount", "bb"]}
    assert parse_watch(payload) == frozenset({"bb", "umount"})


@pytest.mark.parametrize("payload", [None, [], "watch"])
def test_watch_refuses_a_payload_that_is_not_an_object_with_eproto(payload):
    assert_refused(parse_watch, payload, errno.EPROTO, "watch", "object")


def test_watch_refuses_an_unknown_key_with_eproto_naming_it():
    payload = {"description": "bb"}
    assert_refused(parse_watch, payload, errno.EPROTO, "unknown", "'description'")


@pytest.mark.parametrize("descriptions", ["bb", {"bb": 1}, 5, True])
def test_watch_refuses_descriptions_that_are_not_a_list_with_eproto(descriptions):
    payload = {"descriptions": descriptions}
    assert_refused(parse_watch, payload, errno.EPROTO, "descriptions", "list")


def test_watch_refuses_a_description_that_is_not_a_string_with_eproto():
    payload = {"descriptions": ["bb", 7]}
    assert_refused(parse_watch, payload, errno.EPROTO, "description", "string")


def test_watch_refuses_an_invalid_description_with_einval_naming_it():
    payload = {"descriptions": ["bb", "a b"]}
    assert_refused(parse_watch, payload, errno.EINVAL, "watch", "'a b'")


@pytest.mark.parametrize(
    "timeout, problem",
    [
        (float("nan"), "timeout nan is not a number"),
        (float("inf"), "timeout inf is infinite"),
        (float("-inf"), "timeout -inf is infinite"),
        (10**400, "is infinite"),
        (0, "timeout 0 must be greater than 0"),
        (-2.5, "timeout -2.5 must be greater than 0"),
    ],
)
def test_hold_says_what_is_wrong_with_a_timeout(timeout, problem):
    with pytest.raises(GateError) as exc:
        parse_hold({"id": 1, "description": "bb", "timeout": timeout})
    assert exc.value.errnum == errno.EINVAL and problem in exc.value.message


# watch-ack

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@given(
    st.one_of(
        _JSON,
        st.fixed_dictionaries(
            {"matchtag": _JSON | st.integers(), "count": _JSON | st.integers()}
        ),
    )
)
def test_watch_ack_accepts_exactly_a_matchtag_and_a_count_in_range(payload):
    valid = (
        isinstance(payload, dict)
        and set(payload) == {"matchtag", "count"}
        and all(type(payload[k]) is int for k in ("matchtag", "count"))  # noqa: E721
    )
    try:
        matchtag, count = parse_watch_ack(payload)
    except GateError as exc:
        if valid:
            assert exc.errnum == errno.EINVAL
            assert not (0 <= payload["matchtag"] < 2**32 and payload["count"] >= 0)
        else:
            assert exc.errnum == errno.EPROTO
        assert exc.message.startswith("watch-ack: ")
        return
    assert valid and (matchtag, count) == (payload["matchtag"], payload["count"])
    assert 0 <= matchtag < 2**32 and count >= 0


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@given(JSON)
def test_snapshot_accepts_only_an_empty_object_or_no_payload(payload):
    if payload is None or payload == {}:
        parse_snapshot(payload)
        return
    with pytest.raises(GateError) as info:
        parse_snapshot(payload)
    assert info.value.errnum == errno.EPROTO
    assert info.value.message.startswith("snapshot: ")


def test_watch_lost_is_a_boolean_off_by_default():
    assert parse_watch_lost({}) is False
    assert parse_watch_lost({"lost": None}) is False
    assert parse_watch_lost({"lost": True}) is True
    assert parse_watch({"lost": True, "descriptions": ["bb"]}) == frozenset({"bb"})


@pytest.mark.parametrize("value", [1, "true", [], {}])
def test_watch_refuses_a_lost_that_is_not_a_boolean_with_eproto(value):
    assert_refused(parse_watch_lost, {"lost": value}, errno.EPROTO, "lost", "boolean")
