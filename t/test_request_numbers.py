"""A number of thousands of digits in a request, to each method of
epilog-gate.so and dws.so on one real instance: Python reads integers
of at most some thousands of digits (``sys.get_int_max_str_digits``),
and its own error text, which advises a Python call, used to be the
answer.  Such a request is refused as a malformed payload (EPROTO)
naming the problem, and changes nothing."""

import errno

import pytest
from flux.core.inner import raw
from flux.future import Future
from jobs import submit

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.paths import plugin_path
from flux_epilog_gate.testing import Instance

METHODS = [
    "epilog-gate.hold",
    "epilog-gate.release",
    "epilog-gate.list",
    "epilog-gate.snapshot",
    "epilog-gate.watch-ack",
    "dws.resource-update",
    "dws.prolog-remove",
    "dws.epilog-remove",
    "dws.list",
]
#: Far past what Python reads as an integer, far short of the size limit.
DIGITS = 20000


@pytest.fixture(scope="module")
def live():
    with Instance(
        cores=2, plugin=plugin_path("dws"), plugins=[(plugin_path(), {})]
    ) as inst:
        h = inst.handle()
        jobid = submit(h, urgency=0)
        EpilogGate(h).hold(jobid, "keep")
        yield inst, h


def send_raw(h, topic, text):
    """``text`` sent as the raw payload of ``topic``; the future."""
    data = text.encode() + b"\0"
    return Future(raw.flux_rpc_raw(h.handle, topic.encode(), data, len(data), 0, 0))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("key", ["id", "status", "count"])
def test_a_number_of_too_many_digits_is_a_malformed_payload(live, method, key):
    inst, h = live
    before = EpilogGate(h).list()
    future = send_raw(h, f"job-manager.{method}", f'{{"{key}": 1{"0" * DIGITS}}}')
    with pytest.raises(OSError) as info:
        future.get()
    assert info.value.errno == errno.EPROTO
    assert "a number has too many digits" in info.value.strerror
    assert "sys." not in info.value.strerror
    assert EpilogGate(h).list() == before
