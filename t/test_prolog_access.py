"""Guests and prolog holds: as for epilog holds, a guest may not hold or
release, and sees the prolog holds of its own jobs only."""

import errno

import pytest
from guests import GUEST_A, GUEST_B, guest, submit_as

from flux_epilog_gate import EpilogGate

PROLOG = "prolog"


@pytest.fixture(scope="module")
def prolog_jobs(inst):
    owner = EpilogGate(inst.handle())
    ids = {"a": submit_as(inst.uri, GUEST_A), "b": submit_as(inst.uri, GUEST_B)}
    owner.hold(ids["a"], "a-setup", point=PROLOG)
    owner.hold(ids["b"], "b-setup", point=PROLOG)
    yield owner, ids
    for jobid, description in ((ids["a"], "a-setup"), (ids["b"], "b-setup")):
        owner.release(jobid, description)


def test_guest_prolog_hold_refused(inst, prolog_jobs):
    owner, ids = prolog_jobs
    before = owner.list()
    with pytest.raises(OSError) as info:
        guest(inst, GUEST_A).hold(ids["a"], "g-setup", point=PROLOG)
    assert info.value.errno == errno.EPERM
    with pytest.raises(OSError) as info:
        guest(inst, GUEST_A).release(ids["a"], "a-setup")
    assert info.value.errno == errno.EPERM
    assert owner.list() == before


def test_guest_lists_own_prolog_holds_only(inst, prolog_jobs):
    _, ids = prolog_jobs
    listed = guest(inst, GUEST_A).list()
    assert [(h["id"], h["description"], h["point"]) for h in listed] == [
        (ids["a"], "a-setup", PROLOG)
    ]
