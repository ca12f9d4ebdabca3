"""Write the golden hold logs of t/data (holdlog-format1-*.json) with the
build this runs against, on the unit tests' fake port.

    python t/data/make_golden_holdlogs.py   (from the repository's top)

Each file is one log as the KVS holds it: ``kvs``, its keys and values
(the log's key and segments); ``jobs``, the jobs it names, with the
holds they have, pending (``pending``: each job waits in SCHED, so no
eventlog is needed to recover it).  The logs of format 1 were written by
the build before the log said its format (0.1.0, commit 37ddc38); test
t/gate/test_unit_golden_logs.py reads them with the current one.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from fakeport import FakePort  # noqa: E402

from flux_epilog_gate.gate import SCHED, Gate, holdlog  # noqa: E402
from flux_epilog_gate.gate.config import Config  # noqa: E402

USER = 1000


def holds_of(gate):
    return {str(jobid): sorted(job.holds) for jobid, job in sorted(gate.jobs.items())}


def churn(port, gate, jobid, rounds):
    """Commits of one record each: a hold and its release, ``rounds`` times."""
    port.add_job(jobid, SCHED, USER)
    for k in range(rounds):
        gate.hold(jobid, f"churn{k}")
        gate.release(jobid, f"churn{k}", 0, done=lambda *args: None)


def appends():
    """Holds and releases, never snapshotted: appends only."""
    port = FakePort()
    gate = Gate(port)
    for jobid in range(101, 106):
        port.add_job(jobid, SCHED, USER)
        for description in ("bb", "nfs-teardown", "d.1"):
            gate.hold(jobid, description)
    gate.hold(101, "timed", 60.0)
    gate.release(102, "bb", 0, done=lambda *args: None)
    return port, gate


def segments():
    """A snapshot over SEGMENT_FLOOR, then keys made segments."""
    limits = (holdlog.MAX_APPENDS, holdlog.SEGMENT_FLOOR, holdlog.MAX_SEGMENTS)
    holdlog.MAX_APPENDS, holdlog.SEGMENT_FLOOR, holdlog.MAX_SEGMENTS = 4, 300, 10
    try:
        port, gate = appends()
        holdlog_of(gate).appends = holdlog.MAX_APPENDS
        gate.hold(103, "after-snapshot")
        churn(port, gate, 110, 6)
        gate.hold(104, "last")
        assert any(".log" in key for key in port.kvs), "no segment was made"
    finally:
        holdlog.MAX_APPENDS, holdlog.SEGMENT_FLOOR, holdlog.MAX_SEGMENTS = limits
    return port, gate


def parts():
    """A snapshot written in parts, swapped in, then appended to."""
    port = FakePort()
    gate = Gate(port, Config(snapshot_chunk=300))
    for jobid in range(201, 241):
        port.add_job(jobid, SCHED, USER)
        gate.hold(jobid, "bb")
    holdlog_of(gate).appends = holdlog.MAX_APPENDS
    for k in range(12):
        gate.hold(201 + k, "during")
    assert port.txns, "no snapshot in parts"
    assert holdlog.SIDE_KEY not in port.kvs
    gate.hold(240, "after")
    return port, gate


def holdlog_of(gate):
    """What the build calls the log's counts: HoldLog itself (0.1.0) or
    its Compaction."""
    return getattr(gate.holdlog, "compaction", gate.holdlog)


def main():
    for name, make in (("appends", appends), ("segments", segments), ("parts", parts)):
        port, gate = make()
        data = {
            "kvs": {k: v for k, v in sorted(port.kvs.items()) if "holds" in k},
            "pending": holds_of(gate),
        }
        path = os.path.join(HERE, f"holdlog-format1-{name}.json")
        with open(path, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.write("\n")
        print(path, ", ".join(data["kvs"]))


if __name__ == "__main__":
    main()
