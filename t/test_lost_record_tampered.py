"""The record of lost holds (KVS ``epilog-gate.lost``) written by another
hand: a new job-manager's load keeps only lines as the gate writes them.

The load used to keep any object with an integer id, string description
and reason: watchers asking for lost holds were sent ids that are no job
ids, empty descriptions, a ``point`` that was a list, NaN (which no JSON
reader but Python's takes); and dws.so, which tears down the workflow of
a lost hold of its own, took a line without a ``point`` for one, and
failed on its id (-1), which ended its recovery of every other job
early.  Each line that is not an entry is now skipped and named, and the
record written again without it."""

import json

import pytest
from conftest import restart
from hypothesis import given, settings
from hypothesis import strategies as st
from jobs import dmesg, query, wait_until
from jsonstrategies import ANY_JSON

from flux_epilog_gate.gate.holds import POINTS, description_error
from flux_epilog_gate.gate.lostrecord import KEY, parse
from flux_epilog_gate.paths import plugin_path
from flux_epilog_gate.testing import Instance

GOOD = {
    "id": 1234,
    "description": "bb",
    "userid": 0,
    "point": "epilog",
    "ran": False,
    "lost": True,
    "reason": "lost: the job went inactive before epilog-gate could hold it",
}

BAD = [
    dict(GOOD, id=-1),
    dict(GOOD, id=2**64),
    dict(GOOD, id=1.0),
    dict(GOOD, description=""),
    dict(GOOD, description="bad name!"),
    dict(GOOD, description=7),
    dict(GOOD, point=[1]),
    dict(GOOD, point="later"),
    dict(GOOD, userid="root"),
    dict(GOOD, userid=-5),
    dict(GOOD, ran="yes"),
    dict(GOOD, lost=1),
    dict(GOOD, reason=None),
    {k: v for k, v in GOOD.items() if k != "point"},
    dict(GOOD, extra=1),
]


def as_line(entry):
    return json.dumps(entry)


def keeps_the_contract(entry):
    """What a watcher and dws.so may take of an entry."""
    json.dumps(entry, allow_nan=False)
    return (
        type(entry["id"]) is int
        and 0 <= entry["id"] < 2**64
        and description_error(entry["description"]) is None
        and entry["point"] in POINTS
        and type(entry["ran"]) is bool
        and (entry["userid"] is None or type(entry["userid"]) is int)
        and entry["lost"] is True
    )


MUTATED = st.builds(
    lambda key, value: {**GOOD, key: value}, st.sampled_from(sorted(GOOD)), ANY_JSON
)
LINE = st.one_of(
    st.just(as_line(GOOD)),
    st.sampled_from(BAD).map(as_line),
    MUTATED.map(as_line),
    ANY_JSON.map(json.dumps),
    st.just(as_line(GOOD).replace("1234", "NaN")),
    st.text(max_size=30),
)


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(lines=st.lists(LINE, max_size=6))
def test_the_record_read_back_holds_only_entries(lines):
    entries, bad = parse("\n".join(lines).encode())
    assert all(map(keeps_the_contract, entries))
    written = [n for n, line in enumerate(lines, 1) if line.strip()]
    assert len(entries) + len(bad) <= len(written)


@pytest.mark.parametrize("entry", BAD, ids=range(len(BAD)))
def test_a_line_unlike_the_gates_is_skipped(entry):
    entries, bad = parse(as_line(entry).encode())
    assert (entries, bad) == ([], [1])


@pytest.fixture(scope="module")
def inst():
    with Instance(
        cores=8, plugin=plugin_path(), plugins=[(plugin_path("dws"), {})]
    ) as inst:
        yield inst


def test_a_tampered_record_loads_its_entries_alone_and_dws_recovers(inst):
    lines = [as_line(GOOD)] + [as_line(entry) for entry in BAD]
    lines.append(as_line(GOOD).replace("1234", "NaN"))
    inst.flux("kvs", "put", "--raw", f"{KEY}=-", input="\n".join(lines) + "\n")
    restart(inst, "module")
    assert query(inst)["counters"]["lost_undelivered"] == 1
    assert dmesg(inst, f"{KEY}: line 2 skipped")
    # dws.so's recovery ran to its end, on no line it could not read.
    assert not dmesg(inst, "waited on recovery")

    def rewritten():
        record = inst.flux("kvs", "get", KEY).stdout
        return [json.loads(line) for line in record.splitlines() if line] == [GOOD]

    wait_until(rewritten)
