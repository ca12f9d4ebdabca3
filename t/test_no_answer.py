"""A request the broker never answers is an error of its own, never an
answer: the broker is stopped (SIGSTOP) with requests in flight, then
killed.

libflux fails a waiting get() with a stale errno (ENOENT, "unknown job" to
a reader of the gate's docs) and never calls a then() callback back, so
wait_all() used to answer None (success) and hold() ENOENT.  Every client
call must now raise (or give) NoAnswerError, errno EHOSTUNREACH, and the
command line exit 3 with a message and no traceback.
"""

import errno
import os
import signal
import subprocess
import sys
import time

import flux.job
import pytest
from jobs import held_waiting, submit, wait_event

from flux_epilog_gate import EpilogGate, NoAnswerError
from flux_epilog_gate.testing import Instance

#: The command line, run by the tests' interpreter from "/" (so that the
#: installed package is imported), on a handle opened before the broker
#: was stopped: connecting needs a broker that answers, sending does not.
CLI_ON_OPEN_HANDLE = """
import sys
import flux
from flux_epilog_gate.client import cli
handle = flux.Flux()
flux.Flux = lambda *args, **kwargs: handle
print("ready", flush=True)
sys.stdin.readline()
cli.main(sys.argv[1:])
"""

CLI = [
    sys.executable,
    "-c",
    "import sys; from flux_epilog_gate.client.cli import main; sys.exit(main())",
]


def broker_pid(inst):
    return int(inst.flux("getattr", "broker.pid").stdout)


def active_hold(handle, gate, description):
    jobid = submit(handle, urgency=0)
    gate.hold(jobid, description)
    flux.job.cancel(handle, jobid)
    wait_event(handle, jobid, "epilog-start")
    return jobid


def outcome(call):
    """What ``call()`` returned, or the exception it raised."""
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - the outcome is examined
        return exc


@pytest.fixture(scope="module")
def lost(plugin):
    """Run every kind of request into a broker that stops, then dies;
    return what each one ended with."""
    inst = Instance(cores=8, plugin=plugin)
    inst.start()
    try:
        yield lose_broker(inst)
    finally:
        inst.kill()
        inst.cleanup()


def lose_broker(inst):
    handle = inst.handle()
    gate = EpilogGate(handle)
    held = held_waiting(handle, gate, 4)
    active = active_hold(handle, gate, "watched")
    found = {}

    # Watches, each past its first answer: the stream is live.
    cli_watch = subprocess.Popen(
        CLI + ["watch", "watched"],
        env=inst.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    assert cli_watch.stdout.readline().split()[1] == "watched"
    watch = gate.watch(["watched"])
    assert next(watch)["id"] == active

    commands = {
        "hold": ["hold", str(held[0]), "other"],
        "release": ["release", str(held[0]), str(held[1]), "bb"],
        "list-jobs": ["list", str(held[0]), str(held[1])],
        "list": ["list"],
    }
    clis = {
        name: subprocess.Popen(
            [sys.executable, "-c", CLI_ON_OPEN_HANDLE, *argv],
            env=inst.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd="/",
        )
        for name, argv in commands.items()
    }
    for proc in clis.values():
        assert proc.stdout.readline() == "ready\n"

    pid = broker_pid(inst)
    os.kill(pid, signal.SIGSTOP)
    try:
        for proc in clis.values():
            proc.stdin.write("go\n")
            proc.stdin.flush()
        releases = [gate.release_async(jobid, "bb") for jobid in held[2:]]
        hold = gate.hold_async(held[3], "more")
        listing = gate.list_async(held[3])
        time.sleep(2)  # the commands send their requests
    finally:
        os.kill(pid, signal.SIGKILL)  # stopped or not

    found["wait_all"] = outcome(lambda: gate.wait_all(releases))
    found["hold"] = outcome(hold.get)
    found["list"] = outcome(listing.get)
    found["watch"] = outcome(lambda: next(watch))
    found["after-hold"] = outcome(lambda: gate.hold(held[3], "late"))
    found["after-release_many"] = outcome(lambda: gate.release_many([(held[3], "bb")]))
    clis["watch"] = cli_watch
    for name, proc in clis.items():
        out, err = proc.communicate(timeout=120)
        found[f"cli-{name}"] = (proc.returncode, out, err)
    return found


def assert_no_answer(error, method):
    assert isinstance(error, NoAnswerError), repr(error)
    assert isinstance(error, OSError)
    assert error.errno == errno.EHOSTUNREACH != errno.ENOENT
    assert error.strerror.startswith(f"{method}: no answer from the epilog gate")
    assert "broker" in error.strerror


def test_wait_all_gives_no_answer_errors_not_results(lost):
    answers = lost["wait_all"]
    assert isinstance(answers, list) and len(answers) == 2
    for answer in answers:
        assert_no_answer(answer, "release")


def test_hold_without_answer_raises_no_answer_not_enoent(lost):
    assert_no_answer(lost["hold"], "hold")


def test_list_without_answer_raises_no_answer(lost):
    assert_no_answer(lost["list"], "list")


def test_watch_ends_with_no_answer_when_the_broker_dies(lost):
    assert_no_answer(lost["watch"], "watch")


def test_requests_after_the_loss_raise_no_answer(lost):
    assert_no_answer(lost["after-hold"], "hold")
    assert_no_answer(lost["after-release_many"], "release")


@pytest.mark.parametrize("command", ["hold", "release", "list-jobs", "list", "watch"])
def test_cli_without_answer_exits_3_and_says_so(lost, command):
    returncode, out, err = lost[f"cli-{command}"]
    assert returncode == 3, (out, err)
    assert "no answer from the epilog gate" in err and "broker" in err, err
    assert "Traceback" not in err
    if command != "watch":
        assert out == ""  # nothing printed as if answered
