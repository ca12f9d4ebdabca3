"""The watch stream, and the example cleanup service built on it."""

import os
import signal
import subprocess
import sys
import threading
import time

import flux.job
import pytest
from jobs import (
    eventlog,
    names,
    query,
    submit,
    wait_event,
    wait_inactive,
    wait_until,
)

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holdlog import MARKER

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


pytestmark = pytest.mark.usefixtures("no_leftover_holds")


def watchers(instance):
    return query(instance)["counters"]["watchers"]


def active_hold(handle, gate, description):
    jobid = submit(handle, urgency=0)
    gate.hold(jobid, description)
    flux.job.cancel(handle, jobid)
    wait_event(handle, jobid, "epilog-start")
    return jobid


def next_activation(future, timeout=10.0):
    future.wait_for(timeout)
    answer = future.get()
    future.reset()
    return answer


def test_watch_first_answers_holds_already_active(handle, gate):
    jobid = active_hold(handle, gate, "early")
    future = EpilogGate(handle).watch_async(["early"])
    answer = next_activation(future)
    assert (answer["id"], answer["description"], answer["ran"]) == (
        jobid,
        "early",
        False,
    )


def test_watch_answers_a_hold_when_it_becomes_active(handle, gate):
    future = EpilogGate(handle).watch_async(["later"])
    jobid = active_hold(handle, gate, "later")
    answer = next_activation(future)
    assert answer["id"] == jobid and answer["userid"] == os.getuid()


def test_watch_reports_that_a_job_ran(handle, gate):
    future = EpilogGate(handle).watch_async(["ran"])
    jobid = submit(handle, duration=0.1)
    gate.hold(jobid, "ran")
    assert next_activation(future) == {
        "id": jobid,
        "description": "ran",
        "userid": os.getuid(),
        "ran": True,
        "point": "epilog",
    }


def test_watch_with_descriptions_skips_other_holds(handle, gate):
    future = EpilogGate(handle).watch_async(["wanted"])
    active_hold(handle, gate, "unwanted")
    jobid = active_hold(handle, gate, "wanted")
    assert next_activation(future)["id"] == jobid


def test_watch_that_is_not_streaming_is_eproto(handle):
    with pytest.raises(OSError) as exc:
        handle.rpc("job-manager.epilog-gate.watch", {}).get()
    assert exc.value.errno == 71 and "streaming" in exc.value.strerror


def test_disconnected_watcher_is_dropped(instance):
    before = watchers(instance)
    code = (
        "import flux; from flux_epilog_gate import EpilogGate;"
        "f = EpilogGate(flux.Flux()).watch_async(); import sys; sys.stdin.read()"
    )
    # The watcher lives until its stdin closes, not for a fixed time: a
    # loaded machine must not let it go before it was seen.
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=instance.env, stdin=subprocess.PIPE
    )
    deadline = time.time() + 10
    while watchers(instance) == before and time.time() < deadline:
        time.sleep(0.1)
    assert watchers(instance) == before + 1
    proc.stdin.close()
    proc.wait(timeout=20)
    deadline = time.time() + 10
    while watchers(instance) != before and time.time() < deadline:
        time.sleep(0.1)
    assert watchers(instance) == before


def test_example_service_tears_down_and_releases(instance, handle, tmp_path):
    service = subprocess.Popen(
        [
            sys.executable,
            os.path.join(REPO, "examples", "bb_service.py"),
            "--root",
            str(tmp_path),
            "--count",
            "1",
        ],
        env=instance.env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert service.stdout.readline().strip() == "bb: ready"
    jobid = submit(handle, duration=0.2, **{"system.bb": 1})
    wait_inactive(handle, jobid)
    service.wait(timeout=20)
    events = eventlog(handle, jobid)
    finish = [e for e in events if e.name == "epilog-finish"]
    assert [e.context for e in finish] == [
        {"description": "bb", "status": 0, MARKER: True}
    ]
    assert names(events).index("epilog-finish") < names(events).index("clean")
    assert list(tmp_path.iterdir()) == []


def test_watch_iterator_carries_on_across_plugin_reload(new_instance, plugin):
    inst = new_instance()
    got = []

    def consume():
        for hold in EpilogGate(inst.handle()).watch(["reload"]):
            got.append(hold)
            return

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    wait_until(lambda: query(inst)["counters"]["watchers"] == 1)
    inst.flux("jobtap", "remove", "epilog-gate.so")
    # Away a while: the iterator's stream is ended, and it must watch
    # again until the plugin is back (it retries every half second).
    time.sleep(1.0)
    inst.flux("jobtap", "load", plugin)
    handle = inst.handle()
    jobid = active_hold(handle, EpilogGate(handle), "reload")
    thread.join(timeout=20)
    assert [hold["id"] for hold in got] == [jobid]
    EpilogGate(handle).release(jobid, "reload")


def test_watch_interrupted_ends_with_status_130_and_no_traceback(instance):
    """Control-C: the documented 130 as a shell reports it (flux-core's
    bindings let SIGINT end a blocking get() with the default action)."""
    command = [
        sys.executable,
        "-c",
        "import sys; from flux_epilog_gate.client.cli import main; sys.exit(main())",
        "watch",
    ]
    before = watchers(instance)
    proc = subprocess.Popen(
        command,
        env=instance.env,
        cwd="/",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 15
    while watchers(instance) == before:
        assert time.time() < deadline, "watch did not start"
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=15)
    assert proc.returncode in (130, -signal.SIGINT), proc.returncode
    assert "Traceback" not in err
