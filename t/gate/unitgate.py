"""Helpers shared by the unit tests of the gate logic (no broker): jobs
driven to a given point through a FakePort (the ``port`` fixture) and a
Gate (the ``gate`` fixture, in this folder's conftest.py), and eventlog entries
as recovery reads them."""

from flux_epilog_gate.gate import CLEANUP, RUN, SCHED
from flux_epilog_gate.gate.holdlog import KEY, MARKER, parse

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
