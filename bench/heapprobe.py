"""heap-probe.so: a plugin of the jobtap runtime that reads the heap of
the broker it is loaded into (bench/heap.py), for bench/observer.py.

``job-manager.heap-probe.read`` answers ``{"bytes": N}``, the bytes
allocated; ``job-manager.heap-probe.trim`` has glibc hand free memory
back first.  Built by bench/common.py with the runtime's build helper."""

import heap

from flux_epilog_gate.jobtap.plugin import Plugin, plugin_topic, request


class HeapProbe(Plugin):
    @plugin_topic("conf.update")
    def configure(self, args):
        """Nothing to configure: the services are registered after it."""

    @request("read")
    def read(self, request):
        request.respond({"bytes": heap.in_use()})

    @request("trim")
    def trim(self, request):
        heap.trim()
        request.respond({})
