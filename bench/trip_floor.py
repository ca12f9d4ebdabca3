#!/usr/bin/env python3
"""What one trip from C into Python costs at least, under callgrind.

    python bench/trip_floor.py [--trips N]

Builds, in a scratch directory, a cffi module shaped like the jobtap
runtime's (flux_epilog_gate/jobtap/runtime.c and plugin.py): a C loop
calls an extern "Python" function with the arguments of a job callback
(a handle, a topic index, the job's id, state and userid, its arguments),
and the Python side does what the runtime's dispatch does before any of
the plugin's own work: ``ffi.from_handle(handle).method(...)`` of a
method that returns at once.  The loop runs under ``valgrind
--tool=callgrind`` with collection on only inside it, once with a few
trips and once with ``N`` more; the difference divided by ``N`` is the
price of a trip (entry and exit, GIL included: cffi releases the GIL
around the call of the loop, as the job-manager's thread runs without
it).  The part of it in cffi's C (argument conversion, the GIL, the
argument tuple) is printed too.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

BUILD = r'''
import cffi
ffi = cffi.FFI()
ffi.cdef("""
extern "Python" int trip(void *self, int index, uint64_t id, int state,
                         uint32_t userid, void *args);
int trips(void *self, int n);
""")
ffi.set_source("_trip_floor", """
static int trip(void *self, int index, uint64_t id, int state,
                uint32_t userid, void *args);
int trips(void *self, int n)
{
    int rc = 0;
    for (int i = 0; i < n; i++)
        rc += trip(self, 0, (uint64_t)i + 1000000, 8, 1000, NULL);
    return rc;
}
""")
ffi.compile(verbose=False)
'''

RUN = r"""
import sys
from _trip_floor import ffi, lib

class Plugin:
    def on_job(self, jobid, state, userid):
        return None

plugin = Plugin()
handle = ffi.new_handle(plugin)

@ffi.def_extern(error=-1)
def trip(h, index, jobid, state, userid, args):
    ffi.from_handle(h).on_job(jobid, state, userid)
    return 0

lib.trips(handle, 100)  # warm up
lib.trips(handle, int(sys.argv[1]))
"""


def collected(workdir, trips):
    """Instructions collected inside the C loop (warm-up included)."""
    out = os.path.join(workdir, f"cg.{trips}")
    result = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--toggle-collect=trips",
            f"--callgrind-out-file={out}",
            sys.executable,
            "run.py",
            str(trips),
        ],
        cwd=workdir,
        check=True,
        capture_output=True,
        text=True,
    )
    total = int(re.search(r"Collected : (\d+)", result.stderr).group(1))
    return total, out


def inclusive(profile, function):
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", profile],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    m = re.search(r"^\s*([\d,]+) \(.*\)\s+\S*?:" + function + r" ", text, re.M)
    return int(m.group(1).replace(",", "")) if m else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trips", type=int, default=20000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trip-floor-") as workdir:
        with open(os.path.join(workdir, "build.py"), "w") as f:
            f.write(BUILD)
        with open(os.path.join(workdir, "run.py"), "w") as f:
            f.write(RUN)
        subprocess.run([sys.executable, "build.py"], cwd=workdir, check=True)
        few, _ = collected(workdir, 0)
        many, profile = collected(workdir, args.trips)
        per_trip = (many - few) / args.trips
        # cffi's own C: the trampoline less the Python callable it calls.
        cffi_c = inclusive(profile, "cffi_call_python") - inclusive(
            profile, "PyObject_Call"
        )
        print(f"one trip into Python and back: {per_trip:,.0f} instructions")
        print(f"  of it cffi's C (arguments, GIL): {cffi_c / (args.trips + 100):,.0f}")


if __name__ == "__main__":
    main()
