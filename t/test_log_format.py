"""The hold log says its format, and the package its version, under a
real broker (gate/logparse.py, FORMAT; gate/loader.py).

A log of a newer format than this build reads is refused: the instance
starts, the error (naming both formats) is logged and shown in the
query, no hold is taken, and the log is left as it is, so that the build
that wrote it, loaded again, finds every hold.
"""

import json
import os
import subprocess
import sys

import pytest
from jobs import dmesg, hold_log, query, submit

from flux_epilog_gate import EpilogGate, __version__
from flux_epilog_gate.gate.holdlog import KEY
from flux_epilog_gate.gate.logparse import FORMAT, FORMAT_EVENT

NEWER = FORMAT + 1


def test_the_command_and_the_query_say_the_version(instance):
    command = os.path.join(os.path.dirname(sys.executable), "flux-epilog-gate")
    done = subprocess.run(
        [command, "--version"], env=instance.env, capture_output=True, text=True
    )
    assert done.returncode == 0
    assert (
        done.stdout.split() == ["flux-epilog-gate", "0.2.0"] and __version__ == "0.2.0"
    )
    answer = query(instance)
    assert (answer["version"], answer["log_format"]) == ("0.2.0", FORMAT)
    assert answer["log_error"] is None


@pytest.fixture
def inst(new_instance):
    return new_instance()


def restart(inst):
    inst.stop()
    inst.start()
    return EpilogGate(inst.handle())


def put_log(inst, text):
    inst.flux("jobtap", "remove", "epilog-gate.so")
    inst.flux("kvs", "put", "--raw", f"{KEY}=-", input=text)


def test_a_log_of_a_newer_format_is_left_as_it_is(inst):
    gate = EpilogGate(inst.handle())
    jobid = submit(inst.handle(), urgency=0)
    gate.hold(jobid, "bb")
    newer = json.dumps(
        {"timestamp": 1.7e9, "name": FORMAT_EVENT, "context": {"version": NEWER}}
    )
    written = newer + "\n" + hold_log(inst)
    put_log(inst, written)
    stored = hold_log(inst)

    gate = restart(inst)
    answer = query(inst)
    assert f"format {NEWER}, newer" in answer["log_error"]
    assert f"reads ({FORMAT})" in answer["log_error"]
    assert dmesg(inst, f"is of format {NEWER}, newer than this build")
    assert gate.list() == []
    with pytest.raises(OSError, match=f"format {NEWER}"):
        gate.hold(jobid, "other")
    assert hold_log(inst) == stored

    # The hold is still there for a build that reads the log.
    put_log(inst, written.split("\n", 1)[1])
    gate = restart(inst)
    assert [(h["id"], h["description"]) for h in gate.list()] == [(jobid, "bb")]
    assert query(inst)["log_error"] is None
    gate.release(jobid, "bb")


def test_dws_alone_says_the_log_was_refused(dws_so, new_instance):
    # dws.so alone drives the gate: its query must say what the gate's
    # would, or an admin with only dws.so loaded never learns of it.
    inst = new_instance(plugin=dws_so)
    answer = json.loads(inst.flux("jobtap", "query", "dws.so").stdout)
    assert (answer["version"], answer["log_format"]) == (__version__, FORMAT)
    assert answer["log_error"] is None
    newer = json.dumps(
        {"timestamp": 1.7e9, "name": FORMAT_EVENT, "context": {"version": NEWER}}
    )
    inst.flux("kvs", "put", "--raw", f"{KEY}=-", input=newer + "\n")
    inst.stop()
    inst.start()
    answer = json.loads(inst.flux("jobtap", "query", "dws.so").stdout)
    assert f"format {NEWER}, newer" in answer["log_error"]
