"""The jobtap runtime's API for plugins that drive jobs, under a real
instance: outbound RPCs and their continuations, a job topic's
arguments, lookups of other jobs, jobspec updates, dependencies, events,
exceptions, subscriptions, services, and jobspec-key filters in C.

t/probe_plugin.py is the plugin; it is built here with the runtime's
build helper, as a plugin author builds one."""

import errno
import json
import os
import subprocess
import sys
import time

import flux
import flux.job
import pytest
from conftest import restart
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jobs import eventlog, names, submit, wait_event, wait_inactive

from flux_epilog_gate.testing import Instance

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def probe_so(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("probe")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "flux_epilog_gate.jobtap.build",
            "probe",
            "probe_plugin:Probe",
            str(outdir),
            HERE,
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def inst(probe_so):
    with Instance(cores=8, plugin=probe_so) as instance:
        yield instance


@pytest.fixture(scope="module")
def h(inst):
    return inst.handle()


def rpc(h, method, payload=None):
    return h.rpc(f"job-manager.probe.{method}", payload or {}).get()


def held_job(h, probe="x", **attrs):
    """A job held in DEPEND by the probe's dependency."""
    jobid = submit(h, **{"system.probe": probe}, **attrs)
    wait_event(h, jobid, "dependency-add", match=lambda c: c["description"] == "probe")
    return jobid


def test_service_is_named_after_the_plugin(h):
    assert rpc(h, "echo", {"a": [1, 2]}) == {"echo": {"a": [1, 2]}}
    with pytest.raises(OSError) as info:
        rpc(h, "missing")
    assert "nothing here" in str(info.value)


def test_only_jobs_with_the_required_key_enter_python(h):
    before = len(rpc(h, "calls")["depend"])
    plain = submit(h)
    wait_inactive(h, plain)
    assert len(rpc(h, "calls")["depend"]) == before
    assert int(plain) not in rpc(h, "calls")["entered"]
    jobid = held_job(h, probe={"deep": True})
    calls = rpc(h, "calls")["depend"]
    assert len(calls) == before + 1
    call = calls[-1]
    assert call["id"] == jobid and call["probe"] == {"deep": True}
    assert call["userid"] == os.getuid()
    # A job topic's handler gets every argument of the call.
    assert {"id", "jobspec", "state", "userid"} <= set(call["keys"])
    rpc(h, "release", {"id": jobid})
    wait_inactive(h, jobid)


def test_dependency_holds_until_removed(h):
    jobid = held_job(h)
    time.sleep(0.3)
    assert "alloc" not in names(eventlog(h, jobid))
    rpc(h, "release", {"id": jobid})
    removed = wait_event(h, jobid, "dependency-remove")
    assert removed.context["description"] == "probe"
    wait_inactive(h, jobid)


def test_lookup_of_another_job(h):
    jobid = held_job(h, probe=7)
    job = rpc(h, "lookup", {"id": jobid})
    assert job["state"] == flux.constants.FLUX_JOB_STATE_DEPEND
    assert job["userid"] == os.getuid()
    assert job["jobspec"]["attributes"]["system"]["probe"] == 7
    with pytest.raises(OSError) as info:
        rpc(h, "lookup", {"id": 12345})
    assert info.value.errno == 2
    rpc(h, "release", {"id": jobid})
    wait_inactive(h, jobid)


def test_jobspec_update_of_a_job_in_depend(h):
    jobid = held_job(h)
    update = {"attributes.system.constraints": {"properties": ["foo"]}}
    # An unsatisfiable constraint: the update must reach the scheduler.
    rpc(h, "release", {"id": jobid, "update": update})
    event = wait_event(h, jobid, "jobspec-update")
    assert event.context == update
    current = flux.constants.FLUX_JOB_LOOKUP_CURRENT
    info = h.rpc(
        "job-info.lookup", {"id": jobid, "keys": ["jobspec"], "flags": current}
    )
    spec = json.loads(info.get()["jobspec"])
    assert spec["attributes"]["system"]["constraints"] == {"properties": ["foo"]}
    wait_event(h, jobid, "exception")
    wait_inactive(h, jobid)


def test_jobspec_update_refused_for_a_running_job_changes_nothing(h):
    jobid = submit(h, duration=30)
    wait_event(h, jobid, "start")
    with pytest.raises(OSError):
        rpc(h, "release", {"id": jobid, "update": {"attributes.system.x": 1}})
    assert "jobspec-update" not in names(eventlog(h, jobid))
    flux.job.cancel(h, jobid)
    wait_inactive(h, jobid)


def test_events_with_context_reach_a_subscribed_job(h):
    jobid = held_job(h)
    rpc(h, "post", {"id": jobid, "name": "probe-note", "context": {"n": [1, "a"]}})
    event = wait_event(h, jobid, "probe-note")
    assert event.context == {"n": [1, "a"]}
    rpc(h, "post", {"id": jobid, "name": "probe-bare"})
    assert wait_event(h, jobid, "probe-bare").context == {}
    events = rpc(h, "calls")["events"][str(int(jobid))]
    # Once, though the plugin subscribed twice.
    assert events == [{"name": "probe-note", "context": {"n": [1, "a"]}}]
    rpc(h, "release", {"id": jobid})
    wait_inactive(h, jobid)


@pytest.mark.parametrize("severity", [0, 1, 5])
def test_exceptions_of_any_type_and_severity(h, severity):
    jobid = held_job(h)
    rpc(
        h,
        "raise",
        {"id": jobid, "type": "probe-type", "severity": severity, "note": "why"},
    )
    event = wait_event(h, jobid, "exception")
    assert event.context["type"] == "probe-type"
    assert event.context["severity"] == severity
    assert event.context["note"] == "why"
    # The subscription brought the exception to Python.
    seen = rpc(h, "calls")["events"][str(int(jobid))]
    assert any(e["context"].get("type") == "probe-type" for e in seen)
    if severity == 0:
        wait_inactive(h, jobid)
    else:
        rpc(h, "release", {"id": jobid})
        wait_inactive(h, jobid)


def test_rpc_continuation_answers_later(h):
    answer = rpc(h, "call", {"topic": "job-manager.probe.echo", "payload": {"x": 1}})
    assert answer == {"answer": {"echo": {"x": 1}}}


def test_rpc_error_reaches_the_continuation(h):
    with pytest.raises(OSError) as info:
        rpc(h, "call", {"topic": "no-such-service.anything", "payload": {}})
    assert info.value.errno == 38  # ENOSYS


def test_exception_in_a_continuation_is_logged_not_fatal(inst, h):
    rpc(h, "call-and-fail", {"topic": "job-manager.probe.echo"})
    deadline = time.time() + 10
    while rpc(h, "answers") != {"job-manager.probe.echo": "reached"}:
        assert time.time() < deadline
        time.sleep(0.05)
    log = inst.flux("dmesg").stdout
    assert "continuation fails on purpose" in log
    assert "answer to job-manager.probe.echo" in log
    # The job-manager lives on.
    assert rpc(h, "echo", {"ok": 1}) == {"echo": {"ok": 1}}


def test_jobmanager_id_is_kept_by_a_job_manager_and_new_with_the_next(probe_so):
    # Plugins that share state per job-manager key it so: a plugin
    # removed and loaded sees the same id, a module reload a new one.
    with Instance(cores=2, plugin=probe_so) as inst:
        h = inst.handle()
        first = rpc(h, "jobmanager-id")["id"]
        assert first > 0 and rpc(h, "jobmanager-id")["id"] == first
        inst.flux("jobtap", "remove", os.path.basename(probe_so))
        inst.flux("jobtap", "load", probe_so)
        assert rpc(h, "jobmanager-id")["id"] == first
        h = restart(inst, "module")
        assert rpc(h, "jobmanager-id")["id"] not in (0, first)


def test_a_switched_topic_reaches_python_only_while_switched_on(h):
    # A marked job's call of a topic declared switched=True costs it no
    # trip into Python until the plugin switches the topic on.
    jobid = held_job(h)
    key = str(int(jobid))
    rpc(h, "post", {"id": jobid, "name": "probe-switched", "context": {"n": 1}})
    wait_event(h, jobid, "probe-switched", match=lambda c: c == {"n": 1})
    rpc(h, "switch", {"on": True})
    rpc(h, "post", {"id": jobid, "name": "probe-switched", "context": {"n": 2}})
    wait_event(h, jobid, "probe-switched", match=lambda c: c == {"n": 2})
    rpc(h, "switch", {"on": False})
    rpc(h, "post", {"id": jobid, "name": "probe-switched", "context": {"n": 3}})
    wait_event(h, jobid, "probe-switched", match=lambda c: c == {"n": 3})
    seen = rpc(h, "calls")["events"].get(key, [])
    assert [e for e in seen if e["name"] == "probe-switched"] == [
        {"name": "probe-switched", "context": {"n": 2}}
    ]
    rpc(h, "release", {"id": jobid})
    wait_inactive(h, jobid)


# KVS commits made and answered by the runtime's C (kvs_commit).

_commits = iter(range(1, 1 << 30))


def commit(h, key, value, **options):
    return h.rpc(
        "job-manager.probe.commit",
        dict(n=next(_commits), key=key, value=value, **options),
    )


def kvs_raw(inst, key):
    return inst.flux("kvs", "get", "--raw", key).stdout


def test_kvs_commit_puts_and_appends(inst, h):
    assert commit(h, "probe.c.log", "first\n").get() == {}
    assert commit(h, "probe.c.log", "second\n", append=True, sync=True).get() == {}
    assert kvs_raw(inst, "probe.c.log") == "first\nsecond\n"
    # A put replaces what was there.
    assert commit(h, "probe.c.log", "third\n").get() == {}
    assert kvs_raw(inst, "probe.c.log") == "third\n"


@pytest.mark.parametrize(
    "shape,errnum",
    [("directory", errno.EISDIR), ("symlink-loop", errno.EOPNOTSUPP)],
)
def test_kvs_commit_failure_reaches_the_callback_as_an_oserror(inst, h, shape, errnum):
    key = f"probe.c.{shape}"
    if shape == "directory":
        inst.flux("kvs", "mkdir", key)
    else:
        inst.flux("kvs", "link", key, key)
    answer = commit(h, key, "x\n", append=True).get()
    assert answer == {"errno": errnum, "text": os.strerror(errnum)}


@pytest.mark.parametrize(
    "key", ['probe.c.q"uote', "probe.c.back\\slash", "probe.c.t\tab", "probe.c.ünï"]
)
def test_kvs_commit_of_a_key_json_must_escape(inst, h, key):
    # The runtime writes the commit's JSON itself (runtime_commit_payload).
    assert commit(h, key, "k\n", append=True, sync=True).get() == {}
    assert kvs_raw(inst, key) == "k\n"


def test_kvs_commit_that_cannot_be_sent_raises_and_never_calls_back(h):
    n = next(_commits)
    future = h.rpc("job-manager.probe.commit", {"n": n, "key": "", "value": "x"})
    with pytest.raises(OSError) as info:
        future.get()
    assert info.value.errno == errno.EINVAL
    assert rpc(h, "commit-calls")[str(n)] == 0


def test_each_kvs_commit_calls_back_exactly_once(inst, h):
    first = next(_commits)
    futures = [
        h.rpc(
            "job-manager.probe.commit",
            {"n": first + i, "key": "probe.c.many", "value": f"{i}\n", "append": True},
        )
        for i in range(1, 201)
    ]
    for future in futures:
        assert future.get() == {}
    calls = rpc(h, "commit-calls")
    assert [calls[str(first + i)] for i in range(1, 201)] == [1] * 200
    lines = kvs_raw(inst, "probe.c.many").splitlines()
    assert sorted(lines, key=int) == [str(i) for i in range(1, 201)]


def test_exception_in_a_kvs_commit_callback_is_logged_not_fatal(inst, h):
    n = next(_commits)
    h.rpc(
        "job-manager.probe.commit",
        {"n": n, "key": "probe.c.fail", "value": "x", "fail": True},
    )
    deadline = time.time() + 30
    while rpc(h, "commit-calls").get(str(n)) != 1:
        assert time.time() < deadline
        time.sleep(0.05)
    log = inst.flux("dmesg").stdout
    assert "commit callback fails on purpose" in log
    assert "kvs commit" in log
    assert kvs_raw(inst, "probe.c.fail") == "x"
    assert rpc(h, "echo", {"ok": 1}) == {"echo": {"ok": 1}}


def test_plugin_removed_with_kvs_commits_in_flight(probe_so):
    # The commits' continuations are destroyed with the plugin instance:
    # none may run into it once it is gone.  The KVS carries out those
    # already sent; the next load commits again.
    with Instance(cores=2, plugin=probe_so) as inst:
        h = inst.handle()
        for round in range(3):
            first = next(_commits)
            for i in range(300):
                h.rpc(
                    "job-manager.probe.commit",
                    {
                        "n": first + i,
                        "key": "probe.c.inflight",
                        "value": f"{round}.{i}\n",
                        "append": True,
                        "sync": True,
                    },
                )
            # Behind the commits on the same connection.
            h.rpc("job-manager.jobtap", {"remove": os.path.basename(probe_so)}).get()
            inst.flux("jobtap", "load", probe_so)
        h = flux.Flux(inst.uri)
        assert commit(h, "probe.c.after", "y", sync=True).get() == {}
        assert kvs_raw(inst, "probe.c.after") == "y"
        lines = kvs_raw(inst, "probe.c.inflight").splitlines()
        assert lines and all(line.count(".") == 1 for line in lines)
        assert inst.alive()
        assert "uncaught" not in inst.flux("dmesg").stdout


_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"),
    max_size=40,
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.lists(st.tuples(st.booleans(), _text, st.booleans()), min_size=1, max_size=4))
def test_kvs_commit_writes_any_text(inst, h, writes):
    # Each write is (append, text, sync), in order from one plugin: the
    # key ends with what a model of put and append says.
    key = f"probe.c.any{next(_commits)}"
    expected = ""
    for append, text, sync in writes:
        assert commit(h, key, text, append=append, sync=sync).get() == {}
        expected = expected + text if append else text
    result = subprocess.run(
        ["flux", "kvs", "get", "--raw", key],
        capture_output=True,
        env=dict(os.environ, FLUX_URI=inst.uri),
    )
    assert result.returncode == 0 or expected == "", result.stderr
    assert result.stdout.decode("utf-8") == expected


def test_an_answered_future_is_freed_without_the_cyclic_collector(h):
    """A future frozen in flight (plugin/gcpolicy.py) would never be freed
    if only the collector could free it."""
    rpc(h, "let-go", {"topic": "job-manager.probe.echo", "key": "no.such.key"})
    want = {"let-go rpc": "answered", "let-go lookup": "answered"}
    deadline = time.time() + 10
    while not want.items() <= rpc(h, "answers").items():
        assert time.time() < deadline
        time.sleep(0.05)
    assert rpc(h, "gone") == {"rpc": True, "lookup": True}
