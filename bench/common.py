"""What every benchmark script shares: paths, names, the plugins it
loads (epilog-gate.so and the native reference gate, built here),
progress lines and small statistics."""

import datetime
import functools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

from flux.job import JobspecV1

import flux_epilog_gate  # noqa: F401  (puts flux-core's bindings on sys.path)
from flux_epilog_gate import plugin_path
from flux_epilog_gate.jobtap.build import compile_plugin
from flux_epilog_gate.testing import Instance

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")

#: Simulated execution of the normal-path jobs.
RUN_DURATION = "0.01s"

#: Instance config common to every configuration: no jobspec validator
#: worker (its Python start-up and per-job cost would only add noise to
#: the untimed submissions).
BASE_CONFIG = "\n[ingest.validator]\ndisable = true\n"

GATE_SERVICE = "job-manager.epilog-gate"
NATIVE_SERVICE = "job-manager.native-gate"
DESCRIPTION = "bench"
SETUP = "bench-setup"

#: Progress details on stderr (``-v``, or BENCH_VERBOSE in the environment).
VERBOSE = bool(os.environ.get("BENCH_VERBOSE"))
_T0 = time.monotonic()


def log(text):
    """Progress detail on stderr (the table goes to stdout)."""
    if VERBOSE:
        print(f"[{time.monotonic() - _T0:7.1f}s] {text}", file=sys.stderr, flush=True)


def progress(text):
    """Progress line on stderr, always shown."""
    print(f"bench: {text}", file=sys.stderr, flush=True)


# The plugins


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


def build_heap_probe(tmpdir):
    """heap-probe.so (bench/heapprobe.py), built into ``tmpdir`` with the
    runtime's build helper."""
    return compile_plugin(
        tmpdir,
        "heap-probe",
        "heapprobe:HeapProbe",
        site_levels=0,
        pythonpath=[HERE],
        python=sys.executable,
    )


class Plugins:
    """The plugins a benchmark loads, by kind: "gate" is epilog-gate.so,
    "native" bench/native_gate.c (built into ``tmpdir``), None is none."""

    SERVICES = {"gate": GATE_SERVICE, "native": NATIVE_SERVICE}

    #: Per kind: the name ``flux jobtap query`` knows the plugin by, and
    #: its counter of synced commits.
    COMMIT_COUNTERS = {
        "gate": ("epilog-gate.so", "log_commits"),
        "native": ("native-gate.so", "commits"),
    }

    def __init__(self, tmpdir):
        self.tmpdir = tmpdir
        self.paths = {"gate": plugin_path(), "native": build_native(tmpdir)}

    @functools.cached_property
    def heap_probe(self):
        """heap-probe.so, for observer.Broker(heap_probe=...): built when
        first asked for."""
        return build_heap_probe(self.tmpdir)

    def instance(self, kind, cores, options=None):
        """A test instance (not started) with plugin ``kind`` loaded."""
        plugin = self.paths[kind] if kind else None
        return Instance(
            cores=cores, plugin=plugin, plugin_conf=options, config=BASE_CONFIG
        )

    @classmethod
    def service(cls, kind):
        """The service name plugin ``kind`` registers (None for none)."""
        return cls.SERVICES.get(kind)

    def load(self, handle, kind, options=None):
        """Load plugin ``kind`` into a running job-manager."""
        request = {"load": self.paths[kind]}
        if options:
            request["conf"] = options
        handle.rpc("job-manager.jobtap", request).get()

    @classmethod
    def synced_commits(cls, handle, kind):
        """The synced commits plugin ``kind`` has sent so far."""
        name, counter = cls.COMMIT_COUNTERS[kind]
        query = handle.rpc("job-manager.jobtap-query", {"name": name}).get()
        return query["counters"][counter]

    def remove(self, handle, kind):
        """Remove plugin ``kind`` from a running job-manager."""
        name = os.path.basename(self.paths[kind])
        handle.rpc("job-manager.jobtap", {"remove": name}).get()


def spec_for(workload):
    """The jobspec of a workload's jobs: simulated execution unless every
    job is cancelled before it runs (the exception path)."""
    spec = JobspecV1.from_command(["true"])
    if workload in ("normal", "perilog"):
        spec.setattr("system.exec.test.run_duration", RUN_DURATION)
    return spec


# The machine


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def flux_version():
    """flux-core's version, as ``flux version`` prints it."""
    out = subprocess.run(["flux", "version"], capture_output=True, text=True)
    return out.stdout.split("\n")[0].split()[-1]


def host():
    """The machine the figures were measured on."""
    return {"node": platform.node(), "cpus": os.cpu_count()}


def commit():
    """The commit the figures were measured on (``-dirty``: with changes
    not committed), or None outside a git work tree."""
    run = functools.partial(
        subprocess.run, cwd=HERE, capture_output=True, text=True, check=False
    )
    head = run(["git", "rev-parse", "--short", "HEAD"])
    if head.returncode != 0:
        return None
    dirty = run(["git", "status", "--porcelain", "--untracked-files=no"]).stdout
    return head.stdout.strip() + ("-dirty" if dirty.strip() else "")


def measured_on():
    """What every result file names: the commit, host, flux-core version
    and date (UTC) it was measured on."""
    return {
        "commit": commit(),
        "host": host(),
        "flux_core": flux_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
    }


def result_path(experiment):
    """``bench/results/DATE-COMMIT-EXPERIMENT.json``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return os.path.join(RESULTS, f"{stamp}-{commit() or 'nogit'}-{experiment}.json")


def write_results(path, results, indent=1):
    """Write ``results`` (a dict) to ``path``, with :func:`measured_on`
    first."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"measured_on": measured_on(), **results}, f, indent=indent)


# Statistics


def percentile(values, p):
    """The p-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), round(p / 100.0 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def median(values):
    """Median of the values that are not None (nan if there are none)."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")
