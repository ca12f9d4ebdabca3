#!/usr/bin/env python3
"""Demo: flux-epilog-gate in a throwaway Flux instance.

Starts ``flux start`` with the plugin loaded and the example burst-buffer
service (bb_service.py) running, then submits two jobs that want a burst
buffer: one is cancelled before it ever gets resources (the exception
path), one runs to completion (the normal path).  Each job's eventlog shows
its ``clean`` held until the service tore the buffer down and released the
hold, and the job that ran shows its ``start`` held until the service set
the buffer up and released its prolog hold.  The instance config declares
both holds for every job that asks for a burst buffer, so no job can slip
past the service.
"""

import os
import subprocess
import sys
import tempfile
import time

import flux.job
from flux.job import JobspecV1

from flux_epilog_gate import plugin_path
from flux_epilog_gate.testing import Instance

HERE = os.path.dirname(os.path.abspath(__file__))
SHOWN = (
    "submit",
    "alloc",
    "start",
    "finish",
    "exception",
    "prolog-start",
    "prolog-finish",
    "epilog-start",
    "epilog-finish",
    "free",
    "clean",
)


#: Both holds on every job with a system.bb attribute, from submit on.
RULES = """
[[epilog-gate.rules]]
attribute = "system.bb"
description = "bb-setup"
point = "prolog"
timeout = "1m"

[[epilog-gate.rules]]
attribute = "system.bb"
description = "bb"
timeout = "1m"
"""


def bb_job(handle, run_duration=None, urgency=16):
    spec = JobspecV1.from_command(["true"])
    spec.setattr("system.bb", 1)
    if run_duration:
        spec.setattr("system.exec.test.run_duration", run_duration)
    return flux.job.submit(handle, spec, urgency=urgency)


def show(handle, jobid, title):
    # Wait for the whole eventlog (it ends at clean) before printing, so
    # that the service's lines come before the job's, not among them.
    events = list(flux.job.event_watch(handle, jobid))
    lines = [f"\n== {title}: job {jobid.f58}"]
    t0 = None
    for event in events:
        t0 = t0 or event.timestamp
        if event.name in SHOWN:
            context = " ".join(f"{k}={v}" for k, v in event.context.items())
            lines.append(f"  {event.timestamp - t0:7.3f}s  {event.name:<18} {context}")
    # One write: the service prints to the same terminal.
    print("\n".join(lines), flush=True)


def main():
    root = tempfile.mkdtemp(prefix="bb-")
    with Instance(cores=4, plugin=plugin_path(), config=RULES) as inst:
        print(f"flux instance up ({inst.uri}), epilog-gate loaded")
        service = subprocess.Popen(
            [
                sys.executable,
                os.path.join(HERE, "bb_service.py"),
                "--root",
                root,
                "--count",
                "2",
            ],
            env=inst.env,
        )
        time.sleep(1.0)
        handle = inst.handle()
        pending = bb_job(handle, urgency=0)
        time.sleep(0.5)
        flux.job.cancel(handle, pending, "changed my mind")
        show(handle, flux.job.JobID(pending), "cancelled before it got resources")
        ran = bb_job(handle, run_duration="0.5s")
        show(handle, flux.job.JobID(ran), "ran to completion")
        service.wait(timeout=30)
        print(f"\nburst buffers left in {root}: {os.listdir(root) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
