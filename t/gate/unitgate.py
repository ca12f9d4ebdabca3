"""Helpers shared by the unit tests of the gate logic (no broker): jobs
driven to a given point through a FakePort (the ``port`` fixture) and a
Gate (the ``gate`` fixture, in this folder's conftest.py), and eventlog entries
as recovery reads them."""

from flux_epilog_gate.gate import CLEANUP, RUN, SCHED
from flux_epilog_gate.gate.config import Config
from flux_epilog_gate.gate.holdlog import KEY, MARKER, parse
from flux_epilog_gate.gate.holds import CANCEL_EVENT, HOLD_EVENT, RELEASE_EVENT
from flux_epilog_gate.gate.loader import Load

JOB = 4242
JOB2 = 4343
USER = 1000
OTHER = 2000


def held_job(port, gate, *descriptions, jobid=JOB, userid=USER, timeout=None):
    """A job waiting in SCHED with pending holds ``descriptions``."""
    port.add_job(jobid, SCHED, userid)
    for description in descriptions:
        gate.hold(jobid, description, timeout)
    return jobid


def at_point(port, gate, *descriptions, jobid=JOB, userid=USER, timeout=None):
    """A never-allocated job that entered CLEANUP: holds ``descriptions``
    are active."""
    held_job(port, gate, *descriptions, jobid=jobid, userid=userid, timeout=timeout)
    port.set_state(jobid, CLEANUP)
    gate.on_cleanup(jobid)
    return jobid


def started_job_in_cleanup(port, gate, *descriptions, jobid=JOB):
    """A job that got resources and started, held while running, then an
    exception put it in CLEANUP: its processes may still run (no finish)."""
    port.add_job(jobid, RUN, USER, happened={"alloc", "start"})
    for description in descriptions:
        gate.hold(jobid, description)
    port.set_state(jobid, CLEANUP)
    gate.on_cleanup(jobid)
    return jobid


def state_of(gate, jobid, description):
    return gate.jobs[jobid].holds[description].state


def epilog_starts(port, jobid=JOB):
    return [c["description"] for c in port.posted_by_gate(jobid, "epilog-start")]


def ev(timestamp, name, **context):
    """An eventlog entry as end_recovery() takes it."""
    return (timestamp, name, context)


def marked(timestamp, name, **context):
    """An epilog event the gate posted: marked as its own."""
    return ev(timestamp, name, **context, **{MARKER: True})


def logged(port):
    """What the hold log holds, by job (see holdlog.parse)."""
    return parse(port.kvs.get(KEY, ""))[0]


def recover(port, gate, state, events, happened=(), jobid=JOB, userid=USER):
    """A job restored by a restarted job-manager in ``state``, whose
    eventlog holds ``events``; ``happened``: events posted since restart."""
    port.add_job(jobid, state, userid, happened=happened)
    gate.begin_recovery(jobid, userid)
    gate.end_recovery(jobid, events)


def annotations(port, jobid=JOB):
    """The annotations the gate set on a job, in order."""
    return [c["epilog_gate"] for name, c in port.events[jobid] if name == "memo"]


def replayed(text):
    """The holds a log leaves, replayed as recovery does (each job's
    entries in time order; a hold entry of a hold already there changes
    nothing): a set of (id, description)."""
    held = set()
    for jobid, entries in parse(text)[0].items():
        for _, name, context in sorted(entries, key=lambda entry: entry[0]):
            key = (jobid, context["description"])
            if name == HOLD_EVENT:
                held.add(key)
            elif name in (CANCEL_EVENT, RELEASE_EVENT):
                held.discard(key)
    return held


def gate_holds(gate):
    """The holds ``gate`` keeps: a set of (id, description)."""
    return {(jobid, d) for jobid, job in gate.jobs.items() for d in job.holds}


def load(port):
    """A gate loaded over the jobs of ``port``: ``(loading, gate)``."""
    loading = Load(port)
    gate = loading.begin(Config())
    for jobid, job in port.jobs.items():
        loading.on_new(jobid, job.state, USER)
    loading.loaded()
    return loading, gate
