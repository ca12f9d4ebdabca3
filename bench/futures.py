#!/usr/bin/env python3
"""Many live futures in a cleanup service: get() on each, or wait_all().

    python bench/futures.py                    # both patterns, 3 clients
    python bench/futures.py --pattern get --clients 3 --jobs 3000

Each client submits JOBS jobs (held in PRIORITY), holds each, then
cancels and releases them all with interleaved futures, the pattern of a
service that aborted inside libflux.  With ``--pattern get`` it keeps
every future and waits on each with ``get()``: each wait that blocks runs
a reactor of the future's own, kept as long as the future, so a client
ends up with thousands of reactors, each watching the handle's epoll
descriptor.  With ``--pattern wait_all`` it waits with
:meth:`flux_epilog_gate.EpilogGate.wait_all` on the handle's one reactor.
Prints, per pattern, how many clients finished and how each that did not
ended (a signal: SIGABRT is libev's assertion), and the open descriptors
of those that finished.  It starts its own instance; a few minutes.
"""

import argparse
import os
import signal
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)


def inner(pattern, jobs):
    """One client, in the instance."""
    import flux
    import flux.job
    from flux.job import JobspecV1

    from flux_epilog_gate import EpilogGate

    handle = flux.Flux()
    gate = EpilogGate(handle)
    spec = JobspecV1.from_command(["true"])
    if pattern == "get":
        wait = _get_each
    else:
        wait = gate.wait_all
    submits = [flux.job.submit_async(handle, spec, urgency=0) for _ in range(jobs)]
    if pattern != "get":
        wait(submits)  # then get_id() below does not wait
    ids = [future.get_id() for future in submits]
    wait([gate.hold_async(jobid, "bb") for jobid in ids])
    futures = []
    for jobid in ids:
        futures.append(flux.job.cancel_async(handle, jobid))
        futures.append(gate.release_async(jobid, "bb"))
    answers = wait(futures)
    failed = sum(isinstance(a, OSError) for a in answers)
    print(len(os.listdir("/proc/self/fd")), failed, flush=True)


def _get_each(futures):
    """The reported pattern: keep every future, get() each in turn."""
    results = []
    for future in futures:
        try:
            results.append(future.get())
        except OSError as exc:
            results.append(exc)
    return results


def outer(args):
    from flux_epilog_gate import plugin_path
    from flux_epilog_gate.testing import Instance

    for pattern in args.pattern.split(","):
        with Instance(cores=64, plugin=plugin_path()) as inst:
            start = time.monotonic()
            procs = [
                subprocess.Popen(
                    [
                        sys.executable,
                        HERE,
                        "--inner",
                        pattern,
                        "--jobs",
                        str(args.jobs),
                    ],
                    env=inst.env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for _ in range(args.clients)
            ]
            report(pattern, args, procs, time.monotonic() - start)


def report(pattern, args, procs, started):
    finished, ended = [], []
    for proc in procs:
        out, err = proc.communicate()
        if proc.returncode == 0:
            finished.append(out.split())
        else:
            why = (
                signal.Signals(-proc.returncode).name
                if proc.returncode < 0
                else f"exit {proc.returncode}"
            )
            last = err.strip().splitlines()[-1:] or [""]
            ended.append(f"{why}: {last[0][:160]}")
    print(
        f"{pattern}: {len(finished)} of {args.clients} clients finished "
        f"({args.jobs} holds, then {2 * args.jobs} cancel and release futures "
        "each)"
    )
    for fds, failed in finished:
        print(f"  finished: {fds} open descriptors, {failed} requests failed")
    for text in ended:
        print(f"  ended by {text}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pattern", default="get,wait_all")
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--inner", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        inner(args.inner, args.jobs)
    else:
        outer(args)


if __name__ == "__main__":
    main()
