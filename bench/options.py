"""bench/run.py's configurations, workloads and command line."""

import argparse

#: Configurations: name -> (plugin, gated, plugin options).  "plugin" is
#: "gate" for epilog-gate.so, "native" for bench/native_gate.c, None for
#: none.  bare-again is bare once more, the A/A control: its ratio to
#: bare shows how far two identical configurations land apart in a run,
#: the resolution of every other ratio.  native-durable is the native
#: gate that also records each hold in its job's eventlog: a durable
#: record per hold, as epilog-gate keeps one (in batches, in a KVS key of
#: its own); the held-job targets are ratios to it.
CONFIGS = {
    "bare": (None, False, {}),
    "bare-again": (None, False, {}),
    "gate-idle": ("gate", False, {}),
    "gate": ("gate", True, {}),
    "native": ("native", True, {}),
    "native-durable": ("native", True, {"durable": 1}),
}

#: "perilog" is the normal path with two holds per job on the gated
#: configurations: a prolog hold (the job's start waits for its release)
#: and an epilog hold, each released as soon as it is active.
WORKLOADS = ("exception", "normal", "perilog")

#: Options that count something: at least 1.
COUNTS = (
    "reps",
    "jobs_exception",
    "jobs_normal",
    "jobs_perilog",
    "slots",
    "outstanding",
    "samples",
    "list_holds",
    "cores",
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Benchmark of epilog-gate: what the gate costs the job-manager."
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small counts: a smoke test of the harness, not a measurement",
    )
    parser.add_argument("--reps", type=int, help="repetitions of the throughput runs")
    parser.add_argument(
        "--jobs-exception", type=int, help="jobs per exception-path run"
    )
    parser.add_argument("--jobs-normal", type=int, help="jobs per normal-path run")
    parser.add_argument(
        "--jobs-perilog",
        type=int,
        help="jobs per normal-path run with a prolog and an epilog hold per job",
    )
    parser.add_argument(
        "--workloads",
        help=f"comma-separated throughput workloads (default: {','.join(WORKLOADS)})",
    )
    parser.add_argument(
        "--slots",
        type=int,
        help="timed slots each run is split into, in mirrored order",
    )
    parser.add_argument(
        "--outstanding",
        type=int,
        help="active holds outstanding while release latency is sampled",
    )
    parser.add_argument("--samples", type=int, help="release latency samples")
    parser.add_argument(
        "--list-holds", type=int, help="holds outstanding for list and memory"
    )
    parser.add_argument("--cores", type=int, help="fake cores of each instance")
    parser.add_argument(
        "--settle",
        type=float,
        help="seconds to let caches expire before a memory reading "
        "(then malloc_trim by the heap probe; 0: raw readings only)",
    )
    parser.add_argument(
        "--configs",
        help="comma-separated throughput configurations "
        f"(default: {','.join(CONFIGS)})",
    )
    parser.add_argument(
        "--skip",
        default="",
        help="comma-separated parts to skip: throughput,latency,scale",
    )
    parser.add_argument(
        "--output",
        help="JSON results file (default: bench/results/<time>-<commit>-<mode>.json)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 if a target is missed (never with --quick)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="progress details on stderr"
    )
    args = parser.parse_args(argv)
    full = dict(
        reps=10,
        jobs_exception=5000,
        jobs_normal=300,
        jobs_perilog=300,
        slots=2,
        outstanding=1000,
        samples=200,
        list_holds=10000,
        cores=1024,
        warmup=20,
        list_repeat=7,
        settle=12,
    )
    quick = dict(
        reps=2,
        jobs_exception=100,
        jobs_normal=30,
        jobs_perilog=30,
        slots=2,
        outstanding=50,
        samples=20,
        list_holds=300,
        cores=128,
        warmup=5,
        list_repeat=3,
        settle=0,
    )
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    for key in COUNTS:
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be at least 1")
    args.jobs = {
        "exception": args.jobs_exception,
        "normal": args.jobs_normal,
        "perilog": args.jobs_perilog,
    }
    for workload, n in args.jobs.items():
        if args.slots > n:
            parser.error(f"--slots {args.slots} is more than --jobs-{workload} {n}")
    args.workloads = args.workloads.split(",") if args.workloads else list(WORKLOADS)
    for workload in args.workloads:
        if workload not in WORKLOADS:
            parser.error(f"unknown workload {workload!r}")
    args.configs = args.configs.split(",") if args.configs else list(CONFIGS)
    for config in args.configs:
        if config not in CONFIGS:
            parser.error(f"unknown configuration {config!r}")
    args.skip = {s for s in args.skip.split(",") if s}
    return args
