"""stamp.c, compiled on its own, against Python: the text it writes of a
time is ``repr`` of the double it returns, which is the time rounded to
the microsecond, as holds.stamp has it."""

import json
import time

import cffi
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flux_epilog_gate.gate import holds
from flux_epilog_gate.plugin import cbuild

FIXED = holds.STAMP_FIXED


@pytest.fixture(scope="module")
def c(tmp_path_factory):
    builder = cffi.FFI()
    builder.cdef(cbuild.STAMP_CDEF)
    defines = "".join(
        f"#define {name} {value}LL\n"
        for name, value in cbuild.stamp_constants(holds).items()
    )
    builder.set_source(
        "_stamp_under_test",
        "#include <stdio.h>\n#include <time.h>\n" + defines + cbuild.stamp_source(),
    )
    tmp = tmp_path_factory.mktemp("stamp")
    path = builder.compile(tmpdir=str(tmp))
    ffi = cffi.FFI()
    ffi.cdef(cbuild.STAMP_CDEF)
    lib = ffi.dlopen(path)
    text = ffi.new("char[32]")

    def stamp_us(us):
        t = lib.gate_stamp_us(us, text)
        return t, ffi.string(text).decode()

    def stamp_now():
        t = lib.gate_stamp(text)
        return t, ffi.string(text).decode()

    return stamp_us, stamp_now


MICROSECONDS = st.one_of(
    st.integers(min_value=0, max_value=2 * FIXED[1]),
    st.integers(min_value=1_000_000_000_000_000, max_value=2_200_000_000_000_000),
    st.sampled_from([0, 1, 99, 100, 101, 999_999, 10**6, FIXED[1] - 1, FIXED[1]]),
)


@settings(max_examples=2000, deadline=None)
@given(us=MICROSECONDS)
def test_c_writes_the_microsecond_as_json_writes_its_double(c, us):
    stamp_us, _ = c
    t, text = stamp_us(us)
    assert t == us / 1e6
    if FIXED[0] <= us < FIXED[1]:
        assert text == json.dumps(t) == repr(t)
        assert holds.stamp(t) == (t, text)
    else:
        # The port writes repr() of these itself.
        assert text == ""


def test_c_stamps_now_to_the_microsecond(c):
    _, stamp_now = c
    before = time.time()
    t, text = stamp_now()
    after = time.time()
    assert before - 1e-6 <= t <= after + 1e-6
    assert text == repr(t)
    assert round(t * 1e6) / 1e6 == t
