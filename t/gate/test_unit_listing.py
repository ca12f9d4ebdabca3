"""The ``list`` answer written out directly (gate/listing.py) is the text
json writes of the holds' dicts, for any holds: with or without their
hold-log line, in any state and point, with shared and distinct
descriptions and timeouts (an int and an equal float are written apart)."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from flux_epilog_gate.gate import holds
from flux_epilog_gate.gate.holdlog import hold_entry
from flux_epilog_gate.gate.listing import columns_answer, entries, entry, list_answer
from flux_epilog_gate.listentry import columns_of


def dumped(hold_list):
    return json.dumps(
        {"holds": [hold.to_dict() for hold in hold_list]}, separators=(",", ":")
    )


DESCRIPTIONS = st.one_of(
    st.from_regex(r"[A-Za-z0-9._-]{1,64}", fullmatch=True),
    st.sampled_from(["bb-teardown", "unmount", "a"]),
    st.text(max_size=8),
)
NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**63), max_value=2**64),
    st.sampled_from([600, 600.0, -0.0, 0.0, 0, 1e16, 1.5]),
)

hold_values = st.fixed_dictionaries(
    {
        "jobid": st.integers(min_value=0, max_value=2**64 - 1),
        "description": DESCRIPTIONS,
        "userid": st.integers(min_value=0, max_value=2**32 - 1),
        "t_hold": st.one_of(
            st.floats(min_value=1e9, max_value=2e9), st.floats(), st.integers()
        ),
        "timeout": st.one_of(st.none(), NUMBERS),
        "point": st.sampled_from(list(holds.Point) + list(holds.POINTS)),
        "state": st.sampled_from(list(holds.HoldState) + ["pending", "active"]),
        "t_start": st.one_of(st.none(), NUMBERS),
        "logged": st.booleans(),
    }
)


def make(values):
    hold = holds.Hold(
        values["jobid"],
        values["description"],
        values["userid"],
        values["t_hold"],
        values["timeout"],
        values["point"],
    )
    hold.state = values["state"]
    hold.t_start = values["t_start"]
    if values["logged"]:
        hold_entry(hold)  # the time's text the hold keeps once recorded
    return hold


@settings(max_examples=400, deadline=None)
@given(st.lists(hold_values, max_size=12))
def test_an_answer_is_the_text_json_writes_of_the_holds_dicts(values):
    hold_list = [make(v) for v in values]
    assert list_answer(hold_list) == dumped(hold_list)


@settings(max_examples=100, deadline=None)
@given(st.lists(hold_values, min_size=1, max_size=6))
def test_each_entry_is_one_holds_dict_as_json_writes_it(values):
    hold_list = [make(v) for v in values]
    for hold, text in zip(hold_list, entries(hold_list)):
        assert text == json.dumps(hold.to_dict(), separators=(",", ":"))
        assert entry(hold) == text


@settings(max_examples=400, deadline=None)
@given(st.lists(hold_values, max_size=12))
def test_an_answer_by_column_is_the_text_json_writes_of_the_entries_columns(values):
    hold_list = [make(v) for v in values]
    by_column = {"columns": columns_of([hold.to_dict() for hold in hold_list])}
    assert columns_answer(hold_list) == json.dumps(by_column, separators=(",", ":"))


def test_an_answer_by_column_writes_a_missing_value_as_null_in_its_place():
    hold_list = [
        holds.Hold(1, "a", 0, 1.5, 600.0),
        holds.Hold(2, "b", 5, 2.5, None, holds.PROLOG),
    ]
    hold_list[1].t_start = 3.0
    columns = json.loads(columns_answer(hold_list))["columns"]
    assert columns == {
        "id": [1, 2],
        "description": ["a", "b"],
        "state": ["pending", "pending"],
        "userid": [0, 5],
        "t_hold": [1.5, 2.5],
        "point": ["epilog", "prolog"],
        "t_start": [None, 3.0],
        "timeout": [600.0, None],
    }


def test_equal_timeouts_of_different_types_are_written_each_as_itself():
    hold_list = [
        holds.Hold(1, "a", 0, 1.5, timeout)
        for timeout in (600.0, 600, 600.0, 0.0, -0.0, 0, float("inf"))
    ]
    assert list_answer(hold_list) == dumped(hold_list)
    texts = [json.loads(t)["timeout"] for t in entries(hold_list)]
    assert [type(t) for t in texts[:3]] == [float, int, float]


def test_the_hold_time_is_the_text_its_log_line_was_written_with():
    hold = holds.Hold(7, "bb", 1000, 1764612345.123456, 600.0, holds.PROLOG)
    line = hold_entry(hold)
    assert line.startswith('{"timestamp":1764612345.123456,')
    text = entries([hold])[0]
    assert '"t_hold":1764612345.123456,' in text
    assert text == json.dumps(hold.to_dict(), separators=(",", ":"))


def test_listing_a_hold_leaves_it_as_it_was():
    hold = holds.Hold(7, "bb", 1000, 1.25)
    entries([hold])
    assert hold.t_text is None


# The order of the answer: by job id, then description, however the holds
# came (``list --json`` prints the answer's array as it is).

held_pairs = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=40), st.sampled_from(["b", "a", "é", "B"])
    ),
    unique=True,
    max_size=30,
)


@settings(max_examples=100, deadline=None)
@given(held_pairs)
def test_holds_are_listed_by_job_id_then_description(pairs):
    from fakeport import FakePort

    from flux_epilog_gate.gate import SCHED, Gate

    port = FakePort()
    gate = Gate(port)
    for jobid in {jobid for jobid, _ in pairs}:
        port.add_job(jobid, SCHED, 1000)
    for jobid, description in pairs:
        gate.hold(jobid, description)
    listed = [(h["id"], h["description"]) for h in gate.list()]
    assert listed == sorted(pairs)
    assert json.loads(gate.list_json())["holds"] == gate.list()
    by_column = json.loads(gate.list_json(columns=True))["columns"]
    assert by_column == columns_of(gate.list())
