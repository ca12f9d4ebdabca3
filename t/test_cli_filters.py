"""``flux-epilog-gate list``'s filters and formats on values at the edge
of their domain: a filter no hold can match (a user id past 32 bits, a
description of characters no hold has, no state) is a usage error (exit
2) naming the option and why, and a valid format shows a hold whatever
its timeout (any finite number of seconds).  A real instance with a
pending hold, an active one and one of timeout 1e308."""

import errno
import json
import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from jobs import cli_instance

from flux_epilog_gate.client import cli
from flux_epilog_gate.client.arguments import STATES, Usage
from flux_epilog_gate.client.exits import EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from flux_epilog_gate.client.formats import SAMPLE_HOLD, HoldInfo, checked_format
from flux_epilog_gate.gate.holds import description_error

#: The largest user id (flux's are 32-bit).
USERID_MAX = 2**32 - 1

#: The largest finite float: a timeout the gate accepts.
HUGE = 1e308

#: Descriptions of the instance's holds.
DESCRIPTIONS = {"stage-out", "scrub", "huge"}


@pytest.fixture(scope="module")
def inst():
    """An instance whose gate holds ``stage-out`` (pending), ``scrub``
    and ``huge`` (active, the latter of timeout 1e308); the command run
    here talks to it."""
    with cli_instance(("scrub", 600), ("huge", HUGE)) as inst:
        yield inst


def run(capsys, *argv):
    """``(status, stdout, stderr)`` of the command, run here."""
    try:
        status = cli._run(list(argv))
    except SystemExit as exc:
        status = exc.code
    out, err = capsys.readouterr()
    return status, out, err


def listed(capsys, *argv):
    """The descriptions ``list --json`` prints with ``argv``, or the
    ``(status, stderr)`` of a failure."""
    status, out, err = run(capsys, "list", "--json", *argv)
    if status != EXIT_OK:
        return status, err
    return sorted(hold["description"] for hold in json.loads(out))


def assert_usage_error(result, option, problem):
    status, out, err = result
    assert status == EXIT_USAGE, (status, err)
    assert out == ""
    assert f"argument {option}: " in err and problem in err, err
    assert "Traceback" not in err


# Filters a hold cannot match are usage errors


@pytest.mark.parametrize(
    "argv, option, problem",
    [
        (["-u", "4294967296"], "-u/--user", "user id 4294967296 is out of range"),
        (["--user=-1"], "-u/--user", "user id -1 is out of range"),
        (["-u", "9" * 5000], "-u/--user", "is out of range (0 to 4294967295)"),
        (["-u", ""], "-u/--user", "an empty user name"),
        (["-u", "0,"], "-u/--user", "an empty user name"),
        (["-u", "\u0663"], "-u/--user", "unknown user '\u0663'"),
        (["-u", "0" * 20 + "7,x"], "-u/--user", "unknown user 'x'"),
        (["-u", "no\x00one"], "-u/--user", "unknown user"),
        (["--description", "a b"], "--description", "may only contain"),
        (["--description", ""], "--description", "must not be empty"),
        (["--description", "scrub,"], "--description", "must not be empty"),
        (["--description", "x" * 65], "--description", "longer than 64"),
        (["--state", ""], "--state", "invalid state ''"),
        (["--state", "active,"], "--state", "invalid state ''"),
        (["--state", "Active"], "--state", "invalid state 'Active'"),
    ],
)
def test_a_filter_no_hold_can_match_is_a_usage_error(
    inst, capsys, argv, option, problem
):
    assert_usage_error(run(capsys, "list", *argv), option, problem)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.integers())
@example(USERID_MAX + 1)
@example(USERID_MAX)
@example(os.getuid())
def test_a_user_id_is_listed_in_32_bits_and_refused_past_them(inst, capsys, userid):
    result = run(capsys, "list", "--json", f"--user={userid}")
    if not 0 <= userid <= USERID_MAX:
        assert_usage_error(result, "-u/--user", f"user id {str(userid)[:40]}")
        assert "is out of range (0 to 4294967295)" in result[2]
        return
    status, out, err = result
    assert status == EXIT_OK, err
    mine = userid == os.getuid()
    assert {h["description"] for h in json.loads(out)} == (
        DESCRIPTIONS if mine else set()
    )


def split(text):
    return text.split(",")


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.text() | st.sampled_from(sorted(DESCRIPTIONS)).map(lambda d: d + ",x-y"))
@example("a b")
@example("")
@example("scrub,stage-out")
def test_a_description_filter_lists_holds_or_names_what_no_hold_has(inst, capsys, text):
    result = run(capsys, "list", "--json", f"--description={text}")
    problems = [description_error(word) for word in split(text)]
    if any(problems):
        problem = next(p for p in problems if p)
        assert_usage_error(result, "--description", problem)
        return
    status, out, err = result
    assert status == EXIT_OK, err
    assert {h["description"] for h in json.loads(out)} == DESCRIPTIONS & set(
        split(text)
    )


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.text() | st.lists(st.sampled_from(STATES), min_size=1).map(",".join))
@example("")
@example("pending,active")
def test_a_state_filter_lists_holds_or_names_what_is_no_state(inst, capsys, text):
    result = run(capsys, "list", "--json", f"--state={text}")
    wrong = [word for word in split(text) if word not in STATES]
    if wrong:
        assert_usage_error(result, "--state", f"invalid state {wrong[0][:40]!r}")
        return
    status, out, err = result
    assert status == EXIT_OK, err
    states = {h["state"] for h in json.loads(out)}
    assert states and states <= set(split(text))


def test_good_filters_list_their_holds(inst, capsys):
    me = str(os.getuid())
    assert listed(capsys, "-u", me) == sorted(DESCRIPTIONS)
    assert listed(capsys, "-u", "all") == sorted(DESCRIPTIONS)
    assert listed(capsys, "--state", "active") == ["huge", "scrub"]
    assert listed(capsys, "--state", "pending", "--description", "scrub") == []
    assert listed(capsys, "--description", "huge,scrub", "-u", me) == [
        "huge",
        "scrub",
    ]


# watch's filters


@pytest.mark.parametrize(
    "description, problem",
    [
        ("a b", "description 'a b' may only contain"),
        ("", "description must not be empty"),
    ],
)
def test_watch_of_a_description_no_hold_can_have_is_refused_naming_it(
    inst, capsys, caplog, description, problem
):
    """As the plugin refuses it (exit 1, as a bad description of hold);
    the command's message goes to its logger."""
    status, out, _ = run(capsys, "watch", "-c", "1", "--", description)
    assert status == EXIT_REFUSED and out == ""
    assert f"watch: {problem}" in caplog.text, caplog.text


@pytest.mark.parametrize(
    "argv, option, problem",
    [
        (["--point", ""], "--point", "invalid choice: ''"),
        (["--point", "clean"], "--point", "invalid choice: 'clean'"),
        (["-c", "0"], "-c/--count", "'0' is not a count of at least 1"),
        (["-c", "9" * 5000], "-c/--count", "is not a count of at least 1"),
    ],
)
def test_watch_of_a_bad_point_or_count_is_a_usage_error(
    inst, capsys, argv, option, problem
):
    assert_usage_error(run(capsys, "watch", *argv), option, problem)


# The plugin's list request: filters are not its keys


@pytest.mark.parametrize(
    "key, value",
    [
        ("userid", 2**32),
        ("userids", [2**32]),
        ("state", ""),
        ("states", [""]),
        ("description", "a b"),
        ("descriptions", ["a b"]),
    ],
)
def test_a_list_request_with_a_filter_is_eproto_naming_the_key(inst, key, value):
    """Another client's request: the gate lists by job id only, and
    refuses a key it does not know (flux-epilog-gate(7), EPROTO)."""
    with pytest.raises(OSError) as info:
        inst.handle().rpc("job-manager.epilog-gate.list", {key: value}).get()
    assert info.value.errno == errno.EPROTO
    assert info.value.strerror == f"list: unknown key {key!r} in payload"


# A valid format shows any timeout


@pytest.mark.parametrize(
    "fmt, shown",
    [
        ("{timeout!H}", "1.157e+303d"),
        ("{timeout!H:>12h}", " 1.157e+303d"),
        ("{timeout!F}", "1.157e+303d"),
        ("{timeout!D}", "1e+308"),
        ("{timeout!d}", "1e+308"),
        ("{timeout!d:%b%d %T::>8}", "  1e+308"),
        ("{timeout:.3g}", "1e+308"),
    ],
)
def test_a_valid_format_shows_a_timeout_of_1e308(inst, capsys, fmt, shown):
    """``{timeout!H}`` was a usage error: flux's ``!H`` makes a
    timedelta of it, which holds 999999999 days at most."""
    status, out, err = run(
        capsys, "list", "-n", "--description", "huge", "-o", f"{fmt}|"
    )
    assert (status, err) == (EXIT_OK, "")
    assert out == f"{shown}|\n"


#: Finite timeouts greater than 0, as the gate accepts them.
TIMEOUTS = st.floats(min_value=0, max_value=HUGE, exclude_min=True) | st.integers(
    1, 2**63
)
#: Conversions of a number and specs a date or a duration may have.
CONVERTED = st.builds(
    lambda conv, spec: "{timeout" + conv + spec + "}",
    st.sampled_from(["", "!d", "!D", "!F", "!H", "!P", "!s", "!r"]),
    st.sampled_from(["", ":>20", ":<9h", ":%H", ":%b%d %T::>15h", ":.3g", ":^7+"]),
)


@given(CONVERTED, TIMEOUTS)
@example("{timeout!H}", HUGE)
@example("{timeout!d}", 1e18)  # past the platform's time_t: OSError
def test_a_format_that_shows_the_sample_shows_any_timeout(fmt, timeout):
    try:
        formatter = checked_format(fmt)
    except Usage:  # not a format of a number
        return
    hold = HoldInfo(dict(SAMPLE_HOLD, timeout=timeout), 3.0)
    formatter.format(hold)  # raised OverflowError for !H of 1e308
