"""Watchers that do not read, while thousands of holds become active.

Shared by the tests of the watch backlog bound and by a measurement run
(``python t/watchload.py``, which prints the numbers as JSON): a few jobs
get many holds each, ``stopped`` watchers are started and stopped with
SIGSTOP, one watcher keeps reading, and cancelling the jobs activates
every hold at once.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import flux
from jobs import query, submit_many

from flux_epilog_gate import EpilogGate

#: A watcher process: prints "ready" once its stream is open, then one
#: line per activation read ("got N"), and the error that ended it.
WATCHER = """
import sys, flux
from flux_epilog_gate import EpilogGate
print("ready", flush=True)
count = 0
try:
    for hold in EpilogGate(flux.Flux()).watch(reconnect=0):
        count += 1
except OSError as exc:
    print(f"ended {count} errno={exc.errno} {exc.strerror}", flush=True)
    sys.exit(1)
"""


def broker_rss_kib(instance):
    """Resident memory of the instance's broker, from /proc."""
    pid = instance.flux("getattr", "broker.pid").stdout.strip()
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def watchers(instance):
    return query(instance)["counters"]["watchers"]


def wait_watchers(instance, count, timeout=60.0):
    deadline = time.time() + timeout
    while watchers(instance) != count:
        assert time.time() < deadline, f"watchers: {watchers(instance)} != {count}"
        time.sleep(0.2)


def start_watcher(instance):
    proc = subprocess.Popen(
        [sys.executable, "-c", WATCHER],
        env=instance.env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    return proc


def held_jobs(handle, jobs, holds):
    """``jobs`` jobs that cannot start, each with ``holds`` pending holds
    (descriptions ``load``, ``load-1``, ...), all requests pipelined."""
    gate = EpilogGate(handle)
    ids = submit_many(handle, jobs, urgency=0)
    futures = [
        gate.hold_async(jobid, "load" if n == 0 else f"load-{n}")
        for jobid in ids
        for n in range(holds)
    ]
    for result in gate.wait_all(futures):
        assert not isinstance(result, OSError), result
    return ids


class Reader:
    """A watcher that reads every activation (through the client's
    ``watch``, in a thread of this process, on a handle of its own)."""

    def __init__(self, instance, descriptions):
        self.got = 0
        self.error = None
        self.thread = threading.Thread(
            target=self._read, args=(instance.handle(), descriptions), daemon=True
        )
        self.thread.start()

    def _read(self, handle, descriptions):
        try:
            for _ in EpilogGate(handle).watch(descriptions, reconnect=0):
                self.got += 1
        except OSError as exc:
            self.error = exc

    def wait(self, count, timeout):
        """Wait until ``count`` activations came; return how many did."""
        deadline = time.monotonic() + timeout
        while self.got < count and self.error is None:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        return self.got


def run(instance, stopped=50, jobs=25, holds=200, settle=3.0, paced=None):
    """The scenario on ``instance`` (loaded with max-holds >= ``holds``);
    return its numbers and the stopped watcher processes (still stopped:
    the caller ends them).  ``paced``: cancel one job at a time, and once
    the reader got its activations call ``paced(activations so far)`` (to
    wait for other readers too): readers are then never behind by more
    than one job's holds, whatever the machine's load."""
    handle = instance.handle()
    descriptions = ["load"] + [f"load-{n}" for n in range(1, holds)]
    before = watchers(instance)
    ids = held_jobs(handle, jobs, holds)
    procs = [start_watcher(instance) for _ in range(stopped)]
    reader = Reader(instance, descriptions)
    wait_watchers(instance, before + stopped + 1)
    for proc in procs:
        proc.send_signal(signal.SIGSTOP)
    time.sleep(settle)
    rss0 = broker_rss_kib(instance)
    t0 = time.monotonic()
    total = jobs * holds
    for n, jobid in enumerate(ids, 1):
        flux.job.cancel(handle, jobid)
        if paced:
            reader.wait(n * holds, timeout=300)
            paced(n * holds)
    got = reader.wait(total, timeout=600)
    elapsed = time.monotonic() - t0
    time.sleep(settle)
    rss1 = broker_rss_kib(instance)
    return (
        {
            "stopped_watchers": stopped,
            "activations": total,
            "reader_got": got,
            "activation_s": round(elapsed, 2),
            "rss_before_kib": rss0,
            "rss_after_kib": rss1,
            "rss_growth_mib": round((rss1 - rss0) / 1024, 1),
            "watchers_left": watchers(instance),
        },
        procs,
        ids,
    )


def end(procs, signum=signal.SIGKILL):
    for proc in procs:
        proc.send_signal(signum)
        if signum != signal.SIGKILL:
            proc.send_signal(signal.SIGCONT)


def main():
    from flux_epilog_gate import plugin_path
    from flux_epilog_gate.testing import Instance

    conf = {"max-holds": 200}
    for arg in sys.argv[1:]:
        key, _, value = arg.partition("=")
        conf[key] = int(value)
    with Instance(cores=64, plugin=plugin_path(), plugin_conf=conf) as inst:
        numbers, procs, _ = run(inst)
        end(procs)
        for proc in procs:
            proc.wait()
        time.sleep(3)
        numbers["rss_after_kill_kib"] = broker_rss_kib(inst)
        print(json.dumps(numbers, indent=1))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
