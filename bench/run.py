#!/usr/bin/env python3
"""Benchmark of epilog-gate: what the gate costs the job-manager.

    python bench/run.py            # full run (several minutes)
    python bench/run.py --quick    # CI smoke test: checks the harness works

See bench/README.md for what is measured and how to read the table, and
for which module holds which part: this file only runs the experiments
in turn and writes the results.
"""

import datetime
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
from common import (  # noqa: E402
    Plugins,
    flux_version,
    host,
    loadavg,
    progress,
    result_path,
    write_results,
)
from latency import latency_run  # noqa: E402
from options import CONFIGS, WORKLOADS, parse_args  # noqa: E402, F401
from report import report, targets  # noqa: E402
from scale import hold_scale_run, python_state_per_hold  # noqa: E402
from throughput import (  # noqa: E402, F401
    Throughput,
    combine_slots,
    orders,
    slot_sequence,
    summarize,
)

#: The holds-at-scale runs: name -> (plugin kind, plugin options).
SCALE = {
    "gate": ("gate", {}),
    "native": ("native", {}),
    "native-durable": ("native", {"durable": 1}),
}


def run(args):
    """Every experiment ``args`` does not skip; the results, as a dict."""
    common.VERBOSE = common.VERBOSE or args.verbose
    results = {
        "mode": "quick" if args.quick else "full",
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "host": dict(host(), loadavg_start=loadavg()),
        "flux": "flux-core " + flux_version(),
        "params": {k: v for k, v in vars(args).items() if k != "skip"},
    }
    with tempfile.TemporaryDirectory(prefix="epilog-gate-bench-") as tmpdir:
        plugins = Plugins(tmpdir)
        results["plugin"] = plugins.paths["gate"]
        if "throughput" not in args.skip:
            results["throughput"] = run_throughput(plugins, args)
        if "latency" not in args.skip:
            progress("release latency: gate, native")
            results["latency"] = {
                k: latency_run(plugins, args, k) for k in ("gate", "native")
            }
        if "scale" not in args.skip:
            results["scale"] = run_scale(plugins, args)
    results["host"]["loadavg_end"] = loadavg()
    results["targets"] = targets(results)
    return results


def run_throughput(plugins, args):
    """Every repetition of the throughput experiment, and its summary."""
    experiment = Throughput(plugins, args)
    runs = []
    for rep, order in enumerate(orders(args.configs, args.reps)):
        progress(f"repetition {rep + 1}/{args.reps}")
        runs.append(experiment.rep(order))
    figures, ratios = summarize(runs, args.configs)
    return {"runs": runs, "figures": figures, "ratios": ratios}


def run_scale(plugins, args):
    """Holds at scale on each plugin, and the gate's Python state."""
    scale = {}
    for name, (kind, options) in SCALE.items():
        progress(f"{args.list_holds} holds: {name}")
        scale[name] = hold_scale_run(plugins, args, kind, options)
    try:
        scale["python_state_bytes_per_hold"] = python_state_per_hold(args.list_holds)
    except Exception as exc:  # noqa: BLE001 - a model figure only
        scale["python_state_bytes_per_hold"] = None
        scale["python_state_error"] = repr(exc)
    return scale


def main(argv=None):
    args = parse_args(argv)
    results = run(args)
    text = report(results)
    print(text, flush=True)
    path = args.output or result_path(results["mode"])
    results["report"] = text.splitlines()
    write_results(path, results)
    print(f"\nresults: {path}", flush=True)
    missed = [t for t in results["targets"] if not t["met"]]
    return 1 if args.strict and missed and not args.quick else 0


if __name__ == "__main__":
    sys.exit(main())
