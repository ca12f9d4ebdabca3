"""A held job that flux-core drops as a new job-manager replays the KVS
loses its holds, and each is reported: logged at level error by name,
counted in ``lost``, answered ``released: false`` with a reason that says
why, and (watch ``lost``) delivered once to a service that watches.

flux-core drops a job whose eventlog replays to no valid state (``job
state (NEW) is invalid after replay``: a checkpoint taken between
ingest's ``submit`` and the job-manager's ``validate``) or that has no
eventlog, and moves its KVS directory to ``job-lost+found``.  A crash
makes the first by chance; here the job's eventlog is rewritten to its
``submit`` alone (or removed) while the job-manager runs, which leaves
its memory alone, and the next job-manager replays that.
"""

import json

import pytest
from jobs import dmesg, query, submit

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.jobid import f58

#: How the eventlog of the held job is damaged: what flux-core says.
DAMAGE = {
    "submit-only": "job state (NEW) is invalid after replay",
    "no-eventlog": "No such file or directory",
}


def damage(inst, jobid, how):
    key = f"{inst.flux('job', 'id', '--to=kvs', str(jobid)).stdout.strip()}.eventlog"
    if how == "no-eventlog":
        inst.flux("kvs", "unlink", key)
        return
    first = inst.flux("kvs", "get", key).stdout.splitlines()[0]
    assert json.loads(first)["name"] == "submit"
    inst.flux("kvs", "put", "--raw", f"{key}=-", input=first + "\n")


def new_job_manager(inst, how):
    """A new job-manager replays the KVS: a module reload, or a restart
    of the instance."""
    if how == "module":
        inst.flux("module", "reload", "job-manager")
    else:
        inst.stop()
        inst.start()
    return inst.handle()


@pytest.mark.parametrize("how", ["module", "instance"])
@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_holds_of_a_job_dropped_at_restart_are_lost_loudly(new_instance, kind, how):
    inst = new_instance()
    handle = inst.handle()
    gate = EpilogGate(handle)
    dropped = submit(handle, urgency=0)
    kept = submit(handle, urgency=0)
    gate.hold(dropped, "bb")
    gate.hold(dropped, "setup", point="prolog")
    gate.hold(kept, "bb")
    damage(inst, dropped, kind)

    handle = new_job_manager(inst, how)
    gate = EpilogGate(handle)
    assert dmesg(inst, f"{f58(dropped)} not replayed"), "the job was not dropped"
    assert any(DAMAGE[kind] in line for line in dmesg(inst, "not replayed"))
    assert [(h["id"], h["description"]) for h in gate.list()] == [(kept, "bb")]
    assert query(inst)["counters"]["lost"] == 2
    for description in ("bb", "setup"):
        (line,) = dmesg(inst, f"hold {description} of job {f58(dropped)} was lost")
        assert ".err[" in line and "job-lost+found" in line, line
        answer = gate.release(dropped, description)
        assert answer["released"] is False
        assert answer["reason"].startswith("lost: "), answer
        assert "restart" in answer["reason"], answer
    assert dmesg(inst, "is not known") == []
    # Reported once: the next job-manager does not report them again.
    inst.flux("module", "reload", "job-manager")
    assert query(inst)["counters"]["lost"] == 0
    assert len(dmesg(inst, f"hold bb of job {f58(dropped)} was lost")) == 1
