"""Holds at scale: broker memory per held job, the time of a list of
every hold, and the gate's own Python state per hold (without a broker,
on the unit tests' fake port)."""

import json
import os
import statistics
import sys
import time

from client import Client
from common import DESCRIPTION, GATE_SERVICE, HERE, log, spec_for
from observer import Broker, caches


def hold_scale_run(plugins, args, plugin_kind, options=None):
    """Broker memory growth per held job, and (epilog-gate only) the
    time of a list of every hold."""
    count = args.list_holds
    log(f"scale {plugin_kind}: starting instance")
    with plugins.instance(plugin_kind, args.cores, options) as inst:
        h = inst.handle()
        client = Client(h, plugins.service(plugin_kind))
        broker = Broker(h)
        spec = spec_for("exception")
        client.warm_up(args.warmup, spec)
        ids = client.submit_held(count, spec)
        log(f"scale {plugin_kind}: {count} jobs submitted")
        broker.quiesce(limit=30)
        trimmed = broker.settle(args.settle)
        rss0, caches0 = broker.rss_kb(), caches(h)
        for jobid in ids:
            client.hold(jobid)
        client.drain_responses(timeout=300)
        broker.quiesce(limit=30)
        rss1, caches1 = broker.rss_kb(), caches(h)
        if trimmed:
            broker.settle(args.settle)
            rss2 = broker.rss_kb()
        out = {
            "holds": count,
            "rss_before_kb": rss0,
            "rss_after_kb": rss1,
            "bytes_per_hold": (rss1 - rss0) * 1024 / count,
            # after the KVS cache expired its entries and malloc_trim
            "retained_bytes_per_hold": (
                (rss2 - rss0) * 1024 / count if trimmed else None
            ),
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
    port.synced.clear()
    port.events.clear()
    port.logs.clear()
    port.tracked.clear()
    port.track_calls.clear()
