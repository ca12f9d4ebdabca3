#!/usr/bin/env python3
"""A toy burst-buffer manager built on flux-epilog-gate.

The pattern every setup and cleanup service follows:

1. when a job that wants a burst buffer is submitted, register a prolog
   hold ``bb-setup`` (it keeps the job's start back) and an epilog hold
   ``bb`` (it keeps the job's clean back);
2. when ``bb-setup`` becomes active (the job got its resources and is
   about to start), create the buffer and release the hold: status 0 lets
   the job start, non-zero fails it (it never starts);
3. when ``bb`` becomes active (the job finished, or was cancelled or failed
   before it ever ran), tear the buffer down and release the hold with
   status 0, or non-zero if teardown failed: the job then goes on to
   ``clean``.

A ``bb-setup`` that comes back ``aborted`` belongs to a job that will never
start (it was cancelled during the setup): the service abandons the setup
and releases it; ``bb`` then tears down whatever was made.  A job can reach
RUN before the service has seen its submission: then the prolog hold is
refused as too late and the buffer is made at once.  The
``[[epilog-gate.rules]]`` of the instance config register both holds
without that race (holding them again here answers the existing holds).

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
SETUP = "bb-setup"


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
        jobid = event.jobid
        future = self.gate.hold_async(jobid, DESCRIPTION, timeout=60)
        future.then(self.answered, f"holding {JobID(jobid).f58} for teardown")
        future = self.gate.hold_async(jobid, SETUP, timeout=60, point="prolog")
        future.then(self.setup_held, jobid)

    def answered(self, future, what, quiet=False):
        """The answer of a hold or release: say what was done (unless
        ``quiet``), or why not."""
        try:
            future.get()  # fulfilled: does not wait
        except OSError as exc:
            print(f"bb: {what}: failed: {exc.strerror}", flush=True)
            return
        if not quiet:
            print(f"bb: {what}", flush=True)

    def setup_held(self, future, jobid):
        try:
            future.get()  # fulfilled: does not wait
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                print(f"bb: holding {JobID(jobid).f58}: failed: {exc}", flush=True)
                return
            # Too late to keep the start back: set up now.
            self.setup(jobid)
            return
        print(f"bb: holding {JobID(jobid).f58} for setup", flush=True)

    def setup(self, jobid):
        path = self.buffer(jobid)
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            print(f"bb: setup of {path} failed: {exc}", flush=True)
            return 1
        print(f"bb: created {path}", flush=True)
        return 0

    def watch(self, *args):
        self.read = 0
        self.gate.watch_async([DESCRIPTION, SETUP]).then(self.on_active)

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
        # Say what was read: the gate sends only so much unacknowledged.
        self.read += 1
        self.gate.watch_ack(future, self.read)
        if hold["point"] == "prolog":
            self.on_setup(hold)
            return
        path = self.buffer(hold["id"])
        status = 0
        try:
            shutil.rmtree(path)
        except FileNotFoundError:
            pass  # never set up: the job was cancelled before it started
        except OSError as exc:
            print(f"bb: teardown of {path} failed: {exc}", flush=True)
            status = 1
        # Said before the release: the job may be clean before its answer.
        if not status:
            print(f"bb: tore down {path} (ran={hold['ran']}), releasing", flush=True)
        future = self.gate.release_async(hold["id"], DESCRIPTION, status)
        future.then(self.released, f"release of {path}")

    def released(self, future, what):
        self.answered(future, what, quiet=True)
        if self.remaining is not None:
            self.remaining -= 1
            if self.remaining <= 0:
                self.handle.reactor_stop()

    def on_setup(self, hold):
        if hold.get("aborted"):
            # The job will never start: whatever was made is torn down
            # when its epilog hold becomes active.
            print(f"bb: setup for {JobID(hold['id']).f58} aborted", flush=True)
            future = self.gate.release_async(hold["id"], SETUP, 0)
            future.then(self.answered, "setup abandoned, released")
            return
        status = self.setup(hold["id"])
        future = self.gate.release_async(hold["id"], SETUP, status)
        future.then(self.answered, f"setup done (status {status}), released")

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
