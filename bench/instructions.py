#!/usr/bin/env python3
"""Instructions the job-manager thread executes per job, under callgrind.

    python bench/instructions.py                  # every configuration
    python bench/instructions.py --configs bare,gate-idle --jobs 200
    python bench/instructions.py --workloads exception,normal
    python bench/instructions.py --workloads rabbit --jobs 50
    python bench/instructions.py --workloads durable --jobs 1000

Jobs/s on a shared 2-core machine move by 10-20% from run to run;
instruction counts do not.  For each configuration of bench/run.py this
starts a test instance whose broker runs under ``valgrind --tool=callgrind``,
drives a workload of bench/run.py (by default the exception path: each job
cancelled while pending, held and released in the gated configurations)
with instrumentation switched on for the driven jobs only, and reports the
job-manager thread's instructions per job, with the share spent in Python
(libpython and cffi), the calls of fnmatch() per job (flux-core matches
each jobtap call against every handler of every plugin with it), and
flux-core's calls of plugins per job: of job topics (``calls/job``: a
job.state.* topic is called only if some handler matches it), and of a
subscribed job's events (``events/job``: every event after the job's
first subscription, whoever still listens).  It is
slow (about half a minute per configuration and workload) and needs
valgrind.

The ``rabbit`` workload has configurations of its own (RABBIT): each job
carries ``attributes.system.dw`` and is submitted, held in DEPEND, its
prolog and its epilog by the ``dws`` plugin, each hold released at once
by the project's fake DWS service (t/dws_service.py), and run to its
clean; submission is part of what is counted, in every configuration.
``dws-jobtap`` is flux-coral2's own C plugin, fed by the same service:
taken from DWS_JOBTAP_SO, or built alone from the flux-coral2 tree
CORAL2_SRC (src/job-manager/plugins/dws-jobtap.c); with neither, that
row is not measured, and the report says so.  ``dws-nolog`` is dws.so
built here for the benchmark only with its hold log taken out (no
record is made, each is answered at once as if it were durable:
HoldLog.unrecorded; a hold it takes would not survive a crash):
``dws - dws-nolog`` is what the durable record costs (the records made,
their commits and the answers), the rest of ``dws - dws-jobtap`` is
overhead.

The ``durable`` workload is bench/durable.py's one-client mix under
callgrind (configurations DURABLE): ``hold`` requests only, on jobs
waiting in SCHED, one client keeping 64 in flight, each answered once its
record is synced.  It counts every broker thread, not the job-manager's
alone (a synced record costs the KVS and the content store as much as
the job-manager), per hold, with the holds per synced commit.
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import flux.job

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import durable  # noqa: E402
import options  # noqa: E402
from client import Client, hold_pipelined, submit_waiting  # noqa: E402
from common import Plugins, result_path, spec_for, write_results  # noqa: E402
from observer import Broker  # noqa: E402
from throughput import drive  # noqa: E402

from flux_epilog_gate.paths import plugin_path  # noqa: E402

#: bench/run.py's configurations, the gate with annotations on (what
#: they cost is counted here only: they do not change jobs/s measurably),
#: and native-durable-lazy, the native gate that also asks for a held
#: job's events only while its finish is awaited, as the gate does (each
#: event of a subscribed job costs the job-manager a call with the job's
#: arguments packed): the same work in C, for a reader of the gate's ratio
#: to native-durable.
CONFIGS = dict(
    options.CONFIGS,
    **{
        "gate-annotate": ("gate", True, {"annotate": True}),
        "native-durable-lazy": ("native", True, {"durable": 1, "lazy": 1}),
    },
)

#: The rabbit workload's configurations: name -> the plugins loaded, in
#: order.  "bare" runs the same jobs; without the plugin their dw
#: attribute is ignored.
RABBIT = {
    "bare": (),
    "bare-again": (),
    "dws-jobtap": ("dws-jobtap",),
    "dws": ("dws",),
    "dws-nolog": ("dws-nolog",),
    "dws+gate": ("epilog-gate", "dws"),
}
#: The plugins of RABBIT that are not the project's: how to get each.
FOREIGN = {"dws-jobtap": "set CORAL2_SRC (a flux-coral2 tree) or DWS_JOBTAP_SO"}
#: flux-coral2's plugin, in its tree.
DWS_JOBTAP_C = os.path.join("src", "job-manager", "plugins", "dws-jobtap.c")
#: The durable workload's configurations: bench/durable.py's, as
#: CONFIGS has them (every one takes holds).
DURABLE = {name: (kind, True, conf) for name, (kind, conf) in durable.CONFIGS.items()}
#: Requests in flight in the durable workload (durable.py's one client).
DURABLE_WINDOW = 64
WORKLOADS = (*options.WORKLOADS, "rabbit", "durable")
DW = "#DW jobdw type=xfs capacity=1GiB name=bench"
SERVICE = os.path.join(HERE, "..", "t", "dws_service.py")

PYTHON_OBJECTS = ("libpython", "_cffi_backend")
JOB_MANAGER_FUNCTION = "event_job_process_entry"
#: A broker thread is named by the first of these its profile mentions
#: (the job-manager's by its module: a workload of requests alone, the
#: durable one, processes no job event); the others are "other".
THREADS = (
    ("modules/job-manager.so", "job-manager"),
    ("modules/kvs-watch.so", "kvs-watch"),
    ("modules/kvs.so", "kvs"),
    ("libsqlite3", "content-sqlite"),
    ("modules/content.so", "content"),
    ("connector-local", "connector-local"),
)
FNMATCH = "fnmatch.c:fnmatch@@"
#: flux-core's call of one jobtap topic on every plugin that handles it,
#: made only when some handler's pattern matches the topic; from
#: jobtap_call, a job.state.* (or other job) topic, not a subscriber's
#: job.event.*.
STACK_CALL = "jobtap.c:jobtap_stack_call "
STATE_CALLER = "jobtap.c:jobtap_call "
#: ... and from there, a job.event.* of a job some plugin subscribed to
#: (made for every event that follows the job's first subscription:
#: flux-core keeps its list of subscribers, even empty, until the job
#: is gone).
EVENT_CALLER = "jobtap.c:jobtap_notify_subscribers "


def instrumented(h):
    """Switch callgrind's instrumentation of the broker on and, on
    leaving, off again, and dump the profile."""
    pid = h.attr_get("broker.pid")
    control = ["callgrind_control", "-i"]

    class Window:
        def __enter__(self):
            subprocess.run([*control, "on", pid], check=True, capture_output=True)

        def __exit__(self, *exc):
            subprocess.run([*control, "off", pid], check=True, capture_output=True)
            subprocess.run(
                ["callgrind_control", "-d", pid], check=True, capture_output=True
            )

    return Window()


def run_rabbits(client, count, spec):
    """Submit ``count`` rabbit jobs and run until every one is clean."""
    encoded = spec.dumps()
    futures = [flux.job.submit_async(client.h, encoded) for _ in range(count)]
    ids = [int(f.get_id()) for f in futures]
    client.outstanding = set(ids) - set(client.cleaned)
    client.run_until(lambda: not client.outstanding, what="clean rabbit jobs")


def dws_jobtap_so(tmpdir, environ=os.environ):
    """flux-coral2's dws-jobtap.so: DWS_JOBTAP_SO, or built into
    ``tmpdir`` from the tree CORAL2_SRC, alone, as flux-coral2's own
    tests of it do; None if neither is set."""
    prebuilt = environ.get("DWS_JOBTAP_SO")
    if prebuilt:
        if not os.path.isfile(prebuilt):
            raise SystemExit(f"instructions: DWS_JOBTAP_SO={prebuilt}: no such file")
        return os.path.abspath(prebuilt)
    src = environ.get("CORAL2_SRC")
    if not src:
        return None
    source = os.path.join(src, DWS_JOBTAP_C)
    if not os.path.isfile(source):
        raise SystemExit(f"instructions: CORAL2_SRC={src}: no {DWS_JOBTAP_C}")
    out = os.path.join(tmpdir, "dws-jobtap.so")
    flags = subprocess.run(
        ["pkg-config", "--cflags", "--libs", "flux-core", "jansson"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    cc = environ.get("CC") or "gcc"
    include = ["-I" + src, "-I" + os.path.join(src, "src", "common")]
    command = [cc, "-O2", "-shared", "-fPIC", *include, source, *flags, "-o", out]
    built = subprocess.run(command, capture_output=True, text=True)
    if built.returncode != 0:
        raise SystemExit(f"instructions: building {source} failed:\n{built.stderr}")
    return out


def build_dws_nolog(tmpdir):
    """dws.so as it is built for installing, but with
    RUNTIME_BENCH_NO_RECORD (jobtap/runtime.c): its gate makes no
    hold-log record and sends no commit, each record answered at once.
    Built into ``tmpdir``/dws-nolog, for the benchmark only; it runs the
    interpreter and package of this one."""
    from flux_epilog_gate.jobtap.build import Extension, compile_plugin
    from flux_epilog_gate.plugin import cbuild

    dws = cbuild.dws_extension()
    extension = Extension(
        dws.source, dws.cdef, dict(dws.defines, RUNTIME_BENCH_NO_RECORD=1)
    )
    return compile_plugin(
        os.path.join(tmpdir, "dws-nolog"),
        cbuild.DWS_NAME,
        cbuild.DWS_TARGET,
        extension=extension,
        site_levels=0,
        python=sys.executable,
    )


def bench_plugins(configs, tmpdir, environ=os.environ):
    """The plugins ``configs`` load that are not installed (FOREIGN ones
    and dws-nolog), by name, and the configurations left out for want
    of one (name -> what to set)."""
    paths, missing = foreign_plugins(configs, tmpdir, environ)
    if any("dws-nolog" in RABBIT[config] for config in configs):
        paths["dws-nolog"] = build_dws_nolog(tmpdir)
    return paths, missing


def foreign_plugins(configs, tmpdir, environ=os.environ):
    """The paths of the FOREIGN plugins ``configs`` load (by name), and
    the configurations left out for want of one (name -> what to set)."""
    names = {name for config in configs for name in RABBIT[config] if name in FOREIGN}
    paths = {}
    if "dws-jobtap" in names:
        path = dws_jobtap_so(tmpdir, environ)
        if path is not None:
            paths["dws-jobtap"] = path
    missing = {
        config: FOREIGN[name]
        for config in configs
        for name in RABBIT[config]
        if name in FOREIGN and name not in paths
    }
    return paths, missing


def rabbit_plugin_path(name, paths):
    """Where plugin ``name`` of RABBIT is: one of ``paths``
    (bench_plugins), else the project's installed one."""
    return paths[name] if name in paths else plugin_path(name)


def inner_rabbit(config, jobs, outdir, paths):
    """Inside the instance: load the configuration's plugins, start the
    fake DWS service, warm up, then run ``jobs`` rabbit jobs with
    callgrind's instrumentation on."""
    import flux

    h = flux.Flux()
    for name in RABBIT[config]:
        path = rabbit_plugin_path(name, paths)
        h.rpc("job-manager.jobtap", {"load": path}).get()
    service = subprocess.Popen(
        [sys.executable, SERVICE, os.path.join(outdir, "dws.log")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        if service.stdout.readline().strip() != "ready":
            raise RuntimeError("instructions: the fake DWS service did not start")
        client = Client(h)
        spec = spec_for("normal")
        spec.setattr("system.dw", DW)
        run_rabbits(client, 10, spec)
        Broker(h).quiesce()
        with instrumented(h):
            run_rabbits(client, jobs, spec)
    finally:
        service.kill()
        service.wait()


def hold_all(h, topic, ids):
    """A ``hold`` on each of ``ids``, as durable.py's one client sends
    them (DURABLE_WINDOW in flight); return once all are answered."""
    errors = hold_pipelined(h, topic, ids, DURABLE_WINDOW)
    if errors:
        raise RuntimeError(f"instructions: hold failed: {errors[0]}")


def inner_durable(config, jobs, outdir):
    """Inside the instance: load the configuration's plugin, warm up, then
    hold ``jobs`` jobs waiting in SCHED with callgrind's instrumentation
    on; write the synced commits made meanwhile to ``outdir``."""
    import flux

    kind, _, conf = DURABLE[config]
    plugins = Plugins(outdir)
    h = flux.Flux()
    plugins.load(h, kind, conf)
    topic = f"{plugins.service(kind)}.hold"
    spec = spec_for("exception")
    hold_all(h, topic, submit_waiting(h, 100, spec))
    ids = submit_waiting(h, jobs, spec)
    time.sleep(0.5)  # the submissions' events settle, as in durable.py
    Broker(h).quiesce()
    before = Plugins.synced_commits(h, kind) if conf or kind == "gate" else None
    with instrumented(h):
        hold_all(h, topic, ids)
    if before is not None:
        with open(os.path.join(outdir, "commits"), "w") as f:
            f.write(str(Plugins.synced_commits(h, kind) - before))


def inner(config, workload, jobs, outdir, paths):
    """Inside the instance: load the configuration's plugin, warm up, then
    drive ``jobs`` jobs with callgrind's instrumentation on."""
    import flux

    if workload == "rabbit":
        inner_rabbit(config, jobs, outdir, paths)
        return
    if workload == "durable":
        inner_durable(config, jobs, outdir)
        return
    plugin_kind, gated, conf = CONFIGS[config]
    plugins = Plugins(outdir)
    h = flux.Flux()
    if plugin_kind:
        plugins.load(h, plugin_kind, conf)
    client = Client(h, plugins.service(plugin_kind) if gated else None)
    spec = spec_for(workload)
    warm = client.submit_held(20, spec)
    drive(client, warm, workload, gated)
    ids = client.submit_held(jobs, spec)
    Broker(h).quiesce()
    with instrumented(h):
        drive(client, ids, workload, gated)


def measure(config, jobs, workdir, workload="exception", rep=None, paths=None):
    """Run one configuration (repetition ``rep``, if several; ``paths``:
    foreign_plugins'); return the job-manager thread's profile."""
    name = f"{workload}-{config}" if rep is None else f"{workload}-{config}-{rep}"
    out = os.path.join(workdir, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    wrap = ",".join(
        [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            "--separate-threads=yes",
            f"--callgrind-out-file={out}/cg.%p",
        ]
    )
    subprocess.run(
        [
            "flux",
            "start",
            "--test-size=1",
            f"--wrap={wrap}",
            sys.executable,
            os.path.abspath(__file__),
            "--inner",
            config,
            "--workloads",
            workload,
            "--jobs",
            str(jobs),
            "--workdir",
            out,
            "--plugin-paths",
            json.dumps(paths or {}),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    threads = thread_profiles(glob.glob(os.path.join(out, "cg.*-*")))
    profile = job_manager_profile(threads, jobs)
    if workload == "durable":
        profile.update(broker_threads(threads, jobs))
        commits = os.path.join(out, "commits")
        if os.path.exists(commits):
            with open(commits) as f:
                profile["holds_per_commit"] = jobs / max(1, int(f.read()))
    return profile


def thread_profiles(files):
    """``(name, instructions, path)`` of each thread's callgrind file that
    counted any: named by THREADS, and the job-manager's also by
    JOB_MANAGER_FUNCTION."""
    threads = []
    for path in files:
        with open(path, errors="replace") as f:
            text = f.read()
        total = sum(int(n) for n in re.findall(r"^totals: (\d+)", text, re.M))
        if not total:
            continue
        if JOB_MANAGER_FUNCTION in text:
            name = "job-manager"
        else:
            name = next((n for mark, n in THREADS if mark in text), "other")
        threads.append((name, total, path))
    return threads


def broker_threads(threads, jobs):
    """Instructions per job of each broker thread of ``threads``
    (thread_profiles) by name, and of all of them."""
    per = {}
    for name, total, _ in threads:
        per[name] = per.get(name, 0) + total / jobs
    return {"threads_per_job": per, "all_threads_per_job": sum(per.values())}


def job_manager_profile(threads, jobs):
    """Instructions per job of the thread that ran the job-manager (of
    ``threads``, thread_profiles), and the part of them in Python."""
    ran = [(total, path) for name, total, path in threads if name == "job-manager"]
    if not ran:
        raise RuntimeError("no callgrind profile of the job-manager thread")
    total, path = max(ran)
    return {
        "instructions_per_job": total / jobs,
        "python_per_job": python_instructions(path) / jobs,
        "fnmatch_per_job": calls_of(path, FNMATCH) / jobs,
        "topic_calls_per_job": calls_of(path, STACK_CALL, STATE_CALLER) / jobs,
        "event_calls_per_job": calls_of(path, STACK_CALL, EVENT_CALLER) / jobs,
        "profile": path,
    }


def annotate(path, *options):
    return subprocess.run(
        ["callgrind_annotate", "--threshold=100", *options, path],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def python_instructions(path):
    """Instructions spent in the Python interpreter and cffi (exclusive)."""
    count = 0
    for line in annotate(path).splitlines():
        m = re.match(r"\s*([\d,]+) \(.*\)\s+\S+\s+\[(.*)\]\s*$", line)
        if m and any(name in m.group(2) for name in PYTHON_OBJECTS):
            count += int(m.group(1).replace(",", ""))
    return count


def calls_of(path, function, caller=""):
    """How many times ``function`` (part of callgrind's file:function name)
    was called: the sum of its callers' call counts (of the callers whose
    name has ``caller`` only)."""
    text = annotate(path, "--auto=no", "--inclusive=yes", "--tree=caller")
    count = 0
    for block in text.split("\n\n"):
        lines = block.strip().splitlines()
        if not any(" *  " in line and function in line for line in lines):
            continue
        for line in lines:
            m = re.search(r"<.* \(([\d,]+)x\)", line)
            if m and caller in line:
                count += int(m.group(1).replace(",", ""))
    return count


RATIOS = (
    ("bare-again", "bare"),
    ("gate-idle", "bare"),
    ("gate", "native"),
    ("gate", "native-durable"),
    ("gate", "native-durable-lazy"),
    ("native-durable", "native"),
    ("native-durable-lazy", "native-durable"),
    ("dws", "bare"),
    ("dws", "dws-jobtap"),
    ("dws-nolog", "dws-jobtap"),
    ("dws", "dws-nolog"),
    ("dws+gate", "dws-jobtap"),
    ("dws+gate", "bare"),
    ("dws+gate", "dws"),
    ("gate", "native-synced"),
    ("gate", "native-snapshots"),
    ("native-snapshots", "native-synced"),
    ("native-synced", "native"),
)


def combined(runs):
    """One configuration's result over its repetitions: the median run's
    counts (by instructions per job), with every run under ``runs``."""
    if len(runs) == 1:
        return runs[0]
    ordered = sorted(runs, key=lambda r: r["instructions_per_job"])
    return dict(ordered[(len(ordered) - 1) // 2], runs=runs)


def report(results, jobs, workload, missing=None):
    """Print one workload's table and ratios; ``missing``: configurations
    not measured (name -> why), said so plainly."""
    missing = missing or {}
    print(f"job-manager thread, {workload} path, {jobs} jobs per configuration")
    print(
        f"  {'config':16}{'instr/job':>12}{'of it Python':>14}{'fnmatch/job':>13}"
        f"{'calls/job':>11}{'events/job':>12}"
    )
    for config, r in results.items():
        spread = ""
        if "runs" in r:
            counts = [run["instructions_per_job"] / 1e3 for run in r["runs"]]
            spread = f"   (runs {min(counts):.1f}k to {max(counts):.1f}k)"
        print(
            f"  {config:16}{r['instructions_per_job'] / 1e3:>11.1f}k"
            f"{r['python_per_job'] / 1e3:>13.1f}k{r['fnmatch_per_job']:>13.1f}"
            f"{r.get('topic_calls_per_job', 0):>11.1f}"
            f"{r.get('event_calls_per_job', 0):>12.1f}" + spread
        )
    for config, why in missing.items():
        print(f"  {config:16}not measured ({why})")
    if workload == "durable":
        report_threads(results)
    print(
        "ratios" + (" (of the medians; then run by run)" if _repeated(results) else "")
    )
    for a, b in RATIOS:
        if a in results and b in results:
            print(f"  {a} / {b}: {_ratios(results[a], results[b])}")
        elif a in results and b in missing:
            print(f"  {a} / {b}: not measured ({b} was not)")


def report_threads(results):
    """The durable workload's broker threads, per hold."""
    names = sorted({n for r in results.values() for n in r["threads_per_job"]})
    print("  every broker thread, instructions per hold (k); holds per synced commit")
    print(
        f"  {'config':16}"
        + "".join(f"{n[:14]:>15}" for n in names)
        + f"{'all':>10}{'per sync':>10}"
    )
    for config, r in results.items():
        cells = "".join(f"{r['threads_per_job'].get(n, 0) / 1e3:>15.1f}" for n in names)
        per = r.get("holds_per_commit")
        print(
            f"  {config:16}{cells}{r['all_threads_per_job'] / 1e3:>10.1f}"
            + (f"{per:>10.1f}" if per else f"{'':>10}")
        )
    for a, b in (("gate", "native-synced"), ("gate", "native-snapshots")):
        if a in results and b in results:
            ratio = (
                results[a]["all_threads_per_job"] / results[b]["all_threads_per_job"]
            )
            print(f"  {a} / {b}, every thread: {ratio:.3f}")


def _repeated(results):
    return any("runs" in r for r in results.values())


def _ratios(a, b):
    text = f"{a['instructions_per_job'] / b['instructions_per_job']:.3f}"
    if "runs" in a and "runs" in b:
        each = [
            ra["instructions_per_job"] / rb["instructions_per_job"]
            for ra, rb in zip(a["runs"], b["runs"])
        ]
        text += "  (" + ", ".join(f"{r:.3f}" for r in each) + ")"
    return text


def configs_of(workload, names):
    """The configurations ``names`` (comma-separated; None: all) of
    ``workload``, checked."""
    known = {"rabbit": RABBIT, "durable": DURABLE}.get(workload, CONFIGS)
    configs = names.split(",") if names else list(known)
    unknown = [c for c in configs if c not in known]
    if unknown:
        raise SystemExit(
            f"instructions: unknown configuration {unknown[0]!r} of {workload}"
        )
    return configs


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--configs",
        help=f"comma-separated, of {','.join(CONFIGS)} "
        f"(rabbit workload: of {','.join(RABBIT)}); default: all",
    )
    parser.add_argument(
        "--workloads",
        default="exception",
        help=f"comma-separated, of {','.join(WORKLOADS)}",
    )
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run every configuration this many times, alternating, and "
        "report the median run (counts move by some 0.5%% from run to run)",
    )
    parser.add_argument("--output", help="JSON results file")
    parser.add_argument("--keep", help="keep the callgrind profiles in this directory")
    parser.add_argument("--inner", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--plugin-paths", default="{}", help=argparse.SUPPRESS)
    return parser.parse_args()


def run_configs(configs, workload, args, workdir, paths=None):
    """Each configuration's runs: ``args.repeat`` rounds of all of them,
    each round in the order of the one before turned by one, so that no
    configuration always runs first."""
    runs = {config: [] for config in configs}
    for rep in range(args.repeat if configs else 0):
        turn = rep % len(configs)
        for config in configs[turn:] + configs[:turn]:
            label = f" (run {rep + 1} of {args.repeat})" if args.repeat > 1 else ""
            print(
                f"instructions: {workload} {config}{label}", file=sys.stderr, flush=True
            )
            result = measure(
                config,
                args.jobs,
                workdir,
                workload,
                rep if args.repeat > 1 else None,
                paths,
            )
            if not args.keep:
                del result["profile"]
            runs[config].append(result)
    return runs


def main():
    args = parse_args()
    if args.inner:
        paths = json.loads(args.plugin_paths)
        inner(args.inner, args.workloads, args.jobs, args.workdir, paths)
        return
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate"):
        if not shutil.which(tool):
            raise SystemExit(f"instructions: {tool} not found (install valgrind)")
    workloads = args.workloads.split(",")
    if any(w not in WORKLOADS for w in workloads):
        raise SystemExit(f"instructions: workloads are {','.join(WORKLOADS)}")
    if args.repeat < 1:
        raise SystemExit("instructions: --repeat must be 1 or more")
    plan = {w: configs_of(w, args.configs) for w in workloads}
    results = {}
    missing = {}
    with tempfile.TemporaryDirectory(prefix="epilog-gate-cg-") as tmp:
        workdir = args.keep or tmp
        os.makedirs(workdir, exist_ok=True)
        paths = {}
        if "rabbit" in plan:
            paths, missing = bench_plugins(plan["rabbit"], workdir)
            plan["rabbit"] = [c for c in plan["rabbit"] if c not in missing]
        for workload in workloads:
            runs = run_configs(plan[workload], workload, args, workdir, paths)
            results[workload] = {c: combined(r) for c, r in runs.items()}
    for workload in workloads:
        report(
            results[workload],
            args.jobs,
            workload,
            missing if workload == "rabbit" else None,
        )
    output = args.output or result_path("instructions")
    write_results(
        output,
        {"jobs": args.jobs, "workloads": results, "not_measured": missing},
        indent=2,
    )
    print(f"results: {output}")


if __name__ == "__main__":
    main()
