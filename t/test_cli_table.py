"""The default ``list`` table, written directly (client/table.py), is the
text flux's OutputFormat prints of the same holds in the same format; and
the command prints it so from a real instance's answer."""

import contextlib
import io
import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flux_epilog_gate.client import cli
from flux_epilog_gate.client.formats import HoldFormat, HoldInfo, username
from flux_epilog_gate.client.listing import print_lines
from flux_epilog_gate.client.table import (
    DEFAULT_FORMAT,
    F58,
    F58_TAIL,
    ages,
    default_lines,
    in_order,
)
from flux_epilog_gate.listentry import KEYS, columns_of

#: The default format with a spec that changes nothing in its output but
#: makes it another format: printed by flux's OutputFormat.
SAME_BY_OUTPUTFORMAT = DEFAULT_FORMAT.replace("{state:<7}", "{state:<7s}")


def by_outputformat(holds, now, no_header, fmt=DEFAULT_FORMAT):
    out = io.StringIO()
    items = [HoldInfo(hold, now) for hold in holds]
    with contextlib.redirect_stdout(out):
        HoldFormat(fmt).print_items(items, no_header=no_header)
    return out.getvalue()


def directly(holds, now, no_header):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_lines(default_lines(columns_of(holds), now, username, no_header))
    return out.getvalue()


NOW = 1_764_612_345.5
durations = st.one_of(
    st.floats(min_value=0, max_value=1e8, allow_nan=False),
    st.integers(min_value=0, max_value=10**8),
    st.sampled_from([0, 0.0, 0.0004, 0.001, 9.9999, 59.99, 3600, float("inf")]),
)
hold_dicts = st.builds(
    lambda jobid, description, state, point, userid, age, active, timeout: {
        "id": jobid,
        "description": description,
        "state": state,
        "userid": userid,
        "t_hold": NOW - age,
        **({} if point is None else {"point": point}),
        **({} if active is None else {"t_start": NOW - active}),
        **({} if timeout is None else {"timeout": timeout}),
    },
    jobid=st.integers(min_value=0, max_value=2**63 - 1),
    description=st.one_of(
        st.from_regex(r"[A-Za-z0-9._-]{1,64}", fullmatch=True),
        st.sampled_from(["0s", "0.0", "0:00:00", "a", "bb-teardown"]),
    ),
    state=st.sampled_from(["pending", "active"]),
    point=st.sampled_from([None, "epilog", "prolog", "depend"]),
    userid=st.sampled_from([0, os.getuid(), 4_000_000_001]),
    age=st.one_of(durations, st.floats(min_value=-10, max_value=0)),
    active=st.one_of(st.none(), durations, st.floats(min_value=-10, max_value=0)),
    timeout=st.one_of(st.none(), durations),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(hold_dicts, max_size=8), st.booleans())
def test_the_default_table_is_what_outputformat_prints(holds, no_header):
    assert directly(holds, NOW, no_header) == by_outputformat(holds, NOW, no_header)


def test_a_long_user_name_and_description_widen_their_columns():
    holds = [
        {
            "id": 1,
            "description": "d" * 64,
            "state": "pending",
            "userid": 0,
            "t_hold": NOW - 1,
        },
    ]
    text = directly(holds, NOW, False)
    assert text == by_outputformat(holds, NOW, False)
    assert text.splitlines()[0].startswith("JOBID        DESCRIPTION" + " " * 54)


def test_the_equivalent_format_takes_outputformats_path():
    holds = [
        {
            "id": 1,
            "description": "a",
            "state": "pending",
            "userid": 0,
            "t_hold": NOW - 1,
        }
    ]
    assert by_outputformat(holds, NOW, False, SAME_BY_OUTPUTFORMAT) == directly(
        holds, NOW, False
    )


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(st.floats(), st.integers(min_value=-(10**9), max_value=10**9)),
    st.floats(min_value=0, max_value=2e9),
)
def test_ages_are_fsd_of_each_age_and_0s_for_none(t_hold, now):
    from flux.util import fsd

    age = now - t_hold
    assert ages(now, [t_hold]) == [fsd(age) if age > 0.0 else "0s"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=6), st.sampled_from(["b", "a", "B"])
        ),
        unique=True,
        max_size=12,
    ),
    st.randoms(use_true_random=False),
)
def test_in_order_puts_holds_by_job_id_then_description(pairs, rand):
    entries = [{"id": j, "description": d, "state": "pending"} for j, d in pairs]
    rand.shuffle(entries)
    ordered = sorted(entries, key=lambda e: (e["id"], e["description"]))
    assert in_order(columns_of(entries)) == columns_of(ordered)


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(
        st.integers(min_value=0, max_value=2**64 - 1),
        st.integers(min_value=0, max_value=58**7),
        st.sampled_from([0, 57, 58, 3363, 3364, 58**6 - 1, 58**6, 2**64 - 1]),
    )
)
def test_f58_ids_are_libfluxs(jobid):
    from flux.job import JobID

    assert F58()(jobid) == JobID(jobid).f58


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.integers(min_value=0, max_value=2**64 - 1),
            # ids near each other share the digits before their last six
            st.integers(min_value=0, max_value=58**2).map(lambda n: 58**8 + n * 977),
            st.sampled_from([0, 3364, 58**6 - 1, 58**6, 58**7, 2**64 - 1]),
        ),
        max_size=50,
    )
)
def test_f58_many_is_libfluxs_id_by_id(jobids):
    from flux.job import JobID

    assert F58().many(jobids) == [JobID(jobid).f58 for jobid in jobids]


def test_f58_many_refuses_what_libflux_refuses():
    for jobid in (-1, 2**64):
        with pytest.raises((OSError, OverflowError, ValueError, TypeError)):
            F58().many([58**6, jobid])


def test_f58_ids_are_ascii_when_flux_forces_it(monkeypatch):
    from flux.job import JobID

    monkeypatch.setenv("FLUX_F58_FORCE_ASCII", "1")
    jobids = [0, 58**6 + 1, 2**64 - 1]
    assert F58().many(jobids) == [JobID(jobid).f58 for jobid in jobids]
    assert F58()(58**6).startswith("f")


def test_f58_refuses_what_libflux_refuses():
    for jobid in (-1, 2**64):
        with pytest.raises((OSError, OverflowError, ValueError, TypeError)):
            F58()(jobid)


# Under a real instance: the command's two paths print the same table.


@pytest.fixture
def fixed_now(monkeypatch, instance):
    """The command run here, against the session instance, at one time."""
    monkeypatch.setenv("FLUX_URI", instance.uri)
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now)


def run_cli(capsys, *argv):
    status = cli._run(["list", *argv])
    return status, capsys.readouterr().out


@pytest.fixture
def listed_holds(handle, gate, no_leftover_holds):
    """Holds of every kind on the session instance: pending with a float,
    an int and no timeout, a prolog one, and an active one."""
    from jobs import set_urgency, submit, wait_event

    waiting = submit_seven_digits(handle, urgency=0)
    gate.hold(waiting, "bb-teardown", timeout=600.0)
    gate.hold(waiting, "unmount", timeout=90)
    gate.hold(waiting, "stage-in", point="prolog")
    ran = submit(handle, duration=0.1, urgency=0)
    gate.hold(ran, "scrub")
    set_urgency(handle, ran, 16)
    wait_event(handle, ran, "epilog-start", timeout=60, match=lambda c: True)
    return int(waiting), int(ran)


def submit_seven_digits(handle, **kwargs):
    """A job whose f58 id has seven digits or more, the table's common
    case (F58.many): a new instance's ids count the milliseconds since its
    first, and reach 58**6 after 2.27 s.  An earlier id's job is cancelled
    and the rest waited."""
    import flux.job
    from jobs import submit

    jobid = submit(handle, **kwargs)
    if jobid < F58_TAIL:
        flux.job.cancel(handle, jobid)
        time.sleep(((F58_TAIL >> FLUID_MS_SHIFT) - (jobid >> FLUID_MS_SHIFT)) / 1e3)
        time.sleep(0.05)
        jobid = submit(handle, **kwargs)
    assert jobid >= F58_TAIL
    return jobid


#: A FLUID job id's milliseconds begin at this bit (RFC 19).
FLUID_MS_SHIFT = 24


def test_list_answer_is_compact_json_of_each_kind_of_hold(handle, listed_holds):
    import json

    waiting, ran = listed_holds
    text = handle.rpc("job-manager.epilog-gate.list", {}).get_str()
    answer = json.loads(text)
    assert text == json.dumps(answer, separators=(",", ":"))
    mine = {(h["id"], h["description"]): h for h in answer["holds"]}
    keys = ["id", "description", "state", "userid", "t_hold", "point"]
    assert list(mine[waiting, "bb-teardown"]) == keys + ["timeout"]
    assert mine[waiting, "bb-teardown"]["timeout"] == 600.0
    assert mine[waiting, "unmount"]["timeout"] == 90
    assert list(mine[waiting, "stage-in"]) == keys
    assert mine[waiting, "stage-in"]["point"] == "prolog"
    assert list(mine[ran, "scrub"]) == keys + ["t_start"]
    assert mine[ran, "scrub"]["state"] == "active"
    assert mine[ran, "scrub"]["t_start"] >= mine[ran, "scrub"]["t_hold"]


def test_the_answer_by_column_is_the_entries_by_column(handle, gate, listed_holds):
    """The client's ``list_columns`` is ``list``'s entries by column, all
    holds or one job's, and its keys are those of an entry."""
    waiting, _ = listed_holds
    for jobid in (None, waiting):
        by_column = gate.list_columns(jobid)
        assert tuple(by_column) == KEYS
        assert by_column == columns_of(gate.list(jobid))
    assert by_column["description"] == ["bb-teardown", "stage-in", "unmount"]
    assert by_column["t_start"] == [None] * 3
    assert by_column["timeout"] == [600.0, None, 90]


def test_a_plugin_that_lists_by_rows_only_is_asked_for_rows(
    handle, gate, listed_holds, monkeypatch
):
    """An epilog-gate.so of an earlier version refuses ``columns`` with
    EPROTO: the client then asks for rows and makes the columns itself."""
    import errno

    from flux_epilog_gate import EpilogGate

    asked = []
    real = EpilogGate.list_text

    def rows_only(self, jobid=None, columns=False):
        asked.append(columns)
        if columns:
            raise OSError(errno.EPROTO, "list: unknown key 'columns' in payload")
        return real(self, jobid)

    expected = gate.list_columns()
    monkeypatch.setattr(EpilogGate, "list_text", rows_only)
    assert gate.list_columns() == expected
    assert asked == [True, False]


def test_the_commands_default_table_is_outputformats(capsys, fixed_now, listed_holds):
    for extra in ([], ["-n"], ["--state", "active"]):
        status, direct = run_cli(capsys, *extra)
        assert status == 0
        _, flux_path = run_cli(capsys, *extra, "-o", SAME_BY_OUTPUTFORMAT)
        assert direct == flux_path
        assert len(direct.splitlines()) >= 1
    status, text = run_cli(capsys)
    assert "bb-teardown" in text and "scrub" in text


def test_list_json_prints_the_answers_sorted_array_as_filtering_would(
    capsys, fixed_now, handle, gate, no_leftover_holds
):
    """Holds placed out of order: ``list --json`` passes the gate's answer
    on undecoded, and it is the array (sorted, compact) that the decoding
    path prints of the same holds."""
    import json

    from jobs import submit

    first, second = submit(handle, urgency=0), submit(handle, urgency=0)
    for jobid, description in ((second, "b"), (second, "a"), (first, "c")):
        gate.hold(jobid, description)
    status, passed_on = run_cli(capsys, "--json")
    assert status == 0
    _, decoded = run_cli(capsys, "--json", "--state", "pending,active")
    assert passed_on == decoded
    mine = [
        (h["id"], h["description"])
        for h in json.loads(passed_on)
        if h["id"] in (first, second)
    ]
    assert mine == [(first, "c"), (second, "a"), (second, "b")]
    assert passed_on == json.dumps(json.loads(passed_on), separators=(",", ":")) + "\n"
