"""``flux-epilog-gate list -o FORMAT``: a format that cannot show holds
is a usage error (exit 2) naming the problem, whatever the format; one
that can shows them.  A real instance with a pending and an active
hold."""

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from jobs import cli_instance

from flux_epilog_gate.client import cli
from flux_epilog_gate.client.exits import EXIT_USAGE
from flux_epilog_gate.client.formatcheck import WIDTH_MAX
from flux_epilog_gate.client.formats import HoldFormat

CLI = [
    sys.executable,
    "-c",
    "import sys; from flux_epilog_gate.client.cli import main; sys.exit(main())",
]


@pytest.fixture(scope="module")
def inst():
    """An instance whose gate holds a pending and an active hold; the
    command run here talks to it."""
    with cli_instance(("scrub", 600)) as inst:
        yield inst


def run_list(capsys, fmt):
    """``(status, stdout, stderr)`` of ``list -o fmt``, run here."""
    try:
        status = cli._run(["list", "-o", fmt])
    except SystemExit as exc:
        status = exc.code
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize(
    "fmt, reason",
    [
        ("{id:>99999999999}", "a width or precision of 99999999999 is more than"),
        ("{description:.{id}}", "a field inside a spec is not supported"),
        ("{t_hold!d:%H::<20000}", "a width or precision of 20000 is more than"),
        # Without "::" the header reads a date's spec as its width.
        ("{active!d:2838024633}", "a width or precision of 2838024633 is more"),
        ("{description:d}", "cannot show a hold: Unknown format code 'd'"),
        ("{id!x}", "cannot show a hold"),
        ("{t_start:.2f}", "cannot show a hold"),
        ("{nope}", "Unknown format field: nope"),
        ("{id", "expected '}'"),
    ],
)
def test_a_bad_format_is_a_usage_error_naming_the_problem(inst, capsys, fmt, reason):
    status, out, err = run_list(capsys, fmt)
    assert status == EXIT_USAGE and reason in err, err
    assert "Traceback" not in err


def test_the_command_exits_2_with_the_reason(inst):
    """It exited 1 with the message ``flux-epilog-gate: `` and nothing
    after it: Python's MemoryError, making a line of that width."""
    result = subprocess.run(
        [*CLI, "list", "-o", "{id:>99999999999}"],
        env=dict(os.environ, FLUX_URI=inst.uri),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert f"is more than {WIDTH_MAX}" in result.stderr
    assert result.stdout == ""


def test_a_wide_format_shows_every_hold(inst, capsys):
    status, out, _ = run_list(capsys, f"{{description:>{WIDTH_MAX}}}|")
    lines = out.splitlines()
    assert status == 0 and len(lines) == 3
    assert all(len(line) == WIDTH_MAX + 1 for line in lines)
    assert sorted(line.strip() for line in lines[1:]) == ["scrub|", "stage-out|"]


FIELDS = sorted(HoldFormat.headings)
CONVERSIONS = st.sampled_from(["", "!d", "!D", "!F", "!H", "!P", "!s", "!r", "!x"])
NUMBERS = st.one_of(
    st.integers(0, 30),
    st.integers(WIDTH_MAX - 2, WIDTH_MAX + 2),
    st.integers(10**9, 10**30),
).map(str)
SPECS = st.builds(
    lambda fill, align, width, precision, kind, tail: fill
    + align
    + width
    + precision
    + kind
    + tail,
    st.sampled_from(["", "x", "0", "{"]),
    st.sampled_from(["", "<", ">", "^", "="]),
    st.one_of(st.just(""), NUMBERS),
    st.one_of(st.just(""), NUMBERS.map(lambda n: "." + n)),
    st.sampled_from(["", "s", "d", "f", "x", "%", "h", "+", "%H::"]),
    st.sampled_from(["", "h", "+", "}", "{id}"]),
)
FIELD_TEXTS = st.builds(
    lambda prefix, field, conv, spec: prefix
    + "{"
    + field
    + conv
    + (":" + spec if spec else "")
    + "}",
    st.sampled_from(["", "+:", "?:", "?+:", " ", "sort:id "]),
    st.sampled_from(FIELDS) | st.text(max_size=4),
    CONVERSIONS,
    SPECS,
)
FORMATS = st.lists(FIELD_TEXTS | st.text(max_size=3), min_size=1, max_size=4).map(
    "".join
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(FORMATS)
@example("\n{active}")  # a hold of two lines
def test_any_format_shows_the_holds_or_is_a_usage_error_with_a_reason(
    inst, capsys, fmt
):
    status, out, err = run_list(capsys, fmt)
    if status == 0:
        # A header and two holds at most (a line that formats blank is
        # left out), each as many lines as the format has; only "\n" ends
        # a line (str.splitlines() also splits at the format's own "\x85"
        # and others).
        assert out.count("\n") <= 3 * (fmt.count("\n") + 1)
    else:
        assert status == EXIT_USAGE, (status, err)
        # argparse's "PROG list: error: REASON"
        reason = err.rsplit("error: ", 1)[-1].strip()
        assert reason, err
