"""A ``resource-update`` sent again (or crossing the first) for a rabbit
job that another dependency keeps in DEPEND is refused and changes
nothing.

Its state alone let the request through: each one rewrote the job's
jobspec, joining its constraints with the new ``exclude`` once more
(``{"and": [{"and": [A, B]}, C]}``), and only then failed, as the job's
``dws-create`` was released by the first.  On a real instance with
dws.so and t/dws_service.py."""

import errno

import pytest
from dwsfake import DW, SLOT, FakeDws
from jobs import described, eventlog, named, settle, submit, wait_event

from flux_epilog_gate.paths import plugin_path
from flux_epilog_gate.testing import Instance


@pytest.fixture(scope="module")
def inst(tmp_path_factory):
    with Instance(cores=8, plugin=plugin_path("dws")) as inst:
        service = FakeDws(inst, str(tmp_path_factory.mktemp("dws")), "--create-hang")
        # Never runs: the rabbit jobs depend on it and stay in DEPEND.
        inst.blocker = submit(inst.handle(), urgency=0)
        yield inst
        service.stop()


def blocked_rabbit_job(inst):
    h = inst.handle()
    after = [{"scheme": "afterany", "value": str(inst.blocker)}]
    jobid = submit(h, **DW, **{"system.dependencies": after})
    wait_event(h, jobid, "dependency-add", match=described("dws-create"))
    return jobid


def update(h, jobid, n):
    exclude = {"properties": [f"p{n}"]}
    return h.rpc(
        "job-manager.dws.resource-update",
        {"id": jobid, "resources": SLOT, "exclude": exclude},
    )


def answer(future):
    try:
        return future.get()
    except OSError as exc:
        return exc.errno, exc.strerror


@pytest.mark.parametrize("crossing", [True, False], ids=["crossing", "again"])
def test_an_update_of_a_job_already_updated_changes_nothing(inst, crossing):
    h = inst.handle()
    jobid = blocked_rabbit_job(inst)
    if crossing:
        answers = [answer(f) for f in [update(h, jobid, n) for n in range(3)]]
    else:
        answers = [answer(update(h, jobid, n)) for n in range(3)]
    assert answers[0] is None
    for errnum, text in answers[1:]:
        assert errnum == errno.ENOENT
        assert "dws-create of job" in text and "was released already" in text
    removed = wait_event(h, jobid, "dependency-remove", match=described("dws-create"))
    # A second update would be posted right after the removal.
    events = settle(h, jobid, "jobspec-update", since=removed.timestamp)
    updates = named(events, "jobspec-update")
    assert [u.context["attributes.system.constraints"] for u in updates] == [
        {"properties": ["p0"]}
    ]
    # Still in DEPEND, for the other dependency.
    assert named(eventlog(h, jobid), "depend") == []
