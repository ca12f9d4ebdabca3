#!/usr/bin/env python3
"""Benchmark of epilog-gate: what the gate costs the job-manager.

    python bench/run.py            # full run (several minutes)
    python bench/run.py --quick    # CI smoke test: checks the harness works

See bench/README.md for what is measured and how to read the table.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import flux
import flux.job
from flux.constants import FLUX_RPC_STREAMING
from flux.job import JobspecV1

import flux_epilog_gate  # noqa: F401  (puts flux-core's bindings on sys.path)
from flux_epilog_gate import plugin_path
from flux_epilog_gate.testing import Instance

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")

#: Simulated execution of the normal-path jobs.
RUN_DURATION = "0.01s"

#: Instance config common to every configuration: no jobspec validator
#: worker (its Python start-up and per-job cost would only add noise to
#: the untimed submissions).
BASE_CONFIG = "\n[ingest.validator]\ndisable = true\n"

#: Configurations: name -> (plugin, gated, plugin options).  "plugin" is
#: "gate" for epilog-gate.so, "native" for bench/native_gate.c, None for
#: none.  bare-again is bare once more, the A/A control: its ratio to
#: bare shows how far two identical configurations land apart in a run,
#: the resolution of every other ratio.  native-durable is not a target:
#: it shows what recording each hold in its job's eventlog would cost
#: (epilog-gate records pending holds in batches in a KVS key of its own
#: instead).
CONFIGS = {
    "bare": (None, False, {}),
    "bare-again": (None, False, {}),
    "gate-idle": ("gate", False, {}),
    "gate": ("gate", True, {}),
    "native": ("native", True, {}),
    "native-durable": ("native", True, {"durable": 1}),
}

#: "perilog" is the normal path with two holds per job on the gated
#: configurations: a prolog hold (the job's start waits for its release)
#: and an epilog hold, each released as soon as it is active.
WORKLOADS = ("exception", "normal", "perilog")

GATE_SERVICE = "job-manager.epilog-gate"
NATIVE_SERVICE = "job-manager.native-gate"
DESCRIPTION = "bench"
SETUP = "bench-setup"


VERBOSE = bool(os.environ.get("BENCH_VERBOSE"))
_T0 = time.monotonic()


def log(text):
    """Progress line on stderr (the table goes to stdout)."""
    if VERBOSE:
        print(f"[{time.monotonic() - _T0:7.1f}s] {text}", file=sys.stderr, flush=True)


# Building the native reference gate


def build_native(tmpdir):
    """Compile bench/native_gate.c into ``tmpdir``; return the .so path."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise SystemExit("bench: no C compiler (cc) to build native_gate.c")
    flags = subprocess.run(
        ["pkg-config", "--cflags", "--libs", "flux-core"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    out = os.path.join(tmpdir, "native-gate.so")
    subprocess.run(
        [
            cc,
            "-shared",
            "-fPIC",
            "-O2",
            "-Wall",
            "-Werror",
            "-o",
            out,
            os.path.join(HERE, "native_gate.c"),
            *flags,
        ],
        check=True,
    )
    return out


# Observing the broker


class Broker:
    """CPU time and memory of an instance's broker (rank 0)."""

    def __init__(self, handle):
        self.pid = int(handle.attr_get("broker.pid"))
        self.tids = {}
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            with open(f"/proc/{self.pid}/task/{tid}/comm") as f:
                self.tids.setdefault(f.read().strip(), []).append(tid)

    def _cpu_ns(self, tid):
        try:
            with open(f"/proc/{self.pid}/task/{tid}/schedstat") as f:
                return int(f.read().split()[0])
        except OSError:
            return 0

    def cpu(self):
        """CPU time (ns) of the job-manager thread, and of the whole
        broker process."""
        jm = sum(self._cpu_ns(t) for t in self.tids.get("job-manager", []))
        total = 0
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            total += self._cpu_ns(tid)
        return jm, total

    def quiesce(self, interval=0.1, idle_ns=3e6, limit=30.0):
        """Wait until the broker is idle: less than ``idle_ns`` of CPU in
        ``interval`` seconds (or ``limit`` seconds have passed).  After a
        batch the KVS and the content store go on writing for a while."""
        deadline = time.monotonic() + limit
        last = self.cpu()[1]
        while time.monotonic() < deadline:
            time.sleep(interval)
            now = self.cpu()[1]
            if now - last < idle_ns:
                return
            last = now

    def settle(self, seconds):
        """Let the KVS expire its cache entries (10 s), then have glibc hand
        free memory back (malloc_trim, through gdb).  False if that cannot
        be done here (no gdb, ptrace not allowed, or ``seconds`` is 0)."""
        gdb = shutil.which("gdb")
        if not seconds or not gdb:
            return False
        time.sleep(seconds)
        done = subprocess.run(
            [gdb, "-p", str(self.pid), "-batch", "-ex", "call (int)malloc_trim(0)"],
            capture_output=True,
            text=True,
        )
        return done.returncode == 0 and "$1 = " in done.stdout

    def threads(self):
        """CPU time (ns) per thread name, all threads of the broker."""
        out = {}
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            try:
                with open(f"/proc/{self.pid}/task/{tid}/comm") as f:
                    name = f.read().strip()
            except OSError:
                continue
            out[name] = out.get(name, 0) + self._cpu_ns(tid)
        return out

    def rss_kb(self):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS")


def caches(h):
    """Bytes held by the content cache and by the KVS cache of the broker."""
    content = h.rpc("content.stats-get", {}).get()
    kvs = h.rpc("kvs.stats-get", {}).get()
    return {
        "content": content["size"],
        "kvs": kvs["cache"]["obj size total (MiB)"] * 1048576,
    }


def self_cpu_ns():
    return time.process_time_ns()


# The client: one handle, reactor-driven


class Client:
    """Drives one instance: submits, holds, cancels or releases jobs, and
    observes clean events through the job-manager journal.

    Every per-job request is asynchronous; completions are observed from
    two streams (the journal, and the gate's watch), never by polling.
    """

    def __init__(self, handle, service=None):
        self.h = handle
        self.service = service
        self.cleaned = {}  # jobid -> monotonic time its clean arrived
        self.outstanding = set()  # jobs whose clean is awaited
        self.activated = {}  # jobid -> monotonic time its hold became active
        self.errors = []
        self.auto_release = True
        self.pending_responses = 0
        self._wanted = None
        self._journal = self.h.rpc(
            "job-manager.events-journal",
            {"allow": {"clean": 1}, "full": False},
            flags=FLUX_RPC_STREAMING,
        )
        self._journal.then(self._on_journal)
        self._watch = None
        self._watch_closing = False
        if service:
            self.open_watch(service)
        # The journal's backlog ends with a sentinel: wait for it.
        self._sentinel = False
        while not self._sentinel:
            self.h.reactor_run(flags=flux.constants.FLUX_REACTOR_ONCE)

    def open_watch(self, service):
        """Watch holds of ``service`` become active (released at once if
        ``auto_release``)."""
        self.service = service
        self._watch_closing = False
        self._watch = self.h.rpc(f"{service}.watch", {}, flags=FLUX_RPC_STREAMING)
        self._watch.then(self._on_watch)

    def close_watch(self):
        """The plugin is about to be removed: its watch stream ends (or
        goes silent), which is not an error."""
        self._watch_closing = True
        self._watch = None
        self.service = None

    # streams

    def _on_journal(self, future):
        try:
            resp = future.get()
        except OSError as exc:
            self.errors.append(f"journal: {exc}")
            self.h.reactor_stop()
            return
        future.reset()
        if resp["id"] in (-1, flux.constants.FLUX_JOBID_ANY):
            self._sentinel = True
            return
        now = time.monotonic()
        for event in resp["events"]:
            if event["name"] == "clean":
                self.cleaned[resp["id"]] = now
                self.outstanding.discard(resp["id"])
        self._check_done()

    def _on_watch(self, future):
        if self._watch_closing or future is not self._watch:
            return
        try:
            resp = future.get()
        except OSError as exc:
            self.errors.append(f"watch: {exc}")
            self.h.reactor_stop()
            return
        future.reset()
        jobid = resp["id"]
        self.activated[jobid] = time.monotonic()
        if self.auto_release:
            self.release(jobid, resp["description"])
        self._check_done()

    # requests (responses checked, not waited for one by one)

    def _on_response(self, future):
        self.pending_responses -= 1
        try:
            future.get()
        except OSError as exc:
            self.errors.append(str(exc))
            self.h.reactor_stop()
            return
        self._check_done()

    def _send(self, topic, payload):
        future = self.h.rpc(topic, payload)
        self.pending_responses += 1
        future.then(self._on_response)

    def hold(self, jobid, description=DESCRIPTION, point=None):
        payload = {"id": jobid, "description": description}
        if point:
            payload["point"] = point
        self._send(f"{self.service}.hold", payload)

    def release(self, jobid, description=DESCRIPTION):
        self._send(f"{self.service}.release", {"id": jobid, "description": description})

    def cancel(self, jobid):
        self._send(
            "job-manager.raise",
            {"id": jobid, "severity": 0, "type": "cancel", "note": ""},
        )

    def urgency(self, jobid, urgency=16):
        self._send("job-manager.urgency", {"id": jobid, "urgency": urgency})

    # waiting

    def _check_done(self):
        if self._wanted is not None and self._wanted():
            self.h.reactor_stop()

    def run_until(self, predicate, timeout=300.0, what="jobs"):
        """Run the reactor until ``predicate()`` holds."""
        if predicate():
            return
        self._wanted = predicate
        timer = self.h.timer_watcher_create(timeout, lambda *a: self.h.reactor_stop())
        timer.start()
        try:
            deadline = time.monotonic() + timeout
            while not predicate():
                if self.errors:
                    raise RuntimeError(f"bench: request failed: {self.errors[0]}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"bench: timed out waiting for {what}")
                self.h.reactor_run()
            if self.errors:
                raise RuntimeError(f"bench: request failed: {self.errors[0]}")
        finally:
            timer.stop()
            timer.destroy()
            self._wanted = None

    def drain_responses(self, timeout=60.0):
        self.run_until(lambda: self.pending_responses == 0, timeout, "responses")

    # submission (untimed set-up)

    def submit_held(self, count, spec, window=256):
        """Submit ``count`` jobs with urgency 0 (held); return their ids
        once the job-manager has taken every one to SCHED."""
        ids = []
        futures = []
        encoded = spec.dumps()
        for _ in range(count):
            futures.append(flux.job.submit_async(self.h, encoded, urgency=0))
            if len(futures) >= window:
                ids.extend(f.get_id() for f in futures)
                futures = []
        ids.extend(f.get_id() for f in futures)
        self.wait_sched(ids)
        return [int(i) for i in ids]

    def wait_sched(self, ids):
        """Wait until every job in ``ids`` has had its priority event (is in
        SCHED, held); the journal of priority events is only open here."""
        want = {int(i) for i in ids}
        seen = set()
        stream = self.h.rpc(
            "job-manager.events-journal",
            {"allow": {"priority": 1}, "full": False},
            flags=FLUX_RPC_STREAMING,
        )
        try:
            while not want <= seen:
                resp = stream.get()
                stream.reset()
                if resp["events"]:
                    seen.add(resp["id"])
        finally:
            self.h.rpc(
                "job-manager.events-journal-cancel",
                {"matchtag": stream.pimpl.get_matchtag()},
                flags=flux.constants.FLUX_RPC_NORESPONSE,
            )
            try:
                while True:
                    stream.get()
                    stream.reset()
            except OSError:
                pass


def spec_for(workload):
    spec = JobspecV1.from_command(["true"])
    if workload in ("normal", "perilog"):
        spec.setattr("system.exec.test.run_duration", RUN_DURATION)
    return spec


def percentile(values, p):
    """The p-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), round(p / 100.0 * len(ordered) + 0.5)))
    return ordered[rank - 1]


class Bench:
    def __init__(self, args, tmpdir):
        self.args = args
        self.paths = {"gate": plugin_path(), "native": build_native(tmpdir)}

    def instance(self, plugin_kind, cores, options=None):
        plugin = self.paths[plugin_kind] if plugin_kind else None
        return Instance(
            cores=cores, plugin=plugin, plugin_conf=options, config=BASE_CONFIG
        )

    @staticmethod
    def service(plugin_kind):
        return {"gate": GATE_SERVICE, "native": NATIVE_SERVICE}.get(plugin_kind)

    # Throughput

    def drive(self, client, ids, workload, gated):
        """Send every job of ``ids`` on its way (hold first if ``gated``)
        and run until all are clean."""
        client.outstanding = set(ids)
        for jobid in ids:
            if gated and workload == "perilog":
                client.hold(jobid, SETUP, "prolog")
            if gated:
                client.hold(jobid)
            if workload == "exception":
                client.cancel(jobid)
            else:
                client.urgency(jobid)
        client.run_until(lambda: not client.outstanding, what="clean events")
        end = time.monotonic()
        client.drain_responses()
        return end

    def switch(self, h, current, config):
        """Replace configuration ``current`` by ``config`` in the running
        job-manager: remove one plugin, load the other."""
        if current and CONFIGS[current][0]:
            name = os.path.basename(self.paths[CONFIGS[current][0]])
            h.rpc("job-manager.jobtap", {"remove": name}).get()
        plugin_kind, _, options = CONFIGS[config]
        if plugin_kind:
            request = {"load": self.paths[plugin_kind]}
            if options:
                request["conf"] = options
            h.rpc("job-manager.jobtap", request).get()

    def batch(self, client, broker, workload, gated, ids):
        """One timed slot of the held jobs ``ids``: raw totals of its timed
        phase (CPU in ns), summed per configuration by ``combine_slots``."""
        broker.quiesce()
        threads0 = broker.threads()
        jm0, broker0 = broker.cpu()
        me0 = self_cpu_ns()
        t0 = time.monotonic()
        t1 = self.drive(client, ids, workload, gated)
        me1 = self_cpu_ns()
        broker.quiesce()
        jm1, broker1 = broker.cpu()
        threads1 = broker.threads()
        return {
            "jobs": len(ids),
            "seconds": t1 - t0,
            "jm_ns": jm1 - jm0,
            "broker_ns": broker1 - broker0,
            "client_ns": me1 - me0,
            "threads_ns": {
                name: ns - threads0.get(name, 0)
                for name, ns in threads1.items()
                if ns - threads0.get(name, 0) > 0
            },
        }

    def submit_phase(self, client, workload, sequence):
        """Untimed set-up of one workload phase: the jobs of a lead-in
        batch, then of each slot (its warm-up jobs first), submitted in
        the order they will run."""
        spec = spec_for(workload)
        size = self.slot_size(workload)
        lead_in = client.submit_held(size, spec)
        slots = []
        for config in sequence:
            warm = client.submit_held(self.args.warmup, spec)
            slots.append((config, warm, client.submit_held(size, spec)))
        return lead_in, slots

    def slot_size(self, workload):
        return max(1, self.args.jobs[workload] // self.args.slots)

    def throughput_rep(self, order):
        """One repetition: a fresh instance; per workload, every job of
        the phase submitted (held) first, an untimed lead-in batch, then
        the timed slots of ``slot_sequence``, plugins swapped at run time
        between slots.  Returns {config: {workload: figures}}."""
        out = {config: {} for config in order}
        with self.instance(None, self.args.cores) as inst:
            h = inst.handle()
            client = Client(h)
            broker = Broker(h)
            current = None
            for workload in self.args.workloads:
                phase = slot_sequence(
                    order if workload == "exception" else order[::-1], self.args.slots
                )
                t = time.monotonic()
                lead_in, slots = self.submit_phase(client, workload, phase)
                log(f"{workload}: submitted in {time.monotonic() - t:.1f}s")
                progress(f"  {workload} path: {len(slots)} slots")
                # Whatever runs first on a fresh instance runs faster: give
                # that to no configuration.
                self.switch(h, current, "bare")
                current = "bare"
                self.drive(client, lead_in, workload, False)
                raw = {config: [] for config in order}
                for config, warm, ids in slots:
                    self.switch(h, current, config)
                    current = config
                    plugin_kind, gated, _ = CONFIGS[config]
                    if gated:
                        client.open_watch(self.service(plugin_kind))
                    self.drive(client, warm, workload, gated)
                    raw[config].append(self.batch(client, broker, workload, gated, ids))
                    client.close_watch()
                    log(f"{config} {workload}: {raw[config][-1]['seconds']:.2f}s")
                for config in order:
                    out[config][workload] = combine_slots(raw[config])
                    out[config].setdefault("loadavg", loadavg()[0])
                # Forget the inactive jobs before the next workload.
                inst.flux("job", "purge", "--force", "--num-limit=0", timeout=300)
            self.switch(h, current, "bare")
        return out

    # Release latency with many holds outstanding

    def held_and_active(self, client, count, spec):
        """Submit ``count`` jobs, hold each and cancel each, so every hold
        is active; return the ids."""
        client.auto_release = False
        ids = client.submit_held(count, spec)
        for jobid in ids:
            client.hold(jobid)
            client.cancel(jobid)
        client.run_until(
            lambda: all(j in client.activated for j in ids), what="activations"
        )
        client.drain_responses()
        return ids

    def latency_run(self, plugin_kind):
        """Release -> clean latency, one release at a time, with at least
        ``outstanding`` other holds active."""
        outstanding, samples = self.args.outstanding, self.args.samples
        log(f"latency {plugin_kind}: starting instance")
        with self.instance(plugin_kind, self.args.cores) as inst:
            h = inst.handle()
            client = Client(h, self.service(plugin_kind))
            spec = spec_for("exception")
            warm = self.held_and_active(client, self.args.warmup, spec)
            for jobid in warm:
                client.release(jobid)
            client.run_until(lambda: all(j in client.cleaned for j in warm))
            ids = self.held_and_active(client, outstanding + samples, spec)
            Broker(h).quiesce()
            log(f"latency {plugin_kind}: {len(ids)} holds active, sampling")
            latencies = []
            for jobid in ids[:samples]:
                t0 = time.monotonic()
                client.release(jobid)
                client.run_until(lambda j=jobid: j in client.cleaned, what="clean")
                latencies.append(client.cleaned[jobid] - t0)
                client.drain_responses()
            log(f"latency {plugin_kind}: done")
            # Let the other jobs go, so that the instance shuts down at once.
            rest = ids[samples:]
            for jobid in rest:
                client.release(jobid)
            client.run_until(lambda: all(j in client.cleaned for j in rest))
            client.drain_responses()
        ms = [x * 1e3 for x in latencies]
        return {
            "outstanding": outstanding,
            "samples": samples,
            "p50_ms": percentile(ms, 50),
            "p99_ms": percentile(ms, 99),
            "max_ms": max(ms),
        }

    # list and memory with many holds outstanding

    def hold_scale_run(self, plugin_kind, options=None):
        """Broker memory growth per held job, and (epilog-gate only) the
        time of a list of every hold."""
        count = self.args.list_holds
        log(f"scale {plugin_kind}: starting instance")
        with self.instance(plugin_kind, self.args.cores, options) as inst:
            h = inst.handle()
            client = Client(h, self.service(plugin_kind))
            broker = Broker(h)
            spec = spec_for("exception")
            # warm the gate's code paths up before measuring
            warm = self.held_and_active(client, self.args.warmup, spec)
            for jobid in warm:
                client.release(jobid)
            client.run_until(lambda: all(j in client.cleaned for j in warm))
            ids = client.submit_held(count, spec)
            log(f"scale {plugin_kind}: {count} jobs submitted")
            broker.quiesce(limit=30)
            trimmed = broker.settle(self.args.settle)
            rss0, caches0 = broker.rss_kb(), caches(h)
            for jobid in ids:
                client.hold(jobid)
            client.drain_responses(timeout=300)
            broker.quiesce(limit=30)
            rss1, caches1 = broker.rss_kb(), caches(h)
            if trimmed:
                broker.settle(self.args.settle)
                rss2 = broker.rss_kb()
            out = {
                "holds": count,
                "rss_before_kb": rss0,
                "rss_after_kb": rss1,
                "bytes_per_hold": (rss1 - rss0) * 1024 / count,
                # after the KVS cache expired its entries and malloc_trim
                "retained_bytes_per_hold": (
                    (rss2 - rss0) * 1024 / count if trimmed else None
                ),
                # what the content and KVS caches hold more, per hold
                "cache_bytes_per_hold": {
                    k: (caches1[k] - caches0[k]) / count for k in caches0
                },
            }
            if plugin_kind == "gate":
                times, answered = [], []
                size = 0
                for _ in range(self.args.list_repeat):
                    t0 = time.monotonic()
                    text = h.rpc(f"{GATE_SERVICE}.list", {}).get_str()
                    t1 = time.monotonic()
                    holds = json.loads(text)["holds"]
                    times.append(time.monotonic() - t0)
                    answered.append(t1 - t0)
                    size = len(text)
                if len(holds) != count:
                    raise RuntimeError(f"list answered {len(holds)} of {count} holds")
                out.update(
                    list_ms_median=statistics.median(times) * 1e3,
                    list_ms_min=min(times) * 1e3,
                    list_ms_answer_median=statistics.median(answered) * 1e3,
                    list_bytes=size,
                )
            log(f"scale {plugin_kind}: done")
        return out

    # Python state of the gate per hold, without the job-manager

    @staticmethod
    def python_state_per_hold(count):
        """Bytes of Python objects the gate keeps per hold (tracemalloc,
        the gate driven through a fake port): the plugin's own share of the
        memory, which broker RSS cannot tell apart from the KVS's."""
        import tracemalloc

        from flux_epilog_gate.gate import Gate

        class Timer:
            def stop(self):
                pass

        class Port:
            def now(self):
                return time.time()

            def job_info(self, jobid):
                return 8, 1000  # SCHED, some user

            def posted(self, jobid, name):
                return False

            def timer(self, delay, callback):
                return Timer()

            def send_activation(self, sink, payload):
                return True

            def kvs_commit(self, key, text, append, callback, sync=False):
                callback(None)

            def __getattr__(self, name):
                return lambda *args, **kwargs: None

        gate = Gate(Port())
        gate.hold(1, DESCRIPTION)  # first use: lazily built state
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        for jobid in range(2, count + 2):
            gate.hold(jobid, DESCRIPTION)
        # Every record committed at once: the steady state, nothing queued.
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
        return grown / count


# Running the whole benchmark


def slot_sequence(order, slots):
    """The timed slots of one workload phase: ``order`` forward, then
    backward, and so on, ``slots`` times.  Each configuration's slots
    then sit at the same mean position, so that a drift of the machine's
    speed during the phase hits every configuration alike."""
    out = []
    for slot in range(slots):
        out.extend(order if slot % 2 == 0 else order[::-1])
    return out


def orders(configs, reps):
    """Configuration order of each repetition: a rotation of the
    configurations, one step further in each repetition.  Within a
    repetition the slots mirror the order (``slot_sequence``), so every
    configuration already sits at the same mean position; the rotation
    changes which one runs first and next to which."""
    return [configs[k:] + configs[:k] for k in (r % len(configs) for r in range(reps))]


def combine_slots(slots):
    """One configuration's figures in one repetition, from the raw totals
    of its slots."""
    n = sum(slot["jobs"] for slot in slots)
    seconds = sum(slot["seconds"] for slot in slots)
    threads = {}
    for slot in slots:
        for name, ns in slot["threads_ns"].items():
            threads[name] = threads.get(name, 0) + ns
    return {
        "jobs": n,
        "seconds": seconds,
        "jobs_per_s": n / seconds,
        "slot_jobs_per_s": [slot["jobs"] / slot["seconds"] for slot in slots],
        "jm_cpu_us_per_job": sum(s["jm_ns"] for s in slots) / n / 1e3,
        "broker_cpu_us_per_job": sum(s["broker_ns"] for s in slots) / n / 1e3,
        "client_cpu_us_per_job": sum(s["client_ns"] for s in slots) / n / 1e3,
        "thread_cpu_us_per_job": {
            name: round(ns / n / 1e3, 1) for name, ns in threads.items()
        },
    }


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def summarize(runs, configs):
    """Per configuration and workload: medians of the raw figures; per
    ratio: the median of the per-repetition (paired) ratios."""
    figures = {}
    workloads = [w for w in WORKLOADS if w in runs[0][configs[0]]]
    for config in configs:
        for workload in workloads:
            rows = [r[config][workload] for r in runs]
            figures[f"{config}/{workload}"] = {
                key: {
                    "median": median([row[key] for row in rows]),
                    "min": min(row[key] for row in rows),
                    "max": max(row[key] for row in rows),
                }
                for key in rows[0]
                if isinstance(rows[0][key], (int, float))
            }
            names = {
                name for row in rows for name in row.get("thread_cpu_us_per_job", {})
            }
            figures[f"{config}/{workload}"]["thread_cpu_us_per_job"] = {
                name: median(
                    [row["thread_cpu_us_per_job"].get(name, 0) for row in rows]
                )
                for name in sorted(names)
            }
    ratios = {}
    pairs = [
        ("bare-again", "bare"),
        ("gate-idle", "bare"),
        ("gate", "native"),
        ("native-durable", "native"),
        ("gate", "native-durable"),
        ("native", "bare"),
        ("gate", "bare"),
    ]
    for num, den in pairs:
        if num not in configs or den not in configs:
            continue
        for workload in workloads:
            per_rep = [
                r[num][workload]["jobs_per_s"] / r[den][workload]["jobs_per_s"]
                for r in runs
            ]
            cpu = [
                r[num][workload]["jm_cpu_us_per_job"]
                / r[den][workload]["jm_cpu_us_per_job"]
                for r in runs
            ]
            ratios[f"{num}/{den}/{workload}"] = {
                "jobs_per_s": median(per_rep),
                "jobs_per_s_reps": per_rep,
                "jm_cpu": median(cpu),
                "jm_cpu_reps": cpu,
            }
    return figures, ratios


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


#: Options that count something: at least 1.
COUNTS = (
    "reps",
    "jobs_exception",
    "jobs_normal",
    "jobs_perilog",
    "slots",
    "outstanding",
    "samples",
    "list_holds",
    "cores",
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small counts: a smoke test of the harness, not a measurement",
    )
    parser.add_argument("--reps", type=int, help="repetitions of the throughput runs")
    parser.add_argument(
        "--jobs-exception", type=int, help="jobs per exception-path run"
    )
    parser.add_argument("--jobs-normal", type=int, help="jobs per normal-path run")
    parser.add_argument(
        "--jobs-perilog",
        type=int,
        help="jobs per normal-path run with a prolog and an epilog hold per job",
    )
    parser.add_argument(
        "--workloads",
        help=f"comma-separated throughput workloads (default: {','.join(WORKLOADS)})",
    )
    parser.add_argument(
        "--slots",
        type=int,
        help="timed slots each run is split into, in mirrored order",
    )
    parser.add_argument(
        "--outstanding",
        type=int,
        help="active holds outstanding while release latency is sampled",
    )
    parser.add_argument("--samples", type=int, help="release latency samples")
    parser.add_argument(
        "--list-holds", type=int, help="holds outstanding for list and memory"
    )
    parser.add_argument("--cores", type=int, help="fake cores of each instance")
    parser.add_argument(
        "--settle",
        type=float,
        help="seconds to let caches expire before a memory reading "
        "(then malloc_trim through gdb; 0: raw readings only)",
    )
    parser.add_argument(
        "--configs",
        help="comma-separated throughput configurations "
        f"(default: {','.join(CONFIGS)})",
    )
    parser.add_argument(
        "--skip",
        default="",
        help="comma-separated parts to skip: throughput,latency,scale",
    )
    parser.add_argument(
        "--output", help="JSON results file (default: bench/results/<time>.json)"
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 if a target is missed (never with --quick)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="progress details on stderr"
    )
    args = parser.parse_args(argv)
    full = dict(
        reps=10,
        jobs_exception=5000,
        jobs_normal=300,
        jobs_perilog=300,
        slots=2,
        outstanding=1000,
        samples=200,
        list_holds=10000,
        cores=1024,
        warmup=20,
        list_repeat=7,
        settle=12,
    )
    quick = dict(
        reps=2,
        jobs_exception=100,
        jobs_normal=30,
        jobs_perilog=30,
        slots=2,
        outstanding=50,
        samples=20,
        list_holds=300,
        cores=128,
        warmup=5,
        list_repeat=3,
        settle=0,
    )
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    for key in COUNTS:
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be at least 1")
    args.jobs = {
        "exception": args.jobs_exception,
        "normal": args.jobs_normal,
        "perilog": args.jobs_perilog,
    }
    for workload, n in args.jobs.items():
        if args.slots > n:
            parser.error(f"--slots {args.slots} is more than --jobs-{workload} {n}")
    args.workloads = args.workloads.split(",") if args.workloads else list(WORKLOADS)
    for workload in args.workloads:
        if workload not in WORKLOADS:
            parser.error(f"unknown workload {workload!r}")
    args.configs = args.configs.split(",") if args.configs else list(CONFIGS)
    for config in args.configs:
        if config not in CONFIGS:
            parser.error(f"unknown configuration {config!r}")
    args.skip = {s for s in args.skip.split(",") if s}
    return args


def run(args):
    global VERBOSE
    VERBOSE = VERBOSE or args.verbose
    results = {
        "mode": "quick" if args.quick else "full",
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "host": {
            "node": platform.node(),
            "cpus": os.cpu_count(),
            "loadavg_start": loadavg(),
        },
        "flux": "flux-core "
        + subprocess.run(["flux", "version"], capture_output=True, text=True)
        .stdout.split("\n")[0]
        .split()[-1],
        "params": {k: v for k, v in vars(args).items() if k != "skip"},
    }
    with tempfile.TemporaryDirectory(prefix="epilog-gate-bench-") as tmpdir:
        bench = Bench(args, tmpdir)
        results["plugin"] = bench.paths["gate"]
        if "throughput" not in args.skip:
            runs = []
            for rep, order in enumerate(orders(args.configs, args.reps)):
                progress(f"repetition {rep + 1}/{args.reps}")
                runs.append(bench.throughput_rep(order))
            figures, ratios = summarize(runs, args.configs)
            results["throughput"] = {"runs": runs, "figures": figures, "ratios": ratios}
        if "latency" not in args.skip:
            progress("release latency: gate, native")
            results["latency"] = {k: bench.latency_run(k) for k in ("gate", "native")}
        if "scale" not in args.skip:
            scale = {}
            for name, kind, options in (
                ("gate", "gate", {}),
                ("native", "native", {}),
                ("native-durable", "native", {"durable": 1}),
            ):
                progress(f"{args.list_holds} holds: {name}")
                scale[name] = bench.hold_scale_run(kind, options)
            try:
                scale["python_state_bytes_per_hold"] = bench.python_state_per_hold(
                    args.list_holds
                )
            except Exception as exc:  # noqa: BLE001 - a model figure only
                scale["python_state_bytes_per_hold"] = None
                scale["python_state_error"] = repr(exc)
            results["scale"] = scale
    results["host"]["loadavg_end"] = loadavg()
    results["targets"] = targets(results)
    return results


def progress(text):
    print(f"bench: {text}", file=sys.stderr, flush=True)


# Targets and the report


def targets(results):
    """The issue's targets, each with the figure it is judged on."""
    out = []
    ratios = results.get("throughput", {}).get("ratios", {})
    for pair, goal in (("gate-idle/bare", 0.97), ("gate/native", 0.85)):
        for workload in WORKLOADS:
            if pair == "gate-idle/bare" and workload == "perilog":
                continue  # the same as the normal path without holds
            r = ratios.get(f"{pair}/{workload}")
            if r:
                out.append(
                    {
                        "name": f"{pair.replace('/', ' / ')} jobs/s, {workload} path",
                        "target": f">= {goal}",
                        "value": r["jobs_per_s"],
                        "unit": "",
                        "met": r["jobs_per_s"] >= goal,
                    }
                )
    lat = results.get("latency", {}).get("gate")
    if lat:
        out.append(
            {
                "name": f"release -> clean p99, {lat['outstanding']} holds active",
                "target": "<= 10 ms",
                "value": lat["p99_ms"],
                "unit": " ms",
                "met": lat["p99_ms"] <= 10.0,
            }
        )
    scale = results.get("scale", {})
    gate = scale.get("gate")
    if gate:
        out.append(
            {
                "name": f"list of {gate['holds']} holds (median)",
                "target": "< 100 ms",
                "value": gate["list_ms_median"],
                "unit": " ms",
                "met": gate["list_ms_median"] < 100.0,
            }
        )
        retained = gate.get("retained_bytes_per_hold")
        value = retained if retained is not None else gate["bytes_per_hold"]
        out.append(
            {
                "name": "broker RSS growth per held job"
                + (" (retained)" if retained is not None else ""),
                "target": "< 2 KB",
                "value": value / 1024,
                "unit": " KB",
                "met": value < 2048,
            }
        )
    return out


def fmt(value, digits=2):
    if value is None or value != value:
        return "n/a"
    return f"{value:.{digits}f}"


def report(results):
    """The table, as text."""
    lines = []
    add = lines.append
    host = results["host"]
    quick = results["mode"] == "quick"
    params = results["params"]
    add(
        f"epilog-gate benchmark, {results['mode']} mode"
        + ("  (QUICK: checks the harness, the figures mean nothing)" if quick else "")
    )
    add(
        f"{results['flux']}; {host['cpus']} CPUs; load average "
        f"{host['loadavg_start'][0]:.2f} at start, {host['loadavg_end'][0]:.2f} at end"
    )
    during = [
        run[c]["loadavg"]
        for run in results.get("throughput", {}).get("runs", [])
        for c in run
    ]
    if during:
        add(
            f"load average after each throughput run: median {median(during):.2f}, "
            f"{min(during):.2f}..{max(during):.2f}"
        )
    add("")
    add("TARGETS")
    for t in results["targets"]:
        verdict = "met" if t["met"] else "MISSED"
        if quick:
            verdict += " (quick)"
        value = fmt(t["value"]) + t["unit"]
        add(f"  {t['name']:<46} {t['target']:>9}  {value:>10}  {verdict}")
    tp = results.get("throughput")
    control = tp and tp["ratios"].get("bare-again/bare/exception")
    if control:
        normal = tp["ratios"]["bare-again/bare/normal"]
        add(
            f"  {'A/A control: bare-again / bare (ideal 1.00)':<46} "
            f"{'':>9}  {fmt(control['jobs_per_s']):>10}  exception path, "
            f"{fmt(normal['jobs_per_s'])} normal path"
        )
    if tp:
        add("")
        reps = params["reps"]
        add(f"RATIOS: median of {reps} paired per-repetition ratios [min..max]")
        add(
            f"  {'':<26}{'jobs/s exception':>22}{'jobs/s normal':>22}"
            f"{'JM CPU/job exc.':>18}{'JM CPU/job norm.':>18}"
        )
        names = sorted(
            {k.rsplit("/", 1)[0] for k in tp["ratios"]},
            key=lambda n: list(tp["ratios"]).index(
                next(k for k in tp["ratios"] if k.startswith(n + "/"))
            ),
        )
        for name in names:
            if f"{name}/exception" not in tp["ratios"]:
                continue
            row = f"  {name.replace('/', ' / '):<26}"
            for key in ("jobs_per_s",):
                for workload in ("exception", "normal"):
                    r = tp["ratios"][f"{name}/{workload}"]
                    reps = r[f"{key}_reps"]
                    row += f"{fmt(r[key]):>8} [{fmt(min(reps))}..{fmt(max(reps))}]"
            for workload in ("exception", "normal"):
                row += f"{fmt(tp['ratios'][f'{name}/{workload}']['jm_cpu']):>18}"
            add(row)
        for name in names:
            r = tp["ratios"].get(f"{name}/perilog")
            if r:
                reps = r["jobs_per_s_reps"]
                add(
                    f"  {name.replace('/', ' / '):<26} perilog path (prolog + "
                    f"epilog hold): {fmt(r['jobs_per_s'])} "
                    f"[{fmt(min(reps))}..{fmt(max(reps))}], JM CPU/job "
                    f"{fmt(r['jm_cpu'])}"
                )
        add("")
        add(
            f"THROUGHPUT: median over repetitions [min..max]; "
            f"{params['jobs_exception']} exception-path, {params['jobs_normal']} "
            f"normal-path, {params.get('jobs_perilog')} perilog-path jobs per run"
        )
        add(
            f"  {'config':<16}{'workload':<11}{'jobs/s':>8} {'[min..max]':<19}"
            f"{'JM us/job':>11}{'broker us/job':>15}{'client us/job':>15}"
        )
        for key, f in tp["figures"].items():
            config, workload = key.split("/")
            j = f["jobs_per_s"]
            spread = f"[{fmt(j['min'], 1)}..{fmt(j['max'], 1)}]"
            add(
                f"  {config:<16}{workload:<11}{fmt(j['median'], 1):>8} {spread:<19}"
                + f"{fmt(f['jm_cpu_us_per_job']['median'], 0):>11}"
                f"{fmt(f['broker_cpu_us_per_job']['median'], 0):>15}"
                f"{fmt(f['client_cpu_us_per_job']['median'], 0):>15}"
            )
    lat = results.get("latency")
    if lat:
        add("")
        first = next(iter(lat.values()))
        add(
            f"RELEASE -> CLEAN: {first['samples']} releases one at a time, "
            f">= {first['outstanding']} other holds active"
        )
        for name, r in lat.items():
            add(
                f"  {name:<16} p50 {fmt(r['p50_ms'])} ms   p99 {fmt(r['p99_ms'])} ms"
                f"   max {fmt(r['max_ms'])} ms"
            )
    scale = results.get("scale")
    if scale:
        add("")
        add(f"HOLDS AT SCALE: {params['list_holds']} pending holds")
        g = scale["gate"]
        add(
            f"  list (epilog-gate)            median {fmt(g['list_ms_median'], 1)} ms,"
            f" min {fmt(g['list_ms_min'], 1)} ms, {g['list_bytes'] // 1024} KB answer"
        )
        add(
            f"    (answered in {fmt(g['list_ms_answer_median'], 1)} ms, the rest is "
            "the client decoding it)"
        )
        add("  per held job:         broker RSS  retained   content cache   KVS cache")
        for name in ("gate", "native", "native-durable"):
            if name in scale:
                c = scale[name]["cache_bytes_per_hold"]
                kept = scale[name].get("retained_bytes_per_hold")
                add(
                    f"    {name:<18}"
                    f"{fmt(scale[name]['bytes_per_hold'] / 1024):>8} KB"
                    f"{fmt(kept / 1024 if kept is not None else None):>7} KB"
                    f"{fmt(c['content'] / 1024):>13} KB{fmt(c['kvs'] / 1024):>9} KB"
                )
        py = scale.get("python_state_bytes_per_hold")
        add(
            "  Python state per hold (tracemalloc, fake port): "
            + (
                f"{py:.0f} B"
                if py is not None
                else scale.get("python_state_error", "n/a")
            )
        )
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    results = run(args)
    text = report(results)
    print(text, flush=True)
    os.makedirs(RESULTS, exist_ok=True)
    path = args.output or os.path.join(
        RESULTS, time.strftime("%Y%m%d-%H%M%S") + f"-{results['mode']}.json"
    )
    results["report"] = text.splitlines()
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    print(f"\nresults: {path}", flush=True)
    missed = [t for t in results["targets"] if not t["met"]]
    return 1 if args.strict and missed and not args.quick else 0


if __name__ == "__main__":
    sys.exit(main())
