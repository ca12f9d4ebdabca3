"""The /proc observer: CPU time per thread and memory of an instance's
broker, the sizes of its caches, and the benchmark's own CPU time."""

import json
import os
import time

#: The service of bench/heapprobe.py.
HEAP_PROBE_SERVICE = "job-manager.heap-probe"


class Broker:
    """CPU time and memory of an instance's broker (rank 0).  With
    ``heap_probe``, the path of heap-probe.so (see common.Plugins), it is
    loaded into the job-manager to read the broker's heap."""

    def __init__(self, handle, heap_probe=None):
        #: The handle the heap probe answers on, once it is loaded.
        self._probe = None
        if heap_probe is not None:
            handle.rpc("job-manager.jobtap", {"load": heap_probe}).get()
            self._probe = handle
        self.pid = int(handle.attr_get("broker.pid"))
        self.tids = {}
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            with open(f"/proc/{self.pid}/task/{tid}/comm") as f:
                self.tids.setdefault(f.read().strip(), []).append(tid)

    def _cpu_ns(self, tid):
        try:
            with open(f"/proc/{self.pid}/task/{tid}/schedstat") as f:
                return int(f.read().split()[0])
        except OSError:
            return 0

    def cpu(self):
        """CPU time (ns) of the job-manager thread, and of the whole
        broker process."""
        jm = sum(self._cpu_ns(t) for t in self.tids.get("job-manager", []))
        total = 0
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            total += self._cpu_ns(tid)
        return jm, total

    def quiesce(self, interval=0.1, idle_ns=3e6, limit=30.0):
        """Wait until the broker is idle: less than ``idle_ns`` of CPU in
        ``interval`` seconds (or ``limit`` seconds have passed).  After a
        batch the KVS and the content store go on writing for a while."""
        deadline = time.monotonic() + limit
        last = self.cpu()[1]
        while time.monotonic() < deadline:
            time.sleep(interval)
            now = self.cpu()[1]
            if now - last < idle_ns:
                return
            last = now

    def settle(self, seconds):
        """Let the KVS expire its cache entries (10 s), then have glibc hand
        free memory back (malloc_trim, by the heap probe).  False if that
        cannot be done here (no probe loaded, or ``seconds`` is 0)."""
        if not seconds or self._probe is None:
            return False
        time.sleep(seconds)
        self._probe.rpc(f"{HEAP_PROBE_SERVICE}.trim", {}).get()
        return True

    def threads(self):
        """CPU time (ns) per thread name, all threads of the broker."""
        out = {}
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            try:
                with open(f"/proc/{self.pid}/task/{tid}/comm") as f:
                    name = f.read().strip()
            except OSError:
                continue
            out[name] = out.get(name, 0) + self._cpu_ns(tid)
        return out

    def heap_bytes(self):
        """Bytes the broker holds allocated (bench/heap.py), read by the
        heap probe loaded into its job-manager; None without one."""
        if self._probe is None:
            return None
        return self._probe.rpc(f"{HEAP_PROBE_SERVICE}.read", {}).get()["bytes"]

    def rss_kb(self):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS")


def caches(h):
    """Bytes held by the content cache and by the KVS cache of the broker."""
    content = h.rpc("content.stats-get", {}).get()
    kvs = h.rpc("kvs.stats-get", {}).get()
    return {
        "content": content["size"],
        "kvs": kvs["cache"]["obj size total (MiB)"] * 1048576,
    }


def self_cpu_ns():
    return time.process_time_ns()


def gate_counters(inst):
    """epilog-gate's counters, from ``flux jobtap query``."""
    out = inst.flux("jobtap", "query", "epilog-gate.so").stdout
    return json.loads(out)["counters"]
