"""The heap of the process this runs in: the bytes malloc and Python's
own allocator hold allocated, and a way to have glibc hand free memory
back.  Read from inside (bench/heapprobe.py is the broker's way in),
not through a debugger: calling into a stopped process needs ptrace to
write the CPU's extended state, which some kernels refuse."""

import ctypes
import os
import re
import tempfile

_LIBC = ctypes.CDLL(None)
_LIBC.fopen.restype = ctypes.c_void_p
_LIBC.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
_LIBC.fclose.argtypes = [ctypes.c_void_p]
_LIBC.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
_STATS = ctypes.pythonapi._PyObject_DebugMallocStats
_STATS.argtypes = [ctypes.c_void_p]


def _written(write):
    """The text ``write(FILE *)`` writes."""
    with tempfile.TemporaryDirectory(prefix="epilog-gate-heap-") as tmp:
        path = os.path.join(tmp, "out").encode()
        stream = _LIBC.fopen(path, b"w")
        if not stream:
            raise OSError(ctypes.get_errno(), "fopen")
        try:
            write(stream)
        finally:
            _LIBC.fclose(stream)
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()


def in_use():
    """Bytes allocated: glibc malloc's, in all its arenas, plus the
    blocks of Python's allocator (its arenas are mapped apart).  Unlike
    RSS it does not move when freed memory is reused or kept."""
    malloc = malloc_in_use(_written(lambda f: _LIBC.malloc_info(0, f)))
    return malloc + pymalloc_in_use(_written(_STATS))


def trim():
    """Have glibc hand free memory back to the system (malloc_trim)."""
    _LIBC.malloc_trim(0)


def malloc_in_use(xml):
    """In-use bytes of glibc's ``malloc_info`` text: what its arenas got
    from the system, less their free chunks, plus the chunks it mapped
    apart."""
    tail = xml[xml.rindex("</heap>") :]
    sizes = dict(re.findall(r'<(?:total|system) type="(\w+)"[^>]* size="(\d+)"', tail))
    free = int(sizes["fast"]) + int(sizes["rest"])
    return int(sizes["current"]) - free + int(sizes["mmap"])


def pymalloc_in_use(text):
    """Bytes in allocated blocks of ``_PyObject_DebugMallocStats``'s text
    (0 if it wrote none)."""
    found = re.search(r"# bytes in allocated blocks\s*=\s*([\d,]+)", text)
    return int(found.group(1).replace(",", "")) if found else 0
