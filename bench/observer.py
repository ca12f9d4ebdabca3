"""The /proc observer: CPU time per thread and memory of an instance's
broker, the sizes of its caches, and the benchmark's own CPU time."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
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

    def heap_bytes(self):
        """Bytes the broker holds allocated: glibc malloc's in all its
        arenas (``malloc_info``) plus the blocks of Python's own
        allocator (its arenas are mapped apart), read through gdb; None
        if that cannot be done here.  Unlike RSS it does not move when
        freed memory is reused or kept, so what a change adds to it is
        what the change allocated."""
        gdb = shutil.which("gdb")
        if not gdb or sys.version_info >= (3, 12):
            # From 3.12 the allocator's state is the interpreter's: read
            # from gdb, outside any Python thread, it crashes the process.
            # (The broker's Python is the benchmark's own.)
            return None
        with tempfile.TemporaryDirectory(prefix="epilog-gate-heap-") as tmp:
            malloc, python = (os.path.join(tmp, n) for n in ("malloc", "python"))
            script = [
                f'call (void *)fopen("{malloc}", "w")',
                "call (int)malloc_info(0, $1)",
                "call (int)fclose($1)",
                # Fails (harmlessly) in a broker without Python.
                f'call (void *)fopen("{python}", "w")',
                "call (int)_PyObject_DebugMallocStats($4)",
                "call (int)fclose($4)",
            ]
            args = [gdb, "-p", str(self.pid), "-batch", "-nx"]
            for command in script:
                args += ["-ex", command]
            subprocess.run(args, capture_output=True, text=True)
            try:
                with open(malloc) as f:
                    total = malloc_in_use(f.read())
            except (OSError, ValueError, KeyError):
                return None
            try:
                with open(python) as f:
                    total += pymalloc_in_use(f.read())
            except OSError:
                pass
            return total

    def rss_kb(self):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS")


def malloc_in_use(xml):
    """In-use bytes of glibc's ``malloc_info`` text: what its arenas got
    from the system, less their free chunks, plus the chunks it mapped
    apart."""
    tail = xml[xml.rindex("</heap>") :]
    sizes = dict(re.findall(r'<(?:total|system) type="(\w+)"[^>]* size="(\d+)"', tail))
    free = int(sizes["fast"]) + int(sizes["rest"])
    return int(sizes["current"]) - free + int(sizes["mmap"])


def pymalloc_in_use(text):
    """Bytes in allocated blocks of ``_PyObject_DebugMallocStats``'s text
    (0 if it wrote none)."""
    found = re.search(r"# bytes in allocated blocks\s*=\s*([\d,]+)", text)
    return int(found.group(1).replace(",", "")) if found else 0


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
