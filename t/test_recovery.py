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
from conftest import jobtap_list, restart
from jobs import (
    described,
    dmesg,
    get_raw,
    query,
    submit,
    submit_many,
    wait_event,
    wait_inactive,
)

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.holdlog import KEY, MAX_APPENDS, MAX_BYTES
from flux_epilog_gate.testing import flux_command

NO_CLEANUP = {"FLUX_DISABLE_JOB_CLEANUP": "1"}

#: ``flux epilog-gate``, run from the installed package.
CLI = "import sys; from flux_epilog_gate.client.cli import main; sys.exit(main())"


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
        else:
            self.handle = self.gate = None
            self.handle = restart(inst, self.kind)
            self.gate = EpilogGate(self.handle)
        assert "epilog-gate.so" in jobtap_list(self.handle)
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
    no recent release (here: the cancel of the last pending hold is the
    commit that makes the snapshot) wrote an empty value."""
    inst = new_instance(env=NO_CLEANUP)
    handle = inst.handle()
    gate = EpilogGate(handle)
    jobid = submit(handle, urgency=0)
    # The commit after MAX_APPENDS appends is a snapshot: make it the
    # cancel of the only hold.  A hold and its cancel are a commit each
    # when sent one at a time; three holds sent together share two.
    while (MAX_APPENDS + 1 - query(inst)["counters"]["log_commits"]) % 2:
        futures = [gate.hold_async(jobid, f"p{i}") for i in range(3)]
        for future in futures:
            future.get()
        for i in range(3):
            gate.release(jobid, f"p{i}")
    remaining = MAX_APPENDS + 1 - query(inst)["counters"]["log_commits"]
    assert remaining > 0
    for _ in range(remaining // 2):
        gate.hold(jobid, "c")
        gate.release(jobid, "c")
    assert query(inst)["counters"]["log_commits"] == MAX_APPENDS + 1
    assert gate.list(jobid) == []
    assert get_raw(inst) != b""
    restart(inst, "module")
    assert "epilog-gate" in inst.flux("jobtap", "list").stdout
    assert gate.hold(submit(handle, urgency=0), "after")["state"] == "pending"


def active_hold(r, description):
    """A job cancelled while pending, held in CLEANUP by ``description``."""
    jobid = submit(r.handle, urgency=0)
    r.gate.hold(jobid, description)
    flux.job.cancel(r.handle, jobid)
    wait_event(r.handle, jobid, "epilog-start")
    return jobid


@pytest.mark.parametrize("kind", ["module", "instance"])
def test_a_deleted_hold_log_keeps_an_active_hold(kind, new_instance, plugin):
    """With the log's key removed by hand, a job already in CLEANUP is
    still held by its active hold: its marked epilog-start tells."""
    r = Reloader(kind, new_instance, plugin)
    jobid = active_hold(r, "act")
    r.inst.flux("kvs", "unlink", KEY)
    r.reload()
    (hold,) = r.gate.list(jobid)
    assert (hold["description"], hold["state"]) == ("act", "active")
    assert r.gate.release(jobid, "act")["released"] is True
    wait_inactive(r.handle, jobid, timeout=30)


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
    restart(inst, "module")
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
    jobids = submit_many(handle, count, urgency=0)
    for future in [gate.hold_async(jobid, description) for jobid in jobids]:
        future.get()
    for jobid in jobids:
        flux.job.cancel(handle, jobid)
    for jobid in jobids:
        wait_event(handle, jobid, "epilog-start", match=described(description))
    return jobids


def _reload_in_background(inst):
    done = {}

    def run():
        done["result"] = inst.flux("module", "reload", "job-manager", check=False)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, done


#: Seconds between two requests sent while the job-manager reloads.
SPACING = 0.005


def _count_a_hold(handle):
    """Make the gate's ``held`` counter not 0, changing nothing else: a
    hold placed on a job of its own and released while pending (no
    event, nothing listed or watched), the job cancelled."""
    jobid = submit(handle, urgency=0)
    gate = EpilogGate(handle)
    gate.hold(jobid, "count")
    assert gate.release(jobid, "count") == {"released": True}
    flux.job.cancel(handle, jobid)


def _first_on_new_gate(inst, send):
    """Reload the job-manager while sending, every few milliseconds, a
    ``query`` and right behind it on the same connection the request
    ``send(handle)`` makes; return the future of the first request that
    reached the new job-manager (its query answered with fresh counters:
    the old gate's ``held`` is not 0, even if it is itself the gate of a
    reload, which placed no hold).  Requests sent while the new
    job-manager loads are queued for it, so the first reaches it as soon
    as it runs, when its recovery has just begun."""
    handle = inst.handle()
    _count_a_hold(handle)
    thread, done = _reload_in_background(inst)
    pairs = []
    deadline = time.time() + 120
    end = None
    while end is None or time.time() < end:
        query = handle.rpc("job-manager.jobtap-query", {"name": "epilog-gate.so"})
        pairs.append((query, send(handle)))
        time.sleep(SPACING)
        if end is None and not thread.is_alive():
            end = time.time() + 0.2
        assert time.time() < deadline, "the reload did not end"
    thread.join()
    assert done["result"].returncode == 0, done["result"].stderr
    for query, future in pairs:
        try:
            if query.get()["counters"]["held"] == 0:
                return future
        except OSError:
            continue
    raise AssertionError("no request reached the new job-manager")


@pytest.mark.parametrize("conf", [{}, {"debug-fault": "slow-recovery"}], ids=repr)
def test_list_during_recovery_is_answered_from_complete_knowledge(
    conf, new_instance, plugin
):
    """Issue 17, item 4 and "No window": after a module reload, the very
    first ``list`` the new gate answers names every active hold."""
    inst = new_instance(env=NO_CLEANUP, plugin_conf=conf)
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    jobids = _held_at_point(handle, gate, WINDOW_JOBS, "w")
    # Without the delay, the window is a race: two rounds.
    for _ in range(1 if conf else 2):
        first = _first_on_new_gate(inst, lambda h: EpilogGate(h).list_async())
        holds = first.get()["holds"]
        assert sorted(h["id"] for h in holds) == sorted(jobids)
        assert all(h["state"] == "active" for h in holds)
    gate = EpilogGate(inst.handle())
    for jobid in jobids:
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
    stream = _first_on_new_gate(inst, lambda h: EpilogGate(h).watch_async(["w"]))
    got = []
    deadline = time.time() + 60
    while len(got) < len(jobids):
        remaining = deadline - time.time()
        assert remaining > 0, f"{len(got)} of {len(jobids)} active holds watched"
        try:
            stream.wait_for(remaining)
        except OSError as exc:
            raise AssertionError(
                f"{len(got)} of {len(jobids)} active holds watched"
            ) from exc
        got.append(stream.get()["id"])
        stream.reset()
    # Nothing more: each hold once.
    with pytest.raises(OSError) as info:
        stream.wait_for(1.0)
    assert info.value.errno == errno.ETIMEDOUT
    assert sorted(got) == sorted(jobids)
    gate = EpilogGate(inst.handle())
    for jobid in jobids:
        assert gate.release(jobid, "w") == {"released": True}


def test_requests_waiting_on_recovery_are_answered(new_instance):
    """A hold (the owner's, decoded in C) that arrives during a slow
    recovery waits, and is answered once the gate has recovered."""
    inst = new_instance(env=NO_CLEANUP, plugin_conf={"debug-fault": "slow-recovery"})
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    jobids = _held_at_point(handle, gate, 3, "w")
    fresh = submit(handle, urgency=0)
    first = _first_on_new_gate(
        inst, lambda h: EpilogGate(h).hold_async(fresh, "new", timeout=3600)
    )
    assert first.get()["state"] == "pending"
    gate = EpilogGate(inst.handle())
    assert {(h["id"], h["description"]) for h in gate.list()} == {
        (jobid, "w") for jobid in jobids
    } | {(fresh, "new")}
    for jobid in jobids:
        assert gate.release(jobid, "w") == {"released": True}
    wait_inactive(inst.handle(), jobids[0])


# The log's size


def test_the_hold_log_stays_bounded_in_bytes(new_instance):
    """Issue 17, item 7: 20,000 holds held and released in batches leave a
    value bounded by MAX_BYTES and what the requests of one batch write,
    not by the number of commits: measured with ``flux kvs get --raw``
    after each batch."""
    inst = new_instance(env=NO_CLEANUP)
    handle, gate = inst.handle(), EpilogGate(inst.handle())
    jobs = [submit(handle, urgency=0) for _ in range(10)]
    # The longest descriptions: the most bytes per commit.
    descriptions = [f"{i:02d}".ljust(64, "x") for i in range(50)]
    batch = len(jobs) * len(descriptions)
    # A commit carries at most the records of the requests in flight.
    in_flight = batch * len(entry(jobs[0], descriptions[0]) + b"\n")
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
        total += batch
        sizes.append(len(get_raw(inst)))
    commits = query(inst)["counters"]["log_commits"]
    print(
        f"{total} holds in {time.time() - started:.1f}s, {commits} commits, "
        f"value sizes {sizes}"
    )
    assert max(sizes) < MAX_BYTES + 2 * in_flight, sizes


@pytest.mark.parametrize("shape", ["directory", "symlink-loop"])
@pytest.mark.parametrize("kind", ["module", "instance"])
def test_a_key_that_is_not_a_value_is_replaced_by_a_snapshot(
    kind, shape, new_instance, plugin
):
    """With a directory or a symlink at the hold log's key, every hold
    used to answer an error forever.  The first record now replaces the
    key with a snapshot: the hold is acknowledged and durable, and the
    active hold recovered from the eventlog is kept in the new log."""
    r = Reloader(kind, new_instance, plugin)
    active = active_hold(r, "act")
    r.inst.flux("kvs", "unlink", KEY)
    if shape == "directory":
        r.inst.flux("kvs", "mkdir", KEY)
    else:
        r.inst.flux("kvs", "link", KEY, KEY)
    r.reload()
    pending = submit(r.handle, urgency=0)
    assert r.gate.hold(pending, "new")["state"] == "pending"
    (line,) = dmesg(r.inst, f"{KEY} is not a value")
    assert "replacing it with a snapshot" in line
    text = get_raw(r.inst).decode()
    assert f'"id":{int(pending)},"description":"new"' in text
    assert f'"id":{int(active)},"description":"act"' in text
    assert r.gate.release(active, "act")["released"] is True
    wait_inactive(r.handle, active, timeout=30)
    assert r.gate.release(pending, "new")["released"] is True
