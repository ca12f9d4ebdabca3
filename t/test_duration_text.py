"""A duration given as text reads the same wherever it is given: the
configuration (``timeout = "10m"``), ``flux-epilog-gate hold --timeout``
and the Python client's ``hold(timeout="10m")`` take exactly the Flux
Standard Durations flux-core's C reader takes (ASCII digits, no spaces),
not what Python's float() would also read (``1_0s``, ``10 m``, other
scripts' digits); what one refuses, the others refuse, naming it, and
nothing is held."""

import argparse
import subprocess

import pytest
from dwsfake import CLI
from hypothesis import example, given, settings
from hypothesis import strategies as st
from jobs import submit

from flux_epilog_gate.client.arguments import timeout as cli_timeout
from flux_epilog_gate.gate.config import ConfigError, parse_duration

#: Texts near the grammar: digits, separators, units, spaces, signs.
NEAR = st.text(alphabet="0123456789._ +-emshd\u0663x", max_size=8)


@settings(max_examples=2000, deadline=None)
@given(text=NEAR | st.text(max_size=8))
@example(text="1_0s")
@example(text="10 m")
@example(text="\u0663")
def test_the_command_line_reads_a_duration_as_the_configuration(text):
    try:
        expected = parse_duration(text, "timeout")
    except ConfigError:
        expected = None
    try:
        got = cli_timeout(text)
    except argparse.ArgumentTypeError:
        got = None
    assert got == expected


@pytest.mark.parametrize("text", ["1_0s", "10 m", "\u0663s"])
def test_a_duration_no_c_reader_takes_is_refused_and_nothing_held(
    instance, handle, gate, no_leftover_holds, text
):
    jobid = submit(handle, urgency=0)
    with pytest.raises(ValueError, match="is not a duration"):
        gate.hold(jobid, "py", timeout=text)
    argv = [CLI, "hold", "--timeout", text, str(jobid), "cli"]
    proc = subprocess.run(argv, env=instance.env, capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert "is not a duration" in proc.stderr
    assert gate.list(jobid) == []
