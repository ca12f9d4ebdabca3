"""Issue 17 under a real job-manager: whatever the hold log holds, the
gate loads (a module reload, an instance restart, a first load), keeps
every valid entry and names each line it skips; requests and watches
that arrive while it recovers are answered from complete knowledge; the
log stays bounded in bytes however many holds come and go."""

import errno
import subprocess
import sys
import threading
import time

import flux.job
import pytest
from jobs import described, dmesg, query, submit, wait_event, wait_inactive

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.holdlog import KEY, MAX_BYTES
from flux_epilog_gate.testing import flux_command

NO_CLEANUP = {"FLUX_DISABLE_JOB_CLEANUP": "1"}

#: ``flux epilog-gate``, run from the installed package.
CLI = "import sys; from flux_epilog_gate.cli import main; sys.exit(main())"


def put_raw(inst, data):
    """Set the hold log's value to the bytes ``data``."""
    subprocess.run(
        [flux_command(), "kvs", "put", "--raw", f"{KEY}=-"],
        env=inst.env,
        input=data,
        check=True,
        capture_output=True,
        timeout=60,
    )


def get_raw(inst):
    """The bytes of the hold log's value (what ``flux kvs get --raw``
    prints)."""
    return subprocess.run(
        [flux_command(), "kvs", "get", "--raw", KEY],
        env=inst.env,
        check=True,
        capture_output=True,
        timeout=60,
    ).stdout


def entry(jobid, description, **context):
    import json

    context = dict(context, id=int(jobid), description=description)
    line = {"timestamp": time.time(), "name": "epilog_gate.hold", "context": context}
    return json.dumps(line).encode()


class Reloader:
    """Loads the gate again the way a kind of restart does; the hold log
    is read at each."""

    def __init__(self, kind, new_instance, plugin):
        self.kind = kind
        self.plugin = plugin
        if kind == "first-load":
            self.inst = new_instance(plugin=None, env=NO_CLEANUP)
        else:
            self.inst = new_instance(env=NO_CLEANUP)
        self.handle = self.inst.handle()
        self.gate = EpilogGate(self.handle)

    def reload(self):
        inst = self.inst
        if self.kind == "first-load":
            inst.flux("jobtap", "load", self.plugin)
        elif self.kind == "module":
            inst.flux("module", "reload", "job-manager")
        else:
            self.handle = self.gate = None
            inst.stop()
            inst.start()
            self.handle = inst.handle()
            self.gate = EpilogGate(self.handle)
        assert "epilog-gate" in inst.flux("jobtap", "list").stdout
        # The job-manager takes jobs: the load did not stop it.
        submit(self.handle, urgency=0)


KINDS = ["module", "instance", "first-load"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("value", [b"", b"\n"], ids=["empty", "blank"])
def test_an_empty_hold_log_loads(kind, value, new_instance, plugin):
    """Issue 17, item 1: an empty value reads back as NULL."""
    r = Reloader(kind, new_instance, plugin)
    put_raw(r.inst, value)
    assert get_raw(r.inst) == value
    r.reload()
    jobid = submit(r.handle, urgency=0)
    assert r.gate.hold(jobid, "after")["state"] == "pending"
    assert [h["description"] for h in r.gate.list(jobid)] == ["after"]
    assert dmesg(r.inst, "Traceback") == [] and dmesg(r.inst, "uncaught") == []


def test_the_gate_never_writes_an_empty_hold_log(new_instance):
    """Issue 17, item 1, at its source: a snapshot with no live hold and
    no recent release (a batch of cancels) wrote an empty value."""
    inst = new_instance(env=NO_CLEANUP)
    handle = inst.handle()
    gate = EpilogGate(handle)
    jobid = submit(handle, urgency=0)
    # One request at a time: a commit each; every hold is cancelled.
    commits = query(inst)["counters"]["log_commits"]
    from flux_epilog_gate.holdlog import MAX_APPENDS

    for i in range(MAX_APPENDS - commits + 4):
        if i % 2 == 0:
            gate.hold(jobid, "c")
        else:
            gate.release(jobid, "c")
    if gate.list(jobid):
        gate.release(jobid, "c")
    assert query(inst)["counters"]["log_commits"] > MAX_APPENDS
    assert get_raw(inst) != b""
    inst.flux("module", "reload", "job-manager")
    assert "epilog-gate" in inst.flux("jobtap", "list").stdout
    assert gate.hold(submit(handle, urgency=0), "after")["state"] == "pending"


@pytest.mark.parametrize("kind", KINDS)
def test_bytes_that_are_not_utf8_cost_no_hold(kind, new_instance, plugin):
    """Issue 17, item 2."""
    r = Reloader(kind, new_instance, plugin)
    jobid = submit(r.handle, urgency=0)
    put_raw(r.inst, entry(jobid, "keep-a") + b"\n\xff\xfe\n" + entry(jobid, "keep-b"))
    r.reload()
    assert sorted(h["description"] for h in r.gate.list(jobid)) == ["keep-a", "keep-b"]
    (line,) = dmesg(r.inst, f"{KEY}: skipped")
    assert "line 2: not UTF-8" in line


def test_an_entry_of_the_wrong_type_costs_no_valid_hold(new_instance):
    """Issue 17, item 3: a bad entry is skipped and named; the valid hold
    on the same job still keeps it from going inactive, and ``list``
    works for everyone."""
    inst = new_instance(env=NO_CLEANUP)
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    held, other = submit(handle, urgency=0), submit(handle, urgency=0)
    bad = [
        entry(held, 123),
        entry(other, "bb", timeout="abc"),
        entry(other, "epilog-gate:recovery"),
        entry(other, "cc", point="bogus"),
        b'{"timestamp": NaN, "name": "epilog_gate.hold", "context": {"id": '
        + str(int(other)).encode()
        + b', "description": "nan"}}',
        b'{"timestamp": 1, "name": "epilog_gate.release", "context": {"id": '
        + str(int(held)).encode()
        + b', "description": "keep-a", "status": "x"}}',
    ]
    put_raw(inst, b"\n".join([entry(held, "keep-a")] + bad))
    inst.flux("module", "reload", "job-manager")
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    assert [(h["id"], h["description"]) for h in gate.list()] == [(held, "keep-a")]
    listed = subprocess.run(
        [sys.executable, "-c", CLI, "list"],
        env=inst.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0 and "keep-a" in listed.stdout, listed.stderr
    skipped = dmesg(inst, f"{KEY}: skipped")
    assert len(skipped) == len(bad)
    for line, why in zip(
        skipped,
        [
            "description must be a string",
            "timeout is not a number",
            "epilog-gate:recovery is reserved",
            "point is not one of",
            "timestamp is not finite",
            "status is not an integer",
        ],
    ):
        assert why in line, line
    flux.job.cancel(handle, held)
    wait_event(handle, held, "epilog-start", match=described("keep-a"))
    time.sleep(1.0)
    assert "clean" not in [e.name for e in _events(handle, held)]
    assert gate.release(held, "keep-a") == {"released": True}
    wait_inactive(handle, held)
    assert dmesg(inst, "Traceback") == [] and dmesg(inst, "AttributeError") == []


def _events(handle, jobid):
    from jobs import eventlog

    return eventlog(handle, jobid)


# No window: requests and watches that arrive while the gate recovers


#: Jobs with an active hold at the reload: each eventlog must be read.
WINDOW_JOBS = 150


def _held_at_point(handle, gate, count, description):
    """``count`` jobs with an active hold ``description`` each."""
    jobids = [submit(handle, urgency=0) for _ in range(count)]
    for future in [gate.hold_async(jobid, description) for jobid in jobids]:
        future.get()
    for jobid in jobids:
        flux.job.cancel(handle, jobid)
    for jobid in jobids:
        wait_event(handle, jobid, "epilog-start", match=described(description))
    return jobids


def _first_answer(inst, ask, timeout=60.0):
    """Ask again and again from the moment the job-manager is gone until
    the gate answers: the first answer comes as early as it can."""
    handle = inst.handle()
    deadline = time.time() + timeout
    while True:
        try:
            return ask(handle)
        except OSError as exc:
            if exc.errno not in (errno.ENOSYS, errno.EAGAIN, errno.ECONNRESET):
                raise
        assert time.time() < deadline, "the gate never answered"
        time.sleep(0.001)


def _reload_in_background(inst):
    done = {}

    def run():
        done["result"] = inst.flux("module", "reload", "job-manager", check=False)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, done


def _wait_gone(inst):
    """Wait until the job-manager no longer answers (its reload began)."""
    handle = inst.handle()
    deadline = time.time() + 60
    while True:
        try:
            handle.rpc("job-manager.epilog-gate.list", {}).get()
        except OSError as exc:
            if exc.errno == errno.ENOSYS:
                return
        assert time.time() < deadline
        time.sleep(0.001)


@pytest.mark.parametrize("conf", [{}, {"debug-fault": "slow-recovery"}], ids=repr)
def test_list_during_recovery_is_answered_from_complete_knowledge(
    conf, new_instance, plugin
):
    """Issue 17, item 4 and "No window": after a module reload, the very
    first ``list`` answered names every active hold."""
    inst = new_instance(env=NO_CLEANUP, plugin_conf=conf)
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    jobids = _held_at_point(handle, gate, WINDOW_JOBS, "w")
    last = jobids[-1]
    thread, done = _reload_in_background(inst)
    _wait_gone(inst)
    first_all = _first_answer(
        inst, lambda h: h.rpc("job-manager.epilog-gate.list", {}).get()["holds"]
    )
    first_one = EpilogGate(inst.handle()).list(last)
    thread.join()
    assert done["result"].returncode == 0, done["result"].stderr
    assert sorted(h["id"] for h in first_all) == sorted(jobids)
    assert all(h["state"] == "active" for h in first_all)
    assert [(h["description"], h["state"]) for h in first_one] == [("w", "active")]
    for jobid in jobids:
        gate = EpilogGate(inst.handle())
        assert gate.release(jobid, "w") == {"released": True}


@pytest.mark.parametrize("conf", [{}, {"debug-fault": "slow-recovery"}], ids=repr)
def test_a_watcher_during_recovery_gets_every_active_hold_once(
    conf, new_instance, plugin
):
    """Issue 17, item 4: a cleanup service that reconnects while the gate
    still reads eventlogs receives every hold active once recovery ends,
    each once."""
    inst = new_instance(env=NO_CLEANUP, plugin_conf=conf)
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    jobids = _held_at_point(handle, gate, WINDOW_JOBS, "w")
    thread, done = _reload_in_background(inst)
    _wait_gone(inst)
    watch_handle = inst.handle()

    def connect(h):
        stream = EpilogGate(watch_handle).watch_async(["w"])
        stream.wait_for(30)
        return stream, stream.get()

    stream, first = _first_answer(inst, connect)
    got = [first["id"]]
    deadline = time.time() + 60
    while len(got) < len(jobids) and time.time() < deadline:
        stream.reset()
        stream.wait_for(max(0.1, deadline - time.time()))
        got.append(stream.get()["id"])
    # Nothing more: each hold once.
    stream.reset()
    with pytest.raises(OSError) as info:
        stream.wait_for(1.0)
    assert info.value.errno == errno.ETIMEDOUT
    thread.join()
    assert done["result"].returncode == 0
    assert sorted(got) == sorted(jobids)
    gate = EpilogGate(inst.handle())
    for jobid in jobids:
        assert gate.release(jobid, "w") == {"released": True}


def test_requests_waiting_on_recovery_are_answered(new_instance):
    """hold and release (the owner's, decoded in C, and a guest's general
    path) that arrive during a slow recovery wait and are answered."""
    inst = new_instance(env=NO_CLEANUP, plugin_conf={"debug-fault": "slow-recovery"})
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    jobids = _held_at_point(handle, gate, 3, "w")
    fresh = submit(handle, urgency=0)
    thread, done = _reload_in_background(inst)
    _wait_gone(inst)
    first = _first_answer(inst, lambda h: EpilogGate(h).hold(fresh, "new"))
    assert first["state"] == "pending"
    gate = EpilogGate(inst.handle())
    assert gate.release(jobids[0], "w") == {"released": True}
    thread.join()
    wait_inactive(inst.handle(), jobids[0])
    for jobid in jobids[1:]:
        assert gate.release(jobid, "w") == {"released": True}


# The log's size


def test_the_hold_log_stays_bounded_in_bytes(new_instance):
    """Issue 17, item 7: 20,000 holds held and released in batches leave a
    value bounded by MAX_BYTES and what one batch adds, not by the number
    of commits."""
    inst = new_instance(env=NO_CLEANUP)
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    jobs = [submit(handle, urgency=0) for _ in range(20)]
    descriptions = [f"d{i:02d}" for i in range(50)]
    sizes = []
    total = 0
    started = time.time()
    while total < 20000:
        futures = [gate.hold_async(j, d) for j in jobs for d in descriptions]
        for future in futures:
            future.get()
        futures = [gate.release_async(j, d) for j in jobs for d in descriptions]
        for future in futures:
            future.get()
        total += len(futures)
        sizes.append(len(get_raw(inst)))
    commits = query(inst)["counters"]["log_commits"]
    print(
        f"{total} holds in {time.time() - started:.1f}s, {commits} commits, "
        f"value sizes {sizes}"
    )
    # One batch here is 1,000 holds: about 100 KB of entries.
    assert max(sizes) < MAX_BYTES + 200_000, sizes
    # ... while what was written was many times the bound.
    assert total * 90 > 5 * MAX_BYTES
