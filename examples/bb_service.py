#!/usr/bin/env python3
"""A toy burst-buffer manager built on flux-epilog-gate.

The pattern every cleanup service follows:

1. when a job that wants a burst buffer is submitted, create the buffer
   and register a hold ``bb`` on the job;
2. when the hold becomes active (the job finished, or was cancelled or
   failed before it ever ran), tear the buffer down;
3. release the hold with status 0, or non-zero if teardown failed: the job
   then goes on to ``clean``.

The "buffer" here is a directory under ``--root``; a job asks for one with
the jobspec attribute ``system.bb`` (``flux submit --setattr=system.bb=1``).
Because the gate answers a watch with every hold that is already active,
a restarted service picks up where it left off.

Every request is asynchronous, its answer handled by a ``then()``
callback on the service's one reactor: a service never blocks in
``get()``, and never keeps futures waiting in a reactor of their own (see
README, "For cleanup-service authors").
"""

import argparse
import errno
import os
import shutil
import sys

import flux
import flux.job
from flux.job import JobID
from flux.job.journal import JournalConsumer

from flux_epilog_gate import EpilogGate

DESCRIPTION = "bb"


class BurstBufferService:
    def __init__(self, handle, root, count=None):
        self.handle = handle
        self.gate = EpilogGate(handle)
        self.root = root
        self.remaining = count
        self.retry = None
        os.makedirs(root, exist_ok=True)

    def buffer(self, jobid):
        return os.path.join(self.root, JobID(jobid).f58)

    def on_journal(self, event):
        # A job's jobspec arrives with its "submit" event.
        if event is None or event.name != "submit" or not event.jobspec:
            return
        if "bb" not in event.jobspec.get("attributes", {}).get("system", {}):
            return
        os.makedirs(self.buffer(event.jobid), exist_ok=True)
        future = self.gate.hold_async(event.jobid, DESCRIPTION, timeout=60)
        future.then(self.answered, f"created {self.buffer(event.jobid)}, holding")

    def answered(self, future, what):
        """The answer of a hold or release: say what was done, or why not."""
        try:
            future.get()  # fulfilled: does not wait
        except OSError as exc:
            print(f"bb: {what}: failed: {exc.strerror}", flush=True)
            return
        print(f"bb: {what}", flush=True)

    def watch(self, *args):
        self.gate.watch_async([DESCRIPTION]).then(self.on_active)

    def on_active(self, future):
        try:
            hold = future.get()
        except OSError as exc:
            if exc.errno not in (errno.ECONNRESET, errno.ENOSYS):
                raise
            # The gate was reloaded or restarted: watch again shortly;
            # holds still active are sent again.
            self.retry = self.handle.timer_watcher_create(0.5, self.watch)
            self.retry.start()
            return
        future.reset()
        path = self.buffer(hold["id"])
        status = 0
        try:
            shutil.rmtree(path)
        except OSError as exc:
            print(f"bb: teardown of {path} failed: {exc}", flush=True)
            status = 1
        future = self.gate.release_async(hold["id"], DESCRIPTION, status)
        future.then(self.released, f"tore down {path} (ran={hold['ran']}), released")

    def released(self, future, what):
        self.answered(future, what)
        if self.remaining is not None:
            self.remaining -= 1
            if self.remaining <= 0:
                self.handle.reactor_stop()

    def run(self):
        journal = JournalConsumer(self.handle, full=False)
        journal.set_callback(self.on_journal)
        journal.start()
        self.watch()
        print("bb: ready", flush=True)
        self.handle.reactor_run()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="/tmp/bb", help="where buffers live")
    parser.add_argument("--count", type=int, help="exit after N teardowns")
    args = parser.parse_args()
    BurstBufferService(flux.Flux(), args.root, args.count).run()


if __name__ == "__main__":
    sys.exit(main())
