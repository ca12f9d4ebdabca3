"""Guests and dependency holds: as for epilog holds, a guest may not hold
or release, and sees the dependency holds of its own jobs only."""

import errno

import flux.job
import pytest
from flux.job import JobspecV1
from guests import GUEST_A, GUEST_B, guest, open_as, sign_none, submit_as
from jobs import wait_event, wait_inactive

from flux_epilog_gate import EpilogGate

DEPEND = "depend"


def submit_in_depend_as(uri, userid, holder):
    """Submit a job owned by ``userid`` kept in DEPEND by an afterany
    dependency on job ``holder``."""
    spec = JobspecV1.from_command(["true"])
    spec.setattr("system.dependencies", [{"scheme": "afterany", "value": str(holder)}])
    return flux.job.submit(
        open_as(uri, userid), sign_none(spec.dumps(), userid), pre_signed=True
    )


@pytest.fixture(scope="module")
def depend_jobs(inst):
    owner = EpilogGate(inst.handle())
    # A guest may depend on its own jobs only.
    holders = [submit_as(inst.uri, GUEST_A), submit_as(inst.uri, GUEST_B)]
    ids = {
        "a": submit_in_depend_as(inst.uri, GUEST_A, holders[0]),
        "b": submit_in_depend_as(inst.uri, GUEST_B, holders[1]),
    }
    for jobid in ids.values():
        wait_event(inst.handle(), jobid, "dependency-add")
    owner.hold(ids["a"], "a-create", point=DEPEND)
    owner.hold(ids["b"], "b-create", point=DEPEND)
    yield owner, ids
    for jobid, description in ((ids["a"], "a-create"), (ids["b"], "b-create")):
        owner.release(jobid, description)
    for holder in holders:
        flux.job.cancel(inst.handle(), holder)
    for jobid in (*holders, *ids.values()):
        wait_inactive(inst.handle(), jobid, timeout=30)


def test_guest_depend_hold_refused(inst, depend_jobs):
    owner, ids = depend_jobs
    before = owner.list()
    with pytest.raises(OSError) as info:
        guest(inst, GUEST_A).hold(ids["a"], "g-create", point=DEPEND)
    assert info.value.errno == errno.EPERM
    with pytest.raises(OSError) as info:
        guest(inst, GUEST_A).release(ids["a"], "a-create")
    assert info.value.errno == errno.EPERM
    assert owner.list() == before


def test_guest_lists_and_watches_own_depend_holds_only(inst, depend_jobs):
    _, ids = depend_jobs
    mine = guest(inst, GUEST_A)
    listed = mine.list()
    assert [(h["id"], h["description"], h["point"]) for h in listed] == [
        (ids["a"], "a-create", DEPEND)
    ]
    watched = guest(inst, GUEST_A).watch_async(points=[DEPEND]).get()
    assert (watched["id"], watched["point"]) == (ids["a"], DEPEND)
