"""The report: the issue's targets, each with the figure it is judged
on, and the table bench/run.py prints."""

from common import median
from options import WORKLOADS


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


def _kb(value):
    return None if value is None else value / 1024


def fmt(value, digits=2):
    if value is None or value != value:
        return "n/a"
    return f"{value:.{digits}f}"


def report(results):
    """The table, as text."""
    lines = _header(results)
    for section in (_targets, _ratios, _throughput, _latency, _scale):
        lines.extend(section(results))
    return "\n".join(lines)


def _header(results):
    """Mode, flux-core, machine and its load."""
    lines = []
    add = lines.append
    host = results["host"]
    quick = results["mode"] == "quick"
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
    return lines


def _targets(results):
    """The targets, and the A/A control to read them against."""
    lines = []
    add = lines.append
    quick = results["mode"] == "quick"
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
    return lines


def _ratios(results):
    """The paired jobs/s and CPU ratios."""
    lines = []
    add = lines.append
    tp = results.get("throughput")
    if not tp:
        return lines
    params = results["params"]
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
    return lines


def _throughput(results):
    """jobs/s and CPU per job of each configuration and workload."""
    lines = []
    add = lines.append
    tp = results.get("throughput")
    if not tp:
        return lines
    params = results["params"]
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
    return lines


def _latency(results):
    """Release -> clean latencies."""
    lines = []
    add = lines.append
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
    return lines


def _scale(results):
    """Holds at scale: list, memory, Python state."""
    lines = []
    add = lines.append
    params = results["params"]
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
        add(
            "  per held job:         broker RSS  retained   content cache   KVS cache"
            "   heap"
        )
        for name in ("gate", "native", "native-durable"):
            if name in scale:
                c = scale[name]["cache_bytes_per_hold"]
                kept = scale[name].get("retained_bytes_per_hold")
                add(
                    f"    {name:<18}"
                    f"{fmt(scale[name]['bytes_per_hold'] / 1024):>8} KB"
                    f"{fmt(kept / 1024 if kept is not None else None):>7} KB"
                    f"{fmt(c['content'] / 1024):>13} KB{fmt(c['kvs'] / 1024):>9} KB"
                    f"{fmt(_kb(scale[name].get('heap_bytes_per_hold'))):>7} KB"
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
    return lines
