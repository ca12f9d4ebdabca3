"""Who may do what: hold and release are for the instance owner only; a
guest lists and watches holds on its own jobs only.

How guests are simulated: guests.py.
"""

import errno
import os
import subprocess
import sys

import flux
import flux.job
import pytest
from guests import GUEST_A, GUEST_B, GUEST_NONE, guest, submit_as
from jobs import eventlog, submit, wait_event

from flux_epilog_gate import EpilogGate

#: The installed command line, run by the interpreter running the tests
#: (from "/", so that the package is not imported from the source tree).
CLI = [
    sys.executable,
    "-c",
    "import sys; from flux_epilog_gate.client.cli import main; sys.exit(main())",
]


@pytest.fixture(scope="module")
def owner(inst):
    return EpilogGate(inst.handle())


@pytest.fixture(scope="module")
def jobs(inst, owner):
    """Jobs of the owner and of two guests, each with holds (pending)."""
    handle = owner.handle
    ids = {
        "owner": submit(handle, urgency=0),
        "a": submit_as(inst.uri, GUEST_A),
        "b": submit_as(inst.uri, GUEST_B),
    }
    owner.hold(ids["owner"], "own-1")
    owner.hold(ids["a"], "a-1")
    owner.hold(ids["a"], "a-2", timeout=600)
    owner.hold(ids["b"], "b-1")
    yield ids
    for jobid in ids.values():
        try:
            flux.job.cancel(handle, jobid)
        except OSError:
            pass


def table(gate):
    return sorted((h["id"], h["description"], h["state"]) for h in gate.list())


def test_guest_jobs_belong_to_guests(owner, jobs):
    """The simulated submission really gives the guests their jobs."""
    for key, userid in (("a", GUEST_A), ("b", GUEST_B), ("owner", os.getuid())):
        submitted = eventlog(owner.handle, jobs[key])[0]
        assert submitted.name == "submit" and submitted.context["userid"] == userid
    by_job = {(h["id"], h["description"]): h["userid"] for h in owner.list()}
    assert by_job[(jobs["a"], "a-1")] == GUEST_A
    assert by_job[(jobs["b"], "b-1")] == GUEST_B


@pytest.mark.parametrize("whose", ["owner", "a"])
def test_guest_hold_refused(inst, owner, jobs, whose):
    before = table(owner)
    gate = guest(inst, GUEST_A)
    for description, timeout in (("g-new", None), ("a-1", None), ("g-t", 5)):
        with pytest.raises(OSError) as info:
            gate.hold(jobs[whose], description, timeout=timeout)
        assert info.value.errno == errno.EPERM
        assert "owner" in str(info.value)
    assert table(owner) == before


@pytest.mark.parametrize("whose", ["owner", "a"])
def test_guest_release_refused(inst, owner, jobs, whose):
    before = table(owner)
    gate = guest(inst, GUEST_A)
    description = {"owner": "own-1", "a": "a-1"}[whose]
    for desc, status in ((description, 0), (description, 1), ("no-such", 0)):
        with pytest.raises(OSError) as info:
            gate.release(jobs[whose], desc, status=status)
        assert info.value.errno == errno.EPERM
    assert table(owner) == before


def test_guest_release_of_active_hold_refused(inst, owner):
    """An active hold on the guest's own job: the guest cannot release it,
    it keeps holding clean, and the owner can."""
    handle = owner.handle
    jobid = submit_as(inst.uri, GUEST_A)
    owner.hold(jobid, "active-1")
    flux.job.cancel(handle, jobid)
    wait_event(handle, jobid, "epilog-start")
    with pytest.raises(OSError) as info:
        guest(inst, GUEST_A).release(jobid, "active-1")
    assert info.value.errno == errno.EPERM
    assert [h["state"] for h in owner.list(jobid)] == ["active"]
    assert "epilog-finish" not in [e.name for e in eventlog(handle, jobid)]
    assert owner.release(jobid, "active-1") == {"released": True}
    wait_event(handle, jobid, "clean")


def test_guest_lists_own_jobs_only(inst, owner, jobs):
    everything = table(owner)
    assert (jobs["owner"], "own-1", "pending") in everything

    a = guest(inst, GUEST_A)
    holds = a.list()
    assert sorted((h["id"], h["description"]) for h in holds) == [
        (jobs["a"], "a-1"),
        (jobs["a"], "a-2"),
    ]
    assert {h["userid"] for h in holds} == {GUEST_A}
    assert a.list(jobs["a"]) == owner.list(jobs["a"])

    b = guest(inst, GUEST_B)
    assert [(h["id"], h["description"]) for h in b.list()] == [(jobs["b"], "b-1")]
    assert guest(inst, GUEST_NONE).list() == []
    # A handle with the owner's userid but only the user role is no owner
    # for hold, but its own (owner's) jobs are its own.
    same = guest(inst, os.getuid())
    with pytest.raises(OSError) as info:
        same.hold(jobs["owner"], "x")
    assert info.value.errno == errno.EPERM
    assert all(h["userid"] == os.getuid() for h in same.list())
    assert table(owner) == everything


def test_guest_list_of_another_users_job_is_unknown_job(inst, owner, jobs):
    """To a guest, someone else's job is an unknown job (ENOENT), as an
    unknown job id is: not an empty list."""
    a = guest(inst, GUEST_A)
    for other in (jobs["owner"], jobs["b"]):
        with pytest.raises(OSError) as info:
            a.list(other)
        assert info.value.errno == errno.ENOENT
        assert "unknown job" in str(info.value)
    # Its own job without holds is no error.
    bare = submit_as(inst.uri, GUEST_A)
    try:
        assert a.list(bare) == []
    finally:
        flux.job.cancel(owner.handle, bare)


def test_guest_cli_list_of_another_users_job_exits_1(inst, owner, jobs):
    env = dict(inst.env, FLUX_HANDLE_USERID=str(GUEST_A), FLUX_HANDLE_ROLEMASK="0x2")
    done = subprocess.run(
        CLI + ["list", "--json", str(jobs["a"]), str(jobs["b"])],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert done.returncode == 1, done
    assert f"unknown job {flux.job.JobID(jobs['b']).f58}" in done.stderr
    assert "Traceback" not in done.stderr
    # The guest's own job is still listed; the other's holds are not.
    assert "a-1" in done.stdout and "b-1" not in done.stdout


def test_guest_watch_sees_own_jobs_only(inst, owner):
    handle = owner.handle
    mine = submit(handle, urgency=0)
    other = submit_as(inst.uri, GUEST_B)
    theirs = submit_as(inst.uri, GUEST_A)
    for jobid in (mine, other, theirs):
        owner.hold(jobid, "w-1")
    watcher = guest(inst, GUEST_A).watch_async()
    # Activate the holds of the owner's and the other guest's jobs first.
    for jobid in (mine, other):
        flux.job.cancel(handle, jobid)
        wait_event(handle, jobid, "epilog-start")
    flux.job.cancel(handle, theirs)
    watcher.wait_for(15)
    first = watcher.get()
    assert first["id"] == theirs and first["userid"] == GUEST_A
    assert first["description"] == "w-1" and first["ran"] is False
    # A new guest watcher is sent the active holds of its own jobs only.
    again = guest(inst, GUEST_A).watch_async()
    again.wait_for(15)
    assert again.get()["id"] == theirs
    for jobid in (mine, other, theirs):
        owner.release(jobid, "w-1")
        wait_event(handle, jobid, "clean")


def test_guest_cli_hold_refused(inst, owner, jobs):
    env = dict(inst.env, FLUX_HANDLE_USERID=str(GUEST_A), FLUX_HANDLE_ROLEMASK="0x2")
    before = table(owner)
    for argv in (
        CLI + ["hold", str(jobs["a"]), "cli-x"],
        CLI + ["release", str(jobs["a"]), "a-1"],
    ):
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=60, cwd="/"
        )
        assert done.returncode != 0, done
        assert "owner" in done.stderr or "not permitted" in done.stderr, done.stderr
    done = subprocess.run(
        CLI + ["list", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd="/",
    )
    assert "a-1" in done.stdout and "own-1" not in done.stdout
    assert table(owner) == before


def test_guest_snapshot_refused(inst, owner, jobs):
    gate = guest(inst, GUEST_A)
    with pytest.raises(OSError) as info:
        gate.snapshot()
    assert info.value.errno == errno.EPERM and "owner" in str(info.value)
    assert owner.snapshot()["bytes"] > 0
