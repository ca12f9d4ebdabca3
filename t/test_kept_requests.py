"""Under a real instance, a request the gate refuses gives back the
reference the plugin took on it (see doc/design.md, "C and Python"): the
broker's heap, read by the benchmark's heap probe, does not grow with
refused requests."""

import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench")
sys.path.insert(0, BENCH)
import common  # noqa: E402
import observer  # noqa: E402

from flux_epilog_gate import plugin_path  # noqa: E402
from flux_epilog_gate.testing import Instance  # noqa: E402

REFUSED = 5000
#: An id no job has: each hold is refused (ENOENT) after the plugin took
#: its reference.
UNKNOWN = 123456789


@pytest.fixture(scope="module")
def probe_so(tmp_path_factory):
    return common.build_heap_probe(str(tmp_path_factory.mktemp("heap-probe")))


def refuse(h, method, count):
    payload = {"id": UNKNOWN, "description": "bb"}
    futures = [h.rpc(f"{common.GATE_SERVICE}.{method}", payload) for _ in range(count)]
    for future in futures:
        with pytest.raises(OSError):
            future.get()


@pytest.mark.parametrize("method", ["hold", "release"])
def test_refused_requests_leave_nothing_allocated_in_the_broker(probe_so, method):
    with Instance(cores=2, plugin=plugin_path()) as inst:
        h = inst.handle()
        broker = observer.Broker(h, heap_probe=probe_so)
        refuse(h, method, REFUSED)  # the broker's own buffers grow once
        broker.settle(0.01)
        before = broker.heap_bytes()
        refuse(h, method, REFUSED)
        broker.settle(0.01)
        per_request = (broker.heap_bytes() - before) / REFUSED
        # A request message kept would be a few hundred bytes each.
        assert per_request < 50
