"""dws.so's log line of its epilog timeout is short whatever the value
(1e308 was 309 digits), and its query keeps the value itself.  A real
instance, into which dws.so is loaded again with each value."""

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from jobs import dmesg

from flux_epilog_gate.paths import plugin_path
from flux_epilog_gate.testing import Instance

DWS_SO = plugin_path("dws")


@pytest.fixture(scope="module")
def inst():
    with Instance(
        cores=8, plugin=DWS_SO, plugin_conf={"epilog-timeout": "10m"}
    ) as inst:
        yield inst


def load(inst, value):
    """Load dws.so again with ``epilog-timeout`` = ``value``; its query."""
    handle = inst.handle()
    handle.rpc("job-manager.jobtap", {"remove": "dws.so"}).get()
    request = {"load": DWS_SO, "conf": {"epilog-timeout": value}}
    handle.rpc("job-manager.jobtap", request).get()
    return handle.rpc("job-manager.jobtap-query", {"name": "dws.so"}).get()


@pytest.mark.parametrize(
    "value, shown",
    [
        (1e308, "1e+308s"),
        (-1e300, "-1e+300s"),
        (2**62, "4.61169e+18s"),
        (600, "600.000s"),
        (0.1, "0.100s"),
        (-1, "-1.000s"),
    ],
)
def test_the_load_logs_the_timeout_readably_and_keeps_it(inst, value, shown):
    answer = load(inst, value)
    assert answer["epilog-timeout"] == value
    lines = dmesg(inst, "dws: epilog timeout = ")
    assert lines[-1].endswith(f"dws: epilog timeout = {shown}"), lines[-1]


@given(st.floats(allow_nan=False, allow_infinity=False))
@example(1e308)
@example(999_999_999.9996)
def test_a_timeout_is_shown_in_few_characters_as_its_value(seconds):
    from flux_epilog_gate.dws.config import shown_timeout

    text = shown_timeout(seconds)
    assert len(text) <= 16 and text.endswith("s")
    assert math.isclose(float(text[:-1]), seconds, rel_tol=1e-5, abs_tol=5e-4)
