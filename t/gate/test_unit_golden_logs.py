"""The hold log's formats (gate/logparse.py, FORMAT), no broker: logs the
project wrote before the log said its format still load; the log now
says its format, and a log of a newer format is refused, left as it is.

The golden logs (t/data/holdlog-format1-*.json, written by
t/data/make_golden_holdlogs.py with the build of 0.1.0) are one of each
shape format 1 took: appends only, with segments, a snapshot written in
parts and swapped in.
"""

import errno
import json
import os
import syslog

import pytest

from flux_epilog_gate.errors import GateError
from flux_epilog_gate.gate import SCHED
from flux_epilog_gate.gate.holdlog import KEY, parse
from flux_epilog_gate.gate.logparse import FORMAT, FORMAT_EVENT

from .unitgate import USER, load, replayed

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
GOLDEN = ("appends", "segments", "parts")


def golden(port, name):
    """Put golden log ``name`` in the port's KVS, with its jobs waiting;
    the holds it leaves, as ``{(id, description)}``."""
    with open(os.path.join(DATA, f"holdlog-format1-{name}.json")) as f:
        data = json.load(f)
    port.kvs.update(data["kvs"])
    for jobid in data["pending"]:
        port.add_job(int(jobid), SCHED, USER)
    return {
        (int(jobid), description)
        for jobid, descriptions in data["pending"].items()
        for description in descriptions
    }


def holds(gate):
    return {(jobid, d) for jobid, job in gate.jobs.items() for d in job.holds}


def formats(text):
    found = []
    parse(text, found)
    return found


def errors(port):
    return [text for level, text in port.logs if level == syslog.LOG_ERR]


@pytest.mark.parametrize("name", GOLDEN)
def test_a_log_of_format_1_loads_and_is_written_on_in_format_2(port, name):
    expected = golden(port, name)
    assert not formats(port.hold_log())
    _, gate = load(port)
    assert holds(gate) == expected and not errors(port)
    # Appended to as it is; its next snapshot says its format.
    gate.hold(min(j for j, _ in expected), "new")
    assert replayed(port.hold_log()) == holds(gate)
    answers = []
    gate.holdlog.compact(answers.append)
    assert answers == [None]
    assert formats(port.hold_log()) == [FORMAT]
    assert json.loads(port.kvs[KEY].splitlines()[0])["name"] == FORMAT_EVENT
    _, again = load(port)
    assert holds(again) == holds(gate)


def test_a_log_begun_anew_says_its_format(port):
    port.add_job(7, SCHED, USER)
    _, gate = load(port)
    gate.hold(7, "bb")
    assert formats(port.kvs[KEY]) == [FORMAT]
    assert replayed(port.hold_log()) == {(7, "bb")}


@pytest.mark.parametrize("name", GOLDEN)
def test_a_log_of_a_newer_format_is_refused_and_left_as_it_is(port, name):
    golden(port, name)
    newer = json.dumps(
        {"timestamp": 1.7e9, "name": FORMAT_EVENT, "context": {"version": FORMAT + 1}}
    )
    port.kvs[KEY] = newer + "\n" + port.kvs[KEY]
    before = dict(port.kvs)
    _, gate = load(port)
    assert holds(gate) == set()
    [error] = errors(port)
    assert f"format {FORMAT + 1}, newer" in error and f"reads ({FORMAT})" in error
    answers = []
    # A hold is refused before it is placed (no event posted for it).
    with pytest.raises(GateError, match=f"format {FORMAT + 1}") as refused:
        gate.hold(min(port.jobs), "new", done=lambda hold, err: answers.append(err))
    assert refused.value.errnum == errno.EPROTO
    gate.holdlog.compact(answers.append)
    port.advance(1.0)
    assert [a.errno for a in answers] == [errno.EPROTO]
    assert f"format {FORMAT + 1}" in str(answers[0])
    assert holds(gate) == set()
    assert port.kvs == before and not port.commits and not port.txns
