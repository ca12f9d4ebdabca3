#!/usr/bin/env python3
"""Benchmark of durable acknowledgements: what a synced hold costs.

    python bench/durable.py            # full run (a few minutes)
    python bench/durable.py --quick    # CI smoke test of the harness

A ``hold`` is answered only once its record is checkpointed by a KVS
commit with FLUX_KVS_SYNC, group-committed (see
flux_epilog_gate/gate/holdlog.py).  This measures, on jobs waiting in SCHED,
the hold round trip (p50, p99) and the acknowledged holds per second,
from one pipelining client and from several clients at once, for:

- ``gate``: epilog-gate;
- ``native-synced``: the native C gate (bench/native_gate.c) recording
  each hold the same way (a line appended to a KVS key, synced, group
  commit), the limit for durable holds;
- ``native-snapshots``: the same with epilog-gate's record, lines of its
  size and every 256 appends a snapshot of every live hold (not run
  unless named in ``--configs``: ``native-synced`` replaces the key with
  the batch alone, a lower bound);
- ``native``: the native C gate answering from memory, no record at all
  (what durability costs, both ways);
- ``native-synced+N`` (named in ``--configs`` only): ``native-synced``
  whose job-manager thread works N µs more on each hold request
  (native_gate.c's ``work=N``): what the time per request alone does to
  acknowledged holds/s, everything else the same.

Each client is its own process with its own handle; all start together.
The three instances run side by side, and each repetition measures them
in turn, in a rotated order, so that the machine's load (and its disk,
which every sync waits on) hits them alike.
"""

import argparse
import datetime
import multiprocessing
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import flux  # noqa: E402
from client import hold_pipelined, submit_waiting  # noqa: E402
from common import (  # noqa: E402
    Plugins,
    flux_version,
    host,
    loadavg,
    percentile,
    result_path,
    spec_for,
    write_results,
)
from observer import Broker  # noqa: E402

#: name -> (plugin kind, plugin options).
CONFIGS = {
    "gate": ("gate", {}),
    "native-synced": ("native", {"synced": 1}),
    "native-snapshots": ("native", {"synced": 2}),
    "native": ("native", {}),
}

#: ``native-synced+N``: native-synced, N µs more per hold request.
WORK_PREFIX = "native-synced+"


def config_of(name):
    """``(plugin kind, options)`` of configuration ``name`` (one of
    CONFIGS, or ``native-synced+N``); KeyError if there is none."""
    work = name[len(WORK_PREFIX) :] if name.startswith(WORK_PREFIX) else ""
    if work.isdigit():
        kind, options = CONFIGS["native-synced"]
        return kind, {**options, "work": int(work)}
    return CONFIGS[name]


#: The configurations run unless ``--configs`` names others.
DEFAULT_CONFIGS = ["gate", "native-synced", "native"]

#: Client modes: name -> (clients, requests each keeps in flight).
MODES = {
    "1 client, 64 in flight": (1, 64),
    "4 clients, 16 in flight each": (4, 16),
    "4 clients, 1 in flight each": (4, 1),
}


def client(uri, topic, jobids, window, start, out):
    """Send a hold for each of ``jobids``, ``window`` at a time; put
    ``(latencies, t_first_send, t_last_answer, errors, cpu)`` on ``out``,
    ``cpu`` the seconds of CPU the client spent meanwhile."""
    h = flux.Flux(uri)
    latencies = []

    def answered(future, sent):
        latencies.append(time.perf_counter() - sent)

    # Connected: start when every client is.
    start.wait()
    t0, cpu0 = time.perf_counter(), time.process_time()
    errors = hold_pipelined(h, topic, jobids, window, answered)
    cpu = time.process_time() - cpu0
    out.put((latencies, t0, time.perf_counter(), errors[:3], cpu))


def measure(inst, topic, jobids, clients, window):
    """Holds on ``jobids`` from ``clients`` processes; return figures."""
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(clients + 1)
    out = ctx.Queue()
    shares = [jobids[i::clients] for i in range(clients)]
    procs = [
        ctx.Process(target=client, args=(inst.uri, topic, share, window, start, out))
        for share in shares
    ]
    for proc in procs:
        proc.start()
    start.wait(timeout=120)
    results = [out.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
    latencies = [x for r in results for x in r[0]]
    errors = [e for r in results for e in r[3]]
    if errors:
        raise RuntimeError(f"hold requests failed: {errors}")
    elapsed = max(r[2] for r in results) - min(r[1] for r in results)
    return {
        "holds": len(latencies),
        "holds_per_s": len(latencies) / elapsed,
        # The clients share the broker's cores: what they cost bounds
        # holds/s as much as the broker's threads do.
        "client_us_per_hold": sum(r[4] for r in results) * 1e6 / len(latencies),
        "p50_ms": percentile(latencies, 50) * 1e3,
        "p99_ms": percentile(latencies, 99) * 1e3,
    }


def commits(inst, kind):
    """The synced commits plugin ``kind`` has sent so far in ``inst``."""
    return Plugins.synced_commits(inst.handle(), kind)


class Target:
    """One configuration's instance, and the figures measured on it."""

    def __init__(self, name, plugins, modes):
        self.name = name
        self.kind, options = config_of(name)
        self.topic = f"{plugins.service(self.kind)}.hold"
        self.inst = plugins.instance(self.kind, 64, options)
        self.inst.start()
        self.handle = self.inst.handle()
        self.broker = Broker(self.handle)
        self.synced = bool(options) or self.kind == "gate"
        self.reps = {mode: [] for mode in modes}

    def measure(self, mode, count, brokers=()):
        """Measure ``mode`` on ``count`` new jobs, once this broker and
        ``brokers`` (the other instances on the machine) are idle."""
        clients, window = MODES[mode]
        jobids = submit_waiting(self.handle, count, spec_for("exception"))
        time.sleep(0.5)  # let the submissions' events settle
        for broker in {self.broker, *brokers}:
            broker.quiesce()
        before = Plugins.synced_commits(self.handle, self.kind) if self.synced else None
        jm, broker = self.broker.cpu()
        threads = self.broker.threads()
        row = measure(self.inst, self.topic, jobids, clients, window)
        jm_after, broker_after = self.broker.cpu()
        for name, ns in self.broker.threads().items():
            row[f"us_per_hold {name}"] = (
                (ns - threads.get(name, 0)) / 1e3 / row["holds"]
            )
        row["jm_us_per_hold"] = (jm_after - jm) / 1e3 / row["holds"]
        row["broker_us_per_hold"] = (broker_after - broker) / 1e3 / row["holds"]
        if before is not None:
            sent = Plugins.synced_commits(self.handle, self.kind) - before
            row["holds_per_commit"] = row["holds"] / max(1, sent)
        self.reps[mode].append(row)
        per = row.get("holds_per_commit")
        print(
            f"bench: {self.name:14} {mode:28} rep {len(self.reps[mode])}: "
            f"{row['holds_per_s']:7.0f} holds/s  p50 {row['p50_ms']:6.2f} ms"
            f"  p99 {row['p99_ms']:6.2f} ms"
            f"  job-manager {row['jm_us_per_hold']:5.0f} us/hold"
            f"  broker {row['broker_us_per_hold']:5.0f} us/hold"
            f"  clients {row['client_us_per_hold']:5.0f} us/hold"
            + ("" if per is None else f"  {per:5.1f} holds/sync"),
            file=sys.stderr,
            flush=True,
        )

    def figures(self):
        return {
            mode: {"reps": reps, "median": median_row(reps)}
            for mode, reps in self.reps.items()
        }

    def stop(self):
        self.inst.stop()
        self.inst.cleanup()


def run_all(plugins, args):
    """Every configuration's instance runs throughout; each repetition
    measures every mode on every configuration in turn, the order of
    the configurations rotated from one repetition to the next, so that
    the machine's load hits them alike."""
    targets = []
    try:
        for name in args.configs:
            targets.append(Target(name, plugins, args.modes))
        for rep in range(args.reps):
            shift = rep % len(targets)
            order = targets[shift:] + targets[:shift]
            brokers = [target.broker for target in targets]
            for mode in args.modes:
                for target in order:
                    # The instance measured before may still be writing.
                    target.measure(mode, args.holds, brokers)
        return {target.name: target.figures() for target in targets}
    finally:
        for target in targets:
            target.stop()


def median_row(reps):
    keys = {key: None for r in reps for key in r}
    return {key: statistics.median(r[key] for r in reps if key in r) for key in keys}


def report(results):
    lines = [
        "| clients | configuration | acknowledged holds/s | p50 | p99 |"
        " holds per sync | job-manager µs/hold | broker µs/hold | clients µs/hold |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for mode in results["modes"]:
        for name in results["configs"]:
            row = results["figures"][name][mode]["median"]
            per = row.get("holds_per_commit")
            lines.append(
                f"| {mode} | {name} | {row['holds_per_s']:.0f} "
                f"| {row['p50_ms']:.2f} ms | {row['p99_ms']:.2f} ms "
                f"| {'' if per is None else f'{per:.1f}'} "
                f"| {row['jm_us_per_hold']:.0f} | {row['broker_us_per_hold']:.0f} "
                f"| {row['client_us_per_hold']:.0f} |"
            )
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts")
    parser.add_argument("--holds", type=int, help="holds per measurement")
    parser.add_argument("--reps", type=int, help="repetitions of each measurement")
    parser.add_argument(
        "--configs",
        help=f"comma-separated configurations ({','.join(CONFIGS)}, "
        f"{WORK_PREFIX}N)",
    )
    parser.add_argument(
        "--modes",
        help="comma-separated client mixes, by their number: "
        + ", ".join(f"{i} {mode!r}" for i, mode in enumerate(MODES, 1)),
    )
    parser.add_argument("--output", help="JSON results file")
    args = parser.parse_args(argv)
    defaults = dict(holds=200, reps=1) if args.quick else dict(holds=2000, reps=5)
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.holds < max(c for c, _ in MODES.values()) or args.reps < 1:
        parser.error("--holds must be at least the number of clients, --reps 1")
    args.configs = args.configs.split(",") if args.configs else DEFAULT_CONFIGS
    names = list(MODES)
    try:
        numbers = [int(n) for n in args.modes.split(",")] if args.modes else []
    except ValueError:
        parser.error(f"--modes must be numbers from 1 to {len(names)}")
    if any(not 1 <= n <= len(names) for n in numbers):
        parser.error(f"--modes must be numbers from 1 to {len(names)}")
    args.modes = [names[n - 1] for n in numbers] if numbers else names
    for name in args.configs:
        try:
            config_of(name)
        except KeyError:
            parser.error(f"unknown configuration {name!r}")
    return args


def main(argv=None):
    args = parse_args(argv)
    results = {
        "mode": "quick" if args.quick else "full",
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "host": host(),
        "loadavg_start": loadavg(),
        "flux": flux_version(),
        "params": {"holds": args.holds, "reps": args.reps},
        "configs": args.configs,
        "modes": args.modes,
        "figures": {},
    }
    with tempfile.TemporaryDirectory(prefix="epilog-gate-durable-") as tmpdir:
        results["figures"] = run_all(Plugins(tmpdir), args)
    results["loadavg_end"] = loadavg()
    print(report(results))
    output = args.output
    if output is None and not args.quick:
        output = result_path("durable")
    if output:
        write_results(output, results)
        print(f"bench: results in {output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
