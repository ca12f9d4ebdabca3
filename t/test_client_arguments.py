"""The Python client's arguments: a string is one description (or point),
never a sequence of one-character ones; anything else but strings is
refused before a request is sent."""

import flux.job
import pytest
from jobs import submit, wait_event

from flux_epilog_gate import EpilogGate


def active(handle, gate, description):
    jobid = submit(handle, urgency=0)
    gate.hold(jobid, description)
    flux.job.cancel(handle, jobid)
    wait_event(handle, jobid, "epilog-start")
    return jobid


def test_watch_of_a_string_watches_that_one_description(
    handle, gate, no_leftover_holds
):
    """watch("bb") used to watch description "b" (the string's
    characters)."""
    single = active(handle, gate, "b")
    double = active(handle, gate, "bb")
    stream = gate.watch_async("bb")
    stream.wait_for(30)
    first = stream.get()
    assert (first["id"], first["description"]) == (double, "bb")
    stream.reset()
    # "b" is active too, yet nothing more comes on this stream.
    with pytest.raises(TimeoutError):
        stream.wait_for(1.0)
    assert {h["id"] for h in gate.list() if h["state"] == "active"} >= {
        single,
        double,
    }


def test_watch_generator_of_a_string_and_of_a_list_agree(
    handle, gate, no_leftover_holds
):
    active(handle, gate, "c")  # what "cc" read as characters would watch
    jobid = active(handle, gate, "cc")
    for descriptions in ("cc", ["cc"], ("cc",)):
        hold = next(EpilogGate(handle).watch(descriptions))
        assert (hold["id"], hold["description"]) == (jobid, "cc")


def test_watch_points_as_a_string(handle, gate, no_leftover_holds):
    active(handle, gate, "p")  # what "pt" read as characters would watch
    jobid = active(handle, gate, "pt")
    hold = next(EpilogGate(handle).watch("pt", points="epilog"))
    assert (hold["id"], hold["point"]) == (jobid, "epilog")


@pytest.mark.parametrize(
    "descriptions, problem",
    [
        ([b"bb"], "b'bb' is not a string"),
        (["ok", 7], "7 is not a string"),
        (7, "not int"),
        ([None], "None is not a string"),
    ],
)
def test_watch_refuses_what_is_not_strings(gate, descriptions, problem):
    with pytest.raises(TypeError) as info:
        next(gate.watch(descriptions))
    assert problem in str(info.value) and "descriptions" in str(info.value)


def test_watch_refuses_points_that_are_not_strings(gate):
    with pytest.raises(TypeError) as info:
        gate.watch_async(points=[1])
    assert "points: 1 is not a string" in str(info.value)
