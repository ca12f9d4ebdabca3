"""dws.so's ``epilog-timeout``: a number of seconds or a Flux Standard
Duration; any other value never keeps an instance from starting (the
plugin loads without a timeout and says why), and is refused by a load
into a running instance.  Real instances, with t/dws_service.py."""

import errno
import json
import math

import pytest
from dwsfake import DW
from flux.util import parse_fsd
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from jobs import described, dmesg, submit, wait_event
from jsonstrategies import ANY_JSON, SCALARS

from flux_epilog_gate.dws.config import epilog_timeout
from flux_epilog_gate.gate.config import ConfigError, shown
from flux_epilog_gate.paths import plugin_path
from flux_epilog_gate.testing import Instance

DWS_SO = plugin_path("dws")

#: Texts of durations, good and bad: units, exponents and signs.
DURATION_TEXTS = st.from_regex(
    r"-?[0-9]{0,4}(\.[0-9]{0,3})?([eE][-+]?[0-9]{1,3})?(ms|s|m|h|d|x)?",
    fullmatch=True,
)
#: And what float() alone would read (spaces, "_", other scripts' digits).
TEXTS = DURATION_TEXTS | st.sampled_from(
    ["10m", "3600", "1h", "1.5h", "0", "0s", "inf", "nan", "-1", "10 m", "1_0", "٣"]
)
VALUES = TEXTS | SCALARS | ANY_JSON


def query_dws(inst):
    return json.loads(inst.flux("jobtap", "query", "dws.so").stdout)


def loaded(inst):
    return "dws.so" in inst.flux("jobtap", "list").stdout.split()


def error_lines(inst, text):
    return [line for line in dmesg(inst, text) if ".err[" in line]


# The reading of a value, alone


@given(VALUES)
def test_a_value_is_seconds_or_an_error_naming_key_and_value(value):
    try:
        seconds = epilog_timeout({"epilog-timeout": value})
    except ConfigError as exc:
        assert str(exc).startswith(f"epilog-timeout: {shown(value)} ")
        return
    assert isinstance(seconds, float) and math.isfinite(seconds)
    assert not isinstance(value, bool)
    if isinstance(value, str):
        assert seconds >= 0
        try:
            expected = parse_fsd(value)
        except OverflowError:
            # Past its timedelta's range (1e17 s): ours is a float.
            return
        # What flux-core's own reader makes of the same text (to the
        # microsecond, which it rounds to).
        assert seconds == pytest.approx(expected, abs=1e-6)
    else:
        assert seconds == float(value)


@given(DURATION_TEXTS)
def test_every_ascii_duration_flux_reads_is_taken(text):
    try:
        expected = parse_fsd(text)
    except (ValueError, OverflowError):
        return
    # Its reader rounds to the microsecond: a text less than half of one
    # below 0 reads as 0.
    if math.isfinite(expected) and not text.startswith("-"):
        seconds = epilog_timeout({"epilog-timeout": text})
        assert seconds == pytest.approx(expected, abs=1e-6)


def test_no_option_is_no_timeout():
    assert epilog_timeout({}) == 0.0


# Loads into a running instance


@pytest.fixture(scope="module")
def running():
    """An instance that started with ``epilog-timeout = "10m"`` in the
    ``conf`` of its ``[job-manager] plugins`` entry."""
    conf = {"epilog-timeout": "10m"}
    with Instance(cores=8, plugin=DWS_SO, plugin_conf=conf) as inst:
        yield inst


class Jobtap:
    """The job-manager's jobtap requests, as ``flux jobtap`` sends them
    (a command would cost half a second each)."""

    def __init__(self, handle):
        self.rpc = lambda topic, payload: handle.rpc(topic, payload).get()

    def load(self, value):
        """Load dws.so with ``epilog-timeout`` = ``value`` (sent as JSON,
        as ``flux jobtap load`` sends what it reads as JSON); the error of
        a refused load, or None."""
        request = {"load": DWS_SO, "conf": {"epilog-timeout": value}}
        try:
            self.rpc("job-manager.jobtap", request)
        except OSError as exc:
            return exc
        return None

    def remove(self):
        self.rpc("job-manager.jobtap", {"remove": "dws.so"})

    def loaded(self):
        plugins = self.rpc("job-manager.jobtap", {"query_only": True})["plugins"]
        return "dws.so" in plugins

    def query(self):
        return self.rpc("job-manager.jobtap-query", {"name": "dws.so"})


@pytest.fixture(scope="module")
def jobtap(running):
    return Jobtap(running.handle())


def jansson_reads(value):
    """False if ``value`` holds what flux-core's JSON reader refuses
    (EPROTO) before the plugin sees it: an integer past 64 bits, a NUL
    in a string."""
    if isinstance(value, bool) or value is None:
        return True
    if isinstance(value, int):
        return -(2**63) <= value < 2**63
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return "\x00" not in value
    if isinstance(value, list):
        return all(map(jansson_reads, value))
    return all(map(jansson_reads, [*value, *value.values()]))


def test_a_duration_text_in_the_config_is_taken(running):
    answer = query_dws(running)
    assert (answer["epilog-timeout"], answer["config_error"]) == (600.0, None)
    assert dmesg(running, "dws: epilog timeout = 600.000s")


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(VALUES.filter(jansson_reads))
# Its refusal is exactly 160 bytes long.
@example({"𐀀": None, "": {"\x1f\x80\x80𐀀𐀀𐀀": None, "\x80\x80\x80𐀀": "ࠀ𐀀", "": None}})
def test_a_load_takes_a_good_value_and_refuses_a_bad_one_naming_it(jobtap, value):
    """Loads into a running instance.  NaN and infinities have no JSON:
    they come from TOML only."""
    jobtap.remove()
    try:
        expected = epilog_timeout({"epilog-timeout": value})
    except ConfigError as exc:
        error = jobtap.load(value)
        assert error is not None and error.errno == errno.EINVAL
        # The job-manager keeps 159 bytes of a message (flux_error_t) and
        # marks one it cut with a "+", but one of exactly 160 bytes loses
        # its last byte unmarked (flux-core's verrprintf tests n > 160).
        text, full = error.strerror, f"dws: {exc}".encode()
        if len(full) < 160:
            assert text.encode() == full, text
        elif len(full) == 160:
            assert text.encode() == full[:159], text
        else:
            assert text.endswith("+"), text
        assert text.startswith("dws: epilog-timeout: ")
        assert not jobtap.loaded()
    else:
        assert jobtap.load(value) is None
        answer = jobtap.query()
        assert answer["epilog-timeout"] == expected and answer["config_error"] is None
    finally:
        if not jobtap.loaded():
            jobtap.load("10m")


@pytest.mark.parametrize(
    "option, shown_value",
    [("epilog-timeout=true", "true"), ("epilog-timeout=1 h", "'1 h'")],
)
def test_a_bad_value_on_the_command_line_is_refused_naming_it(
    running, option, shown_value
):
    running.flux("jobtap", "remove", "dws.so")
    try:
        result = running.flux("jobtap", "load", DWS_SO, option, check=False)
        assert result.returncode != 0
        assert f"dws: epilog-timeout: {shown_value} is not" in result.stderr
        assert not loaded(running)
    finally:
        running.flux("jobtap", "load", DWS_SO, "epilog-timeout=10m")


# Instances that start with a bad value


def test_an_instance_starts_and_restarts_with_held_jobs_despite_a_bad_value(
    new_instance, dws
):
    """It used to fail the job-manager's load of the plugin, and the
    instance with it."""
    inst = new_instance(cores=8, plugin=DWS_SO, plugin_conf={"epilog-timeout": True})
    assert loaded(inst)
    answer = query_dws(inst)
    assert answer["epilog-timeout"] == 0.0
    assert answer["config_error"].startswith("epilog-timeout: true is not ")
    assert len(error_lines(inst, "epilog-timeout: true")) == 1
    assert dmesg(inst, "dws: epilog timeout = 0.000s")

    h = inst.handle()
    dws(inst, "--create-hang")
    jobid = submit(h, duration=0.1, **DW)
    wait_event(h, jobid, "dependency-add", match=described("dws-create"))
    inst.stop()
    inst.plugin_conf = {"epilog-timeout": "3600 s"}
    inst.start()
    answer = query_dws(inst)
    assert answer["config_error"].startswith("epilog-timeout: '3600 s' is not ")
    holds = inst.handle().rpc("job-manager.dws.list", {"id": jobid}).get()["holds"]
    assert [(h["description"], h["state"]) for h in holds] == [
        ("dws-create", "active"),
        ("dws-epilog", "pending"),
        ("dws-setup", "pending"),
    ]


RC1_TASK = """
from flux.modprobe import task


@task("load-dws", ranks="0", after=["job-manager"], before=["job-exec"])
def load_dws(context):
    context.bash("flux jobtap load {plugin} epilog-timeout=yes")
"""


def test_an_instance_whose_rc1_loads_a_bad_value_starts(new_instance, tmp_path):
    """A failed ``flux jobtap load`` in rc1 fails rc1, and the instance."""
    modprobe = tmp_path / "modprobe"
    (modprobe / "rc1.d").mkdir(parents=True)
    (modprobe / "rc1.d" / "dws.py").write_text(RC1_TASK.format(plugin=DWS_SO))
    inst = new_instance(
        cores=None, plugin=None, env={"FLUX_MODPROBE_PATH_APPEND": str(modprobe)}
    )
    assert loaded(inst)
    assert query_dws(inst)["config_error"].startswith("epilog-timeout: 'yes' ")
    assert error_lines(inst, "epilog-timeout: 'yes'")
