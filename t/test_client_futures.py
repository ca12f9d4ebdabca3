"""Many requests in flight from one client (issue: a cleanup service that
waited on thousands of live futures with get() aborted inside libflux).

A get() that has to wait runs a reactor of the future's own, which lives
as long as the future: one descriptor per live, waited future.  The
client's wait_all() waits on the handle's own reactor instead.
"""

import os
import subprocess
import sys

import flux.job
from jobs import submit, submit_many, wait_inactive

#: Jobs held, then cancelled and released with interleaved futures.
JOBS = 300


def open_descriptors():
    return len(os.listdir("/proc/self/fd"))


def held_jobs(handle, gate, count):
    jobs = submit_many(handle, count, urgency=0)
    for answer in gate.wait_all(gate.hold_async(j, "bb") for j in jobs):
        assert answer["state"] == "pending"
    return jobs


#: In a process of its own, so that nothing else opens or frees
#: descriptors meanwhile: N live futures waited one by one with get().
GET_EACH = """
import os, sys
import flux_epilog_gate, flux
h = flux.Flux()
before = len(os.listdir("/proc/self/fd"))
futures = [h.rpc("job-manager.epilog-gate.list", {}) for _ in range(int(sys.argv[1]))]
waited = 0
for future in futures:
    waited += not future.is_ready()
    future.get()
print(waited, len(os.listdir("/proc/self/fd")) - before)
"""


def test_get_on_many_live_futures_keeps_one_descriptor_each(instance):
    """The cause: it is the pattern, one reactor per waited future."""
    out = subprocess.run(
        [sys.executable, "-c", GET_EACH, str(JOBS)],
        env=instance.env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    waited, grown = map(int, out.split())
    assert waited > JOBS // 2 and grown >= waited


def test_wait_all_of_interleaved_cancels_and_releases(instance, no_leftover_holds):
    handle = instance.handle()
    from flux_epilog_gate import EpilogGate

    gate = EpilogGate(handle)
    jobs = held_jobs(handle, gate, JOBS)
    before = open_descriptors()
    futures = []
    for jobid in jobs:
        futures.append(flux.job.cancel_async(handle, jobid))
        futures.append(gate.release_async(jobid, "bb"))
    results = gate.wait_all(futures)
    assert open_descriptors() - before < 10
    assert not [r for r in results if isinstance(r, OSError)]
    # Each release answered: the hold was cancelled while pending, or
    # (cancel first) released once active.
    assert all("released" in r for r in results[1::2])
    for jobid in jobs[-3:]:
        wait_inactive(handle, jobid)
    assert gate.list() == []


def test_release_many_answers_each_hold_in_order(instance, no_leftover_holds):
    handle = instance.handle()
    from flux_epilog_gate import EpilogGate

    gate = EpilogGate(handle)
    jobs = held_jobs(handle, gate, 3)
    unknown = 123456789
    answers = gate.release_many([(jobs[0], "bb"), (unknown, "bb"), (jobs[2], "x")])
    assert answers[0] == {"released": True}
    assert isinstance(answers[1], OSError) and "unknown job" in answers[1].strerror
    assert isinstance(answers[2], OSError) and "has no hold x" in answers[2].strerror
    for jobid in jobs:
        flux.job.cancel(handle, jobid)


def test_wait_all_of_nothing_returns_at_once(gate):
    assert gate.wait_all([]) == []


def test_hold_takes_a_flux_standard_duration(instance, gate, no_leftover_holds):
    jobid = submit(instance.handle(), urgency=0)
    gate.hold(jobid, "fsd", timeout="1.5h")
    assert gate.list(jobid)[0]["timeout"] == 5400.0
    flux.job.cancel(instance.handle(), jobid)
