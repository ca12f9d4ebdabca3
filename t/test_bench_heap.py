"""The benchmark's heap probe (bench/heapprobe.py) under a real instance:
loaded beside epilog-gate.so, it reads the broker's heap from inside,
and the heap it reads grows with what the broker keeps."""

import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench")
sys.path.insert(0, BENCH)
import common  # noqa: E402
import observer  # noqa: E402
from client import Client  # noqa: E402

from flux_epilog_gate import plugin_path  # noqa: E402
from flux_epilog_gate.testing import Instance  # noqa: E402

COUNT = 2000


@pytest.fixture(scope="module")
def probe_so(tmp_path_factory):
    return common.build_heap_probe(str(tmp_path_factory.mktemp("heap-probe")))


def test_the_probe_reads_the_heap_of_a_broker_beside_the_gate(probe_so):
    with Instance(cores=4, plugin=plugin_path()) as inst:
        h = inst.handle()
        broker = observer.Broker(h, heap_probe=probe_so)
        client = Client(h, common.GATE_SERVICE)
        ids = client.submit_held(COUNT, common.spec_for("exception"))
        broker.quiesce(limit=10)
        assert broker.settle(0.01)
        before = broker.heap_bytes()
        for jobid in ids:
            h.rpc(
                f"{common.GATE_SERVICE}.hold", {"id": jobid, "description": "bb"}
            ).get()
        per_hold = (broker.heap_bytes() - before) / COUNT
        # A pending hold keeps some hundreds of bytes (bench/README.md):
        # more than nothing, far less than the 100 KB the test allows.
        assert 100 < per_hold < 100_000


def test_without_a_probe_there_is_no_heap_figure():
    with Instance(cores=2) as inst:
        broker = observer.Broker(inst.handle())
        assert broker.heap_bytes() is None
        assert broker.settle(0.01) is False
