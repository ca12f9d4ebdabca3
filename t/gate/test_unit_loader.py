"""Unit tests of a load (flux_epilog_gate.gate.loader) and of reading the
hold log (flux_epilog_gate.gate.logparse), no broker: the KVS and the
eventlogs are the FakePort's.

Whatever the log's key holds, the load goes on, every valid entry comes
back, each skipped line is logged (a bounded number of lines), and no
request is answered before every job is recovered."""

import errno
import json
import syslog

import pytest
from fakeport import KVS, FakePort
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from logstrategies import bad_entries, hold_logs, junk_lines

from flux_epilog_gate.gate import CLEANUP, DEPEND, RUN, SCHED
from flux_epilog_gate.gate.config import MAX_HOLDS_LIMIT, Config
from flux_epilog_gate.gate.holdlog import KEY, hold_entry
from flux_epilog_gate.gate.holds import (
    ACTIVE,
    CANCEL_EVENT,
    HOLD_EVENT,
    PENDING,
    RECOVERY_DESCRIPTION,
    RELEASE_EVENT,
    Hold,
    Reason,
)
from flux_epilog_gate.gate.loader import FIRST_LOAD_KEY, SKIPPED_LOGGED, Load
from flux_epilog_gate.gate.logparse import EXCERPT_MAX, parse

from .unitgate import USER, epilog_starts, marked

JOBS = (11, 12, 13, 14)


def entry(jobid, description, **context):
    return json.dumps(
        {
            "timestamp": 100.0,
            "name": HOLD_EVENT,
            "context": dict(context, id=jobid, description=description),
        }
    )


def errors(port):
    return [text for level, text in port.logs if level == syslog.LOG_ERR]


def load(port, jobs=JOBS, state=SCHED, finish=True):
    """Load a new gate into ``port`` (a new job-manager) whose active jobs
    are ``jobs`` in ``state``."""
    for jobid in jobs:
        if jobid not in port.jobs:
            port.add_job(jobid, state, USER)
    loading = Load(port)
    gate = loading.begin(Config())
    for jobid in jobs:
        loading.on_new(jobid, port.jobs[jobid].state, USER)
    if finish:
        loading.loaded()
    return loading, gate


def holds_of(gate):
    return {(h["id"], h["description"]): h for h in gate.list()}


# The log's value, whatever it is


@pytest.mark.parametrize("value", [None, b"", "", b"\n", b"\n\n  \n", "\r\n"], ids=repr)
def test_an_absent_empty_or_blank_log_loads_with_no_holds(port, value):
    if value is not None:
        port.kvs[KEY] = value
    loading, gate = load(port)
    assert loading.ready and gate.list() == [] and errors(port) == []


def test_a_log_that_cannot_be_read_recovers_every_job_at_its_point(port):
    port.fail("kvs_get", errno.EPERM)
    port.add_job(JOBS[0], CLEANUP, USER, happened={"alloc", "start", "finish"})
    port.eventlogs[JOBS[0]] = [
        marked(100.0, "epilog-start", description="bb"),
    ]
    loading, gate = load(port)
    assert loading.ready
    assert holds_of(gate)[(JOBS[0], "bb")]["state"] == ACTIVE
    assert any("reading epilog-gate.holds" in text for text in errors(port))


def test_bytes_that_are_not_utf8_are_skipped_and_the_rest_kept(port):
    good = entry(11, "keep-a").encode()
    port.kvs[KEY] = b"\xff\xfe garbage\n" + good + b"\n" + good[:20] + b"\xff\n"
    loading, gate = load(port)
    assert set(holds_of(gate)) == {(11, "keep-a")}
    logged = errors(port)
    assert len(logged) == 2
    assert "line 1: not UTF-8" in logged[0] and "\\xff" in logged[0]
    assert "line 3: not UTF-8" in logged[1]


@pytest.mark.parametrize(
    "bad, why",
    [
        (entry(12, 123), "description must be a string"),
        (entry(12, "bb", timeout="abc"), "timeout is not a number"),
        (entry(12, "bb", timeout=0), "timeout is not greater than 0"),
        (entry(12, "bb", point="bogus"), "point is not one of"),
        (entry(12, "epilog-gate:recovery"), "description epilog-gate:recovery is"),
        (entry(True, "bb"), "id is not an integer"),
        (entry(0, "bb"), "id 0 is not a job id"),
        ('{"timestamp": NaN, "name": "epilog_gate.hold", "context": {}}', "finite"),
        (
            '{"timestamp": 1, "name": "epilog_gate.release", "context": '
            '{"id": 12, "description": "bb", "status": "x"}}',
            "status is not",
        ),
        ("[1, 2]", "not a JSON object"),
        ('{"timestamp": 1', "not JSON"),
        ("[" * 100000, "longer than"),
    ],
)
def test_an_entry_of_the_wrong_type_never_costs_a_valid_one(port, bad, why):
    """Issue 17, item 3: the bad entry is skipped, named, and the valid
    hold on another job is kept and released as any other."""
    port.kvs[KEY] = entry(11, "keep-a") + "\n" + bad + "\n" + entry(12, "keep-b")
    loading, gate = load(port)
    assert set(holds_of(gate)) == {(11, "keep-a"), (12, "keep-b")}
    (logged,) = errors(port)
    assert "line 2" in logged and why in logged
    assert len(logged) < 200 + EXCERPT_MAX
    # The valid holds work: they reach their point and are released.
    port.set_state(11, CLEANUP)
    gate.on_cleanup(11)
    assert holds_of(gate)[(11, "keep-a")]["state"] == ACTIVE
    assert gate.release(11, "keep-a") == (True, None)
    assert port.outstanding(11) == []


def test_skipped_lines_are_logged_a_bounded_number_of_times(port):
    port.kvs[KEY] = "\n".join(["junk"] * 1000 + [entry(11, "keep-a")])
    loading, gate = load(port)
    assert set(holds_of(gate)) == {(11, "keep-a")}
    logged = errors(port)
    assert len(logged) == SKIPPED_LOGGED + 1
    assert "980 more lines (1000 in all)" in logged[-1]


def test_a_huge_value_is_replaced_by_a_snapshot_once_recovered(port):
    port.kvs[KEY] = "\n".join([entry(11, "keep-a")] + ["x" * 100] * 5000)
    loading, gate = load(port)
    port.add_job(12, SCHED, USER)
    gate.hold(12, "new")
    key, text, append = port.commits[-1]
    assert not append and set(parse(text)[0]) == {11, 12}


# Requests wait until the view is complete


def test_requests_wait_until_every_eventlog_is_read(port):
    """Issue 17, "No window": nothing is answered from a partial view."""
    port.kvs[KEY] = entry(11, "keep-a")
    port.add_job(11, CLEANUP, USER, happened={"alloc", "start", "finish"})
    port.eventlogs[11] = [marked(100.0, "epilog-start", description="keep-a")]
    port.defer_eventlogs = True
    loading, gate = load(port, jobs=(11,))
    answered = []
    loading.when_ready(lambda: answered.append(gate.list()), None)
    assert answered == [] and not loading.ready
    port.complete_eventlog()
    assert loading.ready
    assert [(h["description"], h["state"]) for h in answered[0]] == [("keep-a", ACTIVE)]


def test_requests_wait_for_the_end_of_the_load_too(port):
    loading, gate = load(port, finish=False)
    answered = []
    loading.when_ready(lambda: answered.append(True), None)
    assert answered == []
    loading.loaded()
    assert answered == [True]


def test_requests_still_waiting_at_unload_are_refused(port):
    port.kvs[KEY] = entry(11, "keep-a")
    port.defer_eventlogs = True
    loading, gate = load(port, jobs=(11,))
    refused = []
    loading.when_ready(lambda: pytest.fail("ran"), lambda: refused.append(True))
    loading.close()
    assert refused == [True]
    port.complete_eventlog()
    assert not loading.ready and gate.jobs[11].recovering


def test_a_watcher_during_recovery_is_told_of_each_recovered_activation_once(port):
    """Issue 17, item 4, in the gate: recovery tells the watchers it has
    of the holds it finds active."""
    port.kvs[KEY] = "\n".join([entry(11, "keep-a"), entry(12, "keep-b")])
    for jobid in (11, 12):
        port.add_job(jobid, CLEANUP, USER, happened={"alloc", "start", "finish"})
    port.eventlogs[11] = [marked(100.0, "epilog-start", description="keep-a")]
    port.defer_eventlogs = True
    loading, gate = load(port, jobs=(11, 12))
    gate.watch("early")
    port.complete_eventlog()
    port.complete_eventlog()
    gate.watch("late")
    for sink in ("early", "late"):
        assert sorted((a["id"], a["description"]) for a in port.sent[sink]) == [
            (11, "keep-a"),
            (12, "keep-b"),
        ]


def test_a_recovery_that_raises_lets_the_job_and_the_others_go_on(port):
    port.kvs[KEY] = "\n".join([entry(11, "keep-a"), entry(12, "keep-b")])
    for jobid in (11, 12):
        port.add_job(jobid, CLEANUP, USER, happened={"alloc", "start", "finish"})
    # Another plugin's marked event with no description.
    port.eventlogs[11] = [(100.0, "epilog-start", {"epilog_gate": True})]
    loading, gate = load(port, jobs=(11, 12))
    assert loading.ready
    assert {k: h["state"] for k, h in holds_of(gate).items()} == {
        (11, "keep-a"): ACTIVE,
        (12, "keep-b"): ACTIVE,
    }
    assert any("recovering job 11" in text for text in errors(port))
    assert port.outstanding(11) == ["keep-a"]


def test_a_job_in_cleanup_the_log_does_not_name_gets_its_active_hold_back(port):
    """The hold's record failed as the plugin went away: its marked
    epilog-start is the only trace, and it must not hang the job."""
    port.kvs[KEY] = entry(12, "other") + "\n"
    port.add_job(11, CLEANUP, USER, happened={"alloc", "start", "finish"})
    port.eventlogs[11] = [marked(100.0, "epilog-start", description="bb")]
    loading, gate = load(port, jobs=(11, 12))
    assert loading.ready
    assert holds_of(gate)[(11, "bb")]["state"] == ACTIVE
    assert gate.release(11, "bb") == (True, None)


@pytest.mark.parametrize("state", [CLEANUP, DEPEND], ids=["cleanup", "depend"])
def test_a_first_load_reads_no_eventlog_and_marks_the_kvs(port, state):
    """The gate never ran with this KVS: no job can have a hold of it, so
    none is read or tracked (nothing to race with the job going on); the
    mark makes every later load read such jobs, as below."""
    port.defer_eventlogs = True
    port.add_job(11, state, USER, happened={"alloc", "start", "finish"})
    loading, gate = load(port, jobs=(11,))
    assert loading.first and loading.ready
    assert port.pending_eventlogs == [] and list(gate.jobs) == []
    assert FIRST_LOAD_KEY in port.kvs and errors(port) == []
    again = Load(port)
    assert not again.first


@pytest.mark.parametrize("log", [None, b"", b"\n"], ids=["none", "empty", "blank"])
def test_a_load_after_the_log_was_deleted_still_reads_jobs_in_cleanup(port, log):
    """The KVS is marked by an earlier load: the log is missing (deleted
    by hand, or never written), yet an active hold is in the eventlog."""
    port.kvs[FIRST_LOAD_KEY] = "100.0\n"
    if log is not None:
        port.kvs[KEY] = log
    port.add_job(11, CLEANUP, USER, happened={"alloc", "start", "finish"})
    port.eventlogs[11] = [marked(100.0, "epilog-start", description="bb")]
    loading, gate = load(port, jobs=(11,))
    assert not loading.first and loading.ready
    assert holds_of(gate)[(11, "bb")]["state"] == ACTIVE


def test_a_first_load_whose_mark_fails_logs_it_and_goes_on(port):
    port.fail(KVS, errno.EIO)
    loading, gate = load(port)
    assert loading.ready and FIRST_LOAD_KEY not in port.kvs
    assert any(FIRST_LOAD_KEY in text for text in errors(port))


@pytest.mark.parametrize("event", ["finish", "free"])
def test_a_job_the_log_does_not_name_gets_nothing_posted_while_it_is_read(port, event):
    """A first load among running jobs: a job that finishes while its
    eventlog is read has no hold to wait for, and the job-manager keeps
    one that has an active hold by itself."""
    port.kvs[KEY] = entry(12, "other") + "\n"
    port.defer_eventlogs = True
    port.add_job(11, CLEANUP, USER, happened={"alloc", "start"})
    loading, gate = load(port, jobs=(11, 12))
    port.happen(11, event)
    gate.on_event(11, event, CLEANUP)
    assert port.events.get(11, []) == []
    while port.pending_eventlogs:
        port.complete_eventlog()
    assert loading.ready and port.events.get(11, []) == []


@pytest.mark.parametrize("state", [CLEANUP, RUN], ids=["cleanup", "run"])
def test_a_job_the_log_names_is_kept_back_while_it_is_read(port, state):
    """Its pending hold must find the job at its point: the recovery
    action keeps it there until the eventlog has answered."""
    port.kvs[KEY] = entry(11, "keep-a") + "\n"
    port.defer_eventlogs = True
    port.add_job(11, state, USER, happened={"alloc", "start"})
    loading, gate = load(port, jobs=(11,))
    if state == RUN:
        port.set_state(11, CLEANUP)
        port.happen(11, "finish")
        gate.on_cleanup(11)
    else:
        port.happen(11, "finish")
        gate.on_event(11, "finish", CLEANUP)
    assert epilog_starts(port, 11) == [RECOVERY_DESCRIPTION]
    port.complete_eventlog()
    assert holds_of(gate)[(11, "keep-a")]["state"] == ACTIVE


@pytest.mark.parametrize("partial", [True, False])
def test_a_gate_handed_over_before_its_load_saw_a_job_still_recovers_it(port, partial):
    """One plugin of the gate began the load of a new job-manager and
    handed the gate over before any job.new came (another plugin of the
    gate, of a higher rank, loaded next): the next load, told the carried
    gate is partial, recovers the jobs the log names as a new gate does."""
    port.kvs[KEY] = entry(11, "keep-a") + "\n"
    port.add_job(11, SCHED, USER)
    first = Load(port)
    gate = first.begin(Config())
    first.close()
    gate.suspend()
    second = Load(port, gate, partial=partial)
    assert second.begin(Config()) is gate
    second.on_new(11, SCHED, USER)
    second.loaded()
    assert second.ready
    assert set(holds_of(gate)) == ({(11, "keep-a")} if partial else set())


def test_an_eventlog_read_that_fails_recovers_from_the_log(port):
    port.kvs[KEY] = entry(11, "keep-a")
    port.defer_eventlogs = True
    loading, gate = load(port, jobs=(11,))
    port.complete_eventlog(errno.EIO)
    assert loading.ready and set(holds_of(gate)) == {(11, "keep-a")}


# Never writing an empty value


def test_a_snapshot_with_nothing_to_keep_is_not_empty(port):
    """Issue 17, item 1, at its source: flux-core reads an empty value back
    as no value at all (NULL)."""
    from flux_epilog_gate.gate import holdlog

    gate = load(port)[1]
    port.defer_commits = True
    gate.hold(11, "bb")
    gate.release(11, "bb")
    gate.holdlog.compaction.appends = holdlog.MAX_APPENDS
    port.complete_commit()
    port.complete_commit()
    key, text, append = port.commits[-1]
    assert (key, append) == (KEY, False) and text.strip()
    assert parse(port.kvs[KEY]) == ({}, [])


def test_the_log_is_replaced_once_it_grows_past_max_bytes(port):
    """Issue 17, item 7, in the gate: batches of holds held and released
    leave a value bounded by MAX_BYTES and one batch, in far fewer than
    MAX_APPENDS commits."""
    from flux_epilog_gate.gate import holdlog

    gate = load(port)[1]
    port.defer_commits = True
    jobid = 100
    largest = batch = 0
    for _ in range(40):
        before = sum(len(text) for _, text, _ in port.commits)
        for _ in range(100):
            jobid += 1
            port.add_job(jobid, CLEANUP, USER)
            gate.hold(jobid, "x" * 40)
            gate.release(jobid, "x" * 40)
        while port.pending_commits:
            port.complete_commit()
        batch = max(batch, sum(len(text) for _, text, _ in port.commits) - before)
        port.advance(10)
        largest = max(largest, len(port.kvs[KEY]))
    written = sum(len(text) for _, text, _ in port.commits)
    assert len(port.commits) < holdlog.MAX_APPENDS
    assert written > 3 * holdlog.MAX_BYTES
    assert largest < holdlog.MAX_BYTES + batch


# Any log at all (property-based)


@settings(max_examples=200, deadline=None)
@given(hold_logs(JOBS))
def test_parse_keeps_every_valid_entry_and_nothing_else(log):
    data, holds = log
    jobs, skipped = parse(data)
    got = {
        (jobid, context["description"]): context
        for jobid, items in jobs.items()
        for _, name, context in items
    }
    assert got == holds
    assert sum(len(items) for items in jobs.values()) == len(holds)
    assert all(len(str(bad)) < 200 + EXCERPT_MAX for bad in skipped)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(junk_lines(JOBS), bad_entries(JOBS)), max_size=30))
def test_parse_never_takes_a_bad_line_for_an_entry(lines):
    assert parse(b"\n".join(lines))[0] == {}


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    hold_logs(JOBS),
    st.sampled_from([SCHED, RUN, CLEANUP]),
    st.sampled_from(["text", "bytes"]),
)
def test_a_load_never_fails_and_every_valid_hold_comes_back(log, state, form):
    data, holds = log
    port = FakePort()
    port.kvs[KEY] = data.decode("utf-8", "surrogateescape") if form == "text" else data
    for jobid in JOBS:
        port.add_job(jobid, state, USER, happened={"alloc", "start", "finish"})
    loading, gate = load(port, state=state)
    assert loading.ready
    listed = holds_of(gate)
    expected = {
        key
        for key, context in holds.items()
        # A pending prolog hold of a job past its start is dropped, and so
        # is a dependency hold of a job that has left DEPEND.
        if not (context.get("point") == "prolog" and state != SCHED)
        and context.get("point") != "depend"
    }
    assert set(listed) == expected
    for key in expected:
        context = holds[key]
        assert listed[key].get("timeout") == context.get("timeout")
        assert listed[key]["point"] == context.get("point", "epilog")
        wanted = ACTIVE if state == CLEANUP else PENDING
        assert listed[key]["state"] == wanted
    assert len(errors(port)) <= SKIPPED_LOGGED + 1
    # What the gate writes next is a log it reads back the same.
    if holds:
        gate.holdlog.compaction.appends = 10**6
        port.add_job(99, SCHED, USER)
        gate.hold(99, "next")
        again = parse(port.kvs[KEY])[0]
        assert {
            (j, c["description"]) for j, items in again.items() for _, _, c in items
        } >= (expected | {(99, "next")})


def test_hold_entries_the_gate_writes_are_entries():
    hold = Hold(11, "bb", USER, 10.0, 30.0, "prolog")
    assert parse(hold_entry(hold))[0] == {
        11: [
            (
                10.0,
                HOLD_EVENT,
                {"description": "bb", "timeout": 30.0, "point": "prolog"},
            )
        ]
    }


# Holds past the most a job can have


def _line(timestamp, name, jobid, description):
    context = {"id": jobid, "description": description}
    if name == RELEASE_EVENT:
        context["status"] = 0
    return json.dumps({"timestamp": timestamp, "name": name, "context": context})


def test_holds_past_the_limit_are_dropped_and_each_reported_lost(port):
    """No gate gives a job more than MAX_HOLDS_LIMIT holds (the
    job-manager counts at most 255 open actions of a job): a log that
    does is read up to the limit, in time order, and each hold past it
    is reported lost, by name, and recorded as cancelled."""
    extra = 5
    port.kvs[KEY] = "\n".join(
        _line(100.0 + i, HOLD_EVENT, 11, f"h{i:03}")
        for i in range(MAX_HOLDS_LIMIT + extra)
    )
    loading, gate = load(port, jobs=(11,))
    assert loading.ready
    kept = set(gate.jobs[11].holds)
    assert kept == {f"h{i:03}" for i in range(MAX_HOLDS_LIMIT)}
    assert gate.stats["lost"] == extra
    dropped = [f"h{i:03}" for i in range(MAX_HOLDS_LIMIT, MAX_HOLDS_LIMIT + extra)]
    for description in dropped:
        assert any(
            f"hold {description} of job" in text and "more than" in text
            for text in errors(port)
        )
        assert gate.jobs.gone.get(11, description) == Reason.LOST_LIMIT
    # Recorded: the next load has nothing past the limit to report.
    gate.holdlog.barrier(lambda error: None)
    again = FakePort()
    again.kvs = dict(port.kvs)
    _, reloaded = load(again, jobs=(11,))
    assert set(reloaded.jobs[11].holds) == kept
    assert reloaded.stats["lost"] == 0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["hold", "release", "cancel"]), st.integers(0, 15)),
        max_size=60,
    ),
    st.integers(min_value=1, max_value=6),
)
def test_a_log_is_read_as_a_gate_with_the_limit_would_have_kept_it(steps, limit):
    """Model: the holds a job keeps, replaying its entries in time order
    and refusing a new hold while it has ``limit``, are those a load
    rebuilds (the limit made small to reach it)."""
    from flux_epilog_gate.gate import recovery

    names = {"hold": HOLD_EVENT, "release": RELEASE_EVENT, "cancel": CANCEL_EVENT}
    live = set()
    for kind, n in steps:
        description = f"d{n}"
        if kind == "hold" and description not in live and len(live) < limit:
            live.add(description)
        elif kind != "hold":
            live.discard(description)
    port = FakePort()
    port.kvs[KEY] = "\n".join(
        _line(100.0 + i, names[kind], 11, f"d{n}") for i, (kind, n) in enumerate(steps)
    )
    saved = recovery.MAX_HOLDS_LIMIT
    recovery.MAX_HOLDS_LIMIT = limit
    try:
        _, gate = load(port, jobs=(11,))
    finally:
        recovery.MAX_HOLDS_LIMIT = saved
    job = gate.jobs.get(11)
    assert set(job.holds if job else ()) == live


def test_a_log_value_without_a_last_newline_is_replaced_not_appended_to(port):
    """A value written by another hand may not end its last line: the
    next record must not run into it."""
    port.kvs[KEY] = _line(100.0, HOLD_EVENT, 11, "written-by-hand")
    _, gate = load(port, jobs=(11, 12))
    gate.hold(12, "after-load", done=lambda hold, error: None)
    again = FakePort()
    again.kvs = dict(port.kvs)
    _, reloaded = load(again, jobs=(11, 12))
    assert set(holds_of(reloaded)) == {(11, "written-by-hand"), (12, "after-load")}
    assert not errors(again)


def test_jobs_the_log_names_with_no_eventlog_are_named_twenty_then_counted(port):
    purged = range(101, 126)
    port.kvs[KEY] = "".join(entry(j, "bb") + "\n" for j in purged)
    port.purged.update(purged)
    load(port, jobs=())
    warned = [text for level, text in port.logs if level == syslog.LOG_WARNING]
    named = [text for text in warned if "is named in the hold log" in text]
    assert len(named) == 20
    assert [text for text in warned if "5 more jobs (25 in all)" in text]
