"""What a client can make the broker hold is bounded: a watcher that does
not read (watch-backlog) and requests waiting for the hold log
(max-pending).  Real instances; see t/watchload.py for the load."""

import errno
import json
import signal
import subprocess
import sys
import threading
import time

import flux
import flux.job
import pytest
from conftest import discard
from hypothesis import given, settings
from hypothesis import strategies as st
from jobs import query, submit, submit_many, wait_event
from watchload import run, wait_watchers

from flux_epilog_gate import EpilogGate

CLI = [
    sys.executable,
    "-c",
    "import sys; from flux_epilog_gate.client.cli import main; main()",
]
STOPPED = 30
JOBS, HOLDS = 25, 200


def test_stopped_watchers_are_ended_and_the_broker_stays_small(new_instance):
    """Item 6: watchers stopped with SIGSTOP while 5,000 holds become
    active.  Without a bound each queued every activation in the broker
    (+79 MiB for 50 of them, kept after they were killed); now each is
    ended past watch-backlog, with ENOBUFS naming it, while a reading
    watcher (the Python client) and the CLI get every activation."""
    inst = new_instance(plugin_conf={"max-holds": HOLDS, "watch-backlog": 1000})
    cli = subprocess.Popen(
        [*CLI, "watch", "--json", "-c", str(JOBS * HOLDS)],
        env=inst.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    threading.Thread(target=lambda: lines.extend(cli.stdout), daemon=True).start()
    wait_watchers(inst, 1)

    def cli_caught_up(count):
        deadline = time.monotonic() + 300
        while len(lines) < count and cli.poll() is None:
            assert time.monotonic() < deadline, "the CLI watcher fell behind"
            time.sleep(0.05)

    numbers, stopped, _ = run(
        inst, stopped=STOPPED, jobs=JOBS, holds=HOLDS, paced=cli_caught_up
    )
    print(json.dumps(numbers))
    try:
        assert numbers["reader_got"] == JOBS * HOLDS
        cli.wait(timeout=300)
        assert cli.returncode == 0, cli.stderr.read()
        assert len(set(lines)) == JOBS * HOLDS
        # Unbounded, 30 stopped watchers queue 30 x 5,000 responses (about
        # 45 MiB here); bounded, at most 256 each.
        assert numbers["rss_growth_mib"] < 20, numbers
        counters = query(inst)["counters"]
        assert counters["behind"] == STOPPED
        assert counters["watchers"] == 1  # the reader
    finally:
        for proc in stopped:
            proc.send_signal(signal.SIGCONT)
    for proc in stopped:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 1, out
        ended = out.splitlines()[-1]
        assert f"errno={errno.ENOBUFS}" in ended, ended
        assert "watch-backlog=1000" in ended and "fell behind" in ended
        # It was sent at most the window before it was ended.
        assert int(ended.split()[1]) <= 256


def activate(handle, gate, count, description="raw"):
    """``count`` jobs, each with one hold that becomes active."""
    ids = submit_many(handle, count, urgency=0)
    for jobid in ids:
        gate.hold(jobid, description)
        flux.job.cancel(handle, jobid)
    for jobid in ids:
        wait_event(handle, jobid, "epilog-start")
    return ids


def test_a_raw_watcher_that_never_acknowledges_is_ended(new_instance):
    inst = new_instance(plugin_conf={"watch-backlog": 5})
    handle = inst.handle()
    gate = EpilogGate(handle)
    future = gate.watch_async(["raw"])
    wait_watchers(inst, 1)
    ids = activate(handle, gate, 8)
    got = []
    with pytest.raises(OSError) as exc:
        while True:
            future.wait_for(30)
            got.append(future.get()["id"])
            future.reset()
    assert exc.value.errno == errno.ENOBUFS
    assert "watch-backlog=5" in exc.value.strerror
    assert got == ids[:5]
    counters = query(inst)["counters"]
    assert counters["watchers"] == 0 and counters["behind"] == 1
    # Watching again (the client acknowledges) sends every active hold.
    stream = gate.watch(["raw"], reconnect=0)
    assert sorted(next(stream)["id"] for _ in ids) == sorted(ids)
    gate.release_many((jobid, "raw") for jobid in ids)


def test_a_raw_watcher_that_acknowledges_gets_everything(new_instance):
    inst = new_instance(plugin_conf={"watch-backlog": 2})
    handle = inst.handle()
    gate = EpilogGate(handle)
    future = gate.watch_async(["raw"])
    matchtag = flux.core.inner.raw.flux_rpc_get_matchtag(future.pimpl.handle)
    wait_watchers(inst, 1)
    got = []
    for _ in range(3):
        ids = activate(handle, gate, 2)
        for _ in ids:
            future.wait_for(30)
            got.append(future.get()["id"])
            future.reset()
        if len(got) == 2:
            # The protocol: answered {} unless sent without a response.
            payload = {"matchtag": matchtag, "count": len(got)}
            answer = handle.rpc("job-manager.epilog-gate.watch-ack", payload).get()
            assert answer == {}
        else:
            gate.watch_ack(future, len(got))
    assert len(set(got)) == 6 and query(inst)["counters"]["behind"] == 0
    gate.release_many((jobid, "raw") for jobid in got)


@pytest.mark.parametrize(
    "payload, errnum, text",
    [
        ({}, errno.EPROTO, "missing key"),
        ({"matchtag": 1, "count": "x"}, errno.EPROTO, "count must be an integer"),
        ({"matchtag": 1, "count": -1}, errno.EINVAL, "negative"),
        ({"matchtag": 99999, "count": 0}, errno.ENOENT, "no such watch stream"),
    ],
)
def test_a_bad_watch_ack_is_refused_naming_the_problem(handle, payload, errnum, text):
    with pytest.raises(OSError) as exc:
        handle.rpc("job-manager.epilog-gate.watch-ack", payload).get()
    assert exc.value.errno == errnum and text in exc.value.strerror


@settings(max_examples=60, deadline=None)
@given(
    payload=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=6),
        lambda inner: st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["matchtag", "count", "x"]), inner),
        max_leaves=6,
    )
)
def test_any_watch_ack_payload_is_answered_with_a_clear_error(instance, payload):
    """From a connection with no watch stream every watch-ack is refused,
    naming the method, and the plugin carries on."""
    handle = instance.handle()
    with pytest.raises(OSError) as exc:
        handle.rpc("job-manager.epilog-gate.watch-ack", payload).get()
    assert exc.value.errno in (errno.EPROTO, errno.EINVAL, errno.ENOENT)
    assert exc.value.strerror.startswith("watch-ack: ")
    assert EpilogGate(handle).list() is not None


def test_requests_past_max_pending_get_eagain_and_change_nothing(new_instance):
    inst = new_instance(plugin_conf={"max-pending": 1, "max-holds": 100})
    handle = inst.handle()
    gate = EpilogGate(handle)
    ids = [submit(handle, urgency=0) for _ in range(5)]
    asked = [(jobid, f"p{n}") for jobid in ids for n in range(60)]
    results = gate.wait_all(gate.hold_async(j, d) for j, d in asked)
    refused = [a for a, r in zip(asked, results) if isinstance(r, OSError)]
    assert refused, "no request was refused at max-pending=1"
    for jobid, description in refused:
        error = results[asked.index((jobid, description))]
        assert error.errno == errno.EAGAIN and "max-pending=1" in error.strerror
    held = {(h["id"], h["description"]) for h in gate.list()}
    assert held == set(asked) - set(refused)
    assert query(inst)["counters"]["busy"] == len(refused)
    # Nothing is left waiting: one request at a time always gets in.
    for jobid, description in refused:
        gate.hold(jobid, description)
    assert len(gate.list()) == len(asked)
    for jobid in ids:
        flux.job.cancel(handle, jobid)
    gate.release_many(asked)


@pytest.fixture(scope="module")
def bare():
    """An instance of the module's without the gate (a refused load leaves
    it so)."""
    from flux_epilog_gate.testing import Instance

    inst = Instance(cores=8)
    inst.start()
    yield inst
    discard(inst)


@pytest.mark.parametrize("key", ["watch-backlog", "max-pending"])
def test_a_bad_bound_is_refused_naming_its_key(bare, plugin, key):
    inst = bare
    done = inst.flux("jobtap", "load", plugin, f"{key}=0", check=False)
    assert done.returncode != 0 and f"{key}: 0 is not between" in done.stderr
