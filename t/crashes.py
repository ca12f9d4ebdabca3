"""Crash tests: a state made durable on demand, requests sent at once."""

import flux.job

#: Requests sent at once, so that many share a sync.
N = 30
#: Only the gate's own syncs checkpoint during a test.
CONFIG = '\n[kvs]\ncheckpoint-period = "1h"\n'


def checkpoint(inst, jobids=()):
    """Make everything committed so far durable, the eventlogs of
    ``jobids`` first: the job-manager commits a new job's eventlog after
    its submission is answered, so a job just submitted may not be in
    the KVS yet (and a restart would not know it)."""
    if jobids:
        handle = inst.handle()
        for jobid in jobids:
            flux.job.event_wait(handle, jobid, "submit")
    inst.flux("kvs", "put", "--sync", "test.checkpoint=1")


def all_answered(futures):
    """The answers of ``futures``, waiting for each."""
    return [future.get() for future in futures]
