#!/usr/bin/env python3
"""Where a held job's instructions go, trip by trip, in a kept profile.

    python bench/instructions.py --configs gate --keep DIR --output R.json
    python bench/trips.py PROFILE JOBS

PROFILE is the job-manager thread's callgrind file of a gated run (its
path is in R.json), JOBS the jobs it drove.  For each way the job-manager
enters the gate's Python (the owner's ``hold`` and ``release`` decoded
in C, a job's callback, a hold-log commit answered, another request) it
prints per job: how many trips, the instructions from the entry into
Python to the return (``cffi_call_python`` called from that C function),
the part of them in the C functions Python calls there (posting an event,
answering a request, looking a job up, sending a commit: what a C gate
would do too), and the rest, Python's own (the interpreter, cffi and the
allocations they make).  C functions are given to the trip that calls
them on the exception and perilog paths (``flux_msg_incref`` shared by
the hold and the release).
"""

import re
import subprocess
import sys

#: The trips: the C function that enters Python, and the C functions
#: Python calls there (name, share).
TRIPS = {
    "hold": (
        "gate_hold_cb",
        [("runtime_job_lookup", 1), ("runtime_mark", 1), ("flux_msg_incref", 0.5)],
    ),
    "job callback": (
        "runtime_job_cb",
        [
            ("gate_respond_watch", 1),
            ("gate_post_start", 1),
            ("flux_jobtap_job_event_posted", 1),
            ("runtime_want", 1),
        ],
    ),
    "release": (
        "gate_release_cb",
        [("gate_post_finish", 1), ("runtime_unmark", 1), ("flux_msg_incref", 0.5)],
    ),
    "commit answered": (
        "runtime_commit_cb",
        [
            ("gate_answer_hold", 1),
            ("gate_answer_release", 1),
            ("gate_answer_error", 1),
            ("flux_msg_decref", 1),
            ("runtime_kvs_commit", 1),
        ],
    ),
    "other request": ("runtime_request_cb", []),
}


def annotate(path, *options):
    return subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", *options, path],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def inclusive_costs(path):
    """Inclusive instructions by function name."""
    costs = {}
    for line in annotate(path).splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+\S*?:(\w+) \[", line)
        if m:
            costs.setdefault(m.group(2), int(m.group(1).replace(",", "")))
    return costs


def entries(path):
    """Instructions and calls of cffi_call_python, by the C function that
    called it."""
    found = {}
    for block in annotate(path, "--tree=calling").split("\n\n"):
        head = next((line for line in block.splitlines() if " *  " in line), None)
        m = head and re.search(r"\*  \S*?:(\w+)", head)
        if not m:
            continue
        for line in block.splitlines():
            call = re.match(
                r"\s*([\d,]+) .*>\s+\S*?:cffi_call_python \(([\d,]+)x\)", line
            )
            if call:
                found[m.group(1)] = (
                    int(call.group(1).replace(",", "")),
                    int(call.group(2).replace(",", "")),
                )
    return found


def main():
    path, jobs = sys.argv[1], int(sys.argv[2])
    costs = inclusive_costs(path)
    into = entries(path)
    print(f"per job ({jobs} jobs)     trips   in Python   C called   Python's own")
    total = 0.0
    for trip, (entry, callees) in TRIPS.items():
        spent, calls = into.get(entry, (0, 0))
        c = sum(costs.get("_cffi_f_" + name, 0) * share for name, share in callees)
        own = (spent - c) / jobs
        total += own
        print(
            f"{trip:20s} {calls / jobs:8.2f} {spent / jobs / 1e3:10.1f}k"
            f" {c / jobs / 1e3:9.1f}k {own / 1e3:13.1f}k"
        )
    print(f"{'':20s} {'':8s} {'':10s}  {'':9s} {total / 1e3:13.1f}k")


if __name__ == "__main__":
    main()
