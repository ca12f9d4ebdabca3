"""Helpers for tests: submit jobs, read and wait on their eventlogs, read
the instance's log, the gate's query and its hold log."""

import json
import os
import subprocess
import time
from contextlib import contextmanager

import flux.job
from flux.eventlog import EventLogEvent
from flux.job import JobspecV1

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holdlog import KEY, SEGMENTS, parse, segment_key
from flux_epilog_gate.gate.holds import HOLD_EVENT
from flux_epilog_gate.paths import plugin_path
from flux_epilog_gate.testing import Instance, flux_command

#: Simulated execution: the job "runs" this long without any process.
SIM = "system.exec.test.run_duration"


def _spec(duration, attrs):
    """A one-task jobspec (see :func:`submit`)."""
    spec = JobspecV1.from_command(["true"])
    if duration is not None:
        spec.setattr(SIM, f"{duration}s")
    for key, value in attrs.items():
        spec.setattr(key, value)
    return spec


def submit(handle, duration=None, urgency=None, **attrs):
    """Submit a one-task job; with ``duration`` (seconds) its execution is
    simulated; ``attrs`` are set as jobspec attributes."""
    kwargs = {} if urgency is None else {"urgency": urgency}
    return flux.job.submit(handle, _spec(duration, attrs), **kwargs)


def submit_many(handle, count, duration=None, urgency=None, **attrs):
    """Submit ``count`` jobs as :func:`submit` does, all at once (one at
    a time, each waits for its answer: tens of milliseconds); their ids,
    in order of submission."""
    spec = _spec(duration, attrs)
    kwargs = {} if urgency is None else {"urgency": urgency}
    futures = [flux.job.submit_async(handle, spec, **kwargs) for _ in range(count)]
    return [future.get_id() for future in futures]


def eventlog(handle, jobid):
    """The job's eventlog as committed now: a list of EventLogEvent."""
    answer = handle.rpc(
        "job-info.lookup", {"id": int(jobid), "keys": ["eventlog"], "flags": 0}
    ).get()
    return [EventLogEvent(line) for line in answer["eventlog"].splitlines() if line]


def names(events):
    return [event.name for event in events]


def wait_event(handle, jobid, name, timeout=15.0, match=None):
    """Wait until event ``name`` (whose context satisfies ``match``, if
    given) is in the job's eventlog; return it.  Fails on timeout or if the
    eventlog ends first."""
    future = flux.job.event_watch_async(handle, jobid)
    deadline = time.time() + timeout
    try:
        while True:
            remaining = deadline - time.time()
            if remaining <= 0:
                raise TimeoutError(f"no {name} event for job {jobid} in {timeout}s")
            try:
                future.wait_for(remaining)
            except OSError as exc:
                raise TimeoutError(
                    f"no {name} event for job {jobid} in {timeout}s"
                ) from exc
            event = future.get_event()
            if event is None:
                raise AssertionError(f"eventlog of {jobid} ended without {name}")
            if event.name == name and (match is None or match(event.context)):
                return event
    finally:
        try:
            future.cancel()
        except OSError:
            pass


def wait_inactive(handle, jobid, timeout=15.0):
    return wait_event(handle, jobid, "clean", timeout=timeout)


def settle(handle, jobid, name, seconds=0.5, since=None):
    """Give the job-manager time to post ``name`` if it were going to, then
    return the eventlog (to prove that it did not).  ``seconds`` count
    from ``since`` (a timestamp: when the job could first have posted it)
    if given, else from now: what the test did meanwhile counts too."""
    begin = time.time() if since is None else since
    time.sleep(max(0.0, begin + seconds - time.time()))
    return eventlog(handle, jobid)


def set_urgency(handle, jobid, urgency):
    """Change a job's urgency (0 holds it in PRIORITY/SCHED, 16 releases)."""
    handle.rpc("job-manager.urgency", {"id": int(jobid), "urgency": urgency}).get()


def submit_cores(handle, cores, duration=None, urgency=None):
    """Submit a one-task job that needs ``cores`` cores (else as submit)."""
    spec = JobspecV1.from_command(["true"], num_tasks=1, cores_per_task=cores)
    if duration is not None:
        spec.setattr(SIM, f"{duration}s")
    kwargs = {} if urgency is None else {"urgency": urgency}
    return flux.job.submit(handle, spec, **kwargs)


def described(description):
    """A ``match`` for :func:`wait_event`: the event's context names
    ``description``."""
    return lambda context: context.get("description") == description


def named(events, name, description=None):
    """The events called ``name`` (for ``description``, if given)."""
    return [
        event
        for event in events
        if event.name == name
        and (description is None or event.context.get("description") == description)
    ]


def dmesg(instance, text):
    """Lines of the instance's log that contain ``text``."""
    return [line for line in instance.flux("dmesg").stdout.splitlines() if text in line]


def query(instance):
    """What ``flux jobtap query epilog-gate.so`` prints, decoded."""
    return json.loads(instance.flux("jobtap", "query", "epilog-gate.so").stdout)


#: Broker configuration under which only the gate's own syncs
#: checkpoint the KVS during a test (what a SIGKILL then keeps).
GATE_SYNCS_ONLY = '\n[kvs]\ncheckpoint-period = "1h"\n'


def hold_log(instance):
    """The text of the gate's hold log as its load reads it, its
    segments in order then its KVS key, "" while there is none."""
    done = instance.flux("kvs", "get", KEY, check=False)
    text = done.stdout if done.returncode == 0 else ""
    return "".join(value for _, value in segments(instance)) + text


def segments(instance):
    """The hold log's segments: ``[(n, text)]`` in order."""
    done = instance.flux("kvs", "ls", "-1", SEGMENTS, check=False)
    if done.returncode != 0:
        return []
    numbers = sorted(int(name.rstrip(".")) for name in done.stdout.split())
    return [(n, instance.flux("kvs", "get", segment_key(n)).stdout) for n in numbers]


def recorded(instance):
    """The holds the gate's hold log records: jobid -> its records."""
    return parse(hold_log(instance))[0]


def held_waiting(handle, gate, count, description="bb"):
    """``count`` jobs held in SCHED (urgency 0), each with a pending hold
    ``description``; their ids."""
    jobids = submit_many(handle, count, urgency=0)
    for jobid in jobids:
        gate.hold(jobid, description)
    return jobids


def release_all(gate):
    """Release every hold the gate lists (so a failed test leaves no job
    that would keep the instance from shutting down)."""
    for hold in gate.list():
        gate.release(hold["id"], hold["description"])


def wait_alloc_pending(handle, count=1, timeout=15.0):
    """Wait until ``count`` alloc requests are pending to the scheduler."""
    deadline = time.time() + timeout
    while handle.rpc("job-manager.alloc-query").get()["alloc_pending"] != count:
        if time.time() > deadline:
            raise TimeoutError(f"{count} alloc requests not pending in {timeout}s")
        time.sleep(0.02)


def get_raw(inst):
    """The bytes of the hold log's value (what ``flux kvs get --raw``
    prints)."""
    return subprocess.run(
        [flux_command(), "kvs", "get", "--raw", KEY],
        env=inst.env,
        check=True,
        capture_output=True,
        timeout=60,
    ).stdout


def replayed(jobs):
    """The holds log entries ``jobs`` leave, each job's replayed in time
    order as recovery does: a set of (id, description)."""
    held = set()
    for jobid, entries in jobs.items():
        for _, name, context in sorted(entries, key=lambda entry: entry[0]):
            key = (jobid, context["description"])
            if name == HOLD_EVENT:
                held.add(key)
            else:
                held.discard(key)
    return held


def in_depend(handle, duration=0.1):
    """A job kept in DEPEND by an ``afterany`` dependency on a job held in
    PRIORITY (urgency 0); returns ``(job, holder)``.  Cancelling the
    holder ends that dependency."""
    holder = submit(handle, urgency=0)
    jobid = submit(
        handle,
        duration=duration,
        **{"system.dependencies": [{"scheme": "afterany", "value": str(holder)}]},
    )
    wait_event(handle, jobid, "dependency-add")
    return jobid, holder


def held_in_depend(handle, gate, description, timeout=None):
    """A job in DEPEND (see :func:`in_depend`) with dependency hold
    ``description``; returns it, the job its other dependency waits for
    (see :func:`end_others`) and the hold's ``dependency-add``."""
    jobid, holder = in_depend(handle)
    gate.hold(jobid, description, timeout=timeout, point="depend")
    add = wait_event(handle, jobid, "dependency-add", match=described(description))
    return jobid, holder, add


def end_others(handle, *holders):
    """End the jobs' other dependency (after a restart: flux-core's
    dependency-after fails, at a restart, a dependency on a job that went
    inactive meanwhile)."""
    for holder in holders:
        flux.job.cancel(handle, holder)
    for holder in holders:
        wait_inactive(handle, holder)


def assert_in_depend(handle, jobid, seconds=0.5):
    """The job is still in DEPEND: no ``depend`` event in ``seconds``."""
    events = names(settle(handle, jobid, "depend", seconds=seconds))
    assert "depend" not in events, events


def damage(inst, jobid, how):
    """Damage the eventlog of ``jobid`` in the KVS so that a replay drops
    the job: keep only its submit event, or unlink it (``no-eventlog``)."""
    key = f"{inst.flux('job', 'id', '--to=kvs', str(jobid)).stdout.strip()}.eventlog"
    if how == "no-eventlog":
        inst.flux("kvs", "unlink", key)
        return
    first = inst.flux("kvs", "get", key).stdout.splitlines()[0]
    assert json.loads(first)["name"] == "submit"
    inst.flux("kvs", "put", "--raw", f"{key}=-", input=first + "\n")


def wait_until(predicate, timeout=10.0):
    """Poll ``predicate`` until it holds, failing after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def held_in_cleanup(inst, *descriptions):
    """A job of ``inst`` in CLEANUP, held there by ``descriptions``."""
    handle = inst.handle()
    gate = EpilogGate(handle)
    jobid = submit(handle, urgency=0)
    for description in descriptions:
        gate.hold(jobid, description)
    flux.job.cancel(handle, jobid)
    wait_event(handle, jobid, "epilog-start")
    return jobid


@contextmanager
def cli_instance(*active):
    """An instance whose gate holds ``stage-out`` on a pending job and,
    on a job cancelled to its epilog point, the active holds ``active``
    (``(description, timeout)`` pairs); the command run in this process
    (``cli.main``) talks to it, through FLUX_URI, until the block ends."""
    with Instance(cores=8, plugin=plugin_path()) as inst:
        handle = inst.handle()
        gate = EpilogGate(handle)
        pending, held = submit(handle, urgency=0), submit(handle, urgency=0)
        gate.hold(pending, "stage-out")
        for description, timeout in active:
            gate.hold(held, description, timeout=timeout)
        flux.job.cancel(handle, held)
        wait_event(handle, held, "epilog-start")
        saved = os.environ.get("FLUX_URI")
        os.environ["FLUX_URI"] = inst.uri
        try:
            yield inst
        finally:
            os.environ.pop("FLUX_URI")
            if saved is not None:
                os.environ["FLUX_URI"] = saved


class Quiet(tuple):
    """A module's live objects (an instance, its handle...) handed to a
    hypothesis test by a fixture: a plain repr for hypothesis' reports."""

    def __repr__(self):
        return f"{type(self).__name__}()"
