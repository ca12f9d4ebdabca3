#!/usr/bin/env python3
"""How steady is this machine's CPU speed?  The noise floor of bench/run.py.

    python bench/cpu_noise.py              # 20 s, every CPU at once
    python bench/cpu_noise.py --seconds 60

One process per CPU, pinned to it, runs the same fixed piece of work over
and over and notes how long each took.  On a quiet machine with steady
CPUs the times hardly vary; on a shared virtual machine they can vary by
tens of percent from one second to the next, and the CPUs can vary
independently of each other.  A jobs/s ratio of two configurations run one
after the other cannot be finer than that variation allows over the timed
seconds of a run (compare the A/A control of bench/run.py).
"""

import argparse
import multiprocessing
import os
import statistics
import time

#: Iterations of one piece of work (about 20 ms on a 2020s x86 core).
WORK = 300_000


def spin(cpu, seconds, queue):
    """On ``cpu`` alone: (end time, duration) of each piece of work."""
    os.sched_setaffinity(0, {cpu})
    out = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        t0 = time.perf_counter()
        x = 0
        for i in range(WORK):
            x += i * i
        out.append((time.monotonic(), time.perf_counter() - t0))
    queue.put((cpu, out))


def speeds(samples, start, width, count):
    """Mean speed (pieces of work per second) in each window of ``width``
    seconds from ``start``."""
    bins = [[] for _ in range(count)]
    for end, took in samples:
        k = int((end - start) / width)
        if 0 <= k < count:
            bins[k].append(took)
    return [1 / statistics.mean(b) if b else float("nan") for b in bins]


def cv(values):
    return statistics.pstdev(values) / statistics.mean(values)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    queue = multiprocessing.Queue()
    procs = [
        multiprocessing.Process(target=spin, args=(c, args.seconds, queue))
        for c in cpus
    ]
    start = time.monotonic()
    for p in procs:
        p.start()
    results = dict(queue.get() for _ in procs)
    for p in procs:
        p.join()
    print(f"{len(cpus)} CPUs, {args.seconds:.0f} s, the same work on each at once")
    for width in (0.25, 1.0):
        count = int(args.seconds / width) - 1
        series = {c: speeds(results[c], start, width, count) for c in cpus}
        line = ", ".join(f"cpu {c} {cv(series[c]):.1%}" for c in cpus)
        print(f"  speed variation (CV) over {width:g} s windows: {line}")
        if len(cpus) > 1:
            a, b = series[cpus[0]], series[cpus[1]]
            corr = statistics.correlation(a, b)
            print(f"    correlation of cpu {cpus[0]} and cpu {cpus[1]}: {corr:.2f}")


if __name__ == "__main__":
    main()
