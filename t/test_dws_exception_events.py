"""dws.so hears a rabbit job's fatal exceptions during its epilog from the
instance's ``job-exception`` events, which the job-manager publishes for
every exception a request or a plugin raises.  Anyone with the owner's
role may publish such an event too: one the job-manager did not publish
(the job's eventlog has no exception), or one malformed, changes
nothing; the job's real exception then still asks the service to tear
down, once."""

import tempfile

import pytest
from dwsfake import DW, FakeDws, contexts
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis_settings import bounded
from jobs import Quiet, described, eventlog, submit, wait_event, wait_inactive
from jsonstrategies import ANY_JSON, SCALARS

from flux_epilog_gate.paths import plugin_path
from flux_epilog_gate.testing import Instance

BOUNDED = bounded(15)


@pytest.fixture(scope="module")
def live():
    with tempfile.TemporaryDirectory(prefix="dws-exc-") as tmp:
        with Instance(cores=8, plugin=plugin_path("dws")) as inst:
            service = FakeDws(inst, tmp, "--post-run-hang")
            try:
                yield Quiet((inst, inst.handle(), service))
            finally:
                service.stop()


#: What a forged event may carry besides a well-formed one for the job.
FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "id": SCALARS | st.integers(0, 2**64),
        "type": SCALARS,
        "severity": SCALARS | st.integers(-1, 8),
        "note": ANY_JSON,
    },
)


@BOUNDED
@given(forged=st.lists(FIELDS | ANY_JSON, max_size=4), kind=st.text(max_size=12))
@example(forged=[], kind="cancel")
def test_only_the_jobs_own_exception_tears_its_epilog_down(live, forged, kind):
    inst, h, service = live
    jobid = submit(h, duration=0.1, **DW)
    wait_event(h, jobid, "epilog-start", match=described("dws-epilog"))
    # One well-formed and fatal, for this very job: not the job-manager's.
    for payload in [{"id": jobid, "type": kind or "x", "severity": 0}, *forged]:
        h.event_send("job-exception", payload)
    # Published after those, the real one comes after them too.
    inst.flux("job", "raise", "--type=cancel", str(jobid), "tear it down")
    service.wait(lambda: {"jobid": jobid} in service.requests("dws.teardown"))
    wait_inactive(h, jobid)
    assert service.requests("dws.teardown").count({"jobid": jobid}) == 1
    events = eventlog(h, jobid)
    assert [c["status"] for c in contexts(events, "epilog-finish", "dws-epilog")] == [0]
    assert [e.context["type"] for e in events if e.name == "exception"] == ["cancel"]


def test_reloads_leave_one_teardown_per_exception(live):
    # Each load subscribes the job-manager to job-exception again; an
    # exception still reaches the loaded plugin once.
    inst, h, service = live
    jobid = submit(h, duration=0.1, **DW)
    wait_event(h, jobid, "epilog-start", match=described("dws-epilog"))
    for _ in range(3):
        inst.flux("jobtap", "remove", "dws.so")
        inst.flux("jobtap", "load", plugin_path("dws"))
    inst.flux("job", "raise", "--type=cancel", str(jobid), "after reloads")
    wait_inactive(h, jobid)
    assert service.requests("dws.teardown").count({"jobid": jobid}) == 1
