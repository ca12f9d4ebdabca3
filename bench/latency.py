"""The release -> clean experiment: the time from a release to its
job's clean, one release at a time, with many other holds active."""

import time

from client import Client
from common import log, percentile, spec_for
from observer import Broker


def latency_run(plugins, args, plugin_kind):
    """Release -> clean latency, one release at a time, with at least
    ``outstanding`` other holds active."""
    outstanding, samples = args.outstanding, args.samples
    log(f"latency {plugin_kind}: starting instance")
    with plugins.instance(plugin_kind, args.cores) as inst:
        h = inst.handle()
        client = Client(h, plugins.service(plugin_kind))
        spec = spec_for("exception")
        client.warm_up(args.warmup, spec)
        ids = client.hold_active(outstanding + samples, spec)
        Broker(h).quiesce()
        log(f"latency {plugin_kind}: {len(ids)} holds active, sampling")
        latencies = []
        for jobid in ids[:samples]:
            t0 = time.monotonic()
            client.release(jobid)
            client.run_until(lambda j=jobid: j in client.cleaned, what="clean")
            latencies.append(client.cleaned[jobid] - t0)
            client.drain_responses()
        log(f"latency {plugin_kind}: done")
        # Let the other jobs go, so that the instance shuts down at once.
        rest = ids[samples:]
        for jobid in rest:
            client.release(jobid)
        client.run_until(lambda: all(j in client.cleaned for j in rest))
        client.drain_responses()
    ms = [x * 1e3 for x in latencies]
    return {
        "outstanding": outstanding,
        "samples": samples,
        "p50_ms": percentile(ms, 50),
        "p99_ms": percentile(ms, 99),
        "max_ms": max(ms),
    }
