"""Holds at scale: broker memory per held job, the time of a list of
every hold, and the gate's own Python state per hold (without a broker,
on the unit tests' fake port)."""

import json
import os
import statistics
import subprocess
import sys
import time

from client import Client
from common import DESCRIPTION, GATE_SERVICE, HERE, log, spec_for
from observer import Broker, caches

from flux_epilog_gate.gate.holdlog import KEY, RELEASE_GRACE, SEGMENTS, segment_key


def hold_scale_run(plugins, args, plugin_kind, options=None):
    """Broker memory growth per held job, and (epilog-gate only) the
    time of a list of every hold."""
    count = args.list_holds
    log(f"scale {plugin_kind}: starting instance")
    with plugins.instance(plugin_kind, args.cores, options) as inst:
        h = inst.handle()
        client = Client(h, plugins.service(plugin_kind))
        broker = Broker(h, plugins.heap_probe)
        spec = spec_for("exception")
        client.warm_up(args.warmup, spec)
        ids = client.submit_held(count, spec)
        log(f"scale {plugin_kind}: {count} jobs submitted")
        broker.quiesce(limit=30)
        trimmed = broker.settle(args.settle)
        rss0, caches0, heap0 = broker.rss_kb(), caches(h), broker.heap_bytes()
        hold_windowed(client, ids)
        broker.quiesce(limit=30)
        rss1, caches1 = broker.rss_kb(), caches(h)
        if trimmed:
            broker.settle(args.settle)
            rss2 = broker.rss_kb()
        heap2 = broker.heap_bytes()
        out = {
            "holds": count,
            "rss_before_kb": rss0,
            "rss_after_kb": rss1,
            "bytes_per_hold": (rss1 - rss0) * 1024 / count,
            # after the KVS cache expired its entries and malloc_trim
            "retained_bytes_per_hold": (
                (rss2 - rss0) * 1024 / count if trimmed else None
            ),
            # allocated and kept (malloc and Python's allocator), per hold
            "heap_bytes_per_hold": per_hold(heap0, heap2, count),
            # what the content and KVS caches hold more, per hold
            "cache_bytes_per_hold": {
                k: (caches1[k] - caches0[k]) / count for k in caches0
            },
        }
        if plugin_kind == "gate":
            out.update(list_timing(h, args.list_repeat, count))
        log(f"scale {plugin_kind}: done")
    return out


def list_timing(h, repeat, count):
    """Time of a gate's ``list`` of its ``count`` holds, ``repeat`` times:
    answered, and decoded by the client too."""
    times, answered = [], []
    size = 0
    for _ in range(repeat):
        t0 = time.monotonic()
        text = h.rpc(f"{GATE_SERVICE}.list", {}).get_str()
        t1 = time.monotonic()
        holds = json.loads(text)["holds"]
        times.append(time.monotonic() - t0)
        answered.append(t1 - t0)
        size = len(text)
    if len(holds) != count:
        raise RuntimeError(f"list answered {len(holds)} of {count} holds")
    return dict(
        list_ms_median=statistics.median(times) * 1e3,
        list_ms_min=min(times) * 1e3,
        list_ms_answer_median=statistics.median(answered) * 1e3,
        list_bytes=size,
    )


# Python state of the gate per hold, without the job-manager


def python_state_per_hold(count):
    """Bytes of Python objects the gate keeps per hold (tracemalloc, the
    gate driven through the unit tests' fake port): the plugin's own share
    of the memory, which broker RSS cannot tell apart from the KVS's."""
    import tracemalloc

    from flux_epilog_gate.gate import Gate

    port = fake_port()
    for jobid in range(1, count + 2):
        port.add_job(jobid)
    gate = Gate(port)
    gate.hold(1, DESCRIPTION)  # first use: lazily built state
    forget_records(port)
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for jobid in range(2, count + 2):
        port.clock += 0.001  # a clock that moves (a new float), as the broker's
        gate.hold(jobid, DESCRIPTION)
    # Every record committed at once: the steady state, nothing queued.
    # What the fake keeps of them a real KVS would have taken away.
    forget_records(port)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    # The fake's own bookkeeping (and its free lists) is not the gate's.
    mine = [tracemalloc.Filter(False, sys.modules[type(port).__module__].__file__)]
    grown = after.filter_traces(mine).compare_to(before.filter_traces(mine), "filename")
    return sum(s.size_diff for s in grown) / count


def fake_port():
    """A FakePort (t/fakeport.py), the one the unit tests use."""
    tests = os.path.join(os.path.dirname(HERE), "t")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from fakeport import FakePort

    return FakePort()


def forget_records(port):
    """Drop what the fake port recorded of the gate's posts and commits,
    and the timers it keeps after they fired or were stopped."""
    port.timers[:] = port.armed_timers()
    port.kvs.clear()
    port.commits.clear()
    port.txns.clear()  # the parts of snapshots (each a copy of every line)
    port.synced.clear()
    port.events.clear()
    port.logs.clear()
    port.tracked.clear()
    port.track_calls.clear()


# How the costs grow with the number of holds (python bench/scale.py)

#: Pending holds the growth run measures at, in turn, on one instance.
SIZES = (1000, 3000, 10000, 30000, 100000)

#: Holds in flight while the run registers holds (max-pending is 10,000).
HOLD_WINDOW = 1000

#: Pairs of a hold and its release, each pair waiting for its answers,
#: that the snapshot probe sends, half before and half after its
#: snapshot request: each is its own hold-log commit, so the snapshot
#: (in parts, past 128 KiB) is written amid ordinary traffic.
PROBE_PAIRS = 150


def growth_run(plugins, sizes, cores, settle, repeat):
    """One instance of epilog-gate; pending holds grow to each of
    ``sizes`` in turn.  At each size: the broker memory the new holds
    retained, per hold; the time of ``list`` in the plugin (round trip)
    and in the command line; and the longest gap between two answers of
    the job-manager to a stream of pings while the hold log is
    snapshotted."""
    rows = []
    with plugins.instance("gate", cores) as inst:
        h = inst.handle()
        client = Client(h, plugins.service("gate"))
        broker = Broker(h, plugins.heap_probe)
        spec = spec_for("exception")
        client.warm_up(20, spec)
        held = 0
        every = []
        for size in sizes:
            log(f"growth: {size} holds")
            ids = client.submit_held(size - held, spec)
            every.extend(ids)
            probe = client.submit_held(PROBE_PAIRS, spec)
            broker.quiesce(limit=30)
            trimmed = broker.settle(settle)
            rss0, heap0 = broker.rss_kb(), broker.heap_bytes()
            hold_windowed(client, ids)
            broker.quiesce(limit=30)
            if trimmed:
                broker.settle(settle)
            rss1, heap1 = broker.rss_kb(), broker.heap_bytes()
            held = size
            row = {
                "holds": size,
                "retained_bytes_per_hold": (rss1 - rss0) * 1024 / len(ids),
                "heap_bytes_per_hold": per_hold(heap0, heap1, len(ids)),
                "trimmed": trimmed,
            }
            row.update(list_timing(h, repeat, size))
            row.update(cli_timing(inst, repeat))
            row["snapshot_stall_ms"], row["ping_gap_ms_without"] = snapshot_stall(
                inst, client, probe
            )
            rows.append(row)
            print_growth_row(row, header=len(rows) == 1)
        drained = drain_run(inst, client, every)
    return rows, drained


def drain_run(inst, client, ids):
    """Fill to N, drain to 0: every hold of ``ids`` released,
    :data:`HOLD_WINDOW` requests in flight; the bytes of the hold log (its
    key and segments) before and once it is still after."""
    before = log_bytes(inst)
    log(f"drain: releasing {len(ids)} holds")
    for jobid in ids:
        client.release(jobid)
        if client.pending_responses >= HOLD_WINDOW:
            client.run_until(
                lambda: client.pending_responses < HOLD_WINDOW // 2,
                what="release answers",
            )
    client.drain_responses(timeout=300)
    after, last = log_bytes(inst), None
    # Until two readings agree: a snapshot in parts may still be on its
    # way, and the release entries it keeps expire after RELEASE_GRACE.
    while after != last:
        time.sleep(RELEASE_GRACE + 0.5)
        after, last = log_bytes(inst), after
    out = {"holds": len(ids), "log_bytes_full": before, "log_bytes_drained": after}
    print(
        f"fill to {len(ids)}, drain to 0: hold log (key and segments) "
        f"{before / 1024:.0f} KiB full, {after / 1024:.0f} KiB drained",
        flush=True,
    )
    return out


def log_bytes(inst):
    """Bytes of the hold log in the KVS: its key and its segments."""
    total = 0
    done = inst.flux("kvs", "ls", "-1", SEGMENTS, check=False)
    if done.returncode == 0:
        for name in done.stdout.split():
            total += len(
                inst.flux("kvs", "get", segment_key(int(name.rstrip(".")))).stdout
            )
    done = inst.flux("kvs", "get", KEY, check=False)
    if done.returncode == 0:
        total += len(done.stdout)
    return total


def per_hold(before, after, count):
    """Bytes per hold between two readings (None without them)."""
    if before is None or after is None:
        return None
    return (after - before) / count


def hold_windowed(client, ids, window=HOLD_WINDOW):
    """Hold every job of ``ids``, ``window`` requests in flight."""
    for jobid in ids:
        client.hold(jobid)
        if client.pending_responses >= window:
            client.run_until(
                lambda: client.pending_responses < window // 2, what="hold answers"
            )
    client.drain_responses(timeout=300)


def cli_timing(inst, repeat):
    """Wall time of ``flux-epilog-gate list`` (table to /dev/null) and of
    ``list --json``: the whole command, interpreter start included."""
    command = os.path.join(os.path.dirname(sys.executable), "flux-epilog-gate")
    out = {}
    for name, extra in (("cli_list_ms", []), ("cli_list_json_ms", ["--json"])):
        times = []
        for _ in range(repeat):
            t0 = time.monotonic()
            subprocess.run(
                [command, "list", *extra],
                env=inst.env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
            times.append(time.monotonic() - t0)
        out[name] = statistics.median(times) * 1e3
    return out


def snapshot_stall(inst, client, probe):
    """The longest gap (ms) between two answers of the job-manager to a
    stream of pings (one in flight at a time, from a process of its own)
    while ``probe`` jobs are each held and released, each request
    waiting for its answer, and the hold log is snapshotted (the
    ``snapshot`` request, between the two halves of the probe: past its
    first snapshot of 128 KiB the gate makes the next one by bytes, not
    within a few hundred commits); and the longest gap in as long a
    stretch without them."""
    quiet = ping_gaps(inst, lambda: time.sleep(1.0))

    def pairs(jobids):
        for jobid in jobids:
            client.hold(jobid)
            client.drain_responses()
            client.release(jobid)
            client.drain_responses()

    def drive():
        half = len(probe) // 2
        pairs(probe[:half])
        client.snapshot()
        client.drain_responses(timeout=300)
        pairs(probe[half:])

    busy = ping_gaps(inst, drive)
    return max(busy), max(quiet)


def ping_gaps(inst, action):
    """Gaps (ms) between the job-manager's answers to pings sent back to
    back by a child process while ``action()`` runs here."""
    code = (
        "import sys, time, flux\n"
        "h = flux.Flux()\n"
        "last = time.monotonic(); gaps = []\n"
        "sys.stdout.write('ready\\n'); sys.stdout.flush()\n"
        "while not sys.stdin.closed:\n"
        "    h.rpc('job-manager.ping', {}).get()\n"
        "    now = time.monotonic(); gaps.append(now - last); last = now\n"
        "    import select\n"
        "    if select.select([sys.stdin], [], [], 0)[0]:\n"
        "        break\n"
        "print(' '.join(f'{g * 1e3:.3f}' for g in gaps[1:]))\n"
    )
    pinger = subprocess.Popen(
        [sys.executable, "-c", code],
        env=inst.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    pinger.stdout.readline()
    try:
        action()
    finally:
        out, _ = pinger.communicate("stop\n", timeout=60)
    return [float(g) for g in out.split()] or [0.0]


def print_growth_row(row, header=False):
    if header:
        print(
            f"{'holds':>8} {'list ms':>8} {'CLI ms':>8} {'CLI json':>9} "
            f"{'answer MB':>9} {'B/hold':>7} {'heap B':>7} {'stall ms':>9} "
            f"{'(quiet)':>8}",
            flush=True,
        )
    print(
        f"{row['holds']:>8} {row['list_ms_answer_median']:>8.0f} "
        f"{row['cli_list_ms']:>8.0f} {row['cli_list_json_ms']:>9.0f} "
        f"{row['list_bytes'] / 1e6:>9.1f} {row['retained_bytes_per_hold']:>7.0f} "
        f"{_or_na(row['heap_bytes_per_hold']):>7} "
        f"{row['snapshot_stall_ms']:>9.1f} {row['ping_gap_ms_without']:>8.1f}",
        flush=True,
    )


def _or_na(value):
    return "n/a" if value is None else f"{value:.0f}"


def main():
    import argparse
    import tempfile

    from common import Plugins, result_path, write_results

    parser = argparse.ArgumentParser(
        description="How list, memory and snapshots grow with pending holds."
    )
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    parser.add_argument("--cores", type=int, default=64)
    parser.add_argument("--settle", type=float, default=12.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output", help="JSON results file")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    with tempfile.TemporaryDirectory(prefix="epilog-gate-scale-") as tmp:
        rows, drained = growth_run(
            Plugins(tmp), sizes, args.cores, args.settle, args.repeat
        )
    output = args.output or result_path("scale")
    write_results(output, {"sizes": rows, "drain": drained}, indent=2)
    print(f"results: {output}")


if __name__ == "__main__":
    main()
