"""Soak: thousands of jobs through a live gate, holds from many clients.

EPILOG_GATE_SOAK_JOBS jobs (default 2,000) run with fake resources and
simulated execution (most of them; some are cancelled while pending, the
exception path).  Each job gets 1-3 holds, registered at random moments:
while the job is held in PRIORITY, while it is scheduled or running, at
random after it was let go, and in CLEANUP (as soon as one of its holds
is seen active).  A cleanup service learns from the watch stream when
holds become active; several release clients, each with a flux handle of
its own, release them in random order, some twice (possibly at the same
time from two clients), some with a failure status; a few holds are left
to time out, some of those released late.

Afterwards, from the jobs' eventlogs: every job is inactive, every hold
has exactly one epilog-start and one epilog-finish, no clean precedes the
last epilog-finish, each finish has the status its releaser gave (124 for
a timeout), and the numbers of released and timed-out holds match what
the clients did and what the plugin counted.
"""

import heapq
import os
import queue
import random
import threading
import time

import flux
import flux.job
import jobs
import pytest
from flux.eventlog import EventLogEvent
from flux.job import JobspecV1
from jobs import SIM

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.testing import Instance

JOBS = int(os.environ.get("EPILOG_GATE_SOAK_JOBS", "2000"))
SEED = int(os.environ.get("EPILOG_GATE_SOAK_SEED", "20240611"))
#: Jobs in the instance at once (submitted, not yet inactive).
WINDOW = 150
CORES = 256
CHUNK = 25
RELEASERS = 4
TIMEOUT = 1.0
LATE = TIMEOUT + 1.5
#: Give up (and fail) after this long, or when nothing moved for STALL.
DEADLINE = 900.0
STALL = 60.0

CANCEL_PATH = 0.1
P_TIMEOUT = 0.12
P_DUPLICATE = 0.2
P_FAILURE = 0.08
P_LATE_RELEASE = 0.5
SHORT = (0.02, 0.05, 0.1, 0.2, 0.3)
#: A job with a hold to be registered while it runs runs this long, and
#: the hold is sent at most RUNNING_DELAY after the job is let go.
LONG = 2.5
RUNNING_DELAY = 0.5


class HoldPlan:
    __slots__ = ("description", "moment", "kind", "status", "duplicate", "late")

    def __init__(self, description, moment, kind, status, duplicate, late):
        self.description = description
        self.moment = moment  # pending | running | random | cleanup
        self.kind = kind  # release | timeout
        self.status = status
        self.duplicate = duplicate
        self.late = late


class JobPlan:
    __slots__ = ("path", "duration", "holds")

    def __init__(self, path, duration, holds):
        self.path = path  # run | cancel
        self.duration = duration
        self.holds = holds


def make_plans(rng, count, moments):
    plans = []
    for _ in range(count):
        path = "cancel" if rng.random() < CANCEL_PATH else "run"
        holds = [
            HoldPlan("h0", "pending", "release", 0, rng.random() < P_DUPLICATE, False)
        ]
        for k in range(1, rng.randint(1, 3)):
            choices = [
                m for m in moments if path == "run" or m in ("pending", "cleanup")
            ]
            moment = rng.choice(choices)
            if rng.random() < P_TIMEOUT:
                holds.append(
                    HoldPlan(
                        f"h{k}",
                        moment,
                        "timeout",
                        124,
                        False,
                        rng.random() < P_LATE_RELEASE,
                    )
                )
            else:
                status = rng.randint(1, 5) if rng.random() < P_FAILURE else 0
                holds.append(
                    HoldPlan(
                        f"h{k}",
                        moment,
                        "release",
                        status,
                        rng.random() < P_DUPLICATE,
                        False,
                    )
                )
        rng.shuffle(holds)
        if any(h.moment == "running" for h in holds):
            duration = LONG
        else:
            duration = rng.choice(SHORT)
        plans.append(JobPlan(path, duration, holds))
    return plans


class Soak:
    """Shared state of the clients; every method is called under lock."""

    def __init__(self, inst, plans, seed):
        self.inst = inst
        self.plans = plans
        self.by_id = {}
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.errors = []
        self.stop = threading.Event()
        self.registered = {}  # jobid -> {description: state answered}
        self.activated = {}  # jobid -> {description: (time, ran)}
        self.queued = set()  # (jobid, description) with a release queued
        self.answers = {}  # (jobid, description) -> [(client, status, answer)]
        self.releases = []  # heap of (due, seq, jobid, description, status)
        self.release_cv = threading.Condition(self.lock)
        self.seq = 0
        self.cleanup_holds = queue.Queue()
        self.delayed = []  # heap of (due, seq, jobid, description)
        self.delayed_cv = threading.Condition(self.lock)
        self.submitted = 0
        self.expected_answers = 0

    # Bookkeeping

    def fail(self, where, exc):
        with self.lock:
            self.errors.append(f"{where}: {exc!r}")
        self.stop.set()

    def plan(self, jobid):
        return self.by_id[jobid]

    def hold_plan(self, jobid, description):
        for hold in self.by_id[jobid].holds:
            if hold.description == description:
                return hold
        raise KeyError((jobid, description))

    def on_registered(self, jobid, description, state):
        with self.lock:
            self.registered.setdefault(jobid, {})[description] = state
            self._maybe_release(jobid)

    def on_active(self, jobid, description, ran):
        with self.lock:
            activated = self.activated.setdefault(jobid, {})
            if description in activated:
                self.errors.append(f"{jobid} {description}: activated twice")
            activated[description] = (time.time(), ran)
            if len(activated) == 1:
                for hold in self.plan(jobid).holds:
                    if hold.moment == "cleanup":
                        self.cleanup_holds.put((jobid, hold.description))
            self._maybe_release(jobid)

    def _maybe_release(self, jobid):
        plan = self.plan(jobid)
        registered = self.registered.get(jobid, {})
        if len(registered) < len(plan.holds):
            # Not before every hold is registered: the job could go
            # inactive under a registration still on its way.
            return
        for description, (t_active, _) in self.activated.get(jobid, {}).items():
            if (jobid, description) in self.queued:
                continue
            self.queued.add((jobid, description))
            hold = self.hold_plan(jobid, description)
            if hold.kind == "release":
                self._queue_release(0.0, jobid, description, hold.status)
                if hold.duplicate:
                    status = hold.status if self.rng.random() < 0.5 else 7
                    self._queue_release(0.0, jobid, description, status)
            elif hold.late:
                self._queue_release(t_active + LATE, jobid, description, 0)

    def _queue_release(self, due, jobid, description, status):
        self.seq += 1
        self.expected_answers += 1
        heapq.heappush(self.releases, (due, self.seq, jobid, description, status))
        self.release_cv.notify_all()

    def take_releases(self, rng, most):
        """Up to ``most`` due releases, picked at random; None when done."""
        with self.lock:
            while True:
                if self.stop.is_set():
                    return None
                now = time.time()
                due = [r for r in self.releases if r[0] <= now]
                if due:
                    picked = rng.sample(due, min(most, len(due)))
                    chosen = set(picked)
                    self.releases = [r for r in self.releases if r not in chosen]
                    heapq.heapify(self.releases)
                    return picked
                wait = (self.releases[0][0] - now) if self.releases else 0.2
                self.release_cv.wait(min(max(wait, 0.001), 0.2))

    def record_answer(self, client, jobid, description, status, answer):
        with self.lock:
            self.answers.setdefault((jobid, description), []).append(
                (client, status, answer)
            )

    def answered(self):
        with self.lock:
            return sum(len(a) for a in self.answers.values())


# Clients (each a thread with a flux handle of its own)


def watcher(soak, ready):
    try:
        gate = EpilogGate(flux.Flux(soak.inst.uri))
        future = gate.watch_async()
        ready.set()
        read = 0
        while not soak.stop.is_set():
            try:
                future.wait_for(0.2)
            except OSError:
                continue
            hold = future.get()
            future.reset()
            # A reader of watch_async acknowledges what it read, or the
            # plugin holds activations back (watch flow control).
            read += 1
            gate.watch_ack(future, read)
            soak.on_active(hold["id"], hold["description"], hold["ran"])
    except Exception as exc:  # noqa: BLE001
        soak.fail("watcher", exc)


def cleanup_holder(soak):
    """Registers the holds planned for CLEANUP (job already past its epilog
    point: they must be active at once)."""
    try:
        gate = EpilogGate(flux.Flux(soak.inst.uri))
        while not soak.stop.is_set():
            try:
                jobid, description = soak.cleanup_holds.get(timeout=0.2)
            except queue.Empty:
                continue
            plan = soak.hold_plan(jobid, description)
            timeout = TIMEOUT if plan.kind == "timeout" else None
            answer = gate.hold(jobid, description, timeout=timeout)
            if answer["state"] != "active":
                raise AssertionError(f"hold in CLEANUP not active at once: {answer}")
            soak.on_registered(jobid, description, answer["state"])
    except Exception as exc:  # noqa: BLE001
        soak.fail("cleanup holder", exc)


def delayed_holder(soak):
    """Registers holds at a given moment after their job was let go."""
    try:
        gate = EpilogGate(flux.Flux(soak.inst.uri))
        while not soak.stop.is_set():
            with soak.lock:
                now = time.time()
                due = []
                while soak.delayed and soak.delayed[0][0] <= now:
                    due.append(heapq.heappop(soak.delayed))
                if not due:
                    wait = soak.delayed[0][0] - now if soak.delayed else 0.2
                    soak.delayed_cv.wait(min(wait, 0.2))
                    continue
            futures = []
            for _, _, jobid, description in due:
                plan = soak.hold_plan(jobid, description)
                timeout = TIMEOUT if plan.kind == "timeout" else None
                futures.append(
                    (jobid, description, gate.hold_async(jobid, description, timeout))
                )
            for jobid, description, future in futures:
                answer = future.get()
                soak.on_registered(jobid, description, answer["state"])
    except Exception as exc:  # noqa: BLE001
        soak.fail("delayed holder", exc)


def releaser(soak, client, seed):
    try:
        rng = random.Random(seed)
        gate = EpilogGate(flux.Flux(soak.inst.uri))
        while True:
            batch = soak.take_releases(rng, 16)
            if batch is None:
                return
            futures = [
                (
                    jobid,
                    description,
                    status,
                    gate.release_async(jobid, description, status),
                )
                for _, _, jobid, description, status in batch
            ]
            for jobid, description, status, future in futures:
                answer = future.get()
                soak.record_answer(client, jobid, description, status, answer)
    except Exception as exc:  # noqa: BLE001
        soak.fail(f"releaser {client}", exc)


def submitter(soak, specs):
    """Submits the jobs in chunks, held in PRIORITY (urgency 0), registers
    their 'pending' holds, then lets them go (or cancels them), keeping at
    most WINDOW jobs in the instance."""
    try:
        handle = flux.Flux(soak.inst.uri)
        gate = EpilogGate(handle)
        rng = random.Random(SEED + 1)
        plans = soak.plans
        for start in range(0, len(plans), CHUNK):
            chunk = plans[start : start + CHUNK]
            while True:
                if soak.stop.is_set():
                    return
                active = handle.rpc("job-manager.stats-get").get()["active_jobs"]
                if active + len(chunk) <= WINDOW:
                    break
                time.sleep(0.05)
            futures = [
                flux.job.submit_async(handle, specs[p.duration], urgency=0)
                for p in chunk
            ]
            ids = [flux.job.submit_get_id(f) for f in futures]
            with soak.lock:
                for jobid, plan in zip(ids, chunk):
                    soak.by_id[jobid] = plan
                soak.submitted += len(chunk)
            holds = []
            for jobid, plan in zip(ids, chunk):
                for hold in plan.holds:
                    if hold.moment == "pending":
                        timeout = TIMEOUT if hold.kind == "timeout" else None
                        holds.append(
                            (
                                jobid,
                                hold.description,
                                gate.hold_async(jobid, hold.description, timeout),
                            )
                        )
            for jobid, description, future in holds:
                answer = future.get()
                assert answer["state"] == "pending", answer
                soak.on_registered(jobid, description, answer["state"])
            go = []
            for jobid, plan in zip(ids, chunk):
                if plan.path == "cancel":
                    go.append(flux.job.cancel_async(handle, jobid))
                else:
                    go.append(
                        handle.rpc("job-manager.urgency", {"id": jobid, "urgency": 16})
                    )
            for future in go:
                future.get()
            let_go = time.time()
            with soak.lock:
                for jobid, plan in zip(ids, chunk):
                    for hold in plan.holds:
                        if hold.moment in ("running", "random"):
                            soak.seq += 1
                            due = let_go + rng.uniform(0, RUNNING_DELAY)
                            heapq.heappush(
                                soak.delayed, (due, soak.seq, jobid, hold.description)
                            )
                soak.delayed_cv.notify_all()
    except Exception as exc:  # noqa: BLE001
        soak.fail("submitter", exc)


# Checks


def eventlogs(handle, ids, chunk=200):
    logs = {}
    ids = list(ids)
    for start in range(0, len(ids), chunk):
        part = ids[start : start + chunk]
        futures = [
            handle.rpc(
                "job-info.lookup", {"id": jobid, "keys": ["eventlog"], "flags": 0}
            )
            for jobid in part
        ]
        for jobid, future in zip(part, futures):
            text = future.get()["eventlog"]
            logs[jobid] = [EventLogEvent(line) for line in text.splitlines() if line]
    return logs


def run_soak(plugin, moments, count):
    rng = random.Random(SEED)
    plans = make_plans(rng, count, moments)
    with Instance(
        cores=CORES, plugin=plugin, env={"FLUX_DISABLE_JOB_CLEANUP": "1"}
    ) as inst:
        specs = {}
        for duration in set(SHORT) | {LONG}:
            spec = JobspecV1.from_command(["true"])
            spec.setattr(SIM, f"{duration}s")
            specs[duration] = spec.dumps()
        soak = Soak(inst, plans, SEED + 2)
        ready = threading.Event()
        threads = [threading.Thread(target=watcher, args=(soak, ready), daemon=True)]
        threads[0].start()
        assert ready.wait(30)
        threads += [
            threading.Thread(target=cleanup_holder, args=(soak,), daemon=True),
            threading.Thread(target=delayed_holder, args=(soak,), daemon=True),
        ] + [
            threading.Thread(
                target=releaser, args=(soak, n, SEED + 10 + n), daemon=True
            )
            for n in range(RELEASERS)
        ]
        for thread in threads[1:]:
            thread.start()

        t0 = time.time()
        submit = threading.Thread(target=submitter, args=(soak, specs), daemon=True)
        submit.start()
        handle = inst.handle()
        deadline = t0 + DEADLINE
        progress, progressed = None, time.time()
        try:
            while True:
                assert not soak.errors, soak.errors
                active = handle.rpc("job-manager.stats-get").get()["active_jobs"]
                with soak.lock:
                    waiting = bool(soak.releases or soak.delayed)
                    answered = sum(len(a) for a in soak.answers.values())
                    outstanding = soak.expected_answers - answered
                    now = (soak.submitted, answered, active)
                if (
                    not submit.is_alive()
                    and soak.submitted == count
                    and not waiting
                    and not outstanding
                    and active == 0
                ):
                    break
                if now != progress:
                    progress, progressed = now, time.time()
                if time.time() - progressed > STALL or time.time() > deadline:
                    stuck = EpilogGate(handle).list()
                    raise AssertionError(
                        f"soak stuck: (submitted, answers, active jobs) = {now} "
                        f"for {time.time() - progressed:.0f}s, "
                        f"{outstanding} release answers missing, "
                        f"{len(stuck)} holds left, e.g. {stuck[:5]}"
                    )
                time.sleep(0.2)
        finally:
            soak.stop.set()
        elapsed = time.time() - t0
        for thread in threads + [submit]:
            thread.join(10)
        assert not soak.errors, soak.errors
        logs = eventlogs(handle, soak.by_id)
        return soak, logs, jobs.query(inst), elapsed


def check(soak, logs, query):
    released = timedout = failed = 0
    for jobid, plan in soak.by_id.items():
        events = logs[jobid]
        names = [e.name for e in events]
        assert names and names[-1] == "clean", (jobid, names)
        ran = "start" in names
        assert ran == (plan.path == "run"), (jobid, names)
        for hold in plan.holds:
            key = (jobid, hold.description)
            d = hold.description
            mine = [
                i for i, e in enumerate(events) if e.context.get("description") == d
            ]
            kinds = [events[i].name for i in mine]
            assert kinds.count("epilog-start") == 1, (key, kinds)
            assert kinds.count("epilog-finish") == 1, (key, kinds)
            start = mine[kinds.index("epilog-start")]
            finish = mine[kinds.index("epilog-finish")]
            assert start < finish < names.index("clean")
            if ran:
                assert names.index("finish") < start, (key, names)
            status = events[finish].context["status"]
            t_active, ran_seen = soak.activated[jobid][d]
            assert ran_seen == ran, key
            answers = soak.answers.get(key, [])
            wins = [a for a in answers if a[2]["released"]]
            losses = [a for a in answers if not a[2]["released"]]
            for _, _, answer in losses:
                assert answer.get("reason"), (key, answer)
            if hold.kind == "timeout":
                timedout += 1
                assert status == 124, (key, status)
                assert not wins, (key, answers)
                assert len(losses) == int(hold.late), (key, answers)
                for _, _, answer in losses:
                    assert "time" in answer["reason"], (key, answer)
                elapsed = events[finish].timestamp - events[start].timestamp
                assert elapsed >= TIMEOUT - 0.05, (key, elapsed)
            else:
                released += 1
                assert len(wins) == 1, (key, answers)
                assert len(answers) == 1 + int(hold.duplicate), (key, answers)
                assert status == wins[0][1], (key, status, wins)
            if status != 0:
                failed += 1
                notes = [
                    e.context["note"]
                    for e in events
                    if e.name == "exception"
                    and d in e.context.get("note", "")
                    and e.context.get("type") != "cancel"
                ]
                assert len(notes) == 1, (key, notes)
        # Nothing but the planned holds was started or finished.
        descriptions = {h.description for h in plan.holds}
        for e in events:
            if e.name in ("epilog-start", "epilog-finish"):
                assert e.context["description"] in descriptions, (jobid, e)
        last_finish = max(i for i, n in enumerate(names) if n == "epilog-finish")
        assert last_finish < names.index("clean")

    holds = sum(len(p.holds) for p in soak.by_id.values())
    assert released + timedout == holds
    wins = sum(1 for a in soak.answers.values() for x in a if x[2]["released"])
    assert wins == released
    counters = query["counters"]
    assert counters["timedout"] == timedout, counters
    assert counters["released"] == released, counters
    assert counters["failed"] == failed, counters
    assert counters["activated"] == holds, counters
    assert counters["holds"] == 0 and counters["jobs"] == 0, counters
    # Where the holds were registered: state answered, by planned moment.
    moments = {}
    for jobid, plan in soak.by_id.items():
        for hold in plan.holds:
            state = soak.registered[jobid][hold.description]
            counts = moments.setdefault(hold.moment, {})
            counts[state] = counts.get(state, 0) + 1
    assert set(moments.get("pending", {})) <= {"pending"}, moments
    assert set(moments.get("cleanup", {})) <= {"active"}, moments
    return {
        "jobs": len(soak.by_id),
        "holds": holds,
        "released": released,
        "timedout": timedout,
        "failed": failed,
        "duplicates": sum(len(a) for a in soak.answers.values()) - released,
        "registered": moments,
    }


@pytest.mark.slow
@pytest.mark.timeout(DEADLINE + 300)
def test_soak(plugin):
    """Holds at every moment, in CLEANUP included."""
    soak, logs, query, elapsed = run_soak(
        plugin, ("pending", "running", "random", "cleanup"), JOBS
    )
    summary = check(soak, logs, query)
    print(f"\nsoak: {summary}, {elapsed:.1f}s, {len(logs) / elapsed:.1f} jobs/s")
