"""The throughput experiment: jobs/s and CPU per job of every
configuration, its slots in mirrored order in one instance per
repetition, plugins swapped at run time; and the arithmetic that turns
its slots into figures and paired ratios."""

import time

from client import Client
from common import SETUP, loadavg, log, median, progress, spec_for
from observer import Broker, self_cpu_ns
from options import CONFIGS, WORKLOADS


def drive(client, ids, workload, gated):
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


class Throughput:
    """Runs the throughput repetitions with ``plugins`` (common.Plugins)
    as ``args`` (options.parse_args) say."""

    def __init__(self, plugins, args):
        self.plugins = plugins
        self.args = args

    def switch(self, h, current, config):
        """Replace configuration ``current`` by ``config`` in the running
        job-manager: remove one plugin, load the other."""
        if current and CONFIGS[current][0]:
            self.plugins.remove(h, CONFIGS[current][0])
        plugin_kind, _, options = CONFIGS[config]
        if plugin_kind:
            self.plugins.load(h, plugin_kind, options)

    def batch(self, client, broker, workload, gated, ids):
        """One timed slot of the held jobs ``ids``: raw totals of its timed
        phase (CPU in ns), summed per configuration by ``combine_slots``."""
        broker.quiesce()
        threads0 = broker.threads()
        jm0, broker0 = broker.cpu()
        me0 = self_cpu_ns()
        t0 = time.monotonic()
        t1 = drive(client, ids, workload, gated)
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

    def rep(self, order):
        """One repetition: a fresh instance; per workload, every job of
        the phase submitted (held) first, an untimed lead-in batch, then
        the timed slots of ``slot_sequence``, plugins swapped at run time
        between slots.  Returns {config: {workload: figures}}."""
        out = {config: {} for config in order}
        with self.plugins.instance(None, self.args.cores) as inst:
            h = inst.handle()
            client = Client(h)
            broker = Broker(h)
            current = None
            for workload in self.args.workloads:
                raw, current = self.phase(h, client, broker, workload, order, current)
                for config in order:
                    out[config][workload] = combine_slots(raw[config])
                    out[config].setdefault("loadavg", loadavg()[0])
                # Forget the inactive jobs before the next workload.
                inst.flux("job", "purge", "--force", "--num-limit=0", timeout=300)
            self.switch(h, current, "bare")
        return out

    def phase(self, h, client, broker, workload, order, current):
        """One workload's phase of a repetition: its jobs submitted, the
        lead-in batch on the bare job-manager, then the timed slots, the
        configurations in mirrored ``order``.  ``current`` is the
        configuration loaded before; returns the raw slots of each
        configuration, and the configuration loaded at the end."""
        sequence = slot_sequence(
            order if workload == "exception" else order[::-1], self.args.slots
        )
        t = time.monotonic()
        lead_in, slots = self.submit_phase(client, workload, sequence)
        log(f"{workload}: submitted in {time.monotonic() - t:.1f}s")
        progress(f"  {workload} path: {len(slots)} slots")
        # Whatever runs first on a fresh instance runs faster: give
        # that to no configuration.
        self.switch(h, current, "bare")
        current = "bare"
        drive(client, lead_in, workload, False)
        raw = {config: [] for config in order}
        for config, warm, ids in slots:
            self.switch(h, current, config)
            current = config
            plugin_kind, gated, _ = CONFIGS[config]
            if gated:
                client.open_watch(self.plugins.service(plugin_kind))
            drive(client, warm, workload, gated)
            raw[config].append(self.batch(client, broker, workload, gated, ids))
            client.close_watch()
            log(f"{config} {workload}: {raw[config][-1]['seconds']:.2f}s")
        return raw, current


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
