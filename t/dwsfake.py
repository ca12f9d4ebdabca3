"""Helpers of the dws plugin's tests: the fake DWS service
(t/dws_service.py) run against an instance, a rabbit job's jobspec
attribute, the contexts of its events and the holds the client lists.
The fixtures that use them (``dws``, ``dws_so``, ``rabbit_instance``)
are in conftest.py."""

import json
import os
import subprocess
import sys
import time

from jobs import named

HERE = os.path.dirname(os.path.abspath(__file__))
#: ``flux-epilog-gate`` of the installed package.
CLI = os.path.join(os.path.dirname(sys.executable), "flux-epilog-gate")
DW = {"system.dw": "#DW jobdw type=xfs capacity=1GiB name=x"}
#: The resources of a one-core job, as a valid resource-update sends them.
SLOT = [
    {
        "type": "slot",
        "count": 1,
        "label": "task",
        "with": [{"type": "core", "count": 1}],
    }
]


def build_foreign_prolog(outdir):
    """Build foreign-prolog.so (t/data/foreignprolog.py, a stand-in for
    dws-jobtap.so that starts a rabbit job's ``dws-setup`` prolog under
    its own name) on the jobtap runtime into ``outdir``; its path."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "flux_epilog_gate.jobtap.build",
            "foreign-prolog",
            "foreignprolog:ForeignProlog",
            str(outdir),
            os.path.join(HERE, "data"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


class FakeDws:
    """t/dws_service.py running against an instance, and what it saw."""

    def __init__(self, inst, tmpdir, *options):
        self.log = os.path.join(tmpdir, f"dws-{time.monotonic_ns()}.log")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "dws_service.py"), self.log, *options],
            env=inst.env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout.readline().strip() == "ready"

    def entries(self):
        with open(self.log) as f:
            return [json.loads(line) for line in f if line.strip()]

    def requests(self, topic):
        return [e["payload"] for e in self.entries() if e.get("topic") == topic]

    def replies(self, method):
        return [e for e in self.entries() if e.get("reply") == method]

    def wait(self, predicate, timeout=10.0):
        deadline = time.time() + timeout
        while not predicate():
            assert time.time() < deadline, f"fake dws: {self.entries()}"
            time.sleep(0.05)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def contexts(events, name, description):
    return [e.context for e in named(events, name, description)]


def listed(inst, jobid=None):
    """``{description: (point, state)}`` of the holds ``flux-epilog-gate
    list`` shows (of one job, or all)."""
    args = [CLI, "list", "--json"] + ([str(jobid)] if jobid else [])
    proc = subprocess.run(args, env=inst.env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    holds = json.loads(proc.stdout)
    return {h["description"]: (h["point"], h["state"]) for h in holds}
