#!/usr/bin/env python3
"""What a held job's Python instructions are spent on, in a kept profile.

    python bench/instructions.py --configs gate --keep DIR --output R.json
    python bench/python_profile.py PROFILE JOBS

PROFILE is the job-manager thread's callgrind file of a gated run (its
path is in R.json), JOBS the jobs it drove.  Each function of libpython
and of cffi's backend is put in one kind of work by the source file that
defines it (the interpreter loop, calls and frames, attribute lookups,
dicts, a float's ``repr``, allocation, cffi...), and the kinds are
printed per job, their own instructions (callgrind's exclusive counts):
together they are ``instructions.py``'s "of it Python".
"""

import re
import subprocess
import sys
from collections import Counter

#: The kind of work of a libpython source file (others: by file name).
KINDS = {
    "ceval.c": "the interpreter loop",
    "ceval_gil.h": "the GIL",
    "dtoa.c": "a float's repr (dtoa)",
    "floatobject.c": "a float's repr (dtoa)",
    "pystrtod.c": "a float's repr (dtoa)",
    "obmalloc.c": "allocation and the collector",
    "gcmodule.c": "allocation and the collector",
    "dictobject.c": "dicts",
    "dictobject.c.h": "dicts",
    "odictobject.c": "dicts",
    "typeobject.c": "attribute and type lookups",
    "object.c": "attribute and type lookups",
    "frame.c": "calls and frames",
    "pystate.c": "calls and frames",
    "call.c": "calls and frames",
    "funcobject.c": "calls and frames",
    "methodobject.c": "calls and frames",
    "descrobject.c": "calls and frames",
    "classobject.c": "calls and frames",
    "getargs.c": "calls and frames",
    "_functoolsmodule.c": "calls and frames",
    "tupleobject.c": "tuples and lists",
    "listobject.c": "tuples and lists",
    "longobject.c": "ints",
    "unicodeobject.c": "strings",
    "unicodeobject.c.h": "strings",
}

LINE = re.compile(r"\s*([\d,]+)\s+\([^)]*\)\s+(\S+)")


def kind_of(name, line):
    """The kind of work of a callgrind ``file:function`` line."""
    if "_cffi_backend" in line:
        return "cffi"
    source = name.split(":")[0].rsplit("/", 1)[-1]
    return KINDS.get(source, f"other ({source})")


def python_kinds(path):
    """Instructions of libpython and cffi in ``path``, by kind."""
    text = subprocess.run(
        ["callgrind_annotate", "--threshold=100", path],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    kinds = Counter()
    for line in text.splitlines():
        if "libpython" not in line and "_cffi_backend" not in line:
            continue
        m = LINE.match(line)
        if m:
            kinds[kind_of(m.group(2), line)] += int(m.group(1).replace(",", ""))
    return kinds


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__.split("\n\n")[1])
    path, jobs = sys.argv[1], int(sys.argv[2])
    kinds = python_kinds(path)
    print(f"Python's instructions per job ({jobs} jobs), by kind of work")
    rest = 0
    for kind, count in kinds.most_common():
        if count / jobs < 1000:
            rest += count
            continue
        print(f"  {kind:36}{count / jobs / 1e3:>8.1f}k")
    print(f"  {'the rest (under 1k each)':36}{rest / jobs / 1e3:>8.1f}k")
    print(f"  {'all':36}{sum(kinds.values()) / jobs / 1e3:>8.1f}k")


if __name__ == "__main__":
    main()
