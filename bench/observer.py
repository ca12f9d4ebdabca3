"""The /proc observer: CPU time per thread and memory of an instance's
broker, the sizes of its caches, and the benchmark's own CPU time."""

import json
import os
import shutil
import subprocess
import time


class Broker:
    """CPU time and memory of an instance's broker (rank 0)."""

    def __init__(self, handle):
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
        free memory back (malloc_trim, through gdb).  False if that cannot
        be done here (no gdb, ptrace not allowed, or ``seconds`` is 0)."""
        gdb = shutil.which("gdb")
        if not seconds or not gdb:
            return False
        time.sleep(seconds)
        done = subprocess.run(
            [gdb, "-p", str(self.pid), "-batch", "-ex", "call (int)malloc_trim(0)"],
            capture_output=True,
            text=True,
        )
        return done.returncode == 0 and "$1 = " in done.stdout

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
